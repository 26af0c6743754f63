#!/usr/bin/env python3
"""A/B of mvproxy builds against nginx, in one run: CPU per request (user and system), as a
ratio to nginx in the same repeat, and system calls per request.

    python3 bench/ab.py OLD_BINARY NEW_BINARY [NEW_BINARY@0.1 ...]

Each argument is an mvproxy binary; `BINARY@RATIO` runs it with spans exported to a local
OTLP sink, sampled with `traceidratio` RATIO (`@0`: an exporter, nothing sampled). Same
layout as bench/loadtest.py (whose setup it reuses): upstream nginx and the proxies on core
0, wrk (32 connections, closed loop) and the sink on core 1, everything on 127.0.0.1.
Every configuration runs once per repeat, interleaved, so that the machine's noise hits
them alike; the table gives medians over REPS repeats (default 4) of D (default 3s).
PERF=SUBSTRING records a `perf` profile (PERFARGS, default -g) of the first matching
configuration into target/loadtest/.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadtest as lt  # noqa: E402


def cpu_split(pids):
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except OSError:
            pass
    return user / lt.TICK, system / lt.TICK


def syscalls(pids, run):
    """Runs `run()` under `perf stat` counting the system calls of `pids`."""
    out = tempfile.mktemp(prefix="ab-stat-")
    stat = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p",
                             ",".join(map(str, pids)), "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    result = run()
    stat.send_signal(2)
    stat.wait()
    count = 0.0
    try:
        for line in open(out):
            parts = line.strip().split(",")
            if len(parts) > 3 and parts[2] == "raw_syscalls:sys_enter" and parts[0].replace(".", "").isdigit():
                count = float(parts[0])
        os.unlink(out)
    except OSError:
        pass
    return result, count


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
        procs.start("sink", [sys.executable, os.path.join(lt.ROOT, "bench/loadtest.py"), "--sink", str(lt.SINK)],
                    lt.LOAD_CORE)
        for i, arg in enumerate(sys.argv[1:]):
            port, admin = 18200 + i, 18300 + i
            binary, _, ratio = arg.partition("@")
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            if ratio:
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{lt.SINK}"
                env["OTEL_TRACES_SAMPLER"] = "traceidratio"
                env["OTEL_TRACES_SAMPLER_ARG"] = ratio
            pids[arg] = procs.start(arg, [binary, "serve", "--local", f"http://127.0.0.1:{lt.UP}", "--listen",
                                          f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"],
                                    lt.PROXY_CORE, env=env, log=f"{work}/{i}.log").pid
            lt.wait_ready(admin)
            ports[arg] = port
        lt.wait_port(lt.NGINX)
        lt.wait_port(lt.SINK)
        results, profiled = {}, False
        for rep in range(reps):
            for name, port in ports.items():
                tree = lt.tree(pids[name])
                lt.wrk(port, "1s", 32)
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
                u0, s0 = cpu_split(tree)
                (n, rps), calls = syscalls(tree, lambda: lt.wrk(port, duration, 32))
                u1, s1 = cpu_split(tree)
                if perf:
                    perf.send_signal(2)
                    perf.wait()
                    print(f"  profile: {data}", flush=True)
                r = ((u1 - u0 + s1 - s0) / n * 1e6, (u1 - u0) / n * 1e6, (s1 - s0) / n * 1e6, calls / n)
                results.setdefault(name, []).append(r)
                print(f"  [{rep + 1}] {os.path.basename(name):24} {r[0]:6.1f} µs/req (user {r[1]:5.1f}, "
                      f"system {r[2]:5.1f}), {r[3]:4.2f} syscalls/req, {rps:7.0f} req/s", flush=True)
        print(f"\nmedians of {reps} repeats of {duration}; ratio = CPU per request / nginx's in the same repeat\n")
        print("| configuration | CPU per request | user | system | syscalls per request | vs nginx (min–max) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, v in results.items():
            ratios = [a[0] / b[0] for a, b in zip(v, results["nginx"])]
            med = [statistics.median(x[i] for x in v) for i in range(4)]
            print(f"| {os.path.basename(name)} | {med[0]:.1f} µs | {med[1]:.1f} µs | {med[2]:.1f} µs | {med[3]:.2f} | "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |")
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
