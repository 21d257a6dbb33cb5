"""Qwen3-Omni family plugin for audiogate (the audio path of the MoE thinker).

Where each stage lives, one module a line:

* ``policy``: pinned constants (300 s per clip, 3,900 rows), checkpoint keys, ``spec()``.
* ``geometry``: samples → Whisper frames (the clip's own, ``N // 160``) → encoder rows.
* ``resample``: ``plan_resample`` / ``resample``: 16 kHz as is, any other rate via soxr HQ.
* ``features``: ``plan_features`` and ``extract_features`` on :mod:`audiogate.dsp.whisper`.
* ``streaming``: ``open_feature_stream``: the log-mel computed as a streamed clip arrives.
* ``collate``: ``collate_features``: ``input_features`` and ``feature_attention_mask``,
  padded to the longest clip.
* ``prompt``: ``expand_prompt``: each audio part or plain
  ``<|audio_start|><|audio_pad|><|audio_end|>`` → ``<|audio_start|>`` + n ×
  ``<|audio_pad|>`` + ``<|audio_end|>``.
* ``plugin``: registers the family and these stages (``audiogate.package_stages``).
* ``tiny_model``: a tiny random thinker for tests (``audiogate.testing.tiny_models``).
"""

from __future__ import annotations

from audiogate_qwen3omni._version import __version__

__all__ = ["__version__"]
