"""Hostile compressed uploads against ``audiogate serve`` on loopback (issue #32).

A well-behaved client sends 5 s WAV chat requests one after another; its latencies are
measured alone (unloaded) and while six attackers loop hostile compressed uploads that
the server must refuse (or admit at the cap): a 13 MB live WebM of 2.5 ms Opus packets
(an hour of audio; its walk used to cost 11-15 s of worker time before its 413), a
2 MB live WebM of "two hours of silence" (120 ms packets), and a two-hour silent FLAC
(libFLAC, constant subframes: a lossy-bomb-like ratio of samples to bytes). The target:
the client's p99 with the attackers stays within 2x its unloaded p99. The two phases
alternate ``--rounds`` times, so that the drifting load of a shared machine weighs on
both alike.

Run it alone (``flock /tmp/bench.lock``) and read the load next to the figures::

    flock /tmp/bench.lock python benchmarks/bench_hostile_uploads.py [--seconds 30]

Exit status 1 when the loaded p99 passes twice the unloaded one.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import io
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadtest_server import PREPARE, ServerProcess, percentile, request_body

ATTACKERS = 6


def _el(element_id: int, payload: bytes, *, unknown: bool = False) -> bytes:
    """One EBML element (an 8-byte size, or the unknown size of a live recording)."""
    size = b"\x01\xff\xff\xff\xff\xff\xff\xff" if unknown else (len(payload) | 1 << 56).to_bytes(8)
    return element_id.to_bytes((element_id.bit_length() + 7) // 8) + size + payload


def live_webm(packet: bytes, count: int) -> bytes:
    """A MediaRecorder-shaped WebM (unknown sizes, no Duration) of ``count`` copies of
    one Opus ``packet``, in SimpleBlocks with 1-byte sizes."""
    head = b"OpusHead\x01\x01\x38\x01\x80\xbb\x00\x00\x00\x00\x00"  # mono, 48 kHz
    track = (
        _el(0xD7, b"\x01")
        + _el(0x83, b"\x02")
        + _el(0x86, b"A_OPUS")
        + _el(0x63A2, head)
        + _el(0xE1, _el(0xB5, np.float64(48_000.0).byteswap().tobytes()) + _el(0x9F, b"\x01"))
    )
    block_body = b"\x81\x00\x00\x80" + packet
    block = b"\xa3" + bytes((0x80 | len(block_body),)) + block_body
    segment = _el(0x1654AE6B, _el(0xAE, track)) + b"\x1f\x43\xb6\x75" + b"\x01" + b"\xff" * 7
    header = _el(0x1A45DFA3, _el(0x4282, b"webm"))
    return header + b"\x18\x53\x80\x67\x01" + b"\xff" * 7 + segment + block * count


def silent_flac(seconds: int, rate_hz: int = 16_000) -> bytes:
    import soundfile

    out = io.BytesIO()
    with soundfile.SoundFile(out, "w", rate_hz, 1, format="FLAC", subtype="PCM_16") as f:
        block = np.zeros(rate_hz * 60, dtype=np.int16)
        for _ in range(seconds // 60):
            f.write(block)
    return out.getvalue()


def hostile_files() -> dict[str, bytes]:
    celt_2_5ms = bytes((16 << 3,)) + b"\xff\xfe"  # CELT, 2.5 ms, code 0
    silk_120ms = bytes(((3 << 3) | 1,)) + bytes(24)  # SILK 60 ms, two frames
    return {
        "webm-13MB-2.5ms-packets": live_webm(celt_2_5ms, 13_000_000 // 10),
        "webm-2MB-two-hours-silence": live_webm(silk_120ms, 2 * 3600 * 1000 // 120),
        "flac-two-hours-silence": silent_flac(2 * 3600),
    }


def hostile_body(data: bytes, fmt: str) -> bytes:
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode()}}
    part["input_audio"]["format"] = fmt
    return json.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": [part, {"type": "text", "text": "Hi"}]}],
        }
    ).encode()


async def _client(url: str, body: bytes, stop: asyncio.Event, out: list[float]) -> None:
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        while not stop.is_set():
            started = time.perf_counter()
            response = await client.post(PREPARE, content=body, headers=headers)
            if response.status_code != 200:
                raise SystemExit(f"the well-behaved client got {response.status_code}")
            out.append(time.perf_counter() - started)


async def _attacker(url: str, bodies: list[bytes], stop: asyncio.Event, seen: Counter) -> None:
    headers = {"content-type": "application/json"}
    turn = 0
    async with httpx.AsyncClient(base_url=url, timeout=300.0) as client:
        while not stop.is_set():
            body = bodies[turn % len(bodies)]
            turn += 1
            try:
                response = await client.post(PREPARE, content=body, headers=headers)
                seen[response.status_code] += 1
            except httpx.HTTPError:
                seen["error"] += 1


async def _attack(url: str, attack: list[bytes], seconds: float) -> Counter:
    stop = asyncio.Event()
    seen: Counter = Counter()
    tasks = [
        asyncio.create_task(_attacker(url, attack[i % len(attack) :] + attack, stop, seen))
        for i in range(ATTACKERS)
    ]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return seen


def _attack_process(url: str, attack: list[bytes], seconds: float) -> Counter:
    """The attackers, in a process of their own: building and sending their bodies must
    not stall the measured client's event loop."""
    return asyncio.run(_attack(url, attack, seconds))


async def _measure(url: str, seconds: float) -> list[float]:
    stop = asyncio.Event()
    latencies: list[float] = []
    task = asyncio.create_task(_client(url, request_body(5.0, 1), stop, latencies))
    await asyncio.sleep(seconds)
    stop.set()
    await task
    return latencies


def measure(url: str, seconds: float, attack: list[bytes] | None) -> tuple[list[float], Counter]:
    """The well-behaved client's latencies over ``seconds`` (with the attackers running
    alongside when ``attack`` is given) and the attackers' answers."""
    if not attack:
        return asyncio.run(_measure(url, seconds)), Counter()
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        attackers = pool.submit(_attack_process, url, attack, seconds + 1.0)
        time.sleep(1.0)  # their first bodies on the way
        latencies = asyncio.run(_measure(url, seconds))
        return latencies, attackers.result()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per phase, in all")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the phases")
    parser.add_argument("--model", default="gemma-3n-e4b-it")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    files = hostile_files()
    for name, data in files.items():
        print(f"{name:28} {len(data) / 1e6:6.2f} MB")
    formats = {"webm-13MB-2.5ms-packets": "webm", "webm-2MB-two-hours-silence": "webm"}
    attack = [hostile_body(data, formats.get(name, "flac")) for name, data in files.items()]
    server = ServerProcess(args.model, args.workers, ["--max-body-bytes", str(64 << 20)])
    try:
        measure(server.url, 3.0, None)  # warm-up: the first clip
        headers = {"content-type": "application/json"}
        with httpx.Client(base_url=server.url, timeout=300.0) as client:
            for name, body in zip(files, attack, strict=True):
                client.post(PREPARE, content=body, headers=headers)  # the decoder started
                cpu, started = server.cpu_seconds(), time.perf_counter()
                answer = client.post(PREPARE, content=body, headers=headers)
                print(
                    f"one {name}: {answer.status_code} in {time.perf_counter() - started:.3f} s, "
                    f"server CPU {server.cpu_seconds() - cpu:.3f} s (body {len(body) / 1e6:.1f} MB)"
                )
        # The phases alternate, so that the load of a shared machine, which drifts over a
        # run, weighs on both alike.
        unloaded: list[float] = []
        loaded: list[float] = []
        seen: Counter = Counter()
        server_cpu = 0.0
        for _ in range(args.rounds):
            unloaded += measure(server.url, args.seconds / args.rounds, None)[0]
            cpu = server.cpu_seconds()
            latencies, answers = measure(server.url, args.seconds / args.rounds, attack)
            server_cpu += server.cpu_seconds() - cpu
            loaded += latencies
            seen += answers
    finally:
        server.stop()
    p50, p99 = percentile(unloaded, 50), percentile(unloaded, 99)
    l50, l99 = percentile(loaded, 50), percentile(loaded, 99)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    print(f"unloaded: {len(unloaded)} requests, p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")
    print(
        f"6 attackers: {len(loaded)} requests, p50 {l50 * 1e3:.1f} ms, p99 {l99 * 1e3:.1f} ms "
        f"({l99 / p99:.2f}x the unloaded p99); attackers' answers {dict(seen)}; server CPU "
        f"{server_cpu:.1f} s"
    )
    return 0 if l99 <= 2 * p99 else 1


if __name__ == "__main__":
    raise SystemExit(main())
