"""The family contract suite: what every audiogate family, shipped or third-party, must pass.

Subclass :class:`FamilyContract` in a test module and name the family::

    from audiogate.testing.contract import FamilyContract

    class TestGemma3nContract(FamilyContract):
        family = "gemma3n"
        sample_rates_hz = (16_000, 48_000)

Everything is called through the plugin host, as the pipeline calls it. The checks:

* the family registers, with every stage that has no core default;
* beside another family, that family's requests never reach this plugin (the host
  dispatches stages by ``policy.family``; a stage needs no check of whose policy it got);
* the pinned defaults round-trip: a checkpoint restating every recognized key at its
  pinned value validates against the schema and yields the same policy, with every key's
  source recorded as the checkpoint;
* ``schema.json`` is a valid draft 2020-12 schema and fresh against
  :func:`audiogate.policy.build_schema` of the family's keys;
* for edge lengths (0, 1, 2 samples, around the frame, hop, padding and token
  boundaries, one second, a long clip) the feature plan's frames, tokens and shape are
  what extraction returns, and the policy's declared framing counts the same frames;
* every source rate the family claims goes through the whole pipeline;
* the expanded prompt holds exactly the planned number of audio positions per clip, in
  clip order, for chat and plain prompts, and a clip/placeholder count mismatch fails
  closed with :class:`~audiogate.errors.PlaceholderError`;
* a prompt with clips prepared as one user turn (``prepare --model --prompt``, batch
  rows) places them as the chat request with the clips as audio parts before the text;
* cancellation is noticed inside the Decode, Resample and Feature loops of a long clip;
* a family that streams (``open_feature_stream``) gives, for a few chunkings of a short
  clip, one of a few frames and one of over a second, the whole clip's waveform and
  features bit for bit (or within :attr:`FamilyContract.stream_tolerance`);
* the request's reservation (:attr:`~audiogate.pipeline.RequestPlan.host_bytes`) covers
  the traced peak of preparing a large admitted request;
* collation keeps the per-clip token counts, batches every input along axis 0 with each
  clip's rows (one, or one per window of a windowed family, checked on a clip longer than
  one window) in clip order, and preparation is deterministic.

See ``docs/plugins/testing.md`` for what each check protects and how to configure it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gc
import json
import threading
import tracemalloc
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Final

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from jsonschema import Draft202012Validator

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.chat import flatten_messages, parse_rendered, renders_parts
from audiogate.deprecation import AudioGateDeprecationWarning
from audiogate.errors import (
    AudioGateError,
    FeatureError,
    LimitError,
    PlaceholderError,
    PluginError,
    PolicyError,
    PreprocessCancelled,
)
from audiogate.family import FamilySpec, FamilyStages
from audiogate.hookspecs import hookimpl
from audiogate.host import FamilyHost, create_host
from audiogate.pipeline import EncodedClip, preflight, prepare_clips, process_request
from audiogate.policy import (
    AudioPolicy,
    CheckpointConfigs,
    build_schema,
    check_tokenizer_files,
    dump_schema,
    standard_keys,
)
from audiogate.policy.schema import SCHEMA_DIALECT, iter_schema_errors
from audiogate.records import (
    ClipFeatures,
    ClipSlot,
    ExpandedPrompt,
    FeaturePlan,
    MediaSegment,
    PromptSegment,
    TextSegment,
    readonly,
)
from audiogate.testing.audio import encoded_clip, noise
from audiogate.testing.cancel import CancelAt
from audiogate.testing.checkpoints import pinned_document, pinned_value
from audiogate.testing.streaming import (
    assert_cancel_stops_the_stream,
    assert_stream_matches_whole_clip,
    noise_samples,
    open_stream,
    standard_chunkings,
    whole_clip_plan,
)

__all__ = [
    "REQUIRED_HOOKS",
    "FamilyContract",
    "check_expansion",
    "edge_lengths",
    "pinned_document",
    "pinned_value",
]

#: Hooks with no core default: a family must give each of them (as a stage, or 0.x hook).
REQUIRED_HOOKS: Final = frozenset(
    {
        "audiogate_register_families",
        "audiogate_plan_features",
        "audiogate_extract_features",
        "audiogate_collate_features",
        "audiogate_expand_prompt",
    }
)

_FOREIGN: Final = "contractforeign"


class _ForeignReached(AudioGateError):
    """Raised by every stage of the contract's foreign family: the host asked it."""

    def __init__(self, hook: str) -> None:
        super().__init__(f"{_FOREIGN} answered {hook}")
        self.hook = hook


class _ForeignFamily:
    """Another family, registered with stages that only say they were reached."""

    __name__ = "contract-foreign"

    def __init__(self, defaults: AudioPolicy) -> None:
        self.defaults = attrs.evolve(defaults, family=_FOREIGN)

    @hookimpl
    def audiogate_register_families(self, register: Callable[..., Any]) -> None:
        defaults = self.defaults
        keys = standard_keys(defaults)
        stages = {
            stage: functools.partial(_reach, f"audiogate_{stage}")
            for stage in (
                "parse_policy",
                "plan_resample",
                "resample",
                "plan_features",
                "extract_features",
                "collate_features",
                "expand_prompt",
            )
        }
        register(
            FamilySpec(
                name=_FOREIGN,
                model_types=(_FOREIGN,),
                defaults=defaults,
                keys=keys,
                schema=build_schema(_FOREIGN, keys),
                revision="contract",
                version="0",
            ),
            stages=FamilyStages(**stages),
        )


def _reach(hook: str, **_: Any) -> Any:
    raise _ForeignReached(hook)


_PROMPT: Final = "What is said in the audio?"
#: Names of limits in processor files that a family's own parsing might read.
_UNDECLARED_LIMIT_NAMES: Final = (
    "max_audio_clips",
    "max_num_audios",
    "max_audio_length",
    "max_length",
    "max_duration",
    "chunk_length",
    "n_samples",
    "nb_max_frames",
    "max_source_positions",
    "sampling_rate",
)
#: What planning one clip may allocate (traced): plans run at admission, unreserved.
PLAN_BYTES: Final = 1 << 20
#: Common rates one hertz off a round one, where a ratio-based planner meets large or
#: prime factors (besides the target plus one and the highest admitted rate less one).
AWKWARD_RATES_HZ: Final = (7_999, 11_024, 16_001, 22_049, 44_101, 47_999, 48_001, 95_999)
#: Python objects a call allocates besides its arrays (frames, small tuples, the plan).
OBJECT_SLACK_BYTES: Final = 16 << 10

contract = pytest.mark.audiogate_contract


# --- helpers (public: family tests may use them directly) ----------------------------


def edge_lengths(
    host: FamilyHost, policy: AudioPolicy, *, rate_hz: int, long_samples: int
) -> list[int]:
    """Normalized clip lengths that exercise a frontend's arithmetic.

    0, 1 and 2 samples; one either side of the minimum, the frame, frame + hop and the
    padding multiple (and twice it); the first two lengths where the token count changes;
    one second; and ``long_samples``. Lengths above ``max_samples_per_clip`` are dropped.
    """
    frame = policy.frame_length_samples
    hop = policy.frame_hop_samples
    pad = policy.pad_multiple_samples
    lowest = policy.min_samples_per_clip
    candidates = {0, 1, 2, rate_hz, rate_hz + 1, long_samples}
    for edge in (lowest, frame, frame + hop, pad, 2 * pad):
        candidates.update((edge - 1, edge, edge + 1))
    start = max(lowest, frame, 1)
    previous: int | None = None
    changes = 0
    for samples in range(start, start + 32 * hop + pad):
        try:
            tokens = host.plan_features(
                policy, rate_hz=rate_hz, samples=samples, clip_index=0
            ).tokens
        except FeatureError:
            continue
        if previous is not None and tokens != previous:
            candidates.update((samples - 1, samples, samples + 1))
            changes += 1
            if changes == 2:
                break
        previous = tokens
    return sorted(n for n in candidates if 0 <= n <= policy.max_samples_per_clip)


def check_expansion(
    expanded: ExpandedPrompt, clips: Sequence[ClipSlot], tokenizer: Any
) -> list[str]:
    """Problems with an expanded prompt (empty when it keeps the expansion invariant).

    Every clip has one run of exactly ``clip.tokens`` audio ids, in clip order; the prompt
    holds no other audio id; tokenizing ``text`` (where there is one) gives ``input_ids``.
    """
    problems: list[str] = []
    ids = expanded.input_ids
    if len(expanded.audio_spans) != len(clips):
        problems.append(f"{len(expanded.audio_spans)} audio runs for {len(clips)} clips")
        return problems
    previous_stop = 0
    for clip, (start, stop) in zip(clips, expanded.audio_spans, strict=True):
        if start < previous_stop:
            problems.append(f"clip {clip.ordinal}'s run starts at {start}, before the last run")
        previous_stop = stop
        run = ids[start:stop]
        if stop - start != clip.tokens:
            problems.append(
                f"clip {clip.ordinal}: {stop - start} audio positions, its features produce "
                f"{clip.tokens}"
            )
        if any(i != expanded.audio_token_id for i in run):
            problems.append(f"clip {clip.ordinal}: its run holds ids other than the audio id")
    total = sum(1 for i in ids if i == expanded.audio_token_id)
    if total != sum(c.tokens for c in clips):
        problems.append(
            f"the prompt holds {total} audio ids, the clips produce {sum(c.tokens for c in clips)}"
        )
    if expanded.text is not None:
        encoded = tuple(tokenizer.encode(expanded.text, add_special_tokens=False))
        if encoded != ids:
            problems.append("tokenizing the expanded text does not give input_ids")
    return problems


def _waveform(samples: int, seed: int = 0) -> npt.NDArray[np.float32]:
    return readonly(noise(samples=samples, amplitude=0.3, seed=seed).astype(np.float32))


# --- the suite -----------------------------------------------------------------------


class FamilyContract:
    """Base class of a family's contract tests. Set :attr:`family`; override as needed.

    Class attributes:

    ``family``
        the family name (required).
    ``sample_rates_hz``
        source rates to push through the pipeline; default: the target rate and, if the
        policy admits it, 48 kHz. The highest rate other than the target is the one whose
        resampler is cancelled.
    ``plugins``
        plugin objects to register directly (entry points are then not loaded); default:
        the installed families.
    ``model_type``
        the ``config.json`` ``model_type`` of the checkpoint whose policy is tested
        (a family with variants tests each in its own subclass); default: the first.
    ``model_dir``
        an example checkpoint directory: its configs must select this family, and its
        tokenizer (``AutoTokenizer``, offline), if it has one, drives the expansion checks.
    ``special_tokens`` / ``chat_template``
        without ``model_dir``: a stand-in tokenizer
        (:func:`audiogate.testing.tokenizers.build_stand_in_tokenizer`) with these tokens.
    ``round_trip_skip_targets``
        key targets a variant refuses to have restated (left out of the round trip).
    ``user_placeholder``
        the placeholder a user writes in a plain prompt for one clip, with ``{n}`` for its
        1-based ordinal and ``{sha256}`` for its digest where the family numbers or names
        them (e.g. ``"<audio>"``, ``"<|audio_{n}|>"``); ``None`` skips the placeholder
        count check.
    ``long_clip_seconds``
        the long clip of the arithmetic and cancellation checks (capped by the policy).
    ``stream_tolerance``
        the largest absolute difference allowed between a streamed clip's waveform and
        features and the whole clip's; default 0.0 (bit-identical). Only for a family
        whose streamed math cannot keep the whole clip's float order.
    ``reservation_clips`` / ``reservation_clip_seconds``
        the request whose reservation is checked: this many clips of this duration at the
        highest source rate, in stereo where admitted, reduced until the policy admits it.
    """

    family: ClassVar[str]
    sample_rates_hz: ClassVar[tuple[int, ...]] = ()
    plugins: ClassVar[tuple[object, ...]] = ()
    model_type: ClassVar[str | None] = None
    model_dir: ClassVar[str | Path | None] = None
    special_tokens: ClassVar[Mapping[str, int] | None] = None
    chat_template: ClassVar[str | None] = None
    round_trip_skip_targets: ClassVar[tuple[str, ...]] = ()
    user_placeholder: ClassVar[str | None] = None
    long_clip_seconds: ClassVar[float] = 20.0
    stream_tolerance: ClassVar[float] = 0.0
    reservation_clips: ClassVar[int] = 4
    reservation_clip_seconds: ClassVar[float] = 30.0

    # --- overridable factories -------------------------------------------------------

    def make_host(self) -> FamilyHost:
        """A fresh host with the family (installed, or :attr:`plugins` registered directly)."""
        if self.plugins:
            return create_host(plugins=self.plugins, load_entry_points=False)
        return create_host(load_entry_points=True)

    def checkpoint_configs(
        self, spec: FamilySpec, processor: Mapping[str, Any] | None = None
    ) -> CheckpointConfigs:
        """A checkpoint of :attr:`model_type` whose processor file is ``processor``."""
        model_type = self.model_type or spec.model_types[0]
        return CheckpointConfigs(
            model={"model_type": model_type},
            processor=processor,
            processor_file="preprocessor_config.json" if processor is not None else None,
        )

    def make_policy(self, host: FamilyHost) -> AudioPolicy:
        """The policy under test: a checkpoint of :attr:`model_type` that declares nothing."""
        spec = host.family(self.family).spec
        return host.parse_policy(self.family, self.checkpoint_configs(spec))

    def make_tokenizer(self) -> Any:
        """The tokenizer of the expansion checks (skips them when there is none).

        :attr:`model_dir`'s tokenizer when it has one, else a stand-in built from
        :attr:`special_tokens` and :attr:`chat_template`.
        """
        if self.model_dir is not None and check_tokenizer_files(self.model_dir):
            transformers = pytest.importorskip("transformers")
            return transformers.AutoTokenizer.from_pretrained(
                str(self.model_dir), local_files_only=True
            )
        if self.special_tokens is not None:
            pytest.importorskip("transformers")
            from audiogate.testing.tokenizers import build_stand_in_tokenizer

            return build_stand_in_tokenizer(self.special_tokens, chat_template=self.chat_template)
        pytest.skip(
            f"{type(self).__name__} gives no tokenizer: set model_dir (with tokenizer files) "
            f"or special_tokens, or override make_tokenizer()"
        )

    def make_segments(self, count: int, tokenizer: Any) -> list[PromptSegment]:
        """Prompt segments with ``count`` audio positions, as the core builds them.

        With a chat template: flatten a user message with ``count`` audio parts into
        sentinels, render it with the template and parse it back (what
        :class:`audiogate.api.AudioGate` does). Without one: text around bare media
        segments.
        """
        if getattr(tokenizer, "chat_template", None):
            content: list[dict[str, Any]] = [
                {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
                for _ in range(count)
            ]
            content.append({"type": "text", "text": _PROMPT})

            def render(messages: Sequence[Mapping[str, Any]]) -> str:
                return str(
                    tokenizer.apply_chat_template(
                        [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
                    )
                )

            flat = flatten_messages(
                [{"role": "user", "content": content}], parts=renders_parts(render)
            )
            assert flat.codec is not None
            return parse_rendered(render(flat.messages), flat.codec, expected={"audio": count})
        segments: list[PromptSegment] = [TextSegment("Listen. ")]
        for ordinal in range(1, count + 1):
            segments.extend((MediaSegment("audio", ordinal), TextSegment(" ")))
        segments.append(TextSegment(_PROMPT))
        return segments

    # --- fixtures --------------------------------------------------------------------

    @pytest.fixture
    def contract_host(self) -> FamilyHost:
        """A fresh host per test."""
        return self.make_host()

    @pytest.fixture
    def contract_spec(self, contract_host: FamilyHost) -> FamilySpec:
        """The family's registration record."""
        return contract_host.family(self.family).spec

    @pytest.fixture
    def contract_policy(self, contract_host: FamilyHost) -> AudioPolicy:
        """The policy under test."""
        return self.make_policy(contract_host)

    @pytest.fixture(scope="class")
    @classmethod
    def contract_tokenizer(cls) -> Any:
        """The tokenizer (built once per class: loading one takes a moment)."""
        return cls().make_tokenizer()

    # --- small helpers ---------------------------------------------------------------

    def rates(self, policy: AudioPolicy) -> tuple[int, ...]:
        """The source rates to exercise (see :attr:`sample_rates_hz`)."""
        if self.sample_rates_hz:
            return self.sample_rates_hz
        rates = [policy.target_rate_hz]
        allowed = policy.allowed_source_rates_hz
        if policy.min_source_rate_hz <= 48_000 <= policy.max_source_rate_hz and (
            allowed is None or 48_000 in allowed
        ):
            rates.append(48_000)
        return tuple(dict.fromkeys(rates))

    def long_seconds(self, policy: AudioPolicy) -> float:
        """Duration of the long clip: :attr:`long_clip_seconds` within the per-clip caps."""
        return min(
            self.long_clip_seconds,
            policy.max_duration_seconds,
            policy.max_samples_per_clip / policy.target_rate_hz,
        )

    def long_samples(self, policy: AudioPolicy, rate_hz: int) -> int:
        """Samples of the long clip at ``rate_hz``."""
        return int(self.long_seconds(policy) * rate_hz)

    def slots(
        self, host: FamilyHost, policy: AudioPolicy, clips: Sequence[EncodedClip]
    ) -> list[ClipSlot]:
        """Expansion slots of ``clips``, with tokens and frames from the family's plans."""
        plan = preflight(host, policy, clips)
        return [
            ClipSlot(
                ordinal=clip.ordinal,
                tokens=clip_plan.features.tokens,
                frames=clip_plan.features.frames,
                sha256=clip.sha256,
            )
            for clip, clip_plan in zip(clips, plan.clips, strict=True)
        ]

    def expansion_clips(self, policy: AudioPolicy) -> list[EncodedClip]:
        """Three clips of different lengths at the target rate."""
        rate = policy.target_rate_hz
        seconds = (1.0, 2.37, min(6.1, policy.max_duration_seconds))
        return [
            encoded_clip(seconds=s, rate_hz=rate, ordinal=i + 1, seed=i)
            for i, s in enumerate(seconds)
        ]

    def collation_clips(self, policy: AudioPolicy) -> list[EncodedClip]:
        """The expansion clips but the last, then the long clip (:meth:`long_seconds`):
        a windowed family (30 s windows, several rows per clip) collates a clip of more
        than one window, whose rows must stay together and in clip order."""
        rate = policy.target_rate_hz
        clips = self.expansion_clips(policy)[:-1]
        long = encoded_clip(
            seconds=self.long_seconds(policy), rate_hz=rate, ordinal=len(clips) + 1, seed=7
        )
        return [*clips, long]

    def reservation_request(self, host: FamilyHost, policy: AudioPolicy) -> list[EncodedClip]:
        """The largest request of the configured shape that the policy admits."""
        rate = max(self.rates(policy))
        channels = min(2, policy.max_source_channels)
        seconds = min(self.reservation_clip_seconds, policy.max_duration_seconds)
        count = min(self.reservation_clips, policy.max_clips)
        while True:
            request = [
                encoded_clip(
                    seconds=seconds, rate_hz=rate, channels=channels, ordinal=i + 1, seed=i
                )
                for i in range(count)
            ]
            try:
                preflight(host, policy, request)
            except LimitError:
                if count > 1:
                    count -= 1
                elif seconds > 0.5:
                    seconds *= 0.75
                else:
                    raise
                continue
            return request

    # --- registration ----------------------------------------------------------------

    @contract
    def test_family_registers(self, contract_host: FamilyHost, contract_spec: FamilySpec) -> None:
        """The family is registered under its name and model types, with every hook it needs."""
        registered = contract_host.family(self.family)
        assert contract_spec.name == self.family
        assert contract_spec.defaults.family == self.family
        for model_type in contract_spec.model_types:
            assert contract_host.family_for_model_type(model_type).spec.name == self.family
        implemented = set(contract_host.implementations(self.family))
        missing = sorted(REQUIRED_HOOKS - implemented)
        assert not missing, (
            f"plugin {registered.plugin_name!r} gives family {self.family!r} no {missing}"
        )

    @contract
    def test_the_host_asks_the_family_only_for_its_own_policy(
        self, contract_host: FamilyHost, contract_spec: FamilySpec, contract_policy: AudioPolicy
    ) -> None:
        """Beside another family, each stage of a request of that family reaches that
        family: nothing of this plugin answers for it (the host dispatches by family)."""
        host = self._host_with(_ForeignFamily(contract_spec.defaults))
        foreign = attrs.evolve(contract_policy, family=_FOREIGN)
        foreign_spec = host.family(_FOREIGN).spec
        samples = contract_policy.target_rate_hz
        plan = FeaturePlan(
            frames=1, tokens=1, feature_shape=(1, 1), feature_bytes=0, working_bytes=0
        )
        clip = ClipFeatures(features=readonly(np.zeros((1, 1), np.float32)), frames=1, tokens=1)
        calls: dict[str, Callable[[], object]] = {
            "audiogate_parse_policy": lambda: host.parse_policy(
                _FOREIGN, CheckpointConfigs(model={"model_type": _FOREIGN})
            ),
            "audiogate_plan_resample": lambda: host.plan_resample(
                foreign, source_rate_hz=samples, source_samples=samples, clip_index=0
            ),
            "audiogate_plan_features": lambda: host.plan_features(
                foreign, rate_hz=samples, samples=samples, clip_index=0
            ),
            "audiogate_extract_features": lambda: host.extract_features(
                foreign, plan, _waveform(samples), rate_hz=samples, clip_index=0, cancel=NEVER
            ),
            "audiogate_collate_features": lambda: host.collate_features(foreign, [clip]),
            "audiogate_expand_prompt": lambda: host.expand_prompt(
                foreign,
                [TextSegment(_PROMPT)],
                [ClipSlot(ordinal=1, tokens=1, frames=1, sha256="0" * 64)],
                None,
            ),
        }
        answered = []
        for hook, call in calls.items():
            try:
                call()
            except _ForeignReached as reached:
                if reached.hook != hook:
                    answered.append(hook)
            else:
                answered.append(hook)
        assert foreign_spec.name == _FOREIGN
        assert not answered, (
            f"the {self.family!r} plugin answered {answered} for a policy of family "
            f"{_FOREIGN!r}: a plugin registered beside others must not take their requests"
        )
        # And this family's own requests still reach this family, not the other one.
        host.plan_features(contract_policy, rate_hz=samples, samples=samples, clip_index=0)

    def _host_with(self, other: object) -> FamilyHost:
        """A host with the family under test and ``other`` registered after it."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AudioGateDeprecationWarning)  # the 0.x form's
            if self.plugins:
                return create_host(plugins=[*self.plugins, other], load_entry_points=False)
            return create_host(plugins=[other], load_entry_points=True)

    # --- policy and schema -----------------------------------------------------------

    @contract
    def test_empty_checkpoint_gets_the_pinned_defaults(
        self, contract_host: FamilyHost, contract_spec: FamilySpec
    ) -> None:
        """A checkpoint of the first model type that declares nothing gets the pinned policy."""
        configs = CheckpointConfigs(model={"model_type": contract_spec.model_types[0]})
        policy = contract_host.parse_policy(self.family, configs)
        assert policy == contract_host.default_policy(self.family)

    @contract
    def test_policy_round_trips_through_every_recognized_key(
        self, contract_host: FamilyHost, contract_spec: FamilySpec
    ) -> None:
        """Restating every recognized key at its pinned value validates and changes nothing."""
        document = pinned_document(contract_spec, skip_targets=self.round_trip_skip_targets)
        errors = [
            f"{pointer} = {value!r}: {error.message}"
            for pointer, value, error in iter_schema_errors(contract_spec.schema, document)
        ]
        assert not errors, f"the family's own pinned values break its schema: {errors}"
        baseline = contract_host.parse_policy(self.family, self.checkpoint_configs(contract_spec))
        loaded = contract_host.parse_policy(
            self.family, self.checkpoint_configs(contract_spec, document)
        )
        changed = {
            name: (getattr(baseline, name), getattr(loaded, name))
            for name in baseline.as_dict()
            if getattr(baseline, name) != getattr(loaded, name)
        }
        assert not changed, f"restating the pinned values changed the policy: {changed}"
        assert loaded == baseline
        not_recorded = sorted(
            {
                key.target
                for key in contract_spec.keys
                if key.target not in self.round_trip_skip_targets
                and loaded.source_of(key.target).kind != "checkpoint"
            }
        )
        assert not not_recorded, f"keys read but not recorded as checkpoint values: {not_recorded}"

    @contract
    def test_a_checkpoint_cannot_widen_a_limit(
        self, contract_host: FamilyHost, contract_spec: FamilySpec
    ) -> None:
        """Every recognized key of a ``max_*`` field declared one above its pinned value
        (``min_*``: one below) is refused, or leaves the policy within its pinned bound:
        the budgets and reservations are sized from the pinned policy."""
        baseline = contract_host.parse_policy(self.family, self.checkpoint_configs(contract_spec))
        widened: list[str] = []
        for key in contract_spec.keys:
            if key.kind != "integer" or key.has_const or key.enum is not None:
                continue
            field = "max_samples_per_clip" if key.apply == "cap_samples_by_seconds" else key.target
            step = 1 if field.startswith("max_") else -1 if field.startswith("min_") else 0
            value = pinned_value(key, contract_spec.defaults) + step
            if step == 0 or value < 0:
                continue
            for path in key.paths:
                document: dict[str, Any] = {}
                node = document
                parts = path[1:].split("/")
                for part in parts[:-1]:
                    node = node.setdefault(part, {})
                node[parts[-1]] = value
                try:
                    policy = contract_host.parse_policy(
                        self.family, self.checkpoint_configs(contract_spec, document)
                    )
                except PolicyError:
                    continue
                got, bound = getattr(policy, field), getattr(baseline, field)
                if (step > 0 and got > bound) or (step < 0 and got < bound):
                    widened.append(f"{path} = {value} gives {field} = {got} (pinned {bound})")
        # Keys the family does not declare must not move a bound either (a parse hook of
        # its own that reads, say, max_audio_clips): each name, huge, alone, top level
        # and under the usual nestings.
        bounds = [name for name in baseline.as_dict() if name.startswith(("max_", "min_"))]
        for name in (*bounds, *_UNDECLARED_LIMIT_NAMES):
            big = 1 << 40
            for nest in ("", "feature_extractor", "audio_processor", "audio_config"):
                document = {name: big} if not nest else {nest: {name: big}}
                try:
                    policy = contract_host.parse_policy(
                        self.family, self.checkpoint_configs(contract_spec, document)
                    )
                except PolicyError:
                    continue
                for field in bounds:
                    got, bound = getattr(policy, field), getattr(baseline, field)
                    if (field.startswith("max_") and got > bound) or (
                        field.startswith("min_") and got < bound
                    ):
                        widened.append(f"/{nest}/{name} = {big} gives {field} = {got}")
        assert not widened, f"a checkpoint widened the pinned limits: {widened}"

    @contract
    def test_schema_is_valid_and_fresh(self, contract_spec: FamilySpec) -> None:
        """``schema.json`` is draft 2020-12 and equals ``build_schema`` of the key table."""
        schema = json.loads(dump_schema(contract_spec.schema))
        Draft202012Validator.check_schema(schema)
        assert schema.get("$schema") == SCHEMA_DIALECT
        fresh = json.loads(dump_schema(build_schema(self.family, contract_spec.keys)))
        assert schema == fresh, (
            f"the {self.family!r} schema.json is stale: regenerate it with "
            f"audiogate.policy.dump_schema(build_schema({self.family!r}, KEYS))"
        )

    @contract
    def test_example_checkpoint_selects_the_family(self, contract_host: FamilyHost) -> None:
        """The example model directory's configs load as this family."""
        if self.model_dir is None:
            pytest.skip(f"{type(self).__name__} names no example checkpoint (model_dir)")
        policy = contract_host.load_model_policy(self.model_dir)
        assert policy.family == self.family

    # --- frame and token arithmetic --------------------------------------------------

    @contract
    def test_feature_plan_matches_extracted_features(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """At edge lengths, extraction returns exactly the planned shape, frames and tokens."""
        host, policy = contract_host, contract_policy
        rate = policy.target_rate_hz
        lengths = edge_lengths(
            host, policy, rate_hz=rate, long_samples=self.long_samples(policy, rate)
        )
        problems: list[str] = []
        for samples in lengths:
            try:
                plan = host.plan_features(policy, rate_hz=rate, samples=samples, clip_index=0)
            except FeatureError:
                continue
            # The host raises PluginError when shape, frames or tokens differ from the plan.
            features = host.extract_features(
                policy, plan, _waveform(samples), rate_hz=rate, clip_index=0, cancel=NEVER
            )
            problems.extend(f"{samples} samples: {p}" for p in _feature_problems(features))
        assert not problems, problems

    @contract
    def test_a_streamed_clip_equals_the_whole_clip(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Where the family streams, any chunking gives the whole clip's result.

        At the target rate and the highest other claimed rate, for clips of one frame,
        a few frames and over a second (past one source batch), pushed in 1-sample,
        10 ms, 20 ms, random and odd chunks: :func:`audiogate.testing.streaming.
        assert_stream_matches_whole_clip`; and a cancelled stream stops
        (:func:`~audiogate.testing.streaming.assert_cancel_stops_the_stream`). Skipped
        for a family without the stage.
        """
        host, policy = contract_host, contract_policy
        target = policy.target_rate_hz
        others = [r for r in self.rates(policy) if r != target]
        streamed: list[int] = []
        for rate in dict.fromkeys([target, *others[-1:]]):
            stream = open_stream(host, policy, rate)
            if stream is not None:
                stream.close()
                streamed.append(rate)
        if not streamed:
            pytest.skip(f"{self.family} does not stream this policy (no open_feature_stream)")
        frame = max(policy.frame_length_samples, policy.min_samples_per_clip, 1)
        hop = max(policy.frame_hop_samples, 1)
        for rate in streamed:
            window = max(1, frame * rate // target)
            short_sizes = ((1,), (7, window // 2 - 1 or 1, window + 1))
            lengths = {
                window + 1: short_sizes,
                (frame + 3 * hop) * rate // target + 1: short_sizes,
                rate * 13 // 10 + 17: standard_chunkings(rate, window=window, seed=rate),
            }
            for index, (length, chunkings) in enumerate(lengths.items()):
                x = noise_samples(length, seed=index, scale=0.3)
                try:
                    whole_clip_plan(host, policy, rate, length)
                except (FeatureError, LimitError):
                    continue  # not admitted: the refusal checks cover it
                for sizes in chunkings:
                    try:
                        assert_stream_matches_whole_clip(
                            host, policy, rate, x, sizes, atol=self.stream_tolerance
                        )
                    except AssertionError as error:
                        raise AssertionError(
                            f"{length} frames at {rate} Hz in chunks of {sizes}: {error}"
                        ) from error
            assert_cancel_stops_the_stream(host, policy, rate)

    @contract
    def test_every_admitted_clip_has_prompt_positions(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Every length the policy admits and the frontend plans has at least one audio
        token: a clip with features but no prompt position would vanish from the request."""
        host, policy = contract_host, contract_policy
        rate = policy.target_rate_hz
        lengths = edge_lengths(
            host, policy, rate_hz=rate, long_samples=self.long_samples(policy, rate)
        )
        silent = []
        for samples in lengths:
            if samples < policy.min_samples_per_clip:
                continue
            try:
                plan = host.plan_features(policy, rate_hz=rate, samples=samples, clip_index=0)
            except FeatureError:
                continue
            if plan.tokens < 1:
                silent.append(samples)
        assert not silent, (
            f"these admitted lengths plan no audio token: {silent}; refuse them "
            "(min_samples_per_clip, or a FeatureError from the plan)"
        )

    @contract
    def test_refusals_are_typed_and_name_their_clip(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """A clip too short for the frontend, a frontend given another rate than the
        target and a cancelled extraction raise the documented error classes (a bare
        ``ValueError`` is a 500 instead of a 400), each naming the clip it was called for."""
        host, policy = contract_host, contract_policy
        rate, clip = policy.target_rate_hz, 3
        cancelled = CancelToken()
        cancelled.cancel()
        samples = min(max(rate, policy.min_samples_per_clip), policy.max_samples_per_clip)
        plan = host.plan_features(policy, rate_hz=rate, samples=samples, clip_index=clip)
        # One sample under the declared minimum; a family that declares none (0) is asked
        # for one sample, and one that admits a single sample (Voxtral pads it to 30 s)
        # for none.
        minimum = policy.min_samples_per_clip
        short = minimum - 1 if minimum > 1 else 1 - minimum
        calls: dict[str, tuple[type[AudioGateError], Callable[[], object]]] = {
            f"a {short}-sample clip": (
                FeatureError,
                lambda: host.plan_features(policy, rate_hz=rate, samples=short, clip_index=clip),
            ),
            f"a clip at {rate + 1} Hz": (
                FeatureError,
                lambda: host.plan_features(
                    policy, rate_hz=rate + 1, samples=samples, clip_index=clip
                ),
            ),
            "a cancelled extraction": (
                PreprocessCancelled,
                lambda: host.extract_features(
                    policy,
                    plan,
                    _waveform(samples),
                    rate_hz=rate,
                    clip_index=clip,
                    cancel=cancelled,
                ),
            ),
        }
        problems: list[str] = []
        for case, (expected, call) in calls.items():
            try:
                call()
            except expected as error:
                named = getattr(error, "clip_index", None)
                if named != clip:
                    problems.append(f"{case}: clip_index {named}, called for {clip}")
            except Exception as error:
                problems.append(f"{case}: {type(error).__name__}, not {expected.__name__}")
            else:
                problems.append(f"{case}: accepted")
        assert not problems, problems

    @contract
    def test_policy_framing_counts_the_planned_frames(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """``AudioPolicy.estimate_frames`` (used to derive frame caps) agrees with the plan.

        Where the policy admits a length and its framing counts frames, the frontend plans
        that many; where the frontend refuses a length, the policy's framing counts none
        or ``min_samples_per_clip`` refuses it first. The longest admitted clip fits
        ``max_frames_per_clip``.
        """
        host, policy = contract_host, contract_policy
        rate = policy.target_rate_hz
        lengths = edge_lengths(
            host, policy, rate_hz=rate, long_samples=self.long_samples(policy, rate)
        )
        problems: list[str] = []
        for samples in lengths:
            estimate = policy.estimate_frames(samples)
            try:
                plan = host.plan_features(policy, rate_hz=rate, samples=samples, clip_index=0)
            except FeatureError as exc:
                if estimate > 0 and samples >= policy.min_samples_per_clip:
                    problems.append(
                        f"{samples} samples: refused ({exc}) though the policy admits it and "
                        f"its framing counts {estimate} frames"
                    )
                continue
            if samples < policy.min_samples_per_clip:
                continue
            if plan.frames != estimate:
                problems.append(
                    f"{samples} samples: the plan has {plan.frames} frames, the policy's "
                    f"framing (frame {policy.frame_length_samples}, hop "
                    f"{policy.frame_hop_samples}, pad to {policy.pad_multiple_samples}) "
                    f"counts {estimate}"
                )
        longest = host.plan_features(
            policy, rate_hz=rate, samples=policy.max_samples_per_clip, clip_index=0
        )
        if longest.frames > policy.max_frames_per_clip:
            problems.append(
                f"the longest admitted clip ({policy.max_samples_per_clip} samples) plans "
                f"{longest.frames} frames, above max_frames_per_clip {policy.max_frames_per_clip}"
            )
        assert not problems, problems

    @contract
    def test_every_source_rate_goes_through_the_pipeline(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Each claimed source rate, mono and stereo, prepares as planned."""
        host, policy = contract_host, contract_policy
        for rate in self.rates(policy):
            clips = [
                encoded_clip(seconds=1.0, rate_hz=rate, ordinal=1),
                encoded_clip(
                    seconds=2.37,
                    rate_hz=rate,
                    channels=min(2, policy.max_source_channels),
                    ordinal=2,
                    encoding="f32",
                    seed=1,
                ),
            ]
            plan = preflight(host, policy, clips)
            batch = prepare_clips(host, policy, clips)
            assert [c.tokens for c in batch.clips] == [p.features.tokens for p in plan.clips]
            assert [c.normalized_samples for c in batch.clips] == [
                p.normalized_samples for p in plan.clips
            ]
            for clip in batch.clips:
                assert not clip.waveform.flags.writeable
                assert clip.waveform.dtype == np.float32

    # --- expansion -------------------------------------------------------------------

    @contract
    def test_chat_expansion_has_the_planned_audio_positions(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """A rendered chat prompt expands to exactly each clip's tokens, in clip order."""
        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        clips = self.expansion_clips(policy)
        slots = self.slots(host, policy, clips)
        for count in (1, len(slots)):
            segments = self.make_segments(count, tokenizer)
            expanded = host.expand_prompt(policy, segments, slots[:count], tokenizer)
            problems = check_expansion(expanded, slots[:count], tokenizer)
            assert not problems, problems
            text_only = host.expand_prompt(policy, segments, slots[:count], None)
            assert text_only.input_ids == ()
            assert text_only.audio_spans == ()
            assert text_only.text == expanded.text

    @contract
    def test_a_user_turn_places_the_clips_as_the_chat_request_does(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """A prompt text with clips prepared as one user turn (``audiogate prepare --model
        DIR --prompt``, batch rows: :meth:`~audiogate.api.AudioGate.prepare_user_turn`)
        gives the ids, audio spans, text and per-clip tokens of the chat request a client
        sends with the clips as audio parts before the text; the template's opening stays
        first (clips placed before it land before the template's first token)."""
        from audiogate.api import AudioGate

        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        if not getattr(tokenizer, "chat_template", None):
            pytest.skip(f"{type(self).__name__}'s tokenizer has no chat template")
        gate = AudioGate(host=host, policy=policy, tokenizer=tokenizer)
        clips = self.expansion_clips(policy)[:2]
        for count in (1, len(clips)):
            turn = gate.prepare_user_turn(_PROMPT, clips[:count])
            parts: list[dict[str, Any]] = [
                {
                    "type": "input_audio",
                    "input_audio": {"data": base64.b64encode(clip.data).decode(), "format": "wav"},
                }
                for clip in clips[:count]
            ]
            parts.append({"type": "text", "text": _PROMPT})
            chat = gate.prepare([{"role": "user", "content": parts}])
            assert turn.input_ids == chat.input_ids, f"{count} clip(s): the ids differ"
            assert turn.audio_spans == chat.audio_spans, f"{count} clip(s): the spans differ"
            assert turn.text == chat.text, f"{count} clip(s): the texts differ"
            assert turn.batch is not None
            assert chat.batch is not None
            assert [c.tokens for c in turn.batch.clips] == [c.tokens for c in chat.batch.clips]
            if turn.text is None:  # a family without a text form: the ids said it all
                continue
            rendered = gate.chat_prompt(_PROMPT)
            opening = rendered[: rendered.index(_PROMPT)].rstrip()[:8]
            assert turn.text.startswith(opening), (
                f"{count} clip(s): the turn does not open as the template does ({opening!r})"
            )

    @contract
    def test_plain_prompt_expansion_inserts_the_placeholders(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """A plain prompt without placeholders gets one run per clip, of the planned length."""
        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        slots = self.slots(host, policy, self.expansion_clips(policy))
        expanded = host.expand_prompt(policy, [TextSegment(_PROMPT)], slots, tokenizer)
        problems = check_expansion(expanded, slots, tokenizer)
        assert not problems, problems

    @contract
    def test_plain_prompt_placeholders_must_match_the_clips(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """With :attr:`user_placeholder`: one per clip expands to the planned runs (with
        a tokenizer, and as text without one); one too few or one too many is a
        PlaceholderError, never fixed up; typed into chat text, it is refused."""
        if self.user_placeholder is None:
            pytest.skip(f"{type(self).__name__} sets no user_placeholder")
        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        slots = self.slots(host, policy, self.expansion_clips(policy)[:2])

        placeholder = self.user_placeholder

        def mark(n: int) -> str:
            digest = slots[n - 1].sha256 if n <= len(slots) else f"{n:064x}"
            return placeholder.format(n=n, sha256=digest)

        def written(ordinals: Sequence[int]) -> list[PromptSegment]:
            return [TextSegment("Compare " + " and ".join(mark(n) for n in ordinals) + ".")]

        exact = written([1, 2])
        problems = check_expansion(
            host.expand_prompt(policy, exact, slots, tokenizer), slots, tokenizer
        )
        assert not problems, problems
        bare = host.expand_prompt(policy, exact, slots, None)
        if tokenizer is not None and bare.text is not None:
            audio = str(tokenizer.convert_ids_to_tokens(bare.audio_token_id))
            assert bare.text.count(audio) == sum(slot.tokens for slot in slots), (
                "without a tokenizer, the expanded text holds another number of audio tokens"
            )
        accepted = []
        for ordinals in ([1], [1, 2, 3]):
            for tok in (tokenizer, None):
                if _accepted(host, policy, written(ordinals), slots, tok):
                    accepted.append(
                        f"{len(ordinals)} placeholders for 2 clips, tokenizer={tok is not None}"
                    )
        # In chat messages every media position is a part: the placeholder typed in their
        # text is the user's, beside the parts or in a chat without media.
        typed = TextSegment(f"Say {mark(1)}.")
        beside = [*self.make_segments(2, tokenizer), typed]
        for case, segments, clips in (("beside 2 parts", beside, slots), ("alone", [typed], [])):
            for tok in (tokenizer, None):
                if _accepted(host, policy, segments, clips, tok, chat=True):
                    accepted.append(f"typed in a chat {case}, tokenizer={tok is not None}")
        assert not accepted, f"a placeholder count mismatch was accepted: {accepted}"

    @contract
    def test_a_prompt_without_clips_expands_to_no_audio(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """A text-only chat request is expanded with no clips: no audio run, no audio id.

        The core sends the rendered text of a request without audio parts through the
        family's rules, so that they can refuse audio placeholders typed as text.
        """
        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        expanded = host.expand_prompt(policy, [TextSegment(_PROMPT)], [], tokenizer)
        problems = check_expansion(expanded, [], tokenizer)
        assert not problems, problems
        # A gate without a tokenizer sends the same request: the text, no ids.
        bare = host.expand_prompt(policy, [TextSegment(_PROMPT)], [], None)
        assert (bare.input_ids, bare.audio_spans) == ((), ())

    @contract
    def test_reserved_token_literals_in_user_text_fail_closed(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """User text holding the spelling of a token the policy reserves for audio (every
        ``*_token_id`` / ``*_token_index`` option but ``image_*``: the audio id and its
        delimiters) is a PlaceholderError, with and without clips, with and without a
        tokenizer: such a literal would reach the model as an audio position with no
        features behind it."""
        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        if tokenizer is None:
            pytest.skip(f"{type(self).__name__} has no tokenizer to spell the reserved ids")
        literals = sorted(
            {
                str(tokenizer.convert_ids_to_tokens(int(value)))
                for name, value in policy.options.items()
                if name.endswith(("_token_id", "_token_index"))
                and not name.startswith("image")
                and isinstance(value, int)
            }
        )
        slots = self.slots(host, policy, self.expansion_clips(policy)[:1])
        accepted: list[str] = []
        for literal in literals:
            typed = f"Read this: {literal} now."
            with_clip: list[PromptSegment] = [
                TextSegment(f"{segment.text} {typed}")
                if isinstance(segment, TextSegment) and _PROMPT in segment.text
                else segment
                for segment in self.make_segments(1, tokenizer)
            ]
            cases: dict[str, tuple[list[PromptSegment], list[ClipSlot]]] = {
                "no clip": ([TextSegment(typed)], []),
                "beside a clip": (with_clip, slots),
            }
            for case, (segments, clips) in cases.items():
                for name, tok in (("tokenizer", tokenizer), ("no tokenizer", None)):
                    if _accepted(host, policy, segments, clips, tok):
                        accepted.append(f"{literal!r} {case}, {name}")
        assert not accepted, f"reserved literals typed as user text were accepted: {accepted}"

    @contract
    def test_clip_count_mismatch_fails_closed(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy, contract_tokenizer: Any
    ) -> None:
        """More or fewer media positions than clips is a PlaceholderError, never fixed up."""
        host, policy, tokenizer = contract_host, contract_policy, contract_tokenizer
        slots = self.slots(host, policy, self.expansion_clips(policy)[:2])
        two = self.make_segments(2, tokenizer)
        one = self.make_segments(1, tokenizer)
        with pytest.raises(PlaceholderError):
            host.expand_prompt(policy, two, slots[:1], tokenizer)
        with pytest.raises(PlaceholderError):
            host.expand_prompt(policy, one, slots, tokenizer)

    # --- cancellation ----------------------------------------------------------------

    @contract
    @pytest.mark.parametrize(
        ("checkpoint", "nth"),
        # The pipeline polls once before each stage; these reach into the stage's loop.
        [(Checkpoint.DECODE, 4), (Checkpoint.RESAMPLE, 3), (Checkpoint.FEATURE, 3)],
        ids=["decode", "resample", "feature"],
    )
    def test_cancellation_is_noticed_inside_each_stage(
        self,
        contract_host: FamilyHost,
        contract_policy: AudioPolicy,
        checkpoint: Checkpoint,
        nth: int,
    ) -> None:
        """A long clip's stage loop polls the token and stops at the poll that cancels."""
        host, policy = contract_host, contract_policy
        rate = policy.target_rate_hz
        if checkpoint is Checkpoint.RESAMPLE:
            others = [r for r in self.rates(policy) if r != policy.target_rate_hz]
            if not others:
                pytest.skip("no source rate other than the target rate to resample from")
            rate = max(others)
        clip = encoded_clip(samples=self.long_samples(policy, rate), rate_hz=rate)
        plan = preflight(host, policy, [clip])
        counting = CancelAt()
        process_request(host, plan, [clip], cancel=counting)
        polls = counting.count(checkpoint, 0)
        seconds = plan.clips[0].geometry.duration_us / 1e6
        assert polls >= nth, (
            f"a {seconds:.1f} s clip at {rate} Hz polls the {checkpoint.value} checkpoint "
            f"{polls} times; poll cancel.check(Checkpoint.{checkpoint.name}, clip_index) "
            f"inside the loop (every few thousand samples or few hundred frames)"
        )
        token = CancelAt(checkpoint, nth)
        with pytest.raises(PreprocessCancelled) as info:
            process_request(host, plan, [clip], cancel=token)
        assert info.value.checkpoint == checkpoint.value
        assert info.value.clip_index == 0
        assert token.count(checkpoint) == nth

    # --- reservations and collation --------------------------------------------------

    @contract
    def test_an_awkward_source_rate_is_refused_or_planned_small(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Rates with no small ratio to the target (the highest admitted rate less one,
        the target plus one) are refused with a typed error, or planned with at most
        :data:`PLAN_BYTES` traced (plans run at admission, before any reservation) and
        resampled within the plan's declared working bytes."""
        host, policy = contract_host, contract_policy
        rates = {policy.max_source_rate_hz - 1, policy.target_rate_hz + 1, *AWKWARD_RATES_HZ}
        problems: list[str] = []
        admitted = range(policy.min_source_rate_hz, policy.max_source_rate_hz + 1)
        for rate in sorted(r for r in rates if r in admitted):
            samples = 2 * rate + 1
            with _traced() as peak:
                try:
                    plan = host.plan_resample(
                        policy, source_rate_hz=rate, source_samples=samples, clip_index=0
                    )
                except PluginError as error:
                    # A plugin's crash is a 500 in production, never a refusal.
                    problems.append(f"planning {rate} Hz crashed: {error}")
                    continue
                except AudioGateError:
                    continue
            if peak[0] > PLAN_BYTES:
                problems.append(f"planning {rate} Hz traced {peak[0]} B (at most {PLAN_BYTES})")
                continue
            source = _waveform(samples)
            host.resample(policy, plan, source, clip_index=0, cancel=NEVER)  # warm caches
            with _traced() as peak:
                out = host.resample(policy, plan, source, clip_index=0, cancel=NEVER)
            allowed = plan.working_bytes + (0 if out is source else plan.output_samples * 4)
            if peak[0] > allowed + OBJECT_SLACK_BYTES:
                problems.append(
                    f"resampling {samples} samples at {rate} Hz traced {peak[0]} B; the plan "
                    f"declares {plan.working_bytes} B besides its output"
                )
        assert not problems, problems

    @contract
    def test_reservation_covers_the_traced_peak(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Preparing a large admitted request allocates no more than its planned host bytes."""
        host, policy = contract_host, contract_policy
        request = self.reservation_request(host, policy)
        plan = preflight(host, policy, request)
        # Warm caches (filter banks, windows) that are built once per process, not per request.
        prepare_clips(host, policy, [encoded_clip(seconds=1.0, rate_hz=max(self.rates(policy)))])
        with _traced() as peak:
            batch = prepare_clips(host, policy, request)
        assert batch.totals.clips == len(request)
        assert peak[0] <= plan.host_bytes, (
            f"{len(request)} clip(s) of {plan.clips[0].geometry.duration_us / 1e6:.1f} s at "
            f"{plan.clips[0].geometry.rate_hz} Hz: traced peak {peak[0]} B exceeds the "
            f"reservation of {plan.host_bytes} B (waveform working "
            f"{plan.waveform_working_bytes}, feature working {plan.feature_working_bytes}, "
            f"prepared results {plan.prepared_result_bytes})"
        )

    @contract
    def test_declared_working_bytes_cover_each_stage(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """The resampler and the frontend allocate no more than their plans declare.

        ``ResamplePlan.working_bytes`` must cover the resampler's traced peak besides its
        output, and ``FeaturePlan.working_bytes`` the frontend's besides its result
        (``feature_bytes``); the request reservation is built from these declarations.
        """
        host, policy = contract_host, contract_policy
        rate = max(self.rates(policy))
        clip = encoded_clip(samples=self.long_samples(policy, rate), rate_hz=rate)
        (clip_plan,) = preflight(host, policy, [clip]).clips
        source = _waveform(clip_plan.resample.source_samples)
        # Warm once-per-process caches (filter banks, windows) before tracing.
        warm = host.resample(policy, clip_plan.resample, source, clip_index=0, cancel=NEVER)
        host.extract_features(
            policy,
            clip_plan.features,
            warm[: clip_plan.normalized_samples],
            rate_hz=clip_plan.resample.output_rate_hz,
            clip_index=0,
            cancel=NEVER,
        )
        del warm
        problems: list[str] = []
        with _traced() as peak:
            out = host.resample(policy, clip_plan.resample, source, clip_index=0, cancel=NEVER)
        allowed = clip_plan.resample.working_bytes + clip_plan.resample.output_samples * 4
        if out is source:
            allowed = clip_plan.resample.working_bytes
        if peak[0] > allowed:
            problems.append(
                f"resampling {clip_plan.resample.source_samples} samples at {rate} Hz "
                f"({clip_plan.resample.algorithm}) traced {peak[0]} B; the plan declares "
                f"{clip_plan.resample.working_bytes} B of working memory besides its "
                f"{clip_plan.resample.output_samples * 4} B output"
            )
        waveform = out[: clip_plan.normalized_samples]
        del source
        with _traced() as peak:
            host.extract_features(
                policy,
                clip_plan.features,
                waveform,
                rate_hz=clip_plan.resample.output_rate_hz,
                clip_index=0,
                cancel=NEVER,
            )
        allowed = clip_plan.features.working_bytes + clip_plan.features.feature_bytes
        if peak[0] > allowed:
            problems.append(
                f"extracting {clip_plan.features.frames} frames traced {peak[0]} B; the plan "
                f"declares {clip_plan.features.working_bytes} B of working memory besides its "
                f"{clip_plan.features.feature_bytes} B result"
            )
        assert not problems, problems

    @contract
    def test_collation_keeps_each_clips_tokens(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Collated tokens equal the per-clip tokens; every input is batched along axis 0,
        each clip's rows (one, or one per window) after the previous clip's."""
        host, policy = contract_host, contract_policy
        clips = self.collation_clips(policy)
        batch = prepare_clips(host, policy, clips)
        per_clip = tuple(c.tokens for c in batch.clips)
        assert batch.inputs.tokens == per_clip
        features: list[ClipFeatures] = [c.features for c in batch.clips]
        for subset in (features[:1], features[::-1]):
            collated = host.collate_features(policy, subset)
            assert collated.tokens == tuple(f.tokens for f in subset)
        assert batch.inputs.inputs, "collate_features returned no model inputs"
        rows = _rows_per_clip(host, policy, features)
        for name, array in batch.inputs.inputs.items():
            assert isinstance(array, np.ndarray), f"{name} is a {type(array).__name__}"
            assert not array.flags.writeable, f"{name} is writable; return readonly() arrays"
            want = sum(rows[name])
            assert array.shape[:1] == (want,), (
                f"{name} has shape {array.shape}; expected {want} rows, each clip's rows as "
                f"it collates alone ({rows[name]})"
            )

    @contract
    def test_collation_puts_each_clip_in_its_row(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Clip ``i``'s rows of every collated input (one row, or one per window, as it
        collates alone) are clip ``i``'s: collating the clips in a rotated order rotates
        every input's rows; the longest clip (no padding) collates to the same rows alone
        and in the batch; collating twice gives the same bytes (padding from
        uninitialised memory does not); floating inputs keep the features' dtype."""
        host, policy = contract_host, contract_policy
        batch = prepare_clips(host, policy, self.collation_clips(policy))
        features: list[ClipFeatures] = [c.features for c in batch.clips]
        count = len(features)
        order = [*range(1, count), 0]
        first = host.collate_features(policy, features).inputs
        again = host.collate_features(policy, features).inputs
        rotated = host.collate_features(policy, [features[i] for i in order]).inputs
        longest = max(range(count), key=lambda i: features[i].frames)
        alone = host.collate_features(policy, [features[longest]]).inputs
        rows = _rows_per_clip(host, policy, features)
        dtype = features[0].features.dtype
        problems: list[str] = []
        for name, array in first.items():
            if array.tobytes() != again[name].tobytes():
                problems.append(f"{name}: two collations of the same clips differ")
            if array.dtype.kind == "f" and array.dtype != dtype:
                problems.append(f"{name} is {array.dtype}; the features are {dtype}")
            starts = np.cumsum([0, *rows[name]])
            blocks = [array[starts[i] : starts[i + 1]] for i in range(count)]
            want = np.concatenate([blocks[i] for i in order]) if array.ndim else array
            if rotated[name].shape != want.shape or not np.array_equal(rotated[name], want):
                problems.append(f"{name}: the rows of a rotated batch are not its clips'")
            if name in alone and not np.array_equal(alone[name], blocks[longest]):
                problems.append(f"{name}: the longest clip's rows differ from collating it alone")
        assert not problems, problems

    @contract
    def test_repeated_requests_do_not_accumulate_memory(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Twenty more runs of the same request, results dropped, leave under one clip's
        features of traced memory behind (features kept in a module list, or a cache that
        grows per request, fail)."""
        host, policy = contract_host, contract_policy
        clips = self.expansion_clips(policy)[:1]
        first = prepare_clips(host, policy, clips)
        feature_bytes = first.clips[0].features.features.nbytes
        del first
        for _ in range(3):
            prepare_clips(host, policy, clips)  # warm every cache
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(20):
                prepare_clips(host, policy, clips)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < feature_bytes, (
            f"20 requests left {grown} B behind (one clip's features: {feature_bytes} B)"
        )

    @contract
    def test_preparation_is_deterministic(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """The same request prepares to the same bytes twice (no hidden state)."""
        host, policy = contract_host, contract_policy
        clips = self.expansion_clips(policy)[:2]
        first = prepare_clips(host, policy, clips)
        second = prepare_clips(host, policy, clips)
        for a, b in zip(first.clips, second.clips, strict=True):
            assert a.features.features.tobytes() == b.features.features.tobytes()
        for name, array in first.inputs.inputs.items():
            assert array.tobytes() == second.inputs.inputs[name].tobytes(), name

    @contract
    def test_extreme_signals_give_finite_features(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Digital silence, DC, a full-scale square wave, a tiny signal and clipped noise
        give finite float32 features (a log without a floor turns silence into -inf, and
        the model's output into NaN), or a typed refusal; the input is left as it was.
        numpy's floating-point warnings are ignored here, so the verdict is the same
        whatever the caller's warning filters (under ``filterwarnings = error`` the
        warning would otherwise surface as a crash, and without it as -inf); a plugin's
        crash (:class:`~audiogate.errors.PluginError`) is never taken for a refusal."""
        host, policy = contract_host, contract_policy
        rate = policy.target_rate_hz
        samples = min(max(rate, policy.min_samples_per_clip), policy.max_samples_per_clip)
        square = np.where(np.arange(samples) % 64 < 32, 1.0, -1.0)
        signals = {
            "silence": np.zeros(samples),
            "DC 0.5": np.full(samples, 0.5),
            "full-scale square": square,
            "1e-30": np.full(samples, 1e-30) * square,
            "clipped noise": np.clip(noise(samples=samples, amplitude=3.0, seed=5), -1, 1),
        }
        problems: list[str] = []
        for name, values in signals.items():
            wave = readonly(values.astype(np.float32))
            before = wave.tobytes()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    plan = host.plan_features(policy, rate_hz=rate, samples=samples, clip_index=0)
                    features = host.extract_features(
                        policy, plan, wave, rate_hz=rate, clip_index=0, cancel=NEVER
                    )
            except PluginError as error:
                problems.append(f"{name}: the plugin crashed: {error}")
                continue
            except AudioGateError:
                continue  # a typed refusal (e.g. of an all-zero signal) is the family's call
            problems.extend(f"{name}: {p}" for p in _feature_problems(features))
            if wave.tobytes() != before or wave.flags.writeable:
                problems.append(f"{name}: extraction changed its input waveform")
        assert not problems, problems

    @contract
    def test_concurrent_clips_match_their_serial_results(
        self, contract_host: FamilyHost, contract_policy: AudioPolicy
    ) -> None:
        """Clips extracted at once on several threads equal their one-at-a-time results,
        and no clip's features share memory with another's (a module-level output buffer
        or a cache filled without a lock passes every single-threaded check)."""
        host, policy = contract_host, contract_policy
        rate = policy.target_rate_hz
        lengths = sorted(
            {
                min(
                    max(int(seconds * rate), policy.min_samples_per_clip),
                    policy.max_samples_per_clip,
                )
                for seconds in (0.61, 1.37, 2.9, 4.3)
            },
            reverse=True,
        )
        waves = [_waveform(samples, seed=index) for index, samples in enumerate(lengths)]

        def extract(wave: npt.NDArray[np.float32]) -> ClipFeatures:
            plan = host.plan_features(policy, rate_hz=rate, samples=wave.size, clip_index=0)
            return host.extract_features(
                policy, plan, wave, rate_hz=rate, clip_index=0, cancel=NEVER
            )

        serial = [extract(wave) for wave in waves]
        expected = [clip.features.tobytes() for clip in serial]
        for i, a in enumerate(serial):
            for b in serial[i + 1 :]:
                assert not np.shares_memory(a.features, b.features), (
                    "two clips' features share memory: return a fresh array per clip"
                )
        start = threading.Barrier(len(waves))

        def racing(wave: npt.NDArray[np.float32]) -> bytes:
            start.wait()
            return extract(wave).features.tobytes()

        for _ in range(3):
            with ThreadPoolExecutor(max_workers=len(waves)) as pool:
                results = list(pool.map(racing, waves))
            for samples, got, want in zip(lengths, results, expected, strict=True):
                assert got == want, f"{samples} samples: concurrent extraction differs"
        for samples, clip, want in zip(lengths, serial, expected, strict=True):
            assert clip.features.tobytes() == want, (
                f"{samples} samples: a later extraction overwrote this clip's features"
            )


# --- internals -----------------------------------------------------------------------


def _accepted(
    host: FamilyHost,
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    *,
    chat: bool = False,
) -> bool:
    """Whether the family expands ``segments`` rather than refusing them (PlaceholderError)."""
    try:
        host.expand_prompt(policy, segments, clips, tokenizer, chat=chat)
    except PlaceholderError:
        return False
    return True


def _rows_per_clip(
    host: FamilyHost, policy: AudioPolicy, features: Sequence[ClipFeatures]
) -> dict[str, list[int]]:
    """Rows of each collated input that each clip takes, as it collates alone (one for a
    family that batches a row per clip, its windows' count for a windowed one). An input
    only a batch has (Phi-4's ``audio_attention_mask``, given for two clips or more) has a
    row per clip."""
    alone = [host.collate_features(policy, [clip]).inputs for clip in features]
    batched = host.collate_features(policy, features).inputs
    return {
        name: [
            (int(inputs[name].shape[0]) if inputs[name].ndim else 0) if name in inputs else 1
            for inputs in alone
        ]
        for name in batched
    }


def _feature_problems(features: ClipFeatures) -> Iterator[str]:
    array = features.features
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        yield f"features are {getattr(array, 'dtype', type(array).__name__)}, not float32"
        return
    if array.flags.writeable:
        yield "features are writable; return readonly() arrays"
    if not np.isfinite(array).all():
        yield "features contain NaN or infinity"
    mask = features.mask
    if mask is not None:
        if mask.dtype != np.bool_:
            yield f"the mask is {mask.dtype}, not bool"
        if mask.flags.writeable:
            yield "the mask is writable; return readonly() arrays"
        if int(mask.sum()) != features.frames:
            yield f"the mask marks {int(mask.sum())} valid frames, the clip has {features.frames}"


@contextlib.contextmanager
def _traced() -> Iterator[list[int]]:
    """``with _traced() as peak:``; afterwards ``peak[0]`` is the traced peak in bytes
    above what was allocated before the block."""
    peak = [0]
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline, _ = tracemalloc.get_traced_memory()
        yield peak
        _, highest = tracemalloc.get_traced_memory()
        peak[0] = highest - baseline
    finally:
        if not was_tracing:
            tracemalloc.stop()
