"""MLX results cross threads: everything a family returns is evaluated.

An unevaluated MLX array cannot be evaluated on another thread ("There is no Stream(cpu,
0) in current thread"); the worker computes features on its threads and the server
hands them to another.
"""

from __future__ import annotations

import threading

import attrs
import numpy as np
import pytest
from mlx_helpers import MLX_REASON, make_signal, with_backend

from audiogate.cancel import NEVER

mx = pytest.importorskip("mlx.core", reason=MLX_REASON)


def _in_thread(run):
    box = {}

    def target() -> None:
        try:
            box["result"] = run()
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.mark.parametrize(
    ("family", "padding"),
    [("phi4mm", None), ("gemma3n", "right"), ("gemma3n", "left"), ("qwen2audio", None)],
)
def test_features_from_a_worker_thread_are_usable_elsewhere(host, family, padding) -> None:
    policy = with_backend(host.default_policy(family), "mlx")
    if padding:
        policy = attrs.evolve(policy, options={**policy.options, "padding_side": padding})
    waves = [make_signal("clip", n, 16_000, seed=n) for n in (16_000, 7_000)]

    def extract():
        out = []
        for index, wave in enumerate(waves):
            plan = host.plan_features(
                policy, rate_hz=16_000, samples=wave.shape[0], clip_index=index
            )
            out.append(
                host.extract_features(
                    policy, plan, wave, rate_hz=16_000, clip_index=index, cancel=NEVER
                )
            )
        return out

    clips = _in_thread(extract)
    # This thread computes with them and collates them...
    for clip in clips:
        assert np.isfinite(np.asarray(clip.features * 2.0)).all()
        for extra in (clip.mask, getattr(clip, "tail", None)):
            if extra is not None:
                np.asarray(mx.sum(extra))
    batch = host.collate_features(policy, clips)
    # ...and a third one uses the batch.
    _in_thread(lambda: [np.asarray(v + 0) for v in batch.inputs.values()])
