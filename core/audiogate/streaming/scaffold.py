"""The scaffolding a family's :class:`~audiogate.streaming.stage.FeatureStream` shares
around its DSP: source batches, a resampler run as a stream, a sink of features, byte
accounting and the life cycle.

A family that streams builds two pieces and hands them to :class:`BatchedFeatureStream`:

* a :class:`SourceStream`: its resampler as a stream (outputs returned once final), or
  :class:`IdentityStream` / :class:`SoxrStreamAdapter` (the core's soxr HQ);
* a :class:`FeatureSink`: takes the normalized samples as they become final and
  computes what it can of the features (a waveform buffer and frames, usually).

:class:`BatchedFeatureStream` gathers pushed source samples into batches of
:func:`~audiogate.streaming.stage.batch_frames` (per-call costs dominate small batches),
checks the whole clip's plan against the stream it ran, drains the resampler and zero-pads
a ``"soxr_hq"`` plan to librosa's length at ``finish``, bounds the bytes held, and drops
everything at ``close``. The subclass gives only :meth:`BatchedFeatureStream.features`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Final, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import PluginError
from audiogate.records import ClipFeatures, ResamplePlan
from audiogate.streaming.buffer import (
    GrowingArray,
    capacity_bound,
    planned_capacity,
)
from audiogate.streaming.stage import SourceResampler, batch_frames, open_source_resampler

if TYPE_CHECKING:  # the host imports this module; the pipeline imports the host
    from audiogate.pipeline.plans import ClipPlan

__all__ = [
    "F32_BYTES",
    "BatchedFeatureStream",
    "FeatureSink",
    "FrameRows",
    "FramedSink",
    "IdentityStream",
    "SourceStream",
    "SourceWindow",
    "SoxrStreamAdapter",
]

#: Bytes of one float32 sample.
F32_BYTES: Final = 4


class SourceStream(Protocol):
    """A resampler run as a stream: outputs are returned once final."""

    @property
    def nbytes(self) -> int:
        """Bytes held (source samples kept for outputs not yet computed)."""

    def output_bound(self, source_frames: int) -> int:
        """At most how many outputs ``source_frames`` source frames give."""

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Take source samples ``[shape=(k,)]``; the outputs that became final."""

    def finish(self) -> npt.NDArray[np.float32]:
        """The remaining outputs of the clip of every sample pushed."""


class FeatureSink(Protocol):
    """What turns normalized samples into features as they arrive (a family's DSP)."""

    @property
    def samples(self) -> int:
        """Normalized samples taken so far."""

    @property
    def nbytes(self) -> int:
        """Bytes held now."""

    def planned_nbytes(self, samples: int) -> int:
        """:attr:`nbytes` once ``samples`` normalized samples are held (a bound)."""

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Take the next normalized samples ``[shape=(k,)]``."""


class IdentityStream:
    """Sources already at the output rate (or relabelled): the samples themselves."""

    nbytes: Final = 0

    def output_bound(self, source_frames: int) -> int:
        """``source_frames``."""
        return source_frames

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The samples (not copied)."""
        return samples

    def finish(self) -> npt.NDArray[np.float32]:
        """Nothing."""
        return np.empty(0, dtype=np.float32)


class SoxrStreamAdapter:
    """The core's streaming soxr HQ (:class:`~audiogate.streaming.stage.SourceResampler`)
    as a :class:`SourceStream`; a ``"soxr_hq"`` plan's zero padding to librosa's length
    is added by :class:`BatchedFeatureStream`."""

    def __init__(self, resampler: SourceResampler) -> None:
        self._resampler = resampler

    @property
    def nbytes(self) -> int:
        return self._resampler.waiting_frames * F32_BYTES

    def output_bound(self, source_frames: int) -> int:
        return self._resampler.output_bound(source_frames)

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        out = self._resampler.push(samples)
        return np.empty(0, dtype=np.float32) if out is None else out

    def finish(self) -> npt.NDArray[np.float32]:
        return self._resampler.finish()


def core_source_stream(resample: ResamplePlan) -> SourceStream | None:
    """The core's resamplers as a :class:`SourceStream`: :class:`IdentityStream` for the
    identity, :class:`SoxrStreamAdapter` for soxr HQ, ``None`` for any other algorithm
    (a family tries its own resamplers first)."""
    if resample.algorithm == "identity":
        return IdentityStream()
    soxr = open_source_resampler(resample)
    return None if soxr is None else SoxrStreamAdapter(soxr)


class SourceWindow:
    """The source samples from an absolute index on: what a resampler's pending outputs
    still read (the front is dropped as outputs become final)."""

    __slots__ = ("base", "samples")

    def __init__(self) -> None:
        self.base = 0
        self.samples = np.empty(0, dtype=np.float32)

    @property
    def stop(self) -> int:
        """One past the last absolute index held."""
        return self.base + self.samples.shape[0]

    def append(self, block: npt.NDArray[np.float32]) -> None:
        """Add samples ``[shape=(k,)]`` at the end."""
        self.samples = np.concatenate((self.samples, block)) if self.samples.size else block

    def drop_before(self, index: int) -> None:
        """Forget the samples before absolute ``index``."""
        cut = min(max(index - self.base, 0), self.samples.shape[0])
        if cut:
            self.samples = self.samples[cut:]
            self.base += cut

    def span(self, start: int, length: int, stop: int) -> npt.NDArray[np.float64]:
        """Absolute samples ``start .. start + length`` as float64, zero before 0 and
        from ``stop`` on."""
        out = np.zeros(length, dtype=np.float64)
        lo, hi = max(start, 0), min(start + length, stop)
        if hi > lo:
            out[lo - start : hi - start] = self.samples[lo - self.base : hi - self.base]
        return out


class FrameRows:
    """A sink's feature rows ``[shape=(capacity, width)]`` float32, grown as frames are
    computed: rows ``0 .. done`` hold values.

    The buffer grows to at least 256 rows and at least doubles, so a stream copies its
    frames a logarithmic number of times, and a batch ahead
    (:func:`~audiogate.streaming.buffer.planned_capacity`): a stream's last, partial
    batch and ``finish()`` do not grow and copy it; :meth:`take` hands the buffer
    itself over, cut in place to the clip's rows.

    :param width: values per row (mel bands).
    """

    __slots__ = ("_margin", "_rows", "done", "width")

    def __init__(self, width: int) -> None:
        self.width = width
        self._rows = np.empty((0, width), dtype=np.float32)
        self.done = 0  # rows computed
        self._margin = 0  # the most rows one grow() added

    @property
    def nbytes(self) -> int:
        """The buffer's bytes."""
        return int(self._rows.nbytes)

    def capacity_for(self, rows: int) -> int:
        """The buffer's rows once it holds ``rows`` rows (a bound)."""
        capacity = self._rows.shape[0]
        if rows <= self.done:
            return capacity
        return capacity_bound(
            capacity=capacity,
            size=self.done,
            stop=rows,
            margin=self._margin,
            minimum=256,
            first_ahead=256,
        )

    def planned_nbytes(self, rows: int) -> int:
        """:attr:`nbytes` once the buffer holds ``rows`` rows."""
        return self.capacity_for(rows) * self.width * F32_BYTES

    def grow(self, stop: int) -> npt.NDArray[np.float32]:
        """The buffer, grown to hold rows ``0 .. stop`` (rows ``0 .. done`` kept), for
        the caller to write rows into."""
        done = self.done
        if stop <= done:
            return self._rows
        capacity, self._margin = planned_capacity(
            capacity=self._rows.shape[0],
            size=done,
            stop=stop,
            margin=self._margin,
            minimum=256,
            first_ahead=256,
        )
        if capacity > self._rows.shape[0]:
            grown = np.empty((capacity, self.width), dtype=np.float32)
            grown[:done] = self._rows[:done]
            self._rows = grown
        return self._rows

    def take(self, count: int) -> npt.NDArray[np.float32]:
        """Rows ``0 .. count``: the buffer itself, cut to ``count`` rows in place (a
        ``realloc`` that shrinks, usually without a copy: the clip's bytes are its
        rows', with no spare capacity kept alive); the buffer is dropped."""
        rows = self._rows
        self._rows = np.empty((0, self.width), dtype=np.float32)
        self._margin = 0
        if count < rows.shape[0]:
            if rows.flags.owndata and rows.flags.c_contiguous:
                # No view of the buffer outlives a grow() caller's block.
                rows.resize((count, self.width), refcheck=False)
            else:
                rows = rows[:count].copy()
        return rows


class FramedSink:
    """The buffers of a :class:`FeatureSink` whose frames advance by a hop: the
    normalized waveform (``_waveform``, a :class:`~audiogate.streaming.buffer.
    GrowingArray`) and the feature rows (``_rows``, :class:`FrameRows`). A family's sink
    subclasses it and adds ``push`` (extend ``_waveform``, compute rows into ``_rows``)
    and its ``finish``.

    :param width: values per row.
    :param hop_samples: samples per frame hop (the rows a waveform length can give).
    """

    def __init__(self, *, width: int, hop_samples: int) -> None:
        self._waveform = GrowingArray(np.float32)
        self._rows = FrameRows(width)
        self._hop_samples = hop_samples

    @property
    def samples(self) -> int:
        """Normalized samples so far."""
        return len(self._waveform)

    @property
    def nbytes(self) -> int:
        """The waveform's and the rows' buffers."""
        return self._waveform.nbytes + self._rows.nbytes

    def planned_nbytes(self, samples: int) -> int:
        """:attr:`nbytes` once the waveform holds ``samples`` samples (a bound: one row per
        hop, and one more)."""
        rows = samples // self._hop_samples + 1
        return self._waveform.capacity_for(samples) * F32_BYTES + self._rows.planned_nbytes(rows)


SinkT = TypeVar("SinkT", bound=FeatureSink)
FeaturesT = TypeVar("FeaturesT", bound=ClipFeatures)


class BatchedFeatureStream(Generic[SinkT, FeaturesT]):
    """A :class:`~audiogate.streaming.stage.FeatureStream` of source batches through a
    :class:`SourceStream` into a :class:`FeatureSink`; subclasses give :meth:`features`.

    :param resampler: the clip's resampler as a stream.
    :param sink: the family's features computed as normalized samples arrive.
    :param probe: the resample plan the stream runs (probed at any length); ``finish``
        refuses a clip planned otherwise (algorithm, rates, :attr:`plan_detail_keys`).
    :param clip_index: for errors and cancellation.
    :param cancel: polled before every batch is resampled.
    """

    #: The family's name in errors.
    family: ClassVar[str] = "family"
    #: Keys of the resample plan's ``detail`` the whole clip's plan must share.
    plan_detail_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        resampler: SourceStream,
        sink: SinkT,
        *,
        probe: ResamplePlan,
        clip_index: int = 0,
        cancel: CancelToken = NEVER,
    ) -> None:
        self._resampler: SourceStream | None = resampler
        self._sink: SinkT | None = sink
        self._probe = probe
        self._clip_index = clip_index
        self._cancel = cancel
        self._waiting: list[npt.NDArray[np.float32]] = []
        self._waiting_frames = 0
        self._source_frames = 0
        self._batch_frames = batch_frames(probe.source_rate_hz)

    def _parts(self) -> tuple[SourceStream, SinkT]:
        if self._resampler is None or self._sink is None:
            raise RuntimeError(f"the {self.family} feature stream is closed")
        return self._resampler, self._sink

    @property
    def nbytes(self) -> int:
        """The sink's buffers, the resampler's source and the waiting batch."""
        if self._resampler is None or self._sink is None:
            return 0
        return self._sink.nbytes + self._resampler.nbytes + self._waiting_frames * F32_BYTES

    def planned_nbytes(self, more_frames: int) -> int:
        """:attr:`nbytes` after ``more_frames`` more source frames (a bound): the sink's
        growth, and every source frame not yet resampled."""
        resampler, sink = self._parts()
        out = resampler.output_bound(self._source_frames + more_frames) + 1
        # The resampler's kept source and the batch, twice while they are joined.
        source = resampler.nbytes + (self._waiting_frames + more_frames) * F32_BYTES
        return sink.planned_nbytes(out) + 2 * source

    def _flush(self) -> None:
        resampler, sink = self._parts()
        waiting = self._waiting
        batch = waiting[0] if len(waiting) == 1 else np.concatenate(waiting)
        self._waiting, self._waiting_frames = [], 0
        self._cancel.check(Checkpoint.RESAMPLE, self._clip_index)
        sink.push(resampler.push(batch))

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Take the next mono float32 source samples ``[shape=(k,)]``."""
        self._parts()
        block = np.asarray(samples, dtype=np.float32)
        if block.ndim != 1:
            raise ValueError(f"push() takes mono samples [shape=(k,)], not shape {block.shape}")
        if block.shape[0] == 0:
            return
        self._waiting.append(block)
        self._waiting_frames += block.shape[0]
        self._source_frames += block.shape[0]
        if self._waiting_frames >= self._batch_frames:
            self._flush()

    def _plan_mismatch(self, clip_plan: ClipPlan) -> str | None:
        resample, probe = clip_plan.resample, self._probe
        if (
            (resample.algorithm, resample.source_rate_hz, resample.output_rate_hz)
            == (probe.algorithm, probe.source_rate_hz, probe.output_rate_hz)
            and all(resample.detail.get(k) == probe.detail.get(k) for k in self.plan_detail_keys)
            and resample.source_samples == self._source_frames
            and clip_plan.normalized_samples == resample.output_samples
        ):
            return None
        return (
            f"{self.family} clip {self._clip_index} is planned as {resample.algorithm} "
            f"{resample.source_rate_hz} -> {resample.output_rate_hz} Hz over "
            f"{resample.source_samples} frames ({clip_plan.normalized_samples} of "
            f"{resample.output_samples} samples), streamed as {probe.algorithm} "
            f"{probe.source_rate_hz} -> {probe.output_rate_hz} Hz over "
            f"{self._source_frames} frames"
        )

    def finish(self, clip_plan: ClipPlan) -> tuple[npt.NDArray[np.float32], FeaturesT]:
        """The normalized waveform and the features of the clip ``clip_plan`` plans.

        :raises PluginError: the plan is not what the stream ran.
        """
        resampler, sink = self._parts()
        problem = self._plan_mismatch(clip_plan)
        if problem is not None:
            raise PluginError(problem)
        if self._waiting:
            self._flush()
        self._cancel.check(Checkpoint.RESAMPLE, self._clip_index)
        sink.push(resampler.finish())
        resample = clip_plan.resample
        extra = resample.output_samples - sink.samples
        if extra > 0 and resample.algorithm == "soxr_hq":
            sink.push(np.zeros(extra, dtype=np.float32))  # librosa's length
        return self.features(sink, clip_plan)

    def features(
        self, sink: SinkT, clip_plan: ClipPlan
    ) -> tuple[npt.NDArray[np.float32], FeaturesT]:
        """The sink's read-only waveform and features once every sample of the clip
        planned as ``clip_plan`` went in (the family's last step)."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop the source, the sink and the waiting batch (idempotent)."""
        self._resampler = self._sink = None
        self._waiting, self._waiting_frames = [], 0
