#!/usr/bin/env bash
# Prints the path of the project venv's python on stdout (and nothing else on stdout).
# The venv lives at ${MOET_VENV:-$HOME/.cache/moet/venv}; it is created when missing and
# re-synced (pip install -r scripts/python-requirements.txt) whenever that file's sha256
# differs from the stamp left by the last successful sync. Idempotent; when nothing changed it
# only hashes one file. Progress goes to stderr; a failure prints one line and exits non-zero.
# Base interpreter: ${MOET_BASE_PYTHON:-/usr/bin/python3} (Debian's; needs python3-venv).
# Usage: PY=$(bash scripts/venv.sh) && "$PY" bench/pytorch_peer.py ...
set -euo pipefail

die() { echo "venv.sh: $*" >&2; exit 1; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/python-requirements.txt"
venv="${MOET_VENV:-$HOME/.cache/moet/venv}"
py="$venv/bin/python"
stamp="$venv/.moet-requirements.sha256"

[ -f "$req" ] || die "missing $req"
want=$(sha256sum "$req" | cut -d' ' -f1)

# Fast path: venv present and synced with this requirements file.
if [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$py"
  exit 0
fi

mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
# One sync at a time (two callers racing would corrupt site-packages).
exec 9>"$venv.lock" || die "cannot open lock $venv.lock"
flock 9 || die "cannot lock $venv.lock"
# Another caller may have finished the sync while we waited.
if [ -x "$py" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$py"
  exit 0
fi

base="${MOET_BASE_PYTHON:-/usr/bin/python3}"
[ -x "$base" ] || base=$(command -v python3) || die "no python3 found"
log="$venv.log"

note=""
if ! [ -x "$py" ] || ! "$py" -c 'import sys' >/dev/null 2>&1; then
  note=" (first time: several GB, a few minutes)"
  echo "venv.sh: creating $venv with $("$base" --version 2>&1) ($base)" >&2
  rm -rf "$venv"
  if ! "$base" -m venv "$venv" >"$log" 2>&1; then
    rm -rf "$venv"
    die "'$base -m venv $venv' failed (install Debian's python3-venv; log: $log)"
  fi
fi

rm -f "$stamp"
echo "venv.sh: installing $req into $venv$note ..." >&2
start=$SECONDS
if ! "$py" -m pip install --no-input --quiet --disable-pip-version-check \
      -r "$req" >"$log" 2>&1; then
  err=$(grep -E '^ERROR' "$log" | tail -n1 | cut -c1-200 || true)
  die "pip install -r $req failed${err:+: $err} (log: $log)"
fi
echo "$want" >"$stamp"
echo "venv.sh: synced in $((SECONDS - start)) s" >&2
echo "$py"
