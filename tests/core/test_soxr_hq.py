"""soxr HQ resampling: whole buffer, streamed in arbitrary chunks, and librosa's length.

Oracles: python-soxr's own ``soxr.resample`` (what ``librosa.load(sr=...)`` calls; librosa
itself is not installed), ``librosa.resample``'s ``fix_length`` rule restated, and
transformers' soundfile ``load_audio``. Streamed and whole-buffer outputs must be
bit-identical, never merely close.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import PreprocessCancelled
from audiogate.resample import (
    SOXR_BLOCK_SAMPLES,
    SoxrStream,
    librosa_output_length,
    soxr_output_length,
    soxr_resample,
    soxr_resample_librosa,
)

RATES = (8_000, 11_025, 22_050, 32_000, 44_100, 48_000, 96_000)
EDGE_LENGTHS = (0, 1, 2, 3, 159, 160, 161, 2_999, SOXR_BLOCK_SAMPLES - 1, SOXR_BLOCK_SAMPLES)
EDGE_LENGTHS += (SOXR_BLOCK_SAMPLES + 1, 2 * SOXR_BLOCK_SAMPLES + 7)


def signal(samples: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 44_100
    x = 0.4 * np.sin(2 * np.pi * 997 * t) + 0.1 * rng.standard_normal(samples)
    return x.astype(np.float32)


def soxr_whole(x: np.ndarray, rate: int, out: int = 16_000) -> np.ndarray:
    return soxr.resample(x, rate, out, "soxr_hq")


def librosa_like(x: np.ndarray, rate: int, out: int = 16_000) -> np.ndarray:
    """``librosa.resample(res_type="soxr_hq", fix=True)``: soxr, then fix_length to ceil."""
    y = soxr_whole(x, rate, out)
    size = int(np.ceil(x.shape[0] * out / rate))
    return np.pad(y, (0, max(0, size - y.shape[0])))[:size]


def stream_all(x: np.ndarray, rate: int, chunks: list[int], **kwargs) -> np.ndarray:
    stream = SoxrStream(in_rate_hz=rate, out_rate_hz=16_000, **kwargs)
    parts, start = [], 0
    for size in chunks:
        parts.append(stream.feed(x[start : start + size]))
        start += size
    parts.append(stream.feed(x[start:]))
    parts.append(stream.finish())
    assert all(p.dtype == np.float32 and p.ndim == 1 for p in parts)
    assert stream.samples_in == x.shape[0]
    out = np.concatenate(parts)
    assert stream.samples_out == out.shape[0]
    return out


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("samples", EDGE_LENGTHS)
def test_whole_buffer_equals_soxr_resample_bit_for_bit(rate, samples):
    x = signal(samples)
    got = soxr_resample(x, in_rate_hz=rate, out_rate_hz=16_000)
    want = soxr_whole(x, rate)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (soxr_output_length(samples, in_rate_hz=rate, out_rate_hz=16_000),)
    assert got.dtype == np.float32
    assert not got.flags.writeable


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("samples", EDGE_LENGTHS)
def test_librosa_length_equals_librosa_fix_length(rate, samples):
    x = signal(samples, seed=1)
    got = soxr_resample_librosa(x, in_rate_hz=rate, out_rate_hz=16_000)
    np.testing.assert_array_equal(got, librosa_like(x, rate))
    assert got.shape == (librosa_output_length(samples, in_rate_hz=rate, out_rate_hz=16_000),)


def test_output_length_formulas_match_soxr_for_every_short_length():
    for rate in (44_100, 48_000, 22_050, 8_000):
        for samples in range(0, 1_500):
            x = np.ones(samples, dtype=np.float32)
            natural = soxr_whole(x, rate).shape[0]
            assert soxr_output_length(samples, in_rate_hz=rate, out_rate_hz=16_000) == natural
            ceil = -(-samples * 16_000 // rate)
            assert librosa_output_length(samples, in_rate_hz=rate, out_rate_hz=16_000) == ceil
            assert 0 <= ceil - natural <= 1


@settings(max_examples=60, deadline=None)
@given(
    rate=st.sampled_from(RATES),
    samples=st.integers(min_value=0, max_value=60_000),
    sizes=st.lists(st.integers(min_value=0, max_value=9_000), max_size=40),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_any_chunking_equals_the_whole_buffer(rate, samples, sizes, seed):
    x = signal(samples, seed)
    np.testing.assert_array_equal(stream_all(x, rate, sizes), soxr_whole(x, rate))
    np.testing.assert_array_equal(
        stream_all(
            x,
            rate,
            sizes,
            output_samples=librosa_output_length(samples, in_rate_hz=rate, out_rate_hz=16_000),
        ),
        librosa_like(x, rate),
    )


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_thirty_seconds_fed_sample_by_sample_at_the_start_and_in_odd_chunks(rate):
    x = signal(30 * rate, seed=3)
    chunks = [1] * 500 + [7, 4_409, 1, 0, 65_537, 3] + [12_345] * 20
    np.testing.assert_array_equal(stream_all(x, rate, chunks), soxr_whole(x, rate))


def test_equal_rates_are_an_exact_copy():
    x = signal(1_000)
    np.testing.assert_array_equal(soxr_resample(x, in_rate_hz=16_000, out_rate_hz=16_000), x)
    np.testing.assert_array_equal(stream_all(x, 16_000, [3, 500], output_samples=1_002)[:1_000], x)


def test_output_samples_trims_and_pads():
    x = signal(44_100)
    full = soxr_whole(x, 44_100)
    np.testing.assert_array_equal(
        stream_all(x, 44_100, [1_000] * 10, output_samples=100), full[:100]
    )
    padded = stream_all(x, 44_100, [], output_samples=full.shape[0] + 5)
    np.testing.assert_array_equal(padded[: full.shape[0]], full)
    assert not padded[full.shape[0] :].any()


def test_stream_misuse_is_refused():
    stream = SoxrStream(in_rate_hz=48_000, out_rate_hz=16_000)
    with pytest.raises(ValueError, match="1-D"):
        stream.feed(np.zeros((4, 2), dtype=np.float32))
    stream.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        stream.feed(np.zeros(4, dtype=np.float32))
    with pytest.raises(RuntimeError, match="twice"):
        stream.finish()
    with pytest.raises(ValueError, match="rates > 0"):
        SoxrStream(in_rate_hz=0, out_rate_hz=16_000)
    with pytest.raises(ValueError, match="output_samples"):
        SoxrStream(in_rate_hz=48_000, out_rate_hz=16_000, output_samples=-1)
    with pytest.raises(ValueError, match="samples must be >= 0"):
        soxr_output_length(-1, in_rate_hz=48_000, out_rate_hz=16_000)
    with pytest.raises(ValueError, match="rates > 0"):
        librosa_output_length(10, in_rate_hz=48_000, out_rate_hz=0)


class _CancelAfter(CancelToken):
    """Cancels itself once it has been polled ``polls`` times."""

    def __init__(self, polls: int) -> None:
        super().__init__()
        self.remaining = polls
        self.seen: list[tuple[Checkpoint, int | None]] = []

    def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
        self.seen.append((checkpoint, clip_index))
        self.remaining -= 1
        if self.remaining < 0:
            self.cancel()
        super().check(checkpoint, clip_index)


@pytest.mark.parametrize("resample", [soxr_resample, soxr_resample_librosa])
def test_whole_buffer_paths_poll_cancellation_between_blocks(resample):
    x = signal(10 * SOXR_BLOCK_SAMPLES)
    token = _CancelAfter(4)
    with pytest.raises(PreprocessCancelled) as caught:
        resample(x, in_rate_hz=48_000, out_rate_hz=16_000, clip_index=5, cancel=token)
    assert caught.value.checkpoint == "Resample"
    assert caught.value.clip_index == 5
    assert token.seen == [(Checkpoint.RESAMPLE, 5)] * 5  # stopped after 4 of 10 blocks

    polled = _CancelAfter(10**6)
    resample(x, in_rate_hz=48_000, out_rate_hz=16_000, clip_index=1, cancel=polled)
    assert len(polled.seen) == 1 + 10  # once up front, then after every block


@pytest.mark.parametrize("resample", [soxr_resample, soxr_resample_librosa])
@pytest.mark.parametrize("samples", [1, 4_801, SOXR_BLOCK_SAMPLES])
def test_a_one_block_clip_is_polled_before_and_after_resampling(resample, samples):
    # A clip of one block goes to soxr.resample in one call; cancellation is still seen
    # up front and once the block is done.
    x = signal(samples)
    polled = _CancelAfter(10**6)
    resample(x, in_rate_hz=48_000, out_rate_hz=16_000, clip_index=2, cancel=polled)
    assert polled.seen == [(Checkpoint.RESAMPLE, 2)] * 2

    token = _CancelAfter(1)
    with pytest.raises(PreprocessCancelled) as caught:
        resample(x, in_rate_hz=48_000, out_rate_hz=16_000, clip_index=2, cancel=token)
    assert caught.value.checkpoint == "Resample"
    assert len(token.seen) == 2


def test_librosa_path_equals_transformers_soundfile_loader(tmp_path):
    """transformers' ``load_audio(backend="soundfile")`` is documented as ``librosa.load``."""
    soundfile = pytest.importorskip("soundfile")
    pytest.importorskip("transformers")
    from transformers.audio_utils import load_audio

    for rate, samples in ((44_100, 44_100 + 37), (48_000, 7 * 48_000 + 1), (44_100, 100)):
        x = signal(samples, seed=samples)
        buffer = io.BytesIO()
        soundfile.write(buffer, x, rate, format="WAV", subtype="FLOAT")
        path = tmp_path / f"clip_{rate}_{samples}.wav"
        path.write_bytes(buffer.getvalue())
        want = load_audio(str(path), sampling_rate=16_000, backend="soundfile")
        got = soxr_resample_librosa(x, in_rate_hz=rate, out_rate_hz=16_000)
        np.testing.assert_array_equal(got, want)


def test_shared_plan_has_librosa_length_and_the_core_default_uses_it() -> None:
    import attrs

    from audiogate import defaults
    from audiogate.resample import plan_soxr_hq, run_soxr_hq_plan
    from audiogate_qwen2audio.policy import PINNED

    # 4 samples at 48 kHz: soxr's own length rounds to 1, librosa.load pads to ceil = 2.
    plan = plan_soxr_hq(source_rate_hz=48_000, source_samples=4, target_rate_hz=16_000)
    assert (plan.algorithm, plan.output_samples) == ("soxr_hq", 2)
    out = run_soxr_hq_plan(plan, np.full(4, 0.5, dtype=np.float32), clip_index=0)
    assert out.shape == (2,)
    assert not out.flags.writeable
    same = plan_soxr_hq(source_rate_hz=16_000, source_samples=4, target_rate_hz=16_000)
    assert (same.algorithm, same.output_samples) == ("identity", 4)
    policy = attrs.evolve(PINNED, family="anyfamily")
    assert defaults.audiogate_plan_resample(policy, 48_000, 4) == plan
    linear = attrs.evolve(policy, resampling="linear")
    assert defaults.audiogate_plan_resample(linear, 48_000, 4) is None
