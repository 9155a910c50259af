#!/usr/bin/env bash
# Counts the heap allocations a put costs the three nodes of a local
# cluster: uprobes on mimalloc's two allocation paths
# (`_mi_page_malloc_zero`, the fast path, and `_mi_malloc_generic`, the
# slow one) in BIN, counted with `perf stat` in the nodes' processes (not
# the load generator's) over PUTS puts from 64 clients, after 5,000 puts to
# warm the cluster up. Prints the counts and the allocations per put.
#
#   scripts/alloc-census.sh BIN [PUTS]
#
# With CENSUS_RECORD=DIR set it also records the call graph of every 20th
# allocation over a second run of PUTS puts into DIR/perf.data (read it
# with `perf report -i DIR/perf.data --no-children` or
# `perf script -i DIR/perf.data | scripts/perf-stages.py`).
#
# Needs root (uprobes) and perf; BIN must be a release build with symbols
# (the workspace's release profile keeps them). Allocation counts do not
# depend on the machine's speed, so two builds compare on a noisy machine
# where their CPU per put would not.
set -euo pipefail
bin=$(realpath "$1")
puts=${2:-20000}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"

data=$(mktemp -d /tmp/alloc-census.XXXXXX)
# One probe group per run, so two binaries named alike do not share events.
group="census$$"
cleanup() {
    perf probe -q -d "$group:*" 2>/dev/null || true
    stop_local_cluster "$data"
}
trap cleanup EXIT

# The nodes run a private copy of BIN with the probes on it: a uprobe is
# set on a file, so the load generator (BIN itself) and any other process
# of BIN are not counted, and the count can be taken system-wide (perf's
# `-p` races with the nodes' threads coming and going).
nodes_bin="$data/kubestore-census"
cp "$bin" "$nodes_bin"
perf probe -q -x "$nodes_bin" -a "$group:fast=_mi_page_malloc_zero" -a "$group:slow=_mi_malloc_generic"
start_local_cluster "$nodes_bin" "$data" "$data/cluster.log"
endpoints=$(local_cluster_nodes grpc_url , "$data")
load="$bin"
bench() {
    "$load" bench etcd --no-progress --endpoints "$endpoints" --workloads put \
        --clients 64 --requests "$1" --out "$data/bench-$1" >"$data/bench-$1.log" 2>&1
}
bench 5000
perf stat -x, -o "$data/stat.csv" -e "$group:fast,$group:slow" -a -- \
    bash -c "$(declare -f bench); load=$load endpoints=$endpoints data=$data; bench $puts"
if [ -n "${CENSUS_RECORD:-}" ]; then
    mkdir -p "$CENSUS_RECORD"
    perf record -q -o "$CENSUS_RECORD/perf.data" -e "$group:fast,$group:slow" -c 20 \
        --call-graph dwarf,16384 -a -- \
        bash -c "$(declare -f bench); load=$load endpoints=$endpoints data=$data; bench $puts"
fi
python3 - "$data/stat.csv" "$puts" <<'EOF'
import sys
counts = {}
for line in open(sys.argv[1]):
    fields = line.strip().split(",")
    if len(fields) > 2 and fields[0].replace(".", "").isdigit():
        counts[fields[2].split(":")[-1]] = int(float(fields[0]))
puts = int(sys.argv[2])
total = sum(counts.values())
for name, n in sorted(counts.items()):
    print(f"{name}: {n} ({n / puts:.1f} per put)")
print(f"allocations per put, three nodes: {total / puts:.1f}")
EOF
