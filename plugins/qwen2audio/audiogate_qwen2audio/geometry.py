"""Qwen2-Audio geometry: samples → Whisper frames → pooled rows (prompt tokens).

The Whisper frontend's framing, as ``WhisperFeatureExtractor(feature_size=128)`` of
Qwen/Qwen2-Audio-7B-Instruct declares it (``preprocessor_config.json``: 16 kHz, ``n_fft``
400, ``hop_length`` 160, ``n_samples`` 480,000, ``nb_max_frames`` 3000). The feature plan,
the extractor and the prompt expansion all call :func:`whisper_geometry` /
:func:`audio_tokens`; nothing else computes a token count or a feature shape.
"""

from __future__ import annotations

from typing import Final

import attrs

from audiogate.dsp.whisper_geometry import CHUNK_SAMPLES, HOP, N_FFT, SAMPLE_RATE_HZ

__all__ = [
    "FEATURE_SHAPE",
    "HOP",
    "MAX_FRAMES",
    "MAX_ROWS",
    "MAX_SAMPLES",
    "N_FFT",
    "N_MELS",
    "SAMPLE_RATE_HZ",
    "WhisperGeometry",
    "audio_tokens",
    "whisper_geometry",
]

#: ``n_samples``: the 30 s window every clip is padded to (and the per-clip maximum).
MAX_SAMPLES: Final = CHUNK_SAMPLES  # 480,000
N_MELS: Final = 128
MAX_FRAMES: Final = MAX_SAMPLES // HOP  # 3000 = nb_max_frames = 2 × max_source_positions
#: Pooled rows of a full window: ``audio_tokens(3000)``.
MAX_ROWS: Final = 750
#: Every clip's features: 128 mel bins × the window's 3000 frames.
FEATURE_SHAPE: Final = (N_MELS, MAX_FRAMES)


def audio_tokens(valid_frames: int) -> int:
    """Pooled rows (prompt tokens) of ``valid_frames`` mask frames.

    ``a = (L - 1) // 2 + 1`` (the encoder's stride-2 conv), ``n = (a - 2) // 2 + 1`` (its
    stride-2 average pool), as ``Qwen2AudioProcessor`` and the model's
    ``_get_feat_extract_output_lengths`` count them: 100 frames → 25, 3000 → 750.
    """
    if not 0 <= valid_frames <= MAX_FRAMES:
        raise ValueError(f"valid_frames must be in 0..{MAX_FRAMES}, not {valid_frames}")
    after_conv = (valid_frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


@attrs.frozen(kw_only=True)
class WhisperGeometry:
    """How one clip of normalized 16 kHz samples maps onto the 30 s Whisper window.

    :param samples: normalized samples ``N`` (at most 480,000).
    :param valid_frames: ``L = ceil(N / 160)``: the frame mask's ones.
    :param computed_frames: frames whose 400-sample window touches the clip,
        ``min(3000, ceil((N + 200) / 160))``; the rest see only zero padding.
    :param tokens: pooled rows, :func:`audio_tokens` of ``L``.
    """

    samples: int
    valid_frames: int
    computed_frames: int
    tokens: int


def whisper_geometry(samples: int) -> WhisperGeometry:
    """The geometry of a clip of ``samples`` normalized samples (0..480,000)."""
    if not 0 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be in 0..{MAX_SAMPLES}, not {samples}")
    valid = -(-samples // HOP)
    # Frame t covers padded samples [160t - 200, 160t + 200): it holds audio while
    # 160t - 200 < N (frames 0 and 1 also reflect samples 1..200 of the clip).
    computed = min(MAX_FRAMES, -(-(samples + N_FFT // 2) // HOP)) if samples else 0
    tokens = audio_tokens(valid)
    # 480,000 samples → 3000 frames → 750 rows: the Qwen2-Audio serving guide's cap holds.
    assert tokens <= MAX_ROWS, (samples, tokens)
    return WhisperGeometry(
        samples=samples, valid_frames=valid, computed_frames=computed, tokens=tokens
    )
