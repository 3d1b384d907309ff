# Debian packages (scripts/package.sh, or `cpack -G DEB` in the build directory), split as a Debian
# maintainer would: `ddprun` (the launcher, its man page, docs and the reference trainer) for
# everyone who runs jobs, `libddprun-ddp-dev` (static library, headers, CMake and pkg-config
# files) only for those who build C++ workers; a static library needs no runtime package.
set(DDPRUN_MAINTAINER "ddprun maintainers <maintainers@users.noreply.a-seed-96e77959.example>"
    CACHE STRING "Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${DDPRUN_MAINTAINER})
set(CPACK_PACKAGE_HOMEPAGE_URL ${DDPRUN_HOMEPAGE})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # the programs, and the archive's debug sections (install.cmake)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Each package is a group of two components: the files of a plain install (runtime, dev) and
# Debian's own files for it (runtime_debian, dev_debian: copyright, changelog, lintian override),
# which no `cmake --install`, even of one component, puts under a prefix.
set(CPACK_COMPONENTS_ALL runtime runtime_debian dev dev_debian)
set(CPACK_COMPONENT_RUNTIME_GROUP runtime)
set(CPACK_COMPONENT_RUNTIME_DEBIAN_GROUP runtime)
set(CPACK_COMPONENT_DEV_GROUP dev)
set(CPACK_COMPONENT_DEV_DEBIAN_GROUP dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>-<release>_<arch>.deb
# The revision of packaging/debian/changelog's first entry (test_package.py checks they agree).
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SOURCE ddprun)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # dpkg-shlibdeps computes Depends from the binaries

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ddprun)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION science)
# What ddprun runs besides its libraries (attack 105: none was declared): a hang dump's native
# stacks (eu-stack, else gdb), .py workers (python3), a Slurm step's own addresses (scontrol).
# py-spy, for Python stacks, is not a Debian package: pip install py-spy.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "elfutils | gdb, python3")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "slurm-client")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "launcher and supervisor for distributed PyTorch training
ddprun is a drop-in replacement for PyTorch's torchrun, written in C++: the
same options, worker environment and log layout, with exit codes of the root
cause, no orphaned processes, hang detection with stack dumps, elastic and
Slurm rendezvous on its own TCPStore-compatible store.
This package also holds the reference trainer of ddprun's DDP core,
/usr/libexec/ddprun/train, which ddprun can launch on CPUs (Gloo).")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libddprun-ddp-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)  # a static library: nothing to scan
# A worker's link needs Gloo's library and CMake package; it runs under ddprun.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libgloo-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "ddprun (= ${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE})")
set(CPACK_DEBIAN_DEV_DESCRIPTION "DDP core of ddprun for C++ training workers
A static library for C++ programs that ddprun launches: a process group from
ddprun's environment (Gloo on CPUs, NCCL on GPUs when built with CUDA) with
collective timeouts, a bucketed gradient reducer that overlaps all-reduce with
backward, a gradient scaler and a flight recorder. With its headers, a CMake
package (find_package(ddprun), target ddprun::ddp) and ddprun-ddp.pc.")

# Debian's per-package files (EXCLUDE_FROM_ALL: not in a plain install).
ddprun_gzip(ddprun_changelog_gz ${CMAKE_SOURCE_DIR}/packaging/debian/changelog
            ${CMAKE_BINARY_DIR}/packaging/changelog.Debian.gz)
foreach(group runtime dev)
  string(TOUPPER ${group} upper)
  install(FILES packaging/debian/copyright ${CMAKE_BINARY_DIR}/packaging/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME}
          COMPONENT ${group}_debian EXCLUDE_FROM_ALL)
endforeach()
# lintian's one false alarm on ddprun, explained in the file.
install(FILES packaging/debian/ddprun.lintian-overrides RENAME ddprun
        DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
        COMPONENT runtime_debian EXCLUDE_FROM_ALL)

include(CPack)
