#!/usr/bin/env python3
"""Compares two builds of kubestore on one workload, in alternating pairs.

    scripts/ab-pairs.py BEFORE AFTER put            # 4 pairs of 40,000 puts
    scripts/ab-pairs.py BEFORE AFTER update --pairs 3 --requests 30000
    scripts/ab-pairs.py BEFORE AFTER range_linearizable --requests 100000

BEFORE and AFTER are two `kubestore` binaries (release builds of the two
commits, copied aside). Each run starts a fresh three-node `kubestore
cluster` from that binary in a temporary directory, puts 5,000 keys to warm
it, then runs the workload with the clients spread over the nodes, as `bench
compare` does: `put`, `range_linearizable` and `range_serializable` (reads
of one 1 KiB key) are `bench etcd`, `create` and `update` are `bench rest`.
The load generator is BEFORE's binary in every run, so both builds are
driven by the same client code.

With `--vary load-generator` it is the other way round: BEFORE's servers in
every run, driven by BEFORE's load generator and then AFTER's. That compares
two builds of the load generator itself (the client's CPU per request, and
what it leaves the servers of the shared cores).

Per run it prints the servers' CPU per request (the three nodes' user and
system time from /proc, over the workload alone), the load generator's CPU
per request, their ratio, the nodes' voluntary context switches and minor
page faults per request, the throughput and the p99. At the end, each
build's means and the change of each measure from BEFORE to AFTER.

Why the ratio: on a shared two-core VM the machine's speed drifts by 10% or
more between runs, and every process's CPU per request with it. The load
generator does about the same work per request whatever the server build, so the
servers' CPU over the load generator's cancels most of the drift (it held
within 1.5% over eight runs of one build where the raw CPU moved 30%; see
BENCHMARKS.md, "Page faults, and an A/B that sees 1%"). It compares builds of
one store, never kubestore against etcd (the client spends differently per
request against each). It holds only while the change leaves the load
generator's own work per request alone: a build that answers later or in
other bursts moves the client's CPU too (one tokio worker per node raised it
7% and lowered the ratio 6% with the servers' CPU unchanged), so read the
ratio with both of its terms.
"""

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

WARM_UP_PUTS = 5000
ETCD_WORKLOADS = ["put", "range_linearizable", "range_serializable"]
PORTS = ["--rest-port", "28480", "--grpc-port", "22779", "--peer-port", "22790"]


def proc_stat(pid):
    """(user + system ticks, minor faults) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces: fields are counted after its ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[7])


def voluntary_switches(pid):
    """Voluntary context switches of all of a process's threads (its
    /proc/PID/status counts its main thread alone)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return total


def nodes_counters(pids):
    ticks = faults = switches = 0
    for pid in pids:
        t, m = proc_stat(pid)
        ticks, faults = ticks + t, faults + m
        switches += voluntary_switches(pid)
    return ticks, faults, switches


def workload_result(results_path):
    """(requests per second, p99 ms) of the one workload in a bench's results.json."""
    with open(results_path) as f:
        results = json.load(f)
    run = results["runs"][0]
    return run["throughput"], run["p99_ms"]


def run_once(binary, load_binary, workload, requests, clients):
    work = tempfile.mkdtemp(prefix="ab-pairs.")
    data = os.path.join(work, "data")
    log = open(os.path.join(work, "cluster.log"), "w")
    cluster = subprocess.Popen(
        [binary, "cluster", "--nodes", "3", "--data-dir", data, *PORTS],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    pids = []
    try:
        described = os.path.join(data, "cluster.json")
        deadline = time.monotonic() + 120
        while not (os.path.exists(described) and os.path.getsize(described) > 0):
            if cluster.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the cluster of {binary} did not start: {log.name}")
            time.sleep(0.1)
        with open(described) as f:
            nodes = json.load(f)["nodes"]
        pids = [n["pid"] for n in nodes]
        grpc = ",".join(n["grpc_url"] for n in nodes)
        rest = ",".join(n["rest_url"] for n in nodes)
        bench = [load_binary, "bench"]
        quiet = ["--no-progress"]
        subprocess.run(
            bench + ["etcd", "--endpoints", grpc, "--workloads", "put", "--clients", "64",
                     "--requests", str(WARM_UP_PUTS), "--out", os.path.join(work, "warm-up")] + quiet,
            check=True, stdout=subprocess.DEVNULL,
        )
        if workload in ETCD_WORKLOADS:
            load = ["etcd", "--endpoints", grpc, "--workloads", workload]
        else:
            load = ["rest", "--endpoints", rest, "--workloads", workload]
        out = os.path.join(work, "run")
        before = nodes_counters(pids)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            bench + load + ["--clients", str(clients), "--requests", str(requests), "--out", out] + quiet,
            check=True, stdout=subprocess.DEVNULL,
        )
        after = nodes_counters(pids)
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        hz = os.sysconf("SC_CLK_TCK")
        server = (after[0] - before[0]) / hz * 1e6 / requests
        client = (
            (children_after.ru_utime - children.ru_utime)
            + (children_after.ru_stime - children.ru_stime)
        ) * 1e6 / requests
        throughput, p99 = workload_result(os.path.join(out, "results.json"))
        return {
            "server_us": server,
            "client_us": client,
            "ratio": server / client if client else float("nan"),
            "switches": (after[2] - before[2]) / requests,
            "faults": (after[1] - before[1]) / requests,
            "per_second": throughput,
            "p99_ms": p99,
        }
    finally:
        cluster.send_signal(signal.SIGTERM)
        try:
            cluster.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cluster.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        shutil.rmtree(work, ignore_errors=True)


MEASURES = [
    ("server_us", "servers' CPU µs/req", "{:.1f}"),
    ("client_us", "load generator's CPU µs/req", "{:.1f}"),
    ("ratio", "servers' CPU / load generator's", "{:.3f}"),
    ("switches", "voluntary switches/req", "{:.2f}"),
    ("faults", "minor faults/req", "{:.2f}"),
    ("per_second", "requests/s", "{:.0f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("workload", choices=ETCD_WORKLOADS + ["create", "update"])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--requests", type=int, default=40000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument(
        "--vary",
        choices=["servers", "load-generator"],
        default="servers",
        help="which side runs AFTER's binary in the second run of a pair",
    )
    args = parser.parse_args()
    builds = {"before": args.before, "after": args.after}
    runs = {"before": [], "after": []}
    for pair in range(1, args.pairs + 1):
        for label, binary in builds.items():
            if args.vary == "servers":
                servers, load_generator = binary, args.before
            else:
                servers, load_generator = args.before, binary
            r = run_once(servers, load_generator, args.workload, args.requests, args.clients)
            runs[label].append(r)
            shown = " ".join(f"{k}={fmt.format(r[k])}" for k, _, fmt in MEASURES)
            print(f"pair {pair} {label:6s} {shown}", flush=True)
    print(
        f"\n{args.workload}, {args.pairs} pairs of {args.requests} requests at {args.clients} clients,"
        f" {args.vary} varied"
    )
    print(f"{'':34s} {'before':>10s} {'after':>10s} {'change':>8s}")
    for key, name, fmt in MEASURES:
        b = statistics.mean(r[key] for r in runs["before"])
        a = statistics.mean(r[key] for r in runs["after"])
        change = f"{100 * (a - b) / b:+.1f}%" if b else "-"
        print(f"{name:34s} {fmt.format(b):>10s} {fmt.format(a):>10s} {change:>8s}")
    lower = sum(a["ratio"] < b["ratio"] for b, a in zip(runs["before"], runs["after"]))
    print(f"the ratio is lower after in {lower} of {args.pairs} pairs")


if __name__ == "__main__":
    main()
