"""Immutable records passed between stages and across the plugin hooks.

Data flows one way: acquire → admit → decode → resample → features → expand. Each stage
takes these frozen values (and read-only arrays) and returns new ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.policy.model import frozen_mapping

__all__ = [
    "ClipFeatures",
    "ClipSlot",
    "ExpandedPrompt",
    "FeatureBatch",
    "FeaturePlan",
    "MediaSegment",
    "PromptSegment",
    "ResamplePlan",
    "TextSegment",
    "TokenizerLike",
    "readonly",
]

FloatArray = npt.NDArray[np.float32]


def _int_tuple(value: Iterable[int]) -> tuple[int, ...]:
    """Converter: a list where a tuple is meant compares equal to the tuple afterwards."""
    return tuple(value)


def readonly(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Mark ``array`` read-only in place and return it (stages never share writable arrays)."""
    array.flags.writeable = False
    return array


# --- resampling ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResamplePlan:
    """What a family's resampler will produce for one clip, known before any allocation.

    :param source_rate_hz: the decoded clip's rate.
    :param source_samples: mono sample frames in.
    :param output_rate_hz: the *effective* rate the frontend will treat the output as
        (Phi-4 MM labels 22.05 kHz output as 16 kHz, on purpose).
    :param output_samples: normalized samples out.
    :param working_bytes: peak host bytes the resampler needs besides its input and
        output arrays (filters, scratch).
    :param algorithm: ``"identity"``, ``"linear"``, ``"scipy_polyphase_integer"``, ``"soxr_hq"``...
    :param detail: algorithm parameters worth reporting (``{"down": 3}``).
    """

    source_rate_hz: int
    source_samples: int
    output_rate_hz: int
    output_samples: int
    working_bytes: int = 0
    algorithm: str
    detail: Mapping[str, Any] = attrs.field(factory=frozen_mapping, converter=frozen_mapping)


# --- features ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class FeaturePlan:
    """Frames, tokens and sizes of one clip's features, from the frontend's own arithmetic.

    The same function shapes the features and counts the tokens: the extractor must
    produce exactly ``feature_shape`` and the prompt exactly ``tokens`` positions.

    :param frames: valid feature frames.
    :param tokens: prompt positions the clip occupies.
    :param feature_shape: shape of the per-clip feature array (``(frames, 80)``...).
    :param feature_bytes: bytes of the per-clip result (features plus mask).
    :param working_bytes: peak scratch bytes during extraction.
    :param detail: extra family accounting (Gemma 3n's ``encoder_tokens``).
    """

    frames: int
    tokens: int
    feature_shape: tuple[int, ...] = attrs.field(converter=_int_tuple)
    feature_bytes: int
    working_bytes: int = 0
    detail: Mapping[str, Any] = attrs.field(factory=frozen_mapping, converter=frozen_mapping)


@attrs.frozen(kw_only=True)
class ClipFeatures:
    """One clip's features.

    :param features: read-only float32 array of the plan's ``feature_shape``.
    :param mask: read-only bool frame mask (True = valid frame), or ``None``.
    :param frames: valid frames (equals the plan's).
    :param tokens: prompt positions (equals the plan's).
    """

    features: npt.NDArray[Any]
    mask: npt.NDArray[np.bool_] | None = None
    frames: int
    tokens: int


@attrs.frozen(kw_only=True)
class FeatureBatch:
    """Model-ready inputs for all clips of a request, named as the model's forward expects.

    :param inputs: e.g. ``{"input_features": ..., "input_features_mask": ...}``; read-only
        numpy arrays.
    :param tokens: per-clip prompt positions, in clip order.
    """

    inputs: Mapping[str, npt.NDArray[Any]] = attrs.field(converter=frozen_mapping)
    tokens: tuple[int, ...] = attrs.field(converter=_int_tuple)


# --- prompts -------------------------------------------------------------------------


@attrs.frozen
class TextSegment:
    """Literal prompt text between media positions."""

    text: str


@attrs.frozen
class MediaSegment:
    """The position of one media item; ``ordinal`` is one-based and per kind."""

    kind: Literal["audio", "image"]
    ordinal: int


PromptSegment = TextSegment | MediaSegment


@attrs.frozen(kw_only=True)
class ClipSlot:
    """What expansion needs to know about one clip.

    :param ordinal: one-based placeholder ordinal.
    :param tokens: prompt positions (from the feature plan).
    :param frames: feature frames.
    :param sha256: lowercase hex digest of the clip's encoded source bytes.
    """

    ordinal: int
    tokens: int
    frames: int
    sha256: str


@attrs.frozen(kw_only=True)
class ExpandedPrompt:
    """A family-expanded prompt.

    :param input_ids: token ids with every clip's placeholders expanded.
    :param text: the expanded text where the family has a text form (tokenizing it gives
        ``input_ids``), else ``None``.
    :param audio_spans: per clip, in clip order, ``(start, stop)`` of its audio token run
        in ``input_ids`` (the audio ids only, without start/end delimiters).
    :param audio_token_id: the id repeated inside each span.
    :param model_inputs: arrays the model's forward needs that follow from the prompt
        rather than from the audio, by name (empty for most families). Phi-4 MM's
        remote-code model, for one, selects its adapters from an ``input_mode`` that
        says whether the prompt holds images, audio, both or neither. They join the
        collated audio inputs in the request's ``model_inputs``; a name both define
        is a plugin error. Read-only numpy arrays, like :class:`FeatureBatch` inputs.
    """

    input_ids: tuple[int, ...]
    text: str | None
    audio_spans: tuple[tuple[int, int], ...]
    audio_token_id: int
    model_inputs: Mapping[str, npt.NDArray[Any]] = attrs.field(
        factory=frozen_mapping, converter=frozen_mapping
    )


@runtime_checkable
class TokenizerLike(Protocol):
    """The part of a Hugging Face tokenizer that expansion uses."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]:
        """Token ids of ``text``."""
        ...

    def convert_tokens_to_ids(self, tokens: str) -> int | list[int]:
        """The id of one token string."""
        ...


def check_span_count(spans: Sequence[tuple[int, int]], tokens: Sequence[int]) -> bool:
    """Whether each span's length equals the clip's planned token count."""
    return len(spans) == len(tokens) and all(
        b - a == t for (a, b), t in zip(spans, tokens, strict=True)
    )
