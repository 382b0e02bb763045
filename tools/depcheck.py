#!/usr/bin/env python3
"""Finds circles between source files: file A calls (or reads) a symbol that
file B defines, and B, directly or through others, one that A defines.

Reads the object files of a build with `nm` (what the linker sees, so macros,
inline functions and comments do not count), maps each object back to its
source file, and prints every strongly connected component of more than one
file. Files listed in ALLOWED may form a circle among themselves: the Jinja
interpreter's evaluator, filters and methods call each other by the nature of
the language (a filter may evaluate an expression that calls a filter).

Usage: tools/depcheck.py [BUILD_DIR]   (default build/; exit 1 on a circle)
"""
import os
import subprocess
import sys
from collections import defaultdict

# Inherent recursion: expression evaluation <-> filters <-> methods <-> values.
ALLOWED = ("model/jinja/", "model/jinja_")

# Objects of these targets are tests, tools and fuzz harnesses: their calls
# into the libraries are uses, never part of a library's circle.
SKIP_DIRS = ("tests", "tools", "CMakeFiles/CMakeScratch")


def source_of(obj):
    """build/model/CMakeFiles/sl_model.dir/tokenizer.c.o -> model/tokenizer.c"""
    parts = obj.split(os.sep)
    if "CMakeFiles" not in parts:
        return None
    i = parts.index("CMakeFiles")
    folder = parts[:i]
    rest = parts[i + 2:]            # skip "<target>.dir"
    name = os.sep.join(rest)
    if name.endswith(".o"):
        name = name[:-2]
    return os.path.normpath(os.path.join(*folder, name)) if folder else name


def symbols(obj):
    out = subprocess.run(["nm", "-P", "--no-sort", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRCGSVW":   # global definitions (lower case ones are file-local)
            defined.add(name)
    return defined, used


def sccs(graph):
    """Tarjan's algorithm, iterative."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    objs = []
    for dirpath, _, files in os.walk(build):
        rel = os.path.relpath(dirpath, build)
        if rel.split(os.sep)[0] in SKIP_DIRS:
            continue
        objs += [os.path.join(dirpath, f) for f in files if f.endswith(".o")]
    if not objs:
        print(f"depcheck: no object files under {build}", file=sys.stderr)
        return 2
    owner, uses = {}, {}
    for o in objs:
        src = source_of(os.path.relpath(o, build))
        if src is None:
            continue
        d, u = symbols(o)
        for s in d:
            owner.setdefault(s, src)
        uses[src] = uses.get(src, set()) | u
    graph = defaultdict(set)
    for src, used in uses.items():
        graph[src]
        for s in used:
            dst = owner.get(s)
            if dst and dst != src:
                graph[src].add(dst)
    bad = [c for c in sccs(graph) if len(c) > 1 and not all(f.startswith(ALLOWED) for f in c)]
    for c in bad:
        print("circle: " + " <-> ".join(c))
    print(f"depcheck: {len(graph)} files, {sum(len(v) for v in graph.values())} edges, {len(bad)} circle(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
