"""The plugin host: discovery, direct registration, and loud failures naming their source."""

from __future__ import annotations

import importlib.metadata as metadata
import types
from collections.abc import Callable

import attrs
import pytest

import audiogate.host as host_module
from audiogate import FamilySpec, create_host, hookimpl
from audiogate.errors import PluginError, PolicyError
from audiogate.policy import AudioPolicy, build_schema, standard_keys
from audiogate_gemma3n.policy import PINNED as GEMMA_PINNED

SHIPPED = {
    "phi4mm": ("audiogate-phi4mm", ("phi4mm", "phi4_multimodal")),
    "gemma3n": ("audiogate-gemma3n", ("gemma3n",)),
    "qwen2audio": ("audiogate-qwen2audio", ("qwen2_audio",)),
}


def make_spec(name: str = "toyfam", model_types: tuple[str, ...] = ("toy",)) -> FamilySpec:
    defaults = attrs.evolve(GEMMA_PINNED, family=name)
    keys = standard_keys(defaults)
    return FamilySpec(
        name=name,
        model_types=model_types,
        defaults=defaults,
        keys=keys,
        schema=build_schema(name, keys),
        revision="toy-rev",
        version="9.9",
    )


class SpecPlugin:
    """A plugin object registering the given specs (registered directly, not installed)."""

    def __init__(self, *specs: object, name: str = "toy-plugin") -> None:
        self.specs = specs
        self.__name__ = name

    @hookimpl
    def audiogate_register_families(self, register: Callable[[FamilySpec], None]) -> None:
        for spec in self.specs:
            register(spec)  # type: ignore[arg-type]


@pytest.mark.install
def test_installed_entry_points_provide_the_three_families() -> None:
    host = create_host(load_entry_points=True)
    assert set(SHIPPED) <= set(host.families)
    for name, (distribution, model_types) in SHIPPED.items():
        family = host.families[name]
        assert family.distribution == distribution
        assert family.distribution_version == family.spec.version
        assert family.spec.model_types == model_types
        assert family.plugin_name == name
    eps = {ep.name: ep for ep in metadata.entry_points(group="audiogate.families")}
    assert {"phi4mm", "gemma3n", "qwen2audio"} <= set(eps)
    assert eps["gemma3n"].value == "audiogate_gemma3n.plugin"


@pytest.mark.install
def test_model_types_select_families(host) -> None:
    for name, (_, model_types) in SHIPPED.items():
        for model_type in model_types:
            assert host.family_for_model_type(model_type).spec.name == name


def test_autoload_can_be_disabled(monkeypatch) -> None:
    monkeypatch.setenv("AUDIOGATE_DISABLE_PLUGIN_AUTOLOAD", "1")
    host = create_host()
    assert host.families == {}
    with pytest.raises(PolicyError, match="AUDIOGATE_DISABLE_PLUGIN_AUTOLOAD"):
        host.family("gemma3n")


def test_a_plugin_object_registered_directly_works_without_installation() -> None:
    host = create_host(load_entry_points=False, plugins=[SpecPlugin(make_spec())])
    assert list(host.families) == ["toyfam"]
    family = host.families["toyfam"]
    assert family.distribution == "<direct>"
    assert host.family_for_model_type("toy").spec.name == "toyfam"
    policy = host.default_policy("toyfam")
    assert policy.family == "toyfam"


def test_a_module_plugin_registered_directly_works() -> None:
    module = types.ModuleType("audiogate_toy_module")

    @hookimpl
    def audiogate_register_families(register: Callable[[FamilySpec], None]) -> None:
        register(make_spec("modfam", ("modtype",)))

    module.audiogate_register_families = audiogate_register_families  # type: ignore[attr-defined]
    host = create_host(load_entry_points=False, plugins=[module])
    assert host.family_for_model_type("modtype").plugin_name == "audiogate_toy_module"


def test_duplicate_family_names_both_sources() -> None:
    first = SpecPlugin(make_spec(), name="first-plugin")
    second = SpecPlugin(make_spec(model_types=("other",)), name="second-plugin")
    with pytest.raises(PluginError) as info:
        create_host(load_entry_points=False, plugins=[first, second])
    message = str(info.value)
    assert "'toyfam'" in message
    assert "second-plugin" in message
    assert "first-plugin" in message


def test_duplicate_of_an_installed_family_names_the_installed_distribution() -> None:
    clash = SpecPlugin(make_spec("gemma3n", ("gemma3n_clone",)), name="clone")
    with pytest.raises(PluginError) as info:
        create_host(load_entry_points=True, plugins=[clash])
    message = str(info.value)
    assert "audiogate-gemma3n" in message
    assert "clone" in message


def test_duplicate_model_type_is_refused() -> None:
    a = SpecPlugin(make_spec("fama", ("shared",)), name="a")
    b = SpecPlugin(make_spec("famb", ("shared",)), name="b")
    with pytest.raises(PluginError, match="model type 'shared'"):
        create_host(load_entry_points=False, plugins=[a, b])


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("not a spec", "expected audiogate.FamilySpec"),
        (attrs.evolve(make_spec(), name="Bad Name"), "must match"),
        (attrs.evolve(make_spec(), model_types=()), "model_types"),
        (attrs.evolve(make_spec(), schema={}), "schema"),
        (attrs.evolve(make_spec(), revision=""), "revision"),
        (attrs.evolve(make_spec(), defaults=GEMMA_PINNED), "defaults"),
    ],
)
def test_malformed_registration_fails_naming_the_plugin(spec: object, problem: str) -> None:
    with pytest.raises(PluginError) as info:
        create_host(load_entry_points=False, plugins=[SpecPlugin(spec, name="badplug")])
    assert problem in str(info.value)
    assert "badplug" in str(info.value)


def test_a_register_hook_that_raises_is_named() -> None:
    class Boom:
        __name__ = "boomplug"

        @hookimpl
        def audiogate_register_families(self, register: Callable[[FamilySpec], None]) -> None:
            raise RuntimeError("kaput")

    with pytest.raises(PluginError, match=r"boomplug.*RuntimeError: kaput"):
        create_host(load_entry_points=False, plugins=[Boom()])


def test_an_unknown_hook_is_refused() -> None:
    class Typo:
        __name__ = "typoplug"

        @hookimpl
        def audiogate_register_familes(self) -> None:  # sic
            pass

    with pytest.raises(PluginError, match="typoplug"):
        create_host(load_entry_points=False, plugins=[Typo()])


class FakeDist:
    def __init__(self, name: str) -> None:
        self.name = name
        self.version = "1.2.3"


class FakeEntryPoint:
    group = "audiogate.families"

    def __init__(self, name: str, value: str, dist: str, load: Callable[[], object]) -> None:
        self.name = name
        self.value = value
        self.dist = FakeDist(dist)
        self._load = load

    def load(self) -> object:
        return self._load()


def _fake_entry_points(monkeypatch, *eps: FakeEntryPoint) -> None:
    def entry_points(*, group: str) -> list[FakeEntryPoint]:
        assert group == "audiogate.families"
        return list(eps)

    monkeypatch.setattr(host_module.metadata, "entry_points", entry_points)


def test_an_entry_point_that_fails_to_import_names_itself_and_its_distribution(monkeypatch) -> None:
    def broken() -> object:
        raise ImportError("No module named 'numpyy'")

    _fake_entry_points(
        monkeypatch,
        FakeEntryPoint("brokenfam", "audiogate_broken.plugin", "audiogate-broken", broken),
    )
    with pytest.raises(PluginError) as info:
        create_host()
    message = str(info.value)
    assert "'brokenfam'" in message
    assert "'audiogate-broken'" in message
    assert "audiogate_broken.plugin" in message
    assert "numpyy" in message
    assert isinstance(info.value.__cause__, ImportError)


def test_duplicate_family_across_entry_points_names_both_distributions(monkeypatch) -> None:
    one = SpecPlugin(make_spec("dupfam", ("t1",)), name="x")
    two = SpecPlugin(make_spec("dupfam", ("t2",)), name="y")
    _fake_entry_points(
        monkeypatch,
        FakeEntryPoint("ep-one", "one:plugin", "audiogate-one", lambda: one),
        FakeEntryPoint("ep-two", "two:plugin", "audiogate-two", lambda: two),
    )
    with pytest.raises(PluginError) as info:
        create_host()
    message = str(info.value)
    assert "audiogate-one" in message
    assert "audiogate-two" in message
    assert "'dupfam'" in message


def test_malformed_registration_through_an_entry_point_names_it(monkeypatch) -> None:
    bad = SpecPlugin(42, name="z")
    _fake_entry_points(
        monkeypatch, FakeEntryPoint("badep", "bad:plugin", "audiogate-bad", lambda: bad)
    )
    with pytest.raises(PluginError, match=r"entry point 'badep' of distribution 'audiogate-bad'"):
        create_host()


def test_stage_hooks_without_an_implementation_are_a_plugin_error() -> None:
    host = create_host(load_entry_points=False, plugins=[SpecPlugin(make_spec())])
    policy: AudioPolicy = host.default_policy("toyfam")
    with pytest.raises(PluginError, match="audiogate_plan_features"):
        host.plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=0)


def test_core_defaults_plan_identity_and_soxr(host) -> None:
    policy = attrs.evolve(host.default_policy("qwen2audio"))
    plan = host.plan_resample(policy, source_rate_hz=16_000, source_samples=100, clip_index=0)
    assert (plan.algorithm, plan.output_samples) == ("identity", 100)
    plan = host.plan_resample(policy, source_rate_hz=48_000, source_samples=48_000, clip_index=0)
    assert plan.output_rate_hz == 16_000
    assert plan.output_samples == 16_000


def test_hook_surface_is_small_and_prefixed(host) -> None:
    names = host.hook_names()
    assert all(name.startswith("audiogate_") for name in names)
    assert names == sorted(
        [
            "audiogate_register_families",
            "audiogate_parse_policy",
            "audiogate_plan_resample",
            "audiogate_resample",
            "audiogate_plan_features",
            "audiogate_extract_features",
            "audiogate_collate_features",
            "audiogate_expand_prompt",
            "audiogate_open_feature_stream",
        ]
    )


def test_implementations_lists_one_familys_stages_and_registration(host) -> None:
    hooks = host.implementations("gemma3n")
    assert "audiogate_extract_features" in hooks
    assert "audiogate_register_families" in hooks
    policy = host.default_policy("gemma3n")
    # The family's own stage, called directly, is the façade's answer for its policy.
    plan = hooks["audiogate_plan_features"](
        policy=policy, rate_hz=16_000, samples=16_000, clip_index=0
    )
    assert plan == host.plan_features(policy, rate_hz=16_000, samples=16_000, clip_index=0)


# --- the host checks every hook's result, and never lets an untyped error through ------


class Misbehaving:
    """Runs before the toy family's hooks (tryfirst) and, for the hook named in ``hook``,
    raises ``error`` or returns ``value`` instead."""

    __name__ = "misbehaving"

    def __init__(self, hook: str, *, error: BaseException | None = None, value: object = None):
        self.hook, self.error, self.value = hook, error, value

    def _act(self, hook: str) -> object:
        if hook != self.hook:
            return None
        if self.error is not None:
            raise self.error
        return self.value

    @hookimpl(tryfirst=True)
    def audiogate_plan_resample(self, policy):
        return self._act("plan_resample")

    @hookimpl(tryfirst=True)
    def audiogate_resample(self, policy):
        return self._act("resample")

    @hookimpl(tryfirst=True)
    def audiogate_plan_features(self, policy):
        return self._act("plan_features")

    @hookimpl(tryfirst=True)
    def audiogate_extract_features(self, policy):
        return self._act("extract_features")

    @hookimpl(tryfirst=True)
    def audiogate_collate_features(self, policy):
        return self._act("collate_features")

    @hookimpl(tryfirst=True)
    def audiogate_parse_policy(self, family):
        return self._act("parse_policy")


def _toy_run(plugin: Misbehaving) -> None:
    """One clip of the toy family through every stage the host fronts."""
    import numpy as np
    from toyfamily import ToyFamily, toy_policy

    from audiogate.cancel import NEVER
    from audiogate.policy import CheckpointConfigs

    host = create_host(load_entry_points=False, plugins=[ToyFamily(), plugin])
    # Parsed for its hook only: the stages below run on the toy family's test policy.
    host.parse_policy("toyfam", CheckpointConfigs(model={"model_type": "toyfam"}))
    policy = toy_policy()
    source = np.zeros(16_000, np.float32)
    source.setflags(write=False)
    plan = host.plan_resample(policy, source_rate_hz=16_000, source_samples=16_000, clip_index=0)
    wave = host.resample(policy, plan, source, clip_index=0, cancel=NEVER)
    fplan = host.plan_features(policy, rate_hz=16_000, samples=wave.size, clip_index=0)
    clip = host.extract_features(policy, fplan, wave, rate_hz=16_000, clip_index=0, cancel=NEVER)
    host.collate_features(policy, [clip])


@pytest.mark.parametrize(
    "hook",
    ["plan_resample", "resample", "plan_features", "extract_features", "collate_features"],
)
def test_an_untyped_error_in_any_stage_hook_is_a_plugin_error(hook: str) -> None:
    with pytest.raises(PluginError, match=f"raised KeyError in audiogate_{hook}"):
        _toy_run(Misbehaving(hook, error=KeyError("feature_extractor")))


def test_an_untyped_error_while_parsing_a_policy_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match="raised AttributeError in audiogate_parse_policy"):
        _toy_run(Misbehaving("parse_policy", error=AttributeError("config")))


def test_a_policy_of_another_family_is_refused() -> None:
    other = attrs.evolve(GEMMA_PINNED)  # family gemma3n
    with pytest.raises(PluginError, match="returned a policy of family 'gemma3n'"):
        _toy_run(Misbehaving("parse_policy", value=other))


def _results() -> dict[str, object]:
    import numpy as np

    from audiogate.records import ClipFeatures, FeatureBatch, FeaturePlan, ResamplePlan

    writable = np.zeros(100, np.float32)
    return {
        "negative plan bytes": (
            "plan_features",
            FeaturePlan(frames=100, tokens=50, feature_shape=(100, 160), feature_bytes=-(10**9)),
            "invalid counts",
        ),
        "negative resample bytes": (
            "plan_resample",
            ResamplePlan(
                source_rate_hz=16_000,
                source_samples=16_000,
                output_rate_hz=16_000,
                output_samples=16_000,
                working_bytes=-1,
                algorithm="identity",
            ),
            "invalid counts",
        ),
        "writable resample output": ("resample", np.zeros(16_000, np.float32), "writable"),
        "float64 features": (
            "extract_features",
            ClipFeatures(features=np.zeros((100, 160)), frames=100, tokens=50),
            "read-only float32",
        ),
        "writable collated inputs": (
            "collate_features",
            FeatureBatch(inputs={"x": writable[None]}, tokens=(50,)),
            "writable",
        ),
    }


@pytest.mark.parametrize("case", list(_results()))
def test_the_host_checks_what_a_hook_returns(case: str) -> None:
    hook, value, message = _results()[case]  # type: ignore[misc]
    with pytest.raises(PluginError, match=message):
        _toy_run(Misbehaving(hook, value=value))


def test_a_string_of_model_types_is_one_model_type_and_repeats_are_refused() -> None:
    host = create_host(
        load_entry_points=False, plugins=[SpecPlugin(make_spec(model_types="voicebox"))]
    )  # type: ignore[arg-type]
    assert host.family("toyfam").spec.model_types == ("voicebox",)
    with pytest.raises(PluginError, match="repeat a value"):
        create_host(
            load_entry_points=False, plugins=[SpecPlugin(make_spec(model_types=("x", "x")))]
        )


def test_a_spec_whose_schema_or_keys_cannot_work_is_refused_at_registration() -> None:
    from audiogate.policy import PolicyKey

    bad_schema = attrs.evolve(
        make_spec(), schema={"type": "object", "properties": {"a": {"type": "nonsense"}}}
    )
    with pytest.raises(PluginError, match="not a valid JSON schema"):
        create_host(load_entry_points=False, plugins=[SpecPlugin(bad_schema)])
    bad_key = attrs.evolve(
        make_spec(), keys=(*make_spec().keys, PolicyKey(target="not_a_field", paths=("/x",)))
    )
    with pytest.raises(PluginError, match="'not_a_field', not an AudioPolicy field"):
        create_host(load_entry_points=False, plugins=[SpecPlugin(bad_key)])


@pytest.mark.parametrize(
    ("loaded", "message"),
    [
        (lambda: None, "loads None"),
        (lambda: types.ModuleType("a_package"), "implements no audiogate hook"),
    ],
)
def test_an_entry_point_that_is_no_plugin_is_refused(monkeypatch, loaded, message) -> None:
    _fake_entry_points(monkeypatch, FakeEntryPoint("oops", "pkg", "audiogate-oops", loaded))
    with pytest.raises(PluginError, match=message):
        create_host()


def test_a_plugin_that_exits_at_import_is_a_plugin_error(monkeypatch) -> None:
    def exits() -> object:
        raise SystemExit(0)

    _fake_entry_points(monkeypatch, FakeEntryPoint("quitter", "q:plugin", "audiogate-q", exits))
    with pytest.raises(PluginError, match=r"'audiogate-q'.*SystemExit"):
        create_host()


def test_lists_where_tuples_are_meant_compare_as_tuples() -> None:
    import numpy as np

    from audiogate.records import FeatureBatch, FeaturePlan

    plan = FeaturePlan(frames=97, tokens=188, feature_shape=[97, 128], feature_bytes=1)  # type: ignore[arg-type]
    assert plan.feature_shape == (97, 128)
    batch = FeatureBatch(inputs={"x": np.zeros((1, 2))}, tokens=[188])  # type: ignore[arg-type]
    assert batch.tokens == (188,)


def test_two_entry_points_loading_one_object_are_named(monkeypatch) -> None:
    plugin = SpecPlugin(make_spec(), name="shared-object")
    _fake_entry_points(
        monkeypatch,
        FakeEntryPoint("first", "pkg:plugin", "audiogate-pkg", lambda: plugin),
        FakeEntryPoint("second", "pkg:plugin", "audiogate-pkg", lambda: plugin),
    )
    with pytest.raises(PluginError, match=r"entry points .first. and .second..*load the same"):
        create_host()
