"""Gemma 3n log-mel features, as ``Gemma3nAudioFeatureExtractor`` computes them.

``[shape=(T, 128)]`` float32 per clip, ``T`` from :func:`~audiogate_gemma3n.framing.
feature_frames`: the clip is padded with zeros to a multiple of 128 samples, framed in 513
samples with a hop of 160 (no centring), pre-emphasised HTK style on the first 512
(``y[0] = 0.03·x[0]``, ``y[i] = x[i] - 0.97·x[i-1]``), windowed with a periodic Hann(512),
transformed with a 1024-point real FFT, reduced to its **magnitude**, projected on the HTK
mel bank (125–7600 Hz) and logged with a floor of 1e-5. Maximum error against the FE is
about 1e-6 (parity bound 5e-6).

Numerics, measured against transformers 5.24.0 / NumPy 2.4:

* Everything up to the FFT input is computed with the FE's own float32 operations, in its
  order, so the FFT input is bit-identical.
* NumPy >= 2 runs the FE's ``rfft`` of float32 frames in **double** precision and rounds
  the result to complex64 (checked: bit-equal to the float64 ``rfft`` cast to complex64).
  So the FFT here is NumPy's float64 ``rfft`` of the same values, zero-padded in place and
  written into a preallocated block, rounded to complex64 the same way: the FE's spectrum
  bit for bit, in less than half its time. A float32 FFT (SciPy's, ducc0's or torch's) is
  not enough: bins near a frame's rounding floor (high bands of tones and sweeps, single
  bins of noise) then differ by up to 1.07 in the log on a sweep, 1e-4 on noise. The FFT
  is most of the run time (see ``benchmarks/bench_gemma3n.py``).
* The magnitude is the FE's own complex64 ``abs`` (the complex64 rounding happens in
  numpy's cast buffer, reading the spectrum bins-by-frames). The mel projection is a sparse
  float32 product per block over the bank's non-zero bins 9..486 (946 weights; the FE's dense
  float64 matmul does 65,664 multiply-adds per frame) and the log is float32; the
  difference from the FE's float64 path stays below 1e-6 (one float32 ulp). Every frame
  is summed in the same order, so a frame's values do not depend on the clip around it.

Frames go through in blocks of :data:`FRAMES_PER_BLOCK`, with a cancellation check per
block. Clips of several blocks are spread over :data:`~audiogate.dsp.blocks.BLOCK_THREADS`
threads (:func:`audiogate.dsp.blocks.run_blocks`; the FFT is most of the work and every block
gives the same values on any thread). Each thread's block buffers (about 4.5 MiB) are
allocated once and reused, so a call allocates only its result and per-block products.

Padding side (``policy.options["padding_side"]``, right by default, as the FE): a clip on
its own is padded up to a multiple of 128 on that side. With left padding, the leading
zeros shift the frame grid and the first frame is masked whenever the clip is not a
multiple of 128 samples long, exactly as ``Gemma3nAudioFeatureExtractor(padding_side=
"left")`` does. See :mod:`audiogate_gemma3n.collate` for the batch view.

With ``policy.feature_backend == "mlx"`` the checks, frame layout and mask stay here and
:mod:`audiogate_gemma3n.mlx_frontend` computes the log-mel; features, tail and mask are
then ``mx.array`` (``docs/mlx.md``).
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any, Final, Literal

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.blocks import block_threads, run_blocks
from audiogate.dsp.mlx_budget import FFT_PASS_BYTES
from audiogate.errors import FeatureError, LimitError, NonFiniteSampleError, PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan, readonly
from audiogate_gemma3n.framing import (
    FEATURE_SIZE,
    FFT_LENGTH,
    FRAME_HOP_SAMPLES,
    FRAME_SAMPLES,
    MEL_FLOOR,
    MIN_SAMPLES,
    PREEMPHASIS,
    SAMPLE_RATE_HZ,
    SOFT_TOKENS_PER_CLIP,
    encoder_tokens,
    feature_frames,
    padded_samples,
    valid_frames_in_padded_batch,
)
from audiogate_gemma3n.melbank import mel_projection

__all__ = [
    "FRAMES_PER_BLOCK",
    "HANN_WINDOW",
    "Gemma3nClipFeatures",
    "PaddingSide",
    "extract_features",
    "floor_value",
    "log_mel_frames",
    "mlx_frontend_module",
    "padding_side",
    "plan_features",
]

PaddingSide = Literal["right", "left"]

#: Frames per FFT block: one cancellation check each, and the scratch bound. Below 256 so
#: that the per-block product (128 × 240 float32) stays under malloc's 128 KiB mmap threshold.
FRAMES_PER_BLOCK: Final = 240
_FLOAT32: Final = 4
_FLOAT64: Final = 8
_COMPLEX128: Final = 16
_BINS: Final = FFT_LENGTH // 2 + 1
#: Fixed scratch of one block and thread (see :class:`_BlockScratch`): the zero-padded
#: source span and its pre-emphasis, the float64 FFT input, the complex128 spectrum, the
#: magnitudes, and the sparse product's result (allocated per block by SciPy).
_BLOCK_SCRATCH_BYTES: Final = 2 * _FLOAT32 * (
    FRAME_HOP_SAMPLES * (FRAMES_PER_BLOCK - 1) + FRAME_SAMPLES
) + FRAMES_PER_BLOCK * (
    FFT_LENGTH * _FLOAT64 + _BINS * (_COMPLEX128 + _FLOAT32) + FEATURE_SIZE * _FLOAT32
)
#: NumPy's casting buffers (8,192 elements per operand) and small per-block temporaries.
_UFUNC_BUFFER_BYTES: Final = 256 << 10


def _blocks(frames: int) -> int:
    return -(-frames // FRAMES_PER_BLOCK)


def _working_bytes(frames: int, backend: str) -> int:
    # Block scratch and ufunc buffers per thread, and the mask's int64 index arithmetic.
    # The mlx backend runs its blocks on one thread, with the same arrays per block, and
    # its float-float FFT's temporaries.
    if backend == "mlx":
        threads, extra = 1, FFT_PASS_BYTES
    else:
        threads, extra = block_threads(_blocks(frames)), 0
    return threads * (_BLOCK_SCRATCH_BYTES + _UFUNC_BUFFER_BYTES) + frames * 2 * _FLOAT64 + extra


# The FE's float32 constants: NumPy 2 casts the Python floats to the array's float32.
_PREEMPHASIS32: Final = np.float32(PREEMPHASIS)
_FIRST_SCALE32: Final = np.float32(1.0 - PREEMPHASIS)
_MEL_FLOOR32: Final = np.float32(MEL_FLOOR)
#: The floor as a row: numpy (2.4) runs ``maximum`` with a scalar operand in a scalar
#: loop, 2-3x slower than with a broadcast row.
_MEL_FLOOR_ROW: Final = readonly(np.full(FRAMES_PER_BLOCK, _MEL_FLOOR32))
#: Periodic Hann(512) in float32, computed with the FE's float32 operations.
HANN_WINDOW: Final = readonly(
    (
        0.5 * (1 - np.cos(2 * np.pi * np.arange(FRAME_SAMPLES, dtype=np.float32) / FRAME_SAMPLES))
    ).astype(np.float32)
)


class _BlockScratch(threading.local):
    """One block's buffers, allocated once per thread and reused by every call.

    Reuse keeps each call from mapping (and page-faulting) megabytes of fresh memory,
    which in a process whose malloc has not yet raised its mmap threshold costs more than
    the FFT itself. The FFT input's upper half is zero once and never written.
    """

    def __init__(self) -> None:
        _, start, stop = mel_projection()
        span = FRAME_HOP_SAMPLES * (FRAMES_PER_BLOCK - 1) + FRAME_SAMPLES
        self.source = np.empty(span, dtype=np.float32)
        self.emphasis = np.empty(span - 1, dtype=np.float32)
        # Samples 1..511 of frame t are emphasis[160·t :]; built once (as_strided is slow).
        self.frames = np.lib.stride_tricks.as_strided(
            self.emphasis,
            shape=(FRAMES_PER_BLOCK, FRAME_SAMPLES - 1),
            strides=(FRAME_HOP_SAMPLES * _FLOAT32, _FLOAT32),
            writeable=False,
        )
        self.fft_input = np.zeros((FRAMES_PER_BLOCK, FFT_LENGTH), dtype=np.float64)
        self.spectrum = np.empty((FRAMES_PER_BLOCK, _BINS), dtype=np.complex128)
        self.magnitude = np.empty((stop - start) * FRAMES_PER_BLOCK, dtype=np.float32)


_SCRATCH: _BlockScratch | None = None
_SCRATCH_LOCK = threading.Lock()


def _scratch() -> _BlockScratch:
    global _SCRATCH
    if _SCRATCH is None:
        with _SCRATCH_LOCK:
            if _SCRATCH is None:
                _SCRATCH = _BlockScratch()
    return _SCRATCH


def mlx_frontend_module(*, clip_index: int | None = None) -> ModuleType:
    """:mod:`audiogate_gemma3n.mlx_frontend`, imported on first use of the mlx backend.

    :raises PluginError: MLX is not importable here (the message says how to install it).
    """
    try:
        from audiogate_gemma3n import mlx_frontend
    except ImportError as exc:
        where = "" if clip_index is None else f" (clip {clip_index})"
        raise PluginError(
            f"the mlx feature backend of family 'gemma3n' cannot be used{where}: {exc}; the "
            f"mlx backend needs `pip install 'audiogate[mlx]'` (on Linux: `pip install "
            f"'mlx[cpu]'`), or select feature_backend='numpy'"
        ) from exc
    return mlx_frontend


def floor_value() -> np.float32:
    """The feature value of an all-zero frame: ``float32(ln(1e-5))`` (the FE's float64 log)."""
    return np.float32(np.log(np.float64(MEL_FLOOR)))


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


def log_mel_frames(
    waveform: npt.NDArray[np.float32],
    *,
    lead_samples: int,
    first_frame: int,
    stop_frame: int,
    out: npt.NDArray[np.float32],
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> None:
    """Compute frames ``first_frame:stop_frame`` of a zero-padded clip into ``out``.

    The padded clip is ``lead_samples`` zeros, then ``waveform``, then zeros; frame ``t``
    starts at its sample ``160·t``. Right padding is ``lead_samples = 0``; left padding in
    a batch of padded length ``N`` is ``N - len(waveform)``.

    :param out: float32 ``[shape=(stop_frame - first_frame, 128)]``, written in place.
    :param cancel: polled at the ``Feature`` checkpoint before every block.
    """
    count = stop_frame - first_frame
    if count < 0 or out.shape != (count, FEATURE_SIZE) or out.dtype != np.float32:
        raise PluginError(
            f"gemma3n frames {first_frame}:{stop_frame} cannot go into {out.dtype}{list(out.shape)}"
        )
    if count == 0:
        return

    def block(index: int) -> None:
        t0 = first_frame + index * FRAMES_PER_BLOCK
        row = t0 - first_frame
        rows = min(FRAMES_PER_BLOCK, stop_frame - t0)
        _log_mel_block(
            waveform, start=FRAME_HOP_SAMPLES * t0 - lead_samples, out=out[row : row + rows]
        )

    run_blocks(
        _blocks(count), block, cancel=cancel, checkpoint=Checkpoint.FEATURE, clip_index=clip_index
    )


def _log_mel_block(
    waveform: npt.NDArray[np.float32], *, start: int, out: npt.NDArray[np.float32]
) -> None:
    """Log-mel of ``len(out)`` frames into ``out``; the first starts at sample ``start``
    of the waveform (negative: inside the leading zeros)."""
    projection, bin_start, bin_stop = mel_projection()
    scratch = _scratch()
    rows = out.shape[0]
    n = waveform.shape[0]
    span = FRAME_HOP_SAMPLES * (rows - 1) + FRAME_SAMPLES
    lo, hi = max(start, 0), min(start + span, n)
    if lo == start and hi == start + span:
        src = waveform[start : start + span]
    else:
        # The padded clip's samples [start, start + span), zeros outside the waveform.
        src = scratch.source[:span]
        if lo >= hi:
            src.fill(0.0)
        else:
            src[: lo - start].fill(0.0)
            src[lo - start : hi - start] = waveform[lo:hi]
            src[hi - start :].fill(0.0)
    # Pre-emphasis once over the span: samples 1..511 of every frame are
    # ``x[i] - 0.97·x[i-1]`` whatever the frame, in the FE's float32 operation order.
    emph = scratch.emphasis[: span - 1]
    np.multiply(src[:-1], _PREEMPHASIS32, out=emph)
    np.subtract(src[1:], emph, out=emph)
    frames = scratch.fft_input[:rows]
    # Windowing rounds in float32, as in the FE; the float64 copy is exact.
    np.multiply(
        scratch.frames[:rows], HANN_WINDOW[1:], out=frames[:, 1:FRAME_SAMPLES], dtype=np.float32
    )
    # HTK flavour: the first sample is scaled by 0.03, then windowed by Hann[0] = 0.
    firsts = src[: FRAME_HOP_SAMPLES * (rows - 1) + 1 : FRAME_HOP_SAMPLES]
    np.multiply(firsts * _FIRST_SCALE32, HANN_WINDOW[0], out=frames[:, 0], dtype=np.float32)
    # NumPy >= 2 computes the FE's float32 ``rfft`` in double precision and rounds it
    # to complex64: the float64 ``rfft`` of the same values, rounded here, is the FE's
    # spectrum bit for bit, and the magnitude is then the FE's own complex64 ``abs``.
    spectrum = scratch.spectrum[:rows]
    np.fft.rfft(frames, axis=-1, out=spectrum)
    # Bins by frames, contiguous, the layout the sparse product reads; the complex64
    # rounding ("F->f") happens in numpy's cast buffer as it reads the spectrum transposed.
    magnitude = scratch.magnitude[: (bin_stop - bin_start) * rows].reshape(-1, rows)
    np.absolute(
        spectrum[:, bin_start:bin_stop].T, out=magnitude, signature="F->f", casting="same_kind"
    )
    mel = projection @ magnitude
    np.maximum(mel, _MEL_FLOOR_ROW[:rows], out=mel)
    # In place, then transposed: numpy's SIMD log needs a contiguous output (written
    # through ``out.T`` it takes the scalar loop, 5x slower; the values are the same).
    np.log(mel, out=mel)
    np.copyto(out, mel.T)


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
        features, tail, mask = mlx_frontend_module(clip_index=clip_index).clip_arrays(
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
