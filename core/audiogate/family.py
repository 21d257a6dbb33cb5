"""What a family plugin hands to ``register``: its :class:`FamilySpec` and its
:class:`FamilyStages`.

A plugin registers each family with the functions that implement its stages::

    @hookimpl
    def audiogate_register_families(register):
        register(spec(), stages=package_stages("audiogate_myfamily"))

The host calls a family's stages only for a policy of that family (``policy.family``;
``family.name`` for ``parse_policy``), so a stage never checks whose policy it got.
Stage hooks implemented with ``@hookimpl`` that return ``None`` for another family's
policy (the 0.x form) still work, with a deprecation warning (``docs/plugins/hooks.md``).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from audiogate.policy.keys import PolicyKey
from audiogate.policy.model import AudioPolicy, frozen_mapping, str_tuple

__all__ = [
    "FAMILY_NAME_RE",
    "OPTIONAL_STAGE_MODULES",
    "STAGE_MODULES",
    "FamilySpec",
    "FamilyStages",
    "RegisteredFamily",
    "accepted_keywords",
    "package_stages",
]

#: Family names are short identifiers: they appear in metric labels and CLI arguments.
FAMILY_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,31}$")


def _key_tuple(value: Iterable[PolicyKey]) -> tuple[PolicyKey, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class FamilySpec:
    """Who a family is and what it pins.

    :param name: family name (``"gemma3n"``), also the metrics label.
    :param model_types: ``config.json`` ``model_type`` values it handles.
    :param defaults: the pinned policy used when a checkpoint declares nothing.
    :param keys: the checkpoint config keys it recognizes (drives lookup and schema).
    :param schema: the JSON schema it ships (generated from ``keys``, committed).
    :param revision: the pinned checkpoint or reference revision.
    :param version: the plugin's version.
    :param summary: one line for ``audiogate families``.
    :param source_reference: the text form of a reference to a stored source in this
        family's prompts (group 1: the 64-hex digest), or ``None`` where it has none;
        with a source store, the gate resolves each through the store (docs/sources.md).
    :param feature_backends: the ``feature_backend`` values its stages compute
        (``"numpy"``, and ``"mlx"`` where it ships MLX kernels, docs/mlx.md); a gate
        asked for another refuses it rather than return other arrays.
    """

    name: str
    model_types: tuple[str, ...] = attrs.field(converter=str_tuple)
    defaults: AudioPolicy
    keys: tuple[PolicyKey, ...] = attrs.field(converter=_key_tuple)
    schema: Mapping[str, Any] = attrs.field(converter=frozen_mapping)
    revision: str
    version: str
    summary: str = ""
    source_reference: re.Pattern[str] | None = None
    feature_backends: tuple[str, ...] = attrs.field(default=("numpy",), converter=str_tuple)


@attrs.frozen(kw_only=True)
class RegisteredFamily:
    """A family as the host knows it: the spec plus where it came from.

    :param distribution: the installed distribution that provided it (``"audiogate-phi4mm"``),
        or ``"<direct>"`` for a plugin object registered without installation.
    :param plugin_name: the pluggy plugin name (the entry point name).
    """

    spec: FamilySpec
    distribution: str
    distribution_version: str | None
    plugin_name: str


#: A stage: called with keyword arguments, those of its hook that it names (all of them
#: when it takes ``**kwargs``); ``None`` falls through to the core default, if any.
Stage = Callable[..., Any]


@attrs.frozen(kw_only=True)
class FamilyStages:
    """The functions that implement one family's stages, each optional.

    Each is called as the hook of the same name (``audiogate_<stage>`` in
    :mod:`audiogate.hookspecs`) is, with keyword arguments: those of the hook that the
    function's signature names (all of them when it takes ``**kwargs``), so
    ``def plan_resample(policy, *, source_rate_hz, source_samples, clip_index)`` fits.
    Only ``plan_features``, ``extract_features``, ``collate_features`` and
    ``expand_prompt`` have no core default; a stage left out, or one that returns
    ``None``, falls through to the core default (``parse_policy``, ``plan_resample`` and
    ``resample`` have one: the key table and the identity / soxr HQ).
    """

    parse_policy: Stage | None = None
    plan_resample: Stage | None = None
    resample: Stage | None = None
    plan_features: Stage | None = None
    extract_features: Stage | None = None
    collate_features: Stage | None = None
    expand_prompt: Stage | None = None
    open_feature_stream: Stage | None = None

    def implemented(self) -> dict[str, Stage]:
        """The stages given, by hook name (``audiogate_plan_features``...)."""
        return {
            f"audiogate_{field.name}": value
            for field in attrs.fields(FamilyStages)
            if (value := getattr(self, field.name)) is not None
        }


#: Where :func:`package_stages` finds each stage: ``(module, function)`` in the package,
#: the file map every shipped family follows (``tests/meta/test_family_layout.py``).
STAGE_MODULES: Final = {
    "plan_resample": ("resample", "plan_resample"),
    "resample": ("resample", "resample"),
    "plan_features": ("features", "plan_features"),
    "extract_features": ("features", "extract_features"),
    "collate_features": ("collate", "collate_features"),
    "expand_prompt": ("prompt", "expand_prompt"),
    "open_feature_stream": ("streaming", "open_feature_stream"),
}

#: Modules of :data:`STAGE_MODULES` a package may leave out: their stages then answer
#: ``None`` (a family without ``streaming`` accumulates its streamed clips).
OPTIONAL_STAGE_MODULES: Final = frozenset({"streaming"})


def _absent(**_: Any) -> None:
    """The stage of an optional module the package does not have."""
    return None


class _Package:
    """A family package's stage modules, each imported on the first call of one of its
    stages; then every stage of that module is resolved at once (so a request's first
    call of a sibling stage allocates nothing it did not plan)."""

    def __init__(self, package: str) -> None:
        self.package = package
        self._targets: dict[str, tuple[Callable[..., Any], frozenset[str] | None]] = {}

    def target(self, stage: str) -> tuple[Callable[..., Any], frozenset[str] | None]:
        found = self._targets.get(stage)
        if found is None:
            module_name = STAGE_MODULES[stage][0]
            qualified = f"{self.package}.{module_name}"
            try:
                module = importlib.import_module(qualified)
            except ModuleNotFoundError as exc:
                # Only the module itself missing, not something it imports.
                if module_name not in OPTIONAL_STAGE_MODULES or exc.name != qualified:
                    raise
                module = None
            for sibling, (name, function_name) in STAGE_MODULES.items():
                if name == module_name:
                    function = _absent if module is None else getattr(module, function_name)
                    self._targets[sibling] = (function, accepted_keywords(function))
            found = self._targets[stage]
        return found


class _Deferred:
    """One stage of a :class:`_Package`, imported on the first call (so registering a
    family imports none of its numerics), then called with the keyword arguments it names."""

    def __init__(self, package: _Package, stage: str) -> None:
        self.__qualname__ = self.__name__ = stage
        self._package = package
        self._stage = stage

    def __call__(self, **kwargs: Any) -> Any:
        function, names = self._package.target(self._stage)
        if names is not None:
            kwargs = {name: value for name, value in kwargs.items() if name in names}
        return function(**kwargs)

    def __repr__(self) -> str:
        module, function = STAGE_MODULES[self._stage]
        return f"<stage {self._package.package}.{module}.{function}>"


def accepted_keywords(function: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments ``function`` names, or ``None`` when it takes ``**kwargs`` (or
    has no signature to read, as some builtins: then it is given every argument)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


def package_stages(package: str, **overrides: Stage | None) -> FamilyStages:
    """The stages of a family package laid out as the shipped ones (:data:`STAGE_MODULES`:
    ``resample.plan_resample``, ``features.extract_features``, ``prompt.expand_prompt``...),
    each imported on its first call. A module of :data:`OPTIONAL_STAGE_MODULES`
    (``streaming``) may be absent: its stages then answer ``None``.

    :param package: the import package (``"audiogate_qwen2audio"``).
    :param overrides: stages to take instead, or ``None`` to leave one to the core
        default (``parse_policy=...``, which the file map does not name).
    """
    modules = _Package(package)
    stages: dict[str, Stage | None] = {stage: _Deferred(modules, stage) for stage in STAGE_MODULES}
    stages.update(overrides)
    return FamilyStages(**stages)
