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

``resampling_algorithm = "torchaudio_sinc"`` selects the band-limited path instead: what
vLLM runs for Gemma 3n (``torchaudio.transforms.Resample(fs, 16000)`` with its defaults,
a Hann-windowed sinc of 6 zero crossings at a 0.99 roll-off; vLLM 0.32,
``vllm/multimodal/audio.py``). :func:`sinc_kernel` builds that kernel as torchaudio
does (float64, then float32); :func:`sinc_resample` applies it phase by phase, each
phase's taps against strided views of the zero-padded input, in blocks with one
cancellation check each. Only each phase's band of nonzero taps is kept (the rest of
torchaudio's row is exactly zero in float32), so a rate whose ratio to 16 kHz does not
reduce (44.101 kHz) costs 16,000 short rows, not a 16,000 × 44,135 matrix.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Final

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import DecodeError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan, readonly
from audiogate_gemma3n.geometry import SAMPLE_RATE_HZ

__all__ = [
    "LINEAR",
    "OUTPUTS_PER_BLOCK",
    "RESAMPLING_ALGORITHMS",
    "SINC",
    "SINC_ROLLOFF",
    "SINC_ZERO_CROSSINGS",
    "linear_output_length",
    "linear_resample",
    "linear_working_bytes",
    "plan_resample",
    "resample",
    "sinc_kernel",
    "sinc_output_length",
    "sinc_resample",
    "sinc_working_bytes",
]

#: The linear interpolation without anti-aliasing (mlxcel's policy): the default.
LINEAR: Final = "linear"
#: torchaudio's band-limited sinc resampler, as vLLM applies it to Gemma 3n.
SINC: Final = "torchaudio_sinc"
#: The values of the ``resampling_algorithm`` key, the default first.
RESAMPLING_ALGORITHMS: Final = (LINEAR, SINC)
#: ``torchaudio.transforms.Resample``'s ``lowpass_filter_width``.
SINC_ZERO_CROSSINGS: Final = 6
#: ``torchaudio.transforms.Resample``'s ``rolloff``.
SINC_ROLLOFF: Final = 0.99

#: Outputs per vectorised block: one cancellation check each, and the scratch bound.
OUTPUTS_PER_BLOCK: Final = 32_768
#: Up to this many outputs per period, each residue is one strided slice; longer periods
#: gather all residues of a block of periods at once.
_SLICED_PERIOD_MAX: Final = 32
_FLOAT32: Final = 4
_INT64: Final = 8
#: Outputs of one phase per product of :func:`sinc_resample` (its block scratch).
_SINC_ROWS_PER_BLOCK: Final = 8_192
#: numpy's own small allocations around the products (array headers, iterator buffers).
_SINC_LIBRARY_BYTES: Final = 64 * 1024


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


@attrs.frozen
class SincKernel:
    """torchaudio's sinc kernel for one rate pair, as bands of nonzero taps.

    :param in_step: ``fs / gcd``: input samples per period of ``out_step`` outputs.
    :param out_step: ``16000 / gcd``: the phases.
    :param width: zero samples torchaudio pads in front of the input.
    :param offsets: per phase, its band's first tap (into the padded input of a period)
        ``[shape=(out_step,)]``.
    :param taps: per phase, the band's taps, float32 ``[shape=(out_step, band)]``.
    """

    in_step: int
    out_step: int
    width: int
    offsets: npt.NDArray[np.int64] = attrs.field(eq=False)
    taps: npt.NDArray[np.float32] = attrs.field(eq=False)


def _reduced(in_rate_hz: int, out_rate_hz: int) -> tuple[int, int, float, int]:
    g = math.gcd(in_rate_hz, out_rate_hz)
    in_step, out_step = in_rate_hz // g, out_rate_hz // g
    base = min(in_step, out_step) * SINC_ROLLOFF
    width = math.ceil(SINC_ZERO_CROSSINGS * in_step / base)
    return in_step, out_step, base, width


def _band(in_step: int, out_step: int, base: float) -> int:
    # The taps of a phase with |t| < 6 lie within 12·in_step/base of each other.
    return math.floor(2 * SINC_ZERO_CROSSINGS * in_step / base) + 2


# Bounded: a request chooses its source rate, so a cache of every rate seen could grow
# to thousands of kernels of up to 16,000 bands.
@lru_cache(maxsize=16)
def sinc_kernel(in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ) -> SincKernel:
    """torchaudio's ``sinc_interp_hann`` kernel from ``in_rate_hz`` to ``out_rate_hz``.

    Row ``p`` of torchaudio's kernel holds, for tap ``i`` of ``2·width + in_step``,
    ``sinc(π·t)·cos²(π·t/12)·base/in_step`` at ``t = (i - width)/in_step - p/out_step``
    scaled by ``base = 0.99·min(in_step, out_step)`` and clamped to ±6, computed in
    float64 (``p/out_step`` in float32, as torch divides an integer range) and stored as
    float32. Outside ``|t| < 6`` a tap is below float32's range, so only each row's band
    is kept.
    """
    if in_rate_hz <= 0 or out_rate_hz <= 0:
        raise ValueError(f"rates must be > 0, got {in_rate_hz} and {out_rate_hz}")
    in_step, out_step, base, width = _reduced(in_rate_hz, out_rate_hz)
    band = _band(in_step, out_step, base)
    phase = -(np.arange(out_step, dtype=np.float32) / np.float32(out_step)).astype(np.float64)
    centre = width + (-phase) * in_step  # where t = 0, in taps
    reach = SINC_ZERO_CROSSINGS * in_step / base
    offsets = np.clip(np.floor(centre - reach).astype(np.int64), 0, None)
    taps = offsets[:, None] + np.arange(band, dtype=np.int64)
    t = (phase[:, None] + (taps - width) / in_step) * base
    np.clip(t, -SINC_ZERO_CROSSINGS, SINC_ZERO_CROSSINGS, out=t)
    window = np.cos(t * math.pi / SINC_ZERO_CROSSINGS / 2) ** 2
    t *= math.pi
    with np.errstate(divide="ignore", invalid="ignore"):
        kernel = np.where(t == 0, 1.0, np.sin(t) / t)
    kernel *= window * (base / in_step)
    # Taps past torchaudio's row (2·width + in_step) do not exist there.
    kernel[taps >= 2 * width + in_step] = 0.0
    return SincKernel(
        in_step=in_step,
        out_step=out_step,
        width=width,
        offsets=readonly(offsets),
        taps=readonly(kernel.astype(np.float32)),
    )


def sinc_output_length(samples: int, *, in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ) -> int:
    """torchaudio's output length: ``ceil(out_step·samples/in_step)``, the quotient
    rounded to float32 first (``torch.as_tensor`` of a Python float), so a quotient just
    above an integer may give that integer."""
    if samples < 0 or in_rate_hz <= 0 or out_rate_hz <= 0:
        raise ValueError(
            f"samples must be >= 0 and rates > 0; got {samples}, {in_rate_hz}, {out_rate_hz}"
        )
    if in_rate_hz == out_rate_hz:
        return samples
    in_step, out_step, _, _ = _reduced(in_rate_hz, out_rate_hz)
    return math.ceil(float(np.float32(out_step * samples / in_step)))


def _sinc_padded_samples(samples: int, kernel: SincKernel, outputs: int) -> int:
    blocks = -(-outputs // kernel.out_step)
    last = int(kernel.offsets.max(initial=0)) + kernel.taps.shape[1]
    return int(max(samples + kernel.width, (blocks - 1) * kernel.in_step + last))


def sinc_working_bytes(samples: int, *, in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ) -> int:
    """Peak scratch of :func:`sinc_resample` besides its input and output: the padded
    input, the kernel's bands (built in float64), and one block's gathered taps and sums."""
    if in_rate_hz == out_rate_hz:
        return 0
    in_step, out_step, base, _ = _reduced(in_rate_hz, out_rate_hz)
    band = _band(in_step, out_step, base)
    outputs = sinc_output_length(samples, in_rate_hz=in_rate_hz, out_rate_hz=out_rate_hz)
    blocks = -(-outputs // out_step)
    padded = samples + 2 * band * (in_step + 1) + blocks * in_step + 2 * in_step
    kernel = out_step * band * (5 * _INT64 + _FLOAT32)  # t, window, sin, taps; float32 copy
    rows = min(max(blocks, 1), _SINC_ROWS_PER_BLOCK)
    block = rows * band * _FLOAT32 + rows * _FLOAT32
    return padded * _FLOAT32 + kernel + block + _SINC_LIBRARY_BYTES


def sinc_resample(
    samples: npt.NDArray[np.float32],
    *,
    in_rate_hz: int,
    out_rate_hz: int = SAMPLE_RATE_HZ,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> npt.NDArray[np.float32]:
    """Resample mono float32 ``[shape=(n,)]`` as ``torchaudio.transforms.Resample`` does.

    Output ``k·out_step + p`` is phase ``p``'s taps against the input zero-padded by
    ``width`` in front, from sample ``k·in_step + offsets[p]``; sums in float32.

    :returns: read-only float32 ``[shape=(sinc_output_length(n),)]``; a copy at equal rates.
    :raises ValueError: not a 1-D float32 array, or a rate is not positive.
    """
    if samples.ndim != 1 or samples.dtype != np.float32:
        raise ValueError(f"expected mono float32 samples, got {samples.dtype}{list(samples.shape)}")
    length = sinc_output_length(samples.shape[0], in_rate_hz=in_rate_hz, out_rate_hz=out_rate_hz)
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if in_rate_hz == out_rate_hz:
        return readonly(samples.copy())
    kernel = sinc_kernel(in_rate_hz, out_rate_hz)
    out = np.empty(length, dtype=np.float32)
    if length == 0:
        return readonly(out)
    padded = np.zeros(_sinc_padded_samples(samples.shape[0], kernel, length), dtype=np.float32)
    padded[kernel.width : kernel.width + samples.shape[0]] = samples
    band = kernel.taps.shape[1]
    step = padded.strides[0]
    checked = 0
    for phase in range(kernel.out_step):
        count = (length - phase + kernel.out_step - 1) // kernel.out_step
        if count <= 0:
            break
        start = int(kernel.offsets[phase])
        taps = kernel.taps[phase]
        for first in range(0, count, _SINC_ROWS_PER_BLOCK):
            checked += min(_SINC_ROWS_PER_BLOCK, count - first)
            if checked >= OUTPUTS_PER_BLOCK:
                cancel.check(Checkpoint.RESAMPLE, clip_index)
                checked = 0
            rows = min(_SINC_ROWS_PER_BLOCK, count - first)
            view = np.lib.stride_tricks.as_strided(
                padded[start + first * kernel.in_step :],
                shape=(rows, band),
                strides=(kernel.in_step * step, step),
                writeable=False,
            )
            out[phase + first * kernel.out_step :: kernel.out_step][:rows] = view @ taps
    return readonly(out)


def plan_resample(
    policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """Plan the identity (16 kHz sources), the linear resampler or torchaudio's sinc,
    as ``policy.resampling`` selects (:data:`RESAMPLING_ALGORITHMS`).

    :returns: the plan, or ``None`` when the policy selects another resampler (the core's
        default then plans it).
    :raises DecodeError: the rate is below the policy's minimum.
    :raises LimitError: the rate is above the policy's maximum.
    """
    if policy.resampling not in RESAMPLING_ALGORITHMS:
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
    rates = {"in_rate_hz": source_rate_hz, "out_rate_hz": target}
    if source_rate_hz == target:
        return ResamplePlan(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            output_rate_hz=target,
            output_samples=source_samples,
            working_bytes=0,
            algorithm="identity",
            detail={},
        )
    if policy.resampling == SINC:
        return ResamplePlan(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            output_rate_hz=target,
            output_samples=sinc_output_length(source_samples, **rates),
            working_bytes=sinc_working_bytes(source_samples, **rates),
            algorithm=SINC,
            detail={
                "interpolation": "sinc_interp_hann",
                "anti_aliasing": True,
                "zero_crossings": SINC_ZERO_CROSSINGS,
                "rolloff": SINC_ROLLOFF,
            },
        )
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=target,
        output_samples=linear_output_length(source_samples, **rates),
        working_bytes=linear_working_bytes(source_samples, **rates),
        algorithm=LINEAR,
        detail={"interpolation": "linear", "anti_aliasing": False},
    )


def resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32] | None:
    """Run an ``"identity"``, ``"linear"`` or ``"torchaudio_sinc"`` plan from
    :func:`plan_resample`.

    :returns: read-only float32 ``[shape=(plan.output_samples,)]``, or ``None`` for a plan
        of another algorithm (the core's default runs it).
    """
    if plan.algorithm not in {"identity", *RESAMPLING_ALGORITHMS}:
        return None
    run = sinc_resample if plan.algorithm == SINC else linear_resample
    return run(
        samples,
        in_rate_hz=plan.source_rate_hz,
        out_rate_hz=plan.output_rate_hz,
        clip_index=clip_index,
        cancel=cancel,
    )
