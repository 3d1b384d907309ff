#!/usr/bin/env bash
# Configures and builds ddprun into build/ (or $DDPRUN_BUILD_DIR); arguments go to cmake's
# configure step, e.g. scripts/build.sh -DDDPRUN_CUDA=OFF (a CPU-only build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${DDPRUN_BUILD_DIR:-build}"
launcher=()
# ccache, where installed, makes rebuilds in several work trees cheap; nothing needs it.
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
export CCACHE_BASEDIR="$PWD"  # paths relative to the tree: work trees share hits
cmake -S . -B "$BUILD" "${launcher[@]}" -DCMAKE_BUILD_TYPE="${DDPRUN_BUILD_TYPE:-RelWithDebInfo}" \
  -DDDPRUN_PYTHON="${DDPRUN_VENV:-$HOME/.cache/ddprun/venv}/bin/python" "$@" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
