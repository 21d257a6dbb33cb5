"""A clip's frontend fed as its samples arrive: :func:`open_clip_stream`.

``push(samples)`` takes mono float32 PCM at the source rate (after the core's downmix),
in chunks of any size; ``finish()`` returns a :class:`StreamedClip` whose plan, waveform
and features are the whole-clip path's for the concatenated samples. Two frontends:

* :class:`IncrementalClipStream`: the family's own
  :class:`~audiogate.streaming.stage.FeatureStream` (its optional stage
  ``open_feature_stream``, :func:`audiogate.hookspecs.audiogate_open_feature_stream`)
  computes as samples arrive; ``finish()`` hands it the whole clip's plan and checks what
  it returns as the host checks ``extract_features``.
* :class:`AccumulatingClipStream` (a family that declares no stream or answers ``None``
  for this policy, and every truncating policy): keeps the bounded source waveform and
  runs the family's whole-clip stages at ``finish()``: exact by construction.

Both admit as they go (:class:`~audiogate.streaming.admission.StreamAdmission`: the
chunk that crosses a limit is refused with the whole clip's error) and hold their
buffers' bytes in an optional :class:`~audiogate.budget.ByteBudget`, grown chunk by chunk
and released exactly once: at ``finish()``, at a refusal, or at ``close()``
(cancellation, a client gone). A refused or closed stream takes nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.budget import BudgetHold, ByteBudget
from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.geometry import ClipGeometry
from audiogate.errors import AudioGateError, DecodeError, PluginError
from audiogate.host import FamilyHost
from audiogate.pipeline.plans import ClipPlan, RequestPlan
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, readonly
from audiogate.streaming.admission import StreamAdmission
from audiogate.streaming.buffer import GrowingArray
from audiogate.streaming.stage import SOURCE_BATCH_FRAMES, FeatureStream

__all__ = [
    "RESERVE_AHEAD_FRAMES",
    "SOURCE_BATCH_FRAMES",
    "AccumulatingClipStream",
    "ClipStream",
    "IncrementalClipStream",
    "StreamedClip",
    "open_clip_stream",
]

_R = TypeVar("_R")

#: Source frames reserved ahead of those received (341 ms at 48 kHz): the budget is
#: taken once every few 20 ms chunks, not at each (a stream may be refused for bytes
#: up to this much early; admission's limits are exact).
RESERVE_AHEAD_FRAMES: Final = 16384


@attrs.frozen(kw_only=True)
class StreamedClip:
    """What a finished stream made: the whole clip's admission and its stages' results.

    :param plan: the request plan of this one clip (as :func:`~audiogate.pipeline.
        preflight.preflight` makes it for the whole clip).
    :param waveform: the normalized waveform, read-only float32 ``[shape=(normalized,)]``.
    :param features: the family's features, as its ``extract_features`` returns them.
    :param incremental: computed as samples arrived (``False``: at ``finish()``).
    """

    plan: RequestPlan
    waveform: npt.NDArray[np.float32] = attrs.field(repr=False, eq=False)
    features: ClipFeatures = attrs.field(repr=False, eq=False)
    incremental: bool

    @property
    def clip_plan(self) -> ClipPlan:
        """The clip's plan."""
        return self.plan.clips[0]


class ClipStream(Protocol):
    """One clip's streaming frontend."""

    @property
    def frames(self) -> int:
        """Source frames received so far."""

    @property
    def held_bytes(self) -> int:
        """Bytes held in the budget now."""

    @property
    def admitted_ahead(self) -> int:
        """Frames :meth:`admit` takes from now on without a check (admitted and
        reserved already; 0 once finished or closed)."""

    def admit(self, frames: int) -> None:
        """Admit ``frames`` more source frames before their samples are pushed."""

    def push(self, samples: npt.ArrayLike) -> None:
        """Add mono float32 samples at the source rate ``[shape=(k,)]``."""

    def finish(self) -> StreamedClip:
        """The clip's result; releases the stream's bytes."""

    def close(self) -> None:
        """Abandon the stream (idempotent); releases its bytes."""


class _BaseStream:
    """Admission, the reservation and the life cycle the two frontends share."""

    def __init__(
        self,
        host: FamilyHost,
        policy: AudioPolicy,
        admission: StreamAdmission,
        *,
        budget: ByteBudget | None,
        cancel: CancelToken,
        clip_index: int,
    ) -> None:
        self._host = host
        self._policy = policy
        self._admission = admission
        self._hold: BudgetHold | None = budget.hold() if budget is not None else None
        self._cancel = cancel
        self._clip_index = clip_index
        self._frames = 0
        self._announced = 0  # frames admitted: pushed, or announced by admit()
        self._reserved = 0  # frames the reservation covers
        self._nonzero = False
        self._done = False
        # A transport admits chunks on its loop while a thread pushes earlier batches:
        # a reservation (which reads the family's buffers) waits for the push in flight.
        self._guard = threading.RLock()

    @property
    def frames(self) -> int:
        return self._frames

    @property
    def held_bytes(self) -> int:
        return 0 if self._hold is None else self._hold.nbytes

    @property
    def admitted_ahead(self) -> int:
        return 0 if self._done else self._reserved - self._announced

    def _nbytes(self) -> int:
        raise NotImplementedError

    def _drop(self) -> None:
        raise NotImplementedError

    def _take(self, nbytes: int) -> None:
        """Grow the reservation to ``nbytes`` (what the buffers hold, or will)."""
        if self._hold is not None and nbytes > self._hold.nbytes:
            self._hold.take(nbytes - self._hold.nbytes)

    def close(self) -> None:
        with self._guard:
            if self._done:
                return
            self._done = True
            self._drop()
            if self._hold is not None:
                self._hold.release()

    def admit(self, frames: int) -> None:
        """Admit ``frames`` more source frames ahead of their samples: a transport that
        decodes in batches announces each chunk's frames as it arrives, so the chunk that
        crosses a limit is refused at once. O(1): one integer comparison, and every
        :data:`RESERVE_AHEAD_FRAMES` frames a cancellation poll, admission's check and a
        budget take.

        :raises LimitError: the stream crossed a limit (the stream is closed).
        :raises MemoryLimitError: its bytes do not fit the budget (closed).
        :raises PreprocessCancelled: the token was cancelled (closed).
        """
        total = self._announced + frames
        if total <= self._reserved and not self._done:
            # Admitted and reserved already (the reservation never passes admission's
            # bound); the transport polls the token at every chunk.
            self._announced = total
            return
        with self._guard:
            if self._done:
                raise RuntimeError("admit() or push() on a finished or closed stream")
            try:
                self._cancel.check(Checkpoint.DECODE, self._clip_index)
                self._admission.admit(total)
                if total > self._reserved:
                    ahead = total + RESERVE_AHEAD_FRAMES
                    bound = self._admission.max_frames
                    if bound is not None:
                        ahead = max(total, min(ahead, bound))
                    self._take(self._planned_nbytes(ahead - self._frames))
                    self._reserved = ahead
            except BaseException:
                self.close()
                raise
            self._announced = total

    def _accept(self, samples: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Check and count one chunk: open, admitted (now, unless :meth:`admit` did),
        reservable."""
        if self._done:
            raise RuntimeError("push() on a finished or closed stream")
        block = np.asarray(samples, dtype=np.float32)
        if block.ndim != 1:
            raise ValueError(f"push() takes mono samples [shape=(k,)], not shape {block.shape}")
        count = block.shape[0]
        try:
            self._cancel.check(Checkpoint.DECODE, self._clip_index)
        except BaseException:
            self.close()
            raise
        if self._frames + count > self._announced:
            self.admit(self._frames + count - self._announced)
        self._frames += count
        self._nonzero = self._nonzero or bool(block.any())
        return block

    def _planned_nbytes(self, more: int) -> int:
        raise NotImplementedError

    def _admitted(self) -> RequestPlan:
        """The whole clip's admission at its final length, and the all-zero refusal."""
        plan = self._admission.plan(self._frames)
        if self._policy.refuse_all_zero and not self._nonzero:
            raise DecodeError(
                f"every one of its {self._frames} decoded samples is exactly 0.0",
                clip_index=self._clip_index,
                code="all_zero",
            )
        return plan

    def finish(self) -> StreamedClip:
        if self._done:
            raise RuntimeError("finish() on a finished or closed stream")
        try:
            self._cancel.check(Checkpoint.FEATURE, self._clip_index)
            return self._finish()
        finally:
            self.close()

    def _finish(self) -> StreamedClip:
        raise NotImplementedError


class AccumulatingClipStream(_BaseStream):
    """The generic frontend: the source waveform is kept (within admission's bound) and
    the family's whole-clip stages run at :meth:`finish`."""

    def __init__(
        self,
        host: FamilyHost,
        policy: AudioPolicy,
        admission: StreamAdmission,
        *,
        budget: ByteBudget | None = None,
        cancel: CancelToken = NEVER,
        clip_index: int = 0,
    ) -> None:
        super().__init__(
            host, policy, admission, budget=budget, cancel=cancel, clip_index=clip_index
        )
        self._source = GrowingArray(np.float32)
        # A truncating policy decodes only a prefix of a long clip: keep just that.
        self._keep: int | None = None
        if admission.max_frames is None:
            self._keep = admission.plan(1 << 40).clips[0].decode_geometry.frames

    def _kept(self, frames: int) -> int:
        return frames if self._keep is None else min(frames, self._keep)

    def _planned_nbytes(self, more: int) -> int:
        kept = self._kept(self._frames + more)
        return self._source.capacity_for(kept) * 4

    def _drop(self) -> None:
        self._source = GrowingArray(np.float32)

    def push(self, samples: npt.ArrayLike) -> None:
        """Add mono float32 samples at the source rate ``[shape=(k,)]``.

        :raises LimitError: the stream crossed a limit (the stream is closed).
        :raises MemoryLimitError: its bytes do not fit the budget (closed).
        :raises PreprocessCancelled: the token was cancelled (closed).
        """
        with self._guard:
            block = self._accept(samples)
            room = self._kept(self._frames) - len(self._source)
            if room > 0:
                self._source.extend(block[:room] if room < block.shape[0] else block)

    def _finish(self) -> StreamedClip:
        plan = self._admitted()
        clip_plan = plan.clips[0]
        index = self._clip_index
        source = self._source.view()[: clip_plan.decode_geometry.frames]
        normalized = self._host.resample(
            self._policy, clip_plan.resample, source, clip_index=index, cancel=self._cancel
        )
        if normalized.shape[0] != clip_plan.normalized_samples:
            normalized = readonly(np.array(normalized[: clip_plan.normalized_samples]))
        self._cancel.check(Checkpoint.FEATURE, index)
        features = self._host.extract_features(
            self._policy,
            clip_plan.features,
            normalized,
            rate_hz=clip_plan.resample.output_rate_hz,
            clip_index=index,
            cancel=self._cancel,
        )
        return StreamedClip(plan=plan, waveform=normalized, features=features, incremental=False)


class IncrementalClipStream(_BaseStream):
    """The incremental frontend: the family's :class:`~audiogate.streaming.stage.
    FeatureStream` computes as samples arrive; this class admits, reserves and closes."""

    def __init__(
        self,
        host: FamilyHost,
        policy: AudioPolicy,
        admission: StreamAdmission,
        stream: FeatureStream,
        *,
        budget: ByteBudget | None = None,
        cancel: CancelToken = NEVER,
        clip_index: int = 0,
    ) -> None:
        super().__init__(
            host, policy, admission, budget=budget, cancel=cancel, clip_index=clip_index
        )
        self._stream = stream

    def _planned_nbytes(self, more: int) -> int:
        return self._family_call("planned_nbytes", self._stream.planned_nbytes, more)

    def _drop(self) -> None:
        self._stream.close()

    def _family_call(self, what: str, function: Callable[..., _R], *args: Any) -> _R:
        """Call the family's stream: an audiogate error passes through, anything else
        becomes a :class:`PluginError` naming the family (the stream is closed)."""
        try:
            return function(*args)
        except AudioGateError:
            raise
        except Exception as exc:
            raise PluginError(
                f"family {self._policy.family!r} raised {type(exc).__name__} in its feature "
                f"stream's {what}: {exc}"
            ) from exc

    def push(self, samples: npt.ArrayLike) -> None:
        """Add mono float32 samples at the source rate ``[shape=(k,)]``.

        :raises LimitError: the stream crossed a limit (the stream is closed).
        :raises MemoryLimitError: its bytes do not fit the budget (closed).
        :raises PreprocessCancelled: the token was cancelled (closed).
        """
        with self._guard:
            block = self._accept(samples)
            try:
                self._family_call("push", self._stream.push, block)
            except BaseException:
                self.close()
                raise

    def _finish(self) -> StreamedClip:
        plan = self._admitted()
        clip_plan = plan.clips[0]
        waveform, features = self._family_call("finish", self._stream.finish, clip_plan)
        self._host.check_features(
            self._policy, clip_plan.features, features, clip_index=self._clip_index
        )
        if waveform.shape != (clip_plan.normalized_samples,):
            raise PluginError(
                f"family {self._policy.family!r}'s feature stream made a waveform of shape "
                f"{waveform.shape}, planned ({clip_plan.normalized_samples},)"
            )
        return StreamedClip(plan=plan, waveform=waveform, features=features, incremental=True)


def open_clip_stream(
    host: FamilyHost,
    policy: AudioPolicy,
    header: ClipGeometry,
    *,
    budget: ByteBudget | None = None,
    cancel: CancelToken = NEVER,
    clip_index: int = 0,
    incremental: bool = True,
) -> ClipStream:
    """A streaming frontend for one clip whose header (format, rate, channels) is known.

    :param header: the clip's geometry at any length (a raw declaration's, or a WAV
        header's); admission uses its rate, channels, encoding and bytes per frame.
    :param budget: where the stream's bytes are held while it runs (optional).
    :param cancel: polled at every chunk and inside the frontend.
    :param incremental: ``False``: the accumulating frontend even where an incremental
        one exists.
    :raises DecodeError: the source rate is not admitted.
    :raises LimitError: the rate or channels are over their caps.
    """
    admission = StreamAdmission(host, policy, header, clip_index=clip_index)
    # A truncating policy keeps only a prefix of the clip: accumulate it.
    if incremental and admission.max_frames is not None:
        probe = host.plan_resample(
            policy,
            source_rate_hz=header.rate_hz,
            source_samples=header.rate_hz,
            clip_index=clip_index,
        )
        stream = host.open_feature_stream(
            policy,
            source_rate_hz=header.rate_hz,
            resample=probe,
            clip_index=clip_index,
            cancel=cancel,
        )
        if stream is not None:
            return IncrementalClipStream(
                host, policy, admission, stream, budget=budget, cancel=cancel, clip_index=clip_index
            )
    return AccumulatingClipStream(
        host, policy, admission, budget=budget, cancel=cancel, clip_index=clip_index
    )
