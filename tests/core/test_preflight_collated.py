"""The preflight's prepared-bytes estimate is the bytes collation makes, for the families
that stack their clips' 30 s windows (Audio Flamingo 3, GLM-ASR): it once counted every
clip as the largest one, refusing requests that fit."""

from __future__ import annotations

import pytest

from audiogate.pipeline.preflight import preflight
from audiogate.pipeline.process import prepare_clips
from audiogate.testing.audio import encoded_clip

#: Lengths in samples at 16 kHz: the shortest with a row, around one window's end, and
#: three windows.
LENGTHS = (961, 480_000, 480_001, 1_200_000)


@pytest.mark.parametrize("family", ["audioflamingo3", "glmasr"])
@pytest.mark.parametrize("lengths", [(961,), (480_001,), LENGTHS, (1_200_000, 961)])
def test_planned_bytes_are_the_collated_bytes(host, family, lengths) -> None:
    policy = host.default_policy(family)
    clips = [encoded_clip(samples=n, ordinal=k + 1, seed=k) for k, n in enumerate(lengths)]
    plan = preflight(host, policy, clips)
    prepared = prepare_clips(host, policy, clips)
    collated = sum(int(a.nbytes) for a in prepared.inputs.inputs.values())
    features = sum(p.features.feature_bytes for p in plan.clips)
    assert plan.prepared_result_bytes - features == collated
