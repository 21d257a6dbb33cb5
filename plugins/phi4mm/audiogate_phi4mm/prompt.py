"""Phi-4 MM placeholder rules and expansion, for both checkpoint variants.

Remote code (``processing_phi4mm.py``; mlxcel's ``prepare_phi4mm_prompt_tokens``,
``src/multimodal/phi4mm_prompt.rs``): the user writes ``<|audio_1|>`` … ``<|audio_n|>``,
exactly once each and in order (synthesised after ``<|user|>`` when the prompt has none);
each becomes the clip's ``ceil(T/8)`` copies of ``<|endoftext11|>`` (id 200011). Images
are ``<|image_k|>``, kept in order, each one ``<|endoftext10|>`` (id 200010; images are
not expanded here). The expansion spellings are reserved: user text containing them is
refused, since the processor would count them as media.

Native (transformers' ``Phi4MultimodalProcessor``): the placeholder is the unnumbered
``<|audio|>`` (``replace_audio_token`` repeats it ``audio_embed_sizes[i]`` times; its
tokenizer maps it to 200011) and ``<|image|>`` for images.

The remote-code model also takes an ``input_mode`` (``InputMode`` of
``modeling_phi4mm.py``: 0 language, 1 vision, 2 speech, 3 vision and speech) that selects
its LoRA adapters and audio projection, and raises on ``None``. Its processor derives it
from the media it was given; here it follows from the expanded prompt (image
placeholders, clips) and is returned in :attr:`ExpandedPrompt.model_inputs`, also for a
prompt without audio. The native model has no such input.

Every mismatch fails closed with :class:`~audiogate.errors.PlaceholderError`: missing,
duplicated, reordered, skipped, extra, malformed or reserved placeholders, and a
placeholder count that differs from the clip count are never repaired.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.errors import PlaceholderError
from audiogate.policy import AudioPolicy
from audiogate.records import (
    ClipSlot,
    ExpandedPrompt,
    MediaSegment,
    PromptSegment,
    TextSegment,
    readonly,
)

__all__ = [
    "NATIVE_AUDIO_PLACEHOLDER",
    "NATIVE_IMAGE_PLACEHOLDER",
    "REMOTE_AUDIO_TOKEN",
    "REMOTE_IMAGE_TOKEN",
    "REMOTE_INPUT_MODES",
    "USER_TAG",
    "expand_prompt",
]

#: ``_AUDIO_SPECIAL_TOKEN`` / ``_IMAGE_SPECIAL_TOKEN`` of ``processing_phi4mm.py``.
REMOTE_AUDIO_TOKEN: Final = "<|endoftext11|>"
REMOTE_IMAGE_TOKEN: Final = "<|endoftext10|>"
#: ``tokenizer.audio_token`` / ``image_token`` of the native checkpoint.
NATIVE_AUDIO_PLACEHOLDER: Final = "<|audio|>"
NATIVE_IMAGE_PLACEHOLDER: Final = "<|image|>"
USER_TAG: Final = "<|user|>"
#: ``InputMode`` of the remote ``modeling_phi4mm.py``, by (images present, audio present).
REMOTE_INPUT_MODES: Final = {(False, False): 0, (True, False): 1, (False, True): 2, (True, True): 3}
#: Expansion spellings a user may not type (either variant).
RESERVED_LITERALS: Final = (REMOTE_AUDIO_TOKEN, REMOTE_IMAGE_TOKEN)

Kind = Literal["audio", "image"]
_OPENERS: Final[dict[Kind, str]] = {"audio": "<|audio", "image": "<|image"}
_NUMBERED: Final = re.compile(r"<\|(audio|image)_([1-9][0-9]{0,5})\|>")


@attrs.frozen
class _Slot:
    """A placeholder found in the prompt: its kind, ordinal (0 when unnumbered), span."""

    kind: Kind
    ordinal: int
    start: int
    stop: int


@attrs.frozen(kw_only=True)
class _Spelling:
    """How a variant writes placeholders and expands them."""

    numbered: bool
    audio_text: str  # one expanded audio position, as text
    image_text: str  # one image position, as text

    def placeholder(self, kind: Kind, ordinal: int) -> str:
        if self.numbered:
            return f"<|{kind}_{ordinal}|>"
        return NATIVE_AUDIO_PLACEHOLDER if kind == "audio" else NATIVE_IMAGE_PLACEHOLDER

    def expected(self, kind: Kind) -> str:
        return f"<|{kind}_N|>" if self.numbered else self.placeholder(kind, 0)


_REMOTE: Final = _Spelling(
    numbered=True, audio_text=REMOTE_AUDIO_TOKEN, image_text=REMOTE_IMAGE_TOKEN
)
_NATIVE: Final = _Spelling(
    numbered=False, audio_text=NATIVE_AUDIO_PLACEHOLDER, image_text=NATIVE_IMAGE_PLACEHOLDER
)


def _spelling(policy: AudioPolicy) -> _Spelling:
    return _NATIVE if policy.variant == "native" else _REMOTE


def _check_clips(clips: Sequence[ClipSlot]) -> None:
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"clip {index + 1} carries ordinal {clip.ordinal}, expected {index + 1}"
            )
        if clip.tokens < 1:
            raise PlaceholderError(
                f"clip {index + 1} has {clip.tokens} audio tokens; at least 1 is needed"
            )


def _check_reserved(segments: Sequence[PromptSegment], spelling: _Spelling) -> None:
    for segment in segments:
        if isinstance(segment, TextSegment):
            for literal in RESERVED_LITERALS:
                if literal in segment.text:
                    raise PlaceholderError(
                        f"the prompt contains the reserved Phi-4 MM token literal {literal!r}; "
                        f"write {spelling.expected('audio')} / {spelling.expected('image')} "
                        "placeholders instead"
                    )


def _render(segments: Sequence[PromptSegment], spelling: _Spelling) -> str:
    """One text with each media position written as the variant's placeholder.

    Media positions must run 1, 2, 3… per kind: the unnumbered native placeholder would
    otherwise hide a reordering.
    """
    parts: list[str] = []
    following: dict[str, int] = {kind: 1 for kind in _OPENERS}
    for segment in segments:
        if isinstance(segment, TextSegment):
            parts.append(segment.text)
        elif isinstance(segment, MediaSegment) and segment.kind in _OPENERS:
            expected = following[segment.kind]
            if segment.ordinal != expected:
                raise PlaceholderError(
                    f"{segment.kind} position {segment.ordinal} is out of sequence; "
                    f"expected {expected}"
                )
            following[segment.kind] = expected + 1
            parts.append(spelling.placeholder(segment.kind, segment.ordinal))
        else:
            raise PlaceholderError(f"unsupported prompt segment {segment!r}")
    return "".join(parts)


def _scan(text: str, spelling: _Spelling) -> list[_Slot]:
    """Every ``<|audio…`` / ``<|image…`` opener, each of which must be a placeholder."""
    slots: list[_Slot] = []
    for kind, opener in _OPENERS.items():
        start = text.find(opener)
        while start != -1:
            if spelling.numbered:
                match = _NUMBERED.match(text, start)
                if match is None or match.group(1) != kind:
                    raise PlaceholderError(
                        f"malformed {kind} placeholder at offset {start} "
                        f"({text[start : start + 16]!r}); expected {spelling.expected(kind)} "
                        "with N counting from 1"
                    )
                slots.append(_Slot(kind, int(match.group(2)), start, match.end()))
            else:
                literal = spelling.placeholder(kind, 0)
                if not text.startswith(literal, start):
                    raise PlaceholderError(
                        f"malformed {kind} placeholder at offset {start} "
                        f"({text[start : start + 16]!r}); the transformers-native Phi-4 MM "
                        f"processor expects {literal}"
                    )
                slots.append(_Slot(kind, 0, start, start + len(literal)))
            start = text.find(opener, start + 1)
    return sorted(slots, key=lambda slot: slot.start)


def _insertion_point(text: str) -> int:
    """After ``"<|user|>\\n"``, else after ``"<|user|>"``, else the very start."""
    for anchor in (USER_TAG + "\n", USER_TAG):
        found = text.find(anchor)
        if found != -1:
            return found + len(anchor)
    return 0


def _check_order(
    kind: Kind, slots: Sequence[_Slot], count: int | None, spelling: _Spelling
) -> None:
    found = [s.ordinal for s in slots if s.kind == kind]
    if count is None:  # images in a plain prompt: whatever is there, numbered 1..m
        count = len(found)
    if not spelling.numbered:
        if len(found) != count:
            raise PlaceholderError(
                f"the prompt contains {len(found)} {spelling.expected(kind)} placeholders but "
                f"{count} {kind} item(s) were provided"
            )
        return
    expected = list(range(1, count + 1))
    if found != expected:
        raise PlaceholderError(
            f"{kind} placeholders must appear exactly once in order "
            f"{[f'<|{kind}_{k}|>' for k in expected]}; found {[f'<|{kind}_{k}|>' for k in found]}"
            f" for {count} {kind} item(s)"
        )


def _token_id(tokenizer: Any, token: str, expected: int) -> None:
    got = tokenizer.convert_tokens_to_ids(token)
    if got != expected:
        raise PlaceholderError(
            f"the tokenizer maps {token!r} to {got!r}, but the policy's id is {expected}; "
            "the tokenizer does not belong to this checkpoint"
        )


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    *,
    chat: bool = False,
) -> ExpandedPrompt:
    """Apply the variant's placeholder rules and expand each clip in place.

    Chat path (``chat``, or some :class:`~audiogate.records.MediaSegment`): each media
    position becomes the variant's placeholder, then the same rules apply, so a
    placeholder typed in the text is one too many (also in a chat with no media). Plain
    prompt (text only): placeholders the user wrote are validated; with none, one per
    clip is inserted after ``<|user|>``.

    :returns: ``text`` with every audio placeholder replaced by its clip's token count
        of the audio token (tokenizing it gives ``input_ids``), and, with a tokenizer,
        ``input_ids`` built segment by segment with the ids inserted in place.
    :raises PlaceholderError: see the module docstring.
    """
    spelling = _spelling(policy)
    audio_id = int(policy.options["audio_token_id"])
    image_id = int(policy.options["image_token_id"])
    _check_clips(clips)
    _check_reserved(segments, spelling)
    chat = chat or any(isinstance(segment, MediaSegment) for segment in segments)
    images = sum(1 for s in segments if isinstance(s, MediaSegment) and s.kind == "image")
    text = _render(segments, spelling)
    slots = _scan(text, spelling)
    if clips and not chat and not any(slot.kind == "audio" for slot in slots):
        at = _insertion_point(text)
        block = "".join(spelling.placeholder("audio", clip.ordinal) for clip in clips)
        text = text[:at] + block + text[at:]
        slots = _scan(text, spelling)
    _check_order("audio", slots, len(clips), spelling)
    _check_order("image", slots, images if chat else None, spelling)

    if tokenizer is not None:
        _token_id(tokenizer, spelling.audio_text, audio_id)
        _token_id(tokenizer, spelling.image_text, image_id)
    pieces: list[str] = []
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    cursor = 0
    audio_seen = 0

    def add_text(chunk: str) -> None:
        if not chunk:
            return
        pieces.append(chunk)
        if tokenizer is not None:
            encoded = [int(i) for i in tokenizer.encode(chunk, add_special_tokens=False)]
            if audio_id in encoded or image_id in encoded:
                raise PlaceholderError(
                    f"prompt text {chunk[:40]!r} tokenizes to a reserved media token id "
                    f"({audio_id} or {image_id})"
                )
            ids.extend(encoded)

    for slot in slots:
        add_text(text[cursor : slot.start])
        cursor = slot.stop
        if slot.kind == "image":
            pieces.append(spelling.image_text)
            ids.append(image_id)
            continue
        clip = clips[audio_seen]
        audio_seen += 1
        pieces.append(spelling.audio_text * clip.tokens)
        if tokenizer is not None:
            spans.append((len(ids), len(ids) + clip.tokens))
            ids.extend([audio_id] * clip.tokens)
    add_text(text[cursor:])
    return ExpandedPrompt(
        input_ids=tuple(ids) if tokenizer is not None else (),
        text="".join(pieces),
        audio_spans=tuple(spans),
        audio_token_id=audio_id,
        model_inputs=_prompt_inputs(policy, slots),
    )


def _prompt_inputs(policy: AudioPolicy, slots: Sequence[_Slot]) -> dict[str, npt.NDArray[Any]]:
    """The remote-code model's ``input_mode`` ``[shape=(1,)]`` int64, as its processor
    returns it; nothing for the native variant."""
    if policy.variant == "native":
        return {}
    kinds = {slot.kind for slot in slots}
    mode = REMOTE_INPUT_MODES["image" in kinds, "audio" in kinds]
    return {"input_mode": readonly(np.array([mode], dtype=np.int64))}
