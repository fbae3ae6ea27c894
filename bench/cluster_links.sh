#!/usr/bin/env bash
# Shared memory within a node against the link between two nodes of scripts/cluster.sh
# (docs/cluster.md): starts a 2-node cluster with links of RATE Mbit/s, then alternates REPEATS
# times between bench_p2p_bandwidth on 1 node x 2 ranks (OpenMPI's vader) and on 2 nodes x 1 rank
# (TCP over the shaped link), both streaming 4 messages of BYTES (median of 9 rounds each), and
# prints every result, the medians and their ratio. Alternating keeps both sides under the same
# load on a shared machine. Needs root; removes the cluster when done.
# usage: bench/cluster_links.sh [RATE_MBIT, default 100000 (no shaping to speak of)]
#        [BYTES, default 64 MiB] [REPEATS, default 5]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rate="${1:-100000}" bytes="${2:-$((64 << 20))}" repeats="${3:-5}"
bench="$root/build/bench_p2p_bandwidth"
cluster="$root/scripts/cluster.sh"
if [ ! -x "$bench" ]; then
  echo "build it first: cmake --build build --target bench_p2p_bandwidth" >&2
  exit 2
fi
out="$(mktemp -d)"
trap 'bash "$cluster" down >/dev/null || true; rm -rf "$out"' EXIT
bash "$cluster" up --nodes 2 --rate "$rate"
gbs() { grep -o 'GB/s=[0-9.]*' | cut -d= -f2; }
for ((i = 1; i <= repeats; i++)); do
  shm="$(bash "$cluster" run --nodes 1 --ranks-per-node 2 -- "$bench" "$bytes" 4 9 | gbs)"
  link="$(bash "$cluster" run --nodes 2 --ranks-per-node 1 -- "$bench" "$bytes" 4 9 | gbs)"
  echo "$shm" >>"$out/shm"
  echo "$link" >>"$out/link"
  echo "round $i: within a node $shm GB/s, between nodes $link GB/s"
done
median() { sort -g "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
shm="$(median "$out/shm")" link="$(median "$out/link")"
awk -v s="$shm" -v l="$link" -v r="$rate" -v b="$bytes" 'BEGIN {
  printf "medians, %d-byte messages, links at %d Mbit/s: within a node %.3f GB/s, ", b, r, s
  printf "between nodes %.3f GB/s (%.0f Mbit/s), ratio %.1f : 1\n", l, l * 8000, s / l
}'
