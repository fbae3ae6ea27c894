#!/usr/bin/env bash
# Quick start: install what is missing, build, prepare the default corpus once (a 4,096-token
# byte-level BPE tokenizer trained on the English text of Debian's fortunes package, and the
# corpus tokenized into a Megatron .bin/.idx dataset, cached in ~/.cache/moet/), then train the
# default model (configs/small-bpe.json) on it with live progress. Extra arguments go to
# `moet train` (e.g. --out runs/first to keep checkpoints for moet generate and moet eval).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
moet="$root/build/moet"
corpus=/usr/share/games/fortunes
data="${MOET_CACHE_DIR:-$HOME/.cache/moet}/fortunes-bpe4096-v2"
if [ ! -f "$data/fortunes.idx" ] || [ ! -f "$data/tokenizer.json" ]; then
  echo "quickstart: preparing the default corpus once into $data"
  mkdir -p "$data"
  "$moet" tokenizer train --input "$corpus" --vocab-size 4096 --output "$data/tokenizer.json" \
    --overwrite
  "$moet" data prepare --input "$corpus" --tokenizer "$data/tokenizer.json" \
    --output "$data/fortunes" --overwrite
fi
exec "$moet" train --model "$root/configs/small-bpe.json" --data "$data/fortunes" \
  --tokenizer "$data/tokenizer.json" --steps 300 --log-every 10 "$@"
