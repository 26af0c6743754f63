#!/usr/bin/env python3
"""What the per-request logs that `LATENCIES=DIR bench/realpath.py ...` keeps say about the tails.

    python3 bench/latencies.py DIR [LABEL ...]

For each client protocol, rate and arrival pattern:

* **paired**: each LABEL's p50 and p99 minus HAProxy's *in the same repeat* (the two ran seconds
  apart, on the same machine state), the median over the repeats and in how many repeats it was
  at or below HAProxy's; and, for two LABELs, the same between them. Give one build twice
  (`a=BIN b=BIN`) and the difference between its copies is the machine's: a difference to HAProxy
  no larger is not the proxy's (bench/PERF_NOTES.md, twenty-fifth round).
* **held back**: bursts (oha's, 16 requests sent together) whose *fastest* request took over
  HELD µs (default 1500): the whole burst waited, something other than the burst's own work
  held the core. Counted for every configuration, the upstream alone included, since what holds
  them all is the machine.
* **pooled**: every repeat's requests of a LABEL together, p50 and p99 minus HAProxy's.

As in `bench/realpath.py`, the requests sent in each run's first 50 ms (its connections' TLS
handshakes, `WARMUP_US`) are left out everywhere.

LABELs default to every configuration in DIR other than `upstream`, `haproxy` and `nginx`.
"""

import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realpath import WARMUP_US, logged_requests, percentiles, settled  # noqa: E402

PEERS = ("upstream", "haproxy", "nginx")
try:
    HELD = float(os.environ.get("HELD", "1500"))
except ValueError:
    sys.exit(f"HELD={os.environ['HELD']!r}: give a latency in µs")
# oha sends a burst's requests within a few hundred µs; the next burst is milliseconds later.
BURST_GAP_US = 1000


def runs(directory):
    """{(proto, rate, pattern): {label: {repeat: path}}} from the file names realpath.py gives."""
    found = collections.defaultdict(lambda: collections.defaultdict(dict))
    for name in os.listdir(directory):
        stem, ext = os.path.splitext(name)
        parts = stem.rsplit("-", 4)
        if ext not in (".tsv", ".sqlite") or len(parts) != 5:
            continue
        label, proto, rate, rep, pattern = parts
        found[(proto, int(rate), pattern)][label][int(rep)] = os.path.join(directory, name)
    return found


def settled_of(path):
    """The latencies of a kept log's requests, its run's first WARMUP_US left out."""
    return settled(logged_requests(path))


def held_back(path):
    rows = logged_requests(path)
    first = rows[0][0] if rows else 0
    bursts = []
    for start, latency in rows:
        if start - first < WARMUP_US:
            continue
        if bursts and start - bursts[-1][-1][0] < BURST_GAP_US:
            bursts[-1].append((start, latency))
        else:
            bursts.append([(start, latency)])
    return sum(min(latency for _, latency in b) > HELD for b in bursts)


def paired(reps_a, reps_b):
    """Median p50 and p99 differences of a to b over their common repeats, and the counts at or below."""
    common = sorted(set(reps_a) & set(reps_b))
    diffs = [[x - y for x, y in zip(percentiles(settled_of(reps_a[r])), percentiles(settled_of(reps_b[r])))]
             for r in common]
    cells = []
    for i in (0, 1):
        d = [row[i] for row in diffs]
        cells.append(f"{statistics.median(d):+.0f} ({sum(x <= 0 for x in d)} of {len(d)})")
    return " / ".join(cells)


def main():
    if len(sys.argv) < 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(__doc__)
    found = runs(sys.argv[1])
    if not found:
        sys.exit(f"{sys.argv[1]}: no logs named as `LATENCIES` names them")
    for (proto, rate, pattern), by_label in sorted(found.items(), key=lambda kv: (kv[0][0] != "h2", -kv[0][1], kv[0][2])):
        labels = sys.argv[2:] or sorted(label for label in by_label if label not in PEERS)
        missing = [label for label in labels + ["haproxy"] if label not in by_label]
        if missing:
            sys.exit(f"{', '.join(missing)}: no logs for {proto} at {rate} req/s {pattern} in {sys.argv[1]}")
        client = "HTTP/2" if proto == "h2" else "HTTP/1.1"
        print(f"{client} client, {rate} req/s {pattern}: p50 / p99 minus the other's in the same repeat, "
              "median (repeats at or below)")
        pooled = {label: percentiles([x for path in by_label[label].values() for x in settled_of(path)])
                  for label in labels + ["haproxy"]}
        for label in labels:
            ha = pooled["haproxy"]
            print(f"  {label} - haproxy: {paired(by_label[label], by_label['haproxy'])}; pooled "
                  f"{pooled[label][0] - ha[0]:+.0f} / {pooled[label][1] - ha[1]:+.0f}")
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                print(f"  {a} - {b}: {paired(by_label[a], by_label[b])}")
        if pattern == "bursts":
            counts = ", ".join(f"{label} {sum(held_back(p) for p in by_label[label].values())}"
                               for label in sorted(by_label))
            print(f"  bursts held back (fastest request over {HELD:.0f} µs): {counts}")


if __name__ == "__main__":
    main()
