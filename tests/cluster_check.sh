#!/usr/bin/env bash
# scripts/cluster.sh end to end (docs/cluster.md), as root:
#   1. two ranks of one node reach each other over shared memory alone (--btl self,vader), and
#      two ranks of different nodes cannot: node traffic really goes over the links;
#   2. the point-to-point rate between two nodes is the links' tbf rate, within 20%;
#   3. `moet train --ep 2` on 2 nodes x 2 ranks writes bit for bit the losses and gradient norms
#      of the same job under plain mpirun -np 4;
#   4. nothing of the cluster is left afterwards.
# Exits 77 (skipped) when not root. Usage:
#   cluster_check.sh ROOT MOET BENCH_P2P CONFIG MPIRUN [MPIRUN-FLAGS...] NUMPROC-FLAG
set -euo pipefail
root="$1" moet="$2" bench="$3" config="$4"
shift 4
mpirun="$1"  # "$@": the plain launcher prefix, ending with its -np flag
cluster="$root/scripts/cluster.sh"
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: network namespaces and tc need root"
  exit 77
fi
if ip netns list | grep -qE '^moetc-'; then
  echo "FAIL: a cluster is already up; scripts/cluster.sh down first"
  exit 1
fi
dir="$(mktemp -d)"
trap 'bash "$cluster" down >/dev/null || true; rm -rf "$dir"' EXIT
run() { MPIRUN="$mpirun" bash "$cluster" run "$@"; }

bash "$cluster" up --nodes 2 | tee "$dir/up.txt"
rate="$(grep -o 'links [0-9]* Mbit/s' "$dir/up.txt" | grep -o '[0-9]*')"

# 1. Shared memory within a node only.
run --nodes 1 --ranks-per-node 2 --btl self,vader -- "$bench" $((1 << 20)) 4 1
if run --nodes 2 --ranks-per-node 1 --btl self,vader -- "$bench" $((1 << 20)) 4 1 \
  >"$dir/vader.txt" 2>&1; then
  echo "FAIL: ranks on two nodes ran over shared memory alone"
  exit 1
fi
echo "ranks of one node share memory; ranks of two nodes do not"

# 2. The shaped rate, streaming 4 x 64 MiB (median of 5 rounds).
run --nodes 2 --ranks-per-node 1 -- "$bench" $((64 << 20)) 4 5 | tee "$dir/p2p.txt"
gbit="$(grep -o 'Gbit/s=[0-9.]*' "$dir/p2p.txt" | cut -d= -f2)"
if ! awk -v g="$gbit" -v r="$rate" 'BEGIN { exit !(g * 1000 >= 0.8 * r && g * 1000 <= 1.2 * r) }'
then
  echo "FAIL: $gbit Gbit/s between the nodes, the links are shaped to $rate Mbit/s (20% allowed)"
  exit 1
fi
echo "between nodes: $gbit Gbit/s, links shaped to $rate Mbit/s"

# 3. Training across the nodes, bitwise the same job on one node.
train=(train --model "$config" --data mock --ep 2 --steps 3 --seq 32 --threads 1 --quiet)
run --nodes 2 --ranks-per-node 2 -- "$moet" "${train[@]}" --metrics "$dir/cluster.jsonl"
"$@" 4 "$moet" "${train[@]}" --metrics "$dir/plain.jsonl"
pick() { grep -o '"\(loss\|lm_loss\|mtp_loss\|grad_norm\)":[^,]*' "$1"; }
pick "$dir/cluster.jsonl" >"$dir/cluster.txt"
pick "$dir/plain.jsonl" >"$dir/plain.txt"
[ "$(grep -c '"loss"' "$dir/cluster.txt")" -eq 3 ] || { echo "FAIL: expected 3 steps"; exit 1; }
if ! diff "$dir/plain.txt" "$dir/cluster.txt"; then
  echo "FAIL: 2 nodes x 2 ranks differ from plain mpirun -np 4"
  exit 1
fi
echo "moet train --ep 2 on 2 nodes x 2 ranks: bit for bit plain mpirun -np 4 (3 steps)"

# 4. The "nodes" share this machine's cores: no rank is bound to one of them (each node's
# daemon would otherwise bind its first rank to core 0, all nodes' to the same core).
cores=$(nproc)
run --nodes 2 --ranks-per-node 1 -- nproc >"$dir/nproc.txt"
if [ "$(grep -c "^$cores\$" "$dir/nproc.txt")" -ne 2 ]; then
  echo "FAIL: ranks see fewer than the machine's $cores cores: $(tr '\n' ' ' <"$dir/nproc.txt")"
  exit 1
fi
echo "every rank may run on all $cores cores"

# 5. Nothing left.
bash "$cluster" down
if ip netns list | grep -E '^moetc-' || ip -o link | grep moetc; then
  echo "FAIL: cluster namespaces or links left after down"
  exit 1
fi
echo "cluster removed"
