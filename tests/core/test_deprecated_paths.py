"""Modules that moved (under :mod:`audiogate.dsp`, or out of an ambiguous name) stay
importable from their old paths.

Each old path gives the new module's object and warns with
:class:`~audiogate.deprecation.AudioGateDeprecationWarning` (which the suite's own filter
ignores, so the warning is asserted here explicitly).
"""

from __future__ import annotations

import importlib

import pytest

from audiogate.deprecation import AudioGateDeprecationWarning

#: old module, new module, a public name each exports.
MOVED = [
    ("audiogate.blocks", "audiogate.dsp.blocks", "run_blocks"),
    ("audiogate.blocks", "audiogate.dsp.blocks", "BLOCK_THREADS"),
    ("audiogate.mlx_budget", "audiogate.dsp.mlx_budget", "FFT_PASS_BYTES"),
    ("audiogate.mlx_constants", "audiogate.dsp.mlx_constants", "thread_constant"),
    ("audiogate.store.records", "audiogate.store.source_record", "SourceRecord"),
    ("audiogate.store.records", "audiogate.store.source_record", "header_text"),
    ("audiogate.pipeline.batch", "audiogate.pipeline.prepared", "PreparedBatch"),
    ("audiogate.pipeline.batch", "audiogate.pipeline.prepared", "PreparedClip"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_old_path_forwards_with_a_warning(old: str, new: str, name: str) -> None:
    shim = importlib.import_module(old)
    with pytest.warns(AudioGateDeprecationWarning, match=rf"{old}\.{name} moved to {new}"):
        value = getattr(shim, name)
    assert value is getattr(importlib.import_module(new), name)


def test_mlx_fft_forwards_with_a_warning() -> None:
    pytest.importorskip("mlx.core", reason="audiogate.dsp.mlx_fft imports MLX")
    shim = importlib.import_module("audiogate.mlx_fft")
    with pytest.warns(AudioGateDeprecationWarning, match="audiogate.dsp.mlx_fft"):
        from audiogate.mlx_fft import rfft_float_float  # type: ignore[attr-defined]
    assert rfft_float_float is importlib.import_module("audiogate.dsp.mlx_fft").rfft_float_float
    assert shim.__name__ == "audiogate.mlx_fft"


def test_unknown_names_are_attribute_errors() -> None:
    shim = importlib.import_module("audiogate.blocks")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = shim.nothing_here


def test_renamed_cache_policy_fingerprint_forwards_with_a_warning() -> None:
    key = importlib.import_module("audiogate.cache.key")
    with pytest.warns(AudioGateDeprecationWarning, match="policy_result_fields"):
        value = key.policy_fingerprint
    assert value is key.policy_result_fields
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = key.nothing_here


def test_the_plugin_record_module_does_not_warn() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from audiogate.records import ClipFeatures, FeatureBatch

    assert ClipFeatures.__module__ == FeatureBatch.__module__ == "audiogate.records"
