#!/usr/bin/env bash
# The README's main job: installs, builds, and has ddprun launch the reference
# trainer (examples/train, the DDP core on Gloo) with 4 processes on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-python
scripts/build.sh
exec build/ddprun --nproc_per_node=4 build/examples/train --device cpu
