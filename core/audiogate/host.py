"""The plugin host: loads family plugins and is the only caller of hooks.

Entry points in the group ``audiogate.families`` load explicitly, when a host is
created, never at import time. ``AUDIOGATE_DISABLE_PLUGIN_AUTOLOAD=1`` skips them;
``plugins=`` registers plugin objects directly (tests, servers embedding their own
family). A plugin that fails to import, registers a taken family name or model type,
or registers something malformed fails loudly, naming the entry point and distribution.

Stages are dispatched by family: for a policy of family ``F`` the host asks, in order,

1. the ``@hookimpl`` stage hooks of the plugin that registered ``F`` and of plugins that
   registered no family (the 0.x form, deprecated: such a hook answered every family's
   policy unless it checked ``policy.family`` itself), in pluggy's order;
2. ``F``'s registered :class:`~audiogate.family.FamilyStages`;
3. the core default (``trylast``), where the hook has one;

and the first answer that is not ``None`` wins. A plugin that registered other families
only is never asked, so a family's stages need no check of whose policy they got.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs
import numpy as np
import numpy.typing as npt
import pluggy

from audiogate import hookspecs
from audiogate.cancel import CancelToken
from audiogate.deprecation import REMOVAL_VERSION, AudioGateDeprecationWarning
from audiogate.errors import AudioGateError, PluginError, PolicyError
from audiogate.family import (
    FAMILY_NAME_RE,
    FamilySpec,
    FamilyStages,
    RegisteredFamily,
    accepted_keywords,
)
from audiogate.policy import AudioPolicy, CheckpointConfigs, read_checkpoint_configs
from audiogate.policy.model import ValueSource
from audiogate.policy.schema import build_schema
from audiogate.records import (
    ClipFeatures,
    ClipSlot,
    ExpandedPrompt,
    FeatureBatch,
    FeaturePlan,
    MediaSegment,
    PromptSegment,
    ResamplePlan,
)
from audiogate.streaming.stage import FeatureStream

__all__ = [
    "DISABLE_AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "FamilyHost",
    "create_host",
]

ENTRY_POINT_GROUP: Final = "audiogate.families"
DISABLE_AUTOLOAD_ENV: Final = "AUDIOGATE_DISABLE_PLUGIN_AUTOLOAD"
_DIRECT: Final = "<direct>"
_DEFAULTS: Final = "audiogate.defaults"
#: Hooks dispatched by family: every hook but registration.
_STAGE_HOOKS: Final = frozenset(
    name
    for name in dir(hookspecs)
    if name.startswith("audiogate_") and name != "audiogate_register_families"
)
_T = TypeVar("_T")


def _autoload_disabled() -> bool:
    return os.environ.get(DISABLE_AUTOLOAD_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


@attrs.frozen
class _Origin:
    distribution: str
    version: str | None
    entry_point: str | None


class FamilyHost:
    """Typed façade over the plugin manager; the pipeline calls hooks only through this.

    Create one with :func:`create_host`.
    """

    def __init__(self, pm: pluggy.PluginManager, origins: Mapping[str, _Origin]) -> None:
        self._pm = pm
        self._origins = dict(origins)
        self._families: dict[str, RegisteredFamily] = {}
        self._by_model_type: dict[str, str] = {}
        self._stages: dict[str, dict[str, Callable[..., Any]]] = {}
        self._callers: dict[tuple[str, str | None], Any] = {}
        self._keywords: dict[Callable[..., Any], frozenset[str] | None] = {}
        # (hook, family) -> (the hook's plugin functions then, the stage :meth:`_plan`
        # calls directly, or None)
        self._direct: dict[tuple[str, str], tuple[list[Any], Callable[..., Any] | None]] = {}
        self._collect_families()
        self._warn_hook_form()
        # Built now, not on a request's first call (where they would be unplanned bytes).
        for hook in _STAGE_HOOKS:
            for family in (None, "", *self._families):
                self._hook_caller(hook, family)

    # --- registration --------------------------------------------------------------

    def _origin(self, plugin_name: str) -> _Origin:
        return self._origins.get(plugin_name, _Origin(_DIRECT, None, None))

    def _describe(self, plugin_name: str) -> str:
        origin = self._origin(plugin_name)
        if origin.entry_point is None:
            return f"plugin {plugin_name!r} (registered directly)"
        return (
            f"entry point {origin.entry_point!r} of distribution {origin.distribution!r}"
            f" (group {ENTRY_POINT_GROUP})"
        )

    def _collect_families(self) -> None:
        caller = self._pm.hook.audiogate_register_families
        # Call each implementation with its own ``register`` so errors name the plugin.
        for impl in caller.get_hookimpls():
            plugin_name = impl.plugin_name

            def register(
                spec: FamilySpec,
                *,
                stages: FamilyStages | None = None,
                _plugin_name: str = plugin_name,
            ) -> None:
                self._register(spec, _plugin_name, stages)

            try:
                impl.function(register=register)
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"{self._describe(plugin_name)} failed while registering families: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

    def _register(self, spec: Any, plugin_name: str, stages: Any = None) -> None:
        where = self._describe(plugin_name)
        if not isinstance(spec, FamilySpec):
            raise PluginError(
                f"{where} registered a {type(spec).__name__}, expected audiogate.FamilySpec"
            )
        problems = []
        if stages is not None and not isinstance(stages, FamilyStages):
            problems.append(
                f"stages must be an audiogate.FamilyStages, not {type(stages).__name__}"
            )
        elif stages is not None:
            problems.extend(
                f"stage {hook.removeprefix('audiogate_')} is not callable"
                for hook, function in stages.implemented().items()
                if not callable(function)
            )
        if not FAMILY_NAME_RE.match(spec.name):
            problems.append(f"name {spec.name!r} must match {FAMILY_NAME_RE.pattern}")
        if not spec.model_types or not all(isinstance(t, str) and t for t in spec.model_types):
            problems.append(f"model_types {spec.model_types!r} must be non-empty strings")
        elif len(set(spec.model_types)) != len(spec.model_types):
            problems.append(f"model_types {spec.model_types!r} repeat a value")
        problems.extend(_spec_problems(spec))
        if not isinstance(spec.defaults, AudioPolicy) or spec.defaults.family != spec.name:
            problems.append("defaults must be an AudioPolicy whose family is the spec's name")
        if not spec.schema or spec.schema.get("type") != "object":
            problems.append("schema must be a JSON schema object")
        if not spec.revision or not spec.version:
            problems.append("revision and version must be non-empty")
        if problems:
            raise PluginError(
                f"{where} registered a malformed family {spec.name!r}: " + "; ".join(problems)
            )
        origin = self._origin(plugin_name)
        if spec.name in self._families:
            taken = self._families[spec.name]
            raise PluginError(
                f"family {spec.name!r} from {where} is already registered by distribution "
                f"{taken.distribution!r} (plugin {taken.plugin_name!r}); uninstall one of "
                f"them or set {DISABLE_AUTOLOAD_ENV}=1 and register plugins directly"
            )
        for model_type in spec.model_types:
            if model_type in self._by_model_type:
                other = self._families[self._by_model_type[model_type]]
                raise PluginError(
                    f"model type {model_type!r} of family {spec.name!r} from {where} is "
                    f"already handled by family {other.spec.name!r} of distribution "
                    f"{other.distribution!r}"
                )
        self._families[spec.name] = RegisteredFamily(
            spec=spec,
            distribution=origin.distribution,
            distribution_version=origin.version,
            plugin_name=plugin_name,
        )
        for model_type in spec.model_types:
            self._by_model_type[model_type] = spec.name
        self._stages[spec.name] = stages.implemented() if stages is not None else {}
        for stage in self._stages[spec.name].values():
            self._keywords.setdefault(stage, accepted_keywords(stage))

    def _warn_hook_form(self) -> None:
        """Warn once per plugin that answers stage hooks with ``@hookimpl`` (the 0.x form)."""
        owners: dict[str, list[str]] = {}
        for name, family in self._families.items():
            owners.setdefault(family.plugin_name, []).append(name)
        for plugin_name, _, hooks in self.plugins():
            stage_hooks = sorted(_STAGE_HOOKS.intersection(hooks))
            if plugin_name == _DEFAULTS or not stage_hooks:
                continue
            families = owners.get(plugin_name)
            whose = (
                f"for its families ({', '.join(families)})"
                if families
                else "for every family (it registers none)"
            )
            warnings.warn(
                f"{self._describe(plugin_name)} answers {', '.join(stage_hooks)} {whose} with "
                "@hookimpl stage hooks, the 0.x form; register each family with its stages "
                "instead (register(spec, stages=audiogate.package_stages(...)) or "
                f"audiogate.FamilyStages(...), docs/plugins/hooks.md); the hook form is "
                f"removed in {REMOVAL_VERSION}",
                AudioGateDeprecationWarning,
                stacklevel=4,
            )

    # --- families --------------------------------------------------------------------

    @property
    def families(self) -> Mapping[str, RegisteredFamily]:
        """Registered families by name, in registration order."""
        return dict(self._families)

    def family(self, name: str) -> RegisteredFamily:
        """The family called ``name``.

        :raises PolicyError: no such family is installed (the message lists them).
        """
        try:
            return self._families[name]
        except KeyError:
            raise PolicyError(
                f"unknown audio family {name!r}; installed families: {self._installed()}"
            ) from None

    def check_feature_backend(self, name: str, backend: str) -> None:
        """Refuse ``backend`` for family ``name`` unless the family computes it.

        :raises PolicyError: the family's stages compute only other backends (a family
            without MLX kernels would otherwise hand back NumPy arrays for ``"mlx"``).
        """
        backends = self.family(name).spec.feature_backends
        if backend not in backends:
            raise PolicyError(
                f"feature_backend {backend!r} is not available for the {name} family: it "
                f"computes {', '.join(repr(b) for b in backends)} (docs/mlx.md lists the "
                f"families with MLX kernels)"
            )

    def family_for_model_type(self, model_type: object) -> RegisteredFamily:
        """The family that handles a ``config.json`` ``model_type`` (as found there: a
        missing key is ``None``).

        :raises PolicyError: no installed family declares it, or it is not a string (the
            message lists the installed families).
        """
        name = self._by_model_type.get(model_type) if isinstance(model_type, str) else None
        if name is None:
            if model_type is None:
                what = "has no model_type (a string naming the architecture)"
            elif not isinstance(model_type, str):
                what = "model_type must be a string naming the architecture"
            else:
                what = f"model type {model_type!r} has no audio family"
            raise PolicyError(
                f"{what}; installed families: {self._installed()}",
                file="config.json",
                json_path="/model_type",
                value=model_type,
            )
        return self._families[name]

    def _installed(self) -> str:
        if not self._families:
            return f"none (is {DISABLE_AUTOLOAD_ENV} set?)"
        return ", ".join(
            f"{n} ({', '.join(f.spec.model_types)})" for n, f in self._families.items()
        )

    # --- policy ----------------------------------------------------------------------

    def parse_policy(self, family: str, configs: CheckpointConfigs) -> AudioPolicy:
        """The effective policy of ``configs`` under ``family``."""
        spec = self.family(family).spec
        policy = self._answer(
            "audiogate_parse_policy", AudioPolicy, family, family=spec, configs=configs
        )
        if policy.family != family:
            raise PluginError(
                f"audiogate_parse_policy for family {family!r} returned a policy of family "
                f"{policy.family!r}"
            )
        return policy

    def default_policy(self, family: str) -> AudioPolicy:
        """The family's pinned defaults, with every source marked pinned."""
        spec = self.family(family).spec
        return attrs.evolve(
            spec.defaults,
            sources={
                f.name: ValueSource("pinned", spec.revision)
                for f in attrs.fields(AudioPolicy)
                if f.name not in {"sources", "options"}
            }
            | {f"options.{k}": ValueSource("pinned", spec.revision) for k in spec.defaults.options},
        )

    def load_model_policy(self, model_dir: str | os.PathLike[str]) -> AudioPolicy:
        """Read a model directory's configs, pick its family and build its policy."""
        configs = read_checkpoint_configs(model_dir)
        family = self.family_for_model_type(configs.model.get("model_type"))
        return self.parse_policy(family.spec.name, configs)

    # --- stages ----------------------------------------------------------------------

    def plan_resample(
        self, policy: AudioPolicy, *, source_rate_hz: int, source_samples: int, clip_index: int
    ) -> ResamplePlan:
        """See :func:`audiogate.hookspecs.audiogate_plan_resample`."""
        plan = self._plan(
            "audiogate_plan_resample",
            ResamplePlan,
            policy.family,
            policy=policy,
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            clip_index=clip_index,
        )
        if not _counts_ok(plan.output_rate_hz, plan.output_samples, plan.working_bytes):
            _check_counts(
                "audiogate_plan_resample",
                policy.family,
                output_rate_hz=plan.output_rate_hz,
                output_samples=plan.output_samples,
                working_bytes=plan.working_bytes,
            )
        return plan

    def resample(
        self,
        policy: AudioPolicy,
        plan: ResamplePlan,
        samples: npt.NDArray[np.float32],
        *,
        clip_index: int,
        cancel: CancelToken,
    ) -> npt.NDArray[np.float32]:
        """See :func:`audiogate.hookspecs.audiogate_resample`."""
        out: npt.NDArray[np.float32] = self._answer(
            "audiogate_resample",
            np.ndarray,
            policy.family,
            policy=policy,
            plan=plan,
            samples=samples,
            clip_index=clip_index,
            cancel=cancel,
        )
        if out.shape != (plan.output_samples,) or out.dtype != np.float32:
            raise PluginError(
                f"family {policy.family!r} resampler returned {out.dtype}{list(out.shape)}, "
                f"planned float32[{plan.output_samples}]"
            )
        if out.flags.writeable:
            raise PluginError(
                f"family {policy.family!r} resampler returned a writable array; return "
                "audiogate.records.readonly(...)"
            )
        return out

    def plan_features(
        self, policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
    ) -> FeaturePlan:
        """See :func:`audiogate.hookspecs.audiogate_plan_features`."""
        plan = self._plan(
            "audiogate_plan_features",
            FeaturePlan,
            policy.family,
            policy=policy,
            rate_hz=rate_hz,
            samples=samples,
            clip_index=clip_index,
        )
        if not _counts_ok(plan.frames, plan.tokens, plan.feature_bytes, plan.working_bytes):
            _check_counts(
                "audiogate_plan_features",
                policy.family,
                frames=plan.frames,
                tokens=plan.tokens,
                feature_bytes=plan.feature_bytes,
                working_bytes=plan.working_bytes,
            )
        return plan

    def extract_features(
        self,
        policy: AudioPolicy,
        plan: FeaturePlan,
        waveform: npt.NDArray[np.float32],
        *,
        rate_hz: int,
        clip_index: int,
        cancel: CancelToken,
    ) -> ClipFeatures:
        """See :func:`audiogate.hookspecs.audiogate_extract_features`."""
        features = self._answer(
            "audiogate_extract_features",
            ClipFeatures,
            policy.family,
            policy=policy,
            plan=plan,
            waveform=waveform,
            rate_hz=rate_hz,
            clip_index=clip_index,
            cancel=cancel,
        )
        self.check_features(policy, plan, features, clip_index=clip_index)
        return features

    def check_features(
        self, policy: AudioPolicy, plan: FeaturePlan, features: Any, *, clip_index: int
    ) -> None:
        """What :meth:`extract_features` checks of a family's features (also of those a
        :meth:`open_feature_stream` stream made): a :class:`ClipFeatures` of the plan's
        shape, frames and tokens, read-only float32 (and a read-only bool mask).

        :raises PluginError: it is not.
        """
        features = self._require(
            features, ClipFeatures, "audiogate_extract_features", policy.family
        )
        _check_feature_arrays(features, policy.family, clip_index)
        if (
            tuple(features.features.shape) != tuple(plan.feature_shape)
            or features.tokens != plan.tokens
            or features.frames != plan.frames
        ):
            raise PluginError(
                f"family {policy.family!r} produced features {tuple(features.features.shape)} "
                f"with {features.frames} frames / {features.tokens} tokens for clip "
                f"{clip_index}, but planned {plan.feature_shape} with {plan.frames} frames / "
                f"{plan.tokens} tokens"
            )

    def collate_features(self, policy: AudioPolicy, clips: Sequence[ClipFeatures]) -> FeatureBatch:
        """See :func:`audiogate.hookspecs.audiogate_collate_features`."""
        batch = self._answer(
            "audiogate_collate_features",
            FeatureBatch,
            policy.family,
            policy=policy,
            clips=list(clips),
        )
        writable = [
            name
            for name, array in batch.inputs.items()
            if isinstance(array, np.ndarray) and array.flags.writeable
        ]
        if writable:
            raise PluginError(
                f"family {policy.family!r} collated writable arrays ({', '.join(writable)}); "
                "return audiogate.records.readonly(...)"
            )
        return batch

    def open_feature_stream(
        self,
        policy: AudioPolicy,
        *,
        source_rate_hz: int,
        resample: ResamplePlan,
        clip_index: int,
        cancel: CancelToken,
    ) -> FeatureStream | None:
        """See :func:`audiogate.hookspecs.audiogate_open_feature_stream` (``None``: the
        family does not stream this policy).

        :raises PluginError: the stage returned something that is not a
            :class:`~audiogate.streaming.stage.FeatureStream`.
        """
        stream = self._call(
            "audiogate_open_feature_stream",
            policy.family,
            policy=policy,
            source_rate_hz=source_rate_hz,
            resample=resample,
            clip_index=clip_index,
            cancel=cancel,
        )
        if stream is not None and not isinstance(stream, FeatureStream):
            raise PluginError(
                f"audiogate_open_feature_stream for family {policy.family!r} returned "
                f"{type(stream).__name__}, expected a FeatureStream (push, planned_nbytes, "
                "nbytes, finish, close) or None"
            )
        return stream

    def expand_prompt(
        self,
        policy: AudioPolicy,
        segments: Sequence[PromptSegment],
        clips: Sequence[ClipSlot],
        tokenizer: Any,
        *,
        chat: bool = False,
    ) -> ExpandedPrompt:
        """See :func:`audiogate.hookspecs.audiogate_expand_prompt` (``chat``: the segments
        come from chat messages; by default a plain prompt)."""
        # Media segments only ever come from chat messages: a hook may trust ``chat``.
        chat = chat or any(isinstance(segment, MediaSegment) for segment in segments)
        return self._answer(
            "audiogate_expand_prompt",
            ExpandedPrompt,
            policy.family,
            policy=policy,
            segments=list(segments),
            clips=list(clips),
            tokenizer=tokenizer,
            chat=chat,
        )

    # ---------------------------------------------------------------------------------

    def _call(self, hook: str, family: str, /, **kwargs: Any) -> Any:
        """Call ``hook`` for ``family`` (the module docstring's order): an audiogate error
        passes through, anything else a plugin raises becomes a :class:`PluginError`
        naming the hook and the family (on every path, with or without a worker)."""
        try:
            caller = self._hook_caller(hook, family)
            # (A family that answers by its stages has no hook functions: pluggy's call
            # of none is skipped, 3 µs warm and 10 to 20 µs cold per plan.)
            result = caller(**kwargs) if caller.get_hookimpls() else None
            if result is None and (stage := self._stages.get(family, {}).get(hook)):
                result = stage(**self._arguments(stage, kwargs))
            if result is None:
                result = self._hook_caller(hook, None)(**kwargs)
            return result
        except AudioGateError:
            raise
        except Exception as exc:
            raise PluginError(
                f"family {family!r} raised {type(exc).__name__} in {hook}: {exc}"
            ) from exc

    def _hook_caller(self, hook: str, family: str | None) -> Any:
        """``hook``'s implementations asked for ``family`` (``None``: the core defaults):
        pluggy's caller without the plugins of other families, and without the core's
        defaults, which come after the family's stages."""
        if family is not None and family not in self._families:
            family = ""  # one caller for every unregistered name: none of them owns a plugin
        key = (hook, family)
        caller = self._callers.get(key)
        if caller is None:
            owner = self._families[family].plugin_name if family else None
            claimed = {f.plugin_name for f in self._families.values()}
            remove = [
                plugin
                for name, plugin in self._pm.list_name_plugin()
                if (name != _DEFAULTS if family is None else name == _DEFAULTS)
                or (name in claimed and name != owner)
            ]
            caller = self._pm.subset_hook_caller(hook, remove_plugins=remove)
            self._callers[key] = caller
        return caller

    def _arguments(self, stage: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The hook's keyword arguments that ``stage`` names (all when it takes ``**``)."""
        if stage not in self._keywords:
            self._keywords[stage] = accepted_keywords(stage)
        names = self._keywords[stage]
        return dict(kwargs) if names is None else {k: v for k, v in kwargs.items() if k in names}

    def _plan(self, hook: str, kind: type[_T], family: str, /, **kwargs: Any) -> _T:
        """:meth:`_answer` of a plan hook (a stream's final plan, admission's checks), by
        the shortest path where the family answers it by a stage and no plugin function
        does: the stage called directly (pluggy's subset caller, the keyword filter and
        three calls skipped: half the plan's host overhead warm, more after a pause).
        The same result, the same errors (:meth:`_call`'s order and wrapping)."""
        impls = getattr(self._pm.hook, hook).get_hookimpls()  # (a copy of 1 or 2: cheap)
        found = self._direct.get((hook, family))
        if found is None or found[0] != impls:
            found = self._direct[(hook, family)] = (impls, self._direct_stage(hook, family))
        stage = found[1]
        if stage is None:
            return self._answer(hook, kind, family, **kwargs)
        try:
            result = stage(**kwargs)
            if result is None:
                result = self._hook_caller(hook, None)(**kwargs)
        except AudioGateError:
            raise
        except Exception as exc:
            raise PluginError(
                f"family {family!r} raised {type(exc).__name__} in {hook}: {exc}"
            ) from exc
        return self._require(result, kind, hook, family)

    def _direct_stage(self, hook: str, family: str) -> Callable[..., Any] | None:
        """``family``'s stage for ``hook`` where :meth:`_call` would call it first (no
        plugin function answers for the family), taking every keyword of the hook
        (a family package's stages filter their own); else ``None``."""
        if family not in self._families or self._hook_caller(hook, family).get_hookimpls():
            return None
        stage = self._stages.get(family, {}).get(hook)
        if stage is None or self._keywords.get(stage, ()) is not None:
            return None
        return stage

    def _answer(self, hook: str, kind: type[_T], family: str, /, **kwargs: Any) -> _T:
        """:meth:`_call` ``hook`` and require a ``kind`` back."""
        return self._require(self._call(hook, family, **kwargs), kind, hook, family)

    @staticmethod
    def _require(result: Any, kind: type[_T], hook: str, family: str) -> _T:
        if result is None:
            raise PluginError(
                f"no plugin answered {hook} for family {family!r}: none implements it, or the "
                "family's own implementation returned None for this input"
            )
        if not isinstance(result, kind):
            raise PluginError(
                f"{hook} for family {family!r} returned {type(result).__name__}, "
                f"expected {kind.__name__}"
            )
        return result

    def implementations(self, family: str) -> dict[str, Callable[..., Any]]:
        """What answers for ``family``, by hook name: its registered stages, and the hook
        functions of the plugin that registered it (the 0.x form, which win where both
        exist, as :meth:`_call` asks them first).

        For contract tests that call one family's implementation directly; servers use
        the façade.
        """
        plugin = self._pm.get_plugin(self.family(family).plugin_name)
        found: dict[str, Callable[..., Any]] = dict(self._stages.get(family, {}))
        for caller in self._pm.get_hookcallers(plugin) or []:
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin:
                    found[caller.name] = impl.function
        return found

    def hook_names(self) -> list[str]:
        """Names of every hook specification (for meta-tests and docs)."""
        return sorted(n for n in dir(self._pm.hook) if n.startswith("audiogate_"))

    def plugins(self) -> list[tuple[str, str, list[str]]]:
        """``(plugin name, distribution, hooks it implements)`` for every plugin."""
        out = []
        for name, plugin in self._pm.list_name_plugin():
            hooks = sorted(caller.name for caller in self._pm.get_hookcallers(plugin) or [])
            out.append((name, self._origin(name).distribution, hooks))
        return out


@functools.lru_cache(maxsize=64)
def _schema_text_problem(text: str) -> str | None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(json.loads(text))
    except SchemaError as exc:
        return exc.message
    return None


_KINDS: Final = frozenset({"integer", "string", "boolean"})


def _generated(spec: FamilySpec, text: str) -> bool:
    """Whether ``text`` is :func:`~audiogate.policy.build_schema` of the spec's keys (what
    every shipped family registers), whose keys give it only valid fragments."""
    keys_fit = all(
        key.kind in _KINDS
        and isinstance(key.description, str)
        and all(b is None or type(b) is int for b in (key.minimum, key.maximum))
        and (key.enum is None or isinstance(key.enum, tuple))
        for key in spec.keys
    )
    if not keys_fit or not isinstance(spec.schema.get("title"), str):
        return False
    try:
        built = build_schema(spec.name, spec.keys, title=spec.schema["title"])
        return json.dumps(built, sort_keys=True, default=dict) == text
    except (TypeError, ValueError):
        return False


def _schema_problem(spec: FamilySpec) -> str | None:
    """Whether the spec's schema is a valid JSON schema. A schema generated from the key
    table is one by construction; any other is checked against the metaschema, cached by
    its text (the check imports jsonschema and takes tens of milliseconds, and hosts are
    created often)."""
    try:
        text = json.dumps(spec.schema, sort_keys=True, default=dict)
    except (TypeError, ValueError) as exc:
        return f"not JSON: {exc}"
    if _generated(spec, text):
        return None
    return _schema_text_problem(text)


def _spec_problems(spec: FamilySpec) -> Iterator[str]:
    """Mistakes in a family's key table and schema that would otherwise surface as untyped
    errors when the first checkpoint is parsed."""
    problem = _schema_problem(spec)
    if problem is not None:
        yield f"schema is not a valid JSON schema: {problem}"
    fields = {f.name for f in attrs.fields(AudioPolicy)}
    for key in spec.keys:
        if not key.target.startswith("options.") and key.target not in fields:
            yield f"key {key.paths[0]!r} targets {key.target!r}, not an AudioPolicy field"


def _counts_ok(*counts: object) -> bool:
    """:func:`_check_counts`'s common case at a plan's cost: plain non-negative ints."""
    for value in counts:  # noqa: SIM110 (a loop: no generator object per plan)
        if type(value) is not int or value < 0:
            return False
    return True


def _check_counts(hook: str, family: str, **counts: Any) -> None:
    """Plans are reserved and budgeted from these numbers: non-negative integers only."""
    bad = {
        name: value
        for name, value in counts.items()
        if not isinstance(value, int) or isinstance(value, bool) or value < 0
    }
    if bad:
        raise PluginError(f"{hook} for family {family!r} planned invalid counts: {bad}")


def _check_feature_arrays(features: ClipFeatures, family: str, clip_index: int) -> None:
    """numpy features must be read-only float32, a mask read-only bool per frame (the mlx
    backend's ``mx.array`` has no such flags and passes)."""
    where = f"family {family!r} clip {clip_index + 1}"
    array, mask = features.features, features.mask
    if isinstance(array, np.ndarray) and (array.dtype != np.float32 or array.flags.writeable):
        raise PluginError(
            f"{where}: features must be read-only float32, got "
            f"{'writable ' if array.flags.writeable else ''}{array.dtype}"
        )
    if isinstance(mask, np.ndarray) and (mask.dtype != np.bool_ or mask.flags.writeable):
        raise PluginError(
            f"{where}: the frame mask must be read-only bool, got "
            f"{'writable ' if mask.flags.writeable else ''}{mask.dtype}"
        )


def _load_entry_points(pm: pluggy.PluginManager) -> dict[str, _Origin]:
    origins: dict[str, _Origin] = {}
    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else "<unknown distribution>"
        version = ep.dist.version if ep.dist is not None else None
        try:
            plugin = ep.load()
        except (Exception, SystemExit) as exc:  # a plugin that exits at import, too
            raise PluginError(
                f"failed to load audiogate family plugin: entry point {ep.name!r} = "
                f"{ep.value!r} of distribution {dist!r} (group {ENTRY_POINT_GROUP}): "
                f"{type(exc).__name__}: {exc}; set {DISABLE_AUTOLOAD_ENV}=1 to start without "
                f"installed plugins"
            ) from exc
        if pm.get_plugin(ep.name) is not None:
            raise PluginError(
                f"entry point {ep.name!r} of distribution {dist!r} uses a plugin name that "
                f"distribution {origins[ep.name].distribution!r} already uses"
            )
        if plugin is None:  # pluggy would take None as "block this name", silently
            raise PluginError(
                f"entry point {ep.name!r} = {ep.value!r} of distribution {dist!r} loads None, "
                "not an audiogate plugin"
            )
        if pm.is_registered(plugin):
            twin = pm.get_name(plugin)
            raise PluginError(
                f"entry points {twin!r} and {ep.name!r} (distribution {dist!r}) load the same "
                f"object {ep.value!r}; keep one"
            )
        try:
            pm.register(plugin, name=ep.name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(
                f"entry point {ep.name!r} of distribution {dist!r} is not a valid audiogate "
                f"plugin: {exc}"
            ) from exc
        if not pm.get_hookcallers(plugin):
            raise PluginError(
                f"entry point {ep.name!r} = {ep.value!r} of distribution {dist!r} implements "
                "no audiogate hook (does it name the package instead of its plugin module?)"
            )
        origins[ep.name] = _Origin(dist, version, ep.name)
    return origins


def create_host(
    *, plugins: Iterable[object] = (), load_entry_points: bool | None = None
) -> FamilyHost:
    """Create a plugin host.

    :param plugins: plugin objects (modules or instances) to register directly.
    :param load_entry_points: load the ``audiogate.families`` entry points; by default
        yes unless ``AUDIOGATE_DISABLE_PLUGIN_AUTOLOAD=1``.
    :raises PluginError: a plugin failed to load or registered something unusable.
    """
    from audiogate import defaults

    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(defaults, name=_DEFAULTS)
    origins: dict[str, _Origin] = {}
    if load_entry_points is None:
        load_entry_points = not _autoload_disabled()
    if load_entry_points:
        origins.update(_load_entry_points(pm))
    for plugin in plugins:
        name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}@{id(plugin):x}"
        try:
            pm.register(plugin, name=name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(f"plugin {name!r} cannot be registered: {exc}") from exc
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) or repr(exc.plugin)
        where = origins.get(name)
        source = f" of distribution {where.distribution!r}" if where else ""
        raise PluginError(f"plugin {name!r}{source} implements an unknown hook: {exc}") from exc
    return FamilyHost(pm, origins)
