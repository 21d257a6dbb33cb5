"""The Phi-4 MM streaming stage equals the whole clip's resample + features, bit for bit."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audiogate.cancel import NEVER
from audiogate.errors import PluginError
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy, CheckpointConfigs
from audiogate.streaming.stage import FeatureStream
from audiogate.testing.streaming import (
    assert_cancel_stops_the_stream,
    assert_stream_matches_whole_clip,
    bits,
    chunk_strategy,
    chunks,
    noise_samples,
    open_stream,
    whole_clip_plan,
)
from audiogate_phi4mm.logmel import BLOCK_FRAMES
from audiogate_phi4mm.resample import (
    BLOCK_OUTPUTS,
    EXACT,
    decimate,
    exact_ratio,
    resample_exact,
)
from audiogate_phi4mm.streaming import (
    DecimateStream,
    ExactResampleStream,
    Phi4MMFeatureStream,
    open_feature_stream,
)

RATES = (8_000, 11_025, 16_000, 22_050, 44_100, 48_000)
#: Chunk sizes that put borders inside the polyphase filters and the 400-sample frames.
ODD_SIZES = (1, 2, 3, 7, 13, 159, 161, 199, 401)
HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@pytest.fixture
def exact(host: FamilyHost) -> AudioPolicy:
    return host.parse_policy(
        "phi4mm",
        CheckpointConfigs(
            model={"model_type": "phi4mm"},
            processor={"audiogate_audio_limits": {"resampling_algorithm": EXACT}},
            processor_file="preprocessor_config.json",
        ),
    )


def _stream(host: FamilyHost, policy: AudioPolicy, rate_hz: int) -> Phi4MMFeatureStream:
    stream = open_stream(host, policy, rate_hz)
    assert isinstance(stream, Phi4MMFeatureStream)
    return stream


@settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_any_chunking_decimates_as_the_whole_clip(data: st.DataObject) -> None:
    down = data.draw(st.integers(2, 12))
    # Past one block of 16,000 outputs sometimes: the products of the next block.
    n = data.draw(st.one_of(st.integers(0, 300), st.integers(301, (BLOCK_OUTPUTS + 900) * down)))
    sizes = data.draw(chunk_strategy(16_000 * down, ODD_SIZES))
    x = noise_samples(n, data.draw(st.integers(0, 2**16)))
    whole = decimate(x, down=down, clip_index=0, cancel=NEVER)
    stream = DecimateStream(down=down)
    parts = [stream.push(chunk) for chunk in chunks(x, sizes)]
    parts.append(stream.finish())
    assert np.array_equal(bits(np.concatenate(parts)), bits(whole))


@settings(max_examples=25, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_any_chunking_resamples_the_exact_ratio_as_the_whole_clip(data: st.DataObject) -> None:
    rate = data.draw(st.sampled_from([8_000, 11_025, 22_050, 32_000, 44_100, 48_000, 96_000]))
    up, down = exact_ratio(rate)
    n = data.draw(st.one_of(st.integers(0, 300), st.integers(301, rate * 3 // 2)))
    sizes = data.draw(chunk_strategy(rate, ODD_SIZES))
    x = noise_samples(n, data.draw(st.integers(0, 2**16)))
    whole = resample_exact(x, up=up, down=down, clip_index=0, cancel=NEVER)
    stream = ExactResampleStream(up=up, down=down)
    parts = [stream.push(chunk) for chunk in chunks(x, sizes)]
    parts.append(stream.finish())
    assert np.array_equal(bits(np.concatenate(parts)), bits(whole))


def test_one_sample_at_a_time() -> None:
    x = noise_samples(2_000, 5)
    for stream, whole in (
        (DecimateStream(down=3), decimate(x, down=3, clip_index=0, cancel=NEVER)),
        (
            ExactResampleStream(up=160, down=441),
            resample_exact(x, up=160, down=441, clip_index=0, cancel=NEVER),
        ),
    ):
        parts = [stream.push(x[i : i + 1]) for i in range(x.shape[0])]
        parts.append(stream.finish())
        assert np.array_equal(bits(np.concatenate(parts)), bits(whole))


@settings(max_examples=20, deadline=None, suppress_health_check=HEALTH)
@given(data=st.data())
def test_any_chunking_gives_the_whole_clips_features(
    host: FamilyHost,
    remote: AudioPolicy,
    exact: AudioPolicy,
    native: AudioPolicy,
    data: st.DataObject,
) -> None:
    chosen = data.draw(st.sampled_from([remote, exact, native]))
    rate = data.draw(st.sampled_from(RATES))
    seconds = data.draw(st.floats(0.03, 1.5))
    n = max(int(rate * seconds), rate * 420 // 8_000)
    sizes = data.draw(chunk_strategy(rate, ODD_SIZES))
    assert_stream_matches_whole_clip(
        host, chosen, rate, noise_samples(n, data.draw(st.integers(0, 2**16))), sizes
    )


@pytest.mark.parametrize(
    "samples",
    [
        400,  # exactly one frame (a one-row product, as the whole clip's)
        401,  # one past
        559,  # one short of the second frame
        400 + 160 * BLOCK_FRAMES,  # 257 frames: the last block is one frame
        400 + 160 * (BLOCK_FRAMES - 1),  # 256 frames: one whole block
        400 + 160 * (2 * BLOCK_FRAMES + 1),  # 514: a two-frame last block
    ],
)
@pytest.mark.parametrize("sizes", [[1], [160], [320], [13, 401]])
def test_edge_lengths_at_16k(
    host: FamilyHost, remote: AudioPolicy, samples: int, sizes: list[int]
) -> None:
    if sizes == [1] and samples > 20_000:
        sizes = [7]
    assert_stream_matches_whole_clip(host, remote, 16_000, noise_samples(samples, samples), sizes)


def test_edge_lengths_at_8k(host: FamilyHost, remote: AudioPolicy) -> None:
    for samples in (200, 201, 200 + 80 * BLOCK_FRAMES):
        assert_stream_matches_whole_clip(host, remote, 8_000, noise_samples(samples, samples), [80])


def test_a_long_clip_in_20ms_chunks(host: FamilyHost, remote: AudioPolicy) -> None:
    # Past three decimator blocks (16,000 outputs each).
    assert_stream_matches_whole_clip(host, remote, 48_000, noise_samples(48_000 * 4 + 17, 1), [960])


def test_what_does_not_stream_is_left_to_the_core(host: FamilyHost, remote: AudioPolicy) -> None:
    probe = host.plan_resample(remote, source_rate_hz=48_000, source_samples=48_000, clip_index=0)
    opened = open_feature_stream(remote, source_rate_hz=48_000, resample=probe)
    assert isinstance(opened, FeatureStream)
    mlx = attrs.evolve(remote, feature_backend="mlx")
    assert open_feature_stream(mlx, source_rate_hz=48_000, resample=probe) is None
    other = attrs.evolve(probe, algorithm="soxr_vhq")
    assert open_feature_stream(remote, source_rate_hz=48_000, resample=other) is None
    odd = attrs.evolve(probe, output_rate_hz=12_000)
    assert open_feature_stream(remote, source_rate_hz=48_000, resample=odd) is None


def test_a_plan_of_another_clip_is_refused(host: FamilyHost, remote: AudioPolicy) -> None:
    stream = _stream(host, remote, 48_000)
    stream.push(noise_samples(9_600, 0))
    with pytest.raises(PluginError, match="streamed as scipy_polyphase_integer"):
        stream.finish(whole_clip_plan(host, remote, 48_000, 9_601))
    stream.close()
    stream.close()
    assert stream.nbytes == 0
    with pytest.raises(RuntimeError):
        stream.push(noise_samples(10, 0))


@pytest.mark.parametrize("seed", [2, 16, 17])
def test_a_one_frame_last_block_is_its_own_product(
    host: FamilyHost, remote: AudioPolicy, seed: int
) -> None:
    # OpenBLAS sums a one-row mel product differently from the same row in a larger one
    # (one or two of 80 values for these signals; on AVX-512 kernels other tails differ
    # too): the stream computes frame 256 of a 257-frame clip alone, as the whole clip does.
    assert_stream_matches_whole_clip(
        host, remote, 16_000, noise_samples(400 + 160 * BLOCK_FRAMES, seed), [160]
    )


def test_a_cancelled_stream_stops_at_its_next_batch(host: FamilyHost, remote: AudioPolicy) -> None:
    assert_cancel_stops_the_stream(host, remote, 48_000)


def test_spectra_are_computed_as_their_frames_arrive(
    host: FamilyHost, remote: AudioPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3 s at 16 kHz: 298 frames, one whole 256-frame block and 42 more. Every complete
    # frame's spectrum is in before finish(), which only projects the last block.
    import audiogate_phi4mm.streaming as streaming

    samples = 48_000
    x = noise_samples(samples, 3)
    stream = _stream(host, remote, 16_000)
    for chunk in chunks(x, [320]):
        stream.push(chunk)
    sink = stream._sink
    assert sink is not None
    assert (sink._spectra, sink._rows.done) == (298, 256)
    assert sink.nbytes >= sink._power.nbytes == BLOCK_FRAMES * 257 * 4
    spectra: list[int] = []
    mels: list[int] = []
    power_rows, mel_rows = streaming.power_rows, streaming.mel_rows

    def count_power(region: object, **kwargs: Any) -> None:
        spectra.append(kwargs["out"].shape[0])
        power_rows(region, **kwargs)

    def count_mel(power: Any, **kwargs: Any) -> None:
        mels.append(power.shape[0])
        mel_rows(power, **kwargs)

    monkeypatch.setattr(streaming, "power_rows", count_power)
    monkeypatch.setattr(streaming, "mel_rows", count_mel)
    _, features = stream.finish(whole_clip_plan(host, remote, 16_000, samples))
    assert (spectra, mels) == ([], [298 - BLOCK_FRAMES])
    assert features.features.shape == (298, 80)
    stream.close()
    assert stream.nbytes == 0
