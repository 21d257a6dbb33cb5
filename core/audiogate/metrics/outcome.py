"""Count each request once: completed, cancelled, or a rejection under one ``reason``.

:func:`record_outcome` turns a request's end into counts, called by the request's one
owner, once: :meth:`audiogate.request.Request.close` (which ``AudioGate.prepare``, the
reference server and the batch engine reach once per request; it records a completion
with ``AudioMetrics.record_completed`` directly), the reference server for a request
refused before it was opened (the queue at the door, the body, JSON), and the worker for
the clips it was given alone (``AudioWorker.submit``).
A successful request without audio is not an audio request and counts nowhere.
"""

from __future__ import annotations

import asyncio

import attrs

from audiogate.errors import AudioGateError, PreprocessCancelled
from audiogate.metrics.series import REJECTION_REASONS, AudioMetrics

__all__ = ["Completed", "record_outcome", "rejection_reason"]


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

    Call it once per request.
    """
    if isinstance(outcome, Completed):
        metrics.record_completed(
            family, latency_seconds=outcome.latency_seconds, prefill_tokens=outcome.prefill_tokens
        )
    elif outcome is None or isinstance(outcome, PreprocessCancelled | asyncio.CancelledError):
        metrics.record_cancelled(family)
    else:
        metrics.record_rejection(family, rejection_reason(outcome))
