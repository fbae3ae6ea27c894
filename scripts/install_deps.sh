#!/usr/bin/env bash
# Installs what moet needs from Debian's packages; does nothing for what is already there.
set -euo pipefail
pkgs=(build-essential cmake git libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev
      libcli11-dev libgtest-dev python3-torch python3-venv libtcmalloc-minimal4 fortunes
      openmpi-bin libopenmpi-dev zlib1g-dev
      libpcre2-dev libicu-dev  # the tokenizer's split regexes and NFC (docs/tokenizer.md)
      iproute2  # ip and tc for scripts/cluster.sh
      clang libclang-rt-dev  # the parser fuzz test: clang and its libFuzzer runtime
      chromium)  # the report test renders moet report's HTML headless
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
