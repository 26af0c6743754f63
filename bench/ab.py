#!/usr/bin/env python3
"""A/B of mvproxy builds against nginx, in one run: CPU per request (user and system), as a
ratio to nginx in the same repeat, and system calls per request.

    python3 bench/ab.py OLD_BINARY NEW_BINARY [NEW_BINARY@0.1 ...]

Each argument is an mvproxy binary; `BINARY@RATIO` runs it with spans exported to a local
OTLP sink, sampled with `traceidratio` RATIO (`@0`: an exporter, nothing sampled);
`BINARY@tls` serves TLS + HTTP/2 from the client (oha, as bench/loadtest.py's TLS rows), no
export, and is compared with nginx over TLS + HTTP/2 in the same repeat. Same
layout as bench/loadtest.py (whose setup it reuses): upstream nginx and the proxies on core
0, wrk (32 connections, closed loop) and the sink on core 1, everything on 127.0.0.1.
Every configuration runs once per repeat, interleaved, so that the machine's noise hits
them alike (in reverse order on odd repeats, so an even REPS gives no configuration the later
place); the table gives medians over REPS repeats (default 4) of D (default 3s).
LATENCY=1 also measures, after each closed-loop run, latency at RATE req/s (default 2000, oha
open loop, 16 connections, latency-corrected) for D: the table then gives medians of p50 and p99,
and the p99 as a ratio to nginx's in the same repeat (other processes on the shared cores push
every configuration's tail alike; interleaving is what makes the ratio mean something).
PERF=SUBSTRING records a `perf` profile (PERFARGS, default -g) of the first matching
configuration into target/loadtest/.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadtest as lt  # noqa: E402


def sink_bytes():
    """Bytes of spans the OTLP sink has received so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{lt.SINK}/") as resp:
        return json.load(resp)["bytes"]


def tcp_segments():
    """TCP segments sent by the whole network namespace (loopback: each is also received)."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("OutSegs")])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    reps, duration = int(os.environ.get("REPS", "4")), os.environ.get("D", "3s")
    work = tempfile.mkdtemp(prefix="mvproxy-ab-")
    os.chmod(work, 0o755)
    cert, key = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    with open(os.path.join(work, "tls.pem"), "w") as f:
        f.write(open(cert).read() + open(key).read())
    lt.write_configs(work, cert, key)
    procs = lt.Procs()
    try:
        pids = {"upstream": procs.start("upstream", ["nginx", "-c", f"{work}/nginx-up.conf", "-g", "daemon off;"],
                                        lt.PROXY_CORE).pid}
        lt.wait_port(lt.UP)
        pids["nginx"] = procs.start("nginx", ["nginx", "-c", f"{work}/nginx-proxy.conf", "-g", "daemon off;"],
                                    lt.PROXY_CORE).pid
        ports = {"nginx": lt.NGINX}
        if any(a.endswith("@tls") for a in sys.argv[1:]):
            pids["nginx-tls"] = pids["nginx"]
            ports["nginx-tls"] = lt.NGINX_TLS
        procs.start("sink", [sys.executable, os.path.join(lt.ROOT, "bench/loadtest.py"), "--sink", str(lt.SINK)],
                    lt.LOAD_CORE)
        for i, arg in enumerate(sys.argv[1:]):
            port, admin = 18200 + i, 18300 + i
            binary, _, ratio = arg.partition("@")
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            if os.environ.get("PERF") and os.environ["PERF"] in arg:
                env["MVPROXY_HUGE_TEXT"] = "0"  # perf finds symbols through the file's code
            tls = ["--tls-cert-file", cert, "--tls-key-file", key] if ratio == "tls" else []
            if ratio and not tls:
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{lt.SINK}"
                env["OTEL_TRACES_SAMPLER"] = "traceidratio"
                env["OTEL_TRACES_SAMPLER_ARG"] = ratio
            pids[arg] = procs.start(arg, [binary, "serve", "--local", f"http://127.0.0.1:{lt.UP}", "--listen",
                                          f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"] + tls,
                                    lt.PROXY_CORE, env=env, log=f"{work}/{i}.log").pid
            lt.wait_ready(admin)
            ports[arg] = port
        lt.wait_port(lt.NGINX)
        lt.wait_port(lt.SINK)
        results, profiled = {}, False
        for rep in range(reps):
            # Whatever runs later in a repeat measured ~0.5 µs per request dearer here (warmer
            # neighbours, the sink's backlog): odd repeats run in reverse, so that with an even
            # REPS every configuration takes each position equally often.
            order = list(ports.items())
            for name, port in order if rep % 2 == 0 else order[::-1]:
                tree = lt.tree(pids[name])
                h2 = name.endswith("tls")

                def load(d):
                    if h2:
                        return lt.oha(port, d, True, connections=32)[:2]
                    return lt.wrk(port, d, 32)
                load("1s")
                perf = None
                if os.environ.get("PERF") and os.environ["PERF"] in name and not profiled:
                    profiled = True
                    data = os.path.join(lt.ROOT, "target/loadtest", os.path.basename(name) + ".perf.data")
                    os.makedirs(os.path.dirname(data), exist_ok=True)
                    perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock"]
                                            + os.environ.get("PERFARGS", "-g").split()
                                            + ["-o", data, "-p", ",".join(map(str, tree))],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.3)
                sink0 = sink_bytes()
                u0, s0 = lt.user_system(tree)
                seg0 = tcp_segments()
                (n, rps), counts = lt.perf_counts(tree, ["raw_syscalls:sys_enter"], lambda: load(duration))
                calls = counts.get("raw_syscalls:sys_enter", 0.0)
                seg1 = tcp_segments()
                u1, s1 = lt.user_system(tree)
                if perf:
                    perf.send_signal(2)
                    perf.wait()
                    print(f"  profile: {data}", flush=True)
                exported = float("nan")
                if "@" in name and not h2:
                    # what reached the sink: the export thread sends what is left of a batch
                    # after its 5 s schedule delay; a span dropped from a full queue never comes
                    time.sleep(6)
                    exported = (sink_bytes() - sink0) / n
                p50 = p99 = exported_open = float("nan")
                if os.environ.get("LATENCY") == "1":
                    sink1 = sink_bytes()
                    m, _, p50, p99 = lt.oha(port, duration, h2, rate=int(os.environ.get("RATE", "2000")))
                    if "@" in name and not h2:
                        time.sleep(6)
                        exported_open = (sink_bytes() - sink1) / m
                r = ((u1 - u0 + s1 - s0) / n * 1e6, (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6, calls / n,
                     (seg1 - seg0) / n, p50, p99, exported, exported_open)
                results.setdefault(name, []).append(r)
                print(f"  [{rep + 1}] {os.path.basename(name):24} {r[0]:6.1f} µs/req (user {r[1]:5.1f}, "
                      f"system {r[2]:5.1f}), {r[3]:4.2f} syscalls/req, {r[4]:4.2f} segments/req, {rps:7.0f} req/s"
                      + (f", {exported:4.0f} span bytes exported/req" if exported == exported else "")
                      + (f", p50 {p50:5.0f} µs, p99 {p99:6.0f} µs" if p99 == p99 else ""), flush=True)
        print(f"\nmedians of {reps} repeats of {duration}; ratio = CPU per request / nginx's in the same repeat "
              "(`@tls` rows: nginx over TLS + HTTP/2)\n")
        print("| configuration | CPU per request | user | system | syscalls per request | TCP segments per request | "
              "vs nginx (min–max) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        latency = []
        for name, v in results.items():
            ref = results["nginx-tls" if name.endswith("tls") else "nginx"]
            ratios = [a[0] / b[0] for a, b in zip(v, ref)]
            med = [statistics.median(x[i] for x in v) for i in range(9)]
            print(f"| {os.path.basename(name)} | {med[0]:.1f} µs | {med[1]:.1f} µs | {med[2]:.1f} µs | {med[3]:.2f} | "
                  f"{med[4]:.2f} | {statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |"
                  + (f" {med[7]:.0f} span bytes exported per request |" if med[7] == med[7] else ""))
            if med[6] == med[6]:
                tails = [a[6] / b[6] for a, b in zip(v, ref)]
                latency.append(f"| {os.path.basename(name)} | {med[5]:.0f} µs | {med[6]:.0f} µs | "
                               f"{statistics.median(tails):.2f} ({min(tails):.2f}–{max(tails):.2f}) |"
                               + (f" {med[8]:.0f} span bytes exported per request |" if med[8] == med[8] else ""))
        if latency:
            print(f"\nat {os.environ.get('RATE', '2000')} req/s (oha, open loop), medians of {reps} repeats\n")
            print("| configuration | p50 | p99 | p99 vs nginx (min–max) |")
            print("| --- | --- | --- | --- |")
            print("\n".join(latency))
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
