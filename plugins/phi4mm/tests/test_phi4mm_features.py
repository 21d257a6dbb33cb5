"""SpeechLib log-mel: frames and tokens, banks, goldens, blocks, cancellation, memory."""

from __future__ import annotations

import numpy as np
import pytest
from phi4mm_helpers import CancelAfter, signal, sine
from reference_phi4mm import compute_audio_embed_size, original_features, speechlib_mel

from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import FeatureError, PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.records import readonly
from audiogate.testing.memory import traced_in_fresh_thread
from audiogate_phi4mm.geometry import NARROWBAND, WIDEBAND, audio_embed_size
from audiogate_phi4mm.logmel import BLOCK_FRAMES, log_mel
from audiogate_phi4mm.melbank import native_mel_bank, speechlib_mel_bank

TOLERANCE = 2e-6


@pytest.mark.parametrize(("frames", "tokens"), [(1, 1), (8, 1), (9, 2), (16, 2), (179_998, 22_500)])
def test_token_count_is_ceiling_frames_over_eight(frames: int, tokens: int) -> None:
    assert audio_embed_size(frames, compression_rate=8, downsample_rate=1) == tokens
    assert compute_audio_embed_size(frames) == tokens


@pytest.mark.parametrize("frames", [1, 7, 8, 9, 63, 64, 65, 1000])
@pytest.mark.parametrize("downsample", [1, 2, 3])
def test_token_count_matches_the_reference_qformer_step(frames: int, downsample: int) -> None:
    assert audio_embed_size(
        frames, compression_rate=8, downsample_rate=downsample
    ) == compute_audio_embed_size(frames, 8, downsample)


@pytest.mark.parametrize(
    ("rate", "samples", "frames"),
    [
        (16_000, 400, 1),
        (16_000, 559, 1),
        (16_000, 560, 2),
        (16_000, 1_600, 8),
        (16_000, 1_760, 9),
        (16_000, 28_800_000, 179_998),
        (8_000, 200, 1),
        (8_000, 279, 1),
        (8_000, 280, 2),
        (8_000, 800, 8),
    ],
)
def test_plan_counts_frames_and_tokens_with_one_formula(
    host: FamilyHost, remote, rate: int, samples: int, frames: int
) -> None:
    plan = host.plan_features(remote, rate_hz=rate, samples=samples, clip_index=0)
    assert plan.frames == frames
    assert plan.tokens == compute_audio_embed_size(frames)
    assert plan.feature_shape == (frames, 80)
    assert plan.feature_bytes == frames * 80 * 4


@pytest.mark.parametrize(
    ("variant", "rate", "samples", "minimum"),
    [("remote", 16_000, 399, 400), ("remote", 8_000, 199, 200), ("native", 16_000, 399, 400)],
)
def test_shorter_than_one_frame_is_a_typed_error(
    host: FamilyHost, request, variant: str, rate: int, samples: int, minimum: int
) -> None:
    # One frame, as in both reference processors (mlxcel required two): 400 samples give one.
    policy = request.getfixturevalue(variant)
    for n in (0, 1, samples):
        with pytest.raises(FeatureError) as info:
            host.plan_features(policy, rate_hz=rate, samples=n, clip_index=3)
        assert info.value.clip_index == 3
        assert f"{n} samples at {rate} Hz" in str(info.value)
        assert f"at least {minimum} samples" in str(info.value)


def test_rates_outside_the_frontend_are_refused(host: FamilyHost, remote, native) -> None:
    with pytest.raises(FeatureError, match="16000 or 8000 Hz"):
        host.plan_features(remote, rate_hz=22_050, samples=16_000, clip_index=0)
    with pytest.raises(FeatureError, match="16000 Hz, got 8000"):
        host.plan_features(native, rate_hz=8_000, samples=16_000, clip_index=0)


def test_speechlib_bank_equals_the_original_and_pins_the_mlxcel_entries() -> None:
    bank = speechlib_mel_bank()
    np.testing.assert_array_equal(bank, speechlib_mel(16000, 512, 80, fmax=7690))
    flat = bank.T.reshape(-1)  # mlxcel's test indexes the [257, 80] layout
    assert flat[80] == pytest.approx(0.57565, abs=1e-5)
    assert flat[100 * 80 + 54] == pytest.approx(0.6164795, abs=1e-6)
    assert flat[256 * 80 + 79] == 0.0
    assert not bank[:, 246:].any()
    assert not bank[:, 0].any()


def test_native_bank_equals_transformers_and_differs_in_one_entry() -> None:
    audio_utils = pytest.importorskip("transformers.audio_utils")
    theirs = audio_utils.mel_filter_bank(
        257, 80, 0, 7690, 16000, triangularize_in_mel_space=True, mel_scale="kaldi"
    )
    ours = native_mel_bank()
    assert ours.dtype == theirs.dtype == np.float64
    np.testing.assert_array_equal(ours, theirs)
    differs = np.argwhere(ours.astype(np.float32) != speechlib_mel_bank().T)
    assert differs.tolist() == [[246, 79]]
    assert ours[246, 79] == pytest.approx(0.00972, abs=1e-5)


def _extract(host: FamilyHost, policy, waveform: np.ndarray, rate: int, cancel=NEVER):
    wave = readonly(np.ascontiguousarray(waveform, dtype=np.float32))
    plan = host.plan_features(policy, rate_hz=rate, samples=wave.size, clip_index=0)
    return plan, host.extract_features(
        policy, plan, wave, rate_hz=rate, clip_index=0, cancel=cancel
    )


def test_mlxcel_golden_1600_samples_of_440hz(host: FamilyHost, remote) -> None:
    """``deterministic_waveform_matches_pinned_speechlib_features`` (tolerance 2e-3)."""
    plan, clip = _extract(host, remote, sine(1_600, 16_000), 16_000)
    assert (plan.frames, plan.tokens) == (8, 1)
    assert clip.features[0, 0] == pytest.approx(10.075375, abs=2e-3)
    assert clip.features[7, 79] == pytest.approx(8.648406, abs=2e-3)


def test_mlxcel_golden_24khz_is_relabelled_to_148_frames(host: FamilyHost, remote) -> None:
    """``pinned_processor_relabels_24khz_before_feature_extraction``."""
    x = readonly(sine(24_000, 24_000))
    resample = host.plan_resample(
        remote, source_rate_hz=24_000, source_samples=x.size, clip_index=0
    )
    wave = host.resample(remote, resample, x, clip_index=0, cancel=NEVER)
    assert resample.output_rate_hz == 16_000
    plan, clip = _extract(host, remote, wave, resample.output_rate_hz)
    assert plan.frames == 148
    assert clip.features[0, 0] == pytest.approx(12.475846, abs=2e-3)


@pytest.mark.parametrize("frontend", [WIDEBAND, NARROWBAND], ids=["16k", "8k"])
@pytest.mark.parametrize(
    "frames", [1, 2, BLOCK_FRAMES - 1, BLOCK_FRAMES, BLOCK_FRAMES + 1, 3 * BLOCK_FRAMES + 5]
)
def test_block_boundaries_match_the_original(host: FamilyHost, remote, frontend, frames) -> None:
    for extra in (0, frontend.hop_samples - 1):
        n = frontend.window_samples + (frames - 1) * frontend.hop_samples + extra
        x = signal(n, frontend.rate_hz, seed=frames)[:, 0].astype(np.float32)
        _plan, clip = _extract(host, remote, x, frontend.rate_hz)
        reference = original_features(x.astype(np.float64), frontend.rate_hz)
        assert clip.features.shape == reference.shape == (frames, 80)
        assert np.abs(clip.features - reference).max() <= TOLERANCE
        assert clip.features.dtype == np.float32
        assert not clip.features.flags.writeable
        assert clip.mask is None


def test_fillzero_leaves_the_bands_above_4khz_at_the_floor(host: FamilyHost, remote) -> None:
    x = signal(8_000, 8_000)[:, 0]
    _, clip = _extract(host, remote, x, 8_000)
    above = ~speechlib_mel_bank()[:, :128].any(axis=1)  # filters with no bin below 4 kHz
    assert above.sum() == 18
    assert not clip.features[:, above].any()  # ln(max(0, 1)) == 0 exactly
    assert clip.features[:, ~above].min() > 0


def test_silence_is_exactly_zero(host: FamilyHost, remote) -> None:
    _, clip = _extract(host, remote, np.zeros(16_000, np.float32), 16_000)
    assert not clip.features.any()


def test_feature_loop_observes_cancellation_between_blocks(host: FamilyHost, remote) -> None:
    x = signal(160 * BLOCK_FRAMES * 4, 16_000)[:, 0]
    token = CancelAfter(Checkpoint.FEATURE, after=3)
    with pytest.raises(PreprocessCancelled) as info:
        _extract(host, remote, x, 16_000, cancel=token)
    assert info.value.checkpoint == "Feature"
    assert token.checks == 3


def test_working_bytes_bound_the_measured_scratch(host: FamilyHost, remote) -> None:
    x = readonly(signal(16_000 * 20, 16_000)[:, 0].astype(np.float32))
    plan = host.plan_features(remote, rate_hz=16_000, samples=x.size, clip_index=0)
    _extract(host, remote, x[:16_000], 16_000)  # the cached bank and window are not scratch
    _, peak = traced_in_fresh_thread(
        lambda: host.extract_features(remote, plan, x, rate_hz=16_000, clip_index=0, cancel=NEVER)
    )
    assert peak <= plan.feature_bytes + plan.working_bytes


@pytest.mark.slow
def test_thirty_minutes_stay_within_the_working_budget(host: FamilyHost, remote) -> None:
    """A 30-minute clip: features plus block scratch, never its whole complex spectrum."""
    samples = 16_000 * 1_800
    plan = host.plan_features(remote, rate_hz=16_000, samples=samples, clip_index=0)
    assert plan.frames == 179_998
    assert plan.tokens == 22_500
    spectrum = plan.frames * 257 * 16  # what an unblocked complex128 spectrum would take
    assert plan.working_bytes < spectrum // 100
    x = np.full(samples, 0.01, dtype=np.float32)
    x[:16_000] += 0.1 * np.random.default_rng(0).standard_normal(16_000).astype(np.float32)
    x = readonly(x)
    clip, peak = traced_in_fresh_thread(
        lambda: host.extract_features(remote, plan, x, rate_hz=16_000, clip_index=0, cancel=NEVER)
    )
    assert clip.features.shape == (179_998, 80)
    assert peak <= plan.feature_bytes + plan.working_bytes
    budget = remote.max_waveform_working_bytes_per_request
    assert x.nbytes + peak < budget


def test_native_extractor_parity_at_16khz(host: FamilyHost, native) -> None:
    """``Phi4MultimodalFeatureExtractor`` (native bank), 0.03 s to 30 s, ≤ 2e-6."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    extractor = transformers.Phi4MultimodalFeatureExtractor()
    for seconds in (0.03, 0.05, 1.0, 7.3, 30.0):
        x = signal(int(16_000 * seconds), 16_000, seed=int(seconds * 10))[:, 0]
        x = x.astype(np.float32)
        plan, clip = _extract(host, native, x, 16_000)
        theirs = extractor(x, sampling_rate=16_000, return_tensors="np")
        expected = theirs["audio_input_features"][0]
        assert clip.features.shape == expected.shape
        assert np.abs(clip.features - expected).max() <= TOLERANCE
        assert plan.tokens == int(theirs["audio_embed_sizes"][0])


def test_local_log_mel_rejects_a_plan_for_another_length() -> None:
    x = np.zeros(1_000, np.float32)
    with pytest.raises(ValueError, match="frames"):
        log_mel(x, frontend=WIDEBAND, bank="speechlib", frames=7, clip_index=0, cancel=NEVER)
