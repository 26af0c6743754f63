#!/usr/bin/env python3
"""A proxy's own share of each request, from the kernel's scheduler and system-call events:
mvproxy against HAProxy on the path of bench/realpath.py, at a fixed rate.

    python3 bench/stages.py [[LABEL=]BINARY ...]

Run it through bench/stages.sh (installs the tools, builds mvproxy). Why: at these rates a
proxy's added p99 (bench/realpath.py) is decided by what else the machine runs. On the shared
2-core machines here kernel threads hold a core for 1 to 5 ms at a time (DAMON's `kdamond`
reclaiming memory, `rcu_preempt`), on the proxy's core or the client's, and a request that
meets one waits that long whichever proxy serves it; which configuration draws more of them in
a run moves p99 by hundreds of µs (bench/PERF_NOTES.md, twenty-sixth round). This tool times
only what the proxy does between the events that bound its part of a request, on the core it is
pinned to:

* **request**: from the proxy thread being switched in after the core was idle (a client's
  request woke it) to its first write to the upstream connection: reading and decrypting the
  request, deciding, encoding and encrypting it for the upstream;
* **handover**: from that write to the upstream being switched in on the core they share: how
  long the proxy keeps the core after handing a request over (the rest of its poll, its
  bookkeeping, going back to wait), which the upstream, and so the request, waits out;
* **response**: from the upstream's write of the response (nginx's system call) to the proxy's
  next write to a client: being switched in, reading and decrypting the response, encoding and
  encrypting it for the client.

A stage that another task interrupts counts the interruption (nothing is left out for being
slow), so its p99 still carries some of the machine. The rest of a request's latency is the
client's, the upstream's and the kernel's, alike for every proxy. Requests arrive spread
(bench/realpath.py's `spread`: h2load, its connections' timers a millisecond apart, one or two
requests at a time), so a stage is one request's or, when two came together, both requests'.
`perf record -C PROXY_CORE` records `sched:sched_switch` and the entries of the write system
calls (write, writev, sendto, sendmsg) on the proxy's core during each run; reads are not
traced, so that the tracing's own cost does not grow with a proxy's number of reads (HAProxy
makes more system calls per request than mvproxy; each traced call costs both the same). The
upstream connections are found with `ss` (the proxy's sockets to the upstream's port).
The time other tasks held the proxy's core during the runs (kernel threads, other
processes) is given too: the machine's share of the noise in bench/realpath.py's p99; and the
host's, each run's steal time on that core (/proc/stat: the time the host held the core's virtual
CPU off it while it had work, which no traced event shows). In the forty-third round of
bench/PERF_NOTES.md the slowest request stages were silent from the proxy's switch-in to its
`epoll_wait`'s return, and those silences rose and fell with the steal, run by run.

Variables: REPEATS (default 3), DURATION of each run (default 5s), RATES (default "500 2000"),
PROTOS (default "h2 h1"). Medians and percentiles pool every repeat's requests of a
configuration. Loopback only; every process started is stopped by its PID.
"""

import collections
import functools
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadtest as lt  # noqa: E402
import realpath as rp  # noqa: E402

MVPROXY0, ADMIN0 = 18540, 18560
WRITES = ("write", "writev", "sendto", "sendmsg")
EVENTS = ",".join(["sched:sched_switch"] + [f"syscalls:sys_enter_{w}" for w in WRITES])
SWITCH = re.compile(r"prev_pid=(\d+) .*==> next_comm=.* next_pid=(\d+)")
FD = re.compile(r"fd: 0x([0-9a-f]+)")
# The idle task's pid in `sched_switch`.
IDLE_PID = 0


def upstream_fds(pid):
    """The file descriptors of `pid`'s connections to the upstream (`ss`, established)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", "dst", f"127.0.0.1:{rp.UP_TLS}"],
                         capture_output=True, text=True, check=True).stdout
    return {int(fd) for p, fd in re.findall(r"pid=(\d+),fd=(\d+)", out) if int(p) == pid}


def events(data):
    """(time µs, pid, event, fields) of a `perf record` file, in order."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if m:
            yield float(m.group(2)) * 1e6, int(m.group(1)), m.group(3), m.group(4)


def stages(data, proxy, upstream, up_fds, ours):
    """The request, handover and response stages (µs) of the proxy process `proxy` in one run,
    and how long each other process held the core (µs, by pid; the processes `ours` and idle
    time left out)."""
    request, handover, response, others = [], [], [], collections.Counter()
    handed_over = None               # the proxy's write upstream, until the upstream runs
    running, since = None, None      # the pid on the core, and since when
    segment_start = None             # the proxy's switch-in after idle, until its first write
    upstream_wrote = None            # the upstream's last response write not yet relayed
    for t, pid, event, fields in events(data):
        if event == "sched:sched_switch":
            m = SWITCH.search(fields)
            if not m:
                continue
            prev, nxt = int(m.group(1)), int(m.group(2))
            if running is not None and running not in ours and running != IDLE_PID:
                others[running] += t - since
            nxt_pid = pid_of(nxt)
            if nxt_pid == upstream and handed_over is not None:
                handover.append(t - handed_over)
                handed_over = None
            if nxt_pid == proxy and prev == IDLE_PID:
                segment_start = t
            running, since = nxt_pid, t
            continue
        if not event.startswith("syscalls:sys_enter_"):
            continue
        if pid == upstream:
            upstream_wrote = upstream_wrote or t
        elif pid == proxy:
            m = FD.search(fields)
            fd = int(m.group(1), 16) if m else -1
            if fd in up_fds:
                handed_over = handed_over or t
                if segment_start is not None:
                    request.append(t - segment_start)
            elif upstream_wrote is not None:
                response.append(t - upstream_wrote)
                upstream_wrote = None
            # A stage runs on through the proxy being preempted; whatever the proxy wrote first
            # after an idle wake-up ends it, a request stage only if it went upstream.
            segment_start = None
    return request, handover, response, others


@functools.cache
def pid_of(tid):
    """The process of thread `tid` (0 for the idle task), read once from /proc."""
    try:
        with open(f"/proc/{tid}/status") as f:
            return int(re.search(r"^Tgid:\s+(\d+)", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return tid


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    try:
        reps = int(os.environ.get("REPEATS", "3"))
        rates = [int(r) for r in os.environ.get("RATES", "500 2000").split()]
    except ValueError as e:
        sys.exit(f"REPEATS and RATES are whole numbers: {e}")
    duration = os.environ.get("DURATION", "5s")
    if reps < 1 or not rates or min(rates) < 1 or not re.fullmatch(r"\d+(\.\d+)?s", duration):
        sys.exit("REPEATS and RATES are positive; DURATION is seconds, as 5s")
    protos = os.environ.get("PROTOS", "h2 h1").split()
    if not protos or set(protos) - {"h2", "h1"}:
        sys.exit(f"PROTOS={os.environ.get('PROTOS')!r}: give h2, h1 or both")
    binaries = [(label, path) for label, path, ratio in rp.parse_binaries(sys.argv[1:]) if not ratio]
    work = tempfile.mkdtemp(prefix="mvproxy-stages-")
    os.chmod(work, 0o755)  # nginx workers run as another user
    procs = lt.Procs()
    try:
        cert, key, ca = rp.prepare(work)
        up = procs.start("upstream", ["nginx", "-c", f"{work}/up-tls.conf", "-g", "daemon off;"], lt.PROXY_CORE).pid
        lt.wait_port(rp.UP_TLS)
        pids = {"haproxy": procs.start("haproxy", ["haproxy", "-db", "-f", f"{work}/rp.cfg"], lt.PROXY_CORE).pid}
        ports = {"haproxy": rp.HAPROXY_RP}
        for i, (label, path) in enumerate(binaries):
            port, admin = MVPROXY0 + i, ADMIN0 + i
            argv = [path, "serve", "--local", f"https://127.0.0.1:{rp.UP_TLS}", "--local-ca-file", ca,
                    "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                    "--tls-cert-file", cert, "--tls-key-file", key, "--log-format", "json"]
            pids[label] = procs.start(label, argv, lt.PROXY_CORE, log=f"{work}/{label}.log").pid
            ports[label] = port
            lt.wait_ready(admin)
        lt.wait_port(rp.HAPROXY_RP)
        # nginx's master forks the one worker that serves: the upstream is that process.
        workers = [pid for pid in lt.tree(up) if pid != up]
        if len(workers) != 1:
            sys.exit(f"the upstream nginx has {len(workers)} workers, not 1")
        upstream = workers[0]
        runs = [(name, proto, rate) for rate in rates for proto in protos for name in ports]
        print(f"# {len(runs)} runs x {reps} repeat(s) of {duration}, spread at {' and '.join(map(str, rates))} "
              f"req/s; GET {lt.PATH}", flush=True)
        pooled = collections.defaultdict(lambda: ([], [], []))
        held = collections.Counter()
        stolen = collections.Counter()
        seconds = 0.0
        for rep in range(reps):
            for name, proto, rate in runs if rep % 2 == 0 else runs[::-1]:
                rp.closed(ports[name], proto, "1s", 32, 1)  # warm up, and open the upstream connections
                fds = upstream_fds(pids[name])
                if not fds:
                    sys.exit(f"{name}: no connection to the upstream after the warm-up")
                data = os.path.join(work, "stages.data")
                perf = subprocess.Popen(["taskset", "-c", lt.LOAD_CORE, "perf", "record", "-q", "-C", lt.PROXY_CORE,
                                         "-e", EVENTS, "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)  # perf is recording
                begun, steal = time.monotonic(), lt.steal_seconds(lt.PROXY_CORE)
                rp.spread(ports[name], proto, duration, rate, work)
                seconds += time.monotonic() - begun
                steal = (lt.steal_seconds(lt.PROXY_CORE) - steal) * 1e3
                stolen[name] += steal
                perf.send_signal(2)
                perf.wait()
                request, handover, response, others = stages(
                    data, pids[name], upstream, fds, set(lt.tree(up)) | set(pids.values()) | {perf.pid})
                for kept, new in zip(pooled[(name, proto, rate)], (request, handover, response)):
                    kept.extend(new)
                for pid, us in others.items():
                    held[comm(pid)] += us
                medians = [rp.percentiles(kind, (50,))[0] for kind in (request, handover, response)]
                print(f"  [{rep + 1}] {name:10} {proto} {rate}/s: p50 request {medians[0]:4.0f} µs, handover "
                      f"{medians[1]:4.0f} µs, response {medians[2]:4.0f} µs "
                      f"({len(request)}, {len(handover)}, {len(response)} stages), steal {steal:.0f} ms", flush=True)
        print(render(pooled, list(ports), protos, rates, reps, duration))
        busiest = ", ".join(f"{name} {us / seconds / 1000:.1f} ms/s" for name, us in held.most_common(5))
        print(f"\nOther tasks on core {lt.PROXY_CORE} during the runs (the proxies, the upstream and idle left "
              f"out), per second: {busiest or 'none'}. The host's steal on it during each proxy's runs, in all: "
              + ", ".join(f"{name} {ms:.0f} ms" for name, ms in sorted(stolen.items())) + ".")
    finally:
        procs.stop()


def comm(pid):
    """A process's name, its threads' kernel names folded (`kworker/0:1-events` as `kworker`)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return re.split(r"[/:]", f.read().strip())[0]
    except OSError:
        return f"pid {pid} (gone)"


def render(pooled, names, protos, rates, reps, duration):
    clients = {"h2": "HTTP/2", "h1": "HTTP/1.1"}
    lines = [f"\nLoopback, {lt.machine()}; upstream and proxy on core {lt.PROXY_CORE}, load generator on core "
             f"{lt.LOAD_CORE}. Requests spread, {reps} repeat(s) of {duration} pooled. p50 / p90 / p99 in µs; "
             "*vs HAProxy*: p50 / p99 minus HAProxy's (negative: below it).", "",
             "| proxy | client | rate | request stage | vs HAProxy | handover | vs HAProxy | response stage "
             "| vs HAProxy | stages |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rate in rates:
        for proto in protos:
            base = pooled[("haproxy", proto, rate)]
            for name in names:
                cells = []
                for kind, base_kind in zip(pooled[(name, proto, rate)], base):
                    p50, p90, p99 = rp.percentiles(kind, (50, 90, 99))
                    b50, b99 = rp.percentiles(base_kind)
                    cells.append(f"{p50:.0f} / {p90:.0f} / {p99:.0f}")
                    cells.append("—" if name == "haproxy" else f"{p50 - b50:+.0f} / {p99 - b99:+.0f}")
                n = ", ".join(str(len(kind)) for kind in pooled[(name, proto, rate)])
                lines.append(f"| {name} | {clients[proto]} | {rate}/s | " + " | ".join(cells) + f" | {n} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
