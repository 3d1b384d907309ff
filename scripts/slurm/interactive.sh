#!/bin/bash
# Inside an interactive allocation:
#   salloc -N2 --ntasks-per-node=1 -c8
#   scripts/slurm/interactive.sh ./build/examples/train
# and the same srun line works as a step of any batch script.
set -euo pipefail
if [ -z "${SLURM_JOB_ID:-}" ]; then
  echo "interactive.sh: not inside a Slurm allocation: run salloc -N2 --ntasks-per-node=1 first" >&2
  exit 2
fi
exec srun -n "$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \
  ddprun --nproc_per_node="${NPROC_PER_NODE:-2}" "$@"
