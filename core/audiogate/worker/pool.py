"""The bounded pool of preprocessing threads: admission, the queue, processing, shutdown."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from audiogate.acquire.clip import EncodedClip
from audiogate.cache import FeatureCache, FeatureStore
from audiogate.cancel import CancelToken, Checkpoint, cancellable
from audiogate.decode.isolation import DecoderPool
from audiogate.errors import (
    AudioGateError,
    PluginError,
    PreprocessCancelled,
    QueueFullError,
    SizeOverflowError,
    WorkerUnavailableError,
    clear_frames,
)
from audiogate.host import FamilyHost
from audiogate.metrics import AudioMetrics, record_outcome
from audiogate.pipeline import preflight
from audiogate.policy import AudioPolicy
from audiogate.worker.job import AudioJob, CallTask, ClipsTask, Finish, WorkerTask
from audiogate.worker.reservations import Ledger, WorkerLimits

__all__ = ["AudioWorker"]

#: How often a thread waiting for a result slot looks at the closed flag.
_POLL_SECONDS: Final = 0.05


class AudioWorker:
    """A bounded pool of preprocessing threads for one :class:`FamilyHost`.

    :param host: the plugin host.
    :param limits: capacities.
    :param metrics: where to record (a private :class:`AudioMetrics` by default).
    :param feature_cache_bytes: the feature cache's budget (``0``, the default: none).
        Its resident bytes count against ``limits.max_inflight_host_bytes`` beside the
        reservations, and are evicted when a reservation needs the room.
    :param feature_store: the cache's persistent tier (a ``SourceStore``, or any
        :class:`~audiogate.cache.FeatureStore`).
    """

    def __init__(
        self,
        host: FamilyHost,
        *,
        limits: WorkerLimits | None = None,
        metrics: AudioMetrics | None = None,
        name: str = "audiogate-audio",
        feature_cache_bytes: int = 0,
        feature_store: FeatureStore | None = None,
    ) -> None:
        self.host = host
        self.limits = limits or WorkerLimits()
        self.metrics = metrics if metrics is not None else AudioMetrics(families=host.families)
        for family in host.families:
            self.metrics.ensure_family(family)
        self._ledger = Ledger(self.limits, self.metrics)
        #: Prepared clips by source digest and policy (docs/architecture.md).
        self.feature_cache = FeatureCache(
            feature_cache_bytes, store=feature_store, metrics=self.metrics
        )
        self.feature_cache.bind_account(self._ledger)
        self._ledger.bind_cache(self.feature_cache.reclaim)
        #: The processes that decode this worker's compressed clips, one per thread
        #: (started on first use; docs/formats.md).
        self.decoders = DecoderPool(processes=self.limits.threads)
        self._results = threading.Semaphore(self.limits.result_depth)
        self._closed = threading.Event()
        # The queue: live jobs only, in order. A job leaves it exactly once, under the
        # lock: taken by a thread, withdrawn when cancelled, or failed by close().
        self._lock = threading.Lock()
        self._pending: collections.deque[AudioJob[Any]] = collections.deque()
        self._job_ready = threading.Condition(self._lock)
        #: The job each thread took (set under the lock when taken, ``None`` after).
        self._current: list[AudioJob[Any] | None] = [None] * self.limits.threads
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"{name}-{i}", daemon=True)
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
    def waiting_jobs(self) -> int:
        """Queued jobs that no idle thread is about to take: what the queue's
        ``queue_depth`` bounds. A thread whose job's result is out (the event loop may
        answer it before the thread runs again, holding the CPU) or that waits for a job
        is idle, and a queued job is its next, not a waiting one: so the queue is not
        "full" in the instant between one job and the next, and at most ``threads +
        queue_depth`` jobs are live (queued or running) either way."""
        busy = sum(1 for job in self._current if job is not None and not job.future.done())
        return max(0, len(self._pending) - (self.limits.threads - busy))

    @property
    def queue_full(self) -> bool:
        """Whether a job submitted now is refused for a full queue (:attr:`waiting_jobs`
        at ``queue_depth``)."""
        return self.waiting_jobs >= self.limits.queue_depth

    @property
    def queued_encoded_bytes(self) -> int:
        """Encoded bytes currently reserved."""
        return self._ledger.encoded

    @property
    def inflight_host_bytes(self) -> int:
        """Host bytes currently reserved."""
        return self._ledger.host

    def record_failure(self, family: str, error: BaseException | None) -> None:
        """Count a request that ended before or without this worker running it: as
        cancelled (``None``, ``PreprocessCancelled`` or ``asyncio.CancelledError``),
        else as a rejection under the error's ``reason`` (see
        :func:`audiogate.metrics.record_outcome`)."""
        record_outcome(self.metrics, family, error)

    # --- submission ------------------------------------------------------------------

    def check_open(self, cancel: CancelToken) -> None:
        """The admission's first checks, before a request is planned.

        :raises PreprocessCancelled: the token was already cancelled.
        :raises WorkerUnavailableError: the worker is shut down.
        """
        cancel.check(Checkpoint.QUEUE)
        if self._closed.is_set():
            raise WorkerUnavailableError("the audio worker is shut down")

    def submit_request(self, task: WorkerTask) -> AudioJob[Any]:
        """Admit a planned request's CPU step (a :class:`~audiogate.request.Request`, or
        any :class:`~audiogate.worker.job.WorkerTask`): reserve its bytes and queue it, or
        refuse. A thread runs ``task.compute(worker)``; the task's owner counts it (the
        request's ``close``), unless it is one of the worker's own tasks.

        :raises PreprocessCancelled: the token was already cancelled.
        :raises WorkerUnavailableError: the worker is shut down.
        :raises MemoryLimitError: the worker's queued-bytes or host-bytes cap is full.
        :raises QueueFullError: the job queue is full.
        """
        token = task.cancel
        self.check_open(token)
        encoded, host_bytes = task.reserved_bytes()
        if encoded < 0 or host_bytes < 0:
            raise SizeOverflowError("the request reservation")
        job: AudioJob[Any] = AudioJob(
            task=task, reservation=self._ledger.reserve(encoded, host_bytes)
        )
        refusal = self._queue_watched(job, token)
        if refusal is None:
            return job
        raise refusal

    def submit(
        self,
        policy: AudioPolicy,
        clips: Sequence[EncodedClip],
        *,
        finish: Finish | None = None,
        cancel: CancelToken | None = None,
        extra_host_bytes: int = 0,
    ) -> AudioJob[Any]:
        """Admit clips alone: preflight them, reserve their bytes and queue them, or
        refuse. The worker counts the outcome. ``finish(batch)`` runs on the worker
        after the features; ``extra_host_bytes`` are reserved for it.

        :raises PreprocessCancelled: the token was already cancelled.
        :raises WorkerUnavailableError: the worker is shut down.
        :raises LimitError: a policy budget is exceeded (from the preflight).
        :raises MemoryLimitError: the worker's queued-bytes or host-bytes cap is full.
        :raises QueueFullError: the job queue is full.
        """
        token = cancellable(cancel)  # the worker cancels it on timeouts and task cancels
        try:
            self.check_open(token)
            plan = preflight(self.host, policy, clips, cancel=token)
            task = ClipsTask(policy, plan, tuple(clips), token, finish, extra_host_bytes)
            return self.submit_request(task)
        except BaseException as error:
            self.record_failure(policy.family, error)
            raise

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
        extra_host_bytes: int = 0,
    ) -> Any:
        """Submit and await (asyncio API). Cancelling the awaiting task cancels the job."""
        return await self.wait_async(
            self.submit(
                policy, clips, finish=finish, cancel=cancel, extra_host_bytes=extra_host_bytes
            )
        )

    def submit_call(
        self,
        policy: AudioPolicy,
        work: Callable[[], Any],
        *,
        host_bytes: int,
        cancel: CancelToken | None = None,
    ) -> AudioJob[Any]:
        """Admit CPU work that is not audio: reserve ``host_bytes`` and queue it with the
        audio jobs, under the same queue depth and byte caps, or refuse. The worker does
        not count it in the metrics: its owner does.

        :raises PreprocessCancelled: the token was already cancelled.
        :raises WorkerUnavailableError: the worker is shut down.
        :raises MemoryLimitError: the host-bytes cap is full.
        :raises QueueFullError: the job queue is full.
        """
        if host_bytes < 0:
            raise SizeOverflowError("the call reservation")
        return self.submit_request(CallTask(policy, work, cancellable(cancel), host_bytes))

    async def call_async(
        self,
        policy: AudioPolicy,
        work: Callable[[], Any],
        *,
        host_bytes: int,
        cancel: CancelToken | None = None,
    ) -> Any:
        """:meth:`submit_call` and await ``work()``'s value (asyncio API). Cancelling the
        awaiting task withdraws a queued call; a running one finishes first."""
        return await self.wait_async(
            self.submit_call(policy, work, host_bytes=host_bytes, cancel=cancel)
        )

    async def wait_async(self, job: AudioJob[Any]) -> Any:
        """Await ``job``'s value and take it. Cancelling the awaiting task cancels the job
        (withdrawn if queued; a running one stops at its next checkpoint) and releases
        what it holds once it has ended."""
        # One loop future that the job's end wakes, carrying nothing: the outcome is
        # taken from the job itself. Cancelling it never reaches the job's own future
        # (what asyncio.wrap_future would do, and asyncio.shield undo at the cost of two
        # more futures and their callbacks per request, issue #35).
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        job.future.add_done_callback(functools.partial(_wake, loop, ended))
        try:
            await ended
            if job.future.cancelled():  # cancelled by its future: as if this task was
                raise asyncio.CancelledError
        except asyncio.CancelledError:
            # If the job has ended (or once it does), release it now: this frame stays
            # in the CancelledError's traceback for as long as the task is referenced.
            job.release_when_done()
            # A queued job is withdrawn at once; a running one ends at its next checkpoint.
            job.cancel()
            raise
        try:
            return job.result()
        finally:
            del job, ended

    # --- the queue -------------------------------------------------------------------

    def _queue_watched(self, job: AudioJob[Any], token: CancelToken) -> AudioGateError | None:
        """Queue an admitted ``job`` that ``token`` may withdraw; ``None``, or the refusal
        (the job then handed off, its reservation released)."""
        # Before it can be dequeued (whoever dequeues it unregisters this), and outside
        # the lock (a token cancelled already runs the callback right here, a no-op then:
        # the job is not queued yet, and stops at the Queue checkpoint). A weak reference:
        # the token must not keep a job alive that its consumer dropped.
        job._unwatch = token.on_cancel(functools.partial(self._withdraw_ref, weakref.ref(job)))
        # ``job.future.cancel()`` (also what asyncio.wrap_future does for a cancelled
        # awaiting task) withdraws a queued job too, instead of leaving its reservation and
        # queue place until a thread reaches it.
        job.future.add_done_callback(functools.partial(self._withdraw_cancelled, weakref.ref(job)))
        refusal = self._queue_or_refusal(job)
        if refusal is None:
            if token.cancelled:  # cancelled while it was admitted: its callback already ran
                self._withdraw(job)
            return None
        job._unwatch()
        job._hand_off()
        return refusal

    def _queue_or_refusal(self, job: AudioJob[Any]) -> AudioGateError | None:
        """Queue an admitted job, or say why not (closed, or the queue is full)."""
        with self._lock:
            if self._closed.is_set():
                return WorkerUnavailableError("the audio worker is shut down")
            if self.queue_full:
                return QueueFullError(
                    f"the audio queue is full ({self.limits.queue_depth} jobs waiting); retry later"
                )
            self._enqueue(job)
        return None

    def _enqueue(self, job: AudioJob[Any]) -> None:
        """Append a job and wake a thread (call with the lock held)."""
        job._queued = True
        self._pending.append(job)
        self._job_ready.notify()

    def _dequeue(self, index: int) -> AudioJob[Any] | None:
        """Wait for the oldest live job and take it for thread ``index``; ``None`` once
        the worker is closed."""
        with self._lock:
            while not self._pending:
                if self._closed.is_set():
                    return None
                self._job_ready.wait()
            job = self._pending.popleft()
            job._queued = False
            self._current[index] = job
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
            if job.counted_by_worker:  # else its owner counts it
                self.record_failure(job.policy.family, error)
            job.future.set_exception(error)
        elif job.counted_by_worker:
            record_outcome(self.metrics, job.policy.family, None)

    # --- processing ------------------------------------------------------------------

    def _run(self, index: int) -> None:
        # A thread takes a result slot *before* it takes a job, so slots are granted in
        # queue order: a newer job can never hold the slot an older one waits for (which
        # would deadlock a consumer that takes results in order).
        while True:
            slot = self._acquire_slot()
            if slot is None:
                return
            job = self._dequeue(index)
            if job is None:
                slot.release()
                return
            try:  # this thread's job from _dequeue until here, on every path
                if job._unwatch is not None:
                    job._unwatch()  # running now: a cancel stops it at its next checkpoint
                job._hold_slot(slot)
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
                        if job.counted_by_worker:
                            with contextlib.suppress(Exception):  # counted once, if at all
                                self.record_failure(job.policy.family, failure)
                        with contextlib.suppress(concurrent.futures.InvalidStateError):
                            job.future.set_exception(failure)
                finally:
                    del job
            finally:
                self._current[index] = None

    def _acquire_slot(self) -> threading.Semaphore | None:
        while not self._results.acquire(timeout=_POLL_SECONDS):
            if self._closed.is_set():
                return None
        return self._results

    def _process(self, job: AudioJob[Any]) -> None:
        """Run a job's task; a job the worker counts is counted here, once."""
        family = job.policy.family
        counted = job.counted_by_worker
        if not job.future.set_running_or_notify_cancel():
            job._hand_off()
            if counted:
                record_outcome(self.metrics, family, None)
            return
        task = job.task
        try:
            job.cancel_token.check(Checkpoint.QUEUE)
            value = task.compute(self)
        except BaseException as error:
            job._hand_off()
            if counted:
                self.record_failure(family, error)
            # The traceback's frames hold this job and its clips; nobody needs them once
            # the error is stored, and keeping them would leave the request's memory to
            # the cycle collector (a cancelled client never reads its error).
            clear_frames(error)
            # This frame is in that traceback too (still running, so not cleared): without
            # ``job`` it does not hold the job through the future that keeps the error.
            future = job.future
            del job, task
            future.set_exception(error)
            return
        if counted:
            completed = getattr(task, "completed", None)
            record_outcome(self.metrics, family, completed)
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
        self.decoders.close()  # idle processes now; a busy one when its clip ends

    def _join_threads(self) -> None:
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current:  # close() from a finish callback on a worker thread
                thread.join()

    def __enter__(self) -> AudioWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wake(
    loop: asyncio.AbstractEventLoop, ended: asyncio.Future[None], _job_future: object
) -> None:
    # In the thread that ended the job (or the loop's, where it had ended already).
    if loop.is_closed():
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(_set_ended, ended)


def _set_ended(ended: asyncio.Future[None]) -> None:
    if not ended.done():  # not cancelled meanwhile
        ended.set_result(None)
