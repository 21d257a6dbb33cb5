"""Moved: the records of a request's trip through the pipeline.

:class:`~audiogate.acquire.EncodedClip` is acquisition's (``audiogate.acquire.clip``);
:class:`ClipPlan` and :class:`RequestPlan` are admission's (``audiogate.pipeline.plans``);
:class:`PreparedClip`, :class:`RequestTotals` and :class:`PreparedBatch` are processing's
(``audiogate.pipeline.prepared``). All of them are importable from :mod:`audiogate.pipeline`.
"""

from __future__ import annotations

from audiogate.deprecation import forward_module

__getattr__ = forward_module(__name__, "audiogate.pipeline", since="0.2.0")
