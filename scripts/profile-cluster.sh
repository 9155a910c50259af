#!/usr/bin/env bash
# Profiles the three nodes of a local cluster under one write workload and
# prints where their CPU goes, by write-path stage (scripts/perf-stages.py).
#
#   scripts/profile-cluster.sh put            # etcd-API puts of 1 KiB, 64 clients
#   scripts/profile-cluster.sh update OUT     # REST updates of 1 KiB ConfigMaps
#   scripts/profile-cluster.sh range_linearizable   # etcd-API reads of one 1 KiB key
#
# Workloads: put, range_linearizable and range_serializable (`kubestore
# bench etcd`), create and update (`kubestore bench rest`). The clients
# are spread over the three nodes, as in `bench compare`. After 5,000
# warm-up puts the workload starts, and 3 s into it `perf record`
# samples the nodes (not the load generator) for
# PROFILE_SECONDS (default 8) at 299 Hz with DWARF call graphs (the load
# runs PROFILE_CLIENTS clients, default 64). OUT (default
# ./profile-WORKLOAD) keeps perf.data, the `perf script` text and
# stages.txt: the stages of all three nodes, of the leader and of the two
# followers. `scripts/perf-stages.py --under FRAME` reads the text again.
# KUBESTORE_BIN runs a given binary instead of building the release one.
# PROFILE_ON_LEADER=1 points every client at the leader instead (no write
# is forwarded), to compare with the spread profile stage by stage.
# Run it as root, or with kernel.perf_event_paranoid at 1 or below: the
# kernel's share (syscalls, loopback TCP, fsync) is a third of the samples.
set -euo pipefail
source "$(dirname "$0")/common.sh"

workload=${1:?usage: scripts/profile-cluster.sh put|range_linearizable|range_serializable|create|update [OUT]}
out=$(realpath -m "${2:-profile-$workload}")
seconds=${PROFILE_SECONDS:-8}
clients=${PROFILE_CLIENTS:-64}
case "$workload" in
    put | range_linearizable | range_serializable | create | update) ;;
    *) echo "unknown workload $workload (put, range_linearizable, range_serializable, create, update)" >&2; exit 2 ;;
esac

command -v perf >/dev/null 2>&1 || { as_root apt-get update -qq && as_root apt-get install -y -qq linux-perf >/dev/null; }
if [ -z "${KUBESTORE_BIN:-}" ]; then
    ensure_build_deps
    (cd "$ROOT" && cargo build --release --bin kubestore)
    KUBESTORE_BIN="$CARGO_TARGET_DIR/release/kubestore"
fi

mkdir -p "$out"
data=$(mktemp -d)
cluster_pid=
node_pids=
cleanup() {
    [ -n "$cluster_pid" ] && kill "$cluster_pid" 2>/dev/null && wait "$cluster_pid" 2>/dev/null
    for pid in ${node_pids//,/ }; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$data"
}
trap cleanup EXIT

start_local_cluster "$KUBESTORE_BIN" "$data/cluster" "$out/cluster.log"
# FIELD of the nodes in cluster.json, comma-separated: every node's, or
# with `leader ID` or `followers ID` the leader's or the other nodes'.
nodes() {
    python3 - "$data/cluster/cluster.json" "$@" <<'PY'
import json, sys
path, field, *role = sys.argv[1:]
nodes = json.load(open(path))["nodes"]
if role:
    which, leader = role[0], int(role[1])
    nodes = [n for n in nodes if (n["id"] == leader) == (which == "leader")]
print(",".join(str(n[field]) for n in nodes))
PY
}
node_pids=$(nodes pid)
grpc=$(nodes grpc_url)
rest=$(nodes rest_url)

"$KUBESTORE_BIN" bench etcd --endpoints "$grpc" --workloads put --clients 64 --requests 5000 \
    --no-progress --out "$data/warm-up" >/dev/null
if [ -n "${PROFILE_ON_LEADER:-}" ]; then
    first_leader=$(curl -fsS "${rest%%,*}/debug/cluster" | python3 -c "import json,sys; print(json.load(sys.stdin)['leader_id'])")
    grpc=$(nodes grpc_url leader "$first_leader")
    rest_load=$(nodes rest_url leader "$first_leader")
else
    rest_load=$rest
fi
case "$workload" in
    put | range_*) load=(bench etcd --endpoints "$grpc" --workloads "$workload") ;;
    *) load=(bench rest --endpoints "$rest_load" --workloads "$workload") ;;
esac
# Enough requests to outlast the recording on any machine we have seen.
echo "kubestore ${load[*]} --clients $clients" >"$out/load.log"
"$KUBESTORE_BIN" "${load[@]}" --clients "$clients" --requests 200000 --no-progress --out "$data/load" \
    >>"$out/load.log" 2>&1 &
load_pid=$!
# Sample the steady state, not the clients' connecting and first batches.
sleep 3
perf record -F 299 -g --call-graph dwarf,16384 -p "$node_pids" -o "$out/perf.data" \
    -- sleep "$seconds" 2>"$out/perf-record.log" >/dev/null
# Which node led while the profile was taken, as the first node sees it.
leader_id=$(curl -fsS "${rest%%,*}/debug/cluster" | python3 -c "import json,sys; print(json.load(sys.stdin)['leader_id'])")
kill "$load_pid" 2>/dev/null || true
wait "$load_pid" 2>/dev/null || true

perf script -F +pid -i "$out/perf.data" 2>/dev/null >"$out/perf.txt"
stages="$ROOT/scripts/perf-stages.py"
{
    echo "== the three nodes"
    python3 "$stages" <"$out/perf.txt"
    echo "== the leader (node $leader_id)"
    python3 "$stages" --pids "$(nodes pid leader "$leader_id")" <"$out/perf.txt"
    echo "== the two followers"
    python3 "$stages" --pids "$(nodes pid followers "$leader_id")" <"$out/perf.txt"
} | tee "$out/stages.txt"
