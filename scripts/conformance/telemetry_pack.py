#!/usr/bin/env python3
"""Live check of the observability pack (issue 10 §2), standard library only.

Started by telemetry-pack.sh, which builds the binaries and passes their paths. Everything
listens on 127.0.0.1 on free ports; every process is started here and stopped by its PID.

  stand-in API servers   apiserver-1 (1.31)   apiserver-2 (1.34)   apiserver-3 (1.31)
  mvproxy serve          mvproxy-cp-1         mvproxy-cp-2         mvproxy-cp-3   (OTLP gRPC)
  otelcol-mvproxy        otel-collector/config.yaml + otel-collector/endpoints-overlay.yaml
  jaeger                 the otlp/jaeger exporter's destination
  jaeger (trace sink)    the otlp/tempo exporter's destination (Tempo is not run: see README)
  prometheus             deploy/prometheus/prometheus.yml + rules.yml (collector address and
                         mvproxy targets generated), --enable-feature=exemplar-storage

Phases: healthy (a known mix of requests with known trace ids, plus a light background load),
then errors (mvproxy-cp-2 stopped, a fourth proxy started whose peer apiserver-2 was never up),
then export resilience (a second collector with otel-collector/tls-overlay.yaml, mutual TLS
and gzip over gRPC and HTTP, restarted and stopped for 30 s under load; what reached a Jaeger
of its own is counted against what the proxies produced and dropped).
Prints one table row per check and exits 1 when any check failed.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

# The known mix (issue 10 §2): counts per category.
FAST_LOCAL = 1000
PEER_ROUTED = 50
FAILING = 50
SLOW = 20
# tail_sampling in otel-collector/config.yaml.
BASELINE_PERCENT = 5.0
SLOW_THRESHOLD_S = 0.5
# A GVR 1.34 serves and 1.31 does not: requests for it on a 1.31 proxy go to apiserver-2.
PEER_ONLY_PATH = "/apis/resource.k8s.io/v1beta2/namespaces/default/resourceclaims"
LOCAL_PATH = "/api/v1/namespaces/default/pods"
# A GVR 1.31 serves and 1.34 does not: a client of it depends on an API the upgrade removes
# (mvproxy_skew_requests_total{side="old_only"}); served locally by the 1.31 proxies.
OLD_ONLY_PATH = "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"
OLD_CLIENT = {"User-Agent": "legacy-controller/v0.9 (linux/amd64) kubernetes/abcdef"}
# A slow API server: the stand-in waits before it answers (x-standin-delay-ms), so the response
# headers, where mvproxy's server and client spans end (docs/telemetry.md; a watch has a span
# of its own for its lifetime), come later than the slow policy's 500 ms.
SLOW_PATH = "/api/v1/namespaces/default/configmaps"
# What no proxy fixes, for the overview's panels of it: apiserver-2 also serves 1.36's
# scheduling.k8s.io, whose PodGroups carry a finalizer only a 1.36 controller-manager removes
# (neither release here runs one: every deletion waits), and cannot decode the PodGroups stored
# at v1alpha1 (every read fails with 500).
PODGROUPS_PATH = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"
PODGROUP_FINALIZER = "scheduling.k8s.io/podgroup-protection"
DISCOVERY_1_36 = "fixtures/discovery/kube-apiserver-1.36.3/aggregated_v2.json"
# A watch held open on cp-1 throughout (mvproxy_client_watches_open), renewed as it ends.
WATCH_PATH = LOCAL_PATH + "?watch=true&timeoutSeconds=10"
SLOW_HEADERS = {"x-standin-delay-ms": "700"}
SCRAPE_INTERVAL_S = 15  # deploy/prometheus/prometheus.yml global.scrape_interval
# Grafana's $__rate_interval: max($__interval + scrape interval, 4 * scrape interval), with the
# datasource's timeInterval (15s) as the scrape interval.
RATE_INTERVAL = f"{4 * SCRAPE_INTERVAL_S}s"
SPANMETRICS_BOUNDS_MS = ["5", "10", "15", "30", "50", "100", "300", "500", "1000", "+Inf"]
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
# Export resilience (the last phase): requests a second per loaded proxy, seconds of steady
# load before, between and after the collector's restart and outage, the outage, and the
# small queue (spans) that cannot hold the outage (the other proxy has the default, 2048).
RESILIENCE_RATE = 15
RESILIENCE_STEADY_S = 6
OUTAGE_S = 30
RESILIENCE_SMALL_QUEUE = 256
NOCERT_REQUESTS = 10


class Failed(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# processes


class Proc:
    """A child process with its output in a log file, stopped by PID."""

    def __init__(self, name, argv, workdir, env=None):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=full_env,
                                  stdin=subprocess.DEVNULL)

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=10)
        self.log.close()

    def tail(self, n=15):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by free_port, never given twice: a component may bind its port late.
_GIVEN = set()


def free_port():
    """A loopback port nobody listens on, from below the kernel's ephemeral range.

    A port `bind(0)` returns is in the ephemeral range, where any process's next outgoing
    connection can take it before the component it was meant for binds it: the collector's
    exporters connect before its OTLP receiver listens, and once took the receiver's port
    ("bind: address already in use"). Below the range a port is only taken by a listener
    that asks for it by number; the control plane's fixed ports (6443, 23790-23792) lie
    below the 4096 ports searched here.
    """
    low = _ephemeral_low()
    candidates = list(range(max(1024, low - 4096), low))
    random.shuffle(candidates)
    for port in candidates:
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise Failed(f"no free loopback port below {low}")


def http(url, headers=None, timeout=10, data=None, method=None):
    req = urllib.request.Request(url, headers=headers or {}, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_for(what, fn, timeout=60, interval=0.5, procs=()):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        for p in procs:
            if not p.alive():
                raise Failed(f"{p.name} exited while waiting for {what}:\n{p.tail()}")
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError) as e:
            last = e
        time.sleep(interval)
    raise Failed(f"timed out waiting for {what} ({last})")


def http_ok(url):
    return lambda: http(url, timeout=3)[0] == 200


# ---------------------------------------------------------------------------------------------
# the table


class Table:
    def __init__(self):
        self.rows = []
        self.extra = []

    def add(self, check, ok, detail):
        status = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
        self.rows.append((check, status, detail))
        print(f"[{status}] {check}: {detail}", file=sys.stderr, flush=True)
        # One line in scripts/conformance.sh's summary (conformance/lib.sh's record format).
        results = os.environ.get("CONFORMANCE_RESULTS")
        if results:
            clean = lambda v: str(v).replace("\t", " ").replace("\n", " ")
            part = os.environ.get("CONFORMANCE_PART", "telemetry-pack")
            with open(results, "a") as f:
                f.write("\t".join(map(clean, (part, check, status, detail))) + "\n")

    def failed(self):
        return [r for r in self.rows if r[1] == "FAIL"]

    def render(self):
        out = ["| check | result | measured |", "| --- | --- | --- |"]
        for c, s, d in self.rows:
            out.append(f"| {c} | {s} | {d} |".replace("\n", " "))
        return "\n\n".join(["\n".join(out)] + self.extra)


# ---------------------------------------------------------------------------------------------
# W3C trace context: every request of the known mix carries its own traceparent, so the check
# knows which traces must (and which may) reach the trace stores.


def new_trace(rng):
    return "%032x" % rng.getrandbits(128), "%016x" % rng.getrandbits(64)


def traceparent(tid, sid):
    return f"00-{tid}-{sid}-01"


# ---------------------------------------------------------------------------------------------
# Prometheus


class Prom:
    def __init__(self, base):
        self.base = base

    def query(self, expr, at=None):
        q = {"query": expr}
        if at is not None:
            q["time"] = f"{at:.3f}"
        status, body = http(self.base + "/api/v1/query", data=urllib.parse.urlencode(q).encode(),
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise Failed(f"query {expr!r}: {doc.get('error')}")
        return doc["data"]["result"]

    def exemplars(self, expr, start, end):
        q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}"})
        status, body = http(self.base + "/api/v1/query_exemplars?" + q)
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise Failed(f"exemplars {expr!r}: {doc.get('error')}")
        return doc["data"]

    def label_values(self, label, match):
        q = urllib.parse.urlencode({"match[]": match})
        status, body = http(f"{self.base}/api/v1/label/{label}/values?{q}")
        return json.loads(body).get("data", [])


def dashboard_targets(repo):
    """(dashboard, panel title, expression or query, datasource kind) of every target."""
    out = []
    for name in sorted(os.listdir(os.path.join(repo, "dashboards"))):
        if not name.endswith(".json"):
            continue
        doc = json.load(open(os.path.join(repo, "dashboards", name)))

        def walk(panels):
            for p in panels:
                for t in p.get("targets", []):
                    ds = (t.get("datasource") or p.get("datasource") or {}).get("type")
                    if t.get("expr"):
                        out.append((name, p.get("title"), t["expr"], "promql", doc))
                    elif t.get("queryType") == "traceql":
                        out.append((name, p.get("title"), t.get("query", ""), "traceql", doc))
                    elif t.get("queryType") == "serviceMap":
                        out.append((name, p.get("title"), "", "serviceMap", doc))
                    elif ds:
                        out.append((name, p.get("title"), json.dumps(t), "other", doc))
                walk(p.get("panels", []))

        walk(doc.get("panels", []))
    return out


def expand(expr, doc):
    """The expression as Grafana sends it with the dashboard's default variable values (All,
    whose allValue is `.*`; a textbox's value) and its default time range."""
    values = {}
    for v in doc.get("templating", {}).get("list", []):
        if v.get("type") == "datasource":
            continue
        cur = (v.get("current") or {}).get("value")
        if cur == ["$__all"] or cur == "$__all":
            values[v["name"]] = v.get("allValue") or ".*"
        elif isinstance(cur, list):
            values[v["name"]] = "(" + "|".join(cur) + ")"
        else:
            values[v["name"]] = cur or ""
    t_from = doc.get("time", {}).get("from", "now-30m")
    m = re.fullmatch(r"now-(\d+)([smhd])", t_from)
    range_s = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)] if m else 1800
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    expr = expr.replace("$__range", f"{range_s}s")
    expr = expr.replace("$__interval", f"{SCRAPE_INTERVAL_S}s")
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    if "$" in expr:
        raise Failed(f"unexpanded variable in {expr!r}")
    return expr


def rule_exprs(repo):
    """(kind, name, expr) of every rule in deploy/prometheus/rules.yml, read without a YAML
    library: the file's layout (record:/alert: then expr: scalar or block) is fixed."""
    out = []
    lines = open(os.path.join(repo, "deploy/prometheus/rules.yml")).read().splitlines()
    i = 0
    cur = None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\s*- (record|alert): (\S+)", line)
        if m:
            cur = (m.group(1), m.group(2))
        m = re.match(r"(\s*)expr: (.*)$", line)
        if m and cur:
            indent, rest = len(m.group(1)), m.group(2).strip()
            if rest in ("|", ">", "|-", ">-"):
                block = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    block.append(lines[i].strip())
                    i += 1
                out.append((cur[0], cur[1], " ".join(b for b in block if b)))
                cur = None
                continue
            out.append((cur[0], cur[1], rest))
            cur = None
        i += 1
    return out


# ---------------------------------------------------------------------------------------------
# Jaeger's HTTP query API (the one its UI uses): /api/traces/{id}, /api/traces?service=…


class Jaeger:
    def __init__(self, name, base):
        self.name = name
        self.base = base

    def trace(self, tid):
        status, body = http(f"{self.base}/api/traces/{tid}", timeout=10)
        if status == 404:
            return None
        if status != 200:
            raise Failed(f"{self.name}: GET /api/traces/{tid}: {status}")
        data = json.loads(body).get("data") or []
        return data[0] if data else None

    def has(self, tid):
        return self.trace(tid) is not None

    def search(self, service, limit=2000):
        q = urllib.parse.urlencode({"service": service, "limit": limit, "lookback": "1h"})
        status, body = http(f"{self.base}/api/traces?{q}", timeout=30)
        if status != 200:
            raise Failed(f"{self.name}: search {service}: {status}")
        return json.loads(body).get("data") or []

    def services(self):
        status, body = http(f"{self.base}/api/services")
        return json.loads(body).get("data") or []


def spans_of(trace):
    """Spans of a Jaeger trace as dicts: service, kind, name, id, parent, status, duration_s,
    attrs (span tags) and resource (process tags)."""
    out = []
    for s in trace["spans"]:
        proc = trace["processes"][s["processID"]]
        tags = {t["key"]: t["value"] for t in s.get("tags", [])}
        parent = next((r["spanID"] for r in s.get("references", [])
                       if r.get("refType") == "CHILD_OF"), None)
        status = "error" if tags.get("error") in (True, "true") or \
            tags.get("otel.status_code") == "ERROR" else (
                "ok" if tags.get("otel.status_code") == "OK" else "unset")
        res = {t["key"]: t["value"] for t in proc.get("tags", [])}
        res["service.name"] = proc["serviceName"]
        out.append({"service": proc["serviceName"], "kind": tags.get("span.kind", ""),
                    "name": s["operationName"], "id": s["spanID"], "parent": parent,
                    "status": status, "duration_s": s["duration"] / 1e6, "attrs": tags,
                    "resource": res})
    return out


# A TraceQL evaluator for the spanset filters traces.json uses: `{ cond && cond … }` where a
# cond is `resource.X =~ "re"`, `span.X = "v"`, `kind = server`, `status = error` or
# `duration > 500ms`. Used because Tempo does not run here (see the README); it fails on any
# construct it does not know, so a new dashboard query cannot pass unchecked.
TRACEQL_COND = re.compile(
    r'^(resource\.[\w.]+|span\.[\w.]+|kind|status|duration)\s*(=~|!=|=|>=|<=|>|<)\s*'
    r'("(?:[^"\\]|\\.)*"|[\w.]+)$')


def traceql_filter(query):
    q = query.strip()
    if not (q.startswith("{") and q.endswith("}")) or q.count("{") != 1:
        raise Failed(f"TraceQL beyond the checker's subset: {query!r}")
    conds = []
    for part in q[1:-1].split("&&"):
        m = TRACEQL_COND.match(part.strip())
        if not m:
            raise Failed(f"TraceQL condition beyond the checker's subset: {part.strip()!r}")
        conds.append(m.groups())

    def dur(v):
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m)", v)
        if not m:
            raise Failed(f"TraceQL duration {v!r}")
        return float(m.group(1)) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60}[m.group(2)]

    def match(span):
        for lhs, op, rhs in conds:
            lit = json.loads(rhs) if rhs.startswith('"') else rhs
            if lhs == "duration":
                a, b = span["duration_s"], dur(rhs)
                ok = {">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b, "=": a == b,
                      "!=": a != b}.get(op)
            else:
                if lhs == "kind":
                    val = span["kind"]
                elif lhs == "status":
                    val = span["status"]
                elif lhs.startswith("resource."):
                    val = span["resource"].get(lhs[len("resource."):])
                else:
                    val = span["attrs"].get(lhs[len("span."):])
                if val is None:
                    return False
                val = str(val)
                ok = {"=": val == lit, "!=": val != lit,
                      "=~": re.fullmatch(lit, val) is not None}.get(op)
            if not ok:
                return False
        return True

    return match


# ---------------------------------------------------------------------------------------------
# the run


class Pack:
    def __init__(self, a):
        self.a = a
        self.repo = a.repo
        self.work = a.workdir
        self.procs = []
        self.table = Table()
        self.rng = random.Random(a.seed)
        self.stop_bg = threading.Event()
        self.bg_threads = []
        self.bg_count = 0

    def start(self, name, argv, env=None):
        p = Proc(name, argv, self.work, env)
        self.procs.append(p)
        return p

    # -- components -----------------------------------------------------------------------

    def start_jaeger(self, name):
        ports = {k: free_port() for k in ("JAEGER_OTLP_GRPC_PORT", "JAEGER_QUERY_HTTP_PORT",
                                          "JAEGER_QUERY_GRPC_PORT")}
        env = {k: str(v) for k, v in ports.items()}
        # Jaeger's own tracing would otherwise export to localhost:4317.
        env["OTEL_TRACES_EXPORTER"] = "none"
        p = self.start(name, [self.a.jaeger, "--config",
                              os.path.join(self.repo, "scripts/conformance/jaeger.yaml")], env)
        base = f"http://127.0.0.1:{ports['JAEGER_QUERY_HTTP_PORT']}"
        wait_for(f"{name} query API", http_ok(base + "/api/services"), 90, procs=[p])
        return Jaeger(name, base), f"127.0.0.1:{ports['JAEGER_OTLP_GRPC_PORT']}"

    def start_collector(self, tempo_otlp, jaeger_otlp):
        self.otlp_grpc = free_port()
        self.spanmetrics_port = free_port()
        env = {"OTELCOL_OTLP_GRPC_PORT": str(self.otlp_grpc),
               "OTELCOL_OTLP_HTTP_PORT": str(free_port()),
               "OTELCOL_PROMETHEUS_PORT": str(self.spanmetrics_port),
               "OTELCOL_TELEMETRY_PORT": str(free_port()),
               "TEMPO_OTLP_GRPC_ENDPOINT": tempo_otlp,
               "JAEGER_OTLP_GRPC_ENDPOINT": jaeger_otlp}
        p = self.start("otelcol", [
            self.a.otelcol,
            "--config=" + os.path.join(self.repo, "otel-collector/config.yaml"),
            "--config=" + os.path.join(self.repo, "otel-collector/endpoints-overlay.yaml")], env)
        wait_for("the collector's prometheus exporter",
                 http_ok(f"http://127.0.0.1:{self.spanmetrics_port}/metrics"), 60, procs=[p])

    def start_standin(self, name, release, extra=()):
        port = free_port()
        p = self.start(name, [self.a.standin, name, release, f"127.0.0.1:{port}", *extra])
        url = f"http://127.0.0.1:{port}"
        wait_for(name, http_ok(url + "/readyz"), 60, procs=[p])
        return url

    def start_prometheus(self, admin_targets):
        d = os.path.join(self.work, "prometheus")
        os.makedirs(os.path.join(d, "targets"), exist_ok=True)
        shipped = open(os.path.join(self.repo, "deploy/prometheus/prometheus.yml")).read()
        if "otel-collector:8889" not in shipped:
            raise Failed("deploy/prometheus/prometheus.yml no longer names otel-collector:8889")
        # The only change: the collector's address (compose service name → loopback port).
        open(os.path.join(d, "prometheus.yml"), "w").write(
            shipped.replace("otel-collector:8889", f"127.0.0.1:{self.spanmetrics_port}"))
        shutil.copy(os.path.join(self.repo, "deploy/prometheus/rules.yml"), d)
        with open(os.path.join(d, "targets/mvproxy.yml"), "w") as f:
            f.write("- targets:\n")
            for t in admin_targets:
                f.write(f"    - {t}\n")
            f.write("  labels:\n    rehearsal: conformance\n")
        port = free_port()
        p = self.start("prometheus", [
            self.a.prometheus, f"--config.file={d}/prometheus.yml",
            f"--storage.tsdb.path={d}/data", f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage", "--log.level=warn"])
        base = f"http://127.0.0.1:{port}"
        wait_for("prometheus", http_ok(base + "/-/ready"), 60, procs=[p])
        return Prom(base)

    # -- traffic --------------------------------------------------------------------------

    def send(self, base, path, tid=None, timeout=10, extra=None):
        headers = {"Accept": "application/json", **(extra or {})}
        if tid:
            headers["traceparent"] = traceparent(*tid)
        t0 = time.time()
        try:
            status, _ = http(base + path, headers=headers, timeout=timeout)
        except OSError:
            status = 0
        return status, time.time() - t0

    def background(self):
        """A light steady load (about 8 requests a second) so every rate has samples: local
        requests and merged /apis on every running proxy, and requests cp-1 forwards to
        apiserver-2 (503s once cp-2 is down)."""
        i = 0
        while not self.stop_bg.is_set():
            targets = list(self.bg_targets)
            base = targets[i % len(targets)]
            self.send(base, LOCAL_PATH)
            self.send(base, "/apis", timeout=5)
            if i % 2 == 0:
                self.send(self.proxies[0], PEER_ONLY_PATH)
            if i % 4 == 0:
                self.send(self.proxies[2], OLD_ONLY_PATH, extra=OLD_CLIENT)
            if i % 4 == 2:
                self.unfixable(i)
            i += 1
            self.bg_count += 3
            self.stop_bg.wait(0.35)

    def unfixable(self, i):
        """Through cp-1 (forwarded to apiserver-2): a PodGroup created with its finalizer and
        deleted (left waiting), and a list of PodGroups (undecodable)."""
        obj = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
               "metadata": {"name": f"pg-{i}", "finalizers": [PODGROUP_FINALIZER]}}
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        base = self.proxies[0] + PODGROUPS_PATH
        try:
            http(base, headers, 5, json.dumps(obj).encode(), "POST")
            http(f"{base}/pg-{i}", headers, 5, method="DELETE")
        except OSError:
            pass
        self.send(self.proxies[0], PODGROUPS_PATH, timeout=5)

    def watcher(self):
        """One watch open on cp-1 at a time until the background load stops."""
        while not self.stop_bg.is_set():
            self.send(self.proxies[0], WATCH_PATH, timeout=20)

    def known_mix(self):
        """The healthy part of the known mix: fast local, peer-routed and slow requests, each
        with its own trace id. Returns {category: [(trace id, status, seconds)]}."""
        cats = {"fast-local": [], "peer-routed": [], "slow": []}
        threads = []
        slow_results = []

        def slow(tid, base):
            st, dt = self.send(base, SLOW_PATH, tid, timeout=10, extra=SLOW_HEADERS)
            slow_results.append((tid[0], st, dt))

        for k in range(SLOW):
            tid = new_trace(self.rng)
            t = threading.Thread(target=slow, args=(tid, self.proxies[k % 3]))
            t.start()
            threads.append(t)
        plan = ["fast-local"] * FAST_LOCAL + ["peer-routed"] * PEER_ROUTED
        self.rng.shuffle(plan)
        for k, cat in enumerate(plan):
            tid = new_trace(self.rng)
            if cat == "fast-local":
                st, dt = self.send(self.proxies[k % 3], LOCAL_PATH, tid)
            else:
                # cp-1 and cp-3 (1.31) forward it to apiserver-2 (1.34).
                st, dt = self.send(self.proxies[0 if k % 2 else 2], PEER_ONLY_PATH, tid)
            cats[cat].append((tid[0], st, dt))
        for t in threads:
            t.join()
        cats["slow"] = slow_results
        return cats

    # -- checks ---------------------------------------------------------------------------

    def check_validate(self):
        r = subprocess.run([self.a.otelcol, "validate",
                            "--config=" + os.path.join(self.repo, "otel-collector/config.yaml")],
                           capture_output=True, text=True, timeout=60)
        self.table.add("otelcol validate otel-collector/config.yaml (unmodified)",
                       r.returncode == 0,
                       "exit 0" if r.returncode == 0 else (r.stderr or r.stdout).strip()[-300:])

    def eval_promql(self, prom, label, expr):
        try:
            res = prom.query(expr)
        except Failed as e:
            return None, str(e)
        vals = [s["value"][1] for s in res]
        finite = [v for v in vals if v not in ("NaN", "+Inf", "-Inf")]
        return len(finite), f"{len(res)} series"

    def promql_checks(self, prom, phase, pending):
        """Evaluates every expression; returns the ones without a finite sample."""
        empty = []
        for key, expr in pending:
            n, detail = self.eval_promql(prom, key, expr)
            if n:
                self.results[key] = f"{phase}: {n} series"
            else:
                empty.append((key, expr))
                self.results[key] = f"{phase}: empty ({detail})"
        return empty

    def check_variables(self, prom):
        for name in sorted(os.listdir(os.path.join(self.repo, "dashboards"))):
            if not name.endswith(".json"):
                continue
            doc = json.load(open(os.path.join(self.repo, "dashboards", name)))
            for v in doc.get("templating", {}).get("list", []):
                if v.get("type") != "query":
                    continue
                q = v.get("query")
                q = q.get("query") if isinstance(q, dict) else q
                m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q or "")
                if not m:
                    self.table.add(f"{name} variable ${v['name']}", False, f"unknown query {q!r}")
                    continue
                vals = prom.label_values(m.group(2), m.group(1))
                self.table.add(f"{name} variable ${v['name']}: {q}", bool(vals),
                               f"{len(vals)} values: " + ", ".join(vals[:4]) +
                               (" …" if len(vals) > 4 else ""))

    def check_trace_shape(self, store, tid):
        """A peer-routed request: cp-1 or cp-3 SERVER → its CLIENT → cp-2 SERVER → cp-2 CLIENT."""
        trace = store.trace(tid)
        if trace is None:
            return False, f"trace {tid} not found"
        spans = spans_of(trace)
        by_id = {s["id"]: s for s in spans}
        servers = [s for s in spans if s["kind"] == "server"]
        clients = [s for s in spans if s["kind"] == "client"]
        first = [s for s in servers if s["parent"] not in by_id]
        if len(first) != 1:
            return False, f"{len(first)} root SERVER spans"
        s1 = first[0]
        c1 = [c for c in clients if c["parent"] == s1["id"] and c["service"] == s1["service"]]
        if len(c1) != 1:
            return False, f"{s1['service']} SERVER has {len(c1)} CLIENT children"
        s2 = [s for s in servers if s["parent"] == c1[0]["id"]]
        if len(s2) != 1 or s2[0]["service"] == s1["service"]:
            return False, "no SERVER span of the peer proxy under the CLIENT span"
        c2 = [c for c in clients if c["parent"] == s2[0]["id"] and c["service"] == s2[0]["service"]]
        if len(c2) != 1:
            return False, f"{s2[0]['service']} SERVER has {len(c2)} CLIENT children"
        route = s1["attrs"].get("mvproxy.route")
        return True, (f"{s1['service']} SERVER → CLIENT (route={route}) → {s2[0]['service']} "
                      f"SERVER → CLIENT; {len(spans)} spans")

    # -- main -----------------------------------------------------------------------------

    def run(self):
        t = self.table
        self.results = {}
        self.check_validate()
        if self.a.only_export_resilience:
            sink, sink_otlp = self.start_jaeger("jaeger-sink")
            self.export_resilience(self.start_standin("apiserver-1", "1.31"), sink_otlp, sink_otlp)
            return t

        tempo_sink, tempo_otlp = self.start_jaeger("jaeger-tempo-sink")
        jaeger, jaeger_otlp = self.start_jaeger("jaeger")
        self.start_collector(tempo_otlp, jaeger_otlp)
        unfixable = ["--group-of", os.path.join(self.repo, DISCOVERY_1_36), "scheduling.k8s.io",
                     "--undecodable", "scheduling.k8s.io/v1alpha1", "podgroups", "PodGroup"]
        stand = [self.start_standin("apiserver-1", "1.31"),
                 self.start_standin("apiserver-2", "1.34", unfixable),
                 self.start_standin("apiserver-3", "1.31")]
        listens = [free_port() for _ in range(3)]
        # Peers are the other proxies (the hop shows in both proxies' telemetry).
        self.proxy_procs, self.proxies, admins = [], [], []
        urls = [f"http://127.0.0.1:{p}" for p in listens]
        for i, n in enumerate((1, 2, 3)):
            peers = [(f"apiserver-{m}", urls[m - 1]) for m in (1, 2, 3) if m != n]
            p, _, admin = self.start_proxy_at(n, stand[i], peers, listens[i])
            self.proxy_procs.append(p)
            self.proxies.append(urls[i])
            admins.append(admin)
        # The fourth proxy of the error phase (peer apiserver-2 never up for it); its admin
        # address is a scrape target from the start (down until then).
        self.admin4 = f"127.0.0.1:{free_port()}"
        for p, admin in zip(self.proxy_procs, admins):
            wait_for(f"{p.name} ready", http_ok(f"http://{admin}/readyz"), 60, procs=[p])
        prom = self.start_prometheus(admins + [self.admin4])
        # Routing works before the mix starts: cp-1 forwards the 1.34-only GVR to apiserver-2.
        wait_for("peer routing", lambda: self.send(self.proxies[0], PEER_ONLY_PATH)[0] == 200, 60)

        self.bg_targets = list(self.proxies)
        self.bg_threads = [threading.Thread(target=self.background),
                           threading.Thread(target=self.watcher)]
        for th in self.bg_threads:
            th.start()
        mix_start = time.time()
        cats = self.known_mix()
        mix_end = time.time()
        bad = {c: [r for r in rs if not (200 <= r[1] < 300)] for c, rs in cats.items()}
        slow_fast = [r for r in cats["slow"] if r[2] <= SLOW_THRESHOLD_S]
        t.add("known mix sent (healthy phase)",
              not any(bad.values()) and not slow_fast,
              ", ".join(f"{c} {len(rs)} (non-2xx {len(bad[c])})" for c, rs in cats.items()) +
              f"; slow ones took {min(r[2] for r in cats['slow']):.2f}–"
              f"{max(r[2] for r in cats['slow']):.2f} s")

        # Let Prometheus scrape several times and the collector flush span metrics (15 s).
        time.sleep(4 * SCRAPE_INTERVAL_S + 5)

        exprs = []
        for dash, title, q, kind, doc in dashboard_targets(self.repo):
            if kind == "promql":
                exprs.append((f"{dash} · {title} · {q}", expand(q, doc)))
        for kind, name, q in rule_exprs(self.repo):
            exprs.append((f"rules.yml {kind} {name}", q))
            if kind == "record":
                exprs.append((f"rules.yml recorded series {name}", name))
        empty = self.promql_checks(prom, "healthy", exprs)
        self.check_variables(prom)

        # Exemplar on mvproxy_request_duration_seconds → the trace in both stores.
        ex = prom.exemplars('mvproxy_request_duration_seconds_bucket{route="peer"}',
                            mix_start - 5, time.time())
        tids = [e["labels"].get("trace_id") for series in ex for e in series.get("exemplars", [])
                if e["labels"].get("trace_id")]
        peer_tids = {r[0] for r in cats["peer-routed"]}
        chosen = next((x for x in tids if x in peer_tids), tids[0] if tids else None)
        t.add("exemplar trace_id on mvproxy_request_duration_seconds{route=\"peer\"}",
              chosen is not None,
              f"{len(tids)} exemplars, {len(set(tids) & peer_tids)} of the mix's peer-routed "
              f"traces; using {chosen}")

        # Tail sampling: decision_wait 10 s, then batch (5 s) and the stores' own batching.
        time.sleep(20)
        if chosen:
            for store in (tempo_sink, jaeger):
                ok, detail = False, ""
                deadline = time.time() + 30
                while time.time() < deadline:
                    ok, detail = self.check_trace_shape(store, chosen)
                    if ok:
                        break
                    time.sleep(2)
                label = "Tempo (otlp/tempo → trace sink)" if store is tempo_sink else "Jaeger"
                t.add(f"exemplar's trace in {label}: both proxies' SERVER and CLIENT spans, "
                      "parents right", ok, detail)

        # Span metrics bucket bounds, service graph edge.
        status, body = http(f"http://127.0.0.1:{self.spanmetrics_port}/metrics")
        les = sorted({m for m in re.findall(
            r'^traces_span_metrics_duration_milliseconds_bucket\{[^}]*le="([^"]+)"', body.decode(),
            re.M)}, key=lambda v: float("inf") if v == "+Inf" else float(v))
        t.add("span-metrics histogram bounds (ms)", les == SPANMETRICS_BOUNDS_MS, ", ".join(les))
        edges = prom.query('sum by (client, server) (traces_service_graph_request_total)')
        pairs = sorted({(e["metric"].get("client"), e["metric"].get("server")) for e in edges})
        want = {("mvproxy-cp-1", "mvproxy-cp-2"), ("mvproxy-cp-3", "mvproxy-cp-2")}
        t.add("service graph edge between the proxies",
              want <= set(pairs), "; ".join(f"{c} → {s}" for c, s in pairs))

        # Error phase: cp-2 stops (its peers see it down), a fourth proxy starts whose peer
        # apiserver-2 was never up; 50 requests for apiserver-2's GVR fail with 503.
        self.bg_targets = [self.proxies[0], self.proxies[2]]
        self.proxy_procs[1].stop()
        p4, url4, _ = self.start_proxy_at(4, stand[0], [("apiserver-1", self.proxies[0]),
                                                        ("apiserver-2", self.proxies[1])],
                                          int(self.admin4.split(":")[1]), admin_fixed=True)
        wait_for("mvproxy-cp-4 ready", http_ok(f"http://{self.admin4}/readyz"), 60, procs=[p4])
        failing = []
        for k in range(FAILING):
            tid = new_trace(self.rng)
            st, dt = self.send(self.proxies[0 if k % 2 else 2], PEER_ONLY_PATH, tid)
            failing.append((tid[0], st, dt))
        cats["failing"] = failing
        t.add("known mix sent (error phase: mvproxy-cp-2 down)",
              all(r[1] >= 500 for r in failing),
              "failing 50, codes " + ", ".join(sorted({str(r[1]) for r in failing})))
        time.sleep(4 * SCRAPE_INTERVAL_S + 15)
        still = self.promql_checks(prom, "error phase", empty)

        for key, _ in exprs:
            res = self.results[key]
            t.add(f"PromQL {key}", not res.startswith("error phase: empty") and
                  not (res.startswith("healthy: empty")), res)
        del still

        # Traces reached the stores as tail sampling promises.
        time.sleep(20)
        for store, label in ((tempo_sink, "Tempo (otlp/tempo → trace sink)"), (jaeger, "Jaeger")):
            counts = {c: sum(1 for r in rs if store.has(r[0])) for c, rs in cats.items()}
            n = FAST_LOCAL
            mean = n * BASELINE_PERCENT / 100
            sd = (n * (BASELINE_PERCENT / 100) * (1 - BASELINE_PERCENT / 100)) ** 0.5
            lo, hi = int(mean - 3 * sd), int(mean + 3 * sd + 0.999)
            ok = (counts["peer-routed"] == PEER_ROUTED and counts["slow"] == SLOW and
                  counts["failing"] == FAILING and lo <= counts["fast-local"] <= hi)
            t.add(f"tail sampling kept, in {label}", ok,
                  f"errors {counts['failing']}/{FAILING}, slow {counts['slow']}/{SLOW}, "
                  f"peer-routed {counts['peer-routed']}/{PEER_ROUTED}, baseline "
                  f"{counts['fast-local']}/{FAST_LOCAL} (5 %: {lo}–{hi} accepted, ±3σ)")

        # TraceQL of dashboards/traces.json over the traces in the otlp/tempo store.
        services = [s for s in tempo_sink.services() if s.startswith("mvproxy")]
        traces = {}
        for svc in services:
            for tr in tempo_sink.search(svc):
                traces[tr["traceID"]] = tr
        for dash, title, q, kind, doc in dashboard_targets(self.repo):
            if kind == "traceql":
                try:
                    match = traceql_filter(expand(q, doc))
                    hits = sum(1 for tr in traces.values() if any(match(s) for s in spans_of(tr)))
                    t.add(f"TraceQL {dash} · {title} · {q}", hits > 0,
                          f"{hits} of {len(traces)} traces (evaluated by the checker; Tempo not run)")
                except Failed as e:
                    t.add(f"TraceQL {dash} · {title}", False, str(e))
            elif kind == "serviceMap":
                t.add(f"{dash} · {title} (serviceMap: traces_service_graph_* in Prometheus)",
                      bool(edges), f"{len(edges)} edges")

        self.check_provisioning(prom, jaeger)
        self.stop_bg.set()
        for th in self.bg_threads:
            th.join(timeout=30)
        self.export_resilience(stand[0], tempo_otlp, jaeger_otlp)
        return t

    # -- export resilience: mutual TLS, gzip, a collector restart and a 30 s outage ---------

    def make_otlp_pki(self):
        """A throwaway CA, the collector's certificate (SAN IP 127.0.0.1) and mvproxy's client
        certificate, with openssl as scripts/control-plane/lib.sh makes the control plane's."""
        d = os.path.join(self.work, "otlp-pki")
        os.makedirs(d, exist_ok=True)

        def run(*argv):
            subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)

        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run("req", "-x509", *ec, "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt", "-days", "2",
            "-subj", "/CN=otlp-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,digitalSignature,keyCertSign")
        for name, cn, ext in (
                ("collector", "otel-collector",
                 "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                ("mvproxy", "mvproxy", "extendedKeyUsage=clientAuth")):
            run("req", "-new", *ec, "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr",
                "-subj", f"/CN={cn}")
            with open(f"{d}/{name}.ext", "w") as f:
                f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n" + ext + "\n")
            run("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.crt", "-CAkey",
                f"{d}/ca.key", "-CAcreateserial", "-days", "2", "-sha256", "-extfile",
                f"{d}/{name}.ext", "-out", f"{d}/{name}.crt")
        return d

    def check_count_overlay(self):
        """scripts/conformance/count-overlay.yaml writes traces/in's exporters out in full (a
        list is replaced by the merge): they must be config.yaml's plus otlp/count."""
        def exporters_of_traces_in(text):
            m = re.search(r"^    traces/in:\n(?:      .*\n)*?      exporters: \[([^\]]*)\]", text, re.M)
            return [e.strip() for e in m.group(1).split(",")] if m else None
        shipped = exporters_of_traces_in(
            open(os.path.join(self.repo, "otel-collector/config.yaml")).read())
        overlay = exporters_of_traces_in(
            open(os.path.join(self.repo, "scripts/conformance/count-overlay.yaml")).read())
        ok = shipped is not None and overlay == shipped + ["otlp/count"]
        self.table.add("count-overlay.yaml keeps config.yaml's traces/in exporters", ok,
                       f"config.yaml {shipped}; overlay {overlay}")
        if not ok:
            raise Failed("scripts/conformance/count-overlay.yaml is out of step with config.yaml")

    def start_tls_collector(self, n):
        p = self.start(f"otelcol-tls-{n}", [
            self.a.otelcol,
            "--config=" + os.path.join(self.repo, "otel-collector/config.yaml"),
            "--config=" + os.path.join(self.repo, "otel-collector/endpoints-overlay.yaml"),
            "--config=" + os.path.join(self.repo, "otel-collector/tls-overlay.yaml"),
            "--config=" + os.path.join(self.repo, "scripts/conformance/count-overlay.yaml")],
            self.tls_env)
        wait_for("the TLS collector", http_ok(f"http://127.0.0.1:{self.tls_metrics}/metrics"), 60,
                 procs=[p])
        return p

    def export_resilience(self, local, tempo_otlp, jaeger_otlp):
        """Two proxies export through the collector with the TLS overlay (mutual TLS, gzip),
        one over OTLP/gRPC with the default queue, one over OTLP/HTTP with a queue too small for
        the outage, under a steady load with every request sampled. The collector is restarted
        once, then stopped for OUTAGE_S and started again. Every SERVER span the requests
        produced either reached the store behind the collector or is counted in
        mvproxy_spans_dropped_total, exactly. A third proxy without a client certificate is
        refused."""
        t = self.table
        self.check_count_overlay()
        pki = self.make_otlp_pki()
        count_store, count_otlp = self.start_jaeger("jaeger-count")
        grpc_port, http_port, self.tls_metrics = free_port(), free_port(), free_port()
        self.tls_env = {"OTELCOL_OTLP_GRPC_PORT": str(grpc_port),
                        "OTELCOL_OTLP_HTTP_PORT": str(http_port),
                        "OTELCOL_PROMETHEUS_PORT": str(self.tls_metrics),
                        "OTELCOL_TELEMETRY_PORT": str(free_port()),
                        "TEMPO_OTLP_GRPC_ENDPOINT": tempo_otlp,
                        "JAEGER_OTLP_GRPC_ENDPOINT": jaeger_otlp,
                        "COUNT_OTLP_GRPC_ENDPOINT": count_otlp,
                        "OTELCOL_TLS_CERT_FILE": f"{pki}/collector.crt",
                        "OTELCOL_TLS_KEY_FILE": f"{pki}/collector.key",
                        "OTELCOL_TLS_CLIENT_CA_FILE": f"{pki}/ca.crt"}
        collector = self.start_tls_collector(1)

        def proxy(name, protocol, port, queue, client_cert=True):
            admin = free_port()
            argv = [self.a.mvproxy, "serve", "--server-id", "apiserver-1", "--local", local,
                    "--listen", f"127.0.0.1:{free_port()}", "--admin-listen",
                    f"127.0.0.1:{admin}", "--refresh-interval-seconds", "2",
                    "--connect-timeout-seconds", "2"]
            env = {"RUST_LOG": "warn",
                   "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{port}",
                   "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
                   "OTEL_EXPORTER_OTLP_CERTIFICATE": f"{pki}/ca.crt",
                   "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
                   "OTEL_TRACES_SAMPLER": "always_on",
                   "OTEL_SERVICE_NAME": name,
                   "OTEL_BSP_SCHEDULE_DELAY": "500",
                   "OTEL_BSP_MAX_QUEUE_SIZE": str(queue)}
            if client_cert:
                env["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"] = f"{pki}/mvproxy.crt"
                env["OTEL_EXPORTER_OTLP_CLIENT_KEY"] = f"{pki}/mvproxy.key"
            # Its --listen port is read back from the argv (free_port above).
            p = self.start(name, argv, env)
            url = "http://" + argv[argv.index("--listen") + 1]
            wait_for(f"{name} ready", http_ok(f"http://127.0.0.1:{admin}/readyz"), 60, procs=[p])
            return {"name": name, "protocol": protocol, "queue": queue, "url": url,
                    "metrics": f"http://127.0.0.1:{admin}/metrics", "sent": []}

        loaded = [proxy("mvproxy-tls-grpc", "grpc", grpc_port, 2048),
                  proxy("mvproxy-tls-http", "http/protobuf", http_port, RESILIENCE_SMALL_QUEUE)]
        nocert = proxy("mvproxy-tls-nocert", "grpc", grpc_port, 2048, client_cert=False)
        for _ in range(NOCERT_REQUESTS):
            nocert["sent"].append((new_trace(self.rng)[0], self.send(nocert["url"], LOCAL_PATH)[0]))

        stop = threading.Event()

        def load(px):
            rng = random.Random(px["name"])
            while not stop.is_set():
                tid = "%032x" % rng.getrandbits(128), "%016x" % rng.getrandbits(64)
                st, _ = self.send(px["url"], LOCAL_PATH, tid, timeout=5)
                px["sent"].append((tid[0], st))
                stop.wait(1 / RESILIENCE_RATE)

        threads = [threading.Thread(target=load, args=(px,)) for px in loaded]
        for th in threads:
            th.start()
        timeline = []
        try:
            time.sleep(RESILIENCE_STEADY_S)
            t0 = time.time()
            collector.stop()
            collector = self.start_tls_collector(2)
            timeline.append(f"restart {time.time() - t0:.1f} s")
            time.sleep(RESILIENCE_STEADY_S)
            collector.stop()
            t0 = time.time()
            time.sleep(OUTAGE_S)
            collector = self.start_tls_collector(3)
            timeline.append(f"down {time.time() - t0:.1f} s")
            time.sleep(RESILIENCE_STEADY_S)
        finally:
            stop.set()
            for th in threads:
                th.join(timeout=30)

        def metrics(px):
            _, body = http(px["metrics"])
            out = {}
            for line in body.decode().splitlines():
                m = re.match(r'^(mvproxy_span[s_][a-z_]*)(\{[^}]*\})? (\S+)$', line)
                if m:
                    out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            return out

        def queued(px):
            return metrics(px).get("mvproxy_span_export_queue_length")

        for px in loaded:
            wait_for(f"{px['name']}'s queue drained", lambda px=px: queued(px) == 0, 60)
        # The collector's otlp/count exporter and Jaeger's batch (1 s) behind it.
        time.sleep(5)

        rows = []
        for px in loaded:
            m = metrics(px)
            dropped = sum(v for k, v in m.items() if k.startswith("mvproxy_spans_dropped_total"))
            exported = m.get("mvproxy_spans_exported_total", 0)
            sent = {tid for tid, st in px["sent"] if st == 200}
            traces = count_store.search(px["name"], limit=20000)
            ids = {(s["kind"], s["id"]) for tr in traces for s in spans_of(tr)}
            server = {i for k, i in ids if k == "server"}
            arrived_sent = {tr["traceID"] for tr in traces
                            if any(s["kind"] == "server" for s in spans_of(tr))} & sent
            produced = 2 * len(sent)  # one SERVER and one CLIENT span per request
            missing = produced - len(ids)
            retries = m.get('mvproxy_span_export_requests_total{outcome="retry"}', 0)
            failures = m.get('mvproxy_span_export_requests_total{outcome="failure"}', 0)
            row = {"proxy": px["name"], "protocol": px["protocol"], "queue": px["queue"],
                   "requests": len(px["sent"]), "ok": len(sent), "server_in_store": len(server),
                   "server_of_requests": len(arrived_sent), "produced": produced,
                   "in_store": len(ids), "missing": missing, "dropped": int(dropped),
                   "exported": int(exported), "retry": int(retries), "failure": int(failures)}
            rows.append(row)
            want_drops = px["queue"] < 2048
            ok = (len(sent) == len(px["sent"]) and missing == dropped and
                  exported == len(ids) and (dropped > 0 if want_drops else dropped == 0) and
                  len(server) == len(arrived_sent))
            t.add(f"export over mutual TLS + gzip, {px['protocol']}, queue {px['queue']}: "
                  f"collector restarted, then down {OUTAGE_S} s",
                  ok, f"{len(sent)} requests → {len(sent)} SERVER spans, {len(server)} in the "
                  f"store; spans produced {produced}, in the store {len(ids)}, missing {missing}, "
                  f"mvproxy_spans_dropped_total {int(dropped)}, exported {int(exported)}; "
                  f"export requests retried {int(retries)}, failed {int(failures)}; "
                  + ", ".join(timeline))

        m = metrics(nocert)
        in_store = count_store.search(nocert["name"], limit=100)
        failed = sum(v for k, v in m.items()
                     if k.startswith("mvproxy_span_export_requests_total") and
                     ('"retry"' in k or '"failure"' in k))
        t.add("collector refuses a client without a certificate",
              m.get("mvproxy_spans_exported_total", 0) == 0 and not in_store and failed > 0,
              f"{len(nocert['sent'])} requests; exported "
              f"{int(m.get('mvproxy_spans_exported_total', 0))}, traces in the store "
              f"{len(in_store)}, export requests failed or retried {int(failed)}")

        hdr = ["proxy", "OTLP", "queue", "requests", "SERVER spans in Jaeger",
               "spans produced", "spans in Jaeger", "missing", "mvproxy_spans_dropped_total",
               "mvproxy_spans_exported_total", "export requests retried"]
        lines = ["| " + " | ".join(hdr) + " |", "|" + " --- |" * len(hdr)]
        for r in rows:
            lines.append(f"| {r['proxy']} | {r['protocol']} | {r['queue']} | {r['ok']} | "
                         f"{r['server_in_store']} | {r['produced']} | {r['in_store']} | "
                         f"{r['missing']} | {r['dropped']} | {r['exported']} | {r['retry']} |")
        self.table.extra.append("Export across a collector restart and a "
                                f"{OUTAGE_S} s outage ({', '.join(timeline)}):\n\n" +
                                "\n".join(lines))

    def start_proxy_at(self, n, local, peers, port, admin_fixed=False):
        """start_proxy with a fixed listen port (peers must know it before it starts), or with
        a fixed admin port (the fourth proxy, already a scrape target)."""
        listen = free_port() if admin_fixed else port
        admin = port if admin_fixed else free_port()
        argv = [self.a.mvproxy, "serve", "--server-id", f"apiserver-{n}", "--local", local,
                "--listen", f"127.0.0.1:{listen}", "--admin-listen", f"127.0.0.1:{admin}",
                "--refresh-interval-seconds", "2", "--connect-timeout-seconds", "2",
                # The rehearsal heads for 1.34: the overview's per-target panels and its
                # $target variable have the release to show.
                "--target-release", "1.34"]
        for name, url in peers:
            argv += ["--peer", f"{name}={url}"]
        env = {"RUST_LOG": "warn",
               "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.otlp_grpc}",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_SERVICE_NAME": f"mvproxy-cp-{n}",
               "OTEL_BSP_SCHEDULE_DELAY": "500"}
        p = self.start(f"mvproxy-cp-{n}", argv, env)
        return p, f"http://127.0.0.1:{listen}", f"127.0.0.1:{admin}"

    def check_provisioning(self, prom, jaeger):
        """dashboards/provisioning/datasources/mvproxy.yaml: every URL is a compose service
        whose port is the one the running component serves its API on, answers that API here,
        and every uid the dashboards and the cross-links name is provisioned."""
        text = open(os.path.join(self.repo, "dashboards/provisioning/datasources/mvproxy.yaml")).read()
        compose = open(os.path.join(self.repo, "deploy/compose.yaml")).read()
        tempo_yaml = open(os.path.join(self.repo, "deploy/tempo/tempo.yaml")).read()
        ds = re.findall(r"- name: (\w+)\n\s+type: (\w+)\n\s+uid: (\w+)\n(?:.*\n)*?\s+url: (\S+)", text)
        uids = {u for _, _, u, _ in ds}
        live = {"prometheus": (prom.base, "/api/v1/status/buildinfo"),
                "jaeger": (jaeger.base, "/api/services")}
        for name, typ, uid, url in ds:
            host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
            in_compose = re.search(rf"^  {re.escape(host)}:\n", compose, re.M) is not None
            if typ == "tempo":
                port_ok = re.search(rf"http_listen_port: {port}\b", tempo_yaml) is not None
                self.table.add(f"Grafana datasource {name} (uid {uid}) → {url}", None if
                               (in_compose and port_ok) else False,
                               f"compose service {host}: {in_compose}; deploy/tempo/tempo.yaml "
                               f"http_listen_port {port}: {port_ok}; not running here (Tempo "
                               "is not served by the module proxy)")
                continue
            expected = {"prometheus": 9090, "jaeger": 16686}[typ]
            base, api = live[typ]
            status, _ = http(base + api)
            self.table.add(f"Grafana datasource {name} (uid {uid}) → {url}",
                           in_compose and port == expected and status == 200,
                           f"compose service {host}: {in_compose}; port {port} = {typ}'s API "
                           f"port {expected}; live {api}: {status}")
        refs = set(re.findall(r"datasourceUid: (\w+)", text))
        for name in sorted(os.listdir(os.path.join(self.repo, "dashboards"))):
            if name.endswith(".json"):
                doc = json.load(open(os.path.join(self.repo, "dashboards", name)))
                for v in doc.get("templating", {}).get("list", []):
                    if v.get("type") == "datasource":
                        refs.add((v.get("current") or {}).get("value"))
        self.table.add("Grafana uids referenced (datasourceUid, dashboards' datasource defaults)",
                       refs <= uids, f"referenced {sorted(refs)}; provisioned {sorted(uids)}")

    def stop(self):
        self.stop_bg.set()
        for th in self.bg_threads:
            th.join(timeout=30)
        for p in reversed(self.procs):
            p.stop()


def main():
    ap = argparse.ArgumentParser()
    for k in ("repo", "workdir", "mvproxy", "standin", "otelcol", "jaeger", "prometheus"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--table-file")
    ap.add_argument("--only-export-resilience", action="store_true",
                    help="run only the last phase (export through the TLS collector across "
                    "a restart and an outage)")
    a = ap.parse_args()
    pack = Pack(a)
    code = 0
    try:
        pack.run()
    except Failed as e:
        pack.table.add("run", False, str(e))
    except Exception as e:  # a crash of the checker is a failed check, still with the table
        pack.table.add("run", False, f"{type(e).__name__}: {e}")
    finally:
        pack.stop()
    table = pack.table.render()
    print(table)
    if a.table_file:
        open(a.table_file, "w").write(table + "\n")
    failed = pack.table.failed()
    print(f"\ntelemetry-pack: {len(pack.table.rows) - len(failed)} passed, {len(failed)} failed")
    if failed:
        code = 1
        for p in pack.procs:
            print(f"--- {p.name} log tail ---\n{p.tail()}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
