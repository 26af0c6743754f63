#!/usr/bin/env python3
"""Watch scale: WATCHES concurrent watches through one mvproxy, half served by its local API
server and half through the peer hop, with events flowing. Run through bench/watches.sh.

Topology, all on 127.0.0.1, as in a cluster whose API servers speak TLS (and HTTP/2):

    client (asyncio, HTTP/1.1) ──► mvproxy A (measured) ──TLS──► TLS front ──► stand-in A (1.34)
                                                      └──TLS──► mvproxy B ──► stand-in B (1.31)

The TLS front and mvproxy B are mvproxy instances terminating TLS (HTTP/2 by ALPN) in front of
stand-in API servers (`cargo run -p mvproxy-demo --example standin`). Half the watches ask for apps/v1
deployments (served by A), half for resource.k8s.io/v1alpha3 podschedulingcontexts (only the
1.31 server has them, so they take the peer hop). Then objects are created in both stand-ins
at EVENT_RATE per second each for EVENT_SECONDS; every watch sees every create of its side.

Reported for mvproxy A: RSS per watch (RSS with the watches open minus before, over the
count), open file descriptors, TCP connections to its two upstreams, and CPU per event
delivered (its utime + stime over the event phase, over the events the clients read).
"""

import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
SA, SB, FRONT, PB, PA = 18201, 18202, 18211, 18212, 18200
LOCAL_PATH = "/apis/apps/v1/namespaces/default/deployments"
PEER_PATH = "/apis/resource.k8s.io/v1alpha3/namespaces/default/podschedulingcontexts"


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def connections_to(port):
    """Established TCP connections whose remote port is `port` (only mvproxy A dials them)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except OSError:
            pass
    return n


def wait_ready(admin, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"mvproxy (admin {admin}) not ready after {timeout}s")


def wait_port(port, timeout=60):
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


class Counter:
    events = 0
    open = 0
    failed = 0


async def watch(path, started):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", PA, limit=1 << 16)
        writer.write(f"GET {path}?watch=true HTTP/1.1\r\nHost: mvproxy\r\nAccept: application/json\r\n\r\n".encode())
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            Counter.failed += 1
            if Counter.failed == 1:
                print(f"a watch of {path} failed: {status!r} {await reader.read(300)!r}", file=sys.stderr)
            return
        Counter.open += 1
        started.release()
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            Counter.events += chunk.count(b'"type":')
    except (OSError, asyncio.IncompleteReadError) as e:
        Counter.failed += 1
        if Counter.failed == 1:
            print(f"a watch of {path} failed: {e}", file=sys.stderr)


async def create(port, path, i):
    body = json.dumps({"metadata": {"name": f"obj-{i}"}, "spec": {}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    await reader.read()
    writer.close()


async def drive(watches, rate, seconds, pid):
    started = asyncio.Semaphore(0)
    tasks = []
    for i in range(watches):
        tasks.append(asyncio.create_task(watch(LOCAL_PATH if i % 2 == 0 else PEER_PATH, started)))
        if i % 200 == 199:
            await asyncio.sleep(0.05)
    deadline = time.time() + 120
    while Counter.open + Counter.failed < watches and time.time() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)
    opened = {"open": Counter.open, "failed": Counter.failed, "rss": rss_mb(pid), "fds": fds(pid),
              "conns_local": connections_to(FRONT), "conns_peer": connections_to(PB)}
    e0, c0 = Counter.events, cpu(pid)
    n = 0
    t0 = time.time()
    while time.time() - t0 < seconds:
        await asyncio.gather(create(SA, LOCAL_PATH, n), create(SB, PEER_PATH, n))
        n += 1
        await asyncio.sleep(max(0, t0 + n / rate - time.time()))
    await asyncio.sleep(2)
    opened["creates"] = 2 * n
    opened["events"] = Counter.events - e0
    opened["cpu"] = cpu(pid) - c0
    for t in tasks:
        t.cancel()
    return opened


def main():
    watches = int(os.environ.get("WATCHES", "10000"))
    rate = float(os.environ.get("EVENT_RATE", "2"))
    seconds = float(os.environ.get("EVENT_SECONDS", "10"))
    out = os.environ.get("OUT", os.path.join(ROOT, "target/loadtest/watches.md"))
    mvproxy = os.environ.get("MVPROXY_BIN", os.path.join(ROOT, "target/release/mvproxy"))
    standin = os.environ.get("STANDIN_BIN", os.path.join(ROOT, "target/release/examples/standin"))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < watches + 2048:
        sys.exit(f"the open-file limit ({hard}) is too low for {watches} watches: raise it (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = tempfile.mkdtemp(prefix="mvproxy-watches-")
    procs = []

    def start(argv, core, log):
        p = subprocess.Popen(["taskset", "-c", core] + argv, stdout=open(f"{work}/{log}", "wb"),
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        return p

    try:
        cert, key = f"{work}/tls.crt", f"{work}/tls.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=apiserver",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc",
                        "-addext", "basicConstraints=critical,CA:FALSE"],
                       check=True, capture_output=True)
        # upstreams on core 1 with the client; mvproxy A alone on core 0
        start([standin, "apiserver-a", "1.34", f"127.0.0.1:{SA}"], "1", "sa.log")
        start([standin, "apiserver-b", "1.31", f"127.0.0.1:{SB}"], "1", "sb.log")
        wait_port(SA)
        wait_port(SB)
        common = ["--tls-cert-file", cert, "--tls-key-file", key, "--max-connections", str(2 * watches + 1024)]
        start([mvproxy, "serve", "--server-id", "apiserver-a", "--local", f"http://127.0.0.1:{SA}",
               "--listen", f"127.0.0.1:{FRONT}", "--admin-listen", "127.0.0.1:18231"] + common, "1", "front.log")
        start([mvproxy, "serve", "--server-id", "apiserver-b", "--local", f"http://127.0.0.1:{SB}",
               "--listen", f"127.0.0.1:{PB}", "--admin-listen", "127.0.0.1:18232"] + common, "1", "pb.log")
        wait_ready(18231)
        wait_ready(18232)
        a = start([mvproxy, "serve", "--server-id", "apiserver-a", "--local", f"https://127.0.0.1:{FRONT}",
                   "--local-ca-file", cert, "--peer", f"apiserver-b=https://127.0.0.1:{PB}", "--peer-ca-file", cert,
                   "--listen", f"127.0.0.1:{PA}", "--admin-listen", "127.0.0.1:18230",
                   "--max-connections", str(watches + 1024)], "0", "a.log")
        wait_ready(18230)
        idle = {"rss": rss_mb(a.pid), "fds": fds(a.pid)}
        r = asyncio.run(drive(watches, rate, seconds, a.pid))
        expected = r["creates"] // 2 * watches
        lines = [
            f"{watches} watches through one mvproxy (half local, half through the peer hop), upstreams over TLS; "
            f"{r['creates']} creates over {seconds:.0f} s.",
            "",
            "| measure | value |",
            "| --- | --- |",
            f"| watches open / failed | {r['open']} / {r['failed']} |",
            f"| RSS idle → with the watches | {idle['rss']:.1f} → {r['rss']:.1f} MB |",
            f"| RSS per watch | {(r['rss'] - idle['rss']) * 1024 / max(1, r['open']):.1f} KB |",
            f"| file descriptors | {r['fds']} (idle {idle['fds']}) |",
            f"| upstream connections: local, peer | {r['conns_local']}, {r['conns_peer']} |",
            f"| events delivered / expected | {r['events']} / {expected} |",
            f"| CPU per event | {r['cpu'] / max(1, r['events']) * 1e6:.1f} µs |",
        ]
        table = "\n".join(lines) + "\n"
        print(table)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(table)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
