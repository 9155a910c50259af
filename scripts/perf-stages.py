#!/usr/bin/env python3
"""Where the nodes' CPU goes, by write-path stage, from a `perf script` dump.

Reads the text of `perf script` (samples with call graphs, as recorded by
scripts/profile-cluster.sh) on stdin and prints the share of all samples
that fall in each stage of kubestore's write path. A sample belongs to the
first stage, in the order of STAGES, that any frame of its stack matches,
so a sample inside the apply that reads RocksDB counts as apply, not as
RocksDB. A sample of a thread that THREAD_STAGES names is that thread's
stage whatever its stack: perf's DWARF unwinding does not get through
RocksDB's compression (LZ4's loops), and by stack alone about half of
RocksDB's background samples fell in "other". Samples that match no
stage are "other" (user space) or "other kernel" (a kernel leaf with no
kubestore frame above it that matched).

    perf script -i perf.data | scripts/perf-stages.py
    perf script -i perf.data | scripts/perf-stages.py --under TxnRun --depth 2

`--under PATTERN` lists instead what the samples under the first frame
matching PATTERN spend their time in, `--depth` calls below it.
`--pids 12,34` keeps the samples of those processes alone (the dump must
name them: `perf script -F +pid`).
"""

import argparse
import collections
import re
import sys

# (stage, frame substrings). Order matters: the first stage any frame of a
# sample's stack matches takes the sample.
STAGES = [
    ("log fsync (the flusher thread)", ["run_flusher"]),
    ("RocksDB flush and compaction (background)", ["BackgroundCall", "BGWork"]),
    ("apply: the txns (reads, compares, sessions)", ["apply::batch::apply_entry"]),
    ("apply: the state's RocksDB write", ["write_unlogged"]),
    ("apply: encoding the rows", ["mvcc::stage_applied"]),
    ("apply: the rest", ["StateMachine::apply_entry", "state_machine::"]),
    ("log append (openraft core to the segment files)", ["LogStore", "log_store::"]),
    ("watch cache: rendering objects", ["CachedObject::render"]),
    ("watch cache: reading events", ["EventCursor"]),
    ("watch cache: the rest", ["kube::cache", "WatchCache", "recent_events"]),
    ("peer call streams (replication, forwards, read indexes)", ["call_stream::", "peer_port::"]),
    ("openraft (core, replication)", ["openraft::"]),
    ("proposer and forwarding", ["propose::", "forward::", "RaftNode"]),
    # The handlers' own frames: every frame of a REST connection sits on
    # `http::serve`, so the server's module as a whole would take hyper's
    # work too.
    ("REST handler (decode, admission, managed fields, render)", [
        "kubestore_server::http::handlers", "kubestore_server::http::admit",
        "kubestore_server::http::render", "kubestore_server::http::write_options",
        "kubestore_server::http::body", "kubestore_server::http::routing",
        "kubestore_server::kube::",
    ]),
    ("etcd API handler", ["kubestore_server::etcd"]),
    ("gRPC and HTTP servers (tonic, h2, hyper, axum, middleware)", [
        "tonic::", "h2::", "hyper", "axum::", "tower::", "kubestore_server::http::",
    ]),
    ("tokio: parked workers, epoll", ["park_internal", "park_condvar", "Driver::turn", "epoll_wait"]),
    ("tokio: the rest", ["tokio::"]),
]

# (thread name prefix, stage): threads that do one stage's work alone.
THREAD_STAGES = [
    ("rocksdb:", "RocksDB flush and compaction (background)"),
    ("kubestore-log-f", "log fsync (the flusher thread)"),
]

OFFSET = re.compile(r"\+0x[0-9a-f]+$")


def samples(lines, pids=None):
    """Yields each sample's thread name and stack, the stack leaf first
    as function names; only those of `pids` when given."""
    stack = []
    thread = ""
    keep = True
    for line in lines:
        if not line.strip():
            if stack and keep:
                yield thread, stack
            stack = []
            continue
        if not line[0].isspace():
            # The sample's header: command, pid/tid (with `-F +pid`), time, event.
            thread = line.split(None, 1)[0]
            if pids is not None:
                ids = [t for t in line.split() if "/" in t and t.split("/")[0].isdigit()]
                keep = bool(ids) and ids[0].split("/")[0] in pids
            continue
        parts = line.strip().split(None, 1)
        name = parts[1] if len(parts) > 1 else parts[0]
        name = OFFSET.sub("", name.rsplit(" (", 1)[0])
        kernel = "[kernel" in line
        stack.append((name, kernel))
    if stack and keep:
        yield thread, stack


def by_stage(stacks):
    counts = collections.Counter()
    total = 0
    for thread, stack in stacks:
        total += 1
        owner = next((st for prefix, st in THREAD_STAGES if thread.startswith(prefix)), None)
        if owner:
            counts[owner] += 1
            continue
        names = [n for n, _ in stack]
        for stage, patterns in STAGES:
            if any(p in n for n in names for p in patterns):
                counts[stage] += 1
                break
        else:
            counts["other kernel" if stack[0][1] else "other"] += 1
    return counts, total


def under(stacks, pattern, depth):
    counts = collections.Counter()
    total = matched = 0
    for _, stack in stacks:
        total += 1
        names = [n for n, _ in stack]
        # The outermost frame that matches: stacks are leaf first.
        hits = [i for i, n in enumerate(names) if pattern in n]
        if not hits:
            continue
        matched += 1
        top = hits[-1]
        callees = []
        for n in reversed(names[:top]):
            if not callees or n != callees[-1]:
                callees.append(n)
            if len(callees) == depth:
                break
        counts[callees[-1] if callees else "(in the frame itself)"] += 1
    return counts, matched, total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--under", help="list what samples under this frame spend time in")
    parser.add_argument("--depth", type=int, default=1, help="calls below --under's frame")
    parser.add_argument("--top", type=int, default=25, help="rows printed with --under")
    parser.add_argument("--pids", help="comma-separated process ids whose samples count")
    args = parser.parse_args()
    pids = set(args.pids.split(",")) if args.pids else None
    stacks = list(samples(sys.stdin, pids))
    if not stacks:
        sys.exit("no samples on stdin (pipe `perf script -i FILE` in)")
    if args.under:
        counts, matched, total = under(stacks, args.under, args.depth)
        print(f"{100 * matched / total:5.1f}%  under {args.under} ({matched} of {total} samples)")
        for name, n in counts.most_common(args.top):
            print(f"{100 * n / total:5.1f}%  {name[:160]}")
        return
    counts, total = by_stage(stacks)
    for stage, n in counts.most_common():
        print(f"{100 * n / total:5.1f}%  {stage}")
    print(f"{total} samples")


if __name__ == "__main__":
    main()
