"""Voxtral family plugin for audiogate.

Where each stage lives (the file map every shipped family shares), one module a line:

* ``policy``: pinned constants (30 min, 60 windows, ``[AUDIO]`` 24), checkpoint keys, ``spec()``.
* ``geometry``: samples → 30 s windows → Whisper frames → 375 tokens a window.
* ``resample``: ``plan_resample`` / ``resample``: soxr HQ at soxr's length (mistral-common).
* ``features``: the features stage on the shared Whisper frontend (``audiogate.dsp.whisper``,
  ``"multiple"`` mode: one STFT and one clamp over all windows of a clip).
* ``streaming``: ``open_feature_stream``: the log-mel computed as a streamed clip arrives.
* ``collate``: ``collate_features``: every clip's windows concatenated as ``input_features``.
* ``prompt``: ``expand_prompt``: each clip → ``[BEGIN_AUDIO]`` + n × ``[AUDIO]``.
* ``plugin``: the entry point: registers the family with the stages above.
* ``tiny_model``: a tiny random ``VoxtralForConditionalGeneration`` for tests.
"""

from __future__ import annotations

from audiogate_voxtral._version import __version__

__all__ = ["__version__"]
