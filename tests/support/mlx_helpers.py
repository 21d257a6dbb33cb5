"""Shared helpers of the MLX backend tests: parity signals, the comparison rule, runners."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import PreprocessCancelled
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan
from audiogate.testing.audio import noise, tone, wav_bytes
from audiogate.testing.cancel import CancelAt
from audiogate.testing.memory import traced_in_fresh_thread

#: ``pytest.importorskip`` reason shared by every MLX test module.
MLX_REASON = "MLX is not importable here (pip install 'mlx[cpu]' on Linux)"

#: Broadband signals (noise, speech-like) and narrowband ones (a pure tone, a sweep),
#: plus digital silence.
SIGNALS = ("clip", "speech", "tone", "sweep", "silence")


def make_signal(name: str, samples: int, rate_hz: int, *, seed: int = 0) -> np.ndarray:
    """A read-only float32 test signal ``[shape=(samples,)]`` in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    if name == "clip":  # what audiogate.testing.audio.encoded_clip encodes
        x = noise(samples=samples, amplitude=0.2, seed=seed)
        x = x + tone(samples=samples, rate_hz=rate_hz, amplitude=0.2)
    elif name == "speech":  # a 150 Hz harmonic series, syllable-rate envelope, noise floor
        envelope = 0.5 * (1 + np.sin(2 * np.pi * 3 * t))
        voiced = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 20))
        x = 0.1 * envelope * voiced + 0.01 * rng.standard_normal(samples)
    elif name == "tone":
        x = 0.5 * np.sin(2 * np.pi * 440 * t)
    elif name == "sweep":  # 50 Hz to 0.45·rate over the clip
        duration = max(samples / rate_hz, 1e-3)
        x = 0.5 * np.sin(2 * np.pi * (50 * t + (0.45 * rate_hz - 50) * t**2 / (2 * duration)))
    elif name == "silence":
        x = np.zeros(samples)
    else:
        raise ValueError(name)
    out = np.clip(x, -1.0, 1.0).astype(np.float32)
    out.flags.writeable = False
    return out


def with_backend(policy: AudioPolicy, backend: str) -> AudioPolicy:
    """``policy`` with ``feature_backend`` set."""
    return attrs.evolve(policy, feature_backend=backend)


def extract_both(
    host: FamilyHost,
    policy: AudioPolicy,
    waveform: np.ndarray,
    *,
    rate_hz: int,
    clip_index: int = 0,
    cancel: Callable[[], CancelToken] = lambda: NEVER,
) -> tuple[FeaturePlan, ClipFeatures, ClipFeatures]:
    """``(plan, numpy features, mlx features)`` of one clip, through the host's checks."""
    plan = host.plan_features(
        policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
    )
    out = []
    for backend in ("numpy", "mlx"):
        out.append(
            host.extract_features(
                with_backend(policy, backend),
                plan,
                waveform,
                rate_hz=rate_hz,
                clip_index=clip_index,
                cancel=cancel(),
            )
        )
    return plan, out[0], out[1]


def assert_cancelled_at_block(
    host: FamilyHost,
    policy: AudioPolicy,
    wave: np.ndarray,
    *,
    rate_hz: int,
    nth: int,
    clip_index: int,
) -> None:
    """The mlx backend stops at the ``nth`` ``Feature`` poll with the clip's index."""
    plan = host.plan_features(
        policy, rate_hz=rate_hz, samples=int(wave.shape[0]), clip_index=clip_index
    )
    token = CancelAt(Checkpoint.FEATURE, nth=nth)
    with pytest.raises(PreprocessCancelled) as caught:
        host.extract_features(
            with_backend(policy, "mlx"),
            plan,
            wave,
            rate_hz=rate_hz,
            clip_index=clip_index,
            cancel=token,
        )
    assert (caught.value.checkpoint, caught.value.clip_index) == ("Feature", clip_index)
    assert token.count(Checkpoint.FEATURE) == nth


def assert_memory_within_plan(
    host: FamilyHost, policy: AudioPolicy, wave: np.ndarray, *, rate_hz: int
) -> None:
    """The mlx backend's host and MLX memory stay within the plan's bytes."""
    policy = with_backend(policy, "mlx")
    plan = host.plan_features(policy, rate_hz=rate_hz, samples=int(wave.shape[0]), clip_index=0)

    def run() -> ClipFeatures:
        return host.extract_features(
            policy, plan, wave, rate_hz=rate_hz, clip_index=0, cancel=NEVER
        )

    run()  # the process-wide numpy constants (banks) are built once, for both backends
    # Host memory per call in a new worker thread (numpy-side scratch, Python objects):
    # what tracemalloc sees. MLX's own buffers are invisible to it.
    _, traced = traced_in_fresh_thread(run)
    assert traced <= plan.working_bytes
    # MLX's own allocations: the waveform copy, one block's arrays and FFT pass, the result.
    assert mlx_peak_bytes(run) <= wave.nbytes + plan.feature_bytes + plan.working_bytes


def max_abs_diff(reference: Any, got: Any) -> float:
    """``max |got - reference|`` over all values, in float64."""
    return float(
        np.abs(np.asarray(got, dtype=np.float64) - np.asarray(reference, dtype=np.float64)).max()
    )


def mlx_peak_bytes(run: Callable[[], Any]) -> int:
    """Peak bytes MLX's allocator held during ``run()`` beyond what it held before."""
    import mlx.core as mx

    run()  # warm: the per-thread constants (bank, window) are built once and kept
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    result = run()
    peak = mx.get_peak_memory() - before
    del result
    return peak


def audio_part(seconds: float, *, rate_hz: int = 16_000, seed: int = 0) -> dict[str, Any]:
    """An ``input_audio`` chat part holding a PCM16 WAV of the ``clip`` signal."""
    samples = make_signal("clip", round(seconds * rate_hz), rate_hz, seed=seed)
    data = base64.b64encode(wav_bytes(samples, rate_hz=rate_hz)).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
