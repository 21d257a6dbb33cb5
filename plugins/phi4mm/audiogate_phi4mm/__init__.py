"""Phi-4 Multimodal family plugin for audiogate.

Where each stage lives (the file map every shipped family shares), one module a line:

* ``policy``: pinned constants, checkpoint keys, ``spec()``, the variant detection.
* ``geometry``: samples → frames → tokens (``clip_geometry``: frames, tokens, shape).
* ``resample``: ``plan_resample`` / ``resample``: the SpeechLib rule, or soxr HQ (native).
* ``melbank``: the SpeechLib and transformers-native 80-filter Kaldi-mel banks.
* ``logmel``: the numpy SpeechLib log-mel kernel (blocked, per-thread scratch).
* ``mlx_logmel``: the kernel and the batch in MLX (only for ``feature_backend="mlx"``).
* ``features``: the features stage: ``plan_features`` and ``extract_features``.
* ``streaming``: ``open_feature_stream``: resampling and log-mel as a streamed clip arrives.
* ``collate``: ``collate_features``: the padded batch, named for the variant's model.
* ``prompt``: ``expand_prompt``: ``<|audio_N|>`` (remote code) or ``<|audio|>`` per clip.
* ``plugin``: the hook implementations only, each delegating to one function above.
"""

from __future__ import annotations

from audiogate_phi4mm._version import __version__

__all__ = ["__version__"]
