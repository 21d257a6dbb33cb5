"""Multi-turn chats that re-send the same clip: server CPU per turn, with and without the
feature cache (issue #23).

A conversation of five turns re-sends its whole history every turn, as stateless chat
APIs do: turn 1 is a user message with a 30 s clip and a question; turn k adds the
assistant's answer and another question, the clip still in the first message. Each run
starts ``audiogate serve`` on loopback as a subprocess (``loadtest_server.py``'s), runs
``--conversations`` conversations with their own clips turn by turn (turn 1 of every
conversation, then turn 2 of every one, ...), and reads the server's CPU (user + system of
all its threads, from ``/proc/<pid>/task/*/schedstat``, nanoseconds) around each turn.

Modes: ``inline`` sends the clip as base64 ``input_audio`` every turn; ``reference``
uploads it once in turn 1 (``POST /v1/audio/sources``, which computes its features
while the source is ``processing``; counted in turn 1 with the wait until it is
``ready``) and sends an ``audio_ref`` part (only when the server has ``--store``). Each
mode runs with the cache
(``--feature-cache-bytes`` default) and without (``0``).

Both answer modes run: with the feature arrays in the answer, and without them
(``audiogate.return_features: false``: the token ids and accounting, what a client whose
model server keeps the conversation's prefix needs on later turns); the cache-off runs
only with features.

Target: turns 2-5 at least 20x cheaper in server CPU than turn 1, by reference with the
cache, answers without the arrays (the arrays' encoding is paid per answer: see
docs/performance.md)::

    .venv/bin/python benchmarks/bench_multiturn.py
    .venv/bin/python benchmarks/bench_multiturn.py --rate 48000 --channels 2
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadtest_server import ServerProcess

PREPARE = "/v1/audio/prepare"
SOURCES = "/v1/audio/sources"
TURNS = 5
TARGET = 20.0


def wav_bytes(seconds: float, *, rate_hz: int, channels: int, seed: int) -> bytes:
    """Speech-like PCM16 audio (a wobbling tone plus a little noise), ``channels`` wide."""
    n = round(seconds * rate_hz)
    t = np.arange(n) / rate_hz
    rng = np.random.default_rng(seed)
    signal = 0.25 * np.sin(2 * np.pi * (220 + 40 * np.sin(2 * np.pi * 3 * t)) * t)
    frames = np.stack([signal + 0.02 * rng.standard_normal(n) for _ in range(channels)], axis=1)
    pcm = np.clip(np.round(frames * 32767), -32768, 32767).astype("<i2").tobytes()
    import struct

    block = 2 * channels
    fmt = struct.pack("<HHIIHH", 1, channels, rate_hz, rate_hz * block, block, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(pcm))
    return b"RIFF" + struct.pack("<I", len(body) + len(pcm)) + body + pcm


def messages(turn: int, audio_part: dict[str, Any]) -> list[dict[str, Any]]:
    """The history a stateless client sends at ``turn`` (1-based)."""
    out: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [audio_part, {"type": "text", "text": "What is said in this clip?"}],
        }
    ]
    for k in range(2, turn + 1):
        out.append({"role": "assistant", "content": f"Answer {k - 1}: a tone that wobbles."})
        out.append({"role": "user", "content": f"Question {k}: and what about second {k}?"})
    return out


def thread_cpu_ns(pid: int) -> int:
    """CPU time of every live thread of ``pid``, nanoseconds (schedstat's runtime)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread just exited
            total += int((task / "schedstat").read_text().split()[0])
    return total


def audio_part(client: httpx.Client, mode: str, data: bytes) -> dict[str, Any]:
    """The clip's content part: inline base64, or a reference to it once uploaded and
    ready (the server computes its features while it is ``processing``)."""
    if mode == "inline":
        encoded = base64.b64encode(data).decode()
        return {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}
    answer = client.post(SOURCES, content=data, headers={"Content-Type": "audio/wav"})
    answer.raise_for_status()
    digest = answer.json()["sha256"]
    while client.get(f"{SOURCES}/{digest}").json()["status"] != "ready":
        time.sleep(0.002)
    return {"type": "audio_ref", "audio_ref": {"sha256": digest}}


def has_store() -> bool:
    """Whether this checkout's ``serve`` takes ``--store``."""
    out = subprocess.run(
        [sys.executable, "-m", "audiogate.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    return "--store" in out.stdout


def run(
    *,
    mode: str,
    cache: bool,
    clips: list[bytes],
    model: str,
    features: bool,
) -> list[float]:
    """Server CPU seconds per request of each turn, over all conversations."""
    extra = [] if cache else ["--feature-cache-bytes", "0"]
    with tempfile.TemporaryDirectory() as store_dir:
        if mode == "reference":
            extra += ["--store", store_dir]
        server = ServerProcess(model, 1, extra)
        try:
            with httpx.Client(base_url=server.url, timeout=120) as client:
                # Warm the server's paths (template, first hooks) on a clip of its own.
                warm = base64.b64encode(
                    wav_bytes(1.0, rate_hz=16_000, channels=1, seed=10_000)
                ).decode()
                body = {
                    "model": "bench",
                    "messages": messages(
                        2, {"type": "input_audio", "input_audio": {"data": warm, "format": "wav"}}
                    ),
                }
                client.post(PREPARE, json=body).raise_for_status()
                parts: list[dict[str, Any] | None] = [None] * len(clips)
                per_turn = []
                for turn in range(1, TURNS + 1):
                    before = thread_cpu_ns(server.process.pid)
                    for index, data in enumerate(clips):
                        if turn == 1:
                            # The upload (and the features it warms) is turn 1's work.
                            parts[index] = audio_part(client, mode, data)
                        content = json.dumps(
                            {
                                "model": "bench",
                                "messages": messages(turn, parts[index]),
                                "audiogate": {"return_features": features},
                            }
                        ).encode()
                        answer = client.post(
                            PREPARE, content=content, headers={"Content-Type": "application/json"}
                        )
                        answer.raise_for_status()
                    spent = thread_cpu_ns(server.process.pid) - before
                    per_turn.append(spent / 1e9 / len(clips))
                return per_turn
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=16_000)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--model", default="gemma-3n-e4b-it")
    parser.add_argument(
        "--answers",
        choices=("both", "features", "ids"),
        default="both",
        help="answers with the feature arrays, without them (return_features false), or both",
    )
    args = parser.parse_args()
    clips = [
        wav_bytes(args.seconds, rate_hz=args.rate, channels=args.channels, seed=seed)
        for seed in range(args.conversations)
    ]
    modes = ["inline", *(["reference"] if has_store() else [])]
    answers = {"both": (True, False), "features": (True,), "ids": (False,)}[args.answers]
    print(
        f"{args.conversations} conversations x {TURNS} turns, {args.seconds:g} s clips at "
        f"{args.rate} Hz x {args.channels} ch ({len(clips[0]) / 1e6:.2f} MB WAV), model "
        f"{args.model}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    if "reference" not in modes:
        print("(serve has no --store in this checkout: by-reference mode skipped)")
    missed = False
    print(
        f"{'answer':<9} {'mode':<10} {'cache':<6} "
        + " ".join(f"{'turn ' + str(t):>9}" for t in range(1, TURNS + 1))
        + f" {'t1 / t2-5':>10}"
    )
    for features in answers:
        for mode in modes:
            for cache in (False, True) if features else (True,):
                cpu = run(mode=mode, cache=cache, clips=clips, model=args.model, features=features)
                ratio = cpu[0] / statistics.mean(cpu[1:])
                print(
                    f"{'features' if features else 'ids':<9} {mode:<10} "
                    f"{'on' if cache else 'off':<6} "
                    + " ".join(f"{c * 1e3:7.2f}ms" for c in cpu)
                    + f" {ratio:9.1f}x"
                )
                if mode == "reference" and cache and not features and ratio < TARGET:
                    missed = True
    print(
        f"target: turns 2-5 at least {TARGET:g}x cheaper than turn 1 by reference with the "
        f"cache, answers without the arrays"
    )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
