"""Moved to :mod:`audiogate.dsp.mlx_fft` in 0.2.0; this path forwards until 0.3.0."""

from audiogate.deprecation import forward_module

__getattr__ = forward_module(__name__, "audiogate.dsp.mlx_fft", since="0.2.0")
