"""A queued request: what the worker runs (a :class:`WorkerTask`), what the job holds
(its byte reservation and, while it runs, a result slot), and its result."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs

from audiogate.acquire.clip import EncodedClip
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import AudioGateError, PluginError
from audiogate.metrics import Completed
from audiogate.pipeline import PreparedBatch, RequestPlan
from audiogate.policy import AudioPolicy
from audiogate.worker.reservations import Reservation

if TYPE_CHECKING:
    from audiogate.worker.pool import AudioWorker

__all__ = ["AudioJob", "ClipsTask", "Finish", "Finished", "WorkerTask"]

T = TypeVar("T")


class WorkerTask(Protocol):
    """What a worker thread runs: a :class:`~audiogate.request.Request` (its CPU step),
    or one of the worker's own tasks (:meth:`AudioWorker.submit`'s clips,
    :meth:`AudioWorker.submit_call`'s call)."""

    @property
    def policy(self) -> AudioPolicy: ...

    @property
    def cancel(self) -> CancelToken: ...

    def reserved_bytes(self) -> tuple[int, int]:
        """``(encoded, host)`` bytes to reserve while it waits and runs."""
        ...

    def compute(self, worker: AudioWorker | None = None) -> Any:
        """The work, on ``worker``'s thread; returns the job's value."""
        ...


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


@attrs.define
class ClipsTask:
    """Clips alone, preflighted (:meth:`AudioWorker.submit`): the worker counts its
    outcome, and runs ``finish`` on the batch."""

    policy: AudioPolicy
    plan: RequestPlan
    clips: Sequence[EncodedClip]
    cancel: CancelToken
    finish: Finish | None = None
    extra_host_bytes: int = 0
    #: Set once it completed: what the metrics record.
    completed: Completed | None = None

    counted_by_worker = True

    def reserved_bytes(self) -> tuple[int, int]:
        return self.plan.encoded_bytes, self.plan.host_bytes + self.extra_host_bytes

    def compute(self, worker: AudioWorker | None = None) -> Any:
        from audiogate.request import process_planned

        assert worker is not None
        started = time.perf_counter()
        batch = process_planned(
            worker.host,
            self.plan,
            self.clips,
            cancel=self.cancel,
            cache=worker.feature_cache,
            worker=worker,
        )
        value: Any = batch
        prefill: int | None = None
        if self.finish is not None:
            try:
                value = self.finish(batch)
            except AudioGateError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"finishing the {self.policy.family!r} request raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if isinstance(value, Finished):
                value, prefill = value.value, value.prefill_tokens
            # A client gone while its prompt was expanded is cancelled, not completed.
            self.cancel.check(Checkpoint.FEATURE)
        self.completed = Completed(
            latency_seconds=time.perf_counter() - started,
            prefill_tokens=batch.totals.tokens if prefill is None else prefill,
        )
        return value


@attrs.define
class CallTask:
    """CPU work that is not audio (:meth:`AudioWorker.submit_call`); its owner counts it."""

    policy: AudioPolicy
    work: Callable[[], Any]
    cancel: CancelToken
    host_bytes: int

    def reserved_bytes(self) -> tuple[int, int]:
        return 0, self.host_bytes

    def compute(self, worker: AudioWorker | None = None) -> Any:
        return self.work()


class _Held:
    """What a job holds until hand-off: its reservation and (while it runs) a result
    slot; released once, also by the job's finalizer."""

    def __init__(self, reservation: Reservation) -> None:
        self.reservation = reservation
        self.slot: threading.Semaphore | None = None
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            slot, self.slot = self.slot, None
        if slot is not None:
            slot.release()
        self.reservation.release()


class AudioJob(Generic[T]):
    """A submitted request. Take its result with :meth:`result` (this hands it off)."""

    def __init__(self, *, task: WorkerTask, reservation: Reservation) -> None:
        self.task = task
        self.policy = task.policy
        self.cancel_token = task.cancel
        self.future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._held = _Held(reservation)
        self._handed_off = False
        #: Whether the job waits in its worker's queue (guarded by the worker's lock).
        self._queued = False
        #: Unregisters the worker's cancel callback once the job has left the queue.
        self._unwatch: Callable[[], None] | None = None
        # A consumer that went away without taking the result still releases everything.
        self._finalizer = weakref.finalize(self, self._held.release)

    @property
    def counted_by_worker(self) -> bool:
        """Whether the worker counts this job's outcome (else its owner does)."""
        return bool(getattr(self.task, "counted_by_worker", False))

    @property
    def reservation(self) -> Reservation:
        """The job's byte reservation."""
        return self._held.reservation

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

    def release_when_done(self) -> None:
        """Release what the job holds as soon as it has ended (now, if it has): for an
        owner that stops waiting for it."""
        self.future.add_done_callback(_Release(self._finalizer))

    def _hold_slot(self, slot: threading.Semaphore) -> None:
        """The result slot a worker thread took for this job, freed at hand-off."""
        self._held.slot = slot
        if not self._finalizer.alive:
            self._held.release()  # handed off already (its future was cancelled and taken)

    def _hand_off(self) -> None:
        self._handed_off = True
        self._finalizer()


class _Release:
    # A done callback that holds the finalizer, not the job (a cancelled task's
    # traceback may outlive the job).
    def __init__(self, finalizer: weakref.finalize) -> None:  # type: ignore[type-arg]
        self._finalizer = finalizer

    def __call__(self, _future: object) -> None:
        self._finalizer()
