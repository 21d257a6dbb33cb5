"""``per_policy``: a value derived from a policy is computed once per policy object, and
forgotten with it."""

from __future__ import annotations

import gc

import attrs
from toyfamily import TOY_POLICY

from audiogate.pipeline.preflight import decode_limits
from audiogate.policy import AudioPolicy
from audiogate.policy.memo import per_policy


def test_a_value_is_computed_once_per_policy_object_and_forgotten_with_it() -> None:
    calls: list[int] = []

    @per_policy
    def rate(policy: AudioPolicy) -> int:
        calls.append(policy.max_source_rate_hz)
        return policy.max_source_rate_hz

    assert rate(TOY_POLICY) == rate(TOY_POLICY) == 48_000
    assert calls == [48_000]
    changed = attrs.evolve(TOY_POLICY, max_source_rate_hz=44_100)
    assert rate(changed) == 44_100  # an equal-looking copy is another object
    assert calls == [48_000, 44_100]
    del changed
    gc.collect()
    for _ in range(50):  # new objects may take the freed id: never the old value
        fresh = attrs.evolve(TOY_POLICY, max_source_rate_hz=32_000)
        assert rate(fresh) == 32_000
        del fresh


def test_decode_limits_follow_the_policy_they_are_asked_for() -> None:
    assert decode_limits(TOY_POLICY) is decode_limits(TOY_POLICY)
    strict = attrs.evolve(TOY_POLICY, max_source_channels=1)
    assert decode_limits(strict).max_channels == 1
    assert decode_limits(TOY_POLICY).max_channels == TOY_POLICY.max_source_channels
