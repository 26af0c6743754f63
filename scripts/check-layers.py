#!/usr/bin/env python3
"""Fails when modules of one folder import each other in a cycle, at any depth.

The request path of mvproxy-core reads one way (ARCHITECTURE.md): each top-level module may
use the ones below it, never one above, and the same holds inside every module folder
(`discovery/`: fetch, snapshot, refresh, ...). This reads every `crate::`, `self::` and
`super::` path in each crate's sources (comments, strings and `#[cfg(test)]` items left out:
tests may reach across), resolves it to the module it names, and for every module with child
modules builds the graph between those children (an import from inside child x of something
inside sibling y is x -> y), then prints every cycle it finds (Tarjan's strongly connected
components). Exit 1 on a cycle, 0 otherwise.

Usage: scripts/check-layers.py [SRC_DIR ...]   (default: every crate of the workspace)
       scripts/check-layers.py --graph [SRC_DIR ...]   also prints the edges
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """Blanks out comments (doc comments included), string and char literals."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif re.match(r'b?r#*"', text[i : i + 8]):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"' or text.startswith('b"', i):
            i += 2 if c == "b" else 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x..'", text[i:])
            i += m.end()
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, i):
    """Index just past the brace block opening at text[i] == '{'."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


CFG_TEST = re.compile(r"#\[cfg\(test\)\]")


def strip_cfg_test(text):
    """Drops every item under `#[cfg(test)]`; returns (text, names of `mod x;` it declared)."""
    test_mods = []
    out, pos = [], 0
    for m in CFG_TEST.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        k = m.end()
        semi = text.find(";", k)
        brace = text.find("{", k)
        if semi >= 0 and (brace < 0 or semi < brace):
            decl = re.search(r"\bmod\s+(" + IDENT + r")\s*;", text[k : semi + 1])
            if decl:
                test_mods.append(decl.group(1))
            pos = semi + 1
        else:
            pos = matching_brace(text, brace)
    out.append(text[pos:])
    return "".join(out), test_mods


def module_files(src):
    """(module path as a list of segments, file path) for each source file of the crate."""
    for root, _dirs, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            parts = rel[:-3].split(os.sep)
            if parts == ["lib"] or parts == ["main"]:
                parts = []
            elif parts[-1] == "mod":
                parts = parts[:-1]
            yield parts, os.path.join(root, f)


def entry_paths(group):
    """Each entry of a `{a::b, c, d::{e, f}}` group (without braces) as segment lists."""
    entries, depth, cur = [], 0, []
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            entries.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    entries.append("".join(cur))
    out = []
    for e in entries:
        e = e.strip()
        if not e:
            continue
        head, _, rest = e.partition("{")
        segs = [x for x in re.split(r"\s*::\s*", head.strip()) if x]
        if rest:
            for sub in entry_paths(rest.rsplit("}", 1)[0]):
                out.append(segs + sub)
        else:
            out.append(segs)
    return out


PATH = re.compile(
    r"\b(crate|self|super(?:\s*::\s*super)*)((?:\s*::\s*" + IDENT + r")*)\s*::\s*(\{)?"
)


def module_edges(src):
    """Edges between modules of the crate, as (importing module, imported module) paths.

    Every `crate::`, `self::` and `super::` path is resolved to the longest prefix that names
    a module of the crate; `#[cfg(test)]` items and the files only they reach are left out.
    """
    files = dict((tuple(p), f) for p, f in module_files(src))
    excluded, texts = set(), {}
    for parts, path in sorted(files.items(), key=lambda kv: len(kv[0])):
        with open(path, encoding="utf-8") as fh:
            text, test_mods = strip_cfg_test(strip_comments_and_strings(fh.read()))
        texts[parts] = text
        for name in test_mods:
            excluded.add(parts + (name,))
    modules = set(files)
    edges = set()
    for parts, text in texts.items():
        if any(parts[: i + 1] in excluded for i in range(len(parts))):
            continue
        for m in PATH.finditer(text):
            kind = m.group(1)
            if kind == "crate":
                base = ()
            elif kind == "self":
                base = parts
            else:
                ups = kind.count("super")
                if ups > len(parts):
                    continue
                base = parts[: len(parts) - ups]
            prefix = [x for x in re.split(r"\s*::\s*", m.group(2)) if x]
            if m.group(3):
                end = matching_brace(text, m.start(3))
                tails = entry_paths(text[m.start(3) + 1 : end - 1])
            else:
                nxt = re.match(IDENT, text[m.end() :])
                tails = [[nxt.group(0)]] if nxt else [[]]
            for tail in tails:
                full = tuple(base) + tuple(prefix) + tuple(tail)
                target = max(
                    (full[:k] for k in range(len(full) + 1) if full[:k] in modules),
                    key=len,
                )
                if target != parts:
                    edges.add((parts, target))
    return modules, edges


def folder_graphs(modules, edges):
    """For each module with child modules, the graph between its children: an import from
    anywhere inside child x of anything inside its sibling y is the edge x -> y."""
    graphs = {}
    for folder in modules:
        children = {m[len(folder)] for m in modules if len(m) > len(folder) and m[: len(folder)] == folder}
        if len(children) > 1:
            graphs[folder] = (children, {})
    for frm, to in edges:
        common = 0
        while common < min(len(frm), len(to)) and frm[common] == to[common]:
            common += 1
        if common == len(frm) or common == len(to):
            continue  # a module and its own descendant or ancestor
        folder = frm[:common]
        if folder in graphs:
            graphs[folder][1].setdefault(frm[common], set()).add(to[common])
    return graphs


def cycles(nodes, edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


CRATES = ["proxy/core/src", "proxy/cli/src", "proxy/demo/src", "proxy/standin/src", "telemetry/src"]


def main(argv):
    show = "--graph" in argv
    args = [a for a in argv if a != "--graph"]
    root = os.path.join(os.path.dirname(__file__), "..")
    srcs = args or [os.path.join(root, c) for c in CRATES]
    found_any = False
    for src in srcs:
        modules, edges = module_edges(src)
        graphs = folder_graphs(modules, edges)
        for folder in sorted(graphs):
            nodes, g = graphs[folder]
            where = os.path.normpath(os.path.join(src, *folder))
            if show:
                for v in sorted(nodes):
                    print(f"{where}: {v} -> {', '.join(sorted(g.get(v, ()))) or '-'}")
            for comp in cycles(nodes, g):
                found_any = True
                inner = {v: sorted(w for w in g.get(v, ()) if w in comp) for v in comp}
                print(f"check-layers: {where}: modules importing each other in a cycle: {', '.join(comp)}", file=sys.stderr)
                for v in comp:
                    print(f"  {v} -> {', '.join(inner[v])}", file=sys.stderr)
    return 1 if found_any else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
