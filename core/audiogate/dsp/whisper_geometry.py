"""The Whisper frontend's geometry: which items, windows and frames a clip of 16 kHz
samples becomes, and what computing them holds (:func:`whisper_plan`).

The frontend itself, its modes and its reference are documented in
:mod:`audiogate.dsp.whisper`; this module holds only its arithmetic, so a family's
policy and prompt modules can count frames and tokens without importing the kernel
(which builds its mel banks, through SciPy, when imported).
"""

from __future__ import annotations

import functools
from typing import Final, Literal

import attrs

from audiogate.dsp import blocks
from audiogate.dsp.blocks import block_threads

__all__ = [
    "BLOCK_FRAMES",
    "CHUNK_SAMPLES",
    "HOP",
    "LIBRARY_BYTES",
    "MEL_BINS",
    "N_FFT",
    "SAMPLE_RATE_HZ",
    "SCRATCH_BYTES",
    "Padding",
    "WhisperItem",
    "WhisperPlan",
    "block_ranges",
    "edge_samples",
    "interior_frames",
    "whisper_plan",
]

SAMPLE_RATE_HZ: Final = 16_000
N_FFT: Final = 400
HOP: Final = 160
#: ``n_samples`` of the extractor: ``chunk_length`` (30 s) at 16 kHz.
CHUNK_SAMPLES: Final = 30 * SAMPLE_RATE_HZ
#: The bank sizes the families' checkpoints declare (``feature_size``).
MEL_BINS: Final = (80, 128)
#: Frames per vectorised block; the cancellation token is polled before each block, and
#: blocks are what threads share.
BLOCK_FRAMES: Final = 256
_PAD: Final = N_FFT // 2
_BINS: Final = N_FFT // 2 + 1
_MAX_MELS: Final = max(MEL_BINS)
#: One thread's block buffers (sized for the largest bank): float64 frames, complex128
#: spectrum, float32 power and its transpose, float64 logs.
SCRATCH_BYTES: Final = BLOCK_FRAMES * (N_FFT * 8 + _BINS * (16 + 4 + 4) + _MAX_MELS * 8)
#: Per block and thread besides :data:`SCRATCH_BYTES`: the sparse product's float32
#: result and numpy's casting buffers (8,192 elements per operand).
LIBRARY_BYTES: Final = BLOCK_FRAMES * _MAX_MELS * 4 + (128 << 10)

Padding = Literal["max_length", "longest", "multiple", "windows"]
_PADDINGS: Final = ("max_length", "longest", "multiple", "windows")


@attrs.frozen(kw_only=True)
class WhisperItem:
    """One reference item: ``samples`` clip samples from ``start``, zero-padded to
    ``padded`` and written to windows ``window .. window + windows - 1``."""

    start: int
    samples: int
    padded: int
    window: int
    windows: int
    computed: int  #: frames whose window touches the clip (the rest are constant)


@attrs.frozen(kw_only=True)
class WhisperPlan:
    """How one clip of 16 kHz samples maps onto the extractor's items and frames.

    :param samples: the clip's samples ``N``.
    :param n_mels: mel bins (80 or 128).
    :param padding: the mode (see the module docstring).
    :param normalize: ``do_normalize`` applied per item.
    :param windows: feature windows of the result.
    :param window_frames: frames per window (``features.shape[2]``).
    :param valid_frames: the mask's ones, all windows together.
    :param computed_frames: frames computed (the others are the constant floor).
    :param feature_bytes: the result's bytes (float32 features and bool mask).
    :param working_bytes: peak scratch of :func:`whisper_log_mel` besides its result.
    """

    samples: int
    n_mels: int
    padding: Padding
    normalize: bool
    windows: int
    window_frames: int
    valid_frames: int
    computed_frames: int
    feature_bytes: int
    working_bytes: int
    items: tuple[WhisperItem, ...] = attrs.field(repr=False)

    @property
    def feature_shape(self) -> tuple[int, int, int]:
        """``(windows, n_mels, window_frames)``."""
        return (self.windows, self.n_mels, self.window_frames)


def block_ranges(frames: int, window_frames: int) -> list[tuple[int, int]]:
    """``[start, stop)`` frame ranges of at most :data:`BLOCK_FRAMES` frames over the
    first ``frames`` frames, none crossing a multiple of ``window_frames``."""
    ranges = []
    for window_start in range(0, frames, window_frames):
        window_stop = min(frames, window_start + window_frames)
        for start in range(window_start, window_stop, BLOCK_FRAMES):
            ranges.append((start, min(window_stop, start + BLOCK_FRAMES)))
    return ranges


def _computed_frames(samples: int, padded: int) -> int:
    # Frame t covers padded samples [160t - 200, 160t + 200): it holds audio while
    # 160t - 200 < N (the end reflection only reaches back 41 samples, into such frames).
    if samples == 0:
        return 0
    return min(padded // HOP, -(-(samples + _PAD) // HOP))


def interior_frames(samples: int, computed: int) -> tuple[int, int]:
    """Frames ``[lo, hi)`` whose window lies inside the clip (no padding, no reflection),
    framed straight from the waveform; the frames before ``lo`` and from ``hi`` to
    ``computed`` are framed from short padded copies. ``(computed, computed)`` when none:
    then every computed frame is in the head copy."""
    lo = -(-_PAD // HOP)  # frame t starts at padded sample 160t - 200
    hi = min(computed, (samples - _PAD) // HOP + 1) if samples >= _PAD else 0
    return (lo, hi) if hi > lo else (computed, computed)


def _span(frames: int) -> int:
    """Padded samples under ``frames`` consecutive frames."""
    return HOP * (frames - 1) + N_FFT if frames else 0


def edge_samples(samples: int, computed: int) -> int:
    """Samples of the head and tail copies (see :func:`interior_frames`)."""
    lo, hi = interior_frames(samples, computed)
    return _span(lo) + _span(computed - hi)


#: Bytes per edge sample while a copy is built: its float32 value and the int64 indices,
#: masks and temporaries of the reflection mapping.
_EDGE_BYTES: Final = 4 + 3 * 8 + 2


def whisper_plan(
    samples: int,
    *,
    n_mels: int = 128,
    padding: Padding = "max_length",
    padded_samples: int | None = None,
    chunk_samples: int = CHUNK_SAMPLES,
    normalize: bool = False,
) -> WhisperPlan:
    """The plan of a clip of ``samples`` 16 kHz samples (see the module docstring).

    :param samples: the clip's length ``N`` (``>= 0``; ``>= 1`` for ``"longest"`` and
        ``"multiple"``, whose reference fails on an empty item).
    :param n_mels: 80 or 128.
    :param padding: ``"max_length"``, ``"longest"``, ``"multiple"`` or ``"windows"``.
    :param padded_samples: ``"longest"`` only: the length ``P >= N`` to pad to (a batch's
        longest clip); default ``N``.
    :param chunk_samples: the extractor's ``n_samples`` (``chunk_length * 16000``), a
        multiple of 160.
    :param normalize: the extractor's ``do_normalize``.
    :raises ValueError: any of the above out of range, or a clip longer than its one
        ``"max_length"`` window (the reference would truncate it silently).
    """
    # A clip is planned at admission and again at extraction: the plan is kept, keyed by
    # the thread count it sized its scratch for as well.
    return _plan(
        samples, n_mels, padding, padded_samples, chunk_samples, normalize, blocks.BLOCK_THREADS
    )


@functools.lru_cache(maxsize=512)
def _plan(
    samples: int,
    n_mels: int,
    padding: Padding,
    padded_samples: int | None,
    chunk_samples: int,
    normalize: bool,
    _threads: int,
) -> WhisperPlan:
    if n_mels not in MEL_BINS:
        raise ValueError(f"n_mels must be one of {MEL_BINS}, not {n_mels}")
    if padding not in _PADDINGS:
        raise ValueError(f"padding must be one of {_PADDINGS}, not {padding!r}")
    if chunk_samples <= _PAD or chunk_samples % HOP:
        raise ValueError(f"chunk_samples must be a multiple of {HOP} above {_PAD}")
    if samples < 0:
        raise ValueError(f"samples must be >= 0, not {samples}")
    if padded_samples is not None and padding != "longest":
        raise ValueError(f"padded_samples applies to padding='longest', not {padding!r}")
    window_frames = chunk_samples // HOP
    items: list[WhisperItem] = []
    if padding == "max_length":
        if samples > chunk_samples:
            raise ValueError(
                f"{samples} samples exceed the {chunk_samples}-sample window (the reference "
                "truncates silently)"
            )
        items.append(
            WhisperItem(
                start=0,
                samples=samples,
                padded=chunk_samples,
                window=0,
                windows=1,
                computed=_computed_frames(samples, chunk_samples),
            )
        )
    elif padding == "longest":
        padded = samples if padded_samples is None else padded_samples
        if samples < 1 or padded < samples or padded <= _PAD:
            raise ValueError(
                f"padding='longest' needs 1 <= samples <= padded_samples and more than {_PAD} "
                f"padded samples; got samples={samples}, padded_samples={padded}"
            )
        window_frames = padded // HOP
        items.append(
            WhisperItem(
                start=0,
                samples=samples,
                padded=padded,
                window=0,
                windows=1,
                computed=_computed_frames(samples, padded),
            )
        )
    elif padding == "multiple":
        if samples < 1:
            raise ValueError("padding='multiple' needs at least one sample")
        windows = -(-samples // chunk_samples)
        padded = windows * chunk_samples
        items.append(
            WhisperItem(
                start=0,
                samples=samples,
                padded=padded,
                window=0,
                windows=windows,
                computed=_computed_frames(samples, padded),
            )
        )
    else:
        for index in range(max(1, -(-samples // chunk_samples))):
            start = index * chunk_samples
            length = min(chunk_samples, samples - start)
            items.append(
                WhisperItem(
                    start=start,
                    samples=length,
                    padded=chunk_samples,
                    window=index,
                    windows=1,
                    computed=_computed_frames(length, chunk_samples),
                )
            )
    windows = sum(item.windows for item in items)
    valid = sum(min(item.padded // HOP, -(-item.samples // HOP)) for item in items)
    computed = sum(item.computed for item in items)
    # Items run one after another: the largest edge copies, a normalised copy of the
    # clip, one block set per thread, and each block's peak.
    # The waveform is framed in place: only the frames that see padding or reflection are
    # framed from short copies.
    buffer = max(edge_samples(item.samples, item.computed) * _EDGE_BYTES for item in items)
    block_count = max(len(block_ranges(item.computed, window_frames)) for item in items)
    threads = block_threads(block_count)
    working = (
        buffer
        + (max(item.samples for item in items) * 4 if normalize else 0)
        + threads * (SCRATCH_BYTES + LIBRARY_BYTES)
        + block_count * 4
    )
    return WhisperPlan(
        samples=samples,
        n_mels=n_mels,
        padding=padding,
        normalize=normalize,
        windows=windows,
        window_frames=window_frames,
        valid_frames=valid,
        computed_frames=computed,
        feature_bytes=windows * window_frames * (n_mels * 4 + 1),
        working_bytes=working,
        items=tuple(items),
    )
