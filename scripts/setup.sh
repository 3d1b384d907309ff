#!/usr/bin/env bash
# Installs everything ddprun needs on a fresh Debian 12 machine:
#   - the Debian packages it builds against and runs with (apt-get), and
#   - the test-only Python packages (PyTorch 2.x, pytest, pyflakes) into a virtual
#     environment outside the work tree, reused when present so CI does not
#     download PyTorch again on a machine that has it.
# Usage: scripts/setup.sh [--no-python]     (--no-python: skip the venv)
set -euo pipefail

VENV="${DDPRUN_VENV:-$HOME/.cache/ddprun/venv}"
TORCH_VERSION="${DDPRUN_TORCH_VERSION:-2.12.1}"

debian_packages=(
  build-essential cmake pkg-config git
  libboost-program-options-dev libboost-filesystem-dev libboost-dev
  libuv1-dev libspdlog-dev nlohmann-json3-dev doctest-dev
  libgloo-dev libopenblas-dev
  elfutils groff-base procps util-linux passwd python3 python3-venv clang-format
  clang libclang-rt-14-dev clang-tidy
  file lintian  # scripts/package.sh (CPack's dpkg-shlibdeps step) and the test of its .debs
  zsh  # tests/e2e/test_completion.py runs the zsh completion for real
  strace  # tests/e2e/test_train.py sees how a rank's --time block reaches stdout
)

# A local Slurm cluster for tests/e2e/test_slurm.py and bench/slurm_bench.py (daemons started by
# the tests themselves, in a temp dir; see tests/e2e/slurm_cluster.py). Without recommends:
# the metapackage pulls some 35 plugin packages that nothing here needs.
slurm_packages=(slurmctld slurmd slurm-client munge)

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
APT=(apt-get -o DPkg::Lock::Timeout=120)

missing_of() {  # prints the packages of "$@" that are not installed
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# The packages' postinst scripts start munge, slurmctld and slurmd as system services; a
# policy-rc.d that says 101 ("action forbidden") keeps them off. Only a temporary one, and only
# where the host has none of its own.
policy=/usr/sbin/policy-rc.d
own_policy=0
deny_services() {
  [ -e "$policy" ] && return
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  own_policy=1
}
allow_services() { if ((own_policy)); then $SUDO rm -f "$policy"; fi; }
trap allow_services EXIT

mapfile -t missing < <(missing_of "${debian_packages[@]}")
mapfile -t missing_slurm < <(missing_of "${slurm_packages[@]}")
if ((${#missing[@]} + ${#missing_slurm[@]})); then
  echo "setup: installing Debian packages: ${missing[*]} ${missing_slurm[*]}"
  $SUDO "${APT[@]}" update -qq
  if ((${#missing[@]})); then
    DEBIAN_FRONTEND=noninteractive $SUDO "${APT[@]}" install -y -qq "${missing[@]}" >/dev/null
  fi
  if ((${#missing_slurm[@]})); then
    deny_services
    DEBIAN_FRONTEND=noninteractive $SUDO "${APT[@]}" install -y -qq --no-install-recommends \
      "${missing_slurm[@]}" >/dev/null
    allow_services
    own_policy=0
  fi
fi

if [ "${1:-}" = "--no-python" ]; then exit 0; fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating the test virtual environment $VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, pytest, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION and pytest into $VENV (large download, once)"
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" numpy pytest
fi
# py-spy: Python stacks in ddprun's hang dumps (the tests check them).
[ -x "$VENV/bin/py-spy" ] || "$VENV/bin/pip" install -q py-spy
# jsonschema: tests/e2e/test_machine_reports.py checks ddprun's JSON against docs/schemas/.
"$VENV/bin/python" -c "import jsonschema" 2>/dev/null || "$VENV/bin/pip" install -q jsonschema
# pyflakes: CI's check of the Python tests and benchmarks (scripts/lint.sh).
"$VENV/bin/python" -c "import pyflakes" 2>/dev/null || "$VENV/bin/pip" install -q pyflakes
echo "setup: ready (venv $VENV, $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
