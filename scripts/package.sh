#!/usr/bin/env bash
# Builds, then makes the Debian packages from the build (packaging/deb.cmake) in build/ (or
# $DDPRUN_BUILD_DIR): ddprun_<version>-<revision>_<arch>.deb (the launcher, man page, docs and
# the reference trainer) and libddprun-ddp-dev_..._<arch>.deb (the DDP core for C++ workers).
# Install them with: apt-get install ./build/ddprun_*.deb ./build/libddprun-ddp-dev_*.deb
# Arguments go to cmake (scripts/build.sh): for packages that need no NVIDIA libraries where
# CUDA is installed, DDPRUN_BUILD_DIR=build-cpu scripts/package.sh -DDDPRUN_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${DDPRUN_BUILD_DIR:-build}"
scripts/setup.sh --no-python
scripts/build.sh "$@"
cd "$BUILD"
cpack -G DEB
ls -1 "$PWD"/*.deb
