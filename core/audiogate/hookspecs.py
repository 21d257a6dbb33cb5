"""Hook specifications: the whole plugin surface, in pipeline order.

Every hook is named ``audiogate_<verb>_<object>`` and documented with one template:
summary; whether the first non-``None`` result wins; ``:param:`` per argument;
``:returns:``. Every hook but registration is a *stage*: a family gives its stages to
``register`` (:class:`~audiogate.family.FamilyStages`, called like these hooks), and the
host calls them only for a policy of that family (``policy.family``; ``family.name`` for
``parse_policy``), so a stage needs no check of whose policy it got. Implementing a
stage as a ``@hookimpl`` hook that returns ``None`` for other families (the 0.x form)
still works, deprecated (``docs/plugins/hooks.md``). Budgets, admission, decoding and
acquisition are core code, not hooks.

Plugins import the marker as ``from audiogate import hookimpl``. Hooks are called only
through :class:`audiogate.host.FamilyHost`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import pluggy

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from audiogate.cancel import CancelToken
    from audiogate.family import FamilySpec
    from audiogate.policy import AudioPolicy, CheckpointConfigs
    from audiogate.records import (
        ClipFeatures,
        ClipSlot,
        ExpandedPrompt,
        FeatureBatch,
        FeaturePlan,
        PromptSegment,
        ResamplePlan,
    )
    from audiogate.streaming.stage import FeatureStream

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

#: The pluggy project name and the prefix of every hook.
PROJECT_NAME: Final = "audiogate"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorate family hook implementations with this marker.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --- registration --------------------------------------------------------------------


@hookspec
def audiogate_register_families(register: Callable[[FamilySpec], None]) -> None:
    """Register the model families this plugin provides.

    Every implementation is called once, when the host loads; results are ignored.

    :param register: call it once per family with a :class:`~audiogate.family.FamilySpec`.
        It refuses a family name or model type that is already taken, naming both
        distributions.
    :returns: nothing.
    """


# --- policy --------------------------------------------------------------------------


@hookspec(firstresult=True)
def audiogate_parse_policy(family: FamilySpec, configs: CheckpointConfigs) -> AudioPolicy | None:
    """Build the effective audio policy of a checkpoint from its config files.

    The first non-``None`` result wins; the core default (``trylast``) applies the
    family's declared keys to its pinned defaults (:func:`audiogate.policy.apply_keys`).

    :param family: the registered family the checkpoint's ``model_type`` selected.
    :param configs: the parsed ``config.json`` and processor file.
    :returns: the policy, or ``None`` to leave it to the core default.
    :raises PolicyError: a recognized key is invalid; model start-up must fail.
    """


# --- resampling ----------------------------------------------------------------------


@hookspec(firstresult=True)
def audiogate_plan_resample(
    policy: AudioPolicy, source_rate_hz: int, source_samples: int, clip_index: int
) -> ResamplePlan | None:
    """Plan one clip's resampling before anything is allocated.

    The first non-``None`` result wins; the core default (``trylast``) plans the
    ``"soxr_hq"`` algorithm and the identity.

    :param policy: the request's policy.
    :param source_rate_hz: the decoded clip's sample rate.
    :param source_samples: the decoded clip's mono sample frames.
    :param clip_index: zero-based clip index, for error messages.
    :returns: output length, effective rate and working bytes, or ``None`` to leave the
        clip to the core default.
    :raises LimitError: the work would exceed the family's resampling bounds.
    :raises DecodeError: the rate is outside what the family's resampler accepts.
    """


@hookspec(firstresult=True)
def audiogate_resample(
    policy: AudioPolicy,
    plan: ResamplePlan,
    samples: npt.NDArray[np.float32],
    clip_index: int,
    cancel: CancelToken,
) -> npt.NDArray[np.float32] | None:
    """Resample one clip as planned.

    The first non-``None`` result wins; the core default (``trylast``) runs ``"soxr_hq"``
    and the identity.

    :param policy: the request's policy.
    :param plan: the plan from :func:`audiogate_plan_resample`.
    :param samples: read-only mono float32 ``[shape=(plan.source_samples,)]``.
    :param clip_index: zero-based clip index.
    :param cancel: polled at the ``Resample`` checkpoint inside the loop.
    :returns: read-only float32 ``[shape=(plan.output_samples,)]``, or ``None`` for a
        plan of the core default's, which runs it.
    """


# --- features ------------------------------------------------------------------------


@hookspec(firstresult=True)
def audiogate_plan_features(
    policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
) -> FeaturePlan | None:
    """Count one clip's feature frames and prompt tokens, before extraction.

    The first non-``None`` result wins; there is no core default. The same arithmetic
    must shape the features that :func:`audiogate_extract_features` returns.

    :param policy: the request's policy.
    :param rate_hz: the effective rate of the normalized waveform.
    :param samples: normalized samples.
    :param clip_index: zero-based clip index.
    :returns: the plan.
    :raises FeatureError: the clip cannot produce features (too short, ...).
    """


@hookspec(firstresult=True)
def audiogate_extract_features(
    policy: AudioPolicy,
    plan: FeaturePlan,
    waveform: npt.NDArray[np.float32],
    rate_hz: int,
    clip_index: int,
    cancel: CancelToken,
) -> ClipFeatures | None:
    """Compute one clip's features exactly as planned.

    The first non-``None`` result wins; there is no core default.

    :param policy: the request's policy.
    :param plan: the plan from :func:`audiogate_plan_features`.
    :param waveform: read-only mono float32 ``[shape=(samples,)]`` at ``rate_hz``.
    :param rate_hz: the effective rate.
    :param clip_index: zero-based clip index.
    :param cancel: polled at the ``Feature`` checkpoint every few hundred frames.
    :returns: features of ``plan.feature_shape`` and ``plan.frames`` / ``plan.tokens``.
    """


@hookspec(firstresult=True)
def audiogate_collate_features(
    policy: AudioPolicy, clips: Sequence[ClipFeatures]
) -> FeatureBatch | None:
    """Assemble a request's clips into the model's batched inputs.

    The first non-``None`` result wins; there is no core default.

    :param policy: the request's policy.
    :param clips: per-clip features in clip order.
    :returns: named model inputs (padded, with masks) and per-clip tokens.
    """


# --- streaming ----------------------------------------------------------------------


@hookspec(firstresult=True)
def audiogate_open_feature_stream(
    policy: AudioPolicy,
    source_rate_hz: int,
    resample: ResamplePlan,
    clip_index: int,
    cancel: CancelToken,
) -> FeatureStream | None:
    """Open one clip's feature stream: its features computed as its samples arrive.

    The first non-``None`` result wins; there is no core default, and ``None`` (no
    family answers, or the family does not stream this policy: another feature backend,
    a resampler it cannot run as a stream) leaves the clip to the accumulating frontend,
    which runs :func:`audiogate_resample` and :func:`audiogate_extract_features` on the
    whole clip at its end. Optional: a package laid out for
    :func:`~audiogate.family.package_stages` declares it as
    ``streaming.open_feature_stream``; one without that module does not stream. The core
    keeps admission, the byte reservation and the life cycle (``docs/streaming.md``).

    :param policy: the request's policy.
    :param source_rate_hz: the stream's source rate (mono float32 samples are pushed).
    :param resample: the family's resample plan for that rate, probed at one second
        (the whole clip's plan must have the same algorithm and rates).
    :param clip_index: zero-based clip index, for error messages.
    :param cancel: polled inside long pushes and at ``finish``.
    :returns: a :class:`~audiogate.streaming.stage.FeatureStream` whose ``finish``
        equals ``resample`` then ``extract_features`` of the whole clip, or ``None``.
    """


# --- prompt --------------------------------------------------------------------------


@hookspec(firstresult=True)
def audiogate_expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    chat: bool,
) -> ExpandedPrompt | None:
    """Turn a prompt with media positions into the family's placeholders and token ids.

    The first non-``None`` result wins; there is no core default. ``segments`` comes
    either from a rendered chat template (each media part a
    :class:`~audiogate.records.MediaSegment`, in order) or from a plain prompt (text
    only; the family applies its own placeholder rules, and inserts them where absent).
    Every clip's run must have exactly ``clip.tokens`` audio token ids (its span covers
    those ids only, not the family's start/end delimiters). A chat request
    without audio parts comes here too, as its rendered text with no ``clips``: the
    family keeps the text and refuses any audio placeholder, reference or reserved
    literal in it (image positions still arrive as media segments). Inputs the model
    needs that follow from the prompt rather than the audio (Phi-4 MM remote code's
    ``input_mode``) go in :attr:`~audiogate.records.ExpandedPrompt.model_inputs`; most
    families leave it empty.

    :param policy: the request's policy (token ids in ``policy.options``).
    :param segments: text and media positions in prompt order.
    :param clips: per clip, in order: ordinal, tokens, frames, source digest.
    :param tokenizer: a :class:`~audiogate.records.TokenizerLike` for the text, or
        ``None`` (a gate without one): then return the text with empty ``input_ids``
        and ``audio_spans``.
    :param chat: the segments come from chat messages: every media position is a
        :class:`~audiogate.records.MediaSegment`, so a placeholder typed in their text is
        the user's, to refuse, also in a request with no media at all. Always true when
        ``segments`` hold a media segment. ``False`` for a plain prompt, whose text
        carries the family's own placeholders.
    :returns: the expanded prompt.
    :raises PlaceholderError: missing, duplicated, reordered, reserved or extra placeholders.
    """
