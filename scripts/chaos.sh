#!/usr/bin/env bash
# The chaos suite (tests/chaos/chaos.py) against build/ddprun: randomized elastic c10d jobs of
# 2-3 agents on 127.0.0.1-3 with injected faults (SIGKILL/SIGSTOP of workers and agents).
#   scripts/chaos.sh [BUDGET_SECONDS [chaos.py options...]]   (budget: 300 by default)
# e.g. scripts/chaos.sh 600 --seed 1000 --report /tmp/chaos.json
#      scripts/chaos.sh 120 --seed 1006 --rounds 1 -v          (rerun one round)
# Environment: DDPRUN_BUILD_DIR (build), DDPRUN_VENV (~/.cache/ddprun/venv).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${DDPRUN_BUILD_DIR:-build}"
PY="${DDPRUN_VENV:-$HOME/.cache/ddprun/venv}/bin/python"
[ -x "$PY" ] || PY=python3
BUDGET="${1:-300}"
[ $# -gt 0 ] && shift
exec "$PY" tests/chaos/chaos.py --ddprun "$BUILD/ddprun" --train "$BUILD/examples/train" \
  --budget "$BUDGET" "$@"
