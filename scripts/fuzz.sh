#!/usr/bin/env bash
# Fuzzes a parser with libFuzzer for SECONDS (default 300):
#   scripts/fuzz.sh [SECONDS] [store|hostlist]
#   store    the store's request parser and state (corpus tests/fuzz/corpus)
#   hostlist the Slurm hostlist parser, env/hostlist (corpus tests/fuzz/hostlist_corpus)
# Builds the target with clang into build-fuzz/ (or $DDPRUN_FUZZ_BUILD_DIR) and runs it
# on a copy of its corpus. Exits non-zero when the fuzzer finds a crash, a leak or a
# sanitizer report; the input is left in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-300}"
WHAT="${2:-store}"
case "$WHAT" in
  store) TARGET=store_parser_fuzz CORPUS=tests/fuzz/corpus ;;
  hostlist) TARGET=hostlist_fuzz CORPUS=tests/fuzz/hostlist_corpus ;;
  *) echo "fuzz.sh: unknown target $WHAT: store or hostlist" >&2; exit 2 ;;
esac
BUILD="${DDPRUN_FUZZ_BUILD_DIR:-build-fuzz}"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DDDPRUN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >/dev/null
cmake --build "$BUILD" --target "$TARGET" -j"$(nproc)"
rm -rf "$BUILD/corpus" "$BUILD/artifacts"
mkdir -p "$BUILD/artifacts"
cp -r "$CORPUS" "$BUILD/corpus"
"$BUILD/tests/$TARGET" -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 \
  -artifact_prefix="$BUILD/artifacts/" "$BUILD/corpus"
