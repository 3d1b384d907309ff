#!/usr/bin/env bash
# Fuzzes the store's request parser and state with libFuzzer for SECONDS
# (default 300): builds store_parser_fuzz with clang into build-fuzz/ (or
# $DDPRUN_FUZZ_BUILD_DIR) and runs it on a copy of tests/fuzz/corpus. Exits
# non-zero when the fuzzer finds a crash, a leak or a sanitizer report; the
# input is left in build-fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-300}"
BUILD="${DDPRUN_FUZZ_BUILD_DIR:-build-fuzz}"
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DDDPRUN_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  >/dev/null
cmake --build "$BUILD" --target store_parser_fuzz -j"$(nproc)"
rm -rf "$BUILD/corpus" "$BUILD/artifacts"
mkdir -p "$BUILD/artifacts"
cp -r tests/fuzz/corpus "$BUILD/corpus"
"$BUILD/tests/store_parser_fuzz" -max_total_time="$SECONDS_TO_RUN" -print_final_stats=1 \
  -artifact_prefix="$BUILD/artifacts/" "$BUILD/corpus"
