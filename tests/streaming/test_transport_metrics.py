"""A prepared stream counts the waveform series a whole-clip request counts (#34):
source seconds and samples, normalized samples, feature frames and tokens, through the
gate's worker and through the server's stream ends (chunked uploads, Realtime)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import attrs
import pytest
from stream_helpers import byte_chunks, family_host, noise_pcm16, raw_pcm16

from audiogate import AudioGate
from audiogate.acquire.clip import EncodedClip
from audiogate.errors import LimitError
from audiogate.metrics import AudioMetrics
from audiogate.worker import AudioWorker

if TYPE_CHECKING:
    from audiogate.server.routes import AudioServer

RATE = 16_000
FAMILY = "qwen2audio"
SERIES = (
    "audiogate_audio_source_seconds_total",
    "audiogate_audio_source_samples_total",
    "audiogate_audio_normalized_samples_total",
    "audiogate_audio_feature_frames_total",
    "audiogate_audio_effective_tokens_total",
)


def _waveform_series(metrics: AudioMetrics) -> dict[str, float]:
    return {name: metrics.value(name, family=FAMILY) for name in SERIES}


def _whole_clip_series(data: bytes) -> dict[str, float]:
    with AudioWorker(family_host()) as worker:
        gate = AudioGate.from_family(FAMILY, host=family_host(), worker=worker)
        clip = EncodedClip(data=data, source_format=raw_pcm16(RATE), ordinal=1)
        gate.prepare(clips=[clip])
        return _waveform_series(worker.metrics)


def test_the_gate_counts_a_stream_as_a_whole_clip() -> None:
    data = noise_pcm16(RATE * 3 + 77, seed=8).tobytes()
    with AudioWorker(family_host()) as worker:
        gate = AudioGate.from_family(FAMILY, host=family_host(), worker=worker)
        asyncio.run(
            gate.prepare_stream(byte_chunks(data, [640, 7, 4099]), source_format=raw_pcm16(RATE))
        )
        streamed = _waveform_series(worker.metrics)
        # A refused stream prepared nothing, and counts no waveform.
        long = noise_pcm16(RATE * 31, seed=1).tobytes()
        with pytest.raises(LimitError):
            asyncio.run(
                gate.prepare_stream(byte_chunks(long, [64000]), source_format=raw_pcm16(RATE))
            )
        assert _waveform_series(worker.metrics) == streamed
    whole = _whole_clip_series(data)
    assert streamed == whole
    assert all(value > 0 for value in whole.values())


@attrs.define
class _Server:
    metrics: AudioMetrics
    family: str = FAMILY


def test_a_server_stream_end_counts_the_prepared_clip() -> None:
    from audiogate.server.stream_upload import StreamMetrics, count_end
    from audiogate.streaming.transport import prepare_stream

    data = noise_pcm16(RATE * 2, seed=9).tobytes()
    server = _Server(AudioMetrics(families=[FAMILY]))
    streams = StreamMetrics(server.metrics)
    clip = asyncio.run(
        prepare_stream(
            family_host(),
            family_host().default_policy(FAMILY),
            byte_chunks(data, [640]),
            source_format=raw_pcm16(RATE),
        )
    )
    served = cast("AudioServer", server)
    count_end(served, streams, "upload", None, clip=clip, ended_at=None)
    whole = _whole_clip_series(data)
    assert _waveform_series(server.metrics) == whole
    # Ends without a prepared clip (refused, cancelled, cleared) count no waveform.
    refused = LimitError("encoded bytes per clip", actual=2, maximum=1)
    count_end(served, streams, "realtime", refused)
    assert _waveform_series(server.metrics) == whole
