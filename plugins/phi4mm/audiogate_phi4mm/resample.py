"""Phi-4 MM resampling: the SpeechLib integer-ratio rule (remote code) or soxr HQ (native).

:func:`plan_resample` and :func:`resample` are the stage's entry points and choose by
``policy.variant``. The native variant (transformers' ``Phi4MultimodalFeatureExtractor``)
resamples as transformers' ``load_audio`` does: soxr HQ to 16 kHz at librosa's length
(:func:`audiogate.resample.plan_soxr_hq`). The rest of this module is the remote-code
processor's SpeechLib integer-ratio resampler.

Source: ``Phi4MMAudioFeatureExtractor._extract_spectrogram`` in ``processing_phi4mm.py``
(microsoft/Phi-4-multimodal-instruct @ ``93f923e1``), kept quirk for quirk because the
checkpoint was trained on it (as mlxcel's ``phi4mm_resample_cancellable`` does):

* ``fs in {8000, 16000}``: unchanged.
* ``fs > 16000``: ``resample_poly(x, 1, fs // 16000)``, then *called* 16 kHz. So 22.05 and
  24 kHz pass unchanged (factor 1) and 44.1 kHz halves to 22.05 kHz, all labelled 16 kHz.
* ``8000 < fs < 16000``: ``resample_poly(x, 1, fs // 8000)`` (always factor 1), called 8 kHz.
* ``fs < 8000``: refused.

The polyphase filter is SciPy's: ``firwin(20·down + 1, 1/down, window=("kaiser", 5.0))``
with the output phase of ``resample_poly``. mlxcel's preflight bounds
(``src/audio/preprocessing_resample.rs``) hold before anything is allocated: factor at
most 12, ``ceil(n/down)·(20·down + 1)`` work units at most 536,870,912.

The filter runs as BLAS products instead of SciPy's scalar loop: outputs are grouped
``P`` at a time, so a block of input, reshaped into rows of ``P·down`` samples, times a
banded ``(P·down, P)`` tap matrix gives ``P`` outputs per row, and the next row's first
``L - down`` samples times a second small matrix supply the rest of each window. Each
product is kept under :data:`PRODUCT_MULTIPLY_ADDS` so BLAS runs it on the calling
thread; blocks of :data:`BLOCK_OUTPUTS` outputs are independent, so a long clip's blocks
are spread over :data:`~audiogate.dsp.blocks.BLOCK_THREADS` threads instead
(:func:`audiogate.dsp.blocks.run_blocks`), each with its own scratch and the same values on
any thread. Accumulation is in float64 as in ``resample_poly`` on the float64 waveform
the original reads with ``soundfile``; only the summation order differs, so the float32
output equals ``resample_poly(x.astype(float64), 1, down).astype(float32)`` except where a
value sits within a few float64 ulps of a float32 rounding boundary.

The original's output depends on its caller's dtype: SciPy runs ``resample_poly`` on a
float32 array in float32. A caller that loads audio as float32 (``librosa.load``, as vLLM
does) gets samples an ulp or so away from these, which moves the log-mel of quiet bands
by up to ~1e-4. audiogate follows the model card, whose example reads with
``soundfile.read`` (float64).

``resampling_algorithm = "scipy_polyphase_exact"`` (remote-code checkpoints) selects what
vLLM runs for Phi-4 MM instead (vLLM 0.32, ``resample_audio_scipy`` in
``vllm/multimodal/audio.py``): ``resample_poly(x, 16000/g, fs/g)`` at the exact ratio
(``g = gcd(fs, 16000)``) on the float32 waveform, so every rate becomes true 16 kHz
before the processor's rule, which then changes nothing: a 5 s 44.1 kHz clip is
80,000 samples (63 audio tokens), not 110,250 relabelled ones (86). It runs blockwise
(:func:`resample_exact`): each block of outputs is SciPy's ``upfirdn`` with
``resample_poly``'s own filter and offsets on the window of input that block reads,
starting at a multiple of ``fs/g`` so the polyphase grid is the whole clip's; each output
is then the same float32 sum in the same order, equal to ``resample_poly`` on the whole
clip bit for bit.
"""

from __future__ import annotations

import math
from functools import cache, lru_cache
from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.dsp.blocks import block_threads, run_blocks
from audiogate.dsp.identity import plan_identity, resample_identity
from audiogate.dsp.scratch import thread_scratch
from audiogate.errors import DecodeError, LimitError, SizeOverflowError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan, readonly
from audiogate.resample import plan_soxr_hq, run_soxr_hq_plan

__all__ = [
    "ALGORITHM",
    "BLOCK_OUTPUTS",
    "EXACT",
    "KAISER_BETA",
    "MAX_DOWNSAMPLE_FACTOR",
    "MAX_POLYPHASE_WORK_UNITS",
    "MIN_SOURCE_RATE_HZ",
    "RESAMPLING_ALGORITHMS",
    "decimate",
    "decimation_filter",
    "exact_filter",
    "exact_ratio",
    "plan_exact_resample",
    "plan_resample",
    "plan_speechlib_resample",
    "resample",
    "resample_exact",
    "resample_speechlib",
    "speechlib_rate_rule",
]

#: The algorithm name in plans and in ``resampling_algorithm`` config keys.
ALGORITHM: Final = "scipy_polyphase_integer"
#: ``resample_poly`` at the exact ratio to 16 kHz, as vLLM resamples for Phi-4 MM.
EXACT: Final = "scipy_polyphase_exact"
#: The values of the remote-code variant's ``resampling_algorithm`` key, the default first.
RESAMPLING_ALGORITHMS: Final = (ALGORITHM, EXACT)
#: mlxcel's ``MAX_PHI4MM_DOWNSAMPLE_FACTOR`` (192 kHz // 16 kHz).
MAX_DOWNSAMPLE_FACTOR: Final = 12
#: mlxcel's ``MAX_POLYPHASE_WORK_UNITS``: output samples × filter taps.
MAX_POLYPHASE_WORK_UNITS: Final = 512 * 1024 * 1024
#: ``resample_poly``'s default window is ``("kaiser", 5.0)``.
KAISER_BETA: Final = 5.0
#: ``resample_poly`` uses ``half_len = 10 · max(up, down)``.
HALF_LENGTH_PER_FACTOR: Final = 10
#: The remote-code processor raises ``RuntimeError`` below this rate.
MIN_SOURCE_RATE_HZ: Final = 8_000
WIDEBAND_RATE_HZ: Final = 16_000
NARROWBAND_RATE_HZ: Final = 8_000
#: Outputs per block: the cancel token is polled this often, and threads share the work
#: in these units.
BLOCK_OUTPUTS: Final = 16_000
#: Outputs per row of the block product; at least 20 keeps a window within two rows.
GROUP_OUTPUTS: Final = 20
#: Multiply-adds per BLAS call at most: OpenBLAS runs products up to 4·65536 on the
#: calling thread, and thread hand-off for such small products costs more than it saves
#: when other processes share the cores.
PRODUCT_MULTIPLY_ADDS: Final = 1 << 18
_F64: Final = 8
#: Transient allocations inside numpy per block (cast and ufunc iterator buffers).
LIBRARY_SCRATCH_BYTES: Final = 256 * 1024


def speechlib_rate_rule(source_rate_hz: int, *, clip_index: int) -> tuple[int, int]:
    """The integer-ratio rule: ``(down, effective_rate_hz)`` for a source rate.

    :raises DecodeError: ``rate_below_minimum`` below 8 kHz.
    """
    if source_rate_hz < MIN_SOURCE_RATE_HZ:
        raise DecodeError(
            f"source sample rate {source_rate_hz} Hz is below the {MIN_SOURCE_RATE_HZ} Hz "
            "minimum of the Phi-4 MM SpeechLib frontend",
            clip_index=clip_index,
            code="rate_below_minimum",
        )
    if source_rate_hz in (NARROWBAND_RATE_HZ, WIDEBAND_RATE_HZ):
        return 1, source_rate_hz
    if source_rate_hz > WIDEBAND_RATE_HZ:
        return source_rate_hz // WIDEBAND_RATE_HZ, WIDEBAND_RATE_HZ
    return source_rate_hz // NARROWBAND_RATE_HZ, NARROWBAND_RATE_HZ


def _taps(down: int) -> int:
    return 2 * HALF_LENGTH_PER_FACTOR * down + 1


def _block_buffer_samples(down: int) -> int:
    rows = math.ceil(BLOCK_OUTPUTS / GROUP_OUTPUTS)
    return (rows + 1) * GROUP_OUTPUTS * down


def _blocks(outputs: int) -> int:
    return -(-outputs // BLOCK_OUTPUTS)


def _working_bytes(down: int, threads: int) -> int:
    """Peak scratch of :func:`decimate` on ``threads`` threads: the tap matrices, and per
    thread the float64 block and the products."""
    taps = _taps(down)
    matrices = (GROUP_OUTPUTS * down + taps - down) * GROUP_OUTPUTS * _F64
    block = _block_buffer_samples(down) * _F64
    rows = math.ceil(BLOCK_OUTPUTS / GROUP_OUTPUTS)
    products = 2 * rows * GROUP_OUTPUTS * _F64  # result and carry, carry at most a block
    return matrices + taps * _F64 + threads * (block + products + LIBRARY_SCRATCH_BYTES)


def plan_speechlib_resample(
    *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan:
    """Plan the integer-ratio rule for one clip; nothing is allocated.

    :raises DecodeError: the rate is below 8 kHz (``rate_below_minimum``).
    :raises LimitError: ``"Phi4MM downsample factor"`` above 12, or ``"Phi4MM resample
        work units"`` above 536,870,912.
    """
    if source_samples < 0:
        raise ValueError(f"source_samples must be >= 0, got {source_samples}")
    down, effective = speechlib_rate_rule(source_rate_hz, clip_index=clip_index)
    if down > MAX_DOWNSAMPLE_FACTOR:
        raise LimitError(
            "Phi4MM downsample factor",
            actual=down,
            maximum=MAX_DOWNSAMPLE_FACTOR,
            clip_index=clip_index,
        )
    if down == 1:
        # Relabelled, not resampled: 22.05/24 kHz become "16 kHz", 11.025 kHz "8 kHz".
        return plan_identity(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            output_rate_hz=effective,
            detail={"down": 1, "relabelled": source_rate_hz != effective},
        )
    output = -(-source_samples // down)  # resample_poly's ceil(n · up / down)
    work = output * _taps(down)
    if work > 2**63 - 1:
        raise SizeOverflowError(f"the Phi4MM resample work of clip {clip_index + 1}")
    if work > MAX_POLYPHASE_WORK_UNITS:
        raise LimitError(
            "Phi4MM resample work units",
            actual=work,
            maximum=MAX_POLYPHASE_WORK_UNITS,
            clip_index=clip_index,
        )
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=effective,
        output_samples=output,
        working_bytes=_working_bytes(down, block_threads(_blocks(output))),
        algorithm=ALGORITHM,
        detail={"down": down, "taps": _taps(down), "work_units": work},
    )


@cache
def decimation_filter(down: int) -> npt.NDArray[np.float64]:
    """``resample_poly``'s anti-aliasing FIR for ``up=1`` ``[shape=(20·down + 1,)]``."""
    # SciPy itself, not numpy's kaiser window (which differs in the last bits), imported
    # on the first decimation: it costs a process half a second of start-up otherwise.
    from scipy.signal import firwin

    taps = firwin(_taps(down), 1.0 / down, window=("kaiser", KAISER_BETA))
    return readonly(np.asarray(taps, dtype=np.float64))


@cache
def _tap_matrices(down: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The banded tap matrix split at ``P·down`` rows: ``(main, tail)``.

    Column ``b`` holds the reversed filter starting at row ``b·down``, so row ``a`` of
    the input block times it is output ``a·P + b``.
    """
    flipped = decimation_filter(down)[::-1]
    taps = flipped.size
    span = GROUP_OUTPUTS * down
    bank = np.zeros((span + taps - down, GROUP_OUTPUTS), dtype=np.float64)
    for column in range(GROUP_OUTPUTS):
        bank[column * down : column * down + taps, column] = flipped
    return readonly(bank[:span].copy()), readonly(bank[span:].copy())


def decimate(
    samples: npt.NDArray[np.float32],
    *,
    down: int,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """``resample_poly(samples, 1, down)`` in float64, blockwise and cancellable.

    :param samples: mono float32 ``[shape=(n,)]``.
    :param down: integer factor, 2 to 12.
    :returns: read-only float32 ``[shape=(ceil(n / down),)]``.
    """
    if not 2 <= down <= MAX_DOWNSAMPLE_FACTOR:
        raise ValueError(f"down must be from 2 to {MAX_DOWNSAMPLE_FACTOR}, got {down}")
    source = np.asarray(samples)
    n = source.shape[0]
    total = -(-n // down)
    out = np.empty(total, dtype=np.float32)
    main, tail = _tap_matrices(down)
    half = HALF_LENGTH_PER_FACTOR * down
    span = GROUP_OUTPUTS * down
    overlap = tail.shape[0]
    chunk = max(1, PRODUCT_MULTIPLY_ADDS // (GROUP_OUTPUTS * span))

    def block(index: int) -> None:
        first = index * BLOCK_OUTPUTS
        count = min(BLOCK_OUTPUTS, total - first)
        scratch, products, carry = thread_scratch(
            ("phi4mm.decimate", down),
            lambda: (
                np.empty(_block_buffer_samples(down), dtype=np.float64),
                np.empty((-(-BLOCK_OUTPUTS // GROUP_OUTPUTS), GROUP_OUTPUTS), dtype=np.float64),
                np.empty((chunk, GROUP_OUTPUTS), dtype=np.float64),
            ),
        )
        rows = -(-count // GROUP_OUTPUTS)
        # Window of output k covers source [k·down - half, k·down + half]; zeros outside.
        start = first * down - half
        length = (rows + 1) * span
        lo, hi = max(start, 0), min(start + length, n)  # lo < hi: first·down < n
        buffer = scratch[:length]
        buffer[: lo - start] = 0.0
        buffer[lo - start : hi - start] = source[lo:hi]
        buffer[hi - start :] = 0.0
        grid = buffer.reshape(rows + 1, span)
        result = products[:rows]
        for top in range(0, rows, chunk):
            bottom = min(top + chunk, rows)
            np.matmul(grid[top:bottom], main, out=result[top:bottom])
            np.matmul(grid[top + 1 : bottom + 1, :overlap], tail, out=carry[: bottom - top])
            result[top:bottom] += carry[: bottom - top]
        out[first : first + count] = result.reshape(-1)[:count]

    cancel.check(Checkpoint.RESAMPLE, clip_index)
    run_blocks(
        _blocks(total), block, cancel=cancel, checkpoint=Checkpoint.RESAMPLE, clip_index=clip_index
    )
    return readonly(out)


def resample_speechlib(
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """Run a plan from :func:`plan_speechlib_resample`.

    :param samples: read-only mono float32 ``[shape=(plan.source_samples,)]``.
    :returns: read-only float32 ``[shape=(plan.output_samples,)]``.
    """
    if samples.shape != (plan.source_samples,):
        raise ValueError(
            f"clip {clip_index + 1}: expected {plan.source_samples} samples, got {samples.shape}"
        )
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if plan.algorithm == "identity":
        return resample_identity(samples)
    down = int(plan.detail["down"])
    return decimate(samples, down=down, clip_index=clip_index, cancel=cancel)


# --- the exact ratio (vLLM) ----------------------------------------------------------


def exact_ratio(source_rate_hz: int, target_rate_hz: int = WIDEBAND_RATE_HZ) -> tuple[int, int]:
    """``(up, down)``: the rate ratio in lowest terms."""
    g = math.gcd(source_rate_hz, target_rate_hz)
    return target_rate_hz // g, source_rate_hz // g


def _exact_taps(up: int, down: int) -> int:
    return 2 * HALF_LENGTH_PER_FACTOR * max(up, down) + 1


def _exact_output(samples: int, up: int, down: int) -> int:
    return -(-samples * up // down)


def _upfirdn_output(samples: int, taps: int, up: int, down: int) -> int:
    # upfirdn's output length for ``samples`` inputs and ``taps`` filter taps.
    return ((samples - 1) * up + taps) // down + 1


# Bounded: a request chooses its source rate (a filter is up to 3.8 M taps at 192 kHz).
@lru_cache(maxsize=8)
def _scaled_filter(up: int, down: int) -> npt.NDArray[np.float32]:
    from scipy.signal import firwin

    half = HALF_LENGTH_PER_FACTOR * max(up, down)
    h = np.asarray(firwin(2 * half + 1, 1.0 / max(up, down), window=("kaiser", KAISER_BETA)))
    scaled = h.astype(np.float32)
    scaled *= np.float32(up)
    return readonly(scaled)


def exact_filter(up: int, down: int, samples: int) -> tuple[npt.NDArray[np.float32], int]:
    """``resample_poly``'s filter for ``up/down`` on ``samples`` float32 inputs, padded
    as it pads it, and the number of leading outputs it drops: ``(h, pre_remove)``.

    ``firwin(20·max + 1, 1/max, kaiser 5.0)`` cast to float32 and scaled by ``up``; zeros
    in front so the delay is whole outputs, and behind until the output is long enough
    (which depends on ``samples``, hence the argument).
    """
    scaled = _scaled_filter(up, down)
    half = HALF_LENGTH_PER_FACTOR * max(up, down)
    pre_pad = down - half % down
    pre_remove = (half + pre_pad) // down
    post_pad = 0
    needed = _exact_output(samples, up, down) + pre_remove
    while _upfirdn_output(samples, scaled.shape[0] + pre_pad + post_pad, up, down) < needed:
        post_pad += 1
    padded = np.concatenate((np.zeros(pre_pad, np.float32), scaled, np.zeros(post_pad, np.float32)))
    return readonly(padded), pre_remove


def plan_exact_resample(
    *, source_rate_hz: int, source_samples: int, target_rate_hz: int = WIDEBAND_RATE_HZ
) -> ResamplePlan:
    """Plan ``resample_poly`` at the exact ratio (the identity at 16 kHz).

    Its scratch: the filter (``firwin`` in float64 with its window, the float32 copy and
    its padded form, ``upfirdn``'s transposed phases) and one block's window and output.
    """
    if source_samples < 0:
        raise ValueError(f"source_samples must be >= 0, got {source_samples}")
    if source_rate_hz == target_rate_hz:
        return plan_identity(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            output_rate_hz=target_rate_hz,
            detail={"up": 1, "down": 1},
        )
    up, down = exact_ratio(source_rate_hz, target_rate_hz)
    taps = _exact_taps(up, down)
    output = _exact_output(source_samples, up, down)
    window = BLOCK_OUTPUTS * down // up + taps // up + 2 * down + 2
    block = BLOCK_OUTPUTS + taps // down + 2
    working = (
        taps * (4 * _F64 + 4 * 4)
        + 2 * (up + down) * 4
        + window * 4
        + 2 * block * 4
        + LIBRARY_SCRATCH_BYTES
    )
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=target_rate_hz,
        output_samples=output,
        working_bytes=working,
        algorithm=EXACT,
        detail={"up": up, "down": down, "taps": taps},
    )


def resample_exact(
    samples: npt.NDArray[np.float32],
    *,
    up: int,
    down: int,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """``resample_poly(samples, up, down)`` on float32 samples, blockwise and cancellable.

    :param samples: mono float32 ``[shape=(n,)]``; ``up`` and ``down`` coprime.
    :returns: read-only float32 ``[shape=(ceil(n·up/down),)]``.
    """
    from scipy.signal import upfirdn

    source = np.ascontiguousarray(samples, dtype=np.float32)
    n = source.shape[0]
    total = _exact_output(n, up, down)
    out = np.empty(total, dtype=np.float32)
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if total == 0:
        return readonly(out)
    h, pre_remove = exact_filter(up, down, n)
    taps = h.shape[0]
    for first in range(0, total, BLOCK_OUTPUTS):
        cancel.check(Checkpoint.RESAMPLE, clip_index)
        stop = min(first + BLOCK_OUTPUTS, total)
        # Output m of upfirdn reads inputs (m·down - taps + 1)/up .. m·down/up; the window
        # starts at a multiple of ``down`` so its outputs sit on the clip's grid.
        low = max(0, -(-((first + pre_remove) * down - taps + 1) // up))
        start = low // down * down
        end = min(n, (stop - 1 + pre_remove) * down // up + 1)
        shift = start * up // down
        window = upfirdn(h, source[start:end], up, down)
        out[first:stop] = window[first + pre_remove - shift : stop + pre_remove - shift]
    return readonly(out)


def plan_resample(
    policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan:
    """Plan one clip for the policy's variant: the SpeechLib rule
    (:func:`plan_speechlib_resample`), or for the native variant soxr HQ to 16 kHz at
    librosa's length, what transformers' ``load_audio`` does.

    :raises DecodeError: remote code: the rate is below 8 kHz (``rate_below_minimum``).
    :raises LimitError: remote code: the factor or the work units are over the bounds.
    """
    if policy.variant == "native":
        return plan_soxr_hq(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            target_rate_hz=policy.target_rate_hz,
        )
    if policy.resampling == EXACT:
        # The remote processor's 8 kHz floor still holds: the rate rule refuses below it.
        speechlib_rate_rule(source_rate_hz, clip_index=clip_index)
        return plan_exact_resample(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            target_rate_hz=policy.target_rate_hz,
        )
    return plan_speechlib_resample(
        source_rate_hz=source_rate_hz, source_samples=source_samples, clip_index=clip_index
    )


def resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32]:
    """Run a plan from :func:`plan_resample`.

    :param samples: read-only mono float32 ``[shape=(plan.source_samples,)]``.
    :returns: read-only float32 ``[shape=(plan.output_samples,)]``.
    """
    if policy.variant == "native":
        return run_soxr_hq_plan(plan, samples, clip_index=clip_index, cancel=cancel)
    if plan.algorithm == EXACT:
        return resample_exact(
            samples,
            up=int(plan.detail["up"]),
            down=int(plan.detail["down"]),
            clip_index=clip_index,
            cancel=cancel,
        )
    return resample_speechlib(plan, samples, clip_index=clip_index, cancel=cancel)
