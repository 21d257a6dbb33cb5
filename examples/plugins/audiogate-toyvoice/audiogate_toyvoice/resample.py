"""toyvoice's resampler: a Kaiser-windowed sinc, polyphase, exact rational ratio.

The ratio ``target / source`` is reduced by their gcd to ``up / down``. Output sample
``j`` sits at input time ``j * down / up``: its integer part picks the input window and
its fraction one of ``up`` precomputed filter phases, so each block of outputs is one
gather and one row-wise dot product. The low-pass cutoff is 0.9 of the lower Nyquist
frequency (no aliasing when decimating), each phase is normalized to unit DC gain, and
the signal is zero beyond its ends. The output has ``ceil(n * up / down)`` samples.

Same-rate clips never reach this module: the core's default plans the identity.
"""

from __future__ import annotations

import functools
import math
from typing import Final

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import DecodeError, LimitError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan, readonly

__all__ = ["ALGORITHM", "BLOCK_OUTPUTS", "MAX_PHASES", "plan_resample", "resample"]

ALGORITHM: Final = "toy_sinc"
#: Outputs per block; the cancel token is polled once per block.
BLOCK_OUTPUTS: Final = 2_048
#: Zero crossings of the sinc on each side (at the cutoff): the filter's half width.
ZERO_CROSSINGS: Final = 16
ROLLOFF: Final = 0.9
KAISER_BETA: Final = 8.6
#: Filter phases at most (``up`` of the reduced ratio). The bank is built when a clip is
#: planned, at admission, before any reservation: a rate such as 95,999 Hz (``up`` =
#: 16,000) would build hundreds of megabytes there, and 11,024 Hz (``up`` = 1,000) about
#: 3 MB. Every common rate needs at most 640 (11,025 Hz); the contract suite's awkward
#: rates check the rest are refused or planned small.
MAX_PHASES: Final = 640


def _ratio(source_rate_hz: int, target_rate_hz: int) -> tuple[int, int]:
    common = math.gcd(source_rate_hz, target_rate_hz)
    return target_rate_hz // common, source_rate_hz // common


@functools.lru_cache(maxsize=16)
def _phases(up: int, down: int) -> npt.NDArray[np.float32]:
    """The filter bank ``[shape=(up, taps)]``; row ``p`` serves outputs at fraction ``p/up``."""
    cutoff = ROLLOFF * min(1.0, up / down)  # in cycles per input sample, relative to Nyquist
    half = math.ceil(ZERO_CROSSINGS / cutoff)
    # Tap k of phase p reads input sample ``base - half + 1 + k`` for an output at
    # ``base + p / up``: its distance from the output time is ``k - half + 1 - p / up``.
    distance = (np.arange(2 * half, dtype=np.float64)[None, :] - (half - 1)) - np.arange(
        up, dtype=np.float64
    )[:, None] / up
    inside = np.clip(1.0 - (distance / half) ** 2, 0.0, None)
    window = np.i0(KAISER_BETA * np.sqrt(inside)) / np.i0(KAISER_BETA)
    taps = cutoff * np.sinc(cutoff * distance) * window
    taps /= taps.sum(axis=1, keepdims=True)
    return readonly(taps.astype(np.float32))


def _working_bytes(up: int, down: int) -> int:
    taps = int(_phases(up, down).shape[1])
    chunk = BLOCK_OUTPUTS * down // up + taps + 1
    # Per block: the input chunk; per output, the gathered window and phase row (float32),
    # the dot product (float32) and five int64 index arrays; plus the cached bank.
    return chunk * 4 + BLOCK_OUTPUTS * (2 * taps * 4 + 4 + 5 * 8) + up * taps * 4


def plan_resample(
    policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """Plan one clip; ``None`` at the target rate (the core plans the identity).

    :raises DecodeError: the rate is outside the policy's source-rate bounds.
    :raises LimitError: the rate needs more than :data:`MAX_PHASES` filter phases.
    """
    target = policy.target_rate_hz
    if source_rate_hz == target:
        return None
    if not policy.min_source_rate_hz <= source_rate_hz <= policy.max_source_rate_hz:
        raise DecodeError(
            f"source rate {source_rate_hz} Hz is outside {policy.min_source_rate_hz}.."
            f"{policy.max_source_rate_hz} Hz",
            clip_index=clip_index,
            code="rate_not_allowed",
        )
    up, down = _ratio(source_rate_hz, target)
    if up > MAX_PHASES:
        raise LimitError(
            "toyvoice resampler filter phases", actual=up, maximum=MAX_PHASES, clip_index=clip_index
        )
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=target,
        output_samples=-(-source_samples * up // down),
        working_bytes=_working_bytes(up, down),
        algorithm=ALGORITHM,
        detail={"up": up, "down": down, "taps": int(_phases(up, down).shape[1])},
    )


def resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32] | None:
    """Resample ``samples`` as ``plan`` (from :func:`plan_resample`) says.

    :param policy: the request's policy; the plan already holds its target rate.
    :param samples: read-only mono float32 ``[shape=(plan.source_samples,)]``.
    :param cancel: polled at the ``Resample`` checkpoint before each block.
    :returns: read-only float32 ``[shape=(plan.output_samples,)]``, or ``None`` for a plan
        of the core's (the identity at the target rate), which the core runs.
    """
    if plan.algorithm != ALGORITHM:
        return None
    up, down = int(plan.detail["up"]), int(plan.detail["down"])
    bank = _phases(up, down)
    taps = bank.shape[1]
    lead = taps // 2 - 1  # input samples a window reaches before its base sample
    n = samples.shape[0]
    out = np.empty(plan.output_samples, dtype=np.float32)
    for start in range(0, plan.output_samples, BLOCK_OUTPUTS):
        cancel.check(Checkpoint.RESAMPLE, clip_index)
        stop = min(start + BLOCK_OUTPUTS, plan.output_samples)
        position = np.arange(start, stop, dtype=np.int64) * down
        base, phase = np.divmod(position, up)
        # The input this block reads, zero-padded where it runs past either end.
        low = int(base[0]) - lead
        high = int(base[-1]) - lead + taps
        chunk = np.zeros(high - low, dtype=np.float32)
        chunk[max(0, -low) : min(high, n) - low] = samples[max(0, low) : min(high, n)]
        windows = sliding_window_view(chunk, taps)[base - base[0]]
        out[start:stop] = np.einsum("ij,ij->i", windows, bank[phase])
    return readonly(out)
