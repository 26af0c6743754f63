#!/usr/bin/env python3
"""Steady client load for the rolling-upgrade rehearsal on the real control plane.

Sends GET list requests (limit=1) at a fixed rate, in rotation over the targets that are in
service, and attributes each to the phase current when it was sent. The upgrade driver
(control-plane.sh) writes the phase file: `PHASE VERSION_OF_TARGET_1 VERSION_OF_TARGET_2 ...`,
a version being `down` while that node is out of rotation (stopped, restarting).

A 404 is false when some running server's release serves the GVR (from the captured
discovery of each release): exactly the 404 the Mixed Version Proxy exists to prevent.

Stops on SIGTERM and prints the per-phase table (text) and writes JSON to --json.
Standard library only.
"""

import argparse
import json
import os
import signal
import ssl
import statistics
import threading
import time
import http.client
import urllib.parse

stop = threading.Event()


def read_phase(path, cache):
    try:
        st = os.stat(path)
    except OSError:
        return cache.get("value")
    if cache.get("mtime") != st.st_mtime_ns:
        with open(path, encoding="utf-8") as f:
            parts = f.read().split()
        if parts:
            cache["mtime"] = st.st_mtime_ns
            cache["value"] = (parts[0], parts[1:])
    return cache.get("value")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", required=True, help="comma-separated https URLs, in node order")
    ap.add_argument("--phase-file", required=True)
    ap.add_argument("--gvrs", required=True, help="JSON: [{path, served_by: [versions]}]")
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    targets = args.targets.split(",")
    with open(args.gvrs, encoding="utf-8") as f:
        gvrs = json.load(f)
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.load_cert_chain(args.cert, args.key)

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    results = []  # (phase, outcome, latency_s)
    lock = threading.Lock()
    slots = threading.Semaphore(0)
    order = []  # phase order as seen
    state = {"rr": 0, "n": 0}
    phase_cache = {}

    def worker():
        conns = {}
        while not stop.is_set():
            if not slots.acquire(timeout=0.2):
                continue
            ph = read_phase(args.phase_file, phase_cache)
            if ph is None:
                continue
            phase, versions = ph
            if phase == "pause":
                continue
            with lock:
                if not order or order[-1] != phase:
                    if phase not in order:
                        order.append(phase)
                live = [i for i, v in enumerate(versions) if v != "down" and i < len(targets)]
                if not live:
                    continue
                idx = live[state["rr"] % len(live)]
                state["rr"] += 1
                gvr = gvrs[state["n"] % len(gvrs)]
                state["n"] += 1
            running = {v for v in versions if v != "down"}
            served = bool(running & set(gvr["served_by"]))
            u = urllib.parse.urlsplit(targets[idx])
            t0 = time.monotonic()
            code = 0
            # As Go's http.Transport (client-go) does, a request that fails on a reused
            # connection before any response (the server restarted and closed it) is sent
            # once more on a new connection; any other failure is an "other error".
            for attempt in (0, 1):
                reused = idx in conns
                try:
                    c = conns.get(idx)
                    if c is None:
                        c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=10)
                        conns[idx] = c
                    c.request("GET", gvr["path"] + "?limit=1", headers={"Accept": "application/json"})
                    r = c.getresponse()
                    r.read()
                    code = r.status
                    if r.getheader("connection", "").lower() == "close":
                        c.close()
                        conns.pop(idx, None)
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                    c = conns.pop(idx, None)
                    if c is not None:
                        c.close()
                    if not reused or attempt == 1:
                        break
                except Exception:  # noqa: BLE001 - any failure is an "other error"
                    c = conns.pop(idx, None)
                    if c is not None:
                        c.close()
                    break
            dt = time.monotonic() - t0
            if code == 200:
                outcome = "ok"
            elif code == 404:
                outcome = "false404" if served else "true404"
            elif code == 503:
                outcome = "503"
            else:
                outcome = "other"
            with lock:
                results.append((phase, outcome, dt, gvr["path"], code))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.workers)]
    for t in threads:
        t.start()
    interval = 1.0 / args.rate
    nxt = time.monotonic()
    while not stop.is_set():
        slots.release()
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            stop.wait(delay)
    for t in threads:
        t.join(timeout=12)

    table = []
    for phase in order:
        rows = [r for r in results if r[0] == phase]
        lat = sorted(r[2] for r in rows)

        def pct(p):
            if not lat:
                return 0.0
            return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000

        table.append({
            "phase": phase,
            "sent": len(rows),
            "answered": sum(1 for r in rows if r[1] == "ok"),
            "false_404": sum(1 for r in rows if r[1] == "false404"),
            "true_404": sum(1 for r in rows if r[1] == "true404"),
            "503": sum(1 for r in rows if r[1] == "503"),
            "other": sum(1 for r in rows if r[1] == "other"),
            "p50_ms": round(pct(0.50), 1),
            "p99_ms": round(pct(0.99), 1),
        })
    samples = {}
    for r in results:
        if r[1] in ("false404", "other", "503"):
            samples.setdefault(f"{r[0]} {r[1]} {r[4]} {r[3]}", 0)
            samples[f"{r[0]} {r[1]} {r[4]} {r[3]}"] += 1
    # Per GVR and phase, how its requests ended: what a prediction of the clients that would
    # break is checked against.
    gvr_of = {g["path"]: g.get("gvr", g["path"]) for g in gvrs}
    by_gvr = {}
    for r in results:
        ph = by_gvr.setdefault(gvr_of.get(r[3], r[3]), {}).setdefault(r[0], {})
        ph[r[1]] = ph.get(r[1], 0) + 1
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"label": args.label, "phases": table, "failures": samples, "by_gvr": by_gvr,
                   "median_ms": round(statistics.median([r[2] for r in results]) * 1000, 1) if results else 0},
                  f, indent=1)


if __name__ == "__main__":
    main()
