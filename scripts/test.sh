#!/usr/bin/env bash
# The README's test command: installs everything, builds, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${DDPRUN_BUILD_DIR:-build}"
ctest --output-on-failure -j2 "$@"
