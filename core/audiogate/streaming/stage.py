"""What a family's streaming stage returns: a :class:`FeatureStream`, and the pieces a
family builds one from.

A family streams by declaring the stage ``open_feature_stream`` (the hook
:func:`audiogate.hookspecs.audiogate_open_feature_stream`; in a package laid out for
:func:`audiogate.package_stages`, the function ``streaming.open_feature_stream``). The
core frontend (:func:`audiogate.streaming.frontend.open_clip_stream`) keeps admission,
the byte reservation and the life cycle; the family's stream only computes:

* :meth:`FeatureStream.push` takes each chunk of mono float32 source-rate samples, after
  the core admitted it and reserved :meth:`FeatureStream.planned_nbytes`;
* :meth:`FeatureStream.finish` takes the whole clip's plan and returns the normalized
  waveform and the features, which must equal the family's ``resample`` then
  ``extract_features`` of the concatenated samples (bit for bit where the math allows;
  the host checks the shapes and counts as it checks ``extract_features``);
* :meth:`FeatureStream.close` drops what it holds (called on every path, also after
  ``finish``).

:class:`SourceResampler` is the resampling half most families share: the identity or
soxr HQ run as one stream, fed in batches of :data:`SOURCE_BATCH_FRAMES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from audiogate.records import ClipFeatures, ResamplePlan
from audiogate.resample.soxr_hq import SoxrStream

if TYPE_CHECKING:  # the host imports this module; the pipeline imports the host
    from audiogate.pipeline.plans import ClipPlan

__all__ = [
    "INCREMENTAL_RESAMPLERS",
    "SOURCE_BATCH_FRAMES",
    "FeatureStream",
    "SourceResampler",
    "batch_frames",
    "open_source_resampler",
]

#: Resample plans :class:`SourceResampler` reproduces: the identity, and soxr HQ run as
#: one stream (``"soxr_hq"``: padded with zeros to librosa's length at the end;
#: ``"soxr_hq_native"``: soxr's own length), whose output does not depend on the split.
INCREMENTAL_RESAMPLERS: Final = frozenset({"identity", "soxr_hq", "soxr_hq_native"})

#: The most source frames gathered before one resampler call (683 ms at 48 kHz; half a
#: second at most rates, :func:`batch_frames`): soxr's per-call cost, and the thread hop
#: the transport makes per batch, dominate small batches; soxr's output does not depend
#: on the split.
SOURCE_BATCH_FRAMES: Final = 32768


def batch_frames(rate_hz: int) -> int:
    """Source frames worth one batch at ``rate_hz``: half a second, at least
    1,024 and at most :data:`SOURCE_BATCH_FRAMES` (what a stream's ``finish()`` may have
    left to resample, and what per-call costs are spread over)."""
    return min(SOURCE_BATCH_FRAMES, max(1024, rate_hz // 2))


@runtime_checkable
class FeatureStream(Protocol):
    """One clip's features computed as its samples arrive (a family's streaming stage).

    Every method is called from one thread at a time; ``push`` only after the core
    admitted the chunk and reserved :meth:`planned_nbytes` for it.
    """

    @property
    def nbytes(self) -> int:
        """Bytes the stream holds now."""

    def planned_nbytes(self, more_frames: int) -> int:
        """Bytes the stream will hold once ``more_frames`` more source frames are pushed
        (a bound: the core reserves it before :meth:`push`)."""

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Take the next read-only mono float32 source-rate samples ``[shape=(k,)]``."""

    def finish(self, clip_plan: ClipPlan) -> tuple[npt.NDArray[np.float32], ClipFeatures]:
        """The normalized waveform ``[shape=(clip_plan.normalized_samples,)]`` and the
        features of the clip planned as ``clip_plan`` (the whole clip's admission),
        equal to ``resample`` then ``extract_features`` of the concatenated samples.

        :raises PluginError: the stream cannot produce that plan.
        """

    def close(self) -> None:
        """Drop everything held (idempotent; also called after :meth:`finish`)."""


class SourceResampler:
    """A clip's resampling as one stream: the identity or soxr HQ, fed in batches.

    Build one with :func:`open_source_resampler`. Source samples wait until
    :func:`batch_frames` of the rate are gathered; :meth:`push` returns the output that
    became available (often none), :meth:`finish` the rest.

    :param resample: the plan probed for the stream's source rate (any length).
    """

    __slots__ = ("_batch", "_count", "_plan", "_resampler", "_waiting", "_waiting_frames")

    def __init__(self, resample: ResamplePlan) -> None:
        if resample.algorithm not in INCREMENTAL_RESAMPLERS:
            raise ValueError(f"resampler {resample.algorithm!r} does not stream")
        self._plan = resample
        self._resampler = (
            None
            if resample.algorithm == "identity"
            else SoxrStream(in_rate_hz=resample.source_rate_hz, out_rate_hz=resample.output_rate_hz)
        )
        self._waiting: list[npt.NDArray[np.float32]] = []
        self._waiting_frames = 0
        self._count = 0
        self._batch = batch_frames(resample.source_rate_hz)

    @property
    def waiting_frames(self) -> int:
        """Source frames not yet resampled."""
        return self._waiting_frames

    @property
    def source_frames(self) -> int:
        """Source frames pushed so far."""
        return self._count

    def output_bound(self, source_frames: int) -> int:
        """At most how many samples ``source_frames`` frames resample to (one more than
        the rate ratio's ceiling: the filter's rounding)."""
        plan = self._plan
        return -(-source_frames * plan.output_rate_hz // plan.source_rate_hz) + 1

    def matches(self, resample: ResamplePlan) -> bool:
        """Whether the whole clip's plan is the one this stream runs."""
        probe = self._plan
        return (
            resample.algorithm == probe.algorithm
            and resample.source_rate_hz == probe.source_rate_hz
            and resample.output_rate_hz == probe.output_rate_hz
        )

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32] | None:
        """Take source samples ``[shape=(k,)]``; the output that became available, or
        ``None`` while the batch is still gathering."""
        self._count += samples.shape[0]
        self._waiting.append(samples)
        self._waiting_frames += samples.shape[0]
        if self._waiting_frames < self._batch:
            return None
        return self._flush()

    def _flush(self) -> npt.NDArray[np.float32]:
        waiting = self._waiting
        batch = waiting[0] if len(waiting) == 1 else np.concatenate(waiting)
        self._waiting, self._waiting_frames = [], 0
        return batch if self._resampler is None else self._resampler.feed(batch)

    def finish(self) -> npt.NDArray[np.float32]:
        """The remaining output: the waiting batch and the filter's tail (soxr's own
        length; a ``"soxr_hq"`` plan's zero padding is the caller's, to the plan)."""
        out = self._flush() if self._waiting else np.empty(0, dtype=np.float32)
        if self._resampler is None:
            return out
        tail = self._resampler.finish()
        return tail if out.shape[0] == 0 else np.concatenate([out, tail])

    def close(self) -> None:
        """Drop the waiting samples and the filter."""
        self._waiting, self._waiting_frames = [], 0
        self._resampler = None


def open_source_resampler(resample: ResamplePlan) -> SourceResampler | None:
    """A :class:`SourceResampler` for ``resample``, or ``None`` where its algorithm does
    not stream (not in :data:`INCREMENTAL_RESAMPLERS`)."""
    if resample.algorithm not in INCREMENTAL_RESAMPLERS:
        return None
    return SourceResampler(resample)
