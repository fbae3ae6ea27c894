#!/usr/bin/env bash
# Builds moet and runs the whole test suite (golden files from the PyTorch reference are made
# on first use). Extra arguments go to ctest instead of the default selection (e.g. -L golden).
# The default leaves out the label `timing`: sim_local_check times moet's own runs against the
# performance model, and a shared machine's speed swings too much for a pass/fail gate; run it
# on a quiet machine with `bash scripts/test.sh -L timing` (docs/simulator.md). It leaves out
# the label `cluster` too: cluster_check builds a cluster of network namespaces as root (and
# skips otherwise); run it with `bash scripts/test.sh -L cluster` (docs/cluster.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
# The Python venv of the interop tests and benchmark peers (PyPI: torch, numpy, ml-dtypes),
# made once (several GB, minutes) and reused from ~/.cache/moet/venv.
bash "$root/scripts/venv.sh" >/dev/null
cd "$root/build"
if [ $# -eq 0 ]; then set -- -LE 'timing|cluster'; fi
ctest --output-on-failure --timeout 1200 "$@"
