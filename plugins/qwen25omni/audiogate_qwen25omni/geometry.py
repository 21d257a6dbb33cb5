"""Qwen2.5-Omni geometry: samples → Whisper frames → encoder rows (prompt tokens).

``Qwen2_5OmniProcessor`` runs the checkpoint's ``WhisperFeatureExtractor``
(``preprocessor_config.json`` of Qwen/Qwen2.5-Omni-7B: 16 kHz, 128 bins, ``n_fft`` 400,
``hop_length`` 160, ``chunk_length`` 300, ``n_samples`` 4,800,000, ``nb_max_frames``
30,000) with ``padding="max_length"`` forced (``_process_audio``) and the extractor's
default ``truncation=True``: every clip is padded to one 300 s window, and a longer one
would be cut silently, so here it is refused. The feature plan, the extractor and the
prompt expansion all call :func:`clip_geometry` / :func:`audio_tokens`.
"""

from __future__ import annotations

from typing import Final

import attrs

from audiogate.dsp.whisper_geometry import HOP, N_FFT, SAMPLE_RATE_HZ, WhisperPlan, whisper_plan

__all__ = [
    "FEATURE_SHAPE",
    "HOP",
    "MAX_FRAMES",
    "MAX_ROWS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MIN_SAMPLES",
    "N_FFT",
    "N_MELS",
    "SAMPLE_RATE_HZ",
    "ClipGeometry",
    "audio_tokens",
    "clip_geometry",
    "clip_plan",
]

#: ``chunk_length``: the one window every clip is padded to, seconds.
MAX_SECONDS: Final = 300
#: ``n_samples``: 300 s at 16 kHz (the per-clip maximum).
MAX_SAMPLES: Final = SAMPLE_RATE_HZ * MAX_SECONDS  # 4,800,000
N_MELS: Final = 128
#: ``nb_max_frames``.
MAX_FRAMES: Final = MAX_SAMPLES // HOP  # 30,000
#: Rows of a full window: ``audio_tokens(30000)``.
MAX_ROWS: Final = 7_500
#: Every clip's features: 128 mel bins × the window's 30,000 frames.
FEATURE_SHAPE: Final = (N_MELS, MAX_FRAMES)
#: The fewest samples that give one row: ``ceil(321 / 160) = 3`` frames → 1 row (320
#: samples give 2 frames and no row, which the processor would leave as no audio token).
MIN_SAMPLES: Final = 321


def audio_tokens(valid_frames: int) -> int:
    """Encoder rows (prompt tokens) of ``valid_frames`` mask frames.

    ``a = (L - 1) // 2 + 1`` (the stride-2 conv), ``n = (a - 2) // 2 + 1`` (the stride-2
    pool): ``_get_feat_extract_output_lengths`` of ``processing_qwen2_5_omni`` and of the
    audio encoder. 100 frames → 25, 30,000 → 7,500.
    """
    if not 0 <= valid_frames <= MAX_FRAMES:
        raise ValueError(f"valid_frames must be in 0..{MAX_FRAMES}, not {valid_frames}")
    after_conv = (valid_frames - 1) // 2 + 1
    return max(0, (after_conv - 2) // 2 + 1)


@attrs.frozen(kw_only=True)
class ClipGeometry:
    """How one clip of normalized 16 kHz samples maps onto the 300 s window.

    :param samples: normalized samples ``N`` (at most 4,800,000).
    :param valid_frames: ``L = ceil(N / 160)``: the frame mask's ones.
    :param computed_frames: frames whose window touches the clip; the rest are constant.
    :param tokens: encoder rows, :func:`audio_tokens` of ``L``.
    """

    samples: int
    valid_frames: int
    computed_frames: int
    tokens: int


def clip_plan(samples: int) -> WhisperPlan:
    """The shared frontend's plan: one ``"max_length"`` window of 4,800,000 samples."""
    return whisper_plan(samples, n_mels=N_MELS, padding="max_length", chunk_samples=MAX_SAMPLES)


def clip_geometry(samples: int) -> ClipGeometry:
    """The geometry of a clip of ``samples`` normalized samples (0..4,800,000)."""
    if not 0 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be in 0..{MAX_SAMPLES}, not {samples}")
    valid = -(-samples // HOP)
    computed = min(MAX_FRAMES, -(-(samples + N_FFT // 2) // HOP)) if samples else 0
    return ClipGeometry(
        samples=samples, valid_frames=valid, computed_frames=computed, tokens=audio_tokens(valid)
    )
