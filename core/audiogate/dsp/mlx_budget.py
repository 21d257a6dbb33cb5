"""Memory the MLX frontends hold beyond one block's arrays, for their feature plans.

Importing this module does not import MLX: plans are made before a backend is used.
"""

from __future__ import annotations

from typing import Final

__all__ = ["FFT_PASS_BYTES", "FFT_PASS_ELEMENTS"]

#: Row elements (rows × FFT size) per pass of :func:`audiogate.dsp.mlx_fft.rfft_float_float`;
#: fewer cost time in per-op overhead.
FFT_PASS_ELEMENTS: Final = 65_536
#: What MLX holds while it evaluates one such pass: its float-float temporaries, about 190
#: bytes per element on the CPU build (12 MiB for 64 rows of 1024), counted as 256.
FFT_PASS_BYTES: Final = 256 * FFT_PASS_ELEMENTS
