"""Gemma 3n family plugin for audiogate.

Where each stage lives (the file map every shipped family shares), one module a line:

* ``policy``: pinned constants (30 s, 188 soft tokens, token ids), checkpoint keys, ``spec()``.
* ``geometry``: samples → frames → tokens, the USM framing constants (≤ 512 samples: refused).
* ``resample``: ``plan_resample`` / ``resample``: mlxcel's float32 linear resampler.
* ``melbank``: the HTK mel bank (125–7600 Hz, triangles in Hz) and its sparse projection.
* ``logmel``: the numpy USM log-mel kernel (blocked, per-thread scratch), within 1e-6 of the FE.
* ``mlx_logmel``: the kernel and the batch in MLX (only for ``feature_backend="mlx"``).
* ``features``: the features stage: ``plan_features`` and ``extract_features`` (padding side).
* ``streaming``: ``open_feature_stream``: resampling and log-mel as a streamed clip arrives.
* ``collate``: ``collate_features``: ``input_features`` / ``input_features_mask`` as the FE.
* ``prompt``: ``expand_prompt``: ``\\n\\n<start_of_audio>`` + 188 soft tokens + ``<end_of_audio>``.
* ``plugin``: the hook implementations only, each delegating to one function above.

Over-long audio is refused unless the checkpoint opts in to
``audiogate_audio_limits.overflow = "truncate"``, which cuts at the limit and reports
processed and received durations.
"""

from __future__ import annotations

from audiogate_gemma3n._version import __version__

__all__ = ["__version__"]
