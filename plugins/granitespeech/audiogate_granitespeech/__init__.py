"""Granite Speech family plugin for audiogate.

Where each stage lives, one module a line:

* ``policy``: pinned constants (granite-speech-3.3-2b's files, the serving budget),
  checkpoint keys, ``spec()``.
* ``geometry``: samples → mel frames → stacked rows → projector tokens.
* ``resample``: ``plan_resample`` / ``resample``: 16 kHz as is, other rates via soxr HQ.
* ``melbank``: torchaudio's 80-bin HTK mel bank (n_fft 512).
* ``logmel``: the numpy log-mel kernel (blocked, per-thread scratch) and batch frames.
* ``features``: the features stage: ``plan_features`` and ``extract_features``.
* ``streaming``: ``open_feature_stream``: the log-mel computed as a streamed clip arrives.
* ``collate``: ``collate_features``: ``input_features`` and ``input_features_mask``,
  as the processor pads a batch.
* ``prompt``: ``expand_prompt``: chat audio parts or ``<|audio|>`` → n × ``<|audio|>``.
* ``plugin``: the registration hook: the family's spec and its stages (the modules above).
* ``tiny_model``: a tiny random ``GraniteSpeechForConditionalGeneration`` for tests.
"""

from __future__ import annotations

from audiogate_granitespeech._version import __version__

__all__ = ["__version__"]
