"""The Granite Speech streaming stage equals the whole clip's resample + features, bit for
bit, at the stage itself (every field of the features record: the peaks, the waveform);
``tests/streaming/test_stream_granite.py`` checks it through the streaming frontend."""

from __future__ import annotations

from typing import Any

import pytest

from audiogate.errors import PluginError
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy
from audiogate.testing.streaming import (
    assert_stream_matches_whole_clip,
    chunks,
    noise_samples,
    open_stream,
    standard_chunkings,
    whole_clip_plan,
)
from audiogate_granitespeech.geometry import interior_frames
from audiogate_granitespeech.streaming import STREAM_BLOCK_FRAMES, GraniteFeatureStream

#: 16 kHz lengths around the 400-sample window, the 160-sample hop, odd frame counts
#: (rows of two frames) and a streamed block's border.
EDGE_SAMPLES = (257, 359, 360, 361, 480, 640, 200 + 160 * STREAM_BLOCK_FRAMES, 16_000)


@pytest.mark.parametrize("samples", EDGE_SAMPLES)
def test_edge_lengths_at_16k(host: FamilyHost, policy: AudioPolicy, samples: int) -> None:
    x = noise_samples(samples, samples)
    for sizes in ((1,), *standard_chunkings(16_000, window=400)):
        assert_stream_matches_whole_clip(host, policy, 16_000, x, sizes)


@pytest.mark.parametrize("rate", [8_000, 22_050, 44_100, 48_000])
def test_resampled_rates(host: FamilyHost, policy: AudioPolicy, rate: int) -> None:
    x = noise_samples(rate + 17, rate)
    for sizes in standard_chunkings(rate, window=400, seed=rate):
        assert_stream_matches_whole_clip(host, policy, rate, x, sizes)


def test_a_plan_of_another_clip_is_refused(host: FamilyHost, policy: AudioPolicy) -> None:
    stream = open_stream(host, policy, 48_000)
    assert isinstance(stream, GraniteFeatureStream)
    stream.push(noise_samples(9_600, 0))
    for rate, frames in ((44_100, 9_600), (48_000, 9_601)):  # another rate, another length
        with pytest.raises(PluginError, match="streamed as soxr_hq 48000"):
            stream.finish(whole_clip_plan(host, policy, rate, frames))
    stream.close()
    stream.close()
    assert stream.nbytes == 0
    with pytest.raises(RuntimeError):
        stream.push(noise_samples(10, 0))


def test_every_batch_computes_its_frames(
    host: FamilyHost, policy: AudioPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3 s at 16 kHz in 20 ms chunks: every interior frame is computed before finish()
    # (not only whole blocks of 64), which computes only the two frames of the end.
    import audiogate_granitespeech.streaming as streaming

    samples = 48_000
    stream = open_stream(host, policy, 16_000)
    assert isinstance(stream, GraniteFeatureStream)
    for chunk in chunks(noise_samples(samples, 5), [320]):
        stream.push(chunk)
    sink = stream._sink
    assert sink is not None
    assert sink._rows.done == interior_frames(samples) == 299
    computed: list[tuple[str, int]] = []
    batch_frames, interior_block = streaming.batch_frames, streaming.interior_block
    log_mel_block = streaming.log_mel_block

    def count_batch(waveform: Any, **kwargs: Any) -> Any:
        computed.append(("batch", kwargs["stop"] - kwargs["first"]))
        return batch_frames(waveform, **kwargs)

    def count_interior(waveform: Any, first: int, out: Any) -> None:
        computed.append(("interior", out.shape[0]))
        interior_block(waveform, first, out)

    def count_end(frames: Any, out: Any) -> None:
        computed.append(("end", out.shape[0]))
        log_mel_block(frames, out)

    monkeypatch.setattr(streaming, "batch_frames", count_batch)
    monkeypatch.setattr(streaming, "interior_block", count_interior)
    monkeypatch.setattr(streaming, "log_mel_block", count_end)
    stream.finish(whole_clip_plan(host, policy, 16_000, samples))
    # Frames 299 and 300 read the reflected end: one kernel call on their samples (not
    # batch_frames' index arrays and block pool).
    assert computed == [("end", 2)]
    stream.close()
