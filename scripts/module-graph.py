#!/usr/bin/env python3
"""Prints the import graph between keadm-batch's top-level modules (src/<module>.rs or
src/<module>/) and every cycle in it. Exits 1 when there is a cycle.

Usage: python3 scripts/module-graph.py [--dot]
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
SUPER = re.compile(r"\bsuper::([a-z_][a-z0-9_]*)")


def module_of(path):
    rel = os.path.relpath(path, ROOT)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def strip_tests(text):
    # Test modules may reach anywhere; only the shipped code's graph counts.
    at = text.find("#[cfg(test)]")
    return text if at < 0 else text[:at]


def graph():
    modules = set()
    edges = {}
    for dirpath, _, files in os.walk(ROOT):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            module = module_of(path)
            if module in ("main", "lib"):
                continue
            modules.add(module)
            text = strip_tests(open(path, encoding="utf-8").read())
            targets = USE.findall(text)
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                targets += re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group)
            for target in targets:
                if target != module:
                    edges.setdefault(module, set()).add(target)
    known = modules
    return {m: {t for t in edges.get(m, ()) if t in known} for m in sorted(modules)}


def cycles(g):
    # Tarjan's strongly connected components; any with more than one module is a cycle.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
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
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def main():
    g = graph()
    if "--dot" in sys.argv:
        print("digraph modules {")
        for m, ts in g.items():
            for t in sorted(ts):
                print(f"  {m} -> {t};")
        print("}")
    else:
        for m, ts in g.items():
            print(f"{m} -> {', '.join(sorted(ts)) or '(leaf)'}")
    found = cycles(g)
    for c in found:
        print("cycle: " + " <-> ".join(c), file=sys.stderr)
    if not found:
        print("no cycles between top-level modules", file=sys.stderr)
    sys.exit(1 if found else 0)


main()
