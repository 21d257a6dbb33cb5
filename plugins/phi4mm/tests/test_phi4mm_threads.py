"""Blocks spread over threads give the single-threaded log-mel and resampling bit for bit.

:func:`audiogate.dsp.blocks.run_blocks` hands a clip's blocks to up to ``BLOCK_THREADS``
threads, each with its own scratch; the parity tests bound the error against the
original, these pin that the thread count changes nothing at all.
"""

from __future__ import annotations

import numpy as np
import pytest

import audiogate.dsp.blocks
from audiogate.cancel import NEVER
from audiogate_phi4mm.geometry import NARROWBAND, WIDEBAND, frame_count
from audiogate_phi4mm.logmel import BLOCK_FRAMES, log_mel
from audiogate_phi4mm.resample import BLOCK_OUTPUTS, decimate


def _both(monkeypatch: pytest.MonkeyPatch, compute):
    """``(compute() on the default threads, compute() on the calling thread only)``."""
    threaded = compute()
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
    return threaded, compute()


@pytest.mark.parametrize(
    ("frontend", "bank"), [(WIDEBAND, "speechlib"), (WIDEBAND, "native"), (NARROWBAND, "speechlib")]
)
def test_log_mel_does_not_depend_on_the_thread_count(monkeypatch, frontend, bank) -> None:
    frames = 5 * BLOCK_FRAMES + 17
    samples = (frames - 1) * frontend.hop_samples + frontend.window_samples + 3
    x = (0.3 * np.random.default_rng(5).standard_normal(samples)).astype(np.float32)
    assert frame_count(samples, frontend) == frames

    def compute():
        return log_mel(x, frontend=frontend, bank=bank, frames=frames, clip_index=0, cancel=NEVER)

    threaded, single = _both(monkeypatch, compute)
    np.testing.assert_array_equal(threaded, single)


@pytest.mark.parametrize("down", [2, 3, 6])
def test_decimation_does_not_depend_on_the_thread_count(monkeypatch, down: int) -> None:
    samples = BLOCK_OUTPUTS * down * 4 + 11
    x = (0.3 * np.random.default_rng(down).standard_normal(samples)).astype(np.float32)
    threaded, single = _both(
        monkeypatch, lambda: decimate(x, down=down, clip_index=0, cancel=NEVER)
    )
    np.testing.assert_array_equal(threaded, single)
