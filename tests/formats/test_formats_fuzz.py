"""Mutated real files of every container, through the public API and the reference server.

For each container of the corpus, one real file is mutated a bounded, seeded number of
times (byte flips, truncations, duplicated and removed ranges, header fields set to edge
values, zeroed ranges, combinations). Every mutant either prepares (finite features) or
is refused with an :class:`~audiogate.errors.AudioGateError`: zero untyped exceptions,
and zero plugin errors (a decoder's failure is the clip's typed error, not a bug report
against a family). Through the reference server: zero 5xx answers, and the server still
answers ``/healthz`` afterwards.
"""

from __future__ import annotations

import base64
import importlib.util
import random
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from formatkit import (
    CORPUS,
    FAMILIES,
    PYAV_CONTAINERS,
    entries,
    prepare,
    skip_without_decoder,
)

from audiogate.errors import AudioGateError, PluginError

#: One real file per container (and codec): small ones, so a mutant decodes fast.
SEEDS = {
    "wav-pcm": "wav-u8-mono-8000.wav",
    "wav-mulaw": "wav-mulaw-mono-8000.wav",
    "wav-extensible": "wavext-f32-mono-24000.wav",
    "rf64": "rf64-s16-stereo-24000.wav",
    "aiff": "aiff-s8-mono-11025.aiff",
    "aifc": "aifc-ulaw-mono-8000.aifc",
    "flac": "flac-s16-mono-8000.flac",
    "mp3": "mp3-cbr24-mono-8000.mp3",
    "mp3-id3v2": "mp3-id3v2-mono-11025.mp3",
    "ogg-vorbis": "vorbis-mono-16000.ogg",
    "ogg-opus": "opus-mono-16000.opus",
    "webm-opus": "webm-opus-mono-16000.webm",
    "matroska-opus": "mka-opus-mono-24000.mka",
    "mp4-aac": "aac-mono-8000.m4a",
    "wav-ima-adpcm": "wav-ima-adpcm-mono-16000.wav",
    "rifx": "rifx-s16-stereo-11025.wav",
    "au": "au-ulaw-mono-8000.au",
    "caf": "caf-s16-mono-16000.caf",
    "mp4-alac": "alac-mono-16000.m4a",
}
COMPRESSED = frozenset(
    {"flac", "mp3", "mp3-id3v2", "ogg-vorbis", "ogg-opus", "webm-opus", "matroska-opus", "mp4-aac"}
    | {"wav-ima-adpcm", "rifx", "au", "caf", "mp4-alac"}  # in the decoder process
)
#: The corpus container of each seed.
CONTAINER_OF = {
    name: {e["file"]: e["container"] for e in entries()}[file] for name, file in SEEDS.items()
}
#: The ``format`` a client declares for each seed (OpenAI's ``input_audio``).
DECLARED = {
    "wav-pcm": "wav",
    "wav-mulaw": "wav",
    "wav-extensible": "wav",
    "rf64": "wav",
    "aiff": "aiff",
    "aifc": "aiff",
    "flac": "flac",
    "mp3": "mp3",
    "mp3-id3v2": "mp3",
    "ogg-vorbis": "ogg",
    "ogg-opus": "ogg",
    "webm-opus": "webm",
    "matroska-opus": "webm",
    "mp4-aac": "m4a",
    "wav-ima-adpcm": "wav",
    "rifx": "auto",
    "au": "auto",
    "caf": "auto",
    "mp4-alac": "m4a",
}
#: Mutants per container: a few of each in-process container in the quick run; a bounded
#: count in the slow one, fewer of a compressed container (each refusal there costs a
#: decoder round trip); per container through the server.
QUICK, LONG, LONG_COMPRESSED, SERVED = 8, 200, 50, 8
#: Values a header field is set to (each written in 1, 2, 4 or 8 bytes, either order).
EDGE_VALUES = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000)
EDGE_VALUES += (0xFFFFFFFF, 44100, 48000, 192001, 1 << 40, (1 << 64) - 1)


def _position(rng: random.Random, size: int) -> int:
    """Half the positions fall in the first 512 bytes, where the headers are."""
    if size <= 1:
        return 0
    if rng.random() < 0.5:
        return rng.randrange(min(size, 512))
    return rng.randrange(size)


def _flip(rng: random.Random, data: bytearray) -> str:
    spots = [_position(rng, len(data)) for _ in range(rng.randint(1, 8))]
    for at in spots:
        data[at] ^= rng.randint(1, 255)
    return f"flip {spots}"


def _truncate(rng: random.Random, data: bytearray) -> str:
    at = _position(rng, len(data))
    del data[at:]
    return f"truncate at {at}"


def _duplicate(rng: random.Random, data: bytearray) -> str:
    start = _position(rng, len(data))
    stop = min(len(data), start + rng.randint(1, 4096))
    at = _position(rng, len(data))
    data[at:at] = data[start:stop]
    return f"copy [{start}:{stop}] to {at}"


def _remove(rng: random.Random, data: bytearray) -> str:
    start = _position(rng, len(data))
    stop = min(len(data), start + rng.randint(1, 4096))
    del data[start:stop]
    return f"remove [{start}:{stop}]"


def _field(rng: random.Random, data: bytearray) -> str:
    width = rng.choice((1, 2, 4, 8))
    if len(data) < width:
        return "field (too short)"
    at = rng.randrange(0, min(len(data), 160) - width + 1)
    at -= at % width if rng.random() < 0.7 else 0  # mostly aligned fields
    order = rng.choice(("little", "big"))
    value = rng.choice(EDGE_VALUES) % (1 << (8 * width))
    data[at : at + width] = value.to_bytes(width, order)
    return f"set {width} bytes at {at} to {value:#x} ({order})"


def _zero(rng: random.Random, data: bytearray) -> str:
    start = _position(rng, len(data))
    stop = min(len(data), start + rng.randint(1, 1024))
    data[start:stop] = bytes(stop - start)
    return f"zero [{start}:{stop}]"


MUTATIONS: tuple[Callable[[random.Random, bytearray], str], ...] = (
    _flip,
    _truncate,
    _duplicate,
    _remove,
    _field,
    _zero,
)


def mutants(container: str, count: int) -> Iterator[tuple[int, str, bytes]]:
    """``count`` seeded mutants of the container's seed file: (index, what, bytes)."""
    original = (CORPUS / SEEDS[container]).read_bytes()
    for index in range(count):
        rng = random.Random(zlib.crc32(f"{container}/{index}".encode()))
        data = bytearray(original)
        done = [rng.choice(MUTATIONS)(rng, data) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
        yield index, "; ".join(done), bytes(data)


def _outcome(index: int, what: str, data: bytes) -> tuple[int, str, str, str] | None:
    """``None`` for a prepared clip with finite features or a typed refusal, else what
    went wrong."""
    family = FAMILIES[index % len(FAMILIES)]
    started = time.monotonic()
    problem = None
    try:
        result = prepare(family, data)
    except PluginError as error:
        problem = f"PluginError: {error}"
    except AudioGateError:
        pass
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"
    else:
        if not all(np.isfinite(features).all() for features in result.features):
            problem = "non-finite features"
    elapsed = time.monotonic() - started
    if problem is None and elapsed > 10.0:
        problem = f"took {elapsed:.1f} s"
    return None if problem is None else (index, family, what, problem)


def check_mutants(container: str, count: int) -> None:
    # Two at a time: a refused compressed clip's decoder process is replaced (a process
    # start, about 0.1 s), and the decoder pool runs two.
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = pool.map(lambda m: _outcome(*m), mutants(container, count))
        untyped = [o for o in outcomes if o is not None]
    assert not untyped, "\n".join(map(str, untyped))


def test_every_container_has_a_seed() -> None:
    files = {e["file"] for e in entries()}
    assert set(SEEDS.values()) <= files
    containers = {e["container"] for e in entries()}
    seeded = {e["container"] for e in entries() if e["file"] in SEEDS.values()}
    assert seeded == containers


def test_mutants_are_seeded() -> None:
    first = list(mutants("flac", 3))
    assert first == list(mutants("flac", 3))
    assert len({data for _, _, data in first}) == 3


@pytest.mark.parametrize("container", [c for c in SEEDS if c not in COMPRESSED])
def test_a_few_mutants_of_each_pcm_container_are_typed(container: str) -> None:
    check_mutants(container, QUICK)


@pytest.mark.slow
@pytest.mark.parametrize("container", SEEDS)
def test_mutants_of_each_container_are_prepared_or_refused_typed(container: str) -> None:
    skip_without_decoder(CONTAINER_OF[container])
    check_mutants(container, LONG_COMPRESSED if container in COMPRESSED else LONG)


# --- through the reference server ---------------------------------------------------------


def _serverkit():
    """tests/server/serverkit.py (the server tests' helpers), imported by name."""
    if "serverkit" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "server" / "serverkit.py"
        spec = importlib.util.spec_from_file_location("serverkit", path)
        assert spec
        assert spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["serverkit"] = module
        spec.loader.exec_module(module)
    return sys.modules["serverkit"]


@pytest.mark.slow
def test_server_answers_every_mutant_without_a_5xx_and_stays_healthy() -> None:
    pytest.importorskip("transformers")
    kit = _serverkit()
    pyav = importlib.util.find_spec("av") is not None
    containers = [c for c in SEEDS if pyav or CONTAINER_OF[c] not in PYAV_CONTAINERS]
    statuses: dict[int, int] = {}
    server_errors = []
    with kit.serving("gemma-3n-e4b-it") as running:
        for container in containers:
            for index, what, data in mutants(container, SERVED):
                part = kit.audio_part(base64.b64encode(data).decode(), DECLARED[container])
                body = {
                    "model": "test-model",
                    "messages": [{"role": "user", "content": [part]}],
                }
                response = running.client.post(kit.PREPARE, json=body)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    server_errors.append((container, index, what, response.text[:300]))
        health = running.client.get("/healthz")
        assert health.status_code == 200, health.text
        running.wait_idle()
    assert not server_errors, "\n".join(map(str, server_errors))
    assert sum(statuses.values()) == len(containers) * SERVED
    assert any(400 <= status < 500 for status in statuses), statuses
