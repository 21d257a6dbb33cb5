"""Moved to :mod:`audiogate.dsp.blocks` in 0.2.0; this path forwards until 0.3.0."""

from audiogate.deprecation import forward_module

__getattr__ = forward_module(__name__, "audiogate.dsp.blocks", since="0.2.0")
