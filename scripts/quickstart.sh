#!/usr/bin/env bash
# Quick start: install what is missing, build, and train the default model (configs/small.json)
# on the default English corpus with live progress. Extra arguments go to `moet train`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
exec "$root/build/moet" train --model "$root/configs/small.json" --steps 300 --log-every 10 "$@"
