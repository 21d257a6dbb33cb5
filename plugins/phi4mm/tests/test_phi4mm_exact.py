"""Phi-4 MM's exact-ratio resampler (``resampling_algorithm = "scipy_polyphase_exact"``,
vLLM's): bit for bit ``scipy.signal.resample_poly`` at the reduced ratio, token counts
(a 5 s 44.1 kHz clip: 63, not the processor rule's 86), features equal to the original
processor's on the 16 kHz waveform, policy selection; the integer-ratio default unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from phi4mm_helpers import CancelAfter, signal, wav_bytes
from reference_phi4mm import compute_audio_embed_size, original_features
from scipy.signal import resample_poly

from audiogate.cancel import NEVER, Checkpoint
from audiogate.errors import DecodeError, PolicyError, PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.pipeline import EncodedClip, prepare_clips
from audiogate.policy import AudioPolicy, CheckpointConfigs
from audiogate.records import readonly
from audiogate.testing.memory import traced_in_fresh_thread
from audiogate_phi4mm.resample import (
    ALGORITHM,
    BLOCK_OUTPUTS,
    EXACT,
    exact_ratio,
    resample_exact,
)

RATES = [8_000, 11_025, 12_000, 22_050, 24_000, 32_000, 44_100, 44_101, 48_000, 96_000, 192_000]


def _exact_policy(host: FamilyHost) -> AudioPolicy:
    return host.parse_policy(
        "phi4mm",
        CheckpointConfigs(
            model={"model_type": "phi4mm"},
            processor={"audiogate_audio_limits": {"resampling_algorithm": EXACT}},
            processor_file="preprocessor_config.json",
        ),
    )


@pytest.fixture
def exact(host: FamilyHost) -> AudioPolicy:
    return _exact_policy(host)


def _mono(samples: int, rate_hz: int, seed: int = 0) -> np.ndarray:
    return signal(samples, rate_hz, seed=seed)[:, 0].astype(np.float32)


@pytest.mark.parametrize("rate_hz", RATES)
@pytest.mark.parametrize("samples", [1, 2, 3, 160, 441, 16_001])
def test_bit_equal_to_resample_poly(rate_hz: int, samples: int) -> None:
    up, down = exact_ratio(rate_hz)
    x = _mono(samples, rate_hz, seed=samples)
    got = resample_exact(readonly(x), up=up, down=down, clip_index=0, cancel=NEVER)
    want = resample_poly(x, up, down)
    assert want.dtype == got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable


@pytest.mark.parametrize("rate_hz", [44_100, 48_000, 22_050])
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_bit_equal_across_block_boundaries(rate_hz: int, extra: int) -> None:
    up, down = exact_ratio(rate_hz)
    samples = (2 * BLOCK_OUTPUTS) * down // up + extra * down
    x = _mono(samples, rate_hz, seed=7)
    got = resample_exact(x, up=up, down=down, clip_index=0, cancel=NEVER)
    np.testing.assert_array_equal(got, resample_poly(x, up, down))


def test_five_seconds_at_44k1_is_63_tokens_not_86(host: FamilyHost, remote, exact) -> None:
    samples = 5 * 44_100
    counts = {}
    for policy in (remote, exact):
        plan = host.plan_resample(
            policy, source_rate_hz=44_100, source_samples=samples, clip_index=0
        )
        features = host.plan_features(
            policy, rate_hz=plan.output_rate_hz, samples=plan.output_samples, clip_index=0
        )
        counts[policy.resampling] = (plan.output_rate_hz, plan.output_samples, features.tokens)
    assert counts[ALGORITHM] == (16_000, 110_250, 86)  # 22.05 kHz relabelled 16 kHz
    assert counts[EXACT] == (16_000, 80_000, 63)


def test_end_to_end_features_are_the_processors_on_vllms_waveform(host: FamilyHost, exact) -> None:
    rate_hz = 44_100
    data = signal(5 * rate_hz, rate_hz, channels=2, seed=3)
    encoded = [EncodedClip(data=wav_bytes(data, rate_hz, "f32"), ordinal=1)]
    batch = prepare_clips(host, exact, encoded)
    (clip,) = batch.clips
    assert clip.tokens == 63
    mono = data.astype(np.float32).mean(axis=1, dtype=np.float32)
    waveform = resample_poly(mono, 160, 441)
    np.testing.assert_array_equal(clip.waveform, waveform)
    want = original_features(waveform.astype(np.float64), 16_000)
    assert clip.features.features.shape == want.shape
    assert clip.tokens == compute_audio_embed_size(want.shape[0])
    np.testing.assert_allclose(clip.features.features, want, atol=2e-4, rtol=0)


def test_the_default_and_16k_are_unchanged(host: FamilyHost, remote, exact) -> None:
    assert remote.resampling == ALGORITHM
    plan = host.plan_resample(remote, source_rate_hz=48_000, source_samples=960, clip_index=0)
    assert (plan.algorithm, plan.detail["down"]) == (ALGORITHM, 3)
    same = host.plan_resample(exact, source_rate_hz=16_000, source_samples=99, clip_index=0)
    assert (same.algorithm, same.output_samples) == ("identity", 99)
    x = readonly(_mono(99, 16_000))
    np.testing.assert_array_equal(host.resample(exact, same, x, clip_index=0, cancel=NEVER), x)


def test_the_8k_floor_still_holds(host: FamilyHost, exact) -> None:
    with pytest.raises(DecodeError, match="8000 Hz"):
        host.plan_resample(exact, source_rate_hz=7_999, source_samples=100, clip_index=0)


def test_the_key_is_closed_and_native_checkpoints_may_not_set_it(host: FamilyHost) -> None:
    exact = _exact_policy(host)
    assert exact.resampling == EXACT
    assert exact.source_of("resampling").key == "/audiogate_audio_limits/resampling_algorithm"
    for wrong in ("soxr_hq", "linear", 2):
        with pytest.raises(PolicyError, match="must be one of 'scipy_polyphase_integer'"):
            host.parse_policy(
                "phi4mm",
                CheckpointConfigs(
                    model={
                        "model_type": "phi4mm",
                        "audiogate_audio_limits": {"resampling_algorithm": wrong},
                    }
                ),
            )
    with pytest.raises(PolicyError, match="'soxr_hq'"):
        host.parse_policy(
            "phi4mm",
            CheckpointConfigs(
                model={
                    "model_type": "phi4_multimodal",
                    "audiogate_audio_limits": {"resampling_algorithm": EXACT},
                }
            ),
        )


def test_cancellation_is_polled_per_block() -> None:
    up, down = exact_ratio(44_100)
    x = _mono(44_100 * 4, 44_100)
    token = CancelAfter(Checkpoint.RESAMPLE, 3)
    with pytest.raises(PreprocessCancelled):
        resample_exact(x, up=up, down=down, clip_index=0, cancel=token)
    assert token.checks == 3  # the first poll is before any block


@pytest.mark.parametrize(("rate_hz", "samples"), [(44_100, 220_500), (48_000, 5), (8_000, 40_000)])
def test_plan_memory_bounds_the_run(host: FamilyHost, exact, rate_hz, samples) -> None:
    x = readonly(_mono(samples, rate_hz))
    plan = host.plan_resample(exact, source_rate_hz=rate_hz, source_samples=samples, clip_index=0)
    _, peak = traced_in_fresh_thread(
        lambda: host.resample(exact, plan, x, clip_index=0, cancel=NEVER)
    )
    assert peak <= plan.output_samples * 4 + plan.working_bytes
