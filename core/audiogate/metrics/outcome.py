"""Count each request once: the one owner of a request's outcome in the metrics.

A request ends once, as completed, as cancelled, or as a rejection under one ``reason``
label, and :func:`record_outcome` is the one place that turns that end into counts. Who
calls it depends on how far the request got, and an :class:`OutcomeRecord` in the
request's context (:func:`outcome_scope`) says whose turn it is:

* before the worker's admission (body, JSON, acquisition, template, placeholders, a
  text-only prompt's length), the owner counts a failure: the reference server's
  handler, or :meth:`audiogate.api.AudioGate.prepare_async`, through
  :meth:`OutcomeRecord.settle`;
* from its admission on (:meth:`audiogate.worker.AudioWorker.submit` calls
  :func:`worker_admits`), the worker counts every failure and cancellation itself, and
  the success too, unless the record defers it;
* ``defer_completion`` is for an owner with a step left after the worker's result (the
  reference server admits the answer into its body budget, which may refuse it, or the
  client may leave while it waits): the worker offers its success
  (:meth:`OutcomeRecord.offer_completion`), and the owner's :meth:`OutcomeRecord.settle`
  counts it as completed or as the failure the request was answered with.

A successful request without audio is not an audio request and counts nowhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

import attrs

from audiogate.errors import AudioGateError, PreprocessCancelled
from audiogate.metrics.series import REJECTION_REASONS, AudioMetrics

__all__ = [
    "Completed",
    "OutcomeRecord",
    "outcome_scope",
    "record_outcome",
    "rejection_reason",
    "worker_admits",
]


@attrs.frozen(kw_only=True)
class Completed:
    """A request prepared successfully.

    :param latency_seconds: its preprocessing wall time.
    :param prefill_tokens: the prepared prefill length (the audio tokens without a
        tokenized prompt).
    """

    latency_seconds: float
    prefill_tokens: int


def rejection_reason(error: BaseException) -> str:
    """The ``reason`` label a failure is counted under: ``feature_panic`` if unexpected,
    also for an error class of a plugin's own with a reason the metrics do not know."""
    if isinstance(error, AudioGateError) and error.reason in REJECTION_REASONS:
        return error.reason
    return "feature_panic"


def record_outcome(
    metrics: AudioMetrics, family: str, outcome: Completed | BaseException | None
) -> None:
    """Count one request's end: completed, cancelled (``None``, ``PreprocessCancelled``
    or ``asyncio.CancelledError``), or a rejection under the error's ``reason`` label.

    The only caller of the metrics' outcome counters; call it once per request.
    """
    if isinstance(outcome, Completed):
        metrics.record_completed(
            family, latency_seconds=outcome.latency_seconds, prefill_tokens=outcome.prefill_tokens
        )
    elif outcome is None or isinstance(outcome, PreprocessCancelled | asyncio.CancelledError):
        metrics.record_cancelled(family)
    else:
        metrics.record_rejection(family, rejection_reason(outcome))


@attrs.define
class OutcomeRecord:
    """Whether one request's outcome is recorded in the metrics (exactly once).

    ``recorded``: the worker admitted the request and counts it from there on.
    ``active`` is false once its scope has ended: asyncio callbacks can carry a context
    into later requests (uvicorn resumes reading a connection from inside a request), and
    a stale record must not be reused. ``defer_completion``: the owner counts the
    worker's success (see the module's docstring).
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


def worker_admits() -> OutcomeRecord | None:
    """Mark the calling request's record (if any) as counted by the worker from now on.

    :returns: the record when its owner counts the worker's success
        (``defer_completion``), else ``None`` (the worker counts it).
    """
    record = _OUTCOME.get()
    if record is None or not record.active:
        return None
    record.recorded = True
    return record if record.defer_completion else None
