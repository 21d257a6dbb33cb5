"""Qwen2-Audio family plugin for audiogate.

Where each stage lives (the file map every shipped family shares), one module a line:

* ``policy``: pinned constants (the Qwen2-Audio serving guide's rates, 30 s, 750 rows),
  checkpoint keys, ``spec()``.
* ``geometry``: samples → Whisper frames → pooled rows (``whisper_geometry``, the window).
* ``resample``: ``plan_resample`` / ``resample``: 16 kHz as is, 44.1 and 48 kHz via soxr HQ.
* ``melbank``: the Slaney mel bank of the Whisper frontend and its sparse form.
* ``logmel``: the numpy Whisper log-mel kernel (blocked, per-thread scratch).
* ``mlx_logmel``: the kernel and the batch in MLX (only for ``feature_backend="mlx"``).
* ``features``: the features stage: ``plan_features`` and ``extract_features``.
* ``streaming``: ``open_feature_stream``: the log-mel computed as a streamed clip arrives.
* ``collate``: ``collate_features``: ``input_features`` and ``feature_attention_mask``.
* ``prompt``: ``expand_prompt``: chat audio parts or ``[audio:<sha256>]`` → n × ``<|AUDIO|>``.
* ``plugin``: the hook implementations only, each delegating to one function above.
* ``references``: (this family only) the ``[audio:<sha256>]`` references of a plain prompt.
"""

from __future__ import annotations

from audiogate_qwen2audio._version import __version__

__all__ = ["__version__"]
