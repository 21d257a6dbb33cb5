"""The host calls a family's stages only for that family's policy (issue 30).

Two forms of plugin, both tested here: a family registered with its stages
(``register(spec, stages=...)``, the 0.2 form: no stage checks whose policy it got), and
``@hookimpl`` stage hooks that return ``None`` for another family's policy (the 0.x form,
still served, with an :class:`~audiogate.deprecation.AudioGateDeprecationWarning`).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
from toyfamily import HOP, TOY_POLICY, ToyFamily, toy_policy

from audiogate import FamilySpec, FamilyStages, create_host, hookimpl, package_stages
from audiogate.deprecation import AudioGateDeprecationWarning
from audiogate.errors import PluginError
from audiogate.family import STAGE_MODULES
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


def _plan(frames: int) -> FeaturePlan:
    return FeaturePlan(
        frames=frames, tokens=frames, feature_shape=(frames, HOP), feature_bytes=0, working_bytes=0
    )


class StagedFamilies:
    """Registers two families with stages (no guards) and records which stage saw which
    policy: ``plan_features`` answers with as many frames as the family's name is long."""

    __name__ = "staged"

    def __init__(self, *names: str) -> None:
        self.names = names
        self.seen: list[tuple[str, str]] = []

    def _stages(self, name: str) -> FamilyStages:
        def plan_features(policy: AudioPolicy, samples: int) -> FeaturePlan:
            self.seen.append((name, policy.family))
            return _plan(len(name))

        def plan_resample(policy: AudioPolicy) -> ResamplePlan | None:
            self.seen.append((name, policy.family))
            return None  # falls through to the core default

        return FamilyStages(plan_features=plan_features, plan_resample=plan_resample)

    @hookimpl
    def audiogate_register_families(self, register: Callable[..., Any]) -> None:
        for name in self.names:
            register(_spec(name), stages=self._stages(name))


class GuardedFamily:
    """The 0.x form: one family's stage hook, guarded."""

    __name__ = "guarded"

    @hookimpl
    def audiogate_register_families(self, register: Callable[[FamilySpec], None]) -> None:
        register(_spec("oldform"))

    @hookimpl
    def audiogate_plan_features(self, policy: AudioPolicy) -> FeaturePlan | None:
        if policy.family != "oldform":
            return None
        return _plan(3)


class UnguardedFamily(GuardedFamily):
    """The 0.x form without its guard: under 0.x it took every family's requests."""

    __name__ = "unguarded"

    @hookimpl
    def audiogate_register_families(self, register: Callable[[FamilySpec], None]) -> None:
        register(_spec("greedy"))

    @hookimpl
    def audiogate_plan_features(self, policy: AudioPolicy) -> FeaturePlan | None:
        return _plan(9)


def _features(host: Any, family: str) -> int:
    policy = attrs.evolve(TOY_POLICY, family=family)
    return host.plan_features(policy, rate_hz=16_000, samples=HOP, clip_index=0).frames


def test_each_policy_reaches_only_its_own_familys_stages() -> None:
    staged = StagedFamilies("alpha", "betamax")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AudioGateDeprecationWarning)  # the new form: none
        host = create_host(plugins=[staged], load_entry_points=False)
    assert _features(host, "alpha") == 5
    assert _features(host, "betamax") == 7
    assert staged.seen == [("alpha", "alpha"), ("betamax", "betamax")]


def test_a_stage_that_answers_none_or_is_missing_falls_through_to_the_core_default() -> None:
    staged = StagedFamilies("alpha")
    host = create_host(plugins=[staged], load_entry_points=False)
    policy = attrs.evolve(TOY_POLICY, family="alpha")
    plan = host.plan_resample(policy, source_rate_hz=16_000, source_samples=9, clip_index=0)
    assert plan.algorithm == "identity"
    assert staged.seen == [("alpha", "alpha")]
    # No stage and no default: the family's own gap, named.
    with pytest.raises(PluginError, match="no plugin answered audiogate_collate_features"):
        host.collate_features(policy, [])


def test_an_unguarded_family_no_longer_takes_another_familys_requests() -> None:
    staged = StagedFamilies("alpha")
    with pytest.warns(AudioGateDeprecationWarning, match="'unguarded'"):
        host = create_host(plugins=[staged, UnguardedFamily()], load_entry_points=False)
    assert _features(host, "greedy") == 9
    assert _features(host, "alpha") == 5  # under 0.x firstresult: 9, from the wrong family


def test_the_0x_form_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(AudioGateDeprecationWarning) as caught:
        host = create_host(
            plugins=[GuardedFamily(), StagedFamilies("alpha")], load_entry_points=False
        )
    (warning,) = caught
    message = str(warning.message)
    assert "'guarded'" in message
    assert "audiogate_plan_features for its families (oldform)" in message
    assert "stages=" in message
    assert "removed in 0.3.0" in message
    assert warning.filename == __file__  # points at the caller that created the host
    assert _features(host, "oldform") == 3
    assert _features(host, "alpha") == 5


def test_a_plugin_with_hooks_and_no_family_still_answers_every_family_with_a_warning() -> None:
    class Override:
        __name__ = "override"

        @hookimpl
        def audiogate_plan_features(self, policy: AudioPolicy) -> FeaturePlan | None:
            return _plan(1) if policy.family == "alpha" else None

    with pytest.warns(AudioGateDeprecationWarning, match="for every family"):
        host = create_host(
            plugins=[StagedFamilies("alpha", "betamax"), Override()], load_entry_points=False
        )
    assert _features(host, "alpha") == 1  # asked before the family's stages, as under 0.x
    assert _features(host, "betamax") == 7


def test_an_untyped_error_in_a_stage_names_the_family_and_hook() -> None:
    def plan_features(policy: AudioPolicy) -> FeaturePlan:
        raise ZeroDivisionError("boom")

    class Broken:
        __name__ = "broken"

        @hookimpl
        def audiogate_register_families(self, register: Callable[..., Any]) -> None:
            register(_spec("broken"), stages=FamilyStages(plan_features=plan_features))

    host = create_host(plugins=[Broken()], load_entry_points=False)
    with pytest.raises(
        PluginError, match="family 'broken' raised ZeroDivisionError in audiogate_plan"
    ):
        _features(host, "broken")


@pytest.mark.parametrize(
    ("stages", "problem"),
    [
        ({"plan_features": 3}, "stage plan_features is not callable"),
        ("not stages", "stages must be a"),
    ],
)
def test_malformed_stages_are_refused_at_registration(stages: Any, problem: str) -> None:
    class Bad:
        __name__ = "bad"

        @hookimpl
        def audiogate_register_families(self, register: Callable[..., Any]) -> None:
            value = FamilyStages(**stages) if isinstance(stages, dict) else stages
            register(_spec("badfam"), stages=value)

    with pytest.raises(PluginError, match=problem):
        create_host(plugins=[Bad()], load_entry_points=False)


def test_stages_get_only_the_keyword_arguments_they_name() -> None:
    got: dict[str, Any] = {}

    def plan_features(policy: AudioPolicy, *, samples: int, **rest: Any) -> FeaturePlan:
        got.update(rest, samples=samples)
        return _plan(2)

    def strict(policy: AudioPolicy, rate_hz: int) -> FeaturePlan:  # no clip_index, samples
        return _plan(4)

    class Two:
        __name__ = "two"

        @hookimpl
        def audiogate_register_families(self, register: Callable[..., Any]) -> None:
            register(_spec("takesall"), stages=FamilyStages(plan_features=plan_features))
            register(_spec("takessome"), stages=FamilyStages(plan_features=strict))

    host = create_host(plugins=[Two()], load_entry_points=False)
    assert _features(host, "takesall") == 2
    assert got == {"rate_hz": 16_000, "samples": HOP, "clip_index": 0}
    assert _features(host, "takessome") == 4


def test_package_stages_imports_each_stage_module_on_first_use() -> None:
    stages = package_stages("audiogate_gemma3n", parse_policy=None)
    assert set(stages.implemented()) == {f"audiogate_{s}" for s in STAGE_MODULES}
    assert stages.parse_policy is None
    module = "audiogate_gemma3n.collate"
    saved = sys.modules.pop(module, None)
    try:
        fresh = package_stages("audiogate_gemma3n")
        assert module not in sys.modules
        assert "audiogate_gemma3n.collate" in repr(fresh.collate_features)
        with contextlib.suppress(Exception):  # whatever it makes of no clips: imported
            fresh.collate_features(policy=toy_policy(), clips=[])
        assert module in sys.modules
    finally:
        if saved is not None:
            sys.modules[module] = saved


def test_the_toy_family_in_the_0x_form_keeps_working() -> None:
    with pytest.warns(AudioGateDeprecationWarning):
        host = create_host(plugins=[ToyFamily()], load_entry_points=False)
    assert _features(host, "toyfam") == 1
    assert np.isfinite(_features(host, "toyfam"))
