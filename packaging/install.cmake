# What `cmake --install <build> --prefix P` installs, in two components:
#   runtime  P/bin/ddprun, P/libexec/ddprun/train (and its CUDA plugin
#            libddprun_train_cuda.so in a build with CUDA), the man page, bash and zsh completion,
#            README.md, docs/*.md and docs/schemas/*.json;
#   dev      the DDP core for C++ workers: P/lib/<arch>/libddprun_ddp.a, its public headers under
#            P/include/ddprun, the CMake package (find_package(ddprun) -> ddprun::ddp) and the
#            pkg-config file ddprun-ddp.pc.
# scripts/package.sh makes one Debian package of each from the same rules (packaging/deb.cmake).
# The reference trainer goes to libexec/ddprun, not bin: it is a worker that ddprun runs (run
# alone it does only --reference and --help), a program for programs, which is what libexec is
# for; it stays off users' PATH (no man page owed) and keeps its name, as install(TARGETS) cannot
# rename (a renaming install(PROGRAMS) would also keep the build's RPATH).

# Multiarch library directory (lib/x86_64-linux-gnu) under every prefix, not only /usr as
# GNUInstallDirs alone chooses: the .deb and `cmake --install --prefix P` then agree, and CMake and
# pkg-config search lib/<arch> under any prefix.
if(CMAKE_LIBRARY_ARCHITECTURE AND NOT DEFINED CACHE{CMAKE_INSTALL_LIBDIR})
  set(CMAKE_INSTALL_LIBDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}" CACHE PATH
      "Object code libraries (LIBDIR)")
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(DDPRUN_HOMEPAGE "https://ddprun.example.org/" CACHE STRING
    "Homepage of the packages (.deb, .pc); a placeholder until the project has one")
set(DDPRUN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddprun)

install(TARGETS ddprun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(TARGETS train RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ddprun COMPONENT runtime)
if(DDPRUN_HAVE_CUDA)
  # train's --device cuda (examples/train/cuda_plugin.hpp): loaded from train's own directory.
  install(TARGETS ddprun_train_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ddprun
          COMPONENT runtime)
endif()
file(GLOB DDPRUN_DOCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES README.md ${DDPRUN_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
# The JSON Schemas of incident.json, the event log and doctor --json (docs/machine-reports.md).
file(GLOB DDPRUN_SCHEMAS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/schemas/*.json)
install(FILES ${DDPRUN_SCHEMAS} DESTINATION ${CMAKE_INSTALL_DOCDIR}/schemas COMPONENT runtime)

# Shell completion (made from the built ddprun by the ddprun_completion target), where
# bash-completion and zsh look for it.
install(FILES ${DDPRUN_COMPLETION_DIR}/ddprun.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ddprun
        COMPONENT runtime)
# zsh: Debian's looks in /usr/share/zsh/vendor-completions (the .deb's prefix) and not in
# /usr/share/zsh/site-functions; every zsh looks in <its prefix>/share/zsh/site-functions, as
# Debian's in /usr/local/share/zsh/site-functions. The prefix is known when installing.
install(CODE "
  if(\"\${CMAKE_INSTALL_PREFIX}\" STREQUAL \"/usr\")
    set(zsh_dir vendor-completions)
  else()
    set(zsh_dir site-functions)
  endif()
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/zsh/\${zsh_dir}\"
       TYPE FILE FILES \"${DDPRUN_COMPLETION_DIR}/_ddprun\")" COMPONENT runtime)

# The man page gzip'd (-9n: smallest, no name or time stamp, as Debian policy wants; man reads
# it everywhere). The Debian changelog is made the same way (deb.cmake).
function(ddprun_gzip target source output)
  add_custom_command(OUTPUT ${output} COMMAND gzip -9n -c ${source} > ${output}
                     DEPENDS ${source} VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${output})
endfunction()
ddprun_gzip(ddprun_man_gz ${CMAKE_SOURCE_DIR}/man/ddprun.1 ${CMAKE_BINARY_DIR}/packaging/ddprun.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/packaging/ddprun.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        COMPONENT runtime)

# The DDP core as installed: one static archive with the objects of ddp/ and of base/, env/ and
# rendezvous/ (a worker's link takes only the members it uses), so a worker links one library.
# Static, not shared: its C++ API is young (0.x) and has no stable ABI (std:: types and inline
# members in every header), so a shared library would need a new SONAME at nearly every release;
# workers are single programs that gain nothing from sharing it. The in-tree targets stay as they
# are; this one only repackages their objects, and its usage requirements repeat what
# ddprun_ddp's objects need from outside (keep the two in step).
find_package(Gloo CONFIG REQUIRED)  # Debian's libgloo-dev: the imported target `gloo`
add_library(ddprun_ddp_export STATIC
  $<TARGET_OBJECTS:ddprun_ddp> $<TARGET_OBJECTS:ddprun_rendezvous> $<TARGET_OBJECTS:ddprun_env>
  $<TARGET_OBJECTS:ddprun_base>)
set_target_properties(ddprun_ddp_export PROPERTIES
  OUTPUT_NAME ddprun_ddp EXPORT_NAME ddp LINKER_LANGUAGE CXX
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/packaging)
target_include_directories(ddprun_ddp_export INTERFACE
  $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/ddprun>)
target_compile_features(ddprun_ddp_export INTERFACE cxx_std_17)
target_link_libraries(ddprun_ddp_export PRIVATE gloo Threads::Threads)
if(DDPRUN_HAVE_CUDA)
  # NCCL as an imported target: the exported package names it, and the installed config finds
  # NCCL again on the machine that uses it (no path of this machine in the package).
  add_library(ddprun::nccl UNKNOWN IMPORTED)
  set_target_properties(ddprun::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY})
  target_link_libraries(ddprun_ddp_export PUBLIC CUDA::cudart ddprun::nccl)
  target_compile_definitions(ddprun_ddp_export PUBLIC DDPRUN_HAVE_CUDA=1)
endif()
install(TARGETS ddprun_ddp_export EXPORT ddprunTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
# A stripping install (`cmake --install --strip`, the packages) takes the archive's debug sections
# out too, as Debian's dh_strip does (60 of its 62 MB in a RelWithDebInfo build with CUDA).
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug --remove-section=.comment
      --enable-deterministic-archives
      \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:ddprun_ddp_export>\"
      COMMAND_ERROR_IS_FATAL ANY)
  endif()" COMPONENT dev)

# The public headers: those examples/train includes from ddp/ and env/, and what they include in
# turn (tests/e2e/test_install.py compiles each alone against the installed tree). The process
# group implementations (gloo_*, cuda/) and everything else stay private. Installed under
# P/include/ddprun with that directory on the include path, so a worker spells them as in this
# tree: #include "ddp/reducer.hpp".
set(DDPRUN_PUBLIC_HEADERS
  base/format.hpp base/status.hpp
  env/names.hpp env/trace_file.hpp
  ddp/error_file.hpp ddp/flight_recorder.hpp ddp/grad_scaler.hpp ddp/process_group.hpp
  ddp/reducer.hpp ddp/tensor.hpp)
foreach(header ${DDPRUN_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ddprun/${dir} COMPONENT dev)
endforeach()

# The CMake package: find_package(ddprun CONFIG REQUIRED) -> ddprun::ddp.
install(EXPORT ddprunTargets NAMESPACE ddprun:: DESTINATION ${DDPRUN_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(packaging/ddprunConfig.cmake.in
  ${CMAKE_BINARY_DIR}/packaging/ddprunConfig.cmake INSTALL_DESTINATION ${DDPRUN_CMAKE_DIR})
# 0.x: a new minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/packaging/ddprunConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/packaging/ddprunConfig.cmake
              ${CMAKE_BINARY_DIR}/packaging/ddprunConfigVersion.cmake
        DESTINATION ${DDPRUN_CMAKE_DIR} COMPONENT dev)

# The pkg-config file, ddprun-ddp.pc. Its prefix is found from where it lies
# (${pcfiledir}/../.. for lib/pkgconfig), so an install moved, or under a relative --prefix or a
# path with spaces, is found where it is. The library is static only: what its objects need goes
# under Libs (under Libs.private, a plain `pkg-config --libs` would leave them out).
set(up "..")  # from <libdir>/pkgconfig to the prefix
string(REGEX MATCHALL "[^/]+" libdir_parts "${CMAKE_INSTALL_LIBDIR}")
foreach(part IN LISTS libdir_parts)
  string(APPEND up "/..")
endforeach()
set(DDPRUN_PC_UP "${up}")
set(DDPRUN_PC_CFLAGS "")
set(DDPRUN_PC_CUDA_VARS "")
set(DDPRUN_PC_LIBS "-lgloo -lpthread")
if(DDPRUN_HAVE_CUDA)
  # CUDA and NCCL have no .pc of their own here: their directory is a variable a user can change
  # (pkg-config --define-variable=cudalibdir=DIR).
  get_filename_component(cuda_libdir ${NCCL_LIBRARY} DIRECTORY)
  set(DDPRUN_PC_CUDA_VARS "cudalibdir=${cuda_libdir}\n")
  set(DDPRUN_PC_CFLAGS " -DDDPRUN_HAVE_CUDA=1")
  string(APPEND DDPRUN_PC_LIBS " -L\${cudalibdir} -lcudart -lnccl")
endif()
configure_file(packaging/ddprun-ddp.pc.in ${CMAKE_BINARY_DIR}/packaging/ddprun-ddp.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/ddprun-ddp.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

include(packaging/deb.cmake)
