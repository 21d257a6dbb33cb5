"""Gemma 3n geometry: samples → frames → tokens, with the USM frontend's pinned constants.

Every constant is a default of ``Gemma3nAudioFeatureExtractor`` (transformers revision
``181beb3ba4c47098ed8cbc97ee250d1d45ae0107``, also 5.24.0), which the released
checkpoints load unchanged, or of ``Gemma3nProcessor`` / ``Gemma3nConfig``. The feature
plan, the extractor, the batch view and the policy defaults all count frames with
:func:`feature_frames`, so the token count and the feature shape cannot drift apart.

Clips of at most 512 normalized samples are **refused** (:data:`MIN_SAMPLES` = 513). The
reference admits them and returns zero frames, but a zero-frame clip gives the audio tower
nothing to encode: its 188 soft tokens would all be padding embeddings, and the real model
code has no defined behaviour for an empty feature tensor. A refusal names the clip and the
minimum instead.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "FEATURE_SIZE",
    "FFT_LENGTH",
    "FRAME_HOP_SAMPLES",
    "FRAME_SAMPLES",
    "MAX_FREQUENCY_HZ",
    "MEL_FLOOR",
    "MIN_FREQUENCY_HZ",
    "MIN_SAMPLES",
    "PAD_MULTIPLE_SAMPLES",
    "PREEMPHASIS",
    "SAMPLE_RATE_HZ",
    "SOFT_TOKENS_PER_CLIP",
    "UNFOLD_SAMPLES",
    "encoder_tokens",
    "feature_frames",
    "padded_samples",
    "valid_frames_in_padded_batch",
]

SAMPLE_RATE_HZ: Final = 16_000
#: ``feature_size``: mel bins per frame.
FEATURE_SIZE: Final = 128
#: ``frame_length_ms`` 32 at 16 kHz: the window and pre-emphasis length.
FRAME_SAMPLES: Final = 512
#: The FE unfolds one sample more than the frame (for the pre-emphasis); that extra
#: sample is never used, but it decides how many frames fit.
UNFOLD_SAMPLES: Final = FRAME_SAMPLES + 1
#: ``hop_length_ms`` 10 at 16 kHz.
FRAME_HOP_SAMPLES: Final = 160
#: ``2**ceil(log2(512))``, doubled by ``fft_overdrive=True``.
FFT_LENGTH: Final = 1024
#: ``pad_to_multiple_of`` of ``Gemma3nAudioFeatureExtractor.__call__``.
PAD_MULTIPLE_SAMPLES: Final = 128
PREEMPHASIS: Final = 0.97
MIN_FREQUENCY_HZ: Final = 125.0
MAX_FREQUENCY_HZ: Final = 7600.0
MEL_FLOOR: Final = 1e-5
#: ``audio_seq_length`` (processor) / ``audio_soft_tokens_per_image`` (config).
SOFT_TOKENS_PER_CLIP: Final = 188
#: Fewest normalized samples that give one frame (see the module docstring).
MIN_SAMPLES: Final = UNFOLD_SAMPLES


def padded_samples(samples: int) -> int:
    """``samples`` rounded up to a multiple of 128, as the FE pads every batch."""
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    return -(-samples // PAD_MULTIPLE_SAMPLES) * PAD_MULTIPLE_SAMPLES


def _frames_of_padded(padded: int) -> int:
    if padded < UNFOLD_SAMPLES:
        return 0
    return (padded - UNFOLD_SAMPLES) // FRAME_HOP_SAMPLES + 1


def feature_frames(samples: int) -> int:
    """Frames of a clip of ``samples`` normalized samples: ``(N_pad - 513)//160 + 1``.

    ``N_pad`` is ``samples`` rounded up to a multiple of 128; 0 when ``N_pad < 513``
    (every clip of at most 512 samples). 480,000 samples (30 s) give 2,997 frames.
    """
    return _frames_of_padded(padded_samples(samples))


def valid_frames_in_padded_batch(samples: int) -> int:
    """Frames the FE marks valid for a clip right-padded inside a longer batch.

    The FE samples its sample-level attention mask at each frame's first sample
    (``attention_mask[::160]``), so frame ``t`` is valid iff ``160·t < samples``: two to
    four frames past the clip's own :func:`feature_frames` reach into the padding and
    still count as valid (the "always 3 longer" TODO in the FE source). Capped by the
    batch's frame count by the caller.
    """
    return -(-samples // FRAME_HOP_SAMPLES)


def encoder_tokens(frames: int) -> int:
    """Tokens the audio tower really emits for ``frames`` frames (before padding to 188).

    Two stride-2 SSCP convolutions, then the conformer's reduction by 4:
    ``ceil(ceil(ceil(T/2)/2)/4)``; 2,997 frames give 188, 97 frames (1 s) give 7.
    """
    if frames < 0:
        raise ValueError(f"frames must be >= 0, got {frames}")
    after_first = -(-frames // 2)
    after_second = -(-after_first // 2)
    return -(-after_second // 4)
