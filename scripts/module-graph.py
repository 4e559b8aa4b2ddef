#!/usr/bin/env python3
"""Prints keadm-batch's module import graph and every cycle in it. Exits 1 when there is
a cycle.

The graph is drawn at every level of the module tree: between the top-level modules
(src/<module>.rs or src/<module>/), and between the sibling submodules inside each
directory module (src/transport/ssh.rs and src/transport/jump.rs, say). A submodule
using an item of its parent (`super::TransportError`) is the usual Rust shape and is not
an edge; a module using its sibling (`super::jump::Bridge`, `crate::transport::jump`) is.
Test code (everything after the first `#[cfg(test)]` of a file, and files of a `tests`
module directory such as src/pipeline/tests/) may reach anywhere and is left out.

Usage: python3 scripts/module-graph.py [--dot]
       python3 scripts/module-graph.py --check-doc docs/architecture.md
       python3 scripts/module-graph.py --write-doc docs/architecture.md

--check-doc also fails when the graph drawn in the document (the fenced block after the
line `<!-- module-graph -->`) is not the graph of the code; --write-doc redraws it.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# A path that starts at the crate root or a parent: `crate::a::b`, `super::super::x`.
PATH = re.compile(rf"\b((?:crate|self|super)(?:::super)*(?:::{IDENT})*)(::\{{)?")


def module_path(path):
    """src/transport/ssh.rs -> ("transport", "ssh"); src/transport/mod.rs -> ("transport",)."""
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    return tuple(rel)


def is_dir_module(path):
    return os.path.basename(path) == "mod.rs" or module_path(path) == ()


def strip_tests(text):
    at = text.find("#[cfg(test)]")
    return text if at < 0 else text[:at]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def brace_items(text, start):
    """The top-level comma-separated items of the `{...}` group opening at text[start]."""
    depth, item, items = 0, "", []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                items.append(item)
                break
        elif ch == "," and depth == 1:
            items.append(item)
            item = ""
            continue
        item += ch
    return [i.strip() for i in items if i.strip()]


def resolve(prefix, here, dir_module):
    """Absolute module path of `prefix` (`super::x::y`) written in module `here`."""
    parts = prefix.split("::")
    # Inside a file module, `self` is the file; `super` its parent. In a mod.rs (or
    # lib.rs), `self` is the directory module itself.
    base = list(here)
    if parts[0] == "crate":
        base, parts = [], parts[1:]
    elif parts[0] == "self":
        parts = parts[1:]
    while parts and parts[0] == "super":
        base = base[:-1]
        parts = parts[1:]
    return tuple(base + parts)


def targets(text, here, dir_module):
    out = []
    for m in PATH.finditer(text):
        full = resolve(m.group(1), here, dir_module)
        if m.group(2):
            for item in brace_items(text, m.end(2) - 1):
                head = re.match(IDENT, item)
                if head and head.group(0) != "self":
                    out.append(full + (head.group(0),))
                else:
                    out.append(full)
        else:
            out.append(full)
    return out


def graphs():
    files = []
    for dirpath, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".rs"):
                files.append(os.path.join(dirpath, name))
    modules = {module_path(f) for f in files}
    # Every module has a parent; a directory module's children are its submodules.
    children = {}
    for m in modules:
        if m and "tests" not in m:
            children.setdefault(m[:-1], set()).add(m[-1])
    edges = {parent: {c: set() for c in kids} for parent, kids in children.items()}
    for f in sorted(files):
        here = module_path(f)
        if not here or "tests" in here:
            continue  # lib.rs/main.rs declare modules only; test modules reach anywhere
        text = strip_comments(strip_tests(open(f, encoding="utf-8").read()))
        for target in targets(text, here, is_dir_module(f)):
            # The deepest common ancestor decides the level the edge lives on.
            common = 0
            while common < min(len(here), len(target)) and here[common] == target[common]:
                common += 1
            if common >= len(here) or common >= len(target):
                continue  # a module using its own items, its parent's, or a child's
            parent = here[:common]
            src, dst = here[common], target[common]
            if dst in children.get(parent, ()) and src != dst:
                edges[parent][src].add(dst)
    return edges


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


def name(parent, child):
    return "::".join(parent + (child,))


MARKER = "<!-- module-graph -->"


def doc_block(lines):
    return "```text\n" + "\n".join(lines) + "\n```\n"


def sync_doc(path, lines, write):
    text = open(path, encoding="utf-8").read()
    at = text.find(MARKER)
    if at < 0:
        print(f"{path} has no line {MARKER!r} to draw the graph after", file=sys.stderr)
        return False
    start = at + len(MARKER) + 1
    end = start
    if text.startswith("```", start):
        end = text.index("```", start + 3) + 4
    drawn = text[start:end]
    if drawn == doc_block(lines):
        return True
    if write:
        open(path, "w", encoding="utf-8").write(text[:start] + doc_block(lines) + text[end:])
        return True
    print(
        f"The module graph in {path} is not the code's; redraw it with "
        f"`python3 scripts/module-graph.py --write-doc {path}`.",
        file=sys.stderr,
    )
    return False


def main():
    all_edges = graphs()
    found = []
    lines = []
    dot = "--dot" in sys.argv
    if dot:
        print("digraph modules {")
    for parent in sorted(all_edges):
        g = all_edges[parent]
        if parent and not any(g.values()):
            continue
        if not dot:
            lines.append(f"[{'::'.join(parent) or 'crate'}]")
        for m in sorted(g):
            ts = sorted(g[m])
            if dot:
                for t in ts:
                    print(f'  "{name(parent, m)}" -> "{name(parent, t)}";')
            else:
                lines.append(f"  {m} -> {', '.join(ts) or '(leaf)'}")
        found += [[name(parent, m) for m in c] for c in cycles(g)]
    if dot:
        print("}")
    doc_ok = True
    for flag in ("--check-doc", "--write-doc"):
        if flag in sys.argv:
            doc_ok = sync_doc(sys.argv[sys.argv.index(flag) + 1], lines, flag == "--write-doc")
            break
    else:
        if not dot:
            print("\n".join(lines))
    for c in found:
        print("cycle: " + " <-> ".join(c), file=sys.stderr)
    if not found:
        print("no cycles between modules at any level", file=sys.stderr)
    sys.exit(1 if found or not doc_ok else 0)


main()
