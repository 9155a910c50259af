#!/usr/bin/env python3
"""Fails if the modules of a crate depend on each other in a cycle.

ARCHITECTURE.md lays the modules out in layers whose dependencies point
one way, down. This check keeps that true: for every crate it reads each
module's `use crate::...`, `use super::...` and `crate::a::b::` paths
(comments and `#[cfg(test)]` code left out: tests may reach anywhere),
lifts each dependency to the two sibling modules it connects (a
dependency of `kube::store::writes` on `kube::admission` is one of
`kube::store` on `kube::admission`), and reports every strongly connected
set of siblings. A module and its own descendants are not siblings: a
child using its parent's helpers is not a cycle.

Usage: scripts/check-module-cycles.py [CRATE_SRC_DIR ...]
(default: the src directory of every crate in the workspace).
"""

import collections
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["server/src", "raft/src", "storage/src", "proto/src", "benches/src", "tests/src"]


def modules(src):
    """Module path (`kube::store`) -> file, for every non-test file."""
    found = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if "tests" in rel or (rel and rel[0] == "bin"):
                continue
            found["::".join(rel)] = os.path.join(dirpath, f)
    return found


def resolve(mods, current, path):
    """The longest module a `crate::`/`super::`/`self::` path names."""
    parts = path.split("::")
    if parts[0] == "crate":
        base, parts = [], parts[1:]
    elif parts[0] in ("super", "self"):
        base = current.split("::") if current else []
        while parts and parts[0] == "super":
            base, parts = base[:-1], parts[1:]
        if parts and parts[0] == "self":
            parts = parts[1:]
    else:
        return None
    full = base + parts
    for i in range(len(full), 0, -1):
        name = "::".join(full[:i])
        if name in mods:
            return name
    return None


def code_of(path):
    src = open(path, encoding="utf-8").read()
    src = src.split("#[cfg(test)]")[0]
    src = re.sub(r'"(?:\\.|[^"\\])*"', '""', src)
    return re.sub(r"//[^\n]*", "", src)


USE = re.compile(r"\buse\s+((?:crate|super|self)(?:::\w+)*)(?:::\{([^;]*)\})?")
PATH = re.compile(r"\b((?:crate|super)(?:::[a-z_0-9]+)+)::")


def dependencies(mods):
    edges = set()
    for name, path in mods.items():
        src = code_of(path)
        targets = []
        for head, group in USE.findall(src):
            targets.append(head)
            for part in re.split(r",\s*", group or ""):
                part = part.strip().split(" as ")[0].split("::{")[0]
                if part and part != "self":
                    targets.append(head + "::" + part)
        targets.extend(PATH.findall(src))
        for t in targets:
            dep = resolve(mods, name, t)
            if dep and dep != name:
                edges.add((name, dep))
    return edges


def siblings(edges):
    lifted = set()
    for a, b in edges:
        ap, bp = a.split("::"), b.split("::")
        i = 0
        while i < min(len(ap), len(bp)) and ap[i] == bp[i]:
            i += 1
        if i == len(ap) or i == len(bp):
            continue  # one contains the other
        lifted.add(("::".join(ap[: i + 1]), "::".join(bp[: i + 1])))
    return lifted


def cycles(edges):
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    crates = sys.argv[1:] or [os.path.join(ROOT, c) for c in CRATES]
    failed = False
    for src in crates:
        mods = modules(src)
        lifted = siblings(dependencies(mods))
        for comp in cycles(lifted):
            failed = True
            print(f"{os.path.relpath(src, ROOT)}: modules in a cycle: {', '.join(comp)}")
            for a, b in sorted(lifted):
                if a in comp and b in comp:
                    print(f"    {a} -> {b}")
    if failed:
        sys.exit(1)
    print(f"no module cycles in {len(crates)} crates")


if __name__ == "__main__":
    main()
