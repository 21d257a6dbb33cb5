"""Why a success costs more server CPU at c = 64 than at c = 8 (issue #33): counters,
not wall time.

One server (pinned to CPU 0, as the sweep's), alternated points at two concurrencies
(default c = 8 and 64, 5 s clips, raw-socket clients on CPU 1). Over each point's
measured window it reads, per server thread: CPU (``schedstat``), minor faults and
context switches (``/proc``), and, when ``perf`` can attach, software events and system
call tracepoints (``perf stat --per-thread``: no hardware counters needed). Everything is
printed per success, beside the refusals per success::

    python benchmarks/probe_success_cost.py --points 3 -d 6 -- --refusal-delay 0.5

Arguments after ``--`` go to ``audiogate serve``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadtest_server import (
    CLIENT_CPUS,
    SERVER_CPUS,
    ServerProcess,
    request_body,
    run_clients,
    scrape,
    window_rates,
)

#: Software events and tracepoints counted per thread (no hardware counters on a VM).
EVENTS = (
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_recvfrom",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_writev",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_epoll_wait",
    "syscalls:sys_enter_epoll_pwait",
    "syscalls:sys_enter_epoll_ctl",
    "syscalls:sys_enter_futex",
    "syscalls:sys_enter_mmap",
    "syscalls:sys_enter_munmap",
    "syscalls:sys_enter_brk",
    "syscalls:sys_enter_madvise",
    "syscalls:sys_enter_mprotect",
    "syscalls:sys_enter_io_uring_enter",
    "syscalls:sys_enter_setsockopt",
    "syscalls:sys_enter_getpid",
    "syscalls:sys_enter_clock_gettime",
    "sched:sched_wakeup",
)


def cpu_ticks() -> dict[str, list[int]]:
    """``/proc/stat``'s per-CPU times (user nice system idle iowait irq softirq steal)."""
    found = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            found[name] = [int(v) for v in values[:8]]
    return found


def thread_counters(pid: int) -> dict[int, Counter[str]]:
    """Per thread: CPU ns, run-queue wait ns, time slices, minor/major faults, voluntary
    and involuntary switches."""
    found: dict[int, Counter[str]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            sched = (task / "schedstat").read_text().split()
            status = (task / "status").read_text()
        except OSError:
            continue
        c: Counter[str] = Counter()
        c["cpu_ns"] = int(sched[0])
        c["wait_ns"] = int(sched[1])
        c["slices"] = int(sched[2])
        c["minflt"] = int(stat[7])
        c["majflt"] = int(stat[9])
        for key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            match = re.search(rf"^{key}:\s+(\d+)", status, re.MULTILINE)
            c[key[:5]] = int(match.group(1)) if match else 0
        found[int(task.name)] = c
    return found


def gc_counts(client: httpx.Client) -> Counter[str]:
    out: Counter[str] = Counter()
    for (name, labels), value in scrape(client).items():
        if name == "python_gc_collections_total":
            out[f"gc{dict(labels)['generation']}"] = int(value)
    return out


def parse_perf(path: Path) -> dict[int, Counter[str]]:
    found: dict[int, Counter[str]] = {}
    for line in path.read_text().splitlines():
        parts = line.split(",")
        if len(parts) < 4 or not parts[0] or line.startswith("#"):
            continue
        match = re.match(r".*-(\d+)$", parts[0])
        if not match:
            continue
        try:
            value = float(parts[1])
        except ValueError:
            continue
        event = parts[3].replace("syscalls:sys_enter_", "sys:")
        found.setdefault(int(match.group(1)), Counter())[event] += round(value)
    return found


def point(
    server: ServerProcess,
    bodies: list[bytes],
    c: int,
    *,
    duration_s: float,
    warmup_s: float,
    use_perf: bool,
) -> dict[str, Any]:
    run_clients(
        server.url,
        bodies,
        concurrency=c,
        duration_s=warmup_s,
        verify=False,
        processes=1,
        cpus=CLIENT_CPUS,
        raw=True,
    )
    time.sleep(0.5)
    pid = server.process.pid
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        gc_before = gc_counts(client)
    before = thread_counters(pid)
    ticks = cpu_ticks()
    perf = None
    out = Path(tempfile.mkstemp(suffix=".csv")[1])
    if use_perf:
        perf = subprocess.Popen(
            ["perf", "stat", "--per-thread", "-x,", "-o", str(out), "-p", str(pid)]
            + [arg for e in EVENTS for arg in ("-e", e)],
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, CLIENT_CPUS),
        )
        time.sleep(0.3)
    started = time.perf_counter()
    window: Counter[int] = Counter()
    _, statuses, errors, client_cpu = run_clients(
        server.url,
        bodies,
        concurrency=c,
        duration_s=duration_s,
        verify=False,
        processes=1,
        cpus=CLIENT_CPUS,
        raw=True,
        window=window,
    )
    wall = time.perf_counter() - started
    after = thread_counters(pid)
    ticks_after = cpu_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    # Per CPU over the window, seconds per second: busy (user+nice+system+irq+softirq),
    # stolen by the hypervisor.
    machine = {
        cpu: (
            sum(ticks_after[cpu][i] - ticks[cpu][i] for i in (0, 1, 2, 5, 6)) / hz / wall,
            (ticks_after[cpu][7] - ticks[cpu][7]) / hz / wall,
        )
        for cpu in sorted(ticks)
    }
    perf_counts: dict[int, Counter[str]] = {}
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait(10)
        perf_counts = parse_perf(out)
    out.unlink(missing_ok=True)
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        gc_after = gc_counts(client)
    delta = {}
    for tid, c_after in after.items():
        d = Counter(c_after)
        d.subtract(before.get(tid, Counter()))
        delta[tid] = d
    gc = Counter(gc_after)
    gc.subtract(gc_before)
    return {
        "c": c,
        "wall": wall,
        "ok": statuses.get(200, 0),
        "refused": statuses.get(429, 0) + statuses.get(503, 0),
        "errors": errors,
        "threads": delta,
        "perf": perf_counts,
        "gc": gc,
        "client_cpu": client_cpu,
        "window_goodput": window_rates(window, duration_s)[0],
        "machine": machine,
    }


def report(p: dict[str, Any], pid: int) -> None:
    ok = max(int(p["ok"]), 1)
    threads: dict[int, Counter[str]] = p["threads"]
    perf: dict[int, Counter[str]] = p["perf"]
    total_cpu = sum(t["cpu_ns"] for t in threads.values())
    print(
        f"c={p['c']}: {p['ok']} ok, {p['refused']} refused ({int(p['refused']) / ok:.3f} "
        f"per success), {p['ok'] / p['wall']:.1f} ok/s over {float(p['wall']):.2f} s, "
        f"{p['window_goodput']:.1f} ok/s within the window, errors {p['errors']}; server CPU "
        f"{total_cpu / 1e9 / p['wall']:.2f} s/s, {total_cpu / ok / 1e6:.3f} ms per success; "
        f"gc {dict(p['gc'])}"
    )
    machine: dict[str, tuple[float, float]] = p["machine"]
    print(
        f"   client CPU {float(p['client_cpu']) / float(p['wall']):.2f} s/s"
        + "".join(f"; {cpu} busy {b:.2f} steal {st:.3f} s/s" for cpu, (b, st) in machine.items())
    )
    for tid, t in sorted(threads.items(), key=lambda kv: -kv[1]["cpu_ns"]):
        if t["cpu_ns"] < 0.002 * total_cpu:
            continue
        name = "loop" if tid == pid else f"t{tid}"
        line = (
            f"   {name:>8}: cpu {t['cpu_ns'] / ok / 1e6:.3f} ms  wait {t['wait_ns'] / ok / 1e6:.3f}"
            f" ms  slices {t['slices'] / ok:.2f}  minflt {t['minflt'] / ok:.2f}  vol "
            f"{t['volun'] / ok:.2f}  invol {t['nonvo'] / ok:.2f}"
        )
        print(line)
        if tid in perf:
            ev = perf[tid]
            print(
                "            perf/success: "
                + "  ".join(
                    f"{k}={v / ok:.2f}" for k, v in sorted(ev.items()) if v and k != "task-clock"
                )
            )


def _per_success(p: dict[str, Any], pid: int) -> dict[str, float]:
    ok = max(int(p["ok"]), 1)
    threads: dict[int, Counter[str]] = p["threads"]
    loop = threads.get(pid, Counter())
    others = sum((t for tid, t in threads.items() if tid != pid), Counter())
    return {
        "goodput": int(p["ok"]) / float(p["wall"]),
        "window goodput": float(p["window_goodput"]),
        "cpu": (loop["cpu_ns"] + others["cpu_ns"]) / ok / 1e6,
        "loop": loop["cpu_ns"] / ok / 1e6,
        "others": others["cpu_ns"] / ok / 1e6,
        "switches": (loop["slices"] + others["slices"]) / ok,
        "refused": int(p["refused"]) / ok,
    }


def summarize(rounds: list[dict[int, dict[str, Any]]], pid: int) -> None:
    """Each level's figures per success over the rounds, and their ratio to the first
    level's within each round (its points seconds apart: the machine's drift over minutes
    falls out)."""
    levels = list(rounds[0])
    base = min(levels)
    print(f"\nsummary (per success; ratios within each round, to c = {base}):")
    for key in ("goodput", "window goodput", "cpu", "loop", "others", "switches", "refused"):
        for c in sorted(levels):
            values = [_per_success(r[c], pid)[key] for r in rounds]
            ratios = [
                _per_success(r[c], pid)[key] / max(_per_success(r[base], pid)[key], 1e-12)
                for r in rounds
            ]
            print(
                f"  {key:>8} c={c:<4} median {statistics.median(values):8.3f}  ("
                + ", ".join(f"{v:.3f}" for v in values)
                + ")"
                + (
                    ""
                    if c == base
                    else f"  ratio median {statistics.median(ratios):.3f} ("
                    + ", ".join(f"{x:.2f}" for x in ratios)
                    + ")"
                )
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=float, default=5.0)
    parser.add_argument("--levels", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--points", type=int, default=3, help="rounds of the levels")
    parser.add_argument("-d", "--duration", type=float, default=6.0)
    parser.add_argument("--warmup", type=float, default=1.5)
    parser.add_argument("--no-perf", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("serve", nargs=argparse.REMAINDER, help="after --: serve's options")
    args = parser.parse_args()
    extra = [a for a in args.serve if a != "--"]
    bodies = [request_body(args.clips, seed=i) for i in range(4)]
    print(
        f"probe: {args.clips:g} s clips, levels {args.levels}, serve {extra}, load "
        f"{os.getloadavg()[0]:.2f}"
    )
    server = ServerProcess("gemma-3n-e4b-it", args.workers, extra, cpus=SERVER_CPUS)
    rounds: list[dict[int, dict[str, Any]]] = []
    try:
        for index in range(args.points):
            measured = {}
            order = args.levels if index % 2 == 0 else args.levels[::-1]
            for c in order:
                p = point(
                    server,
                    bodies,
                    c,
                    duration_s=args.duration,
                    warmup_s=args.warmup,
                    use_perf=not args.no_perf,
                )
                report(p, server.process.pid)
                measured[c] = p
            rounds.append(measured)
    finally:
        server.stop()
    summarize(rounds, server.process.pid)
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
