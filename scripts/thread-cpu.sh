#!/usr/bin/env bash
# Where the three nodes' CPU goes by thread, over one write workload.
#
#   scripts/thread-cpu.sh put               # 150,000 etcd-API puts of 1 KiB, 64 clients
#   scripts/thread-cpu.sh update 40000      # REST updates of 1 KiB ConfigMaps
#
# Starts a fresh local three-node cluster (KUBESTORE_BIN, or the release
# build), runs WORKLOAD (put, create or update) with REQUESTS requests
# (default 150,000) from 64 clients spread over the nodes, then reads every
# thread's user and system time from /proc and prints them summed by thread
# name over the three nodes, with the CPU per request: tokio's workers
# (the servers, Raft, apply, the watch cache), the log's fsync thread
# (`kubestore-log-f`), the log's zero-fill thread (`kubestore-log-z`), RocksDB's flushes (`rocksdb:high`) and compactions
# (`rocksdb:low`). The threads' totals include the cluster's start and,
# for REST workloads, the seeding of the objects updated: with a few
# thousand requests they weigh in (5,000 updates read 328 µs each against
# about 190 in `bench compare`), with the default they do not.
#
# Why beside `profile-cluster.sh`: perf's DWARF unwinding does not get
# through RocksDB's compression routines (LZ4's hand-tuned loops), so a
# stage table built from call stacks misses most of the background
# threads' samples. The kernel's accounting per thread has no such gap.
set -euo pipefail
source "$(dirname "$0")/common.sh"

workload=${1:?usage: scripts/thread-cpu.sh put|create|update [REQUESTS]}
requests=${2:-150000}
case "$workload" in
    put | create | update) ;;
    *) echo "unknown workload $workload (put, create, update)" >&2; exit 2 ;;
esac
if [ -z "${KUBESTORE_BIN:-}" ]; then
    ensure_build_deps
    (cd "$ROOT" && cargo build --release --bin kubestore)
    KUBESTORE_BIN="$CARGO_TARGET_DIR/release/kubestore"
fi

data=$(mktemp -d)
cluster_pid=
trap 'stop_local_cluster "$data"' EXIT

start_local_cluster "$KUBESTORE_BIN" "$data/cluster" "$data/cluster.log"
field() { local_cluster_nodes "$1" "$2" "$data/cluster"; }
case "$workload" in
    put) load=(bench etcd --endpoints "$(field grpc_url ,)") ;;
    *) load=(bench rest --endpoints "$(field rest_url ,)") ;;
esac
"$KUBESTORE_BIN" "${load[@]}" --workloads "$workload" --clients 64 --requests "$requests" \
    --no-progress --out "$data/load" | grep -E "^ +$workload "

# shellcheck disable=SC2046 # one argument per node
python3 - "$requests" $(field pid ' ') <<'PY'
import collections, os, sys

requests = int(sys.argv[1])
tick = os.sysconf("SC_CLK_TCK")
by_name = collections.Counter()
for pid in sys.argv[2:]:
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        by_name[name] += (int(fields[11]) + int(fields[12])) / tick
total = sum(by_name.values())
print(f"{'thread':<20} {'CPU s':>8} {'share':>7} {'µs/request':>11}")
for name, seconds in by_name.most_common():
    print(f"{name:<20} {seconds:8.2f} {100 * seconds / total:6.1f}% {1e6 * seconds / requests:11.1f}")
print(f"{'all':<20} {total:8.2f} {100.0:6.1f}% {1e6 * total / requests:11.1f}")
PY
