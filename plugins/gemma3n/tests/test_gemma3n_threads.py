"""Frame blocks spread over threads give the single-threaded features bit for bit.

:func:`audiogate.dsp.blocks.run_blocks` hands a clip's frame blocks to up to
``BLOCK_THREADS`` threads, each with its own scratch; the parity tests bound the error
against the FE, this pins that the thread count changes nothing at all.
"""

from __future__ import annotations

import numpy as np
import pytest
from gemma3n_helpers import noise

import audiogate.dsp.blocks
from audiogate_gemma3n.geometry import feature_frames
from audiogate_gemma3n.logmel import FRAMES_PER_BLOCK, log_mel_frames


@pytest.mark.parametrize("lead_samples", [0, 77])
def test_log_mel_frames_do_not_depend_on_the_thread_count(monkeypatch, lead_samples) -> None:
    x = noise(160 * FRAMES_PER_BLOCK * 5 + 1_000, seed=4)
    frames = feature_frames(x.size + lead_samples) + 3  # with right-padding tail frames

    def compute() -> np.ndarray:
        out = np.empty((frames, 128), dtype=np.float32)
        log_mel_frames(x, lead_samples=lead_samples, first_frame=0, stop_frame=frames, out=out)
        return out

    threaded = compute()
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
    np.testing.assert_array_equal(threaded, compute())
