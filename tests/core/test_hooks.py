"""One test per hook (``test_hook_<name>``, which tests/meta checks): each hook is called
through the typed façade with its documented arguments, the first non-``None`` result
wins over the core's ``trylast`` defaults, and the façade refuses what breaks the contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
import pytest
from toyfamily import HOP, TOY_POLICY, ToyFamily, toy_policy, toy_tokens

from audiogate import FamilySpec, create_host, hookimpl
from audiogate.cancel import NEVER
from audiogate.errors import FeatureError, PluginError
from audiogate.policy import AudioPolicy, CheckpointConfigs, build_schema, standard_keys
from audiogate.records import (
    ClipFeatures,
    ClipSlot,
    ExpandedPrompt,
    FeaturePlan,
    MediaSegment,
    PromptSegment,
    ResamplePlan,
    TextSegment,
    readonly,
)


def ramp(samples: int) -> np.ndarray:
    return readonly((np.arange(samples, dtype=np.float32) % 97) / 97)


class Recorder:
    """A plugin that records its calls and answers with ``answers[hook]`` (None by default)."""

    def __init__(self, **answers: Any) -> None:
        self.__name__ = f"recorder-{id(self):x}"
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _answer(self, hook: str, **kwargs: Any) -> Any:
        self.calls.append((hook, kwargs))
        answer = self.answers.get(hook)
        return answer(**kwargs) if callable(answer) else answer

    @hookimpl
    def audiogate_parse_policy(self, family: FamilySpec, configs: CheckpointConfigs) -> Any:
        return self._answer("audiogate_parse_policy", family=family, configs=configs)

    @hookimpl
    def audiogate_resample(
        self, policy: AudioPolicy, plan: ResamplePlan, samples: np.ndarray, clip_index: int
    ) -> Any:
        return self._answer(
            "audiogate_resample", policy=policy, plan=plan, samples=samples, clip_index=clip_index
        )

    @hookimpl
    def audiogate_extract_features(self, policy: AudioPolicy, plan: FeaturePlan) -> Any:
        return self._answer("audiogate_extract_features", policy=policy, plan=plan)

    @hookimpl
    def audiogate_collate_features(self, policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> Any:
        return self._answer("audiogate_collate_features", policy=policy, clips=clips)


def test_hook_audiogate_register_families() -> None:
    calls: list[Callable[[FamilySpec], None]] = []

    class TwoFamilies:
        __name__ = "two-families"

        @hookimpl
        def audiogate_register_families(self, register: Callable[[FamilySpec], None]) -> str:
            calls.append(register)
            for name in ("famone", "famtwo"):
                policy = attrs.evolve(TOY_POLICY, family=name)
                keys = standard_keys(policy)
                register(
                    FamilySpec(
                        name=name,
                        model_types=(f"{name}_type",),
                        defaults=policy,
                        keys=keys,
                        schema=build_schema(name, keys),
                        revision="r1",
                        version="1.0",
                    )
                )
            return "ignored"  # results of a non-firstresult hook are ignored

    host = create_host(plugins=[TwoFamilies()], load_entry_points=False)
    assert len(calls) == 1
    assert list(host.families) == ["famone", "famtwo"]
    assert host.family_for_model_type("famtwo_type").plugin_name == "two-families"
    assert host.families["famone"].distribution == "<direct>"


def test_hook_audiogate_parse_policy() -> None:
    toy = ToyFamily()
    configs = CheckpointConfigs(
        model={"model_type": "toy"}, processor={"audiogate_audio_limits": {"max_clips": 3}}
    )
    # No family implementation: the core default applies the key table.
    host = create_host(plugins=[toy], load_entry_points=False)
    policy = host.parse_policy("toyfam", configs)
    assert policy.max_clips == 3
    assert policy.source_of("max_clips").describe() == (
        "preprocessor_config.json:/audiogate_audio_limits/max_clips"
    )
    # A family's implementation wins over the trylast default, and sees spec and configs.
    special = toy_policy(max_clips=1)
    recorder = Recorder(audiogate_parse_policy=lambda family, configs: special)
    host = create_host(plugins=[toy, recorder], load_entry_points=False)
    assert host.parse_policy("toyfam", configs) is special
    ((_, kwargs),) = recorder.calls
    assert kwargs["family"].name == "toyfam"
    assert kwargs["configs"] is configs
    # Returning the wrong type is the plugin's bug.
    host = create_host(
        plugins=[toy, Recorder(audiogate_parse_policy="policy")], load_entry_points=False
    )
    with pytest.raises(PluginError, match="returned str, expected AudioPolicy"):
        host.parse_policy("toyfam", configs)


def test_hook_audiogate_plan_resample() -> None:
    host = create_host(plugins=[ToyFamily()], load_entry_points=False)
    plan = host.plan_resample(
        toy_policy(), source_rate_hz=48_000, source_samples=4_801, clip_index=0
    )
    assert (plan.algorithm, plan.output_rate_hz, plan.output_samples) == (
        "toy_repeat",
        16_000,
        1_601,
    )
    # Another family's policy falls through to the core defaults: the identity at the
    # target rate, and nobody for an algorithm no plugin knows.
    other = attrs.evolve(toy_policy(), family="nobody")
    assert (
        host.plan_resample(other, source_rate_hz=16_000, source_samples=9, clip_index=0).algorithm
        == "identity"
    )
    with pytest.raises(PluginError, match="no plugin answered audiogate_plan_resample"):
        host.plan_resample(other, source_rate_hz=8_000, source_samples=9, clip_index=0)


def test_hook_audiogate_resample() -> None:
    toy = ToyFamily()
    host = create_host(plugins=[toy], load_entry_points=False)
    policy = toy_policy()
    plan = host.plan_resample(policy, source_rate_hz=8_000, source_samples=1_000, clip_index=2)
    samples = ramp(1_000)
    out = host.resample(policy, plan, samples, clip_index=2, cancel=NEVER)
    assert out.shape == (2_000,)
    assert not out.flags.writeable
    np.testing.assert_array_equal(out[::2], samples)
    # A result of another length than planned is refused by the façade.
    short = Recorder(audiogate_resample=lambda **_: readonly(np.zeros(5, np.float32)))
    host = create_host(plugins=[toy, short], load_entry_points=False)
    with pytest.raises(PluginError, match=r"returned float32\[5\], planned float32\[2000\]"):
        host.resample(policy, plan, samples, clip_index=2, cancel=NEVER)
    ((_, kwargs),) = short.calls
    assert kwargs["plan"] is plan
    assert kwargs["clip_index"] == 2


def test_hook_audiogate_plan_features() -> None:
    host = create_host(plugins=[ToyFamily()], load_entry_points=False)
    plan = host.plan_features(toy_policy(), rate_hz=16_000, samples=5 * HOP + 7, clip_index=0)
    assert (plan.frames, plan.tokens, plan.feature_shape) == (5, toy_tokens(5), (5, HOP))
    with pytest.raises(FeatureError, match="shorter than one"):
        host.plan_features(toy_policy(), rate_hz=16_000, samples=HOP - 1, clip_index=4)
    # There is no core default: a family without a frontend is a plugin error.
    other = attrs.evolve(toy_policy(), family="nobody")
    with pytest.raises(PluginError, match="audiogate_plan_features for family 'nobody'"):
        host.plan_features(other, rate_hz=16_000, samples=16_000, clip_index=0)


def test_hook_audiogate_extract_features() -> None:
    toy = ToyFamily()
    host = create_host(plugins=[toy], load_entry_points=False)
    policy = toy_policy()
    plan = host.plan_features(policy, rate_hz=16_000, samples=3 * HOP, clip_index=1)
    waveform = ramp(3 * HOP)
    clip = host.extract_features(policy, plan, waveform, rate_hz=16_000, clip_index=1, cancel=NEVER)
    np.testing.assert_array_equal(clip.features, waveform.reshape(3, HOP))
    assert toy.extracted == [1]
    # Features that do not match the plan are refused, naming both.
    wrong = ClipFeatures(features=readonly(np.zeros((2, HOP), np.float32)), frames=2, tokens=1)
    host = create_host(
        plugins=[toy, Recorder(audiogate_extract_features=wrong)], load_entry_points=False
    )
    with pytest.raises(PluginError, match=r"produced features \(2, 160\).*planned \(3, 160\)"):
        host.extract_features(policy, plan, waveform, rate_hz=16_000, clip_index=1, cancel=NEVER)


def test_hook_audiogate_collate_features() -> None:
    toy = ToyFamily()
    host = create_host(plugins=[toy], load_entry_points=False)
    policy = toy_policy()
    clips = []
    for frames in (2, 5):
        plan = host.plan_features(policy, rate_hz=16_000, samples=frames * HOP, clip_index=0)
        clips.append(
            host.extract_features(
                policy, plan, ramp(frames * HOP), rate_hz=16_000, clip_index=0, cancel=NEVER
            )
        )
    batch = host.collate_features(policy, clips)
    assert batch.tokens == (1, 3)
    assert batch.inputs["features"].shape == (2, 5, HOP)
    assert batch.inputs["mask"].sum(axis=1).tolist() == [2, 5]
    # The hook receives a list in clip order, and a wrong type is refused.
    recorder = Recorder(audiogate_collate_features={"features": batch.inputs["features"]})
    host = create_host(plugins=[toy, recorder], load_entry_points=False)
    with pytest.raises(PluginError, match="returned dict, expected FeatureBatch"):
        host.collate_features(policy, tuple(clips))
    ((_, kwargs),) = recorder.calls
    assert kwargs["clips"] == clips


class Expander:
    """A minimal expansion: each audio position becomes ``tokens`` copies of id 7."""

    __name__ = "expander"
    seen: list[tuple[list[PromptSegment], list[ClipSlot], Any]]

    def __init__(self) -> None:
        self.seen = []

    @hookimpl
    def audiogate_expand_prompt(
        self,
        policy: AudioPolicy,
        segments: Sequence[PromptSegment],
        clips: Sequence[ClipSlot],
        tokenizer: Any,
    ) -> ExpandedPrompt | None:
        if policy.family != "toyfam":
            return None
        self.seen.append((list(segments), list(clips), tokenizer))
        text = "".join(
            s.text if isinstance(s, TextSegment) else "<a>" * clips[s.ordinal - 1].tokens
            for s in segments
        )
        if tokenizer is None:
            return ExpandedPrompt(input_ids=(), text=text, audio_spans=(), audio_token_id=7)
        ids: list[int] = []
        spans = []
        for segment in segments:
            if isinstance(segment, TextSegment):
                ids.extend(tokenizer.encode(segment.text))
            else:
                start = len(ids)
                ids.extend([7] * clips[segment.ordinal - 1].tokens)
                spans.append((start, len(ids)))
        return ExpandedPrompt(
            input_ids=tuple(ids), text=text, audio_spans=tuple(spans), audio_token_id=7
        )


class CharTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [100 + ord(c) for c in text]


def test_hook_audiogate_expand_prompt() -> None:
    expander = Expander()
    host = create_host(plugins=[ToyFamily(), expander], load_entry_points=False)
    policy = toy_policy()
    segments = (TextSegment("hi "), MediaSegment("audio", 1), TextSegment("!"))
    clips = (ClipSlot(ordinal=1, tokens=3, frames=6, sha256="0" * 64),)
    expanded = host.expand_prompt(policy, segments, clips, CharTokenizer())
    assert expanded.audio_spans == ((3, 6),)
    assert expanded.input_ids[3:6] == (7, 7, 7)
    text_only = host.expand_prompt(policy, segments, clips, None)
    assert (text_only.input_ids, text_only.text) == ((), "hi <a><a><a>!")
    # The hook receives lists (segments and clips in order) and the tokenizer as given.
    seen_segments, seen_clips, seen_tokenizer = expander.seen[-1]
    assert seen_segments == list(segments)
    assert seen_clips == list(clips)
    assert seen_tokenizer is None
    with pytest.raises(PluginError, match="audiogate_expand_prompt for family 'nobody'"):
        host.expand_prompt(attrs.evolve(policy, family="nobody"), segments, clips, None)
