#!/usr/bin/env bash
# Fuzzes the checkpoint and dataset parsers and the tokenizer.json loader (fuzz/README.md): builds
# each libFuzzer target with clang, AddressSanitizer and UndefinedBehaviorSanitizer into
# BUILD_DIR/fuzz/, then runs each for SECONDS on a copy of its seed corpus
# (BUILD_DIR/fuzz/corpus/<target>/, kept between runs, so
# fuzz/corpus/ in the repository is never modified). Fails on any crash, leak, timeout, memory
# blow-up, sanitizer report or broken invariant; the input that caused it is saved as
# BUILD_DIR/fuzz/artifacts/<target>-crash-... and the log's tail is printed.
#   usage: tests/fuzz_parsers.sh BUILD_DIR SECONDS
# MOET_FUZZ_CXX picks the compiler (default clang++; it needs libFuzzer: Debian's
# libclang-rt-dev, which scripts/install_deps.sh installs).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "$1/fuzz" && cd "$1/fuzz" && pwd)"
seconds="$2"
cxx="${MOET_FUZZ_CXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz_parsers: $cxx not found (bash scripts/install_deps.sh installs clang)" >&2
  exit 1
fi

flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Werror -I "$root/src")
common=(src/core/crc32c.cpp src/core/error.cpp)
declare -A sources=(
  [safetensors]="src/checkpoint/safetensors.cpp src/core/mapped_file.cpp src/core/tensor.cpp"
  [checkpoint_index]="src/checkpoint/checkpoint_index.cpp"
  [tokenizer_json]="src/data/bpe_tokenizer.cpp src/data/pretokenizer.cpp src/data/text_bytes.cpp src/core/file_io.cpp"
  [indexed_dataset]="src/data/indexed_dataset.cpp src/core/mapped_file.cpp"
)
# Libraries a target links beyond the sanitizers (PCRE2 and ICU for the tokenizer).
declare -A libs=(
  [tokenizer_json]="$(pkg-config --libs libpcre2-8 icu-uc 2>/dev/null || echo -lpcre2-8 -licuuc)"
)
targets=(safetensors checkpoint_index tokenizer_json indexed_dataset)

# Builds fuzz_<target> unless it is newer than everything it is made from.
build() {
  local t="$1" bin="$out/fuzz_$1"
  if [ -x "$bin" ] && [ -z "$(find "$root/src/checkpoint" "$root/src/core" "$root/src/data" \
        "$root/fuzz/fuzz_$t.cpp" -newer "$bin" -print -quit)" ]; then
    return 0
  fi
  # shellcheck disable=SC2086
  (cd "$root" && "$cxx" "${flags[@]}" "fuzz/fuzz_$t.cpp" ${sources[$t]} "${common[@]}" \
     ${libs[$t]:-} -o "$bin.tmp") && mv "$bin.tmp" "$bin"
}

# Runs fuzz_<target> for $seconds; its log goes to $out/fuzz_<target>.log. After a clean run
# the corpus is merged down to the inputs that add coverage, so it stays small from run to run.
run() {
  local t="$1" corpus="$out/corpus/$1" log="$out/fuzz_$1.log"
  mkdir -p "$corpus" "$out/artifacts"
  cp -n "$root/fuzz/corpus/$t/"* "$corpus/"
  cat "$root/fuzz/json.dict" "$root/fuzz/$t.dict" >"$out/$t.dict"
  local opts=(-timeout=10 -rss_limit_mb=2048 -max_len=16384)
  UBSAN_OPTIONS=print_stacktrace=1 "$out/fuzz_$t" "${opts[@]}" -max_total_time="$seconds" \
    -dict="$out/$t.dict" -artifact_prefix="$out/artifacts/$t-" -print_final_stats=1 \
    "$corpus" >"$log" 2>&1 || return 1
  rm -rf "$corpus.min" && mkdir "$corpus.min"
  if "$out/fuzz_$t" "${opts[@]}" -merge=1 "$corpus.min" "$corpus" >"$log.merge" 2>&1; then
    rm -rf "$corpus" && mv "$corpus.min" "$corpus"
  fi
}

# All cores: the targets build, then run, side by side.
pids=()
for t in "${targets[@]}"; do build "$t" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || { echo "fuzz_parsers: build failed" >&2; exit 1; }; done

pids=()
for t in "${targets[@]}"; do run "$t" & pids+=($!); done
status=0
for i in "${!targets[@]}"; do
  t="${targets[$i]}"
  if wait "${pids[$i]}"; then
    # libFuzzer's last status line: executions, coverage (cov: edges, ft: features), corpus.
    echo "fuzz_$t: no findings in ${seconds}s:" \
      "$(grep -o '#[0-9]*[[:space:]]*DONE.*' "$out/fuzz_$t.log" | tail -1 |
         sed -E 's/#([0-9]+)[[:space:]]+DONE[[:space:]]+/\1 executions, /')"
  else
    status=1
    echo "fuzz_$t: FINDING (log $out/fuzz_$t.log; inputs in $out/artifacts/):"
    tail -n 60 "$out/fuzz_$t.log"
  fi
done
exit $status
