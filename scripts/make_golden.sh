#!/usr/bin/env bash
# Writes the golden files of the PyTorch reference into OUTDIR when they are missing or older
# than the reference code, its spec or the config. Usage: scripts/make_golden.sh CONFIG OUTDIR
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
config="$1"; out="$2"
stamp="$out/train.safetensors"
if [ -f "$stamp" ] && [ -z "$(find "$root/reference" "$config" -newer "$stamp" -name '*.py' -o -newer "$stamp" -name '*.json' | head -n 1)" ]; then
  echo "golden files in $out are up to date"
  exit 0
fi
mkdir -p "$out"
/usr/bin/python3 "$root/reference/make_golden.py" "$config" "$out" --spec "$root/reference/golden_spec.json"
