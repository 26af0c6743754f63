#!/usr/bin/env python3
"""Load and report of the peer-failure part (scripts/conformance/peer-failures.sh).

`load`: a steady, open-loop client load on one proxy (mvproxy, or a kube-apiserver with
upstream's Mixed Version Proxy): reads of a GVR the local server serves ("local"), reads and
creates of a GVR only the peers serve ("peer"). Each request is sent at its scheduled time in
a thread of its own (up to --workers at once; one that finds none free is counted as not
sent), so a request stuck behind a hung peer never delays the next. Every request becomes one
JSON line in --out: wall-clock send time, latency, kind, status code (0 when the client gave
up or the connection failed), error, and the name of the object a create asked for.

`report`: the per-fault table from the load files, the fault timeline written by the driver
and the audit log of the faulted server (which creates it applied: each load sends its own
User-Agent, each create its own object name). It also asks the surviving server whether each create that was answered
as failed exists after all (a write the client was told failed but that was applied).

Standard library only.
"""

import argparse
import concurrent.futures
import datetime
import http.client
import json
import signal
import ssl
import sys
import threading
import time
import urllib.parse

LOCAL_PATH = "/api/v1/namespaces/default/configmaps?limit=1"
# Beyond this, a request that succeeded still counts as waiting behind the failed server.
SLOW_S = 1.0


def tls_context(args):
    ctx = ssl.create_default_context(cafile=args.ca)
    ctx.load_cert_chain(args.cert, args.key)
    return ctx


def load(args):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    ctx = tls_context(args)
    u = urllib.parse.urlsplit(args.target)
    tls = threading.local()
    out = open(args.out, "w", encoding="utf-8")
    out_lock = threading.Lock()
    busy = threading.Semaphore(args.workers)
    mix = ["local", "peer_read", "peer_create", "local", "peer_read", "local", "peer_read", "peer_create"]

    def write(rec):
        with out_lock:
            out.write(json.dumps(rec) + "\n")

    def one(seq, kind):
        try:
            name = ""
            if kind == "local":
                method, path, body = "GET", LOCAL_PATH, None
            elif kind == "peer_read":
                method, path, body = "GET", args.peer_path + "?limit=1", None
            else:
                name = f"{args.label}-{seq}"
                method, path = "POST", args.peer_path
                body = json.dumps({
                    "apiVersion": args.peer_api_version, "kind": args.peer_kind,
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": json.loads(args.peer_spec),
                }).encode()
            headers = {"Accept": "application/json", "User-Agent": args.user_agent}
            if body is not None:
                headers["Content-Type"] = "application/json"
            t_send = time.time()
            t0 = time.monotonic()
            code, err, message = 0, "", ""
            # As Go's http.Transport does, a request that fails on a reused connection before
            # any response (the server closed it while idle) is sent once more on a new one.
            for attempt in (0, 1):
                c = getattr(tls, "conn", None)
                reused = c is not None
                try:
                    if c is None:
                        c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=args.timeout)
                        tls.conn = c
                    c.request(method, path, body=body, headers=headers)
                    r = c.getresponse()
                    data = r.read()
                    code = r.status
                    if code >= 500:
                        try:
                            message = json.loads(data).get("message", "")[:300]
                        except ValueError:
                            message = data[:300].decode("utf-8", "replace")
                    if r.getheader("connection", "").lower() == "close":
                        c.close()
                        tls.conn = None
                    err = ""
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                    c.close()
                    tls.conn = None
                    err = type(e).__name__
                    if not reused or attempt == 1:
                        break
                except Exception as e:  # noqa: BLE001 - any other failure is recorded as is
                    c.close()
                    tls.conn = None
                    err = type(e).__name__
                    break
            write({"t": t_send, "dt": time.monotonic() - t0, "kind": kind, "code": code,
                   "err": err, "name": name, "message": message})
        finally:
            busy.release()

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.workers)
    interval = 1.0 / args.rate
    nxt = time.monotonic()
    seq = 0
    while not stop.is_set():
        kind = mix[seq % len(mix)]
        if busy.acquire(blocking=False):
            pool.submit(one, seq, kind)
        else:
            write({"t": time.time(), "dt": 0.0, "kind": kind, "code": -1, "err": "no free worker",
                   "name": "", "message": ""})
        seq += 1
        nxt += interval
        delay = nxt - time.monotonic()
        if delay > 0:
            stop.wait(delay)
    pool.shutdown(wait=True)
    out.close()


def audit_served(path, user_agent):
    """Names of the objects the server created for this agent's requests (answered 2xx)."""
    names = set()
    try:
        f = open(path, encoding="utf-8")
    except OSError:
        return names
    with f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if (ev.get("userAgent") == user_agent and ev.get("stage") == "ResponseComplete"
                    and ev.get("verb") == "create"
                    and 200 <= ev.get("responseStatus", {}).get("code", 0) < 300):
                names.add(ev.get("objectRef", {}).get("name", ""))
    return names


def exists(ctx, base, path, name):
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=10)
    try:
        c.request("GET", f"{path}/{name}", headers={"Accept": "application/json"})
        r = c.getresponse()
        r.read()
        return r.status == 200
    finally:
        c.close()


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def fmt_ms(v):
    return "–" if v is None else f"{v * 1000:.0f}"


def fmt_s(v):
    return "–" if v is None else f"{v:.1f} s"


def report(args):
    ctx = tls_context(args)
    with open(args.faults, encoding="utf-8") as f:
        faults = [json.loads(line) for line in f if line.strip()]
    rows, details = [], {}
    for spec in args.load:
        label, ua, path = spec.split("=", 2)
        with open(path, encoding="utf-8") as f:
            recs = [json.loads(line) for line in f if line.strip()]
        served = audit_served(args.audit, ua)
        for fault in faults:
            start, recovered, end = fault["start"], fault["recovered"], fault["end"]
            win = [r for r in recs if start <= r["t"] < end]
            ok = [r for r in win if 200 <= r["code"] < 300]
            bad = [r for r in win if not 200 <= r["code"] < 300]
            local = [r["dt"] for r in win if r["kind"] == "local" and r["code"] > 0]
            peer = [r["dt"] for r in win if r["kind"] != "local" and r["code"] > 0]
            # Avoided: the last peer-routed request sent while the server was failed that failed
            # or waited; every later one in that interval was answered at once by another server.
            hit = [r["t"] for r in win if r["kind"] != "local" and r["t"] < recovered
                   and (not 200 <= r["code"] < 300 or r["dt"] > SLOW_S)]
            if start == recovered:
                avoided = "–"
            elif not hit:
                avoided = "at once"
            elif recovered - max(hit) < 2.0:
                avoided = f"not before recovery ({recovered - start:.0f} s)"
            else:
                avoided = f"{max(hit) - start:.1f} s"
            # Serves again: the first create sent after recovery that the failed server applied
            # (its audit log names the object; each create has a name of its own).
            again = sorted(r["t"] for r in win if r["kind"] == "peer_create" and r["t"] >= recovered
                           and r["name"] in served)
            serves_again = fmt_s(again[0] - recovered) if again else "not in the window"
            if start == recovered:
                serves_again = "–"
            failed_creates = [r for r in win if r["kind"] == "peer_create" and not 200 <= r["code"] < 300 and r["code"] != -1]
            applied = [r for r in failed_creates if exists(ctx, args.check_url, args.peer_path, r["name"])]
            idempotent_failed = sum(1 for r in bad if r["kind"] != "peer_create")
            rows.append({
                "fault": fault["name"], "via": label, "sent": len(win), "answered": len(ok),
                "503": sum(1 for r in win if r["code"] == 503),
                "504": sum(1 for r in win if r["code"] == 504),
                "other": sum(1 for r in win if not 200 <= r["code"] < 300 and r["code"] not in (503, 504)),
                "reads_failed": idempotent_failed,
                "p99_local": pct(local, 0.99), "p99_peer": pct(peer, 0.99),
                "avoided": avoided, "serves_again": serves_again,
                "creates_failed": len(failed_creates), "creates_failed_applied": len(applied),
            })
            codes = {}
            for r in bad:
                key = f"{r['kind']} {r['code']} {r['err']} {r['message'][:160]}".strip()
                codes[key] = codes.get(key, 0) + 1
            details[f"{fault['name']} via {label}"] = codes
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"faults": faults, "rows": rows, "failures": details}, f, indent=1)
    out = []
    out.append("| fault | via | sent | answered | 503 | 504 | other failures | failed reads | "
               "p99 local ms | p99 peer-routed ms | failed server avoided after | serves again after | "
               "creates answered as failed (applied anyway) |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    for r in rows:
        out.append(f"| {r['fault']} | {r['via']} | {r['sent']} | {r['answered']} | {r['503']} | {r['504']} | "
                   f"{r['other']} | {r['reads_failed']} | {fmt_ms(r['p99_local'])} | {fmt_ms(r['p99_peer'])} | "
                   f"{r['avoided']} | {r['serves_again']} | {r['creates_failed']} ({r['creates_failed_applied']}) |")
    text = "\n".join(out) + "\n"
    with open(args.table, "w", encoding="utf-8") as f:
        f.write(text)
    sys.stdout.write(text)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    for p in (sub.add_parser("load"), sub.add_parser("report")):
        p.add_argument("--ca", required=True)
        p.add_argument("--cert", required=True)
        p.add_argument("--key", required=True)
        p.add_argument("--peer-path", required=True, help="collection path of the GVR only peers serve")
    lp = sub.choices["load"]
    lp.add_argument("--target", required=True)
    lp.add_argument("--label", required=True)
    lp.add_argument("--user-agent", required=True)
    lp.add_argument("--peer-api-version", required=True)
    lp.add_argument("--peer-kind", required=True)
    lp.add_argument("--peer-spec", required=True, help="JSON of the created objects' spec")
    lp.add_argument("--rate", type=float, default=16.0)
    lp.add_argument("--workers", type=int, default=200)
    lp.add_argument("--timeout", type=float, default=30.0)
    lp.add_argument("--out", required=True)
    rp = sub.choices["report"]
    rp.add_argument("--faults", required=True, help="JSON lines: name, start, recovered, end (epoch s)")
    rp.add_argument("--load", action="append", required=True, help="LABEL=USER_AGENT=FILE")
    rp.add_argument("--audit", required=True, help="audit log of the faulted server")
    rp.add_argument("--check-url", required=True, help="a surviving server, asked whether failed creates exist")
    rp.add_argument("--json", required=True)
    rp.add_argument("--table", required=True)
    args = ap.parse_args()
    (load if args.cmd == "load" else report)(args)


if __name__ == "__main__":
    main()
