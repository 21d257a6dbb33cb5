"""Soak test of ``audiogate serve`` on loopback: a few minutes of mixed, hostile traffic.

Starts the server as a subprocess with small budgets, then drives it with N concurrent
raw-socket clients (default 64) for a fixed time. Each client picks, at random:

* valid requests (1 to 5 s clips), text-only requests (short, and long enough to run
  on the worker for a while), and text over the prompt-text cap;
* malformed ones (not JSON, bad base64, a wrong format, a key twice, Content-Length
  with Transfer-Encoding and broken chunks), and a body over the body cap;
* cancelled ones (the client leaves while its request is queued or processed), slow
  uploads that stop (the body timeout or the minimum body rate ends them), uploads
  abandoned mid-body, half-sent heads (the head timeout), heads abandoned half-way,
  silent connections, and slow readers that leave before reading their answer.

Traffic goes to 127.0.0.1 only; every client waits for its answer or gives up within
a bound, and the run ends after ``--duration`` seconds. At the end it prints the
answers by kind and status and the outcomes by metrics reason, and checks that no
answer was a 5xx (on the wire or in the server's responses counter), that every byte
gauge is back to 0, and that the peak RSS stayed within the warmed-up baseline plus
the configured budgets (body, acquired, queued, in-flight host bytes). Exit status 1
otherwise.

Then one overload phase (issue #33; ``--overload SECONDS``, 60 by default, 0: none):
the goodput of valid 1 s requests is probed (8 clients, 5 s), then requests arrive open
loop at twice that rate for SECONDS, then, once the server is idle again, the probe is
repeated. It fails unless the goodput after is at least 90 % of the goodput before, every
byte gauge is back to 0 and the RSS is back within 10 % (plus 16 MiB) of what it was
before the phase.

    python benchmarks/soak_server.py                 # 180 s, -c 64
    python benchmarks/soak_server.py -d 30 -c 16     # a short run
    python benchmarks/soak_server.py -d 30 --overload 20
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import random
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadtest_server import (
    MIB,
    PREPARE,
    ServerProcess,
    percentile,
    reasons,
    request_body,
    run_clients,
    scrape,
    wav_bytes,
)

HOST = "127.0.0.1"
KIB = 1 << 10
#: The server's budgets: small, so that the RSS bound means something.
BUDGETS = {
    "--max-queued-encoded-bytes": 16 * MIB,
    "--max-inflight-host-bytes": 256 * MIB,
    "--max-inflight-body-bytes": 32 * MIB,
    "--max-inflight-acquired-bytes": 16 * MIB,
}
MAX_BODY = 8 * MIB
TEXT_CAP = 128 * KIB
SERVER_ARGS = [
    "--queue-depth",
    "8",
    *(f"{flag}={value}" for flag, value in BUDGETS.items()),
    f"--max-body-bytes={MAX_BODY}",
    f"--max-prompt-text-bytes={TEXT_CAP}",
    "--body-timeout=2",
    "--header-timeout=2",
    "--min-body-rate=16KiB",
    "--max-connections=512",
]
GAUGES = (
    "audiogate_audio_preprocess_queued_bytes",
    "audiogate_audio_preprocess_inflight_host_bytes",
    "audiogate_server_inflight_body_bytes",
    "audiogate_server_inflight_acquired_bytes",
)
#: A client gives up on an answer after this long (then it counts as "no answer").
ANSWER_TIMEOUT_S = 30.0

# --- request bodies ---------------------------------------------------------------------


def _chat(content: object) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content}]}).encode()


def _audio(seconds: float, seed: int, fmt: str = "wav") -> dict[str, object]:
    data = base64.b64encode(wav_bytes(seconds, seed=seed)).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


def make_bodies() -> dict[str, list[bytes]]:
    text = {"type": "text", "text": "What is said?"}
    return {
        "valid": [_chat([_audio(s, i), text]) for i, s in enumerate((1.0, 2.0, 3.0, 5.0))],
        "text": [_chat("Say hello. " * n) for n in (1, 10, 100)],
        "long-text": [_chat("a " * (TEXT_CAP // 2 - 64))],
        "over-text-cap": [_chat("x" * (TEXT_CAP + 1))],
        "malformed": [
            b'{"messages": [',
            b"\xff\xfe not json",
            _chat([{"type": "input_audio", "input_audio": {"data": "!!!", "format": "wav"}}]),
            _chat([_audio(1.0, 9, fmt="mp3")]),
            b'{"messages": [], "messages": []}',
            _chat([{"type": "video", "video": {}}]),
        ],
    }


def _head(length: int | None, *, extra: str = "") -> bytes:
    framing = f"Content-Length: {length}\r\n" if length is not None else ""
    return (
        f"POST {PREPARE} HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\n{framing}{extra}\r\n"
    ).encode()


# --- one exchange -----------------------------------------------------------------------


async def _status(reader: asyncio.StreamReader) -> int | None:
    """The answer's status (reading the whole answer), or ``None`` when the server
    closed without one."""
    async with asyncio.timeout(ANSWER_TIMEOUT_S):
        line = await reader.readline()
        if not line:
            return None
        status = int(line.split()[1])
        while await reader.read(256 * KIB):
            pass
    return status


async def _exchange(port: int, kind: str, bodies: dict[str, list[bytes]], rng: random.Random):
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        if kind in bodies:
            body = rng.choice(bodies[kind])
            writer.write(_head(len(body)) + body)
            await writer.drain()
            return await _status(reader)
        if kind == "both-lengths":
            writer.write(_head(10, extra="Transfer-Encoding: chunked\r\n") + b"zz\r\nabc")
            await writer.drain()
            return await _status(reader)
        if kind == "over-body-cap":
            writer.write(_head(MAX_BODY + 1))
            await writer.drain()
            return await _status(reader)
        if kind == "cancelled":
            body = rng.choice(bodies["valid"])
            writer.write(_head(len(body)) + body)
            await writer.drain()
            await asyncio.sleep(rng.uniform(0.0, 0.05))  # queued or processing
            return "left"
        if kind == "slow-upload":  # a trickle under the minimum rate, then silence
            body = rng.choice(bodies["valid"])
            writer.write(_head(len(body)) + body[:1000])
            for _ in range(rng.randint(0, 20)):
                await asyncio.sleep(0.1)
                if writer.is_closing() or reader.at_eof():
                    break
                writer.write(body[:50])
            await writer.drain()
            return await _status(reader)
        if kind == "abandoned-upload":
            body = rng.choice(bodies["valid"])
            writer.write(_head(len(body)) + body[: rng.randint(1, len(body) - 1)])
            await writer.drain()
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            return "left"
        if kind == "half-head":  # waits for the head timeout
            writer.write(f"POST {PREPARE} HTTP/1.1\r\nHost: soak\r\nContent-Le".encode())
            await writer.drain()
            return await _status(reader)
        if kind == "abandoned-head":
            writer.write(b"POST /v1/audio/pre")
            await writer.drain()
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            return "left"
        if kind == "silent":
            return await _status(reader)
        if kind == "slow-reader":  # leaves before reading its answer
            body = rng.choice(bodies["valid"])
            writer.write(_head(len(body)) + body)
            await writer.drain()
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            return "left"
        raise ValueError(kind)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


KINDS = {
    # kind: weight
    "valid": 30,
    "text": 10,
    "long-text": 2,
    "over-text-cap": 2,
    "malformed": 10,
    "both-lengths": 3,
    "over-body-cap": 3,
    "cancelled": 8,
    "slow-upload": 3,
    "abandoned-upload": 5,
    "half-head": 2,
    "abandoned-head": 4,
    "silent": 1,
    "slow-reader": 5,
}


async def drive(port: int, *, concurrency: int, duration_s: float, seed: int) -> Counter:
    bodies = make_bodies()
    counts: Counter[tuple[str, object]] = Counter()
    deadline = time.monotonic() + duration_s
    names, weights = list(KINDS), list(KINDS.values())

    async def client(index: int) -> None:
        rng = random.Random(1000 * seed + index)
        while time.monotonic() < deadline:
            kind = rng.choices(names, weights)[0]
            try:
                outcome = await _exchange(port, kind, bodies, rng)
            except TimeoutError:
                outcome = "no answer"
            except OSError as exc:
                outcome = type(exc).__name__
            counts[(kind, outcome)] += 1
            if outcome == 429:
                await asyncio.sleep(0.05)

    await asyncio.gather(*(client(i) for i in range(concurrency)))
    return counts


# --- the overload phase (issue #33) ------------------------------------------------------

#: Clients of the goodput probe before and after the overload, and its seconds.
PROBE_CLIENTS = 8
PROBE_S = 5.0
#: Requests the open-loop overload keeps in flight at most (its client's own bound).
OVERLOAD_INFLIGHT = 256


def probe(url: str, bodies: list[bytes]) -> float:
    """Goodput (200s per second) of :data:`PROBE_CLIENTS` closed-loop clients."""
    started = time.perf_counter()
    _, statuses, _, _ = run_clients(
        url,
        bodies,
        concurrency=PROBE_CLIENTS,
        duration_s=PROBE_S,
        verify=False,
        processes=1,
        raw=True,  # httpx's own CPU would make the probe measure the client
    )
    return statuses.get(200, 0) / (time.perf_counter() - started)


async def open_loop(
    url: str, bodies: list[bytes], *, rate: float, duration_s: float
) -> tuple[Counter[object], list[float]]:
    """Requests arriving at ``rate`` per second for ``duration_s``, whatever the answers
    (at most :data:`OVERLOAD_INFLIGHT` in flight; an arrival past it counts as
    ``client-bound``): the answers by status and the latencies of the 200s."""
    statuses: Counter[object] = Counter()
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=OVERLOAD_INFLIGHT)
    headers = {"content-type": "application/json"}
    tasks: set[asyncio.Task[None]] = set()
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0) as client:

        async def one(body: bytes) -> None:
            started = time.perf_counter()
            try:
                response = await client.post(PREPARE, content=body, headers=headers)
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1
                return
            statuses[response.status_code] += 1
            if response.status_code == 200:
                latencies.append(time.perf_counter() - started)

        start = time.perf_counter()
        n = 0
        while (now := time.perf_counter()) < start + duration_s:
            due = start + n / rate
            if due > now:
                await asyncio.sleep(due - now)
            n += 1
            if len(tasks) >= OVERLOAD_INFLIGHT:
                statuses["client-bound"] += 1
                continue
            task = asyncio.create_task(one(bodies[n % len(bodies)]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks)
    return statuses, latencies


def overload_phase(server: ServerProcess, client: httpx.Client, seconds: float) -> list[str]:
    """One overload phase: probe, twice the probed rate for ``seconds``, probe again; the
    failures (empty: goodput, gauges and memory recovered)."""
    bodies = [request_body(1.0, seed=i) for i in range(4)]
    before_rss = server.status("VmRSS")
    before = probe(server.url, bodies)
    rate = 2 * max(before, 1.0)
    print(
        f"\noverload: goodput {before:.1f}/s (probe), then {rate:.0f} requests/s "
        f"for {seconds:.0f} s"
    )
    started = time.perf_counter()
    statuses, latencies = asyncio.run(open_loop(server.url, bodies, rate=rate, duration_s=seconds))
    elapsed = time.perf_counter() - started
    print(
        f"  during: {statuses.get(200, 0) / elapsed:.1f} answers/s, answers "
        f"{dict(sorted(statuses.items(), key=str))}, p50 {percentile(latencies, 50) * 1e3:.0f} ms, "
        f"p99 {percentile(latencies, 99) * 1e3:.0f} ms"
    )
    gauges = _wait_idle(client, 60)
    time.sleep(1.0)  # the server's connections from the overload close
    after_rss = server.status("VmRSS")
    after = probe(server.url, bodies)
    print(
        f"  after: goodput {after:.1f}/s ({after / max(before, 1e-9):.0%} of before), gauges "
        f"{gauges}, RSS {before_rss / MIB:.1f} MiB before, {after_rss / MIB:.1f} MiB after"
    )
    failures = []
    if after < 0.9 * before:
        failures.append(f"goodput after the overload {after:.1f}/s < 90 % of {before:.1f}/s")
    if any(v != 0 for v in gauges.values()):
        failures.append(f"gauges not back to 0 after the overload: {gauges}")
    if after_rss > 1.1 * before_rss + 16 * MIB:
        failures.append(
            f"RSS after the overload {after_rss / MIB:.1f} MiB, before {before_rss / MIB:.1f} MiB"
        )
    if statuses.get(200, 0) == 0:
        failures.append("no request succeeded during the overload")
    return failures


# --- the run ------------------------------------------------------------------------------


def _wait_idle(client: httpx.Client, timeout_s: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(client)
        gauges = {name: samples.get((name, ()), -1.0) for name in GAUGES}
        if all(v == 0 for v in gauges.values()) or time.monotonic() > deadline:
            return gauges
        time.sleep(0.2)


def main() -> int:
    # A client that keeps writing after the server closed its connection (on purpose
    # here) makes asyncio log "socket.send() raised exception." for every write.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--concurrency", type=int, default=64)
    parser.add_argument("-d", "--duration", type=float, default=180.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--overload",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="then one overload phase at twice the probed goodput for this long (default "
        "%(default)g, as `make soak`; 0: none)",
    )
    args = parser.parse_args()
    budget = sum(BUDGETS.values())
    print(
        f"soak: gemma-3n-e4b-it on {HOST}, concurrency {args.concurrency}, "
        f"{args.duration:.0f} s, budgets {budget / MIB:.0f} MiB in all"
    )
    server = ServerProcess("gemma-3n-e4b-it", 1, SERVER_ARGS)
    failures: list[str] = []
    try:
        port = int(server.url.rsplit(":", 1)[1])
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            # Warm up (imports, tokenizer, the first request of each kind): the baseline.
            asyncio.run(drive(port, concurrency=4, duration_s=3.0, seed=args.seed + 1))
            _wait_idle(client, 30)
            baseline = server.status("VmRSS")
            server.reset_peak()
            before = scrape(client)
            started = time.monotonic()
            counts = asyncio.run(
                drive(port, concurrency=args.concurrency, duration_s=args.duration, seed=args.seed)
            )
            elapsed = time.monotonic() - started
            gauges = _wait_idle(client, 60)
            after = scrape(client)
            peak = server.status("VmHWM")
            if args.overload > 0:
                failures += overload_phase(server, client, args.overload)
    finally:
        server.stop()

    total = sum(counts.values())
    print(f"exchanges: {total} in {elapsed:.0f} s ({total / elapsed:.0f}/s)")
    by_kind: dict[str, Counter[object]] = {}
    for (kind, outcome), n in counts.items():
        by_kind.setdefault(kind, Counter())[outcome] += n
    for kind in KINDS:
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(by_kind.get(kind, {}).items(), key=str))
        print(f"  {kind:17} {shown}")
    outcomes = reasons(after) - reasons(before)
    print(f"outcomes by metrics reason: {dict(sorted(outcomes.items()))}")
    responses = {
        dict(labels)["status"]: int(value - before.get((name, labels), 0))
        for (name, labels), value in after.items()
        if name == "audiogate_server_prepare_responses_total"
    }
    print(f"server answers by status: {dict(sorted(responses.items()))}")
    print(f"byte gauges after the run: {gauges}")
    bound = baseline + budget
    print(
        f"RSS: warmed-up baseline {baseline / MIB:.1f} MiB, peak {peak / MIB:.1f} MiB, "
        f"bound {bound / MIB:.1f} MiB (baseline + budgets)"
    )
    wire_5xx = sum(
        n for (_, outcome), n in counts.items() if isinstance(outcome, int) and outcome >= 500
    )
    server_5xx = sum(n for status, n in responses.items() if int(status) >= 500)
    if wire_5xx or server_5xx:
        failures.append(f"5xx answers: {wire_5xx} on the wire, {server_5xx} counted")
    if any(v != 0 for v in gauges.values()):
        failures.append(f"gauges not back to 0: {gauges}")
    if peak > bound:
        failures.append(f"peak RSS {peak / MIB:.1f} MiB over the bound {bound / MIB:.1f} MiB")
    for failure in failures:
        print(f"FAILED: {failure}")
    print("soak: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
