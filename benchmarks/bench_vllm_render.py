"""audiogate's render endpoint against vLLM's own render server, in one run (issue #31).

Both servers (and, with ``--floor``, a server that renders nothing) run side by side,
started one after the other, and are measured level by level in turn, so that a change
of the machine's load falls on all of them. Both render the same
``POST /v1/chat/completions/render`` requests on the bundled checkpoint (default
Qwen2-Audio): a 5 s 16 kHz mono clip and a 5 s 48 kHz stereo clip from
:mod:`audiogate.vllm.fixtures`, features in bf16. Per server:

* **start-up**: from the process start to its health endpoint answering;
* **resident memory** of the server's process tree (``/proc``), idle after start-up and
  after the load;
* **answer bytes** of one answer per request;
* **throughput and latency** over HTTP at concurrency 1, 4 and 16 (``--requests`` per
  level, after a warm-up; one keep-alive connection per client thread), and the server's
  **CPU per request** (user + system of its process tree over the level, from ``/proc``).

The target (issue #31: audiogate at least 2x vLLM's render throughput) is read on
``requests_per_s`` at each level, audiogate's over vLLM's in the same run (the ``ratio``
lines printed last). ``PYTHONPATH=<checkout>/core`` runs another checkout's audiogate
(an A/B: ``--skip-vllm``).

vLLM comes from ``scripts/vllm/setup_env.sh``'s environment; audiogate runs
``audiogate serve`` from this checkout's ``.venv`` (one worker thread per core, a queue
deep enough for every client, the defaults otherwise). Run on an idle machine, under
``flock /tmp/bench.lock``, and give the load (``uptime``) next to any figure. Tests
never assert on these numbers.

    .venv/bin/python benchmarks/bench_vllm_render.py [--vllm-env ../vllm-env] [--requests 48]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "core"))

from audiogate.vllm.fixtures import RENDER_REQUESTS, request_body  # noqa: E402

MODELS = {
    "qwen2audio": ROOT / "examples" / "models" / "qwen2-audio-7b-instruct",
    "gemma3n": ROOT / "examples" / "models" / "gemma-3n-e4b-it",
}
CASES = ("mono16k_5s", "stereo48k_5s")
PATH = "/v1/chat/completions/render"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    tree: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        tree.append(current)
        stack.extend(children.get(current, []))
    return tree


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants."""
    total = 0
    for current in _process_tree(pid):
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants so far (threads included;
    waited-for children too)."""
    ticks = 0
    for current in _process_tree(pid):
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _wait(port: int, path: str, process: subprocess.Popen[bytes], timeout_s: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError("the server did not start")


def _load(port: int, bodies: list[bytes], concurrency: int, requests: int) -> dict[str, Any]:
    def client(count: int) -> list[float]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        latencies = []
        for i in range(count):
            started = time.perf_counter()
            conn.request(
                "POST", PATH, bodies[i % len(bodies)], {"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"status {response.status}")
            latencies.append(time.perf_counter() - started)
        conn.close()
        return latencies

    per_client = max(1, requests // concurrency)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(client, [per_client] * concurrency))
    wall = time.perf_counter() - started
    latencies = sorted(x for r in results for x in r)
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / wall, 2),
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p90_ms": round(1000 * latencies[int(0.9 * (len(latencies) - 1))], 1),
    }


#: A server that only reads the body and sends a canned answer of the same size: uvicorn
#: and the client, with no rendering. What no Python renderer on this stack can go below.
_FLOOR_APP = """
import sys
answer = b"x" * int(sys.argv[1])

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer})

import uvicorn
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning",
            access_log=False)
"""


class Server:
    """One server process under test: started, measured, stopped."""

    def __init__(self, name: str, command: list[str], port: int, health: str) -> None:
        self.name, self.command, self.port, self.health = name, command, port, health
        self.result: dict[str, Any] = {"server": name, "load": []}
        self.process: subprocess.Popen[bytes] | None = None

    def ready(self, bodies: list[bytes]) -> None:
        """Start it (alone: start-up is timed), then size its answers and warm it up."""
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.log = open(f"/tmp/bench-vllm-render-{self.name}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command, stdout=self.log, stderr=subprocess.STDOUT, env=env
        )
        self.result["startup_s"] = round(_wait(self.port, self.health, self.process, 900), 1)
        self.result["rss_idle_mib"] = round(_tree_rss(self.process.pid) / 2**20)
        answer_bytes = {}
        for case, body in zip(CASES, bodies, strict=True):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            conn.request("POST", PATH, body, {"Content-Type": "application/json"})
            answer_bytes[case] = len(conn.getresponse().read())
        self.result["answer_bytes"] = answer_bytes
        _load(self.port, bodies, 2, 8)  # warm-up

    def stop(self) -> None:
        if self.process is None:
            return
        self.result["rss_after_mib"] = round(_tree_rss(self.process.pid) / 2**20)
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--vllm-env", type=Path, default=ROOT.parent / "vllm-env")
    parser.add_argument("--family", choices=sorted(MODELS), default="qwen2audio")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument(
        "--floor", action="store_true", help="also a server that renders nothing (the floor)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    model = MODELS[args.family]
    served = model.name
    cases = {case.name: case for case in RENDER_REQUESTS}
    bodies = [json.dumps(request_body(cases[c], served)).encode() for c in CASES]
    servers = []
    port = _free_port()
    audiogate = [str(ROOT / ".venv" / "bin" / "audiogate"), "serve", "--model", str(model)]
    audiogate += ["--port", str(port), "--workers", str(os.cpu_count() or 1), "--no-access-log"]
    # Room for every client of the highest level: a 429 is not a throughput figure.
    audiogate += ["--queue-depth", str(2 * max(args.levels))]
    servers.append(Server("audiogate", audiogate, port, "/healthz"))
    if not args.skip_vllm:
        port = _free_port()
        vllm = [
            str(args.vllm_env / "bin" / "python"),
            "-m",
            "vllm.entrypoints.launchers.render.entry",
        ]
        vllm += ["--model", str(model), "--served-model-name", served, "--port", str(port)]
        servers.append(Server("vllm", vllm, port, "/health"))
    if args.floor:
        port = _free_port()
        size = 1_042_213  # one answer's bytes (both renderers')
        floor = [str(ROOT / ".venv" / "bin" / "python"), "-c", _FLOOR_APP, str(size), str(port)]
        servers.append(Server("floor", floor, port, "/"))
    try:
        # Started one after the other (start-up is measured alone), then measured
        # level by level in turn, so that a change of the machine's load falls on all.
        for server in servers:
            server.ready(bodies)
        loads = []
        for level in args.levels:
            for server in servers:
                assert server.process is not None
                cpu = _tree_cpu_s(server.process.pid)
                result = _load(server.port, bodies, level, args.requests)
                cpu = _tree_cpu_s(server.process.pid) - cpu
                result["server_cpu_ms_per_request"] = round(1000 * cpu / result["requests"], 2)
                server.result["load"].append(result)
            loads.append(_loadavg())
    finally:
        for server in servers:
            server.stop()
    results = [server.result for server in servers]
    load = _loadavg()
    report = {
        "family": args.family,
        "loadavg": load,
        "loadavg_per_level": loads,
        "cpus": os.cpu_count(),
        "results": results,
    }
    print(json.dumps(report, indent=1))
    by_name = {r["server"]: r["load"] for r in results}
    for name, row in by_name.items():
        figures = " / ".join(f"{x['requests_per_s']:.1f}" for x in row)
        cpu = " / ".join(f"{x['server_cpu_ms_per_request']:.2f}" for x in row)
        print(f"{name}: requests/s {figures}; server CPU ms/request {cpu}")
    if "audiogate" in by_name and "vllm" in by_name:
        ratios = [
            a["requests_per_s"] / v["requests_per_s"]
            for a, v in zip(by_name["audiogate"], by_name["vllm"], strict=True)
        ]
        held = all(r >= 2.0 for r in ratios)
        print(
            f"ratio audiogate/vLLM at concurrency {' / '.join(map(str, args.levels))}: "
            + " / ".join(f"{r:.2f}x" for r in ratios)
            + f" (target >= 2x at every level: {'met' if held else 'NOT met'})"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
