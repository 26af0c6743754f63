#!/usr/bin/env python3
"""Removes what older builds left in a cargo target directory shared across clones.

The fuzz build (scripts/fuzz.sh) and the release binary (scripts/release-binary.sh) build in
${XDG_CACHE_HOME:-$HOME/.cache}/mvproxy so a fresh clone reuses the compiled dependencies.
Cargo names each compiled unit `<crate>-<16 hex digits>`, a hash of what it was built from,
and never deletes a unit it no longer uses. Two inputs change that hash from one run to the
next: a path dependency outside the building workspace (fuzz/ depends on ../proxy/core, so
every clone at a new path compiles mvproxy-core and all fuzz targets anew, about 1 GB) and
RUSTFLAGS (each new profile of the profile-guided build names another file, so every crate is
compiled anew, about 350 MB). A disk filled this way once failed CI in the middle of a link.

Run before a build, this keeps, for every crate name, the hashes written within an hour of
that name's newest, and removes the others from deps/, .fingerprint/ and build/. Units of one
build are written within minutes of each other, so two versions of one crate that a build
uses together (both are compiled in the same build) are both kept; a unit of a build hours
before the newest is one no build uses since. A unit removed by mistake costs a rebuild,
never a wrong binary: cargo compiles whatever it finds missing.

Usage: scripts/prune-target.py TARGET_DIR   (prints what it freed to stderr)
"""

import os
import re
import shutil
import sys

UNIT = re.compile(r"^(?P<name>.+)-(?P<hash>[0-9a-f]{16})(?:\..+)?$")
KINDS = ("deps", ".fingerprint", "build")
WINDOW_SECONDS = 3600


def profiles(target):
    """Every `<profile>` directory of the target directory: target/release and
    target/<triple>/release (a `--target` build keeps build scripts and macros in the first)."""
    for top in [target] + [os.path.join(target, d) for d in sorted(os.listdir(target))]:
        for profile in ("release", "debug"):
            path = os.path.join(top, profile)
            if os.path.isdir(os.path.join(path, "deps")):
                yield path


def mtime(path):
    return os.lstat(path).st_mtime


def size(path):
    if os.path.isdir(path) and not os.path.islink(path):
        return sum(
            os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs
        )
    return os.lstat(path).st_size


def stale(profile):
    """Paths under the profile directory that belong to units older than their name's newest
    by more than the window."""
    units = {}  # (name, hash) -> [paths]
    for kind in KINDS:
        folder = os.path.join(profile, kind)
        if not os.path.isdir(folder):
            continue
        for entry in os.listdir(folder):
            m = UNIT.match(entry)
            if m:
                units.setdefault((m["name"], m["hash"]), []).append(os.path.join(folder, entry))
    written = {unit: max(mtime(p) for p in paths) for unit, paths in units.items()}
    newest = {}
    for (name, _), when in written.items():
        newest[name] = max(newest.get(name, when), when)
    for (name, h), when in written.items():
        if newest[name] - when > WINDOW_SECONDS:
            yield from units[(name, h)]


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    target = sys.argv[1]
    if not os.path.isdir(target):
        return 0
    freed = 0
    for profile in profiles(target):
        for path in stale(profile):
            freed += size(path)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
    if freed:
        print(f"prune-target: {freed / 1e6:.0f} MB of older builds removed from {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
