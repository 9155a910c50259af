#!/usr/bin/env bash
# Puts on a local three-node cluster whose every log fsync is slowed by
# DELAY_MS, as on a slow disk: what the leader's fsync overlapping the
# followers' is worth where the disk, not the CPU, binds a put.
#
#   scripts/slow-disk-puts.sh KUBESTORE_BINARY DELAY_MS [LOAD_BINARY]
#
# Starts `kubestore cluster` from KUBESTORE_BINARY with fault injection on,
# sets `fsync_delay_ms` on every node (`POST /debug/faults`), puts 3,000
# keys to warm it, then runs 20,000 puts from 64 clients spread over the
# nodes (`bench etcd`, from LOAD_BINARY, default the same binary) and
# prints the throughput, p50 and p99. Alternate two builds with it to
# compare them; a benchmark program, not a test.
set -euo pipefail
source "$(dirname "$0")/common.sh"
bin=${1:?usage: scripts/slow-disk-puts.sh KUBESTORE_BINARY DELAY_MS [LOAD_BINARY]}
delay=${2:?usage: scripts/slow-disk-puts.sh KUBESTORE_BINARY DELAY_MS [LOAD_BINARY]}
load=${3:-$bin}
data=$(mktemp -d)
cluster_pid=
trap 'stop_local_cluster "$data"' EXIT

KUBESTORE_FAULT_INJECTION=true start_local_cluster "$bin" "$data/cluster" "$data/cluster.log"
nodes() { local_cluster_nodes "$1" "$2" "$data/cluster"; }
for url in $(nodes rest_url ' '); do
    curl -sf -XPOST -d "{\"fsync_delay_ms\": $delay}" "$url/debug/faults" >/dev/null
done
grpc=$(nodes grpc_url ,)
"$load" bench etcd --endpoints "$grpc" --workloads put --clients 64 --requests 3000 --out "$data/warm-up" --no-progress >/dev/null
"$load" bench etcd --endpoints "$grpc" --workloads put --clients 64 --requests 20000 --out "$data/run" --no-progress >/dev/null
python3 - "$data/run/results.json" <<'PY'
import json, sys

def runs(x):
    if isinstance(x, dict):
        if "throughput" in x:
            yield x
        else:
            for v in x.values():
                yield from runs(v)
    elif isinstance(x, list):
        for v in x:
            yield from runs(v)

for r in runs(json.load(open(sys.argv[1]))):
    print(f"puts/s {r['throughput']:.0f}  p50 {r['p50_ms']:.1f} ms  p99 {r['p99_ms']:.1f} ms")
PY
