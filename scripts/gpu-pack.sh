#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on the GPU machine, which has CUDA, NCCL, PyTorch and
# python3 but no cmake, no Debian libraries and no pytest, into .gpu (ignored by git; carry it):
# the build with the shared libraries it links (the shared bundle.sh beside the checkout, ../shared),
# and pytest with its pure-Python dependencies from the venv (.gpu/py, put on PYTHONPATH by
# gpu-check.sh). Then, on the device:  . .gpu/env.sh && scripts/gpu-check.sh --prebuilt .gpu/build
#   scripts/gpu-pack.sh [BUILD_DIR]      (default: $DDPRUN_BUILD_DIR or build)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-${DDPRUN_BUILD_DIR:-build}}"
bundle=../shared/gpu/bundle.sh
[ -x "$bundle" ] || { echo "gpu-pack: $bundle not found (it comes with the workplace's shared folder)" >&2; exit 1; }
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
"$bundle" "$build" .gpu
# bundle.sh takes executables only: the trainer's CUDA plugin (dlopen'ed by train --device cuda
# from its own directory) goes beside train by hand; the libraries it needs beyond train's are
# CUDA's, cuBLAS and NCCL, which the GPU machine has.
plugin="$build/examples/libddprun_train_cuda.so"
if [ -f "$plugin" ]; then
  strip --strip-debug -o .gpu/build/examples/libddprun_train_cuda.so "$plugin"
else
  echo "gpu-pack: $plugin missing: was the build made without CUDA?" >&2
  exit 1
fi
venv="${DDPRUN_VENV:-$HOME/.cache/ddprun/venv}"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p .gpu/py
for pkg in pytest _pytest pluggy iniconfig packaging py.py; do
  if [ -e "$site/$pkg" ]; then cp -r "$site/$pkg" .gpu/py/; fi
done
find .gpu/py -name __pycache__ -prune -exec rm -rf {} +  # rebuilt there; 1.3 MB of the 64 MiB
du -sh .gpu | awk '{print "gpu-pack: " $1 " in .gpu (the device call carries 64 MiB in all)"}'
