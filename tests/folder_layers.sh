#!/usr/bin/env bash
# The folders under src/ form layers: no folder includes from a folder that (directly or
# through others) includes from it. tsort reports any cycle in the "A includes B" graph.
set -euo pipefail
src="$1/src"
pairs=$(for dir in "$src"/*/; do
  from=$(basename "$dir")
  grep -rhoE '#include "[a-z_]+/' "$dir" | sed -E 's/#include "//; s#/##' | sort -u |
    while read -r to; do if [ "$to" != "$from" ] && [ -d "$src/$to" ]; then echo "$from $to"; fi; done
done)
[ -n "$pairs" ] || { echo "FAIL: no includes between folders found under $src" >&2; exit 1; }
if ! out=$(echo "$pairs" | tsort 2>&1 >/dev/null) || [ -n "$out" ]; then
  echo "FAIL: the folders under src/ include each other in a cycle:" >&2
  echo "$out" >&2
  exit 1
fi
echo "ok: $(echo "$pairs" | wc -l) folder dependencies, no cycle"
