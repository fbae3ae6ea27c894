#!/usr/bin/env bash
# OpenMPI's launch agent for scripts/cluster.sh, in place of ssh: mpirun calls it as
# `cluster_agent.sh HOST COMMAND...` to start its daemon (orted) on HOST. HOST names one of the
# cluster's node namespaces (moetc-nodeI); the command runs there, in a UTS namespace of its own
# whose hostname is HOST, through /bin/sh as ssh would run it (mpirun quotes its arguments for a
# remote shell). The own hostname matters: OpenMPI names its session directory and the shared
# memory segments of each rank after the host, and nodes sharing the machine's hostname would
# share (and corrupt) them. The daemon's ranks inherit both namespaces.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: cluster_agent.sh HOST COMMAND..." >&2
  exit 2
fi
host="$1"
shift
if ! [[ "$host" =~ ^moetc-node[0-9]+$ ]]; then
  echo "cluster_agent.sh: '$host' is not a node of scripts/cluster.sh (moetc-nodeI)" >&2
  exit 2
fi
# shellcheck disable=SC2016  # $0 and $1 belong to the inner shell
exec ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' \
  "$host" "$*"
