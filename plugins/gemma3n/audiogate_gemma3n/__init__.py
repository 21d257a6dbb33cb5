"""Gemma 3n family plugin for audiogate.

Where each stage lives:

* :mod:`~audiogate_gemma3n.policy`: pinned defaults (30 s / 480,000 samples / 2,997 frames
  per request, 188 soft tokens per clip, token ids 256000 / 262273 / 262272) and the
  recognized checkpoint keys. Over-long audio is refused unless the checkpoint opts in to
  ``audiogate_audio_limits.overflow = "truncate"``, which cuts at the limit and reports
  processed and received durations.
* :mod:`~audiogate_gemma3n.resample`: the seed's deterministic float32 linear resampler to
  16 kHz (no anti-aliasing, kept for parity).
* :mod:`~audiogate_gemma3n.framing`, :mod:`~audiogate_gemma3n.melbank`,
  :mod:`~audiogate_gemma3n.features`: ``Gemma3nAudioFeatureExtractor``'s USM log-mel,
  ``[shape=(T, 128)]``, within 1e-6 of it. Clips of at most 512 samples are **refused**
  (the reference gives them zero frames, which leaves the audio tower nothing to encode).
* :mod:`~audiogate_gemma3n.collate`: ``input_features`` / ``input_features_mask`` equal to
  the FE's batch, right padding by default, left padding supported.
* :mod:`~audiogate_gemma3n.prompt`: ``\\n\\n<start_of_audio>`` + 188 ×
  ``<audio_soft_token>`` + ``<end_of_audio>\\n\\n`` per clip, as ``Gemma3nProcessor``.
"""

from __future__ import annotations

from audiogate_gemma3n._version import __version__

__all__ = ["__version__"]
