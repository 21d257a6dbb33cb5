"""A submitted request: its inputs, what it holds, and its result."""

from __future__ import annotations

import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import CancelToken
from audiogate.metrics import OutcomeRecord
from audiogate.pipeline import PreparedBatch, RequestPlan
from audiogate.policy import AudioPolicy
from audiogate.worker.reservations import Reservation

__all__ = ["AudioJob", "Finish", "Finished", "Holdings", "Slot"]

T = TypeVar("T")


@attrs.frozen
class Finished(Generic[T]):
    """What a ``finish`` callback may return to state the request's prefill length.

    :param value: the job's result.
    :param prefill_tokens: the prepared prefill length the metrics record (the expanded
        prompt's); ``None``: the request's audio tokens.
    """

    value: T
    prefill_tokens: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )


#: ``finish(batch)`` runs in the worker after the features (prompt expansion, ...); its
#: return value is the job's result, or a :class:`Finished` whose ``value`` is, with the
#: prefill length to record (the audio token count otherwise). It may raise
#: ``ContextLimitError``.
Finish = Callable[[PreparedBatch], Any]


class Slot:
    """A result-channel slot taken by a running job, freed once at hand-off."""

    def __init__(self, semaphore: threading.Semaphore) -> None:
        self._semaphore = semaphore
        self._lock = threading.Lock()
        self._held = True

    def free(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._semaphore.release()


class Holdings:
    """What a job holds until hand-off; released once, also by the job's finalizer."""

    def __init__(self, reservation: Reservation) -> None:
        self.reservation = reservation
        self.slot: Slot | None = None

    def release(self) -> None:
        if self.slot is not None:
            self.slot.free()
        self.reservation.release()


class AudioJob(Generic[T]):
    """A submitted request. Take its result with :meth:`result` (this hands it off)."""

    def __init__(
        self,
        *,
        policy: AudioPolicy,
        plan: RequestPlan,
        clips: Sequence[EncodedClip],
        finish: Finish | None,
        cancel: CancelToken,
        holdings: Holdings,
    ) -> None:
        self.policy = policy
        self.plan = plan
        self.clips = tuple(clips)
        self.finish = finish
        self.cancel_token = cancel
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._holdings = holdings
        self._handed_off = False
        #: The request's record when its owner counts a success (``defer_completion``).
        self._outcome: OutcomeRecord | None = None
        #: Whether the job waits in its worker's queue (guarded by the worker's lock).
        self._queued = False
        #: Unregisters the worker's cancel callback once the job has left the queue.
        self._unwatch: Callable[[], None] | None = None
        #: A call job's work (``AudioWorker.submit_call``): run instead of the audio
        #: stages, and counted by its owner, not the worker.
        self._work: Callable[[], Any] | None = None
        # A consumer that went away without taking the result still releases everything.
        self._finalizer = weakref.finalize(self, holdings.release)

    @property
    def reservation(self) -> Reservation:
        """The job's byte reservation."""
        return self._holdings.reservation

    def cancel(self) -> None:
        """Cancel: a queued job is withdrawn at once (its reservation released, its result
        :class:`PreprocessCancelled`); a running one stops at its next checkpoint.

        Cancelling the job's token directly does the same."""
        self.cancel_token.cancel()

    def done(self) -> bool:
        """Whether the job has finished (successfully or not)."""
        return self.future.done()

    def result(self, timeout: float | None = None) -> T:
        """Wait for the result and take it, releasing the reservation and result slot.

        :raises AudioGateError: the typed error the job failed with.
        :raises TimeoutError: ``timeout`` seconds passed first.
        """
        try:
            value = self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"audio job not finished after {timeout} s") from None
        finally:
            if self.future.done():
                self._hand_off()
            # A raised error's traceback keeps this frame, and the future keeps the error:
            # without ``self`` here, that is no cycle holding the job and its clips until
            # the garbage collector runs.
            del self
        return value

    def _hand_off(self) -> None:
        self._handed_off = True
        self._finalizer()
