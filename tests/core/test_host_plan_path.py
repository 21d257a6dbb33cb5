"""The host's short path for plan hooks (#34: a stream's final plan after a pause): a
family's stage called directly where nothing answers before it, with the general
path's result, errors and order (:meth:`FamilyHost._call`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from toyfamily import HOP, TOY_POLICY

from audiogate import FamilySpec, FamilyStages, create_host, hookimpl
from audiogate.errors import PluginError
from audiogate.host import FamilyHost
from audiogate.policy import AudioPolicy, build_schema, standard_keys
from audiogate.records import FeaturePlan, ResamplePlan


def _spec(name: str) -> FamilySpec:
    policy = attrs.evolve(TOY_POLICY, family=name)
    keys = standard_keys(policy)
    return FamilySpec(
        name=name,
        model_types=(f"{name}_type",),
        defaults=policy,
        keys=keys,
        schema=build_schema(name, keys),
        revision="r1",
        version="1.0",
    )


def _plan(frames: Any) -> FeaturePlan:
    return FeaturePlan(
        frames=frames, tokens=1, feature_shape=(1, HOP), feature_bytes=0, working_bytes=0
    )


class _Family:
    """One family whose stages take every keyword (``**``: the short path's kind)."""

    __name__ = "kwfamily"

    def __init__(self, plan_features: Callable[..., Any]) -> None:
        self._stages = FamilyStages(plan_features=plan_features, plan_resample=_none)

    @hookimpl
    def audiogate_register_families(self, register: Callable[..., Any]) -> None:
        register(_spec("kw"), stages=self._stages)


def _none(**_kwargs: Any) -> None:
    return None  # the core's default answers


def _host(plan_features: Callable[..., Any]) -> FamilyHost:
    return create_host(plugins=[_Family(plan_features)], load_entry_points=False)


def _features(host: FamilyHost) -> FeaturePlan:
    policy = attrs.evolve(TOY_POLICY, family="kw")
    return host.plan_features(policy, rate_hz=16_000, samples=HOP, clip_index=0)


def test_a_shipped_familys_plans_skip_the_general_call(monkeypatch: pytest.MonkeyPatch) -> None:
    host = create_host()
    expected = {}
    for family in host.families:
        policy = host.default_policy(family)
        resample = host._answer(
            "audiogate_plan_resample",
            ResamplePlan,
            family,
            policy=policy,
            source_rate_hz=48_000,
            source_samples=48_000 * 7 + 13,
            clip_index=0,
        )
        expected[family] = (
            resample,
            host._answer(
                "audiogate_plan_features",
                FeaturePlan,
                family,
                policy=policy,
                rate_hz=resample.output_rate_hz,
                samples=resample.output_samples,
                clip_index=0,
            ),
        )

    def general(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the general path ran")

    monkeypatch.setattr(FamilyHost, "_call", general)
    for family, (resample, features) in expected.items():
        policy = host.default_policy(family)
        got = host.plan_resample(
            policy, source_rate_hz=48_000, source_samples=48_000 * 7 + 13, clip_index=0
        )
        assert got == resample, family
        assert (
            host.plan_features(
                policy, rate_hz=got.output_rate_hz, samples=got.output_samples, clip_index=0
            )
            == features
        ), family


def test_a_stage_answering_none_falls_through_to_the_core_default() -> None:
    host = _host(lambda **_: _plan(2))
    policy = attrs.evolve(TOY_POLICY, family="kw")
    plan = host.plan_resample(policy, source_rate_hz=16_000, source_samples=9, clip_index=0)
    assert plan.algorithm == "identity"
    assert _features(host).frames == 2


def test_an_untyped_error_on_the_short_path_is_the_general_paths() -> None:
    def broken(**_kwargs: Any) -> FeaturePlan:
        raise ZeroDivisionError("boom")

    host = _host(broken)
    with pytest.raises(PluginError) as short:
        _features(host)
    with pytest.raises(PluginError) as general:
        host._answer(
            "audiogate_plan_features",
            FeaturePlan,
            "kw",
            policy=attrs.evolve(TOY_POLICY, family="kw"),
            rate_hz=16_000,
            samples=HOP,
            clip_index=0,
        )
    assert str(short.value) == str(general.value)
    assert "family 'kw' raised ZeroDivisionError in audiogate_plan_features" in str(short.value)


@pytest.mark.parametrize("frames", [True, -1, 2.0])
def test_invalid_counts_are_still_refused(frames: Any) -> None:
    host = _host(lambda **_: _plan(frames))
    with pytest.raises(PluginError, match=r"planned invalid counts: \{'frames'"):
        _features(host)


def test_a_plugin_function_registered_later_is_asked_first() -> None:
    """The short path follows the hook's plugin functions as they change."""
    host = _host(lambda **_: _plan(2))
    assert _features(host).frames == 2

    class Override:
        @hookimpl
        def audiogate_plan_features(self, policy: AudioPolicy) -> FeaturePlan | None:
            return _plan(5)

    override = Override()
    host._pm.register(override, name="override")
    assert _features(host).frames == 5
    host._pm.unregister(override)
    assert _features(host).frames == 2
