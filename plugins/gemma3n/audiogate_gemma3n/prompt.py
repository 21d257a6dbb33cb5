"""Gemma 3n prompt expansion: each clip becomes ``\\n\\n<start_of_audio>`` + 188 soft tokens
+ ``<end_of_audio>\\n\\n``, as ``Gemma3nProcessor`` writes it.

The checkpoint's chat template renders each audio content part as ``<audio_soft_token>``
and each image part as ``<image_soft_token>`` (the google/gemma-3n-E2B-it / E4B-it
template; a verbatim copy is in ``examples/models/gemma-3n-e4b-it``), and the processor
replaces every ``<audio_soft_token>`` with the full block (``full_audio_sequence``,
``processing_gemma3n.py``). Here:

* **Chat path** (segments from the rendered template): each audio position becomes its
  clip's block; each image position becomes ``<image_soft_token>``, unexpanded, in order
  (the image processor expands it). The text segments are the template's own text; a
  reserved media literal in them (``<audio_soft_token>``, ``<start_of_audio>``,
  ``<end_of_audio>``, ``<image_soft_token>``, ``<start_of_image>``, ``<end_of_image>``)
  can only come from user text and is refused.
* **Plain prompt** (text only): the placeholder is the processor's own,
  ``<audio_soft_token>``, one per clip, replaced in order. With no placeholder at all the
  blocks go, in clip order, inside the user turn just before its ``<end_of_turn>``
  (mlxcel's ``expand_gemma3n_audio_tokens``): the last ``<start_of_turn>user`` turn's
  ``<end_of_turn>`` (or the end of the text if that turn is still open); without turn
  markers, before the first ``<end_of_turn>``; without either, at the end of the text (all
  of it is the user's).
  Any other count is a "placeholder mismatch"; ``<start_of_audio>`` / ``<end_of_audio>``
  typed by the user are refused.

Token ids: the expanded text is tokenized once (``add_special_tokens=False``, the
template already rendered ``<bos>``), as the processor tokenizes its expanded text, but
with one ``<audio_soft_token>`` per block; each clip's one ``audio_token_id`` (between
``boa`` and ``eoa``, checked) is then replaced by its planned run. ``<audio_soft_token>``
is a special token, split out before the text is tokenized, so a run of n encodes to n
ids whatever surrounds it: tokenizing ``text`` gives ``input_ids`` (a tokenizer that does
not keep it atomic, found by a probe once per tokenizer, gets the whole text tokenized).
Tokenizing 188 soft tokens per clip cost a third of a cached clip's request. The three
audio ids come from the policy (``boa_token_id``, ``audio_token_id``, ``eoa_token_id`` in
``config.json``, defaults 256000 / 262273 / 262272) and must be what the tokenizer maps the
three token strings to.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from audiogate.errors import PlaceholderError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipSlot, ExpandedPrompt, MediaSegment, PromptSegment, TextSegment
from audiogate_gemma3n.geometry import SOFT_TOKENS_PER_CLIP

__all__ = [
    "AUDIO_TOKEN",
    "BOA_TOKEN",
    "BOI_TOKEN",
    "END_OF_TURN",
    "EOA_TOKEN",
    "EOI_TOKEN",
    "IMAGE_TOKEN",
    "START_OF_TURN",
    "WRAPPER",
    "audio_block",
    "expand_prompt",
]

AUDIO_TOKEN: Final = "<audio_soft_token>"
BOA_TOKEN: Final = "<start_of_audio>"
EOA_TOKEN: Final = "<end_of_audio>"
IMAGE_TOKEN: Final = "<image_soft_token>"
BOI_TOKEN: Final = "<start_of_image>"
EOI_TOKEN: Final = "<end_of_image>"
START_OF_TURN: Final = "<start_of_turn>"
END_OF_TURN: Final = "<end_of_turn>"
#: ``Gemma3nProcessor.full_audio_sequence`` wraps each block in blank lines.
WRAPPER: Final = "\n\n"

_CHAT_RESERVED: Final = (AUDIO_TOKEN, BOA_TOKEN, EOA_TOKEN, IMAGE_TOKEN, BOI_TOKEN, EOI_TOKEN)
_PLAIN_RESERVED: Final = (BOA_TOKEN, EOA_TOKEN)
_USER_TURN: Final = START_OF_TURN + "user"


def audio_block(tokens: int = SOFT_TOKENS_PER_CLIP) -> str:
    """One clip's block: ``\\n\\n<start_of_audio>``, the soft tokens, ``<end_of_audio>\\n\\n``."""
    return f"{WRAPPER}{BOA_TOKEN}{AUDIO_TOKEN * tokens}{EOA_TOKEN}{WRAPPER}"


def _ids(policy: AudioPolicy) -> tuple[int, int, int]:
    options = policy.options
    return (
        int(options["boa_token_id"]),
        int(options["audio_token_id"]),
        int(options["eoa_token_id"]),
    )


def _check_clips(policy: AudioPolicy, clips: Sequence[ClipSlot]) -> None:
    expected = policy.soft_tokens_per_clip or SOFT_TOKENS_PER_CLIP
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"clip {index} maps to ordinal {clip.ordinal}, expected {index + 1}"
            )
        if clip.tokens != expected:
            raise PlaceholderError(
                f"clip {index} has {clip.tokens} audio tokens; every Gemma 3n clip has exactly "
                f"{expected}"
            )


def _refuse_reserved(text: str, reserved: Sequence[str], where: str) -> None:
    for literal in reserved:
        if literal in text:
            raise PlaceholderError(
                f"{where} contains the reserved literal {literal!r}; audio and images enter the "
                f"prompt only as media parts or, in a plain prompt, as {AUDIO_TOKEN!r}"
            )


def _mismatch(found: int, clips: int, what: str) -> PlaceholderError:
    return PlaceholderError(
        f"placeholder mismatch: the prompt has {found} {what} but the request has {clips} "
        f"audio clip{'s' if clips != 1 else ''}"
    )


# A prompt in pieces: text, or a clip whose block goes there.
_Piece = str | ClipSlot


def _chat_pieces(segments: Sequence[PromptSegment], clips: Sequence[ClipSlot]) -> list[_Piece]:
    audio_positions = sum(1 for s in segments if isinstance(s, MediaSegment) and s.kind == "audio")
    if audio_positions != len(clips):
        raise _mismatch(audio_positions, len(clips), "audio positions")
    pieces: list[_Piece] = []
    seen = {"audio": 0, "image": 0}
    for segment in segments:
        if isinstance(segment, TextSegment):
            _refuse_reserved(segment.text, _CHAT_RESERVED, "the rendered prompt text")
            pieces.append(segment.text)
            continue
        kind = segment.kind
        if kind not in seen:
            raise PlaceholderError(
                f"media position of unknown kind {kind!r}; allowed: audio, image"
            )
        seen[kind] += 1
        if segment.ordinal != seen[kind]:
            raise PlaceholderError(
                f"{kind} position {seen[kind]} refers to {kind} {segment.ordinal}; positions "
                f"must name {kind} 1, 2, ... once each, in order"
            )
        if kind == "audio":
            pieces.append(clips[segment.ordinal - 1])
        else:
            pieces.append(IMAGE_TOKEN)
    return pieces


def _anchor(text: str) -> int:
    """Where blocks go in a plain prompt without placeholders (see the module docstring)."""
    user = text.rfind(_USER_TURN)
    if user >= 0:
        end = text.find(END_OF_TURN, user)
        return len(text) if end < 0 else end
    end = text.find(END_OF_TURN)
    return len(text) if end < 0 else end


def _plain_pieces(segments: Sequence[PromptSegment], clips: Sequence[ClipSlot]) -> list[_Piece]:
    text = "".join(s.text for s in segments if isinstance(s, TextSegment))
    _refuse_reserved(text, _PLAIN_RESERVED, "the prompt")
    found = text.count(AUDIO_TOKEN)
    if found == len(clips):
        parts = text.split(AUDIO_TOKEN)
        pieces: list[_Piece] = [parts[0]]
        for clip, part in zip(clips, parts[1:], strict=True):
            pieces += [clip, part]
        return pieces
    if found == 0:
        at = _anchor(text)
        return [text[:at], *clips, text[at:]]
    raise _mismatch(found, len(clips), f"{AUDIO_TOKEN} placeholders")


def _token_id(tokenizer: Any, token: str) -> int | None:
    value = tokenizer.convert_tokens_to_ids(token)
    return value if isinstance(value, int) else None


def _join(pieces: Sequence[_Piece], *, collapsed: bool = False) -> str:
    """The prompt text (``collapsed``: one soft token per block)."""
    return "".join(
        p if isinstance(p, str) else audio_block(1 if collapsed else p.tokens) for p in pieces
    )


def _spans(
    ids: np.ndarray[Any, Any], clips: Sequence[ClipSlot], boa: int, audio: int, eoa: int
) -> tuple[tuple[int, int], ...]:
    is_audio = np.concatenate(([False], ids == audio, [False]))
    edges = np.flatnonzero(np.diff(is_audio.astype(np.int8)))
    starts, stops = edges[0::2], edges[1::2]
    if len(starts) != len(clips):
        raise _mismatch(len(starts), len(clips), "audio token runs after tokenization")
    spans = []
    for index, (start, stop, clip) in enumerate(zip(starts, stops, clips, strict=True)):
        if (
            stop - start != clip.tokens
            or start == 0
            or ids[start - 1] != boa
            or stop >= len(ids)
            or ids[stop] != eoa
        ):
            raise PlaceholderError(
                f"clip {index}: the tokenized prompt does not hold its block of "
                f"<start_of_audio> + {clip.tokens} x {audio} + <end_of_audio>"
            )
        spans.append((int(start), int(stop)))
    for name, value in (("<start_of_audio>", boa), ("<end_of_audio>", eoa)):
        count = int(np.count_nonzero(ids == value))
        if count != len(clips):
            raise PlaceholderError(
                f"the tokenized prompt has {count} {name} ids ({value}) for {len(clips)} clips"
            )
    return tuple(spans)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(map(int, tokenizer.encode(text, add_special_tokens=False)))


def _splice(
    collapsed: list[int], clips: Sequence[ClipSlot], boa: int, audio: int, eoa: int
) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """``input_ids`` and spans from the ids of the collapsed text: each clip's one audio id
    (checked to sit between ``boa`` and ``eoa``, once per clip) replaced by its run."""
    found = collapsed.count(audio)
    if found != len(clips):
        raise _mismatch(found, len(clips), "audio token runs after tokenization")
    for name, value in (("<start_of_audio>", boa), ("<end_of_audio>", eoa)):
        count = collapsed.count(value)
        if count != len(clips):
            raise PlaceholderError(
                f"the tokenized prompt has {count} {name} ids ({value}) for {len(clips)} clips"
            )
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    cursor = 0
    for index, clip in enumerate(clips):
        at = collapsed.index(audio, cursor)
        if (
            at == 0
            or collapsed[at - 1] != boa
            or at + 1 >= len(collapsed)
            or collapsed[at + 1] != eoa
        ):
            raise PlaceholderError(
                f"clip {index}: the tokenized prompt does not hold its block of "
                f"<start_of_audio> + {clip.tokens} x {audio} + <end_of_audio>"
            )
        ids += collapsed[cursor:at]
        spans.append((len(ids), len(ids) + clip.tokens))
        ids += [audio] * clip.tokens
        cursor = at + 1
    ids += collapsed[cursor:]
    return tuple(ids), tuple(spans)


# Per tokenizer, per (boa, audio, eoa): whether splicing gives what encoding gives.
_ATOMIC: weakref.WeakKeyDictionary[Any, dict[tuple[int, int, int], bool]] = (
    weakref.WeakKeyDictionary()
)


def _atomic(tokenizer: Any, boa: int, audio: int, eoa: int) -> bool:
    """Whether ``tokenizer`` encodes a run of soft tokens as one id each, whatever
    surrounds it: probed once per tokenizer (a run of 3 in text, against a run of 1)."""
    ids = (boa, audio, eoa)
    try:
        known = _ATOMIC.setdefault(tokenizer, {})
    except TypeError:  # not weakly referenceable: probed every time
        known = {}
    if ids in known:
        return known[ids]
    probe = ClipSlot(ordinal=1, tokens=3, frames=1, sha256="0" * 64)
    pieces: list[_Piece] = ["<start_of_turn>user\nListen:", probe, "Say it.<end_of_turn>\n"]
    try:
        collapsed = _encode(tokenizer, _join(pieces, collapsed=True))
        spliced, _ = _splice(collapsed, [probe], boa, audio, eoa)
        atomic = spliced == tuple(_encode(tokenizer, _join(pieces)))
    except PlaceholderError:
        atomic = False
    known[ids] = atomic
    return atomic


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt:
    """Expand a chat-rendered or plain prompt (see the module docstring).

    :param tokenizer: a :class:`~audiogate.records.TokenizerLike`, or ``None`` for the text
        form only (``input_ids=()``, ``audio_spans=()``).
    :raises PlaceholderError: a count mismatch ("placeholder mismatch"), a reserved literal,
        media positions out of order, clips whose ordinals or token counts are wrong, or a
        tokenizer whose audio token ids disagree with the policy.
    """
    _check_clips(policy, clips)
    boa, audio, eoa = _ids(policy)
    chat = any(isinstance(s, MediaSegment) for s in segments)
    pieces = _chat_pieces(segments, clips) if chat else _plain_pieces(segments, clips)
    text = _join(pieces)
    if tokenizer is None:
        return ExpandedPrompt(input_ids=(), text=text, audio_spans=(), audio_token_id=audio)
    for token, expected in ((BOA_TOKEN, boa), (AUDIO_TOKEN, audio), (EOA_TOKEN, eoa)):
        actual = _token_id(tokenizer, token)
        if actual != expected:
            raise PlaceholderError(
                f"the tokenizer maps {token!r} to id {actual}, but the checkpoint's policy "
                f"says {expected}"
            )
    if _atomic(tokenizer, boa, audio, eoa):
        ids, spans = _splice(
            _encode(tokenizer, _join(pieces, collapsed=True)), clips, boa, audio, eoa
        )
    else:
        ids = tuple(_encode(tokenizer, text))
        spans = _spans(np.asarray(ids, dtype=np.int64), clips, boa, audio, eoa)
    return ExpandedPrompt(input_ids=ids, text=text, audio_spans=spans, audio_token_id=audio)
