"""Deprecated (0.2.0): the request outcome record of 0.1.0, kept importable.

Nothing in audiogate reads or writes these any more: a request's outcome is recorded by
its owner, once, in :meth:`audiogate.request.Request.close`. They remain for code written
against 0.1.0 (``from audiogate.worker import OutcomeRecord, outcome_scope``) until
0.3.0.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

import attrs

__all__ = ["OutcomeRecord", "outcome_scope"]


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
