"""The bounded host worker for servers: admission, reservations, backpressure.

One :class:`Reservation` owns a request's encoded and host bytes from queue admission
until its result is handed off (or the request fails, is cancelled, is refused, the
worker shuts down, or the job is garbage-collected) and releases them exactly once.
The worker runs a request's CPU step (``task.compute(worker)``: a
:class:`~audiogate.request.Request`, or one of its own tasks); the request's owner
counts it when it closes the request. The job queue is bounded (``queue_depth``) and so
is the result channel (``result_depth``): a worker does not start a job while
``result_depth`` finished results wait for their consumers, so a stalled consumer
backpressures production instead of accumulating prepared tensors. Only live jobs wait
in the queue: a job cancelled while queued is withdrawn at once (its reservation and
queue slot freed) and never starts.

Modules: :mod:`~audiogate.worker.reservations` (limits and reservations),
:mod:`~audiogate.worker.job` (a submitted request), :mod:`~audiogate.worker.pool`
(the threads).
"""

from __future__ import annotations

from audiogate.deprecation import forward_names
from audiogate.metrics.outcome import rejection_reason
from audiogate.worker.job import AudioJob, Finish, Finished, WorkerTask
from audiogate.worker.pool import AudioWorker
from audiogate.worker.reservations import Reservation, WorkerLimits

__all__ = [
    "AudioJob",
    "AudioWorker",
    "Finish",
    "Finished",
    "Reservation",
    "WorkerLimits",
    "WorkerTask",
    "rejection_reason",
]

# 0.1.0's request outcome record: inert since 0.2.0 (Request.close records the outcome).
__getattr__ = forward_names(
    __name__,
    {
        "OutcomeRecord": "audiogate.metrics.legacy:OutcomeRecord",
        "outcome_scope": "audiogate.metrics.legacy:outcome_scope",
    },
    since="0.2.0",
)
