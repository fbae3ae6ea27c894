#!/usr/bin/env bash
# Runs an MPI job that is meant to fail and checks that it failed well: non-zero status,
# within 30 s (a hang is killed by `timeout 60`), and stderr containing each expected text.
# Usage: mpi_fault.sh [-e TEXT]... -- MPIRUN-COMMAND...
set -uo pipefail
expect=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    -e) expect+=("$2"); shift 2 ;;
    *) echo "mpi_fault.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
shift
err="$(mktemp)"
trap 'rm -f "$err"' EXIT
start=$(date +%s%N)
timeout 60 "$@" >/dev/null 2>"$err"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
ok=1
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0"; ok=0; fi
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed by timeout after 60 s)"; ok=0; fi
if [ "$ms" -ge 30000 ]; then echo "FAIL: took ${ms} ms (limit 30 s)"; ok=0; fi
for text in "${expect[@]}"; do
  grep -qF -- "$text" "$err" || { echo "FAIL: stderr lacks \"$text\""; ok=0; }
done
echo "exit status $rc after ${ms} ms"
if [ "$ok" -ne 1 ]; then
  echo "--- stderr ---"
  cat "$err"
  exit 1
fi
echo "ok"
