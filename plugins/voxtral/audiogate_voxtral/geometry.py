"""Voxtral geometry: 16 kHz samples → 30 s windows → Whisper frames → audio tokens.

mistral-common's ``AudioEncoder`` (the tokenizer ``VoxtralProcessor.apply_chat_template``
runs) zero-pads each 16 kHz clip to the next multiple of ``chunk_length_s`` (30 s,
480,000 samples) and counts its tokens from that padded length: ``frames = P / 160``
(``hop_length``), one token per ``(16000 // frame_rate) / 160 = 8`` frames
(``frame_rate`` 12.5), so 375 ``[AUDIO]`` per window. The model agrees: the encoder's
stride-2 convolution gives 1500 positions per 3000-frame window and the projector folds
four of them (``intermediate_size`` 5120 = 4 × ``hidden_size`` 1280) into one token.
The feature plan, the extractor and the prompt expansion all call :func:`voxtral_geometry`;
nothing else counts windows or tokens.
"""

from __future__ import annotations

from typing import Final

import attrs

from audiogate.dsp.whisper_geometry import CHUNK_SAMPLES, HOP, N_FFT, SAMPLE_RATE_HZ

__all__ = [
    "CHUNK_SAMPLES",
    "FRAMES_PER_TOKEN",
    "HOP",
    "N_FFT",
    "N_MELS",
    "SAMPLE_RATE_HZ",
    "TOKENS_PER_WINDOW",
    "WINDOW_FRAMES",
    "VoxtralGeometry",
    "audio_tokens",
    "voxtral_geometry",
]

N_MELS: Final = 128
#: Whisper frames of one 30 s window (``nb_max_frames``, ``max_source_positions`` × 2).
WINDOW_FRAMES: Final = CHUNK_SAMPLES // HOP  # 3000
#: tekken.json ``audio.frame_rate`` 12.5: ``int((16000 // 12.5) / 160)`` frames per token.
FRAMES_PER_TOKEN: Final = int((SAMPLE_RATE_HZ // 12.5) / HOP)  # 8
TOKENS_PER_WINDOW: Final = WINDOW_FRAMES // FRAMES_PER_TOKEN  # 375


def audio_tokens(padded_samples: int) -> int:
    """``[AUDIO]`` tokens of a padded signal, as mistral-common's ``AudioEncoder`` counts them.

    A length that is not a multiple of the hop counts ``ceil(n / 160 - 1)`` frames (the
    encoder's own rule; never reached here, as padded lengths are multiples of 480,000),
    else ``n / 160``; then ``ceil(frames / 8)``.
    """
    if padded_samples < 0:
        raise ValueError(f"padded_samples must be >= 0, not {padded_samples}")
    exact = not padded_samples % HOP
    frames = padded_samples // HOP if exact else -(-(padded_samples - HOP) // HOP)
    return -(-frames // FRAMES_PER_TOKEN)


@attrs.frozen(kw_only=True)
class VoxtralGeometry:
    """How one clip of normalized 16 kHz samples maps onto Voxtral's windows.

    :param samples: normalized samples ``N`` (at least 1).
    :param windows: ``k = ceil(N / 480,000)`` 30 s windows.
    :param padded_samples: ``P = 480,000 k``, what mistral-common pads the clip to.
    :param frames: ``P / 160 = 3000 k`` feature frames (all go to the encoder).
    :param tokens: ``375 k`` ``[AUDIO]`` tokens, :func:`audio_tokens` of ``P``.
    """

    samples: int
    windows: int
    padded_samples: int
    frames: int
    tokens: int


def voxtral_geometry(samples: int) -> VoxtralGeometry:
    """The geometry of a clip of ``samples`` normalized samples (``>= 1``)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, not {samples}")
    windows = -(-samples // CHUNK_SAMPLES)
    padded = windows * CHUNK_SAMPLES
    tokens = audio_tokens(padded)
    assert tokens == windows * TOKENS_PER_WINDOW, (samples, tokens)
    return VoxtralGeometry(
        samples=samples,
        windows=windows,
        padded_samples=padded,
        frames=padded // HOP,
        tokens=tokens,
    )
