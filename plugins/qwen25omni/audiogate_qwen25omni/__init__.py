"""Qwen2.5-Omni family plugin for audiogate (the thinker's audio input).

Where each stage lives, one module a line:

* ``policy``: pinned constants (300 s, 7,500 rows), checkpoint keys, ``spec()``.
* ``geometry``: samples → Whisper frames (one 300 s window) → encoder rows.
* ``resample``: ``plan_resample`` / ``resample``: 16 kHz as is, any other rate via soxr HQ.
* ``features``: ``plan_features`` and ``extract_features`` on :mod:`audiogate.dsp.whisper`.
* ``streaming``: ``open_feature_stream``: the log-mel computed as a streamed clip arrives.
* ``collate``: ``collate_features``: ``input_features`` and ``feature_attention_mask``.
* ``prompt``: ``expand_prompt``: each audio part or plain ``<|audio_bos|><|AUDIO|><|audio_eos|>``
  → ``<|audio_bos|>`` + n × ``<|AUDIO|>`` + ``<|audio_eos|>``.
* ``plugin``: registers the family and these stages (``audiogate.package_stages``).
* ``tiny_model``: a tiny random thinker for tests (``audiogate.testing.tiny_models``).
"""

from __future__ import annotations

from audiogate_qwen25omni._version import __version__

__all__ = ["__version__"]
