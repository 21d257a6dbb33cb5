"""GLM-ASR family plugin for audiogate.

Where each stage lives (the file map every shipped family shares), one module a line:

* ``policy``: pinned constants (21 windows of 30 s, ``<|pad|>`` 59260), checkpoint keys,
  ``spec()``.
* ``geometry``: samples → 30 s windows → Whisper frames → merged rows (``glmasr_geometry``).
* ``resample``: ``plan_resample`` / ``resample``: soxr HQ at ``librosa.load``'s length.
* ``features``: the features stage on :mod:`audiogate.dsp.whisper` (``"windows"`` mode).
* ``streaming``: ``open_feature_stream``: the log-mel computed as a streamed clip arrives.
* ``collate``: ``collate_features``: ``input_features`` and ``input_features_mask``, a row
  per window.
* ``prompt``: ``expand_prompt``: chat audio parts or ``<|pad|>`` → the audio block with
  n × ``<|pad|>``.
* ``plugin``: registers the family with its stages (``audiogate.package_stages``).
* ``tiny_model``: a tiny random model of the family for tests.
"""

from __future__ import annotations

from audiogate_glmasr._version import __version__

__all__ = ["__version__"]
