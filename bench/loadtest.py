#!/usr/bin/env python3
"""Loopback load test: what one proxied request costs in mvproxy, nginx and HAProxy, in one run.

Run it through bench/loadtest.sh (installs the tools, builds mvproxy). On a 2-core machine:

* core 0: the upstream (an nginx serving a 2 KB PodList and the real 1.34 discovery documents,
  so mvproxy routes as in a cluster) and the proxy under test;
* core 1: the load generator (wrk closed loop, oha open loop) and the OTLP receiver (a minimal
  sink that reads and acknowledges OTLP/HTTP posts).

Every configuration is measured against the same upstream, interleaved in each repeat:

* CPU per request: the proxy processes' own CPU time (every thread of every process of the
  proxy, in nanoseconds from /proc/PID/task/TID/schedstat) over the closed-loop run, divided
  by the requests wrk completed; also over the open-loop run at RATE req/s (where batching
  helps less);
* throughput: wrk, CONNECTIONS connections, closed loop (HTTP/1.1); oha for HTTP/2;
* added latency: oha at a fixed RATE with latency correction (open loop: a slow response
  does not slow the sender), p50 and p99 minus the upstream's own at the same rate;
* RSS: every process of the proxy, after its runs.

Configurations: the upstream alone; nginx and HAProxy (one worker, keep-alive to the
upstream); mvproxy with no trace export, with 10 % (`traceidratio` 0.1) and 100 % sampling
exported over OTLP/HTTP; then TLS + HTTP/2 from the client to nginx, HAProxy and mvproxy,
each terminating TLS with the same P-256 certificate (plain HTTP/1.1 to the upstream).
Only ratios measured in the same run mean anything: the machine is shared and noisy.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures/discovery/kube-apiserver-1.34-dev/aggregated_v2.json")
PATH = "/api/v1/namespaces/default/pods"
PROXY_CORE, LOAD_CORE = "0", "1"
TICK = os.sysconf("SC_CLK_TCK")

UP, NGINX, HAPROXY, ADMIN0, SINK = 18081, 18082, 18083, 18090, 18099
NGINX_TLS, HAPROXY_TLS = 18442, 18443
MVPROXY = {"mvproxy": 18084, "mvproxy-10": 18085, "mvproxy-100": 18086, "mvproxy-tls": 18444}

# name, label in the table, how the load reaches it
CONFIGS = [
    ("upstream", "upstream alone (nginx 1 worker)", "h1"),
    ("nginx", "nginx reverse proxy (1 worker, keep-alive)", "h1"),
    ("haproxy", "HAProxy (1 thread)", "h1"),
    ("mvproxy", "mvproxy, no trace export", "h1"),
    ("mvproxy-10", "mvproxy, export, 10 % sampled (traceidratio 0.1)", "h1"),
    ("mvproxy-100", "mvproxy, export, 100 % sampled", "h1"),
    ("nginx-tls", "nginx, TLS + HTTP/2 from the client", "h2"),
    ("haproxy-tls", "HAProxy, TLS + HTTP/2 from the client", "h2"),
    ("mvproxy-tls", "mvproxy, TLS + HTTP/2 from the client, no export", "h2"),
]
REFERENCE = {"h1": "nginx", "h2": "nginx-tls"}


def pod_list(size=2048):
    """A PodList of about `size` bytes."""
    items, i = [], 0
    while True:
        items.append({
            "metadata": {"name": f"web-{i}", "namespace": "default", "uid": f"00000000-0000-0000-0000-{i:012d}",
                         "resourceVersion": str(100 + i), "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": f"10.0.0.{i + 2}"},
        })
        doc = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "200"}, "items": items}
        text = json.dumps(doc, separators=(",", ":"))
        if len(text) >= size:
            return text
        i += 1


CORE_V2 = {
    "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
    "items": [{"metadata": {"creationTimestamp": None}, "versions": [{"version": "v1", "freshness": "Current", "resources": [
        {"resource": "pods", "responseKind": {"group": "", "version": "v1", "kind": "Pod"}, "scope": "Namespaced",
         "singularResource": "pod", "verbs": ["get", "list", "watch", "create", "delete"]}]}]}],
}
V2_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


# === the OTLP sink (runs as its own process on the load generator's core) ===

class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    posts = 0
    bytes = 0
    lock = threading.Lock()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        with Sink.lock:
            Sink.posts += 1
            Sink.bytes += n
        # An empty ExportTraceServiceResponse.
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        body = json.dumps({"posts": Sink.posts, "bytes": Sink.bytes}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def run_sink(port):
    ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()


# === processes ===

class Procs:
    def __init__(self):
        self.procs = []

    def start(self, name, argv, core, env=None, log=None):
        out = open(log, "wb") if log else subprocess.DEVNULL
        p = subprocess.Popen(["taskset", "-c", core] + argv, env=env, stdout=out, stderr=out,
                             start_new_session=True)
        self.procs.append((name, p))
        return p

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        for _, p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def tree(pid):
    """`pid` and its descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def user_system(pids):
    """The user and system CPU seconds of `pids` (fields 14 and 15 of /proc/PID/stat); a process
    that has gone counts nothing."""
    user = system = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            system += int(fields[12])
        except OSError:
            pass
    return user / TICK, system / TICK


def cpu_seconds(pids):
    """The CPU seconds `pids` have run: the sum over their threads of the nanoseconds the
    scheduler counted (the first field of /proc/PID/task/TID/schedstat). /proc/PID/stat gives
    the same time in clock ticks of 10 ms, a tick being 20 µs a request over a 1 s run at
    500 req/s; this is exact. A thread that ends takes its time with it (/proc keeps no sum of
    the ended ones in nanoseconds), so a difference of two reads counts the threads alive at
    the second; the proxies measured here run their requests on threads that live as long as
    they do. A process that has gone counts nothing."""
    ns = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ns += int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                pass
    return ns / 1e9


def steal_seconds(core):
    """The seconds the host has held `core`'s virtual CPU off it while it had work to run (steal,
    the eighth number of its line in /proc/stat, in clock ticks of 10 ms): time that no task
    on the machine shows, in which a request that has arrived waits. 0 where the kernel counts
    none (not a VM)."""
    with open("/proc/stat") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == f"cpu{core}":
                return int(fields[8]) / TICK if len(fields) > 8 else 0.0
    return 0.0


def perf_counts(pids, events, run):
    """Runs `run()` under `perf stat` counting the software `events` of `pids` (they hold on a
    VM without hardware counters, and unlike CPU time they do not move with the machine's
    load); returns run()'s result and {event: count}, empty without perf."""
    if not shutil.which("perf"):
        return run(), {}
    out = tempfile.mktemp(prefix="bench-stat-")
    stat = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(events), "-p", ",".join(map(str, pids)),
                             "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    result = run()
    stat.send_signal(signal.SIGINT)
    stat.wait()
    counts = {}
    try:
        for line in open(out):
            parts = line.strip().split(",")
            if len(parts) > 3 and parts[0].replace(".", "").isdigit():
                counts[parts[2]] = float(parts[0])
        os.unlink(out)
    except OSError:
        pass
    return result, counts


def rss_mb(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_ready(admin, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"mvproxy (admin {admin}) not ready after {timeout}s")


# === load generators ===

def wrk(port, duration, connections):
    out = subprocess.run(["taskset", "-c", LOAD_CORE, "wrk", "-t1", f"-c{connections}", f"-d{duration}",
                          f"http://127.0.0.1:{port}{PATH}"], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        sys.exit(f"errors under load on port {port}:\n{out}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return requests, rps


def oha(port, duration, h2, rate=None, connections=16):
    scheme = "https" if h2 else "http"
    argv = ["taskset", "-c", LOAD_CORE, "oha", "--no-tui", "--output-format", "json", "-z", duration]
    if h2:
        argv += ["--http2", "--insecure", "-c", "4", "-p", str(max(1, connections // 4))]
    else:
        argv += ["-c", str(connections)]
    if rate:
        argv += ["-q", str(rate), "--latency-correction"]
    argv.append(f"{scheme}://127.0.0.1:{port}{PATH}")
    res = oha_run(argv, port)
    lat = res["latencyPercentiles"]
    return res["served"], res["summary"]["requestsPerSec"], lat["p50"] * 1e6, lat["p99"] * 1e6


def oha_run(argv, port):
    """Runs oha (`argv`, JSON output) and returns its report, with `served`: the requests answered
    200; exits on any other status or any error but a request cut off at the end of the run."""
    res = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    codes = res.get("statusCodeDistribution", {})
    bad = {k: v for k, v in codes.items() if k != "200"}
    # requests still in flight when the duration ends are cut off: not an error of the proxy
    errors = {k: v for k, v in res.get("errorDistribution", {}).items() if "deadline" not in k}
    if bad or errors:
        sys.exit(f"errors under load on port {port}: {bad} {errors}")
    res["served"] = sum(codes.values())
    return res


# === setup ===

def write_configs(work, cert, key):
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "api/v1/namespaces/default"))
    os.makedirs(os.path.join(root, "apis"))
    shutil.copy(FIXTURE, os.path.join(root, "apis/index.json"))
    with open(os.path.join(root, "api/index.json"), "w") as f:
        json.dump(CORE_V2, f)
    with open(os.path.join(root, PATH.lstrip("/")), "w") as f:
        f.write(pod_list())
    common = f"""worker_processes 1;
error_log {work}/nginx-%s.log;
events {{ worker_connections 4096; }}
"""
    upstream = common % "up" + f"""pid {work}/nginx-up.pid;
http {{
  access_log off;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{UP};
    root {root};
    location = /api {{ default_type "{V2_TYPE}"; try_files /api/index.json =404; }}
    location = /apis {{ default_type "{V2_TYPE}"; try_files /apis/index.json =404; }}
    location / {{ default_type application/json; }}
  }}
}}
"""
    proxy = common % "proxy" + f"""pid {work}/nginx-proxy.pid;
http {{
  access_log off;
  keepalive_requests 1000000;
  upstream api {{ server 127.0.0.1:{UP}; keepalive 64; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{NGINX};
    listen 127.0.0.1:{NGINX_TLS} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {{ proxy_pass http://api; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }}
  }}
}}
"""
    haproxy = f"""global
  nbthread 1
  maxconn 4096
  tune.ssl.default-dh-param 2048
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend fe
  bind 127.0.0.1:{HAPROXY}
  bind 127.0.0.1:{HAPROXY_TLS} ssl crt {work}/tls.pem alpn h2,http/1.1
  default_backend be
backend be
  server up 127.0.0.1:{UP}
"""
    for name, text in [("nginx-up.conf", upstream), ("nginx-proxy.conf", proxy), ("haproxy.cfg", haproxy)]:
        with open(os.path.join(work, name), "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    quick = os.environ.get("QUICK") == "1"
    ap.add_argument("--duration", default=os.environ.get("DURATION", "3s" if quick else "10s"))
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("REPEATS", "1" if quick else "2")))
    ap.add_argument("--rate", type=int, default=int(os.environ.get("RATE", "2000")))
    ap.add_argument("--connections", type=int, default=int(os.environ.get("CONNECTIONS", "32")))
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(ROOT, "target/loadtest/table.md")))
    ap.add_argument("--only", default=os.environ.get("ONLY", ""))
    ap.add_argument("--profile", default=os.environ.get("PROFILE", ""),
                    help="record a CPU profile (perf, software clock) of this configuration's closed-loop run")
    ap.add_argument("--sink", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sink:
        return run_sink(args.sink)
    if os.cpu_count() < 2:
        sys.exit("needs 2 cores: proxy and upstream on one, the load generator on the other")
    only = set(filter(None, args.only.split(",")))
    configs = [c for c in CONFIGS if not only or c[0] in only or c[0] in ("upstream", "nginx", "nginx-tls")]
    mvproxy_bin = os.environ.get("MVPROXY_BIN", os.path.join(ROOT, "target/release/mvproxy"))
    mvproxy_env = os.environ.get("MVPROXY_ENV", "").split()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    work = tempfile.mkdtemp(prefix="mvproxy-loadtest-")
    os.chmod(work, 0o755)  # nginx workers run as another user
    procs = Procs()
    try:
        cert, key = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True)
        with open(os.path.join(work, "tls.pem"), "w") as f:
            f.write(open(cert).read() + open(key).read())
        write_configs(work, cert, key)
        pids = {}
        pids["upstream"] = procs.start("upstream", ["nginx", "-c", f"{work}/nginx-up.conf", "-g", "daemon off;"], PROXY_CORE).pid
        wait_port(UP)
        pids["nginx"] = procs.start("nginx", ["nginx", "-c", f"{work}/nginx-proxy.conf", "-g", "daemon off;"], PROXY_CORE).pid
        pids["nginx-tls"] = pids["nginx"]
        pids["haproxy"] = procs.start("haproxy", ["haproxy", "-db", "-f", f"{work}/haproxy.cfg"], PROXY_CORE).pid
        pids["haproxy-tls"] = pids["haproxy"]
        procs.start("sink", [sys.executable, os.path.abspath(__file__), "--sink", str(SINK)], LOAD_CORE)
        for name, port in MVPROXY.items():
            if not any(c[0] == name for c in configs):
                continue
            env = dict(os.environ)
            for k in list(env):
                if k.startswith("OTEL_"):
                    del env[k]
            if name == args.profile:
                env["MVPROXY_HUGE_TEXT"] = "0"  # perf finds symbols through the file's code
            if name in ("mvproxy-10", "mvproxy-100"):
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{SINK}"
                env["OTEL_TRACES_SAMPLER"] = "traceidratio"
                env["OTEL_TRACES_SAMPLER_ARG"] = "0.1" if name == "mvproxy-10" else "1.0"
            admin = ADMIN0 + list(MVPROXY).index(name)
            argv = mvproxy_env + [mvproxy_bin, "serve", "--local", f"http://127.0.0.1:{UP}", "--listen", f"127.0.0.1:{port}",
                                  "--admin-listen", f"127.0.0.1:{admin}", "--log-format", "json"]
            if name == "mvproxy-tls":
                argv += ["--tls-cert-file", cert, "--tls-key-file", key]
            pids[name] = procs.start(name, argv, PROXY_CORE, env=env, log=f"{work}/{name}.log").pid
            wait_ready(admin)
        for port in (NGINX, HAPROXY, NGINX_TLS, HAPROXY_TLS, SINK):
            wait_port(port)

        port_of = {"upstream": UP, "nginx": NGINX, "haproxy": HAPROXY, "nginx-tls": NGINX_TLS,
                   "haproxy-tls": HAPROXY_TLS, **MVPROXY}
        results = {c[0]: [] for c in configs}
        print(f"# {len(configs)} configurations x {args.repeats} repeat(s), {args.duration} per measurement, "
              f"{args.connections} connections closed loop, {args.rate} req/s open loop, GET {PATH}", flush=True)
        for rep in range(args.repeats):
            for name, _, proto in configs:
                port, h2 = port_of[name], proto == "h2"
                tree_pids = tree(pids[name])
                # warm up: connections, pools, allocator
                if h2:
                    oha(port, "1s", True, connections=args.connections)
                else:
                    wrk(port, "1s", args.connections)
                perf = None
                if name == args.profile and rep == 0:
                    data = os.path.splitext(args.out)[0] + f"-{name}.perf.data"
                    perf = subprocess.Popen(["taskset", "-c", LOAD_CORE, "perf", "record", "-e", "cpu-clock", "-g",
                                             "-o", data, "-p", ",".join(map(str, tree_pids))],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                c0 = cpu_seconds(tree_pids)
                if h2:
                    n, rps, _, _ = oha(port, args.duration, True, connections=args.connections)
                else:
                    n, rps = wrk(port, args.duration, args.connections)
                c1 = cpu_seconds(tree_pids)
                if perf:
                    perf.send_signal(signal.SIGINT)
                    perf.wait()
                    report = os.path.splitext(args.out)[0] + f"-{name}.perf.txt"
                    with open(report, "w") as f:
                        subprocess.run(["perf", "report", "-i", data, "--no-children", "--percent-limit", "0.5",
                                        "--stdio", "-g", "none", "--sort", "dso,symbol"], stdout=f,
                                       stderr=subprocess.DEVNULL)
                    print(f"  profile of {name}: {report}", flush=True)
                m, _, p50, p99 = oha(port, args.duration, h2, rate=args.rate)
                c2 = cpu_seconds(tree_pids)
                r = {"cpu_us": (c1 - c0) / n * 1e6, "cpu_rate_us": (c2 - c1) / m * 1e6, "rps": rps,
                     "p50": p50, "p99": p99, "rss": rss_mb(tree_pids)}
                results[name].append(r)
                print(f"  [{rep + 1}] {name:12} {r['cpu_us']:6.1f} µs/req closed, {r['cpu_rate_us']:6.1f} µs/req at "
                      f"{args.rate}/s, {rps:8.0f} req/s, p50 {p50:6.0f} µs, p99 {p99:6.0f} µs, RSS {r['rss']:.1f} MB",
                      flush=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{SINK}/") as resp:
            sink = json.load(resp)
        warnings = {}
        for name in MVPROXY:
            log = f"{work}/{name}.log"
            if os.path.exists(log):
                warnings[name] = sum('"level":"WARN"' in line or '"level":"ERROR"' in line for line in open(log))
        table = render(configs, results, args, sink, warnings)
        print()
        print(table)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(table)
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(results, f, indent=1)
        print(f"written to {args.out}")
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)


def span(values, fmt="{:.1f}"):
    lo, hi = min(values), max(values)
    a, b = fmt.format(lo), fmt.format(hi)
    return a if a == b else f"{a}–{b}"


def machine():
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, Linux {os.uname().release}"


def render(configs, results, args, sink, warnings):
    def per_rep(name, key):
        return [r[key] for r in results[name]]

    def ratio(name, key):
        ref = REFERENCE[dict((c[0], c[2]) for c in configs)[name]]
        return [a[key] / b[key] for a, b in zip(results[name], results[ref])]

    def added(name, key):
        return [a[key] - b[key] for a, b in zip(results[name], results["upstream"])]

    rows = [
        f"Loopback, {machine()}; proxy and upstream pinned to core {PROXY_CORE}, load generator and OTLP "
        f"sink to core {LOAD_CORE}. {args.repeats} repeat(s) of {args.duration} per measurement; "
        f"ranges are the spread over repeats; ratios are to nginx in the same repeat (the TLS rows to "
        f"nginx over TLS). GET {PATH} (2 KB PodList).",
        "",
        "| configuration | proxy CPU per request | vs nginx | CPU per request at "
        f"{args.rate} req/s | vs nginx | throughput, {args.connections} conns | vs nginx | "
        f"added latency at {args.rate} req/s, p50 / p99 | nginx's added latency | RSS |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, label, proto in configs:
        ref = REFERENCE[proto]
        if name == "upstream":
            lat = f"p50 {span(per_rep(name, 'p50'), '{:.0f}')} / p99 {span(per_rep(name, 'p99'), '{:.0f}')} µs (absolute)"
            ref_lat = ""
        else:
            lat = f"{span(added(name, 'p50'), '{:+.0f}')} / {span(added(name, 'p99'), '{:+.0f}')} µs"
            ref_lat = f"{span(added(ref, 'p50'), '{:+.0f}')} / {span(added(ref, 'p99'), '{:+.0f}')} µs"
        def r(key):
            return "—" if name == "upstream" else span(ratio(name, key), "{:.2f}")
        rows.append(
            f"| {label} | {span(per_rep(name, 'cpu_us'))} µs | {r('cpu_us')} | "
            f"{span(per_rep(name, 'cpu_rate_us'))} µs | {r('cpu_rate_us')} | "
            f"{span(per_rep(name, 'rps'), '{:.0f}')} req/s | {r('rps')} | "
            f"{lat} | {ref_lat} | {span(per_rep(name, 'rss'))} MB |")
    rows.append("")
    rows.append(f"The OTLP sink received {sink['posts']} posts, {sink['bytes'] / 1e6:.1f} MB of spans. "
                f"The upstream row is the upstream's own CPU and its absolute latency. mvproxy warnings or errors logged: "
                f"{', '.join(f'{k} {v}' for k, v in warnings.items()) or 'none'}.")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
