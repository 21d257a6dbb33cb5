"""Audio Flamingo 3 geometry: samples → 30 s windows → Whisper frames → pooled rows.

``AudioFlamingo3Processor._process_audio`` (transformers 5.24.0) cuts each 16 kHz clip of
``N`` samples into ``max(1, ceil(N / 480,000))`` windows of at most 480,000 samples (at
most ``max_audio_len // chunk_length`` = 600 // 30 = 20 of them), runs
``WhisperFeatureExtractor(feature_size=128)`` on each window as its own item (padded to
30 s, clamped on its own), and counts the clip's ``<sound>`` tokens from the sum of its
windows' masks through the encoder's stride-2 conv and stride-2 average pool. The feature
plan, the extractor and the prompt expansion all call :func:`af3_geometry` /
:func:`audio_tokens`; nothing else computes a token count or a feature shape.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = [
    "HOP",
    "MAX_FRAMES",
    "MAX_ROWS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MAX_WINDOWS",
    "N_FFT",
    "N_MELS",
    "SAMPLE_RATE_HZ",
    "WINDOW_FRAMES",
    "WINDOW_SAMPLES",
    "WINDOW_SECONDS",
    "AF3Geometry",
    "af3_geometry",
    "audio_tokens",
]

SAMPLE_RATE_HZ: Final = 16_000
#: ``chunk_length``: the Whisper window, in seconds and samples (``n_samples``).
WINDOW_SECONDS: Final = 30
WINDOW_SAMPLES: Final = SAMPLE_RATE_HZ * WINDOW_SECONDS  # 480,000
N_FFT: Final = 400
HOP: Final = 160
N_MELS: Final = 128
#: ``nb_max_frames``: frames of one window (2 × the encoder's 1500 positions).
WINDOW_FRAMES: Final = WINDOW_SAMPLES // HOP  # 3000
#: ``max_audio_len`` of the processor: 600 s, that is ``600 // 30`` = 20 windows.
MAX_SECONDS: Final = 600
MAX_WINDOWS: Final = MAX_SECONDS // WINDOW_SECONDS
MAX_SAMPLES: Final = MAX_WINDOWS * WINDOW_SAMPLES  # 9,600,000
MAX_FRAMES: Final = MAX_WINDOWS * WINDOW_FRAMES  # 60,000
#: Pooled rows of 20 full windows: ``audio_tokens(60,000)``.
MAX_ROWS: Final = 15_000


def audio_tokens(valid_frames: int) -> int:
    """``<sound>`` tokens of a clip whose windows' masks hold ``valid_frames`` ones in all.

    ``a = (L - 1) // 2 + 1`` (the stride-2 conv), ``n = (a - 2) // 2 + 1`` (the stride-2
    average pool), on the clip's total ``L`` as ``AudioFlamingo3Processor.
    _get_audio_token_length`` counts it: 100 frames → 25, 3000 → 750, 4501 → 1125. A full
    window gives 750 rows, so the total equals the model's per-window count summed
    (``_get_feat_extract_output_lengths`` per mask row).
    """
    if not 0 <= valid_frames <= MAX_FRAMES:
        raise ValueError(f"valid_frames must be in 0..{MAX_FRAMES}, not {valid_frames}")
    after_conv = (valid_frames - 1) // 2 + 1
    return max(0, (after_conv - 2) // 2 + 1)


@attrs.frozen(kw_only=True)
class AF3Geometry:
    """How one clip of normalized 16 kHz samples maps onto the processor's windows.

    :param samples: normalized samples ``N`` (at most 9,600,000).
    :param windows: 30 s windows, ``max(1, ceil(N / 480,000))``.
    :param valid_frames: ``L = ceil(N / 160)``: the ones of all windows' masks.
    :param tokens: pooled rows, :func:`audio_tokens` of ``L``.
    """

    samples: int
    windows: int
    valid_frames: int
    tokens: int

    @property
    def feature_shape(self) -> tuple[int, int, int]:
        """``(windows, 128, 3000)``: one Whisper window per row."""
        return (self.windows, N_MELS, WINDOW_FRAMES)


def af3_geometry(samples: int) -> AF3Geometry:
    """The geometry of a clip of ``samples`` normalized samples (0..9,600,000)."""
    if not 0 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be in 0..{MAX_SAMPLES}, not {samples}")
    windows = max(1, -(-samples // WINDOW_SAMPLES))
    # Windows hold 480,000 samples = 3000 whole hops, so the windows' ceil(n / 160) sum to
    # the clip's.
    valid = -(-samples // HOP)
    return AF3Geometry(
        samples=samples, windows=windows, valid_frames=valid, tokens=audio_tokens(valid)
    )
