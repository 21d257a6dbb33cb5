"""The float64 rFFT alone, as the frontends run it: the floor the family benchmarks print.

Imported by ``bench_phi4mm.py``, ``bench_gemma3n.py`` and ``bench_qwen2audio.py`` (run as
scripts, this folder is on ``sys.path``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

import audiogate.dsp.blocks
from audiogate.cancel import NEVER, Checkpoint


def blocked_rfft(frames: int, *, n_fft: int, filled: int, block_frames: int) -> Callable[[], None]:
    """A callable running the float64 ``rfft`` of ``frames`` frames of ``n_fft`` points
    (the first ``filled`` non-zero, the rest zero padding) in blocks of ``block_frames``
    over audiogate's block threads, each thread with its own buffers, as the frontends
    keep them."""
    local = threading.local()

    def block(index: int) -> None:
        if not hasattr(local, "frames"):
            local.frames = np.zeros((block_frames, n_fft))
            local.frames[:, :filled] = 0.1
            local.spectrum = np.empty((block_frames, n_fft // 2 + 1), np.complex128)
        count = min(block_frames, frames - index * block_frames)
        np.fft.rfft(local.frames[:count], axis=-1, out=local.spectrum[:count])

    def run() -> None:
        audiogate.dsp.blocks.run_blocks(
            -(-frames // block_frames),
            block,
            cancel=NEVER,
            checkpoint=Checkpoint.FEATURE,
            clip_index=0,
        )

    return run
