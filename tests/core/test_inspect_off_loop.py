"""A large compressed clip's header walk runs off the event loop (a server's other
connections are not stalled by it); a WAV's header, read in microseconds, stays on it."""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

import pytest
from test_webm_remux import _matroska, _ogg_opus_packets

from audiogate.api import AudioGate
from audiogate.decode.decoder import INSPECT_OFF_LOOP_BYTES, inspects_long
from audiogate.request import Request
from audiogate.testing.audio import noise, wav_bytes


@pytest.fixture(scope="module")
def live_webm() -> bytes:
    head, packets, _trim = _ogg_opus_packets()
    data = b""
    repeats = 1
    while len(data) < INSPECT_OFF_LOOP_BYTES:
        data = _matroska(head, packets * repeats, 0, live=True)
        repeats *= 2
    return data


def _wav(seconds: float) -> bytes:
    return wav_bytes(noise(samples=int(seconds * 16_000), seed=1), rate_hz=16_000)


def test_only_a_large_compressed_clip_is_inspected_long(live_webm: bytes) -> None:
    assert inspects_long(live_webm)
    assert inspects_long(memoryview(live_webm))
    assert not inspects_long(live_webm[: INSPECT_OFF_LOOP_BYTES - 1])  # short: on the loop
    wav = _wav(5.0)
    assert len(wav) >= INSPECT_OFF_LOOP_BYTES
    assert not inspects_long(wav)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("kind", ["webm", "wav"])
def test_run_async_inspects_a_large_compressed_clip_in_a_thread(
    kind: str, live_webm: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = live_webm if kind == "webm" else _wav(5.0)
    part = {"data": base64.b64encode(data).decode(), "format": kind}
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": part},
                {"type": "text", "text": "Hi"},
            ],
        }
    ]
    threads: list[int] = []

    def preflight(self: Request) -> None:
        threads.append(threading.get_ident())
        raise _Stop

    monkeypatch.setattr(Request, "preflight", preflight)

    def render(messages: list[dict[str, Any]]) -> str:  # the flattened messages' texts
        return "".join(part["text"] for message in messages for part in message["content"])

    gate = AudioGate.from_family("qwen2audio", renderer=render)

    async def scenario() -> int:
        with pytest.raises(_Stop):
            await gate.request(messages).run_async()
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert len(threads) == 1
    assert (threads[0] != loop_thread) == (kind == "webm")
