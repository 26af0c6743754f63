#!/usr/bin/env python3
"""Fails when a release build of mvproxy in the repository resolves other features than the demo's.

A release build of mvproxy is one fat-LTO link of the whole program (Cargo.toml, several
minutes on two cores). Cargo resolves features for the packages a command selects together,
so `cargo build --release -p mvproxy -p X` can enable features of a shared dependency that
`cargo run --release -p mvproxy -- demo` (the README's first command) does not; the two
builds then differ, and every switch between them relinks the binary. This finds every
`cargo build|run ... --release` in the scripts, benches, CI and docs, and for each that
builds mvproxy asks `cargo tree` for the packages and features of mvproxy's dependency graph
under that selection; each must equal the graph of `-p mvproxy` alone. Commands with their
own `--target-dir` (the image's musl build) share nothing and are left out. No build runs.

Usage: scripts/check-release-features.py        (exit 1 on a difference, 0 otherwise)
"""

import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACES = ["scripts", "bench", ".ci", "docs", "README.md"]
COMMAND = re.compile(r"cargo\s+(?:build|run)\b[^\n;|&)>`]*")


def invocations():
    """(file:line, package selection) of every release build that includes mvproxy."""
    files = []
    for place in PLACES:
        path = os.path.join(ROOT, place)
        if os.path.isfile(path):
            files.append(path)
        for parent, _, names in os.walk(path):
            files.extend(os.path.join(parent, n) for n in sorted(names))
    for path in files:
        if os.path.samefile(path, __file__):
            continue
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, 1):
            for match in COMMAND.finditer(line):
                try:
                    words = shlex.split(match.group(0))
                except ValueError:
                    words = match.group(0).split()
                if "--release" not in words or "--target-dir" in words:
                    continue
                packages = sorted(
                    {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-p", "--package")}
                )
                if packages and "mvproxy" not in packages:
                    continue
                where = f"{os.path.relpath(path, ROOT)}:{number}"
                yield where, tuple(packages) or ("--workspace",)


def graph(selection):
    """The packages and features of mvproxy's dependency graph when `selection` is built."""
    args = []
    for package in selection:
        args += ["--workspace"] if package == "--workspace" else ["-p", package]
    out = subprocess.run(
        ["cargo", "tree", "--locked", "--no-dedupe", "-e", "normal,build", "--prefix", "none",
         "--format", "{p} [{f}]", "--target", "all", *args],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    for root in out.split("\n\n"):
        if root.startswith("mvproxy v"):
            return {line.removesuffix(" (*)") for line in root.splitlines()}
    sys.exit(f"check-release-features: no mvproxy in `cargo tree {' '.join(args)}`")


def main():
    demo = graph(("mvproxy",))
    failed = False
    seen = {}
    for where, selection in invocations():
        if selection not in seen:
            seen[selection] = graph(selection)
        features = seen[selection]
        if features == demo:
            print(f"ok  {where}: {' '.join(selection)}")
            continue
        failed = True
        print(f"DIFFERS  {where}: {' '.join(selection)} builds another mvproxy than -p mvproxy:")
        for line in sorted(features - demo):
            print(f"  + {line}")
        for line in sorted(demo - features):
            print(f"  - {line}")
    if failed:
        print("check-release-features: build mvproxy alone (-p mvproxy) in the lines above, "
              "or align the features in Cargo.toml", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
