#!/usr/bin/env python3
"""The path users run, on loopback: TLS in (HTTP/2, and HTTP/1.1 keep-alive), HTTP/2 over TLS to
the upstream, as kube-apiserver serves it; mvproxy against HAProxy and nginx in one run.

    python3 bench/realpath.py [[LABEL=]BINARY[@RATIO] ...]

Run it through bench/realpath.sh (installs the tools, builds mvproxy). Each argument is an
mvproxy binary (default target/release/mvproxy); `@RATIO` exports spans to a local OTLP sink
sampled with `traceidratio` RATIO; `LABEL=` names its rows (default `mvproxy`, `mvproxy-2`, ...).
Several binaries make it an A/B of builds against the same peers in the same run.

* The upstream: an nginx (one worker) serving the 2 KB PodList and the discovery documents over
  TLS, HTTP/2 by ALPN (and HTTP/1.1 to a client that asks for it), as kube-apiserver does. It is
  not mvproxy code, so the benchmark does not measure mvproxy against itself.
* HAProxy (one thread): TLS in (ALPN h2, http/1.1), `proto h2` over TLS to the upstream with
  `ssl verify required` against the upstream's CA, connections reused (`http-reuse always`).
* nginx (one worker): TLS in (HTTP/2 and HTTP/1.1); HTTP/1.1 over TLS out (nginx cannot proxy
  HTTP/2), verified, keep-alive and TLS session reuse: all it can.
* mvproxy: `--tls-cert-file` in; `--local https://...` with `--local-ca-file`: HTTP/2 by ALPN.

Layout as bench/loadtest.py: upstream and proxies pinned to core 0, the load generator (and
the sink) to core 1. UPSTREAM_CORE=load pins the upstream to the load generator's core
instead: on the proxy's core it runs only when the proxy yields the core, and which proxy the
kernel switches out for it decides a burst's first answers (bench/PERF_NOTES.md, thirty-sixth
round; every other run in it, and every table of bench/README.md, has the default, `proxy`).
Every configuration runs once per repeat, interleaved (in reverse order on odd repeats),
measured with each client protocol:

* CPU per request: the proxy's own CPU time (every thread's, in nanoseconds from /proc; the
  system part in clock ticks of 10 ms) over a closed-loop run (h2load, CONNECTIONS
  connections, default 32, each with STREAMS HTTP/2 streams, default 1, or HTTP/1.1
  keep-alive), divided by the requests completed; the upstream's CPU per request in
  the same run is given too (it is served HTTP/1.1 by nginx, HTTP/2 by the others), and the
  proxy's system calls and context switches per request (`perf stat`, when perf is there);
* at each fixed rate of RATES (default 2000 req/s; `RATES="2000 500"` runs both in each visit;
  h2load `--rps` from 4 connections of up to 4 streams, or 16 HTTP/1.1 connections): CPU per
  request (in nanoseconds since the thirty-third round of bench/PERF_NOTES.md; before it in
  clock ticks of 10 ms, 10 µs a request over 1 s at 1000 req/s, so those rounds' short runs
  read as medians over many repeats), and p50/p99 of the
  per-request latencies (h2load's log, oha's `--db-url` table) minus the upstream's own (the
  upstream measured straight, over the same client protocol, in the same repeat), with the
  requests arriving in two ways:
  - **spread**: the connections open one at a time, 1000/RATE ms apart (`-r 1 --rate-period`,
    whole milliseconds), so their timers are out of step and requests arrive one or two at a
    time, evenly through the second: a fixed rate as a server sees many independent clients.
    One stream per HTTP/2 connection: h2load's rate timer sends as many requests as the
    connection has free streams, so with 4 streams most requests left in fours, 8 ms apart
    (bench/PERF_NOTES.md, twentieth round). And at most 100 req/s per connection (at least
    RATE/100 connections): that timer fires no more often than every 10 ms, so with 4 HTTP/2
    connections the requests left in groups on a 10 ms grid, 4 over 3 ms at 500 req/s and 20
    over 4 ms at 2000, until the forty-second round;
  - **in bursts**: 16 requests sent together (oha `--burst-rate 16`; 16 HTTP/1.1 connections,
    or 4 HTTP/2 connections of 4 streams), a burst every 16/RATE s, as when clients are woken by
    the same event. A request's wait is then mostly the requests served before it in its burst,
    and a proxy's CPU per request is higher than spread: each burst finds the core's caches
    cold, and how it is woken through a burst decides how often (bench/PERF_NOTES.md,
    thirty-second round).
    Not h2load with its connections opened together: each connection's timer starts when its
    handshake ends, so how many requests arrive together depends on how the proxy under test
    finished the handshakes (6 to 16 for the same proxy, run to run), and proxies were compared
    over different bursts (bench/PERF_NOTES.md, sixteenth round). oha's burst timer (a sleep)
    adds about 1.5 ms to each period: it is shortened by that, and the rate reached is printed.
  The requests sent in each run's first 50 ms are left out: the connections' TLS handshakes
  happen then (16 of them with oha's first HTTP/1.1 burst), and those requests measure them.
  Both measure from when a request leaves, so a stall that holds back later requests is not
  charged to them: at 2000 req/s, a tenth of what every proxy here serves on a quiet machine,
  that is rare.

The same build given twice (`a=BIN b=BIN`) is a control: the table then says how far apart its
two copies came out, the band within which a difference to HAProxy is the machine's.
Ratios are to HAProxy over the same client protocol in the same repeat; the table gives the
median and the spread (min–max) over REPEATS (default 3) repeats of DURATION (default 3s). A
repeat's p99 is its 60th-slowest request of 6000 (3 s at 2000 req/s), and a moment of another
process's work on the core moves it by hundreds of µs: the latency tables also pool every
repeat's requests of a configuration (each repeat's requests spread over the run, interleaved with
the other configurations') and compare the pooled p50 and p99 with HAProxy's; more repeats give
the pooled p99 more requests, and a disturbance fewer of them.
PROTOS (default `h2 h1`) names the client protocols to run.
LATENCIES=DIR keeps every open-loop run's per-request log there (h2load's tab-separated log:
start in µs since the epoch, status, latency in µs; oha's sqlite table), named
NAME-PROTO-RATE-REPEAT-spread.tsv and -bursts.sqlite, to see when the slow requests came, and
in STEAL_LOG (`steal.tsv`) each run's steal time on the proxies' core (bench/latencies.py's
`QUIET` reads it). Steal is the time the host held that core's virtual CPU off it while it had
work (/proc/stat, in 10 ms ticks): no task on the machine shows it, and a request that arrives in
it waits. Each run's steal is printed beside it, and the table gives each configuration's: in the
forty-third round of bench/PERF_NOTES.md the silent gaps in the proxies' slowest request stages
rose and fell with it run by run, whichever proxy ran.
PROFILE=NAME records `perf record -e cpu-clock -g` of that configuration's first closed-loop run
into target/loadtest/realpath-NAME.perf.data and a flat report next to it.
COPIES=NAME counts, in a closed-loop run of its own per client protocol (the first repeat), the
bytes that build copies per request with memmove and memcpy, and the calls: uprobes on glibc's
implementations record each call's length (bench/PERF_NOTES.md, twenty-fourth round). A profile
puts those copies at several times the share of the CPU that `bench/instructions.sh` counts. It
needs a build linked to glibc (a plain `cargo build --release -p mvproxy --bin mvproxy`, not the
static shipped one).
"""

import collections
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sqlite3
import sys
import tempfile
import time
from contextlib import closing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadtest as lt  # noqa: E402

UP_TLS, HAPROXY_RP, NGINX_RP, SINK = 18501, 18502, 18503, 18599
# oha releases a burst this long after the last one has been sent (a tokio sleep, about 1.5 ms
# late): the delay asked for is shortened by that.
BURST, BURST_LATE_MS = 16, 1.5
# The perf stat events counted per request.
SYSCALLS, SWITCHES = "raw_syscalls:sys_enter", "context-switches"
# glibc's memmove implementations (memcpy is the same code; the CPU decides which one runs), and
# the requests counted in COPIES's run (each copy traps into a uprobe: the run is slow).
MEMMOVES = ("avx512", "evex", "avx", "sse2")
COPIES_REQUESTS = 2000
MVPROXY0, ADMIN0 = 18510, 18530
# Where UPSTREAM_CORE puts the upstream nginx.
UPSTREAM_CORES = {"proxy": lt.PROXY_CORE, "load": lt.LOAD_CORE}
# A run's first requests go out while its connections are being opened (h2load opens one a
# millisecond, oha opens its 16 HTTP/1.1 connections with its first burst) and each TLS
# handshake holds the core for a millisecond or two: those requests measure the handshakes, oha's
# first HTTP/1.1 burst 30-80 ms of them, about 1 % of a 1 s run's requests at 2000 req/s, and
# decided its p99 (bench/PERF_NOTES.md, twenty-fifth round). The requests sent in a run's first
# WARMUP_US are left out of its latencies, alike for every configuration.
WARMUP_US = 50_000
# Where LATENCIES keeps each open-loop run's steal time on the proxies' core: a line per run, the
# run's log name without its extension, a tab, the milliseconds.
STEAL_LOG = "steal.tsv"


def upstream_conf(work, root, cert, key):
    return f"""worker_processes 1;
error_log {work}/nginx-up-tls.log;
pid {work}/nginx-up-tls.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{UP_TLS} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    http2_max_concurrent_streams 1000;
    root {root};
    location = /api {{ default_type "{lt.V2_TYPE}"; try_files /api/index.json =404; }}
    location = /apis {{ default_type "{lt.V2_TYPE}"; try_files /apis/index.json =404; }}
    location / {{ default_type application/json; }}
  }}
}}
"""


def make_certs(work):
    """A CA and a P-256 serving certificate for 127.0.0.1 and localhost it signed (webpki, as
    mvproxy verifies, refuses a self-signed CA as the server's own certificate)."""
    def run(*argv):
        subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=work)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=bench-ca")
    run("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=localhost")
    with open(os.path.join(work, "ext.cnf"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "ext.cnf", "-out", "tls.crt")
    return (os.path.join(work, "tls.crt"), os.path.join(work, "tls.key"), os.path.join(work, "ca.crt"))


def proxies_conf(work, cert, key, ca):
    nginx = f"""worker_processes 1;
error_log {work}/nginx-rp.log;
pid {work}/nginx-rp.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  upstream api {{ server 127.0.0.1:{UP_TLS}; keepalive 64; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{NGINX_RP} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {{
      proxy_pass https://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate {ca};
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_ssl_session_reuse on;
    }}
  }}
}}
"""
    haproxy = f"""global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend fe
  bind 127.0.0.1:{HAPROXY_RP} ssl crt {work}/tls.pem alpn h2,http/1.1
  # An HTTP/2 answer has no reason phrase and HAProxy sends none over HTTP/1.1 ("200 "), which
  # h2load's HTTP/1.1 parser does not count as an answer: name it, as nginx and mvproxy do.
  http-response set-status 200 reason OK if {{ status 200 }}
  default_backend be
backend be
  server up 127.0.0.1:{UP_TLS} ssl verify required ca-file {ca} sni str(localhost) alpn h2 proto h2
"""
    return nginx, haproxy


def prepare(work):
    """Writes into `work` what every bench of this path serves from: a CA and the certificate
    the proxies and the upstream present (`tls.pem` for HAProxy), the document root, and the
    upstream's, nginx's and HAProxy's configurations (`up-tls.conf`, `rp.conf`, `rp.cfg`).
    Returns the certificate, key and CA files."""
    cert, key, ca = make_certs(work)
    with open(os.path.join(work, "tls.pem"), "w") as f:
        f.write(open(cert).read() + open(key).read())
    lt.write_configs(work, cert, key)  # the document root
    nginx, haproxy = proxies_conf(work, cert, key, ca)
    for name, text in [("up-tls.conf", upstream_conf(work, os.path.join(work, "root"), cert, key)),
                       ("rp.conf", nginx), ("rp.cfg", haproxy)]:
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    return cert, key, ca


def h2load(port, proto, args, log=None):
    """Runs h2load with `args` (`-D` a duration or `-n` a count, connections, streams); the
    requests that succeeded (it exits on any failure or non-2xx answer)."""
    argv = ["taskset", "-c", lt.LOAD_CORE, "h2load", "-t1"] + args
    if proto == "h1":
        argv.append("--h1")
    if log:
        argv.append(f"--log-file={log}")
    argv.append(f"https://127.0.0.1:{port}{lt.PATH}")
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not m or not codes or int(m.group(4)) or int(m.group(5)) or sum(map(int, codes.groups()[1:])):
        sys.exit(f"errors under load on port {port} ({proto}):\n{out}")
    return int(m.group(3))


def closed(port, proto, duration, connections, streams):
    return h2load(port, proto, ["-D", duration, "-c", str(connections), "-m", str(streams if proto == "h2" else 1)])


# h2load's rate timer fires at most every 10 ms on each connection (nghttp2, src/h2load.cc, on
# connect: `rps_watcher.repeat = std::max(0.01, 1. / config.rps)`), and then sends every request
# that came due, one after another on the connection's one stream.
H2LOAD_TIMER_FLOOR_S = 0.01


def spread_shape(proto, rate):
    """`spread`'s connections and the whole milliseconds between their openings: enough
    connections that each one's timer fires at its own interval, opened so that their timers
    tick evenly through it (one request every 1000/rate ms; pairs a millisecond apart above 1000
    req/s, as `--rate-period` takes whole milliseconds), all of them within the WARMUP_US that
    `settled` leaves out."""
    clients = max(shape(proto)[0], math.ceil(rate * H2LOAD_TIMER_FLOOR_S))
    return clients, max(1, min(round(1000 / rate), WARMUP_US // 1000 // clients))


def shape(proto):
    """The open-loop client: (connections, streams on each), 16 requests in flight at most, as
    BURST. `spread` takes its connection count as a floor (`spread_shape`), one stream each."""
    return (4, 4) if proto == "h2" else (BURST, 1)


def seconds(duration):
    """A duration as h2load and oha take it ("3s") in seconds."""
    return float(duration.rstrip("s"))


def keep(path, keep_as):
    """Moves a run's per-request log to `keep_as` (`LATENCIES`), or deletes it."""
    if keep_as:
        shutil.move(path, keep_as)
    else:
        os.unlink(path)


def settled(requests):
    """The latencies of `requests` ((start, latency) in µs) sent after their run's first WARMUP_US."""
    first = min((start for start, _ in requests), default=0)
    return [latency for start, latency in requests if start - first >= WARMUP_US]


def logged_requests(path):
    """(start, latency) in µs of each answered request of a per-request log, in the order sent:
    h2load's tab-separated log (start in µs since the epoch, status, latency in µs) or oha's
    `--db-url` table (`.sqlite`)."""
    if path.endswith(".sqlite"):
        with closing(sqlite3.connect(path)) as conn:
            rows = conn.execute("SELECT start, duration FROM oha WHERE status = 200")
            return sorted((start * 1e6, d * 1e6) for start, d in rows)
    fields = [line.split("\t") for line in open(path)]
    return sorted((int(f[0]), int(f[2])) for f in fields if len(f) >= 3 and f[1] == "200")


def spread(port, proto, duration, rate, work, keep_as=None):
    """`rate` req/s from the connections of `spread_shape`, their timers out of step: the
    requests served, and the latency of each in µs (from h2load's per-request log)."""
    clients, period_ms = spread_shape(proto, rate)
    log = os.path.join(work, "latency.tsv")
    # h2load appends to its log file.
    if os.path.exists(log):
        os.unlink(log)
    # -r and -D are exclusive in h2load: the run length as a count.
    count = round(rate * seconds(duration))
    args = ["-c", str(clients), "-m", "1", f"--rps={rate / clients:g}",
            "-r", "1", "--rate-period", f"{period_ms}ms", "-n", str(count)]
    n = h2load(port, proto, args, log)
    lat = settled(logged_requests(log))
    keep(log, keep_as)
    return n, lat


def bursts(port, proto, duration, rate, ca, work, keep_as=None):
    """`rate` req/s as bursts of BURST requests sent together (oha), from the connections of
    `shape`: the rate reached, and the latency of each request in µs (oha's `--db-url` table)."""
    clients, streams = shape(proto)
    db = os.path.join(work, "bursts.sqlite")
    if os.path.exists(db):
        os.unlink(db)
    delay_ms = max(1.0, BURST * 1000 / rate - BURST_LATE_MS)
    argv = ["taskset", "-c", lt.LOAD_CORE, "oha", "--no-tui", "--output-format", "json", "-z", duration,
            "--burst-delay", f"{delay_ms * 1000:.0f}us", "--burst-rate", str(BURST), "--cacert", ca,
            "--db-url", db]
    argv += ["-c", str(clients)] + (["--http2", "-p", str(streams)] if proto == "h2" else [])
    argv.append(f"https://127.0.0.1:{port}{lt.PATH}")
    res = lt.oha_run(argv, port)
    lat = settled(logged_requests(db))
    keep(db, keep_as)
    return res["summary"]["requestsPerSec"], lat


def nearest_rank(n, pc):
    """The index in `n` sorted samples of their `pc`th percentile, as h2load's and oha's own
    summaries take it."""
    return min(n - 1, n * pc // 100)


def percentiles(samples, per_cent=(50, 99)):
    """The percentiles `per_cent` (default p50 and p99) of `samples` (`nearest_rank`); NaN for no
    samples."""
    lat = sorted(samples)
    if not lat:
        return tuple(float("nan") for _ in per_cent)
    return tuple(lat[nearest_rank(len(lat), pc)] for pc in per_cent)


def copy_probes(binary):
    """Adds uprobes recording the length of each call of the memmove implementations of the
    libc `binary` links, and returns their events; exits when it links none (the shipped build
    is static and stripped: count a plain `cargo build --release -p mvproxy --bin mvproxy` binary)."""
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libc = re.search(r"libc\.so\.6 => (\S+)", ldd)
    if not libc or not shutil.which("perf"):
        sys.exit(f"COPIES: {binary} links no libc.so.6 (or perf is missing): give it a plain "
                 "`cargo build --release -p mvproxy --bin mvproxy` binary")
    subprocess.run(["perf", "probe", "-q", "-d", "probe_libc:mvproxy_copy_*"], capture_output=True)
    events = []
    for impl in MEMMOVES:
        event = f"mvproxy_copy_{impl}"
        add = subprocess.run(["perf", "probe", "-q", "-x", libc.group(1), "--add",
                              f"{event}=__memmove_{impl}_unaligned_erms len=%dx:u64"], capture_output=True)
        if add.returncode == 0:
            events.append(f"probe_libc:{event}")
    if not events:
        sys.exit(f"COPIES: no memmove implementation of {libc.group(1)} could be probed")
    return events


def count_copies(pids, events, port, proto, connections, streams):
    """The calls of memmove (and memcpy) in `pids` and the bytes they copy, per request, over
    COPIES_REQUESTS closed-loop requests; and the sizes that copy the most bytes."""
    data = tempfile.mktemp(prefix="bench-copies-")
    rec = subprocess.Popen(["taskset", "-c", lt.LOAD_CORE, "perf", "record", "-q", "-e", ",".join(events),
                            "-o", data, "-p", ",".join(map(str, pids))],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    served = h2load(port, proto, ["-n", str(COPIES_REQUESTS), "-c", str(connections),
                                  "-m", str(streams if proto == "h2" else 1)])
    rec.send_signal(2)
    rec.wait()
    trace = subprocess.run(["perf", "script", "-i", data, "-F", "trace"], capture_output=True, text=True).stdout
    os.unlink(data)
    lengths = [int(n, 0) for n in re.findall(r"len=(\w+)", trace)]
    largest = sorted(collections.Counter(lengths).items(), key=lambda kv: -kv[0] * kv[1])[:5]
    return (len(lengths) / served, sum(lengths) / served,
            ", ".join(f"{size} B × {count / served:.2f}" for size, count in largest))


def parse_binaries(args):
    """`[LABEL=]BINARY[@RATIO]` arguments (default target/release/mvproxy) as (label, path,
    sampling ratio or ""), labelled `mvproxy`, `mvproxy-2`, ... when unnamed; exits naming a
    BINARY that is not an executable file."""
    binaries = []
    for i, arg in enumerate(args or [os.path.join(lt.ROOT, "target/release/mvproxy")]):
        label, _, rest = arg.rpartition("=")
        path, _, ratio = rest.partition("@")
        label = label or ("mvproxy" if i == 0 else f"mvproxy-{i + 1}")
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            sys.exit(f"{label}: {path} is not an executable file")
        binaries.append((label + (f"@{ratio}" if ratio else ""), path, ratio))
    return binaries


def med(values):
    return statistics.median(values) if values else float("nan")


def rng(values, fmt):
    """The median, and the spread when there is one."""
    lo, mid, hi = (fmt.format(x) for x in (min(values), med(values), max(values)))
    return mid if lo == hi else f"{mid} ({lo}–{hi})"


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    reps = int(os.environ.get("REPEATS", "3"))
    duration = os.environ.get("DURATION", "3s")
    try:
        rates = [int(r) for r in os.environ.get("RATES", os.environ.get("RATE", "2000")).split()]
    except ValueError:
        rates = []
    if not rates or min(rates) <= 0:
        sys.exit(f"RATES={os.environ.get('RATES', os.environ.get('RATE'))!r}: give one or more rates in req/s")
    connections = int(os.environ.get("CONNECTIONS", "32"))
    streams = int(os.environ.get("STREAMS", "1"))
    profile = os.environ.get("PROFILE", "")
    copies = os.environ.get("COPIES", "")
    latencies = os.environ.get("LATENCIES", "")
    if latencies:
        os.makedirs(latencies, exist_ok=True)
    protos = os.environ.get("PROTOS", "h2 h1").split()
    if not protos or set(protos) - {"h2", "h1"}:
        sys.exit(f"PROTOS={os.environ.get('PROTOS')!r}: give h2, h1 or both")
    upstream_core = UPSTREAM_CORES.get(os.environ.get("UPSTREAM_CORE", "proxy"))
    if upstream_core is None:
        sys.exit(f"UPSTREAM_CORE={os.environ.get('UPSTREAM_CORE')!r}: give proxy (the default) or load")
    out_dir = os.path.join(lt.ROOT, "target/loadtest")
    os.makedirs(out_dir, exist_ok=True)

    binaries = parse_binaries(sys.argv[1:])
    copy_events = []
    if copies:
        path = {label: path for label, path, _ in binaries}.get(copies)
        if path is None:
            sys.exit(f"COPIES={copies!r}: name one of the mvproxy builds ({', '.join(b[0] for b in binaries)})")
        copy_events = copy_probes(path)
    copy_lines = []

    work = tempfile.mkdtemp(prefix="mvproxy-realpath-")
    os.chmod(work, 0o755)  # nginx workers run as another user
    procs = lt.Procs()
    try:
        cert, key, ca = prepare(work)
        pids, ports = {}, {}
        pids["upstream"] = procs.start("upstream", ["nginx", "-c", f"{work}/up-tls.conf", "-g", "daemon off;"],
                                       upstream_core).pid
        ports["upstream"] = UP_TLS
        lt.wait_port(UP_TLS)
        pids["haproxy"] = procs.start("haproxy", ["haproxy", "-db", "-f", f"{work}/rp.cfg"], lt.PROXY_CORE).pid
        ports["haproxy"] = HAPROXY_RP
        pids["nginx"] = procs.start("nginx", ["nginx", "-c", f"{work}/rp.conf", "-g", "daemon off;"],
                                    lt.PROXY_CORE).pid
        ports["nginx"] = NGINX_RP
        if any(ratio for _, _, ratio in binaries):
            procs.start("sink", [sys.executable, os.path.join(lt.ROOT, "bench/loadtest.py"), "--sink", str(SINK)],
                        lt.LOAD_CORE)
            lt.wait_port(SINK)
        for i, (label, path, ratio) in enumerate(binaries):
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            if label == profile:
                env["MVPROXY_HUGE_TEXT"] = "0"  # perf finds symbols through the file's code
            if ratio:
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{SINK}"
                env["OTEL_TRACES_SAMPLER"] = "traceidratio"
                env["OTEL_TRACES_SAMPLER_ARG"] = ratio
            port, admin = MVPROXY0 + i, ADMIN0 + i
            argv = os.environ.get("MVPROXY_ENV", "").split() + [
                path, "serve", "--local", f"https://127.0.0.1:{UP_TLS}", "--local-ca-file", ca,
                "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                "--tls-cert-file", cert, "--tls-key-file", key, "--log-format", "json"]
            pids[label] = procs.start(label, argv, lt.PROXY_CORE, env=env, log=f"{work}/{label}.log").pid
            ports[label] = port
            lt.wait_ready(admin)
        for port in (HAPROXY_RP, NGINX_RP):
            lt.wait_port(port)

        configs = [(name, proto) for name in ports for proto in protos]
        print(f"# {len(configs)} configurations x {reps} repeat(s), {duration} each: {connections} connections "
              f"closed loop ({streams} HTTP/2 stream(s) each), {' and '.join(map(str, rates))} req/s open loop; "
              f"GET {lt.PATH}", flush=True)
        results = {c: [] for c in configs}
        pooled = collections.defaultdict(list)
        profiled = False
        for rep in range(reps):
            for name, proto in configs if rep % 2 == 0 else configs[::-1]:
                port = ports[name]
                proxy = lt.tree(pids[name])
                up = lt.tree(pids["upstream"])
                closed(port, proto, "1s", connections, streams)  # warm up
                perf = None
                if profile and profile == name and proto == "h2" and not profiled:
                    profiled = True
                    data = os.path.join(out_dir, f"realpath-{name}.perf.data")
                    perf = subprocess.Popen(["taskset", "-c", lt.LOAD_CORE, "perf", "record", "-e", "cpu-clock",
                                             "-g", "-o", data, "-p", ",".join(map(str, proxy))],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                c0, u0, (_, s0) = lt.cpu_seconds(proxy), lt.cpu_seconds(up), lt.user_system(proxy)
                n, counts = lt.perf_counts(proxy, [SYSCALLS, SWITCHES],
                                           lambda: closed(port, proto, duration, connections, streams))
                calls, switches = counts.get(SYSCALLS), counts.get(SWITCHES)
                c1, u1, (_, s1) = lt.cpu_seconds(proxy), lt.cpu_seconds(up), lt.user_system(proxy)
                if perf:
                    perf.send_signal(2)
                    perf.wait()
                    with open(os.path.splitext(data)[0] + ".txt", "w") as f:
                        subprocess.run(["perf", "report", "-i", data, "--no-children", "--percent-limit", "0.3",
                                        "--stdio", "-g", "none", "--sort", "dso,symbol"], stdout=f,
                                       stderr=subprocess.DEVNULL)
                    print(f"  profile of {name}: {data}", flush=True)
                if copy_events and name == copies and rep == 0:
                    copy_calls, copied, largest = count_copies(proxy, copy_events, port, proto, connections,
                                                               streams)
                    copy_lines.append(f"{name}, {'HTTP/2' if proto == 'h2' else 'HTTP/1.1'} client: {copy_calls:.0f} "
                                      f"copies (memmove, memcpy) and {copied / 1000:.1f} KB copied per request; "
                                      f"the sizes that copy the most: {largest}.")
                    print(f"  copies in {copy_lines[-1]}", flush=True)
                r = {"cpu": (c1 - c0) / n * 1e6, "sys": (s1 - s0) / n * 1e6, "up": (u1 - u0) / n * 1e6,
                     "rps": n / seconds(duration),
                     "syscalls": calls / n if calls is not None else float("nan"),
                     "switches": switches / n if switches is not None else float("nan")}
                line = (f"  [{rep + 1}] {name:14} {proto}  {r['cpu']:5.1f} µs/req closed (system {r['sys']:4.1f}, "
                        f"upstream {r['up']:4.1f}), {r['rps']:6.0f} req/s, {r['syscalls']:4.2f} syscalls/req, "
                        f"{r['switches']:4.2f} switches/req")
                for rate in rates:
                    c2, t2 = lt.cpu_seconds(proxy), lt.steal_seconds(lt.PROXY_CORE)
                    kept = os.path.join(latencies, f"{name}-{proto}-{rate}-{rep + 1}") if latencies else None
                    m, lat = spread(port, proto, duration, rate, work, kept and kept + "-spread.tsv")
                    c3, t3 = lt.cpu_seconds(proxy), lt.steal_seconds(lt.PROXY_CORE)
                    r[f"cpu_rate@{rate}"] = (c3 - c2) / m * 1e6
                    burst_rps, burst_lat = bursts(port, proto, duration, rate, ca, work,
                                                  kept and kept + "-bursts.sqlite")
                    r[f"steal_spread@{rate}"] = (t3 - t2) * 1e3
                    r[f"steal_bursts@{rate}"] = (lt.steal_seconds(lt.PROXY_CORE) - t3) * 1e3
                    if kept:
                        with open(os.path.join(latencies, STEAL_LOG), "a") as f:
                            for pattern in ("spread", "bursts"):
                                f.write(f"{os.path.basename(kept)}-{pattern}\t{r[f'steal_{pattern}@{rate}']:.0f}\n")
                    r[f"burst_rps@{rate}"] = burst_rps
                    r[f"cpu_burst@{rate}"] = (lt.cpu_seconds(proxy) - c3) / (burst_rps * seconds(duration)) * 1e6
                    for pattern, samples in (("spread", lat), ("bursts", burst_lat)):
                        p50, p99 = percentiles(samples)
                        r[f"{pattern}50@{rate}"], r[f"{pattern}99@{rate}"] = p50, p99
                        pooled[(name, proto, rate, pattern)] += samples
                    line += (f"; at {rate}/s {r[f'cpu_rate@{rate}']:5.1f} µs/req, p50 {r[f'spread50@{rate}']:5.0f} µs, "
                             f"p99 {r[f'spread99@{rate}']:6.0f} µs, in bursts ({burst_rps:.0f} req/s) "
                             f"{r[f'cpu_burst@{rate}']:5.1f} µs/req, "
                             f"p50 {r[f'bursts50@{rate}']:5.0f} µs, p99 {r[f'bursts99@{rate}']:6.0f} µs, "
                             f"steal {r[f'steal_spread@{rate}']:.0f} and {r[f'steal_bursts@{rate}']:.0f} ms")
                r["rss"] = lt.rss_mb(proxy)
                results[(name, proto)].append(r)
                print(line, flush=True)
        table = render(results, pooled, ports, protos, reps, duration, rates, connections, streams, upstream_core)
        table += same_build(binaries, results, pooled, protos, rates)
        if copy_lines:
            table += f"\nCopies, counted over {COPIES_REQUESTS} closed-loop requests of their own (uprobes on glibc's " \
                     "memmove, `COPIES`):\n\n" + "".join(f"- {line}\n" for line in copy_lines)
        print()
        print(table)
        with open(os.path.join(out_dir, "realpath.md"), "w") as f:
            f.write(table)
        with open(os.path.join(out_dir, "realpath.json"), "w") as f:
            json.dump({f"{k[0]} {k[1]}": v for k, v in results.items()}, f, indent=1)
        for label, _, _ in binaries:
            log = f"{work}/{label}.log"
            bad = sum('"level":"WARN"' in line or '"level":"ERROR"' in line for line in open(log))
            if bad:
                print(f"{label} logged {bad} warnings or errors")
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)
        if copy_events:
            subprocess.run(["perf", "probe", "-q", "-d", "probe_libc:mvproxy_copy_*"], capture_output=True)


def render(results, pooled, ports, protos, reps, duration, rates, connections, streams, upstream_core):
    """The CPU table, then a latency table per rate."""
    rows = [
        f"Loopback, {lt.machine()}; proxy on core {lt.PROXY_CORE}, upstream on core {upstream_core}, load "
        f"generator on core {lt.LOAD_CORE}. Medians (min–max) over {reps} repeat(s) of {duration}; ratios to "
        f"HAProxy over the same client protocol in the same repeat. Closed loop: {connections} connections"
        f"{f' ({streams} streams each)' if streams > 1 else ''}; open loop: {' and '.join(map(str, rates))} req/s. "
        f"GET {lt.PATH} (2 KB PodList) from an nginx serving HTTP/2 over TLS. Load average at the end: "
        f"{os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[1]:.1f} (5 min); above about 1.5 other processes "
        f"share the cores, and the latency columns measure them more than the proxies.",
        "",
        "| configuration | client | CPU per request, closed loop | of which system | vs HAProxy | "
        "upstream's CPU per request | system calls per request | context switches per request | throughput | "
        + "".join(f"CPU per request at {rate} req/s | vs HAProxy | the same in bursts | vs HAProxy | "
                  for rate in rates) + "RSS |",
        "| --- " * (10 + 4 * len(rates)) + "|",
    ]
    labels = {"upstream": "upstream alone (nginx, HTTP/2 over TLS)",
              "haproxy": "HAProxy (1 thread), `proto h2` over TLS out",
              "nginx": "nginx (1 worker), HTTP/1.1 over TLS out"}
    clients = {"h2": "HTTP/2, TLS", "h1": "HTTP/1.1, TLS"}
    for name in ports:
        for proto in protos:
            v, ref = results[(name, proto)], results[("haproxy", proto)]

            def vals(key, rows=v):
                return [r[key] for r in rows]

            def ratio(key, rows=v):
                return "—" if name == "upstream" else rng([a[key] / b[key] for a, b in zip(rows, ref)], "{:.2f}")
            label = labels.get(name, f"{name}, HTTP/2 over TLS out")
            rows.append(f"| {label} | {clients[proto]} | {rng(vals('cpu'), '{:.1f}')} µs | {rng(vals('sys'), '{:.1f}')} µs | "
                        f"{ratio('cpu')} | {'—' if name == 'upstream' else rng(vals('up'), '{:.1f}') + ' µs'} | "
                        f"{rng(vals('syscalls'), '{:.2f}')} | {rng(vals('switches'), '{:.2f}')} | "
                        f"{rng(vals('rps'), '{:.0f}')} req/s | "
                        + "".join(f"{rng(vals(f'{key}@{rate}'), '{:.1f}')} µs | {ratio(f'{key}@{rate}')} | "
                                  for rate in rates for key in ("cpu_rate", "cpu_burst"))
                        + f"{med(vals('rss')):.1f} MB |")
    for rate in rates:
        burst_rps = [r[f"burst_rps@{rate}"] for rows_ in results.values() for r in rows_]
        counts = sorted({len(pooled[k]) for k in pooled if k[2] == rate})
        rows += [
            "",
            f"Added latency at {rate} req/s (in bursts, {min(burst_rps):.0f}–{max(burst_rps):.0f} req/s reached): "
            "p50 and p99 of each repeat minus the upstream's in the same repeat, median (min–max); "
            f"*all requests* pools every repeat's requests of a configuration ({counts[0]}–{counts[-1]}) and "
            "subtracts the upstream's pooled percentile; *vs HAProxy* is a configuration's pooled p50 / p99 minus "
            "HAProxy's over the same client protocol (negative: below it), and in how many repeats its p99 was "
            "at or below HAProxy's.",
            "",
            "| configuration | client | added p50, spread | added p99, spread | all requests, p50 / p99 | "
            "vs HAProxy | added p50, in bursts | added p99, in bursts | all requests, p50 / p99 | vs HAProxy |",
            "| --- " * 10 + "|",
        ]
        for name in ports:
            for proto in protos:
                v, ref, base = results[(name, proto)], results[("haproxy", proto)], results[("upstream", proto)]
                cells = []
                for pattern in ("spread", "bursts"):
                    p50, p99 = f"{pattern}50@{rate}", f"{pattern}99@{rate}"
                    own = percentiles(pooled[(name, proto, rate, pattern)])
                    if name == "upstream":
                        cells += [f"p50 {rng([r[p50] for r in v], '{:.0f}')} µs (absolute)",
                                  f"p99 {rng([r[p99] for r in v], '{:.0f}')} µs (absolute)",
                                  f"{own[0]:.0f} / {own[1]:.0f} µs (absolute)", "—"]
                        continue
                    up = percentiles(pooled[("upstream", proto, rate, pattern)])
                    ha = percentiles(pooled[("haproxy", proto, rate, pattern)])
                    below = sum(a[p99] <= b[p99] for a, b in zip(v, ref))
                    cells += [rng([a[p50] - b[p50] for a, b in zip(v, base)], "{:+.0f}") + " µs",
                              rng([a[p99] - b[p99] for a, b in zip(v, base)], "{:+.0f}") + " µs",
                              f"{own[0] - up[0]:+.0f} / {own[1] - up[1]:+.0f} µs",
                              "—" if name == "haproxy" else
                              f"{own[0] - ha[0]:+.0f} / {own[1] - ha[1]:+.0f} µs; p99 {below} of {len(v)}"]
                rows.append(f"| {labels.get(name, name)} | {clients[proto]} | " + " | ".join(cells) + " |")
        steal = "; ".join(
            f"{name} {proto} " + ", ".join(rng([r[f"steal_{pattern}@{rate}"] for r in results[(name, proto)]], "{:.0f}")
                                           for pattern in ("spread", "bursts"))
            for name in ports for proto in protos)
        rows += ["", f"The host's steal on core {lt.PROXY_CORE} in each run at {rate} req/s, ms, spread and in bursts, "
                     f"median (min–max): {steal}."]
    return "\n".join(rows) + "\n"


def same_build(binaries, results, pooled, protos, rates):
    """For each two labels that run the same build the same way (`a=BIN b=BIN`), how far apart
    their latencies came out: the band within which a difference to HAProxy is the machine's,
    not the proxy's (bench/PERF_NOTES.md, twenty-fifth round). Empty without such a pair."""
    runs = collections.defaultdict(list)
    for label, path, ratio in binaries:
        runs[(os.path.realpath(path), ratio)].append(label)
    pairs = [(labels[0], other) for labels in runs.values() for other in labels[1:]]
    if not pairs:
        return ""
    lines = ["", "The same build twice (a control: every difference between them is the machine's): pooled "
             "p50 / p99 of the first minus the second, and in how many repeats its p99 was at or below the second's.",
             ""]
    for a, b in pairs:
        for proto in protos:
            cells = []
            for rate in rates:
                for pattern in ("spread", "bursts"):
                    pa = percentiles(pooled[(a, proto, rate, pattern)])
                    pb = percentiles(pooled[(b, proto, rate, pattern)])
                    key = f"{pattern}99@{rate}"
                    below = sum(x[key] <= y[key] for x, y in zip(results[(a, proto)], results[(b, proto)]))
                    cells.append(f"{rate} req/s {pattern} {pa[0] - pb[0]:+.0f} / {pa[1] - pb[1]:+.0f} µs "
                                 f"({below} of {len(results[(a, proto)])})")
            lines.append(f"- {a} − {b}, {'HTTP/2' if proto == 'h2' else 'HTTP/1.1'} client: " + "; ".join(cells) + ".")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
