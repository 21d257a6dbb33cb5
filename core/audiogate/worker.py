"""The bounded host worker for servers: admission, reservations, backpressure, metrics.

One :class:`Reservation` owns a request's encoded and host bytes from queue admission
until its result is handed off (or the request fails, is cancelled, is refused, the
worker shuts down, or the job is garbage-collected) and releases them exactly once.
The job queue is bounded (``queue_depth``) and so is the result channel
(``result_depth``): a worker does not start a job while ``result_depth`` finished
results wait for their consumers, so a stalled consumer backpressures production
instead of accumulating prepared tensors. Only live jobs wait in the queue: a job
cancelled while queued is withdrawn at once (its reservation and queue slot freed) and
never starts.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Generic, TypeVar

import attrs

from audiogate.cancel import CancelToken, Checkpoint, cancellable
from audiogate.errors import (
    AudioGateError,
    MemoryLimitError,
    PluginError,
    PreprocessCancelled,
    QueueFullError,
    SizeOverflowError,
    WorkerUnavailableError,
    clear_frames,
)
from audiogate.host import FamilyHost
from audiogate.metrics import REJECTION_REASONS, AudioMetrics
from audiogate.pipeline import EncodedClip, PreparedBatch, RequestPlan, preflight, process_request
from audiogate.policy import AudioPolicy

__all__ = [
    "AudioJob",
    "AudioWorker",
    "OutcomeRecord",
    "Reservation",
    "WorkerLimits",
    "outcome_scope",
    "rejection_reason",
]

MIB: Final = 1 << 20
T = TypeVar("T")
#: How often a thread waiting for a result slot looks at the closed flag.
_POLL_SECONDS: Final = 0.05

#: ``finish(batch)`` runs in the worker after the features (prompt expansion, ...); its
#: return value is the job's result. It may raise ``ContextLimitError``. If the value has a
#: ``prefill_positions`` attribute (an int), that is the prefill length recorded in the
#: metrics; otherwise the audio token count is.
Finish = Callable[[PreparedBatch], Any]


@attrs.frozen(kw_only=True)
class WorkerLimits:
    """Capacities of a worker; all configurable.

    :param queue_depth: jobs waiting for a worker thread.
    :param result_depth: finished results waiting for their consumers.
    :param max_queued_encoded_bytes: encoded bytes held by queued, running and handed-off jobs.
    :param max_inflight_host_bytes: planned host bytes held likewise.
    :param threads: worker threads.
    """

    queue_depth: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    result_depth: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    max_queued_encoded_bytes: int = attrs.field(default=512 * MIB, validator=attrs.validators.ge(1))
    max_inflight_host_bytes: int = attrs.field(default=1280 * MIB, validator=attrs.validators.ge(1))
    threads: int = attrs.field(default=1, validator=attrs.validators.ge(1))


@attrs.define
class OutcomeRecord:
    """Whether one request's outcome is recorded in the metrics (exactly once).

    The worker records a request from its admission on (:meth:`AudioWorker.submit` marks
    the record of the calling context); whoever ends a request before that records it
    (:meth:`audiogate.api.AudioGate.prepare_async`, the reference server), unless the
    record says it is done. ``active`` is false once its scope has ended: asyncio
    callbacks can carry a context into later requests (uvicorn resumes reading a
    connection from inside a request), and a stale record must not be reused.

    ``defer_completion`` is for an owner with a step left after the worker's result (the
    reference server admits the answer into its body budget, which may refuse it, or the
    client may leave while it waits): the worker then leaves a success to the owner
    (:meth:`offer_completion`), whose :meth:`settle` counts it as completed or as the
    failure the request was answered with. Failures the worker still counts itself.
    """

    recorded: bool = False
    active: bool = True
    defer_completion: bool = False
    # The worker's success, not yet counted; what the owner settled with, if first.
    _completion: Callable[[], None] | None = attrs.field(default=None, init=False)
    _settled: bool = attrs.field(default=False, init=False)
    _failure: Callable[[], None] | None = attrs.field(default=None, init=False)
    # The worker offers from its thread; the owner settles on the event loop.
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False, eq=False)

    def offer_completion(self, completed: Callable[[], None]) -> None:
        """The worker's success of a deferred request: kept for :meth:`settle`, or, if the
        owner settled first (its client left while the job ran), counted as it said."""
        with self._lock:
            if not self._settled:
                self._completion = completed
                return
            failure = self._failure
        if failure is not None:
            failure()

    def settle(self, failure: Callable[[], None] | None) -> None:
        """End the request (once): ``None`` after a successful answer, else how to count
        the failure it was answered with. A success the worker left is counted as
        completed, or replaced by ``failure``; a request the worker counts (its own
        failure, or ``failure`` once a still running job ends) is not counted here."""
        with self._lock:
            if self._settled:
                return
            self._settled = True
            completed, self._completion = self._completion, None
            count: Callable[[], None] | None
            if completed is not None:
                count = completed if failure is None else failure
            elif self.recorded:
                self._failure = failure
                return
            else:
                self.recorded = True
                count = failure
        if count is not None:
            count()


_OUTCOME: contextvars.ContextVar[OutcomeRecord | None] = contextvars.ContextVar(
    "audiogate_request_outcome", default=None
)


@contextlib.contextmanager
def outcome_scope(*, fresh: bool = False) -> Iterator[OutcomeRecord]:
    """The calling context's active request record, or a new one for the block.

    :param fresh: always start a new record (a server's request handler: a request's
        record must never be one inherited from another request).
    """
    record = _OUTCOME.get()
    if record is not None and record.active and not fresh:
        yield record
        return
    record = OutcomeRecord()
    token = _OUTCOME.set(record)
    try:
        yield record
    finally:
        record.active = False
        _OUTCOME.reset(token)


def rejection_reason(error: BaseException) -> str:
    """The metrics reason a failure is counted under: ``feature_panic`` if unexpected,
    also for an error class of a plugin's own with a reason the metrics do not know."""
    if isinstance(error, AudioGateError) and error.reason in REJECTION_REASONS:
        return error.reason
    return "feature_panic"


class _Ledger:
    """Current reservation totals, updated atomically; publishes the gauges."""

    def __init__(self, limits: WorkerLimits, metrics: AudioMetrics | None) -> None:
        self._limits = limits
        self._metrics = metrics
        self._lock = threading.Lock()
        self.encoded = 0
        self.host = 0

    def reserve(self, encoded: int, host: int) -> Reservation:
        with self._lock:
            if self.encoded + encoded > self._limits.max_queued_encoded_bytes:
                raise MemoryLimitError(
                    "queued encoded bytes",
                    actual=self.encoded + encoded,
                    maximum=self._limits.max_queued_encoded_bytes,
                )
            if self.host + host > self._limits.max_inflight_host_bytes:
                raise MemoryLimitError(
                    "in-flight host bytes",
                    actual=self.host + host,
                    maximum=self._limits.max_inflight_host_bytes,
                )
            self.encoded += encoded
            self.host += host
            self._publish()
        return Reservation(self, encoded, host)

    def _release(self, encoded: int, host: int) -> None:
        with self._lock:
            self.encoded -= encoded
            self.host -= host
            self._publish()

    def _publish(self) -> None:
        if self._metrics is not None:
            self._metrics.set_gauges(queued_bytes=self.encoded, inflight_host_bytes=self.host)


class Reservation:
    """Encoded and host bytes held for one request; :meth:`release` works exactly once."""

    def __init__(self, ledger: _Ledger, encoded: int, host: int) -> None:
        self.encoded_bytes = encoded
        self.host_bytes = host
        self._ledger = ledger
        self._lock = threading.Lock()
        self._released = False

    @property
    def released(self) -> bool:
        """Whether the bytes have been given back."""
        return self._released

    def release(self) -> bool:
        """Give the bytes back; returns ``False`` if already released."""
        with self._lock:
            if self._released:
                return False
            self._released = True
        self._ledger._release(self.encoded_bytes, self.host_bytes)
        return True


class _Slot:
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


class _Holdings:
    """What a job holds until hand-off; released once, also by the job's finalizer."""

    def __init__(self, reservation: Reservation) -> None:
        self.reservation = reservation
        self.slot: _Slot | None = None

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
        holdings: _Holdings,
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


class AudioWorker:
    """A bounded pool of preprocessing threads for one :class:`FamilyHost`.

    :param host: the plugin host.
    :param limits: capacities.
    :param metrics: where to record (a private :class:`AudioMetrics` by default).
    """

    def __init__(
        self,
        host: FamilyHost,
        *,
        limits: WorkerLimits | None = None,
        metrics: AudioMetrics | None = None,
        name: str = "audiogate-audio",
    ) -> None:
        self.host = host
        self.limits = limits or WorkerLimits()
        self.metrics = metrics if metrics is not None else AudioMetrics(families=host.families)
        for family in host.families:
            self.metrics.ensure_family(family)
        self._ledger = _Ledger(self.limits, self.metrics)
        self._results = threading.Semaphore(self.limits.result_depth)
        self._closed = threading.Event()
        # The queue: live jobs only, in order. A job leaves it exactly once, under the
        # lock: taken by a thread, withdrawn when cancelled, or failed by close().
        self._lock = threading.Lock()
        self._pending: collections.deque[AudioJob[Any]] = collections.deque()
        self._job_ready = threading.Condition(self._lock)
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
            for i in range(self.limits.threads)
        ]
        for thread in self._threads:
            thread.start()

    # --- accounting ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called (new jobs are refused)."""
        return self._closed.is_set()

    @property
    def queued_jobs(self) -> int:
        """Live jobs waiting for a worker thread (at most ``queue_depth``)."""
        return len(self._pending)

    @property
    def queued_encoded_bytes(self) -> int:
        """Encoded bytes currently reserved."""
        return self._ledger.encoded

    @property
    def inflight_host_bytes(self) -> int:
        """Host bytes currently reserved."""
        return self._ledger.host

    def _reject(self, family: str, error: BaseException) -> None:
        self.record_failure(family, error)

    def record_failure(self, family: str, error: BaseException | None) -> None:
        """Count a request that ended before or without this worker running it: as
        cancelled (``None``, ``PreprocessCancelled`` or ``asyncio.CancelledError``),
        else as a rejection under the error's reason."""
        if error is None or isinstance(error, PreprocessCancelled | asyncio.CancelledError):
            self.metrics.record_cancelled(family)
        else:
            self.metrics.record_rejection(family, rejection_reason(error))

    # --- submission ------------------------------------------------------------------

    def submit(
        self,
        policy: AudioPolicy,
        clips: Sequence[EncodedClip],
        *,
        finish: Finish | None = None,
        cancel: CancelToken | None = None,
    ) -> AudioJob[Any]:
        """Admit a request: preflight it, reserve its bytes and queue it, or refuse.

        :raises PreprocessCancelled: the token was already cancelled.
        :raises WorkerUnavailableError: the worker is shut down.
        :raises LimitError: a policy budget is exceeded (from the preflight).
        :raises MemoryLimitError: the worker's queued-bytes or host-bytes cap is full.
        :raises QueueFullError: the job queue is full.
        """
        token = cancellable(cancel)  # the worker cancels it on timeouts and task cancels
        family = policy.family
        record = _OUTCOME.get()
        if record is not None and record.active:
            record.recorded = True  # from here on, this worker counts the request
        try:
            token.check(Checkpoint.QUEUE)
            if self._closed.is_set():
                raise WorkerUnavailableError("the audio worker is shut down")
            plan = preflight(self.host, policy, clips, cancel=token)
            encoded = plan.encoded_bytes
            host_bytes = plan.host_bytes
            if encoded < 0 or host_bytes < 0:
                raise SizeOverflowError("the request reservation")
            reservation = self._ledger.reserve(encoded, host_bytes)
        except BaseException as error:
            self._reject(family, error)
            raise
        job: AudioJob[Any] = AudioJob(
            policy=policy,
            plan=plan,
            clips=clips,
            finish=finish,
            cancel=token,
            holdings=_Holdings(reservation),
        )
        if record is not None and record.active and record.defer_completion:
            job._outcome = record
        # Before it can be dequeued (whoever dequeues it unregisters this), and outside
        # the lock (a token cancelled already runs the callback right here, a no-op then:
        # the job is not queued yet, and stops at the Queue checkpoint). A weak reference:
        # the token must not keep a job alive that its consumer dropped.
        job._unwatch = token.on_cancel(functools.partial(self._withdraw_ref, weakref.ref(job)))
        # ``job.future.cancel()`` (also what asyncio.wrap_future does for a cancelled
        # awaiting task) withdraws a queued job too, instead of leaving its reservation and
        # queue place until a thread reaches it.
        job.future.add_done_callback(functools.partial(self._withdraw_cancelled, weakref.ref(job)))
        refusal: AudioGateError | None = None
        with self._lock:
            if self._closed.is_set():
                refusal = WorkerUnavailableError("the audio worker is shut down")
            elif len(self._pending) >= self.limits.queue_depth:
                refusal = QueueFullError(
                    f"the audio queue is full ({self.limits.queue_depth} jobs waiting); retry later"
                )
            else:
                self._enqueue(job)
        if refusal is None:
            if token.cancelled:  # cancelled while it was admitted: its callback already ran
                self._withdraw(job)
            return job
        job._unwatch()
        job._hand_off()
        self._reject(family, refusal)
        raise refusal

    def prepare(
        self,
        policy: AudioPolicy,
        clips: Sequence[EncodedClip],
        *,
        finish: Finish | None = None,
        cancel: CancelToken | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Submit and wait (blocking API); returns the batch or ``finish``'s value.

        :raises TimeoutError: ``timeout`` seconds passed first; the job is then cancelled
            (withdrawn if still queued), so it is counted as cancelled, not completed.
        """
        job = self.submit(policy, clips, finish=finish, cancel=cancel)
        try:
            return job.result(timeout)
        except TimeoutError:
            job.cancel()
            raise

    async def prepare_async(
        self,
        policy: AudioPolicy,
        clips: Sequence[EncodedClip],
        *,
        finish: Finish | None = None,
        cancel: CancelToken | None = None,
    ) -> Any:
        """Submit and await (asyncio API). Cancelling the awaiting task cancels the job."""
        job = self.submit(policy, clips, finish=finish, cancel=cancel)
        waiter = asyncio.wrap_future(job.future)
        try:
            await asyncio.shield(waiter)
        except asyncio.CancelledError:
            # If the job has ended (or once it does), release it now: this frame stays
            # in the CancelledError's traceback for as long as the task is referenced.
            job.future.add_done_callback(functools.partial(_release, job._finalizer))
            job.cancel()
            # A queued job is withdrawn at once; a running one ends at its next checkpoint.
            # Take its outcome, or asyncio logs "Future exception was never retrieved"
            # (shield drops its own callback once the outer future is cancelled).
            waiter.add_done_callback(_retrieve)
            raise
        except BaseException:
            pass
        try:
            return job.result()
        finally:
            del job, waiter

    # --- the queue -------------------------------------------------------------------

    def _enqueue(self, job: AudioJob[Any]) -> None:
        """Append a job and wake a thread (call with the lock held)."""
        job._queued = True
        self._pending.append(job)
        self._job_ready.notify()

    def _dequeue(self) -> AudioJob[Any] | None:
        """Wait for the oldest live job and take it; ``None`` once the worker is closed."""
        with self._lock:
            while not self._pending:
                if self._closed.is_set():
                    return None
                self._job_ready.wait()
            job = self._pending.popleft()
            job._queued = False
            return job

    def _withdraw_ref(self, ref: weakref.ref[AudioJob[Any]]) -> None:
        job = ref()
        if job is not None:
            self._withdraw(job)

    def _withdraw_cancelled(
        self, ref: weakref.ref[AudioJob[Any]], future: concurrent.futures.Future[Any]
    ) -> None:
        if future.cancelled():
            self._withdraw_ref(ref)

    def _withdraw(self, job: AudioJob[Any]) -> None:
        """Take a cancelled job out of the queue, if it still waits there, and fail it
        (its token's :meth:`~audiogate.cancel.CancelToken.on_cancel` callback)."""
        with self._lock:
            if not job._queued:
                return  # a thread took it (it stops at its next checkpoint), or it ended
            job._queued = False
            self._pending.remove(job)
        self._fail_unstarted(job, PreprocessCancelled(checkpoint=Checkpoint.QUEUE.value))

    def _fail_unstarted(self, job: AudioJob[Any], error: AudioGateError) -> None:
        """Release a job that left the queue without running and give it ``error``."""
        job._hand_off()
        if job.future.set_running_or_notify_cancel():
            self._reject(job.policy.family, error)
            job.future.set_exception(error)
        else:
            self.metrics.record_cancelled(job.policy.family)

    # --- processing ------------------------------------------------------------------

    def _run(self) -> None:
        # A thread takes a result slot *before* it takes a job, so slots are granted in
        # queue order: a newer job can never hold the slot an older one waits for (which
        # would deadlock a consumer that takes results in order).
        while True:
            slot = self._acquire_slot()
            if slot is None:
                return
            job = self._dequeue()
            if job is None:
                slot.free()
                return
            if job._unwatch is not None:
                job._unwatch()  # running now: a cancel stops it at its next checkpoint
            job._holdings.slot = slot
            if not job._finalizer.alive:
                slot.free()  # handed off already (its future was cancelled and taken)
            try:
                self._process(job)
            except BaseException as error:
                # A failure outside the job's own error handling (metrics, a callback):
                # the job still ends, releases what it holds, and the thread goes on.
                job._hand_off()
                if not job.future.done():
                    failure = PluginError(
                        f"the audio worker failed while finishing a {job.policy.family!r} "
                        f"job: {type(error).__name__}: {error}"
                    )
                    with contextlib.suppress(Exception):  # counted once, if at all
                        self._reject(job.policy.family, failure)
                    with contextlib.suppress(concurrent.futures.InvalidStateError):
                        job.future.set_exception(failure)
            finally:
                del job

    def _acquire_slot(self) -> _Slot | None:
        while not self._results.acquire(timeout=_POLL_SECONDS):
            if self._closed.is_set():
                return None
        return _Slot(self._results)

    def _process(self, job: AudioJob[Any]) -> None:
        family = job.policy.family
        if not job.future.set_running_or_notify_cancel():
            job._hand_off()
            self.metrics.record_cancelled(family)
            return
        started = time.perf_counter()
        try:
            job.cancel_token.check(Checkpoint.QUEUE)
            try:
                batch = process_request(self.host, job.plan, job.clips, cancel=job.cancel_token)
            except AudioGateError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"family {family!r} raised {type(exc).__name__} while preparing audio: {exc}"
                ) from exc
            self.metrics.record_waveforms(
                family,
                source_duration_us=batch.totals.duration_us,
                source_samples=batch.totals.source_samples,
                normalized_samples=batch.totals.normalized_samples,
                frames=batch.totals.frames,
                tokens=batch.totals.tokens,
            )
            prepared = sum(int(a.nbytes) for a in batch.inputs.inputs.values())
            if prepared > job.policy.max_prepared_result_bytes_per_request:
                raise MemoryLimitError(
                    "prepared result bytes per request",
                    actual=prepared,
                    maximum=job.policy.max_prepared_result_bytes_per_request,
                )
            job.cancel_token.check(Checkpoint.FEATURE)
            value: Any = batch
            prefill = batch.totals.tokens
            if job.finish is not None:
                try:
                    value = job.finish(batch)
                except AudioGateError:
                    raise
                except Exception as exc:
                    raise PluginError(
                        f"finishing the {family!r} request raised {type(exc).__name__}: {exc}"
                    ) from exc
                prefill = _prefill_length(value, prefill)
                # A client gone while its prompt was expanded is cancelled, not completed.
                job.cancel_token.check(Checkpoint.FEATURE)
        except BaseException as error:
            job._hand_off()
            self._reject(family, error)
            # The traceback's frames hold this job and its clips; nobody needs them once
            # the error is stored, and keeping them would leave the request's memory to
            # the cycle collector (a cancelled client never reads its error).
            clear_frames(error)
            # This frame is in that traceback too (still running, so not cleared): without
            # ``job`` it does not hold the job through the future that keeps the error.
            future = job.future
            del job
            future.set_exception(error)
            return
        completed = functools.partial(
            self.metrics.record_completed,
            family,
            latency_seconds=time.perf_counter() - started,
            prefill_tokens=prefill,
        )
        if job._outcome is not None:
            job._outcome.offer_completion(completed)  # before the owner can see the result
        else:
            completed()
        job.future.set_result(value)

    # --- shutdown --------------------------------------------------------------------

    def close(self, *, wait: bool = True) -> None:
        """Stop accepting jobs, fail the queued ones (``worker_unavailable``), stop threads.

        Never blocks on the queue: idle threads wake and see the closed flag; a running job
        finishes first when ``wait`` is true.
        """
        queued: list[AudioJob[Any]] = []
        with self._lock:
            if not self._closed.is_set():
                self._closed.set()
                queued = list(self._pending)
                self._pending.clear()
                for job in queued:
                    job._queued = False
                self._job_ready.notify_all()
        for job in queued:
            if job._unwatch is not None:
                job._unwatch()
            error = WorkerUnavailableError("the audio worker shut down before the job ran")
            self._fail_unstarted(job, error)
        del queued
        if wait:  # also when another caller closed it first
            self._join_threads()

    def _join_threads(self) -> None:
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:  # close() from a finish callback on a worker thread
                thread.join()

    def __enter__(self) -> AudioWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release(finalizer: weakref.finalize, _future: object) -> None:  # type: ignore[type-arg]
    finalizer()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _prefill_length(value: Any, default: int) -> int:
    positions = getattr(value, "prefill_positions", None)
    if isinstance(positions, int) and not isinstance(positions, bool) and positions >= 0:
        return positions
    return default
