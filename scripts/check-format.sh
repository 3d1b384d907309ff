#!/usr/bin/env bash
# Fails when a C++ file is not formatted per .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')
clang-format --dry-run --Werror $files
echo "check-format: $(echo "$files" | wc -w) files formatted"
