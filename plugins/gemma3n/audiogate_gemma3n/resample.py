"""Gemma 3n's deterministic linear resampler to 16 kHz (mlxcel's ``"linear"`` policy).

For ``n`` source samples at ``fs`` Hz: ``len = ceil(n·16000/fs)``; output ``i`` reads
``pos = i·fs``, ``left = pos // 16000``, ``frac = (pos % 16000) / 16000`` and gives
``a + (b - a)·frac`` with ``a = x[min(left, n-1)]``, ``b = x[min(left+1, n-1)]``, all in
float32, integer index arithmetic in int64; the right edge clamps to the last sample. At
``fs = 16000`` the samples are copied unchanged. Golden (mlxcel's test): ``[1, -1, 0]`` at 8 kHz
gives ``[1, 0, -1, -0.5, 0, 0]``.

There is **no anti-aliasing filter**: downsampling from a high rate folds everything above
8 kHz back into the band. This is kept for parity with mlxcel (its
``preprocessing_wav.rs::resample``); ``Gemma3nAudioFeatureExtractor`` itself assumes
16 kHz input and does not resample at all.

Vectorised by the rate's period: with ``g = gcd(fs, 16000)``, ``P = 16000/g`` outputs
advance exactly ``Q = fs/g`` inputs, and output ``k·P + r`` reads
``left = k·Q + left[r]`` with the same ``frac[r]``. So the bulk is computed row by row of
``P`` outputs from strided views (no per-sample integer division), in blocks of about
:data:`OUTPUTS_PER_BLOCK` outputs with a cancellation check per block; the few outputs
near the right edge use the clamped formula directly. Both paths give identical values.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import DecodeError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan, readonly
from audiogate_gemma3n.geometry import SAMPLE_RATE_HZ

__all__ = [
    "OUTPUTS_PER_BLOCK",
    "linear_output_length",
    "linear_resample",
    "linear_working_bytes",
    "plan_resample",
    "resample",
]

#: Outputs per vectorised block: one cancellation check each, and the scratch bound.
OUTPUTS_PER_BLOCK: Final = 32_768
#: Up to this many outputs per period, each residue is one strided slice; longer periods
#: gather all residues of a block of periods at once.
_SLICED_PERIOD_MAX: Final = 32
_FLOAT32: Final = 4
_INT64: Final = 8


def linear_output_length(
    samples: int, *, in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ
) -> int:
    """``ceil(samples · out_rate_hz / in_rate_hz)``, in exact integer arithmetic."""
    if samples < 0 or in_rate_hz <= 0 or out_rate_hz <= 0:
        raise ValueError(
            f"samples must be >= 0 and rates > 0; got {samples}, {in_rate_hz}, {out_rate_hz}"
        )
    if in_rate_hz == out_rate_hz:
        return samples
    return -(-samples * out_rate_hz // in_rate_hz)


def _period(in_rate_hz: int, out_rate_hz: int) -> tuple[int, int]:
    g = math.gcd(in_rate_hz, out_rate_hz)
    return out_rate_hz // g, in_rate_hz // g


def linear_working_bytes(
    samples: int, *, in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ
) -> int:
    """Peak scratch of :func:`linear_resample` besides its input and output arrays."""
    if in_rate_hz == out_rate_hz:
        return 0
    outputs_per_period, _ = _period(in_rate_hz, out_rate_hz)
    # Building the per-residue tables peaks at residues, left index and remainder (int64)
    # plus the fraction (float32); then left and right index (int64) and the fraction stay,
    # with the larger of a bulk block (gathered a and b plus a difference) and an edge
    # block (int64 index, position, left, remainder; float32 fraction, a and b).
    building = outputs_per_period * (3 * _INT64 + _FLOAT32)
    tables = outputs_per_period * (2 * _INT64 + _FLOAT32)
    block = min(
        OUTPUTS_PER_BLOCK,
        max(linear_output_length(samples, in_rate_hz=in_rate_hz, out_rate_hz=out_rate_hz), 1),
    )
    bulk = 3 * _FLOAT32 * max(block, outputs_per_period)
    edge = (4 * _INT64 + 3 * _FLOAT32) * block
    return max(building, tables + max(bulk, edge))


def _edge(
    x: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
    first: int,
    in_rate_hz: int,
    out_rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> None:
    """The clamped formula for outputs ``first ..`` (the right edge and short clips)."""
    n = x.shape[0]
    rate32 = np.float32(out_rate_hz)
    for start in range(first, out.shape[0], OUTPUTS_PER_BLOCK):
        cancel.check(Checkpoint.RESAMPLE, clip_index)
        stop = min(start + OUTPUTS_PER_BLOCK, out.shape[0])
        pos = np.arange(start, stop, dtype=np.int64) * in_rate_hz
        left = pos // out_rate_hz
        frac = (pos % out_rate_hz).astype(np.float32) / rate32
        a = x[np.minimum(left, n - 1)]
        b = x[np.minimum(left + 1, n - 1)]
        dest = out[start:stop]
        np.subtract(b, a, out=dest)
        np.multiply(dest, frac, out=dest)
        np.add(dest, a, out=dest)


def linear_resample(
    samples: npt.NDArray[np.float32],
    *,
    in_rate_hz: int,
    out_rate_hz: int = SAMPLE_RATE_HZ,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> npt.NDArray[np.float32]:
    """Resample mono float32 ``[shape=(n,)]`` linearly from ``in_rate_hz`` to ``out_rate_hz``.

    :returns: read-only float32 ``[shape=(linear_output_length(n),)]``; a copy at equal rates.
    :raises ValueError: not a 1-D float32 array, or a rate is not positive.
    """
    if samples.ndim != 1 or samples.dtype != np.float32:
        raise ValueError(f"expected mono float32 samples, got {samples.dtype}{list(samples.shape)}")
    length = linear_output_length(samples.shape[0], in_rate_hz=in_rate_hz, out_rate_hz=out_rate_hz)
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if in_rate_hz == out_rate_hz:
        return readonly(samples.copy())
    x = np.ascontiguousarray(samples)
    out = np.empty(length, dtype=np.float32)
    n = x.shape[0]
    if n == 0:
        return readonly(out)
    period, advance = _period(in_rate_hz, out_rate_hz)
    # Per-residue tables, built without a temporary beyond what the plan counts.
    residues = np.arange(period, dtype=np.int64)
    residues *= in_rate_hz
    left0, remainders = np.divmod(residues, out_rate_hz)
    del residues
    frac0 = remainders.astype(np.float32)
    del remainders
    frac0 /= np.float32(out_rate_hz)
    left1 = left0 + 1
    # Whole periods whose last right neighbour ``k·Q + Q`` is still a real sample (no clamp).
    rows = min((n - 1) // advance, length // period)
    rows_per_block = max(1, OUTPUTS_PER_BLOCK // period)
    step = x.strides[0]
    for k0 in range(0, rows, rows_per_block):
        cancel.check(Checkpoint.RESAMPLE, clip_index)
        k1 = min(k0 + rows_per_block, rows)
        dest = out[k0 * period : k1 * period].reshape(k1 - k0, period)
        base = x[k0 * advance :]
        if period <= _SLICED_PERIOD_MAX:
            span = (k1 - k0 - 1) * advance + 1
            for r in range(period):
                lo = int(left0[r])
                a = base[lo : lo + span : advance]
                b = base[lo + 1 : lo + 1 + span : advance]
                column = dest[:, r]
                np.subtract(b, a, out=column)
                np.multiply(column, frac0[r], out=column)
                np.add(column, a, out=column)
        else:
            view = np.lib.stride_tricks.as_strided(
                base, shape=(k1 - k0, advance + 1), strides=(advance * step, step)
            )
            a = view[:, left0]
            b = view[:, left1]
            np.subtract(b, a, out=dest)
            np.multiply(dest, frac0, out=dest)
            np.add(dest, a, out=dest)
    _edge(x, out, rows * period, in_rate_hz, out_rate_hz, clip_index, cancel)
    return readonly(out)


def plan_resample(
    policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """Plan the identity (16 kHz sources) or the linear resampler.

    :returns: the plan, or ``None`` when the policy selects another resampler than
        ``"linear"`` (the core's default then plans it).
    :raises DecodeError: the rate is below the policy's minimum.
    :raises LimitError: the rate is above the policy's maximum.
    """
    if policy.resampling != "linear":
        return None
    if source_rate_hz < max(policy.min_source_rate_hz, 1):
        raise DecodeError(
            f"source sample rate {source_rate_hz} Hz is below the minimum of "
            f"{policy.min_source_rate_hz} Hz",
            clip_index=clip_index,
            code="sample_rate",
        )
    if source_rate_hz > policy.max_source_rate_hz:
        raise LimitError(
            "source sample rate",
            actual=source_rate_hz,
            maximum=policy.max_source_rate_hz,
            clip_index=clip_index,
        )
    target = policy.target_rate_hz
    identity = source_rate_hz == target
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=target,
        output_samples=linear_output_length(
            source_samples, in_rate_hz=source_rate_hz, out_rate_hz=target
        ),
        working_bytes=linear_working_bytes(
            source_samples, in_rate_hz=source_rate_hz, out_rate_hz=target
        ),
        algorithm="identity" if identity else "linear",
        detail={} if identity else {"interpolation": "linear", "anti_aliasing": False},
    )


def resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32] | None:
    """Run a ``"linear"`` or ``"identity"`` plan from :func:`plan_resample`.

    :returns: read-only float32 ``[shape=(plan.output_samples,)]``, or ``None`` for a plan
        of another algorithm (the core's default runs it).
    """
    if plan.algorithm not in {"linear", "identity"}:
        return None
    return linear_resample(
        samples,
        in_rate_hz=plan.source_rate_hz,
        out_rate_hz=plan.output_rate_hz,
        clip_index=clip_index,
        cancel=cancel,
    )
