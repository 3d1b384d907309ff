#!/usr/bin/env bash
# pyflakes over the Python tests and benchmarks: undefined names, unused imports, f-strings
# without placeholders. The venv is scripts/setup.sh's, which installs pyflakes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${DDPRUN_VENV:-$HOME/.cache/ddprun/venv}/bin/python"
"$PYTHON" -m pyflakes tests bench
echo "lint: pyflakes found nothing in $(git ls-files 'tests/*.py' 'bench/*.py' | wc -l) files"
