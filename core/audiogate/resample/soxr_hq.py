"""Band-limited rational resampling with python-soxr at HQ quality.

This is what ``librosa.load(sr=...)`` and transformers' ``load_audio`` use, so a family
whose reference pipeline loads audio that way (Qwen2-Audio, Phi-4 MM native) gets the
same samples.

Every path here runs libsoxr as one stream over the complete clip, fed block by block:
python-soxr's own ``soxr.resample`` does exactly that (one ``soxr_process`` per block of
its input, then a flush), and libsoxr's output does not depend on where the input is
split. (A clip of at most :data:`SOXR_BLOCK_SAMPLES` goes to ``soxr.resample`` in one
call.) So the whole-buffer functions, :class:`SoxrStream` fed in chunks of any size as
bytes arrive, and ``soxr.resample`` on the whole array give bit-identical samples
(``tests/core/test_soxr_hq.py`` checks all three against each other).

Two output lengths exist. libsoxr emits ``round(n·out/in)`` samples
(:func:`soxr_output_length`); ``librosa.resample(fix=True)`` (so ``librosa.load``) and
transformers' soundfile loader then pad with zeros or trim to ``ceil(n·out/in)``
(:func:`librosa_output_length`), which is at most one zero sample longer.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.identity import plan_identity, resample_identity
from audiogate.records import ResamplePlan, readonly

__all__ = [
    "SOXR_BLOCK_SAMPLES",
    "SOXR_QUALITY",
    "SOXR_WORKING_BYTES",
    "SoxrStream",
    "librosa_output_length",
    "plan_soxr_hq",
    "run_soxr_hq_plan",
    "soxr_output_length",
    "soxr_resample",
    "soxr_resample_librosa",
]

SOXR_QUALITY: Final = "HQ"
#: soxr's filter tables and state for one mono stream stay well under this.
SOXR_WORKING_BYTES: Final = 1 << 20
#: Input samples fed per ``soxr_process`` call by the whole-buffer functions; the
#: cancellation token is polled between blocks (about 1.4 s of 48 kHz audio).
SOXR_BLOCK_SAMPLES: Final = 1 << 16

FloatArray = npt.NDArray[np.float32]


def _check_rates(samples: int, in_rate_hz: int, out_rate_hz: int) -> None:
    if samples < 0 or in_rate_hz <= 0 or out_rate_hz <= 0:
        raise ValueError(
            f"samples must be >= 0 and rates > 0; got {samples}, {in_rate_hz}, {out_rate_hz}"
        )


def soxr_output_length(samples: int, *, in_rate_hz: int, out_rate_hz: int) -> int:
    """Output length of a whole-buffer soxr resample: ``round(n·out/in)``, halves up."""
    _check_rates(samples, in_rate_hz, out_rate_hz)
    return (2 * samples * out_rate_hz + in_rate_hz) // (2 * in_rate_hz)


def librosa_output_length(samples: int, *, in_rate_hz: int, out_rate_hz: int) -> int:
    """Length ``librosa.load(sr=out)`` and transformers' ``load_audio`` return: ``ceil(n·out/in)``.

    Both call ``soxr.resample`` and then fix the length (``librosa.util.fix_length``;
    ``np.pad(...)[:ceil]`` in ``transformers.audio_utils._load_audio_soundfile``).
    """
    _check_rates(samples, in_rate_hz, out_rate_hz)
    return -(-samples * out_rate_hz // in_rate_hz)


class SoxrStream:
    """One clip's soxr HQ resampler, fed in chunks of any size.

    The concatenated outputs of :meth:`feed` and :meth:`finish` equal
    :func:`soxr_resample` (or, with ``output_samples``, :func:`soxr_resample_librosa`)
    of the concatenated input, bit for bit: the filter runs over the complete timeline
    and is never restarted per chunk.

    :param in_rate_hz: source rate.
    :param out_rate_hz: target rate.
    :param output_samples: if given, the total output is trimmed to, or padded with
        zeros at :meth:`finish` up to, this many samples (librosa's ``fix_length``);
        otherwise soxr's own length, ``round(n·out/in)``.
    """

    __slots__ = ("_emitted", "_finished", "_in_rate", "_limit", "_out_rate", "_received", "_stream")

    def __init__(
        self, *, in_rate_hz: int, out_rate_hz: int, output_samples: int | None = None
    ) -> None:
        _check_rates(0, in_rate_hz, out_rate_hz)
        if output_samples is not None and output_samples < 0:
            raise ValueError(f"output_samples must be None or >= 0, not {output_samples}")
        self._in_rate = in_rate_hz
        self._out_rate = out_rate_hz
        self._limit = output_samples
        self._received = 0
        self._emitted = 0
        self._finished = False
        import soxr  # on first use: planning and the identity never need it

        # libsoxr with equal rates still filters; the identity must stay exact.
        self._stream = (
            None
            if in_rate_hz == out_rate_hz
            else soxr.ResampleStream(in_rate_hz, out_rate_hz, 1, dtype="float32", quality="HQ")
        )

    @property
    def samples_in(self) -> int:
        """Input samples fed so far."""
        return self._received

    @property
    def samples_out(self) -> int:
        """Output samples returned so far."""
        return self._emitted

    def _emit(self, out: FloatArray) -> FloatArray:
        if self._limit is not None:
            out = out[: max(0, self._limit - self._emitted)]
        self._emitted += out.shape[0]
        return out

    def feed(self, chunk: npt.ArrayLike) -> FloatArray:
        """Resample the next chunk of mono samples ``[shape=(k,)]``; ``k`` may be 0.

        :returns: the output samples that became available, float32 ``[shape=(m,)]``.
        :raises RuntimeError: after :meth:`finish`.
        """
        if self._finished:
            raise RuntimeError("SoxrStream.feed() after finish()")
        block = np.ascontiguousarray(chunk, dtype=np.float32)
        if block.ndim != 1:
            raise ValueError(f"chunk must be 1-D mono samples, not shape {block.shape}")
        self._received += block.shape[0]
        if self._stream is None:
            return self._emit(block.copy())
        if block.shape[0] == 0:
            return np.empty(0, dtype=np.float32)
        return self._emit(self._stream.resample_chunk(block))

    def finish(self) -> FloatArray:
        """Flush the filter's tail (and pad to ``output_samples`` if it was given).

        :returns: the remaining output samples, float32 ``[shape=(m,)]``.
        :raises RuntimeError: when called twice.
        """
        if self._finished:
            raise RuntimeError("SoxrStream.finish() called twice")
        self._finished = True
        if self._stream is None:
            tail = np.empty(0, dtype=np.float32)
        else:
            tail = self._stream.resample_chunk(np.empty(0, dtype=np.float32), last=True)
        tail = self._emit(tail)
        if self._limit is not None and self._emitted < self._limit:
            pad = self._limit - self._emitted
            self._emitted = self._limit
            tail = np.concatenate([tail, np.zeros(pad, dtype=np.float32)])
        return tail


def _fit(whole: FloatArray, output_samples: int, *, fixed: bool, clip_index: int) -> FloatArray:
    """``whole`` trimmed or zero-padded to ``output_samples`` (``fixed``), else checked
    to have exactly that length."""
    if whole.shape[0] == output_samples:
        return whole
    if not fixed:
        raise RuntimeError(
            f"soxr produced {whole.shape[0]} samples for clip {clip_index + 1}, planned "
            f"{output_samples}"
        )
    out = np.zeros(output_samples, dtype=np.float32)
    kept = min(output_samples, whole.shape[0])
    out[:kept] = whole[:kept]
    return out


def _resample_blocks(
    samples: npt.NDArray[np.float32],
    *,
    in_rate_hz: int,
    out_rate_hz: int,
    output_samples: int,
    fixed: bool,
    clip_index: int,
    cancel: CancelToken,
) -> FloatArray:
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    source = np.ascontiguousarray(samples, dtype=np.float32)
    if source.ndim != 1:
        raise ValueError(f"samples must be 1-D mono, not shape {source.shape}")
    n = source.shape[0]
    if 0 < n <= SOXR_BLOCK_SAMPLES and in_rate_hz != out_rate_hz:
        # One block: python-soxr's one-call path is that same single stream, without a
        # ResampleStream's setup and second call (~30 µs, a tenth of a 1 s clip's frontend).
        import soxr

        whole = soxr.resample(source, in_rate_hz, out_rate_hz, SOXR_QUALITY)
        cancel.check(Checkpoint.RESAMPLE, clip_index)
        return readonly(_fit(whole, output_samples, fixed=fixed, clip_index=clip_index))
    out = np.empty(output_samples, dtype=np.float32)
    stream = SoxrStream(
        in_rate_hz=in_rate_hz,
        out_rate_hz=out_rate_hz,
        output_samples=output_samples if fixed else None,
    )
    filled = 0

    def put(part: FloatArray) -> None:
        nonlocal filled
        stop = filled + part.shape[0]
        if stop > output_samples:
            raise RuntimeError(
                f"soxr produced more than the planned {output_samples} samples "
                f"for clip {clip_index + 1} ({in_rate_hz} -> {out_rate_hz} Hz)"
            )
        out[filled:stop] = part
        filled = stop

    for start in range(0, source.shape[0], SOXR_BLOCK_SAMPLES):
        put(stream.feed(source[start : start + SOXR_BLOCK_SAMPLES]))
        cancel.check(Checkpoint.RESAMPLE, clip_index)
    put(stream.finish())
    if filled != output_samples:
        raise RuntimeError(
            f"soxr produced {filled} samples for clip {clip_index + 1}, planned {output_samples} "
            f"({source.shape[0]} samples, {in_rate_hz} -> {out_rate_hz} Hz)"
        )
    return readonly(out)


def soxr_resample(
    samples: npt.NDArray[np.float32],
    *,
    in_rate_hz: int,
    out_rate_hz: int,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> npt.NDArray[np.float32]:
    """Resample mono float32 ``[shape=(n,)]`` from ``in_rate_hz`` to ``out_rate_hz``.

    Equal to ``soxr.resample(samples, in_rate_hz, out_rate_hz, "HQ")``; fed through one
    stream in blocks of :data:`SOXR_BLOCK_SAMPLES`, polling ``cancel`` between blocks.

    :returns: read-only float32 ``[shape=(soxr_output_length(n),)]``.
    """
    n = int(np.shape(samples)[0])
    return _resample_blocks(
        samples,
        in_rate_hz=in_rate_hz,
        out_rate_hz=out_rate_hz,
        output_samples=soxr_output_length(n, in_rate_hz=in_rate_hz, out_rate_hz=out_rate_hz),
        fixed=False,
        clip_index=clip_index,
        cancel=cancel,
    )


def soxr_resample_librosa(
    samples: npt.NDArray[np.float32],
    *,
    in_rate_hz: int,
    out_rate_hz: int,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> npt.NDArray[np.float32]:
    """Resample exactly as ``librosa.load(sr=out_rate_hz)`` does after decoding.

    :func:`soxr_resample`, then zero-padded to ``ceil(n·out/in)`` samples (librosa's
    ``fix_length``; transformers' soundfile ``load_audio`` does the same).

    :returns: read-only float32 ``[shape=(librosa_output_length(n),)]``.
    """
    n = int(np.shape(samples)[0])
    return _resample_blocks(
        samples,
        in_rate_hz=in_rate_hz,
        out_rate_hz=out_rate_hz,
        output_samples=librosa_output_length(n, in_rate_hz=in_rate_hz, out_rate_hz=out_rate_hz),
        fixed=True,
        clip_index=clip_index,
        cancel=cancel,
    )


def plan_soxr_hq(*, source_rate_hz: int, source_samples: int, target_rate_hz: int) -> ResamplePlan:
    """Plan ``librosa.load(sr=target)`` semantics: the identity at the target rate, else
    soxr HQ padded to ``ceil(n·target/source)`` samples.

    The core's ``"soxr_hq"`` default, Phi-4 MM's native variant and Qwen2-Audio share it,
    so the normalized length (and with it every frame mask and token count) equals what
    their reference loaders return.
    """
    if source_rate_hz == target_rate_hz:
        return plan_identity(source_rate_hz=source_rate_hz, source_samples=source_samples)
    return ResamplePlan(
        source_rate_hz=source_rate_hz,
        source_samples=source_samples,
        output_rate_hz=target_rate_hz,
        output_samples=librosa_output_length(
            source_samples, in_rate_hz=source_rate_hz, out_rate_hz=target_rate_hz
        ),
        working_bytes=SOXR_WORKING_BYTES,
        algorithm="soxr_hq",
        detail={"quality": SOXR_QUALITY, "length": "ceil(n·out/in), as librosa.load"},
    )


def run_soxr_hq_plan(
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    *,
    clip_index: int,
    cancel: CancelToken = NEVER,
) -> npt.NDArray[np.float32]:
    """Run a plan from :func:`plan_soxr_hq`.

    :param samples: mono float32 ``[shape=(plan.source_samples,)]``.
    :returns: read-only float32 ``[shape=(plan.output_samples,)]``.
    """
    if samples.shape != (plan.source_samples,):
        raise ValueError(
            f"clip {clip_index + 1}: {samples.shape} samples given, "
            f"planned ({plan.source_samples},)"
        )
    cancel.check(Checkpoint.RESAMPLE, clip_index)
    if plan.algorithm == "identity":
        return resample_identity(samples)
    return soxr_resample_librosa(
        samples,
        in_rate_hz=plan.source_rate_hz,
        out_rate_hz=plan.output_rate_hz,
        clip_index=clip_index,
        cancel=cancel,
    )
