"""The DSP toolkit the family plugins build their resamplers and feature kernels from.

Each module holds one mechanism that every family needs the same way; what makes a
family's frontend its own (its mel scale and band edges, window quirks, dtype path,
block sizes and the reference each constant comes from) stays in the family package.
Plugin authors: see ``docs/plugins/dsp.md`` for an example of each.

* :mod:`audiogate.dsp.blocks`: :func:`~audiogate.dsp.blocks.run_blocks`, a clip's
  independent blocks on up to :data:`~audiogate.dsp.blocks.BLOCK_THREADS` threads with
  one cancellation poll per block, and :func:`~audiogate.dsp.blocks.block_threads` to
  size a plan's per-thread scratch.
* :mod:`audiogate.dsp.scratch`: :func:`~audiogate.dsp.scratch.thread_scratch`, block
  buffers kept per thread and reused from clip to clip.
* :mod:`audiogate.dsp.melbank`: :func:`~audiogate.dsp.melbank.triangular_filters` (the
  triangles of transformers, librosa and SpeechLib, bit for bit from the family's own
  edges), :func:`~audiogate.dsp.melbank.sparse_projection` and
  :func:`~audiogate.dsp.melbank.covered_bins`.
* :mod:`audiogate.dsp.whisper`: the Whisper log-mel frontend (80 or 128 Slaney bins,
  the 30 s window, ``"longest"`` padding, Voxtral's multiple of 30 s, 30 s chunks), which
  every family whose processor runs ``WhisperFeatureExtractor`` computes with; its plan
  and constants are in :mod:`audiogate.dsp.whisper_geometry` (no SciPy), its bank in
  :mod:`audiogate.dsp.slaney`. Not re-exported here: importing the kernel builds its banks.
* :mod:`audiogate.dsp.identity`: :func:`~audiogate.dsp.identity.plan_identity` and
  :func:`~audiogate.dsp.identity.resample_identity`, the resample that passes a clip on.
* :mod:`audiogate.dsp.mlx_loader`: :func:`~audiogate.dsp.mlx_loader.load_mlx_module`,
  a family's optional MLX kernel or a typed error saying how to install MLX.
* MLX kernels only: :mod:`audiogate.dsp.mlx_fft` (a float-float real FFT; importing it
  imports MLX), :mod:`audiogate.dsp.mlx_constants` (per-thread, per-device constants) and
  :mod:`audiogate.dsp.mlx_budget` (what the MLX FFT holds, for plans).

Importing :mod:`audiogate.dsp` imports neither MLX nor SciPy. The names below are
re-exported for convenience; :data:`~audiogate.dsp.blocks.BLOCK_THREADS` is not (read
it from :mod:`audiogate.dsp.blocks`, where tests and benchmarks may lower it).
"""

from __future__ import annotations

from audiogate.dsp.blocks import block_threads, run_blocks
from audiogate.dsp.identity import plan_identity, resample_identity
from audiogate.dsp.melbank import (
    SparseProjection,
    covered_bins,
    sparse_projection,
    triangular_filters,
)
from audiogate.dsp.mlx_loader import load_mlx_module
from audiogate.dsp.scratch import thread_scratch

__all__ = [
    "SparseProjection",
    "block_threads",
    "covered_bins",
    "load_mlx_module",
    "plan_identity",
    "resample_identity",
    "run_blocks",
    "sparse_projection",
    "thread_scratch",
    "triangular_filters",
]
