#!/usr/bin/env bash
# The README's main job: installs, builds, and has ddprun launch the example
# worker with 4 processes on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-python
scripts/build.sh
exec build/ddprun --nproc_per_node=4 build/examples/hello_worker
