#!/usr/bin/env python3
"""Fails when the top-level modules of a crate import each other in a cycle.

The request path of mvproxy-core reads one way (ARCHITECTURE.md): each top-level module may
use the ones below it, never one above. This reads every `crate::` and `super::` path in the
crate's sources (comments, strings and `#[cfg(test)]` items left out: tests may reach across),
builds the graph between top-level modules, and prints every cycle it finds (Tarjan's strongly
connected components). Exit 1 on a cycle, 0 otherwise.

Usage: scripts/check-layers.py [SRC_DIR]   (default proxy/core/src)
       scripts/check-layers.py --graph [SRC_DIR]   also prints the edges
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


def first_segments(group):
    """First path segment of each entry of a `{a::b, c, d::{e, f}}` group (without braces)."""
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
    segs = []
    for e in entries:
        m = re.match(r"\s*(" + IDENT + r")", e)
        if m:
            segs.append(m.group(1))
    return segs


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


def edges_of(src):
    files = dict((tuple(p), f) for p, f in module_files(src))
    # Files reached only through `#[cfg(test)] mod x;` (and what they declare) are tests.
    excluded, texts = set(), {}
    for parts, path in sorted(files.items(), key=lambda kv: len(kv[0])):
        with open(path, encoding="utf-8") as fh:
            text, test_mods = strip_cfg_test(strip_comments_and_strings(fh.read()))
        texts[parts] = text
        for name in test_mods:
            excluded.add(parts + (name,))
    edges = {}
    top_level = {p[0] for p in files if p}
    for parts, text in texts.items():
        if not parts or any(parts[: i + 1] in excluded for i in range(len(parts))):
            continue
        here = parts[0]
        for m in re.finditer(r"\b(crate|super(?:\s*::\s*super)*)\s*::\s*(\{|" + IDENT + ")", text):
            if m.group(1) != "crate":
                # `super` of module a::b is a: each `super` drops one segment.
                ups = m.group(1).count("super")
                if ups < len(parts):
                    continue  # still inside the same top-level module
            if m.group(2) == "{":
                end = matching_brace(text, m.start(2))
                segs = first_segments(text[m.start(2) + 1 : end - 1])
            else:
                segs = [m.group(2)]
            for seg in segs:
                if seg in top_level and seg != here:
                    edges.setdefault(here, set()).add(seg)
    return top_level, edges


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


def main(argv):
    show = "--graph" in argv
    args = [a for a in argv if a != "--graph"]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "proxy", "core", "src")
    nodes, edges = edges_of(src)
    if show:
        for v in sorted(nodes):
            print(f"{v} -> {', '.join(sorted(edges.get(v, ()))) or '-'}")
    found = cycles(nodes, edges)
    for comp in found:
        inner = {v: sorted(w for w in edges.get(v, ()) if w in comp) for v in comp}
        print(f"check-layers: modules importing each other in a cycle: {', '.join(comp)}", file=sys.stderr)
        for v in comp:
            print(f"  {v} -> {', '.join(inner[v])}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
