#!/usr/bin/env bash
# A cluster on one machine (docs/cluster.md): N "nodes" as Linux network namespaces, each joined
# by a veth link to a bridge in a switch namespace, each link shaped by tc's tbf qdisc in both
# directions, and mpirun across them over OpenMPI's TCP transport, its daemons started in the
# node namespaces by scripts/cluster_agent.sh instead of ssh. Ranks of one node share memory
# (OpenMPI's vader); ranks of different nodes pay the shaped link. Needs root (ip netns, tc).
#
#   cluster.sh up --nodes N [--rate MBIT] [--burst BYTES] [--latency MS] [--mtu BYTES]
#   cluster.sh run --nodes N --ranks-per-node R [--keep] [--btl LIST] [--mpirun-arg ARG]...
#                  [up options] -- COMMAND [ARGS...]
#   cluster.sh status
#   cluster.sh down
#
# `run` starts the cluster if none is up and removes it when the command ends (unless --keep);
# a cluster already up is used as it is and left up. Ranks 0..R-1 run on node 0, R..2R-1 on
# node 1, and so on. --btl replaces OpenMPI's transports (default self,vader,tcp: shared memory
# within a node, TCP between nodes); --mpirun-arg adds one argument to mpirun's command line.
# MPIRUN names the launcher (default: mpirun).
#
# Everything lives in namespaces named moetc-*: moetc-sw (the bridge moetc-br, 10.77.0.1, where
# mpirun runs) and moetc-node0..N-1 (eth0, 10.77.0.10+I/24); the machine's own network namespace
# gets nothing. `down` removes those namespaces (and with them every link and qdisc in them)
# after ending the processes still inside them, and nothing else.
set -Eeuo pipefail  # -E: the ERR trap of `up` sees failures inside functions too

here="$(cd "$(dirname "$0")" && pwd)"
prefix=moetc
sw="$prefix-sw"
subnet=10.77.0.0/24
max_nodes=64
# Default inter-node rate in Mbit/s: one ninth of the shared-memory bandwidth OpenMPI measured
# between two ranks of this machine, the GB300 NVL72 NVLink : scale-out ratio (docs/cluster.md).
default_rate_mbit=3000
default_latency_ms=20
default_mtu=9000

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

usage() {
  sed -n '8,18p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

node_ns() { echo "$prefix-node$1"; }
node_addr() { echo "10.77.0.$((10 + $1))"; }

# The cluster's node namespaces, in node order.
cluster_nodes() {
  ip netns list | awk '{print $1}' | grep -E "^$prefix-node[0-9]+$" | sort -V || true
}

cluster_exists() {
  ip netns list | awk '{print $1}' | grep -qE "^$prefix-(sw|node[0-9]+)$"
}

require_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, tc)"
}

# need_uint WHAT VALUE MIN MAX: dies unless VALUE is an integer in MIN..MAX.
need_uint() {
  if ! [[ "$2" =~ ^[0-9]{1,9}$ ]] || [ "$2" -lt "$3" ] || [ "$2" -gt "$4" ]; then
    die "$1 must be an integer in $3..$4"
  fi
}

# Ends the processes left in namespace $1 (stray daemons of a killed mpirun), by their ids.
end_processes_in() {
  local pids
  pids="$(ip netns pids "$1" 2>/dev/null || true)"
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086  # one id a word
  kill $pids 2>/dev/null || true
  sleep 1
  pids="$(ip netns pids "$1" 2>/dev/null || true)"
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
}

cmd_down() {
  local ns removed=0
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$prefix-(sw|node[0-9]+)$" || true); do
    end_processes_in "$ns"
    ip netns del "$ns"
    removed=$((removed + 1))
  done
  if [ "$removed" -eq 0 ]; then
    echo "cluster: none up"
  else
    echo "cluster: removed $removed namespaces ($prefix-*)"
  fi
}

# The namespaces `up` has made so far: if it fails, it removes these and only these (another
# cluster.sh racing it may own the others).
up_made=()

up_failed() {
  local ns
  echo "cluster.sh: up failed, removing what it made" >&2
  for ns in "${up_made[@]}"; do
    end_processes_in "$ns"
    ip netns del "$ns" || true
  done
  up_made=()
}

# shape DEVICE NAMESPACE: tbf on the device's egress.
shape() {
  ip netns exec "$2" tc qdisc replace dev "$1" root tbf rate "${rate}mbit" burst "$burst" \
    latency "${latency}ms"
}

cmd_up() {
  local nodes="" i ns
  rate="$default_rate_mbit" burst="" latency="$default_latency_ms" mtu="$default_mtu"
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) nodes="${2:-}"; shift 2 ;;
      --rate) rate="${2:-}"; shift 2 ;;
      --burst) burst="${2:-}"; shift 2 ;;
      --latency) latency="${2:-}"; shift 2 ;;
      --mtu) mtu="${2:-}"; shift 2 ;;
      *) usage ;;
    esac
  done
  need_uint --nodes "$nodes" 1 "$max_nodes"
  need_uint "--rate (Mbit/s)" "$rate" 1 1000000
  need_uint "--latency (ms)" "$latency" 1 10000
  need_uint --mtu "$mtu" 576 65535
  # Default burst: 1 ms of traffic at the rate, and never under 128 KiB (above the largest
  # segmentation-offload packet, which tbf would otherwise cut up).
  if [ -z "$burst" ]; then
    burst=$((rate * 1000 / 8))
    [ "$burst" -ge 131072 ] || burst=131072
  fi
  # At most 10 s of traffic: tc silently clamps a burst that lasts much longer.
  need_uint "--burst (bytes, from the MTU to 10 s at the rate)" "$burst" "$mtu" \
    "$((rate * 1250000 < 999999999 ? rate * 1250000 : 999999999))"
  require_root
  ! cluster_exists || die "a cluster is already up (cluster.sh status; cluster.sh down)"

  trap up_failed ERR
  ip netns add "$sw"
  up_made+=("$sw")
  ip -n "$sw" link set lo up
  ip -n "$sw" link add "$prefix-br" mtu "$mtu" type bridge
  ip -n "$sw" addr add 10.77.0.1/24 dev "$prefix-br"
  ip -n "$sw" link set "$prefix-br" up
  for ((i = 0; i < nodes; i++)); do
    ns="$(node_ns "$i")"
    ip netns add "$ns"
    up_made+=("$ns")
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "$prefix-n$i" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "$ns"
    ip -n "$sw" link set "$prefix-n$i" master "$prefix-br" up
    ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape eth0 "$ns"             # node -> switch
    shape "$prefix-n$i" "$sw"    # switch -> node
  done
  trap - ERR
  up_made=()
  echo "cluster: $nodes nodes up, links ${rate} Mbit/s each way (tbf burst $burst B," \
    "latency ${latency} ms), MTU $mtu"
}

cmd_status() {
  local ns qdisc addr
  if ! cluster_exists; then
    echo "cluster: none up"
    return 0
  fi
  echo "cluster: $(cluster_nodes | wc -l) nodes; switch $sw (bridge $prefix-br, 10.77.0.1)"
  for ns in $(cluster_nodes); do
    addr="$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')"
    qdisc="$(ip netns exec "$ns" tc qdisc show dev eth0 | head -1 | sed 's/^qdisc //')"
    echo "  $ns  $addr  $(ip -n "$ns" -o link show dev eth0 | grep -o 'mtu [0-9]*')" \
      " processes: $(ip netns pids "$ns" | wc -l)  egress: $qdisc"
  done
}

# What `run` made, for its EXIT trap; the launcher's process id, for its signal traps.
run_dir="" run_started=0 run_keep=0 run_pid="" run_signal=0

run_cleanup() {
  if [ -n "$run_dir" ]; then rm -rf "$run_dir"; fi
  if [ "$run_started" -eq 1 ] && [ "$run_keep" -eq 0 ]; then cmd_down; fi
}

# run_forward STATUS: on SIGINT or SIGTERM, ends the launcher with SIGTERM (it ends its ranks;
# a background command of a script ignores SIGINT) and makes STATUS the exit status of `run`.
run_forward() {
  run_signal="$1"
  if [ -n "$run_pid" ]; then kill -TERM "$run_pid" 2>/dev/null || true; fi
}

cmd_run() {
  local nodes="" rpn="" btl=self,vader,tcp up_args=() mpirun_args=() have=0 rc=0 i
  while [ $# -gt 0 ]; do
    case "$1" in
      --nodes) nodes="${2:-}"; up_args+=("$1" "${2:-}"); shift 2 ;;
      --ranks-per-node) rpn="${2:-}"; shift 2 ;;
      --keep) run_keep=1; shift ;;
      --btl) btl="${2:-}"; shift 2 ;;
      --mpirun-arg) mpirun_args+=("${2:-}"); shift 2 ;;
      --rate | --burst | --latency | --mtu) up_args+=("$1" "${2:-}"); shift 2 ;;
      --) shift; break ;;
      *) usage ;;
    esac
  done
  [ $# -gt 0 ] || die "run: no command after --"
  need_uint "run: --nodes" "$nodes" 1 "$max_nodes"
  need_uint "run: --ranks-per-node" "$rpn" 1 1024
  require_root
  trap run_cleanup EXIT
  trap 'run_forward 130' INT
  trap 'run_forward 143' TERM
  if cluster_exists; then
    have="$(cluster_nodes | wc -l)"
    [ "$have" -ge "$nodes" ] || die "run: the cluster up has $have nodes, fewer than $nodes"
    [ ${#up_args[@]} -eq 2 ] ||
      die "run: a cluster is already up; its links stay as they are (cluster.sh down first)"
  else
    cmd_up "${up_args[@]}"
    run_started=1
  fi
  [ "$run_signal" -eq 0 ] || exit "$run_signal"
  run_dir="$(mktemp -d)"
  for ((i = 0; i < nodes; i++)); do echo "$(node_ns "$i") slots=$rpn"; done >"$run_dir/hostfile"
  # The launcher runs in the switch namespace, where the node daemons can reach it (10.77.0.1),
  # in the background so that a signal to this script reaches it at once (the traps above).
  # mpi_yield_when_idle: a rank waiting for a message yields its core. The kernel's network
  # processing (ksoftirqd), which stands in for the NICs here, then gets to run; with ranks
  # spinning on every core it waited for a scheduler tick, and each rendezvous handshake across
  # the links took ~8 ms instead of ~0.1 ms (docs/cluster.md).
  # --bind-to none: the "nodes" share this machine's cores, and each node's daemon would bind
  # its ranks from core 0 up (OpenMPI binds to cores for 2 ranks or fewer), putting rank 0 of
  # every node on the same core.
  ip netns exec "$sw" "${MPIRUN:-mpirun}" --allow-run-as-root --oversubscribe \
    --hostfile "$run_dir/hostfile" -np $((nodes * rpn)) --map-by slot --bind-to none \
    --mca plm_rsh_agent "$here/cluster_agent.sh" --mca mpi_yield_when_idle 1 \
    --mca btl "$btl" --mca btl_tcp_if_include "$subnet" \
    --mca oob_tcp_if_include "$subnet" "${mpirun_args[@]}" "$@" 0<&0 &
  run_pid=$!
  # `wait` returns early when a trapped signal arrives; wait again until the launcher is gone.
  while :; do
    if wait "$run_pid"; then rc=0; else rc=$?; fi
    kill -0 "$run_pid" 2>/dev/null || break
  done
  run_pid=""
  [ "$run_signal" -eq 0 ] || rc="$run_signal"
  return "$rc"
}

[ $# -ge 1 ] || usage
sub="$1"
shift
case "$sub" in
  up) cmd_up "$@" ;;
  run) cmd_run "$@" ;;
  status) cmd_status "$@" ;;
  down) require_root; cmd_down "$@" ;;
  *) usage ;;
esac
