"""Modules that moved under :mod:`audiogate.dsp` stay importable from their old paths.

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
