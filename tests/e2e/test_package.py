"""The Debian packages, made as scripts/package.sh makes them (`cpack -G DEB` in the build): lintian
finds no error in either; their fields and files are what Debian expects (Depends computed by
dpkg-shlibdeps, the man page gzip'd, copyright and changelog); and the demo job runs from the files
of both packages unpacked with `dpkg -x` into a scratch root: the packaged ddprun launching the
packaged trainer on 2 CPU ranks, which ends with the checksum of the build's --reference run."""
import gzip
import os
import re
import shutil
import subprocess

import pytest
from conftest import BUILD, SOURCE, base_env
from installlib import check_run, run_two_ranks
from trainlib import reference

VERSION_RE = r"\d+\.\d+\.\d+-\d+"


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    """{package name: path of its .deb}, made once for every test here."""
    missing = [t for t in ("cpack", "dpkg-deb", "dpkg-shlibdeps", "lintian") if not shutil.which(t)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/setup.sh installs them)")
    out = tmp_path_factory.mktemp("debs")
    check_run(["cpack", "-G", "DEB", "--config", BUILD / "CPackConfig.cmake", "-B", out],
              cwd=BUILD, timeout=300)
    made = {check_run(["dpkg-deb", "-f", d, "Package"], timeout=30).stdout.strip(): d
            for d in out.glob("*.deb")}
    assert sorted(made) == ["ddprun", "libddprun-ddp-dev"], made
    return made


@pytest.fixture(scope="module")
def root(debs, tmp_path_factory):
    """Both packages unpacked into one scratch root (what `apt-get install` would put in /)."""
    r = tmp_path_factory.mktemp("root")
    for deb in debs.values():
        check_run(["dpkg", "-x", deb, r], timeout=60)
    return r


def field(deb, name):
    return check_run(["dpkg-deb", "-f", deb, name], timeout=30).stdout.strip()


def test_file_names_say_package_version_and_architecture(debs):
    arch = check_run(["dpkg", "--print-architecture"], timeout=10).stdout.strip()
    for name, deb in debs.items():
        assert re.fullmatch(rf"{name}_{VERSION_RE}_{arch}\.deb", deb.name), deb.name
        assert field(deb, "Version") in deb.name


def test_lintian_finds_no_error(debs):
    r = subprocess.run(["lintian", "--no-cfg", *map(str, debs.values())], capture_output=True,
                       text=True, timeout=240)
    errors = [line for line in r.stdout.splitlines() if line.startswith("E:")]
    assert not errors, r.stdout + r.stderr
    complaints = [line for line in r.stderr.splitlines() if "root privileges" not in line]
    assert not complaints, r.stderr  # lintian itself ran cleanly


def test_fields_are_what_debian_expects(debs):
    ddprun, dev = debs["ddprun"], debs["libddprun-ddp-dev"]
    depends = field(ddprun, "Depends")
    for library in ("libc6", "libstdc++6", "libuv1", "libgloo0"):  # from dpkg-shlibdeps
        assert re.search(rf"\b{re.escape(library)}\b", depends), depends
    assert field(ddprun, "Section") == "science"
    # What it runs besides its libraries (attack 105: none was declared).
    assert field(ddprun, "Recommends") == "elfutils | gdb, python3"
    assert field(ddprun, "Suggests") == "slurm-client"
    assert field(dev, "Section") == "libdevel"
    assert "libgloo-dev" in field(dev, "Depends")
    assert field(dev, "Source") == "ddprun"
    for deb in (ddprun, dev):
        assert re.fullmatch(r"[^<>]+ <[^@\s]+@[^>\s]+>", field(deb, "Maintainer"))
        assert field(deb, "Homepage").startswith("https://")
        assert len(field(deb, "Description").splitlines()) > 2  # a synopsis and a long description


def test_docs_man_page_and_changelog_are_in_place(debs, root):
    version = field(debs["ddprun"], "Version")
    for name in debs:
        doc = root / "usr" / "share" / "doc" / name
        assert "Copyright" in (doc / "copyright").read_text()
        changelog = gzip.decompress((doc / "changelog.Debian.gz").read_bytes()).decode()
        assert changelog.startswith(f"ddprun ({version}) "), changelog.splitlines()[0]
    man = gzip.decompress((root / "usr/share/man/man1/ddprun.1.gz").read_bytes())
    assert man == (SOURCE / "man" / "ddprun.1").read_bytes()
    assert (root / "usr/share/doc/ddprun/README.md").exists()


def test_dev_package_is_found_at_usr(root):
    pcs = list(root.glob("usr/lib/*/pkgconfig/ddprun-ddp.pc"))
    assert len(pcs) == 1, pcs
    # The prefix is found from where the file lies: /usr once installed, the unpacked tree here.
    env = base_env(PKG_CONFIG_PATH=str(pcs[0].parent))
    cflags = check_run(["pkg-config", "--cflags", "ddprun-ddp"], env=env, timeout=30).stdout
    include = next(a[2:] for a in cflags.split() if a.startswith("-I"))
    assert os.path.samefile(include, root / "usr/include/ddprun"), cflags
    # Debian's zsh reads vendor-completions under /usr.
    assert (root / "usr/share/zsh/vendor-completions/_ddprun").is_file()
    assert list(root.glob("usr/lib/*/libddprun_ddp.a"))
    assert list(root.glob("usr/lib/*/cmake/ddprun/ddprunConfig.cmake"))
    assert (root / "usr/include/ddprun/ddp/reducer.hpp").exists()
    assert not list(root.glob("usr/include/ddprun/ddp/gloo_*"))


def test_demo_job_runs_from_the_unpacked_package(root):
    ddprun = root / "usr" / "bin" / "ddprun"
    train = root / "usr" / "libexec" / "ddprun" / "train"
    plugin = train.with_name("libddprun_train_cuda.so")  # in a build with CUDA
    for program in (ddprun, train, *([plugin] if plugin.exists() else [])):
        dynamic = check_run(["readelf", "-d", program], timeout=10).stdout
        assert "RPATH" not in dynamic and "RUNPATH" not in dynamic, dynamic
    # scripts/demo.sh's job, on 2 ranks.
    checksum = run_two_ranks(ddprun, [train, "--device", "cpu"])
    assert checksum == pytest.approx(reference(2), rel=1e-6)


def test_installed_trainer_needs_no_file_of_the_build(root):
    r = check_run([root / "usr/libexec/ddprun/train", "--help"], env=base_env(), timeout=10)
    assert "--device" in r.stdout
    ldd = check_run(["ldd", root / "usr/bin/ddprun"], timeout=10).stdout
    assert str(BUILD) not in ldd and "not found" not in ldd, ldd
