#!/usr/bin/env bash
# Builds moet and runs the whole test suite (golden files from the PyTorch reference are made
# on first use). Extra arguments go to ctest (e.g. -L golden, -LE slow).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900 "$@"
