"""Moved: what processing makes (:class:`PreparedClip`, :class:`RequestTotals`,
:class:`PreparedBatch`) is :mod:`audiogate.pipeline.prepared` (``pipeline/batch.py`` stood
beside the dataset engine, :mod:`audiogate.batch`)."""

from __future__ import annotations

from audiogate.deprecation import forward_module

__getattr__ = forward_module(__name__, "audiogate.pipeline.prepared", since="0.2.0")
