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
from shipped import shipped_families

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


#: Every shipped family with an MLX kernel of its own (the Whisper-frontend families have
#: none: their features are numpy's), Gemma 3n with each padding side.
CASES = [
    (family.name, padding)
    for family in shipped_families()
    if (family.root / family.package / "mlx_logmel.py").is_file()
    for padding in (("right", "left") if family.name == "gemma3n" else (None,))
]


def test_the_cases_cover_the_mlx_kernels() -> None:
    assert {family for family, _ in CASES} >= {"phi4mm", "gemma3n", "qwen2audio"}


@pytest.mark.parametrize(("family", "padding"), CASES)
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
