#!/usr/bin/env bash
# Builds ddprun with sanitizers and runs the tests against that build.
# Usage: scripts/sanitize.sh [address,undefined|thread] [--unit-store] [ctest args...]
#   --unit-store  builds only unit_tests, store_host and store_cli, and runs only the unit
#                 tests (every doctest case, unit.*) and the store's end-to-end tests
#                 (e2e.test_store, e2e.test_store_hardening): CI's ASan+UBSan step.
set -euo pipefail
cd "$(dirname "$0")/.."
SAN="${1:-address,undefined}"; shift || true
targets=() select=()
if [ "${1:-}" = "--unit-store" ]; then
  shift
  targets=(--target unit_tests store_host store_cli)
  select=(-R '^(unit\.|e2e\.test_store(_hardening)?$)')
fi
BUILD="build-san-${SAN//,/-}"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DDDPRUN_SANITIZE="$SAN" \
  -DDDPRUN_PYTHON="${DDPRUN_VENV:-$HOME/.cache/ddprun/venv}/bin/python" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp"
cd "$BUILD" && ctest --output-on-failure -j2 "${select[@]}" "$@"
