#!/usr/bin/env bash
# clang-tidy over ddprun's own C++ with the checked-in .clang-tidy: every diagnostic in the
# project's files (system and third-party headers are never checked) fails the run, except
# in the files listed in tidy-pending below, whose diagnostics are printed but tolerated
# until their owners fix them (then the entry goes). Needs compile_commands.json of a build
# (build/, or $DDPRUN_BUILD_DIR), configured here when missing.
# Usage: scripts/tidy.sh [FILE.cpp...]    (default: every .cpp of the build; not CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD="${DDPRUN_BUILD_DIR:-build}"
if [ ! -f "$BUILD/compile_commands.json" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
# Files whose diagnostics do not fail the run yet (path relative to the source root).
pending=(
)
if (($#)); then
  files=("$@")
else
  mapfile -t files < <(python3 -c '
import json, os, sys
root = sys.argv[1]
for e in json.load(open(sys.argv[2])):
    f = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
    if f.endswith(".cpp") and not f.startswith(("..", "build")):
        print(f)' "$ROOT" "$BUILD/compile_commands.json" | sort -u)
fi
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$SECONDS
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  'clang-tidy -p "$1" --quiet --header-filter="^$2/[a-z_]+/" "$3" > "$4/$(echo "$3" | tr / _).log" 2>&1 || true' \
  _ "$BUILD" "$ROOT" {} "$logs"
# One line per diagnostic (a header's appear once), paths relative to the root.
diags=$(cat "$logs"/*.log | grep -E '^[^ ]+:[0-9]+:[0-9]+: (warning|error):' |
  sed "s|^$ROOT/||" | sort -u || true)
failing="" tolerated=""
while IFS= read -r d; do
  [ -n "$d" ] || continue
  file="${d%%:*}"
  if printf '%s\n' "${pending[@]}" | grep -qxF "$file"; then tolerated+="$d"$'\n'; else failing+="$d"$'\n'; fi
done <<< "$diags"
if ((!$#)); then  # every file was checked
  for p in "${pending[@]}"; do
    grep -q "^$p:" <<< "$tolerated" || echo "tidy: $p is clean now: take it off the pending list"
  done
fi
summary="tidy: ${#files[@]} files in $((SECONDS - start)) s"
if [ -n "$tolerated" ]; then
  echo "tidy: tolerated in pending files (scripts/tidy.sh), $(printf '%s' "$tolerated" | wc -l):"
  printf '%s' "$tolerated"
fi
if [ -n "$failing" ]; then
  cat "$logs"/*.log | grep -v 'warnings generated\|Suppressed\|Use -header-filter\|NOLINT' || true
  echo "tidy: FAILED: $(printf '%s' "$failing" | wc -l) diagnostics:"
  printf '%s' "$failing"
  echo "$summary"
  exit 1
fi
echo "$summary: OK"
