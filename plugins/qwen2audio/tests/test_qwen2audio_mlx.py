"""Qwen2-Audio's MLX feature backend against its numpy path (the reference)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlx_helpers import (
    MLX_REASON,
    SIGNALS,
    assert_cancelled_at_block,
    assert_memory_within_plan,
    audio_part,
    extract_both,
    make_signal,
    max_abs_diff,
    with_backend,
)

from audiogate.api import AudioGate
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy
from audiogate.testing.cancel import CancelAt
from audiogate_qwen2audio.geometry import whisper_geometry
from audiogate_qwen2audio.logmel import BLOCK_FRAMES

mx = pytest.importorskip("mlx.core", reason=MLX_REASON)

MODELS = Path(__file__).resolve().parents[3] / "examples" / "models"
#: The Whisper features (log10, clamped to 8 below the window's maximum, scaled by 1/4)
#: keep the float32 FFT's rounding far below this everywhere: max |diff| measured 6.4e-5
#: on a full-scale 30 s sweep, about 1e-5 on noise and speech.
TOLERANCE = 1e-4
RATE = 16_000


@pytest.fixture
def policy(host: FamilyHost) -> AudioPolicy:
    return host.default_policy("qwen2audio")


def test_edge_lengths_are_what_they_claim() -> None:
    computed = [whisper_geometry(n).computed_frames for n in (321, 40_760, 40_761, 480_000)]
    assert computed == [4, 256, 257, 3000]


@pytest.mark.parametrize("samples", [321, 322, 40_760, 40_761, 16_000, 479_999, 480_000])
@pytest.mark.slow
def test_features_and_mask_match_the_numpy_path(host, policy, samples) -> None:
    computed = whisper_geometry(samples).computed_frames
    for name in SIGNALS:
        wave = make_signal(name, samples, RATE)
        plan, ref, got = extract_both(host, policy, wave, rate_hz=RATE)
        assert isinstance(got.features, mx.array)
        assert got.features.dtype == mx.float32
        assert tuple(got.features.shape) == plan.feature_shape == ref.features.shape
        assert (got.frames, got.tokens) == (ref.frames, ref.tokens)
        assert isinstance(got.mask, mx.array)
        assert got.mask.dtype == mx.bool_
        np.testing.assert_array_equal(np.asarray(got.mask), ref.mask)
        features = np.asarray(got.features)
        assert max_abs_diff(ref.features, features) <= TOLERANCE
        # The frames that see only zero padding hold one constant, as on the numpy path.
        if computed < 3000:
            assert (features[:, computed:] == features[0, -1]).all()


def test_collated_batch_matches_and_is_all_mlx(host, policy) -> None:
    clips = {"numpy": [], "mlx": []}
    for index, samples in enumerate((16_000, 321, 480_000, 40_761)):
        wave = make_signal("speech", samples, RATE, seed=index)
        _, ref, got = extract_both(host, policy, wave, rate_hz=RATE, clip_index=index)
        clips["numpy"].append(ref)
        clips["mlx"].append(got)
    ref = host.collate_features(policy, clips["numpy"])
    got = host.collate_features(with_backend(policy, "mlx"), clips["mlx"])
    assert got.tokens == ref.tokens
    assert set(got.inputs) == set(ref.inputs) == {"input_features", "feature_attention_mask"}
    assert all(isinstance(v, mx.array) for v in got.inputs.values())
    assert got.inputs["input_features"].dtype == mx.float32
    assert got.inputs["feature_attention_mask"].dtype == mx.int32
    np.testing.assert_array_equal(
        np.asarray(got.inputs["feature_attention_mask"]), ref.inputs["feature_attention_mask"]
    )
    assert max_abs_diff(ref.inputs["input_features"], got.inputs["input_features"]) <= TOLERANCE


@pytest.mark.parametrize("samples", [40_761, 480_000])
def test_feature_polls_are_those_of_the_numpy_path(host, policy, samples) -> None:
    wave = make_signal("clip", samples, RATE)
    plan = host.plan_features(policy, rate_hz=RATE, samples=samples, clip_index=5)
    polls = {}
    for backend in ("numpy", "mlx"):
        token = CancelAt()  # counts only
        host.extract_features(
            with_backend(policy, backend), plan, wave, rate_hz=RATE, clip_index=5, cancel=token
        )
        polls[backend] = token.polls
    assert polls["mlx"] == polls["numpy"]
    # Once before the loop, then after every block of computed frames.
    computed = whisper_geometry(samples).computed_frames
    assert len(polls["mlx"]) == 1 + -(-computed // BLOCK_FRAMES)


@pytest.mark.parametrize("nth", [1, 2, 6])
def test_cancelled_inside_the_block_loop(host, policy, nth) -> None:
    wave = make_signal("clip", 480_000, RATE)
    assert_cancelled_at_block(host, policy, wave, rate_hz=RATE, nth=nth, clip_index=0)


@pytest.mark.parametrize("samples", [16_000, 480_000])
def test_memory_stays_within_the_plan(host, policy, samples) -> None:
    assert_memory_within_plan(host, policy, make_signal("clip", samples, RATE), rate_hz=RATE)


def test_end_to_end_per_model_and_per_call() -> None:
    pytest.importorskip("transformers")
    messages = [
        {
            "role": "user",
            "content": [
                audio_part(1.0),
                audio_part(0.5, rate_hz=48_000, seed=1),
                {"type": "text", "text": "Compare"},
            ],
        }
    ]
    directory = MODELS / "qwen2-audio-7b-instruct"
    numpy_gate = AudioGate.from_model_dir(directory)
    mlx_gate = AudioGate.from_model_dir(directory, feature_backend="mlx")
    ref = numpy_gate.prepare(messages)
    for got in (mlx_gate.prepare(messages), numpy_gate.prepare(messages, feature_backend="mlx")):
        assert got.policy.feature_backend == "mlx"
        assert got.input_ids == ref.input_ids
        assert got.audio_spans == ref.audio_spans
        assert all(isinstance(v, mx.array) for v in got.model_inputs.values())
        assert all(isinstance(m, mx.array) for m in got.masks)
        np.testing.assert_array_equal(
            np.asarray(got.model_inputs["feature_attention_mask"]),
            ref.model_inputs["feature_attention_mask"],
        )
        assert (
            max_abs_diff(ref.model_inputs["input_features"], got.model_inputs["input_features"])
            <= TOLERANCE
        )
    assert numpy_gate.policy.feature_backend == "numpy"
