"""`cmake --install` of the build into a fresh prefix: the layout (ddprun, the trainer, the man page,
the docs, the DDP core's public headers and no private one, the CMake package and the pkg-config
file, with no path of this build in them), and examples/consumer, a worker of its own built against
that prefix with find_package and with pkg-config, run by the installed ddprun on 2 CPU ranks."""
import gzip
import os
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import BUILD, SOURCE, base_env
from installlib import check_run, run_two_ranks

PUBLIC_HEADERS = {
    "base/format.hpp", "base/status.hpp", "env/names.hpp", "env/trace_file.hpp",
    "ddp/error_file.hpp", "ddp/flight_recorder.hpp", "ddp/grad_scaler.hpp",
    "ddp/process_group.hpp", "ddp/reducer.hpp", "ddp/tensor.hpp",
}
CONSUMER = SOURCE / "examples" / "consumer"


def cache_value(name):
    text = (BUILD / "CMakeCache.txt").read_text()
    return re.search(rf"^{name}:\w+=(.*)$", text, re.M).group(1)


LIBDIR = cache_value("CMAKE_INSTALL_LIBDIR")  # lib/<multiarch> on Debian
BUILD_TYPE = cache_value("CMAKE_BUILD_TYPE").lower()
# train's CUDA plugin, installed beside it, in a build that found CUDA.
CUDA_PLUGIN = ({"libexec/ddprun/libddprun_train_cuda.so"}
               if (BUILD / "examples" / "libddprun_train_cuda.so").exists() else set())


def files_under(root):
    return {str(f.relative_to(root)) for f in root.rglob("*") if not f.is_dir()}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    check_run(["cmake", "--install", str(BUILD), "--prefix", str(p)], timeout=120)
    return p


def test_the_install_has_exactly_the_expected_files(prefix):
    docs = {f"share/doc/ddprun/{d.name}" for d in (SOURCE / "docs").glob("*.md")}
    docs |= {f"share/doc/ddprun/schemas/{d.name}" for d in (SOURCE / "docs/schemas").glob("*.json")}
    cmake = {f"{LIBDIR}/cmake/ddprun/{f}" for f in (
        "ddprunConfig.cmake", "ddprunConfigVersion.cmake", "ddprunTargets.cmake",
        f"ddprunTargets-{BUILD_TYPE}.cmake")}
    expected = {
        "bin/ddprun", "libexec/ddprun/train", "share/man/man1/ddprun.1.gz",
        "share/doc/ddprun/README.md", f"{LIBDIR}/libddprun_ddp.a",
        f"{LIBDIR}/pkgconfig/ddprun-ddp.pc",
        "share/bash-completion/completions/ddprun", "share/zsh/site-functions/_ddprun",
    } | docs | cmake | {f"include/ddprun/{h}" for h in PUBLIC_HEADERS} | CUDA_PLUGIN
    installed = files_under(prefix)
    assert installed == expected, (sorted(installed - expected), sorted(expected - installed))
    for program in ("bin/ddprun", "libexec/ddprun/train"):
        assert (prefix / program).stat().st_mode & 0o111, program


def test_the_runtime_and_dev_components_split_the_install(prefix, tmp_path):
    parts = {}
    for component in ("runtime", "dev"):
        parts[component] = tmp_path / component
        check_run(["cmake", "--install", BUILD, "--prefix", parts[component], "--component",
                   component], timeout=120)
    runtime, dev = files_under(parts["runtime"]), files_under(parts["dev"])
    assert not runtime & dev and runtime | dev == files_under(prefix)
    assert all(f.startswith(("include/", f"{LIBDIR}/")) for f in dev), sorted(dev)


def test_the_installed_ddprun_runs_and_its_man_page_is_gzipped_without_a_time_stamp(prefix):
    r = check_run([prefix / "bin" / "ddprun", "--version"], timeout=10)
    assert re.search(r"\d+\.\d+\.\d+", r.stdout), r.stdout
    gz = (prefix / "share/man/man1/ddprun.1.gz").read_bytes()
    assert gzip.decompress(gz) == (SOURCE / "man" / "ddprun.1").read_bytes()
    # gzip -9n, as Debian policy wants: no file name (flag 0x08), no time stamp, best compression.
    assert gz[3] & 0x08 == 0 and gz[4:8] == b"\0\0\0\0" and gz[8] == 2, gz[:10]


def test_every_public_header_compiles_alone_and_includes_only_public_ones(prefix):
    include = prefix / "include" / "ddprun"
    for header in PUBLIC_HEADERS:
        ours = re.findall(r'^#include "([^"]+)"', (include / header).read_text(), re.M)
        assert set(ours) <= PUBLIC_HEADERS, (header, ours)
    check_run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-I", include,
               *[include / h for h in sorted(PUBLIC_HEADERS)]], timeout=120)


def test_the_package_files_name_no_path_of_this_build(prefix):
    files = [*(prefix / LIBDIR / "cmake" / "ddprun").iterdir(),
             prefix / LIBDIR / "pkgconfig" / "ddprun-ddp.pc"]
    for f in files:
        text = f.read_text()
        for path in (SOURCE, BUILD):
            assert str(path) not in text, (f, path)
    pc = (prefix / LIBDIR / "pkgconfig" / "ddprun-ddp.pc").read_text()
    up = "/".join([".."] * (1 + len(LIBDIR.split("/"))))  # from <libdir>/pkgconfig
    assert f"prefix=${{pcfiledir}}/{up}\n" in pc, pc
    cmake = "\n".join(f.read_text() for f in files[:-1])
    # Every absolute path in the CMake package is computed from where it is installed.
    assert not re.findall(r'"/[^"$][^"]*"', cmake)


def build_with_cmake(prefix, tmp_path):
    build = tmp_path / "cmake-build"
    check_run(["cmake", "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
               "-DCMAKE_BUILD_TYPE=Release"], env=base_env(), timeout=120)
    assert f"ddprun_DIR:PATH={prefix}/{LIBDIR}/cmake/ddprun" in (build / "CMakeCache.txt").read_text()
    r = check_run(["cmake", "--build", build], env=base_env(), timeout=120)
    assert "warning:" not in r.stdout + r.stderr, r.stdout + r.stderr
    return build / "consumer"


def build_with_pkg_config(prefix, tmp_path):
    build = tmp_path / "pkg-config-build"
    build.mkdir()
    env = base_env(PKG_CONFIG_PATH=str(prefix / LIBDIR / "pkgconfig"))
    r = check_run(["make", "-f", CONSUMER / "Makefile"], env=env, cwd=build, timeout=120)
    assert "warning:" not in r.stdout + r.stderr, r.stdout + r.stderr
    return build / "consumer"


def test_pkg_config_finds_an_install_moved_to_a_path_with_a_space(prefix, tmp_path):
    """The .pc file names its prefix by where it lies: an install copied elsewhere (a relative
    --prefix, a container image's) is found there, spaces and all; a plain --libs (no --static)
    has what the static library needs."""
    moved = tmp_path / "moved prefix"
    shutil.copytree(prefix, moved, symlinks=True)
    env = base_env(PKG_CONFIG_PATH=str(moved / LIBDIR / "pkgconfig"))
    cflags = check_run(["pkg-config", "--cflags", "ddprun-ddp"], env=env, timeout=30).stdout
    libs = check_run(["pkg-config", "--libs", "ddprun-ddp"], env=env, timeout=30).stdout
    include = shlex.split(cflags)[0]
    assert include.startswith("-I") and os.path.samefile(include[2:], moved / "include/ddprun"), \
        cflags
    assert "-lgloo" in libs and "-lpthread" in libs, libs
    libdir = next(a[2:] for a in shlex.split(libs) if a.startswith("-L"))
    assert os.path.samefile(libdir, moved / LIBDIR), libs


def test_zsh_finds_the_completion_under_the_debian_prefix_too(tmp_path):
    """Debian's zsh reads /usr/share/zsh/vendor-completions, not site-functions: the .deb's
    prefix (/usr) installs it there (DESTDIR stands in for the root)."""
    root = tmp_path / "root"
    check_run(["cmake", "--install", str(BUILD), "--prefix", "/usr", "--component", "runtime"],
              env=base_env(DESTDIR=str(root)), timeout=120)
    assert (root / "usr/share/zsh/vendor-completions/_ddprun").is_file()
    assert not (root / "usr/share/zsh/site-functions").exists()


def test_consumer_built_both_ways_trains_alike_on_every_rank(prefix, tmp_path):
    sums = {}
    for how, build in (("cmake", build_with_cmake), ("pkg-config", build_with_pkg_config)):
        sums[how] = run_two_ranks(prefix / "bin" / "ddprun", [build(prefix, tmp_path)])
    assert sums["cmake"] == sums["pkg-config"], sums


def test_a_consumer_that_needs_a_newer_ddprun_is_refused(prefix, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    text = (CONSUMER / "CMakeLists.txt").read_text().replace("ddprun 0.1 CONFIG", "ddprun 9.0 CONFIG")
    (source / "CMakeLists.txt").write_text(text)
    (source / "main.cpp").write_text((CONSUMER / "main.cpp").read_text())
    r = subprocess.run(["cmake", "-S", source, "-B", tmp_path / "b",
                        f"-DCMAKE_PREFIX_PATH={prefix}"], env=base_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    said = " ".join(r.stderr.split())  # CMake wraps its messages
    assert 'compatible with requested version "9.0"' in said, r.stderr
    assert "ddprunConfig.cmake, version: 0.1.0" in said, r.stderr
