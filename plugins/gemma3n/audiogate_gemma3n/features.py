"""The Gemma 3n features stage: one clip's plan, then its USM log-mel as planned.

Frames and the 188 soft tokens come from :mod:`audiogate_gemma3n.geometry`, the log-mel
from :func:`audiogate_gemma3n.logmel.log_mel_frames`. Clips of at most 512 samples are
**refused** (the reference gives them zero frames, which leaves the audio tower nothing
to encode).

Padding side (``policy.options["padding_side"]``, right by default, as the FE): a clip on
its own is padded up to a multiple of 128 on that side. With left padding, the leading
zeros shift the frame grid and the first frame is masked whenever the clip is not a
multiple of 128 samples long, exactly as ``Gemma3nAudioFeatureExtractor(padding_side=
"left")`` does. See :mod:`audiogate_gemma3n.collate` for the batch view.

With ``policy.feature_backend == "mlx"`` the checks, frame layout and mask stay here and
:mod:`audiogate_gemma3n.mlx_logmel` computes the log-mel; features, tail and mask are
then ``mx.array`` (``docs/mlx.md``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.blocks import block_threads
from audiogate.dsp.mlx_budget import FFT_PASS_BYTES
from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.errors import FeatureError, LimitError, NonFiniteSampleError, PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan, readonly
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FRAME_HOP_SAMPLES,
    MIN_SAMPLES,
    SAMPLE_RATE_HZ,
    SOFT_TOKENS_PER_CLIP,
    encoder_tokens,
    feature_frames,
    padded_samples,
    valid_frames_in_padded_batch,
)
from audiogate_gemma3n.logmel import (
    SCRATCH_BYTES,
    UFUNC_BUFFER_BYTES,
    block_count,
    log_mel_frames,
)

__all__ = [
    "MLX_MODULE",
    "Gemma3nClipFeatures",
    "PaddingSide",
    "extract_features",
    "padding_side",
    "plan_features",
]

PaddingSide = Literal["right", "left"]

#: The MLX kernel, imported only for ``feature_backend == "mlx"``.
MLX_MODULE: Final = "audiogate_gemma3n.mlx_logmel"
_FLOAT32: Final = 4
_FLOAT64: Final = 8


def _working_bytes(frames: int, backend: str) -> int:
    # Block scratch and ufunc buffers per thread, and the mask's int64 index arithmetic.
    # The mlx backend runs its blocks on one thread, with the same arrays per block, and
    # its float-float FFT's temporaries.
    if backend == "mlx":
        threads, extra = 1, FFT_PASS_BYTES
    else:
        threads, extra = block_threads(block_count(frames)), 0
    return threads * (SCRATCH_BYTES + UFUNC_BUFFER_BYTES) + frames * 2 * _FLOAT64 + extra


@attrs.frozen(kw_only=True)
class Gemma3nClipFeatures(ClipFeatures):
    """One clip's features plus what the batch view needs to match the FE's batch.

    :param samples: normalized samples of the clip.
    :param padding_side: the side the features were padded on.
    :param tail: right padding only: the frames ``T .. ceil(samples/160) - 1`` that the FE
        computes, and marks valid, when this clip is padded inside a longer batch
        ``[shape=(k, 128)]``, ``2 ≤ k ≤ 4``; empty for left padding.
    :param waveform: left padding only: the read-only normalized waveform (a reference,
        not a copy), because in a longer batch the leading zeros shift the frame grid and
        the frames must be recomputed; ``None`` for right padding.
    """

    samples: int
    padding_side: PaddingSide
    tail: npt.NDArray[np.float32]
    waveform: npt.NDArray[np.float32] | None = None


def padding_side(policy: AudioPolicy) -> PaddingSide:
    """The batch padding side the policy selects (``"right"`` unless configured)."""
    side = policy.options.get("padding_side", "right")
    if side == "right":
        return "right"
    if side == "left":
        return "left"
    raise PluginError(
        f"gemma3n policy option padding_side is {side!r}; allowed values: 'right', 'left'"
    )


def _tail_frames(samples: int, side: PaddingSide) -> int:
    if side == "left":
        return 0
    return valid_frames_in_padded_batch(samples) - feature_frames(samples)


def plan_features(
    policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan:
    """Plan one clip: frames, the 188 soft tokens, shapes and bytes.

    :param samples: normalized samples (in truncate mode, the count after the cut).
    :returns: ``frames = T``, ``tokens = soft_tokens_per_clip``, ``feature_shape = (T, 128)``,
        ``feature_bytes`` = features + frame mask + right-padding tail frames,
        ``detail = {"encoder_tokens": ceil(ceil(ceil(T/2)/2)/4)}``.
    :raises FeatureError: the rate is not 16 kHz; the clip is shorter than 513 samples (it
        would give zero frames); the audio tower would emit more tokens than the prompt
        holds.
    :raises LimitError: more samples than the policy's per-clip cap.
    """
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Gemma 3n frontend takes {SAMPLE_RATE_HZ} Hz input, got {rate_hz} Hz",
            clip_index=clip_index,
        )
    if samples < MIN_SAMPLES:
        raise FeatureError(
            f"{samples} samples at {SAMPLE_RATE_HZ} Hz give 0 feature frames; Gemma 3n needs "
            f"at least {MIN_SAMPLES} samples ({MIN_SAMPLES / SAMPLE_RATE_HZ * 1000:.2f} ms)",
            clip_index=clip_index,
        )
    if samples > policy.max_samples_per_clip:
        raise LimitError(
            "normalized samples per clip",
            actual=samples,
            maximum=policy.max_samples_per_clip,
            clip_index=clip_index,
        )
    frames = feature_frames(samples)
    tokens = policy.soft_tokens_per_clip or SOFT_TOKENS_PER_CLIP
    real_tokens = encoder_tokens(frames)
    if real_tokens > tokens:
        raise FeatureError(
            f"{frames} frames make the audio tower emit {real_tokens} tokens, more than the "
            f"{tokens} soft tokens a clip has in the prompt",
            clip_index=clip_index,
        )
    tail = _tail_frames(samples, padding_side(policy))
    return FeaturePlan(
        frames=frames,
        tokens=tokens,
        feature_shape=(frames, FEATURE_SIZE),
        feature_bytes=(frames + tail) * FEATURE_SIZE * _FLOAT32 + frames,
        working_bytes=_working_bytes(frames + tail, policy.feature_backend),
        detail={"encoder_tokens": real_tokens},
    )


def _check_waveform(waveform: npt.NDArray[np.float32], clip_index: int) -> None:
    if waveform.ndim != 1 or waveform.dtype != np.float32:
        raise PluginError(
            f"gemma3n features take a mono float32 waveform, got {waveform.dtype}"
            f"{list(waveform.shape)} for clip {clip_index}"
        )
    if waveform.size == 0:
        raise FeatureError("the waveform is empty", clip_index=clip_index)
    low, high = waveform.min(), waveform.max()
    # NaN fails both comparisons, so one pass of min/max catches it with ±inf.
    if low >= -1.0 and high <= 1.0:
        return
    finite = np.isfinite(waveform)
    if not finite.all():
        raise NonFiniteSampleError(clip_index=clip_index, frame=int(np.argmin(finite)))
    bad = int(np.argmax(np.abs(waveform) > 1.0))
    raise FeatureError(
        f"sample {bad} is {float(waveform[bad])!r}, outside the normalized range [-1, 1]",
        clip_index=clip_index,
    )


def extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    *,
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken = NEVER,
) -> Gemma3nClipFeatures:
    """Extract one clip's features exactly as planned.

    :param waveform: read-only mono float32 ``[shape=(samples,)]`` at 16 kHz, in [-1, 1].
    :returns: read-only features ``[shape=plan.feature_shape]`` and the frame mask, plus
        the batch-view extras of :class:`Gemma3nClipFeatures`.
    :raises FeatureError: wrong rate, or a sample outside [-1, 1].
    :raises NonFiniteSampleError: a NaN or infinite sample.
    :raises PluginError: the waveform does not match the plan.
    """
    if rate_hz != SAMPLE_RATE_HZ:
        raise FeatureError(
            f"the Gemma 3n frontend takes {SAMPLE_RATE_HZ} Hz input, got {rate_hz} Hz",
            clip_index=clip_index,
        )
    _check_waveform(waveform, clip_index)
    samples = int(waveform.shape[0])
    frames = feature_frames(samples)
    if frames != plan.frames or plan.feature_shape != (frames, FEATURE_SIZE):
        raise PluginError(
            f"gemma3n clip {clip_index} has {samples} samples ({frames} frames), but the "
            f"plan is for {plan.frames} frames of shape {plan.feature_shape}"
        )
    if frames == 0:
        raise FeatureError(
            f"{samples} samples give 0 feature frames; at least {MIN_SAMPLES} are needed",
            clip_index=clip_index,
        )
    cancel.check(Checkpoint.FEATURE, clip_index)
    side = padding_side(policy)
    lead = padded_samples(samples) - samples if side == "left" else 0
    # Right padding: the tail frames continue the same frame grid, so one pass computes
    # the clip's frames and its tail together.
    tail_count = _tail_frames(samples, side)
    # The FE's mask: a frame is valid iff its first sample is real audio.
    mask: Any = readonly(np.arange(frames) * FRAME_HOP_SAMPLES >= lead)
    features: Any
    tail: Any
    if policy.feature_backend == "mlx":
        # Same checks, layout and mask; the log-mel is computed (and returned) with MLX.
        features, tail, mask = load_mlx_module(
            MLX_MODULE, family="gemma3n", clip_index=clip_index
        ).clip_arrays(
            waveform,
            lead_samples=lead,
            frames=frames,
            tail_frames=tail_count,
            mask=mask,
            clip_index=clip_index,
            cancel=cancel,
        )
    else:
        computed = np.empty((frames + tail_count, FEATURE_SIZE), dtype=np.float32)
        log_mel_frames(
            waveform,
            lead_samples=lead,
            first_frame=0,
            stop_frame=frames + tail_count,
            out=computed,
            clip_index=clip_index,
            cancel=cancel,
        )
        readonly(computed)
        features, tail = computed[:frames], computed[frames:]
    if side == "left" and not waveform.flags.writeable:
        kept: npt.NDArray[np.float32] | None = waveform
    elif side == "left":
        kept = readonly(waveform.copy())
    else:
        kept = None
    return Gemma3nClipFeatures(
        features=features,
        mask=mask,
        frames=frames,
        tokens=plan.tokens,
        samples=samples,
        padding_side=side,
        tail=tail,
        waveform=kept,
    )
