#!/usr/bin/env python3
"""What the per-request logs that `LATENCIES=DIR bench/realpath.py ...` keeps say about the tails.

    python3 bench/latencies.py DIR[:DIR ...] [LABEL ...]

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
* **by position** (bursts only): when each answer of a whole burst came, counted from the
  burst's first request sent, ordered by arrival (the 1st answer, the 2nd, ..., the 16th): each
  LABEL's p50 over every burst minus HAProxy's, for the 1st, 2nd, 4th, 8th and last. Two proxies
  that spend the same CPU on a burst can still differ here: one that answers the first request
  alone and the rest together (bench/PERF_NOTES.md, thirty-second round) shows an early 1st
  and a late 2nd.
* **pooled**: every repeat's requests of a LABEL together, p50 and p99 minus HAProxy's, and how
  far the p99 difference could move with the machine: its 90 % interval over RESAMPLES (default
  1000) resamplings of the repeats (a repeat drawn with its HAProxy run, seeded so a directory
  always reads the same). An interval that spans zero is a difference the run cannot tell from
  the machine's.

**steal**: where DIR has realpath.py's `steal.tsv`, each configuration's steal time on the proxies'
core per run (the time the host held that core's virtual CPU off it while it had work), median
and largest. QUIET=MS keeps, in each table, only the repeats in which every run compared there
(each LABEL's and HAProxy's) met at most MS of it: the proxies compared on the host's quiet
moments, none favoured (a repeat stays or goes for all of them). It says how many repeats that
keeps.

A LABEL `a+b` is the requests of `a` and `b` together, repeat by repeat: one build given twice is
then measured over twice the requests (its copies are the same binary).

As in `bench/realpath.py`, the requests sent in each run's first 50 ms (its connections' TLS
handshakes, `WARMUP_US`) are left out everywhere.

Several DIRs joined by `:` (runs of the same LABELs, on other days) are read as one run: each
DIR's repeats are numbered after the one before's, and each stays paired with its own HAProxy
run.

LABELs default to every configuration in DIR other than `upstream`, `haproxy` and `nginx`.
"""

import collections
import heapq
import itertools
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from realpath import BURST, STEAL_LOG, WARMUP_US, logged_requests, nearest_rank, percentiles, settled  # noqa: E402

PEERS = ("upstream", "haproxy", "nginx")
try:
    HELD = float(os.environ.get("HELD", "1500"))
except ValueError:
    sys.exit(f"HELD={os.environ['HELD']!r}: give a latency in µs")
try:
    RESAMPLES = int(os.environ.get("RESAMPLES", "1000"))
    if RESAMPLES < 10:
        raise ValueError
except ValueError:
    sys.exit(f"RESAMPLES={os.environ['RESAMPLES']!r}: give a whole number of at least 10")
try:
    QUIET = float(os.environ["QUIET"]) if os.environ.get("QUIET") else None
except ValueError:
    sys.exit(f"QUIET={os.environ['QUIET']!r}: give the most steal time a run may meet, in ms")
# oha sends a burst's requests within a few hundred µs; the next burst is milliseconds later.
BURST_GAP_US = 1000


def runs(directories):
    """{(proto, rate, pattern): {label: {repeat: path}}} from the file names realpath.py gives,
    each directory's repeats numbered after the last directory's; and {path: ms} of the runs'
    steal time, from the directories that have a STEAL_LOG."""
    found = collections.defaultdict(lambda: collections.defaultdict(dict))
    steal = {}
    offset = 0
    for directory in directories:
        steal.update(steal_of(directory))
        last = 0
        for name in os.listdir(directory):
            stem, ext = os.path.splitext(name)
            parts = stem.rsplit("-", 4)
            if ext not in (".tsv", ".sqlite") or len(parts) != 5 or not parts[3].isdigit():
                continue
            label, proto, rate, rep, pattern = parts
            last = max(last, int(rep))
            found[(proto, int(rate), pattern)][label][offset + int(rep)] = os.path.join(directory, name)
        offset += last
    return found, steal


def steal_of(directory):
    """{log path: ms} from `directory`'s STEAL_LOG (realpath.py writes a line per run: the log's
    name without its extension, a tab, the milliseconds); empty without one."""
    path = os.path.join(directory, STEAL_LOG)
    if not os.path.exists(path):
        return {}
    names = {os.path.splitext(name)[0]: name for name in os.listdir(directory)}
    steal = {}
    for n, line in enumerate(open(path), 1):
        stem, _, ms = line.rstrip("\n").partition("\t")
        try:
            steal[os.path.join(directory, names.get(stem, stem))] = float(ms)
        except ValueError:
            sys.exit(f"{path}:{n}: {line.strip()!r} is not a run's name, a tab and its steal in ms")
    return steal


def quiet_only(by_label, compared, steal):
    """`by_label` with only the repeats in which every run of `compared` met at most QUIET ms of
    steal, and how many repeats that keeps of how many; exits naming a run whose steal no
    STEAL_LOG gives."""
    repeats = set.intersection(*(set(by_label[m]) for m in compared))
    for m in compared:
        for r in repeats:
            if by_label[m][r] not in steal:
                sys.exit(f"QUIET: no steal time for {by_label[m][r]} (its directory has no {STEAL_LOG}: "
                         "runs of bench/realpath.py before it wrote one)")
    quiet = {r for r in repeats if all(steal[by_label[m][r]] <= QUIET for m in compared)}
    return {label: {r: p for r, p in reps.items() if r in quiet} for label, reps in by_label.items()}, \
        len(quiet), len(repeats)


def settled_of(path):
    """The latencies of a kept log's requests, its run's first WARMUP_US left out."""
    return settled(logged_requests(path))


def bursts_of(path):
    """The (start, latency) of each request of a kept bursts log, a list per burst, the run's
    first WARMUP_US left out."""
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
    return bursts


def held_back(path):
    return sum(min(latency for _, latency in b) > HELD for b in bursts_of(path))


# The answers `by_position` reports, counted from 1.
POSITIONS = (1, 2, 4, 8, BURST)


def by_position(paths):
    """For each of POSITIONS, the p50 over the whole bursts of `paths` of when that answer came
    (the position-th to complete), in µs since its burst's first request was sent."""
    done = collections.defaultdict(list)
    for path in paths:
        for burst in bursts_of(path):
            if len(burst) != BURST:
                continue
            first = min(start for start, _ in burst)
            ends = sorted(start + latency - first for start, latency in burst)
            for position in POSITIONS:
                done[position].append(ends[position - 1])
    return {position: percentiles(done[position])[0] for position in POSITIONS if done[position]}


def by_repeat(by_label, label):
    """{repeat: latencies} of `label`, or of each `+`-joined label together, for the repeats all have."""
    members = label.split("+")
    common = set.intersection(*(set(by_label[m]) for m in members))
    return {r: [x for m in members for x in settled_of(by_label[m][r])] for r in common}


def pooled_difference(reps_a, reps_b):
    """Pooled p50 and p99 of a over the repeats both have, minus b's."""
    common = set(reps_a) & set(reps_b)
    a = percentiles([x for r in common for x in reps_a[r]])
    b = percentiles([x for r in common for x in reps_b[r]])
    return a[0] - b[0], a[1] - b[1]


def p99(reps, repeats):
    """The p99 of the requests of `repeats` (a repeat may come more than once) as `percentiles`
    takes it, without sorting them all: the k-th largest. NaN for no requests."""
    n = sum(len(reps[r]) for r in repeats)
    if not n:
        return float("nan")
    k = n - nearest_rank(n, 99)
    return heapq.nlargest(k, itertools.chain.from_iterable(reps[r] for r in repeats))[-1]


def p99_interval(reps_a, reps_b):
    """The 90 % interval of the pooled p99 difference over RESAMPLES resamplings of the repeats."""
    common = sorted(set(reps_a) & set(reps_b))
    draw = random.Random(len(common))
    diffs = []
    for _ in range(RESAMPLES):
        sample = draw.choices(common, k=len(common))
        diffs.append(p99(reps_a, sample) - p99(reps_b, sample))
    diffs.sort()
    return diffs[RESAMPLES // 20], diffs[RESAMPLES - 1 - RESAMPLES // 20]


def paired(reps_a, reps_b):
    """Median p50 and p99 differences of a to b over their common repeats, and the counts at or below."""
    common = sorted(set(reps_a) & set(reps_b))
    diffs = [[x - y for x, y in zip(percentiles(reps_a[r]), percentiles(reps_b[r]))] for r in common]
    cells = []
    for i in (0, 1):
        d = [row[i] for row in diffs]
        cells.append(f"{statistics.median(d):+.0f} ({sum(x <= 0 for x in d)} of {len(d)})")
    return " / ".join(cells)


def main():
    directories = sys.argv[1].split(":") if len(sys.argv) > 1 else []
    if not directories or not all(os.path.isdir(d) for d in directories):
        sys.exit(__doc__)
    found, steal = runs(directories)
    if not found:
        sys.exit(f"{sys.argv[1]}: no logs named as `LATENCIES` names them")
    for (proto, rate, pattern), by_label in sorted(found.items(), key=lambda kv: (kv[0][0] != "h2", -kv[0][1], kv[0][2])):
        labels = sys.argv[2:] or sorted(label for label in by_label if label not in PEERS)
        missing = [m for label in labels + ["haproxy"] for m in label.split("+") if m not in by_label]
        if missing:
            sys.exit(f"{', '.join(missing)}: no logs for {proto} at {rate} req/s {pattern} in {sys.argv[1]}")
        client = "HTTP/2" if proto == "h2" else "HTTP/1.1"
        print(f"{client} client, {rate} req/s {pattern}: p50 / p99 minus the other's in the same repeat, "
              "median (repeats at or below)")
        per_run = {label: [steal[p] for p in paths.values() if p in steal] for label, paths in sorted(by_label.items())}
        if any(per_run.values()):
            cells = ", ".join(f"{label} {statistics.median(ms):.0f} ({max(ms):.0f})" for label, ms in per_run.items() if ms)
            print(f"  steal on the proxies' core per run, ms, median (largest): {cells}")
        if QUIET is not None:
            compared = sorted({m for label in labels + ["haproxy"] for m in label.split("+")})
            by_label, kept, of = quiet_only(by_label, compared, steal)
            print(f"  QUIET: {kept} of {of} repeats, every run of {', '.join(compared)} in them met at most "
                  f"{QUIET:g} ms of steal")
            if kept == 0:
                continue
        reps = {label: by_repeat(by_label, label) for label in labels + ["haproxy"]}
        ha = reps["haproxy"]
        for label in labels:
            d50, d99 = pooled_difference(reps[label], ha)
            low, high = p99_interval(reps[label], ha)
            print(f"  {label} - haproxy: {paired(reps[label], ha)}; pooled {d50:+.0f} / {d99:+.0f} "
                  f"(p99 90 % interval {low:+.0f} to {high:+.0f})")
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                if set(a.split("+")).isdisjoint(b.split("+")):
                    print(f"  {a} - {b}: {paired(reps[a], reps[b])}")
        if pattern == "bursts":
            counts = ", ".join(f"{label} {sum(held_back(p) for p in by_label[label].values())}"
                               for label in sorted(by_label))
            print(f"  bursts held back (fastest request over {HELD:.0f} µs): {counts}")
            ha_at = by_position(by_label["haproxy"].values())
            for label in labels:
                at = by_position(p for m in label.split("+") for p in by_label[m].values())
                cells = ", ".join(f"{n}. {at[n] - ha_at[n]:+.0f}" for n in POSITIONS if n in at and n in ha_at)
                print(f"  {label} - haproxy, answers by position in the burst, p50 since its first send: {cells}")


if __name__ == "__main__":
    main()
