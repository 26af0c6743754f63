#!/usr/bin/env python3
"""Instructions per request on the real path, counted by valgrind's callgrind: a measure that
does not move with the machine's load, for A/B runs of changes too small for CPU time to show.

    python3 bench/instructions.py [[LABEL=]BINARY[@RATIO] ...]

Run it through bench/instructions.sh (installs the tools, builds mvproxy). The setup is
bench/realpath.py's: an nginx upstream serving HTTP/2 over TLS, and in front of it each mvproxy
binary given (default target/release/mvproxy; `@RATIO` exports spans sampled with
`traceidratio` RATIO to a local OTLP sink, as in bench/realpath.py), HAProxy (`proto h2` over TLS) and nginx
(HTTP/1.1 over TLS out), TLS in. One proxy at a time runs under callgrind; the upstream and
h2load run natively.

Each proxy is started twice, and sent FEW (default 1000) requests one time and MANY (default
3000) the other, from CONNECTIONS (default 32) connections, HTTP/2 or HTTP/1.1 keep-alive
(PROTOS, default `h2 h1`). Its instructions per request are the difference of the two runs'
totals over the difference of their requests: start-up, the TLS handshakes and shutdown are in
both and cancel. User-space instructions only: the kernel's share (system calls, the network
stack) is not counted, and the CPU time of bench/realpath.py is what users pay; this measures
the work a change removes or adds, to a fraction of a percent, where CPU time on this machine
moves ±25 % between repeats. Two things it weighs unlike the CPU: cache misses cost nothing
here, and a copy that glibc's `memcpy` does with `rep movsb` (above a few KB) counts one
instruction per byte, where the CPU moves tens of bytes a cycle; so a change found here is
confirmed with bench/realpath.sh on a quiet machine. REPEATS (default 2) runs show what
remains of nondeterminism (thread scheduling, hash seeds). KEEP=DIR keeps the callgrind files
there, for `callgrind_annotate --inclusive=yes DIR/FILE` to say where the instructions go.

CACHE_SIM=1 turns on callgrind's cache and branch simulation (`--cache-sim=yes
--branch-sim=yes`, slower again) and adds, per request: first-level misses of instructions
(I1mr) and of data (D1mr + D1mw), last-level misses (ILmr + DLmr + DLmw), mispredicted branches
(Bcm + Bim), and the estimated cycles of Itamar Turner-Trauring's formula that iai and
iai-callgrind use (https://pythonspeed.com/articles/consistent-benchmarking-in-ci/): L1 hits + 5
LL hits + 35 RAM accesses, branches not counted (valgrind's manual puts a misprediction at 10 to
30 cycles, https://valgrind.org/docs/manual/cg-manual.html). This is what hardware counters
would say on a VM that exposes none, as a model: one process alone on caches the size of this
machine's (valgrind reads them from cpuid), not the caches the upstream shares on the bench's
core. It ranks footprints and branchiness; it does not predict time. Instruction misses depend
on what runs back to back: under callgrind every proxy is slow enough that CONNECTIONS requests
wait at each turn, so a proxy that runs one stage for all of them in a row misses less than one
that takes each request through every stage in turn.

ATOMICS=1 counts, per request, the locked read-modify-writes the proxy ran: the x86 instructions
with a `lock` prefix and `xchg` with a memory operand (locked without one), which Arc's counts,
mutexes, tokio's task states and wakers and atomic counters compile to. Callgrind weighs each as
one instruction; on the CPU each is a full memory barrier, uncontended about 7 ns (18 cycles)
more than a plain add on this machine's (bench/PERF_NOTES.md, thirty-eighth round), so a proxy
can run fewer instructions than another and still spend more time. Callgrind writes each
instruction's count (`--dump-instr=yes`) and objdump says which instructions are locked, in the
proxy's binary and in every library it ran.
"""

import functools
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadtest as lt  # noqa: E402
import realpath as rp  # noqa: E402

PROXY, ADMIN, SINK = 18540, 18541, 18542
# Under callgrind a proxy is 20 to 100 times slower: it starts, and reads discovery, slowly.
STARTUP_TIMEOUT = 120
# The columns CACHE_SIM=1 adds (`derived`).
SIMULATED = ["I1 misses", "D1 misses", "LL misses", "mispredicted", "est. cycles"]
# The column ATOMICS=1 adds (`locked_rmw`).
LOCKED = "locked RMW"


def totals(path):
    """The events a callgrind output file counted, by name (Ir, and with CACHE_SIM the cache and
    branch events)."""
    names = None
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith(("summary:", "totals:")) and names:
                return dict(zip(names, map(int, line.split()[1:])))
    sys.exit(f"{path}: no events and totals lines (did callgrind finish?)")


@functools.lru_cache(maxsize=None)
def locked_addresses(path):
    """The addresses (the object's own, as callgrind writes them) of `path`'s locked
    instructions: a `lock` prefix, or `xchg` with a memory operand."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                         check=True).stdout
    found = set()
    for m in re.finditer(r"^\s*([0-9a-f]+):\s+(lock\b|xchg\s+\S*\()", out, re.MULTILINE):
        found.add(int(m.group(1), 16))
    return frozenset(found)


def locked_rmw(path):
    """How many locked instructions ran, from a callgrind file written with `--dump-instr=yes
    --compress-pos=no --dump-line=no`: each cost line is an instruction's address and its events,
    Ir first, under the `ob=` of its object (compressed as `(id) name`, the name given once)."""
    objects, locked, n, skip = {}, frozenset(), 0, False
    with open(path) as f:
        for line in f:
            if skip:  # a call's inclusive cost, at the call instruction
                skip = False
            elif line.startswith("calls="):
                skip = True
            elif line.startswith(("ob=", "cob=")):
                m = re.match(r"c?ob=(?:\((\d+)\))?\s*(.*)", line.rstrip("\n"))
                key, name = m.group(1), m.group(2)
                if key and name:
                    objects[key] = name
                if line.startswith("ob="):
                    name = objects.get(key, name)
                    locked = locked_addresses(name) if os.path.isfile(name) else frozenset()
            elif line.startswith("0x"):
                fields = line.split()
                if int(fields[0], 16) in locked:
                    n += int(fields[1])
    return n


def derived(per):
    """The cache model's figures from one request's events (the module's doc says which)."""
    l1 = per["I1mr"] + per["D1mr"] + per["D1mw"]
    ram = per["ILmr"] + per["DLmr"] + per["DLmw"]
    return {"I1 misses": per["I1mr"], "D1 misses": per["D1mr"] + per["D1mw"], "LL misses": ram,
            "mispredicted": per["Bcm"] + per["Bim"],
            "est. cycles": (per["Ir"] + per["Dr"] + per["Dw"] - l1) + 5 * (l1 - ram) + 35 * ram}


def counted(label, argv, env, wait, proto, requests, connections, work, keep, sim, atomics):
    """Starts `argv` under callgrind, sends `requests` GETs and stops it: its events' totals
    (and with `atomics` its locked instructions, as LOCKED)."""
    out = os.path.join(work, f"callgrind.{label}.{proto}.{requests}")
    flags = ["--cache-sim=yes", "--branch-sim=yes"] if sim else []
    if atomics:
        flags += ["--dump-instr=yes", "--compress-pos=no", "--dump-line=no"]
    p = subprocess.Popen(["taskset", "-c", lt.PROXY_CORE, "valgrind", "--tool=callgrind", "--quiet", "--trace-children=yes",
                          f"--callgrind-out-file={out}"] + flags + argv,
                         env=env, stdout=subprocess.DEVNULL, stderr=open(out + ".log", "wb"),
                         start_new_session=True)
    try:
        wait()
        rp.h2load(PROXY, proto, ["-n", str(requests), "-c", str(connections), "-m", "1"])
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=STARTUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    n = totals(out)
    if atomics:
        n[LOCKED] = locked_rmw(out)
    if keep:
        shutil.copy(out, keep)
    return n


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    few, many = int(os.environ.get("FEW", "1000")), int(os.environ.get("MANY", "3000"))
    reps = int(os.environ.get("REPEATS", "2"))
    connections = int(os.environ.get("CONNECTIONS", "32"))
    protos = os.environ.get("PROTOS", "h2 h1").split()
    keep = os.environ.get("KEEP", "")
    sim = os.environ.get("CACHE_SIM", "0")
    if sim not in ("0", "1"):
        sys.exit(f"CACHE_SIM={sim!r}: give 1 (simulate caches and branches) or 0 (the default)")
    sim = sim == "1"
    atomics = os.environ.get("ATOMICS", "0")
    if atomics not in ("0", "1"):
        sys.exit(f"ATOMICS={atomics!r}: give 1 (count locked read-modify-writes) or 0 (the default)")
    atomics = atomics == "1"
    extra = (SIMULATED if sim else []) + ([LOCKED] if atomics else [])
    if not protos or set(protos) - {"h2", "h1"}:
        sys.exit(f"PROTOS={os.environ.get('PROTOS')!r}: give h2, h1 or both")
    if not connections <= few < many:
        sys.exit(f"need CONNECTIONS <= FEW < MANY (got {connections}, {few}, {many})")
    if keep:
        os.makedirs(keep, exist_ok=True)

    binaries = rp.parse_binaries(sys.argv[1:])

    work = tempfile.mkdtemp(prefix="mvproxy-instructions-")
    os.chmod(work, 0o755)  # nginx workers run as another user
    procs = lt.Procs()
    try:
        cert, key, ca = rp.make_certs(work)
        with open(os.path.join(work, "tls.pem"), "w") as f:
            f.write(open(cert).read() + open(key).read())
        lt.write_configs(work, cert, key)  # the document root
        nginx, haproxy = rp.proxies_conf(work, cert, key, ca)
        # One process each, so that callgrind counts all of it (nginx's workers are forked).
        nginx = nginx.replace(f"127.0.0.1:{rp.NGINX_RP}", f"127.0.0.1:{PROXY}").replace(
            "worker_processes 1;", "worker_processes 1;\nmaster_process off;")
        haproxy = haproxy.replace(f"127.0.0.1:{rp.HAPROXY_RP}", f"127.0.0.1:{PROXY}")
        for name, text in [("up-tls.conf", rp.upstream_conf(work, os.path.join(work, "root"), cert, key)),
                           ("rp.conf", nginx), ("rp.cfg", haproxy)]:
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        procs.start("upstream", ["nginx", "-c", f"{work}/up-tls.conf", "-g", "daemon off;"], lt.PROXY_CORE)
        lt.wait_port(rp.UP_TLS)

        if any(ratio for _, _, ratio in binaries):
            procs.start("sink", [sys.executable, os.path.join(lt.ROOT, "bench/loadtest.py"), "--sink", str(SINK)],
                        lt.LOAD_CORE)
            lt.wait_port(SINK)
        plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        configs = [("haproxy", ["haproxy", "-db", "-f", f"{work}/rp.cfg"], plain,
                    lambda: lt.wait_port(PROXY, STARTUP_TIMEOUT)),
                   ("nginx", ["nginx", "-c", f"{work}/rp.conf", "-g", "daemon off;"], plain,
                    lambda: lt.wait_port(PROXY, STARTUP_TIMEOUT))]
        for label, path, ratio in binaries:
            argv = [path, "serve", "--local", f"https://127.0.0.1:{rp.UP_TLS}", "--local-ca-file", ca,
                    "--listen", f"127.0.0.1:{PROXY}", "--admin-listen", f"127.0.0.1:{ADMIN}",
                    "--tls-cert-file", cert, "--tls-key-file", key, "--log-format", "json"]
            # Counted through the file's code: callgrind names functions and objects (ATOMICS's
            # disassembly, KEEP's annotation) by the mapping an instruction lies in, and the code
            # moved onto huge pages is no file's (proxy/cli/src/text_pages.rs); the count is the same.
            env = dict(plain, MVPROXY_HUGE_TEXT="0")
            if ratio:
                env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{SINK}", OTEL_TRACES_SAMPLER="traceidratio",
                           OTEL_TRACES_SAMPLER_ARG=ratio)
            configs.append((label, argv, env, lambda: lt.wait_ready(ADMIN, STARTUP_TIMEOUT)))
        print(f"# {len(configs)} proxies x {len(protos)} client protocol(s) x {reps} repeat(s) under callgrind: "
              f"{few} and {many} requests from {connections} connections; GET {lt.PATH}", flush=True)
        results = {}
        for rep in range(reps):
            for label, argv, env, wait in configs:
                for proto in protos:
                    t0 = time.time()
                    a = counted(label, argv, env, wait, proto, few, connections, work, keep, sim, atomics)
                    b = counted(label, argv, env, wait, proto, many, connections, work, keep, sim, atomics)
                    per = {k: (b[k] - a[k]) / (many - few) for k in b}
                    if sim:
                        per.update(derived(per))
                    results.setdefault((label, proto), []).append(per)
                    print(f"  [{rep + 1}] {label:14} {proto}  {per['Ir']:9.0f} instructions/request"
                          + "".join(f", {per[k]:.0f} {k}" for k in extra)
                          + f" ({time.time() - t0:.0f} s)", flush=True)
        table = render(results, [c[0] for c in configs], protos, reps, few, many, connections, sim, extra)
        print()
        print(table)
        out_dir = os.path.join(lt.ROOT, "target/loadtest")
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "instructions.md"), "w") as f:
            f.write(table)
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)


def ratio(mid, others):
    """`mid` over the median of `others`; a dash where that is too few events to divide by (a
    proxy's last-level misses per request, with this machine's last level of hundreds of MB)."""
    base = statistics.median(others)
    return f"{mid / base:.3f}" if base >= 10 else "—"


def render(results, labels, protos, reps, few, many, connections, sim, extra):
    first = labels[2]  # the first mvproxy binary
    columns = ["Ir"] + extra
    rows = [
        f"Loopback, {lt.machine()}. User-space instructions per request under callgrind (the difference of "
        f"{few} and {many} requests over {connections} connections; median and spread over {reps} repeat(s)); "
        f"GET {lt.PATH} (2 KB PodList) from an nginx serving HTTP/2 over TLS."
        + (" With CACHE_SIM=1: callgrind's cache and branch model, per request (bench/instructions.py)." if sim else ""),
        "",
        "| proxy | client | instructions per request | vs HAProxy | vs " + first + " |"
        + "".join(f" {k} | vs HAProxy |" for k in extra),
        "| --- | --- | --- | --- | --- |" + " --- | --- |" * (len(columns) - 1),
    ]
    for label in labels:
        for proto in protos:
            cells = []
            for k in columns:
                v = [r[k] for r in results[(label, proto)]]
                mid = statistics.median(v)
                spread = f" ({min(v):,.0f}–{max(v):,.0f})" if len(v) > 1 else ""
                cells.append(f"{mid:,.0f}{spread}")
                cells.append(ratio(mid, [r[k] for r in results[("haproxy", proto)]]))
                if k == "Ir":
                    cells.append(ratio(mid, [r[k] for r in results[(first, proto)]]))
            rows.append(f"| {label} | {'HTTP/2' if proto == 'h2' else 'HTTP/1.1'} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
