"""Frame blocks spread over threads give the single-threaded features bit for bit.

:func:`audiogate.dsp.blocks.run_blocks` hands a clip's frame blocks to up to
``BLOCK_THREADS`` threads, each with its own scratch, and the window maximum is taken over
the blocks' maxima; the parity tests bound the error against the reference, this pins
that the thread count changes nothing at all.
"""

from __future__ import annotations

import numpy as np
import pytest
from qwen2audio_helpers import make_signal

import audiogate.dsp.blocks
from audiogate.cancel import NEVER
from audiogate_qwen2audio.geometry import whisper_geometry
from audiogate_qwen2audio.logmel import whisper_log_mel


@pytest.mark.parametrize("samples", [200_001, 480_000])
@pytest.mark.parametrize("kind", ["noise", "am"])
def test_features_do_not_depend_on_the_thread_count(monkeypatch, samples, kind) -> None:
    x = make_signal(kind, samples=samples, seed=samples)
    geometry = whisper_geometry(samples)
    threaded = whisper_log_mel(x, geometry, clip_index=0, cancel=NEVER)
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
    single = whisper_log_mel(x, geometry, clip_index=0, cancel=NEVER)
    np.testing.assert_array_equal(threaded[0], single[0])
    np.testing.assert_array_equal(threaded[1], single[1])
