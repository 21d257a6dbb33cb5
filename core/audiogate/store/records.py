"""Moved: the store's records are :mod:`audiogate.store.source_record` (the name
``records`` was also the plugin API's :mod:`audiogate.records`)."""

from __future__ import annotations

from audiogate.deprecation import forward_module

__getattr__ = forward_module(__name__, "audiogate.store.source_record", since="0.2.0")
