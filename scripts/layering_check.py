#!/usr/bin/env python3
"""Checks the library's link graph: no layer's archive refers to a symbol that only a layer above it
(or beside it) defines. The include path already makes an upward #include fail to compile
(src/CMakeLists.txt); this catches what an include cannot: a declaration written by hand, or a
function declared in a lower layer's header and defined above it, then called from below.

Usage: scripts/layering_check.py BUILD_DIR   (reads BUILD_DIR/layers/graph.txt, which CMake writes)
Exit 0 when every reference resolves within the layer or the layers it links (transitively); 1 with
one line per offending reference otherwise."""
import subprocess
import sys
from pathlib import Path


def read_graph(build: Path):
    graph, archives = {}, {}
    for line in (build / "layers" / "graph.txt").read_text().splitlines():
        fields = line.split()
        if not fields:
            continue
        target, archive, deps = fields[0], fields[1], fields[2:]
        graph[target] = deps
        archives[target] = Path(archive)
    return graph, archives


def below(graph, target):
    """Every layer `target` links, directly or through the layers it links."""
    seen, stack = set(), list(graph[target])
    while stack:
        t = stack.pop()
        if t in seen or t not in graph:
            continue
        seen.add(t)
        stack.extend(graph[t])
    return seen


def symbols(archive: Path, defined: bool):
    args = ["nm", "-C", "--defined-only" if defined else "--undefined-only", "-g", str(archive)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    result = set()
    for line in out.splitlines():
        if not line or line.endswith(":"):
            continue
        parts = line.split(" ", 2)
        if defined:
            # "address type name": only code and data a reference can bind to (not weak/COMDAT copies).
            if len(parts) == 3 and parts[1] in "TDBR":
                result.add(parts[2])
        else:
            result.add(line.strip().split(" ", 1)[-1])
    return result


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = Path(sys.argv[1])
    graph, archives = read_graph(build)
    defined_by = {}
    for target, archive in archives.items():
        for sym in symbols(archive, defined=True):
            defined_by.setdefault(sym, set()).add(target)
    problems = []
    for target, archive in sorted(archives.items()):
        allowed = below(graph, target) | {target}
        for sym in sorted(symbols(archive, defined=False)):
            owners = defined_by.get(sym)
            if owners and not owners & allowed:
                problems.append(f"{target} refers to {sym}, defined only in {', '.join(sorted(owners))} "
                                f"(which {target} does not link: it is not below it)")
    for p in problems:
        print(p)
    print(f"layering: {len(archives)} archives, {len(problems)} upward reference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
