#!/usr/bin/env bash
# Writes the golden files of the PyTorch reference into OUTDIR when they are missing, older
# than the reference code, its spec or the config, or written in another precision.
# Usage: scripts/make_golden.sh CONFIG OUTDIR [PRECISION]
#   PRECISION: fp32 (default) | bf16 | mxfp8 | fp8-blockwise | nvfp4 | mxfp4 (docs/precision.md's
#   recipes; the FP8 and FP4 recipes keep the default --bf16-layers 1)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
config="$1"; out="$2"; precision="${3:-fp32}"
case "$precision" in
  fp32|bf16|mxfp8|fp8-blockwise|nvfp4|mxfp4) ;;
  *) echo "make_golden.sh: precision '$precision' is not one of fp32, bf16, mxfp8, fp8-blockwise, nvfp4, mxfp4" >&2; exit 2 ;;
esac
stamp="$out/train.safetensors"
# The recipe a stamp was written in: its metadata's "precision" (fp32 files have none). The
# metadata closes the (small) JSON header, which the first 64 KiB hold for train.safetensors.
stamp_precision() {
  local p
  p=$(head -c 65536 "$1" | grep -a -o '"precision":"[^"]*"' | head -n 1 | cut -d'"' -f4 || true)
  echo "${p:-fp32}"
}
if [ -f "$stamp" ] && [ "$(stamp_precision "$stamp")" = "$precision" ] &&
   [ -z "$(find "$root/reference" "$config" -newer "$stamp" -name '*.py' -o -newer "$stamp" -name '*.json' | head -n 1)" ]; then
  echo "golden files in $out are up to date ($precision)"
  exit 0
fi
mkdir -p "$out"
/usr/bin/python3 "$root/reference/make_golden.py" "$config" "$out" --spec "$root/reference/golden_spec.json" \
  --precision "$precision"
