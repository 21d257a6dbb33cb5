"""Prompt expansion for families whose clip is a run of one audio token, maybe delimited.

Qwen2-Audio, Qwen2.5-Omni, Qwen3-Omni, GLM-ASR and Audio Flamingo 3 all expand a clip the
same way: its n prompt positions are n copies of one audio token (``<|AUDIO|>``,
``<|pad|>``, ``<sound>``), optionally between a begin and an end delimiter, and the
reference processor replaces each placeholder of the text by the clip's run. What differs
is policy: where the template prints an audio part and what it prints around it, what a
plain prompt may write, and the words of a refusal. A family's ``prompt.py`` keeps that
policy and builds its prompt from these pieces:

* :class:`AudioMarkers`: the audio token and its delimiters, with their ids.
* :func:`check_clips`: the clips' ordinals and token counts against the family's geometry.
* :func:`delimited_chat_pieces`: a chat rendering whose audio parts arrive bare (the
  template's block is printed around the run) or already wrapped in the delimiters.
* :func:`split_at_placeholders` and :func:`insert_after_last`: a plain prompt's
  placeholders, or the clips' blocks after the last user turn when it has none;
  :func:`written_block_pieces`, both for a prompt whose placeholder is the template's
  whole block; :func:`block_pieces`, the chat or the plain prompt of such a family.
* :func:`assemble`: the pieces as text, ids and per-clip spans (an
  :class:`~audiogate.records.ExpandedPrompt`), the tokenizer's audio ids checked.

A prompt is built as a list of :data:`Piece` s: text, or the index of a clip whose run of
audio tokens goes there. Every function refuses with
:class:`~audiogate.errors.PlaceholderError` (or :class:`~audiogate.errors.PolicyError` for
a tokenizer whose ids differ from the policy's); none fixes a prompt up.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from audiogate.errors import PlaceholderError, PolicyError
from audiogate.records import (
    ClipSlot,
    ExpandedPrompt,
    MediaSegment,
    PromptSegment,
    TextSegment,
    check_span_count,
)

__all__ = [
    "BLOCK_RAW_MESSAGE",
    "AudioMarkers",
    "Piece",
    "assemble",
    "block_pieces",
    "check_clips",
    "check_media_part",
    "check_parts_placed",
    "check_tokenizer",
    "delimited_chat_pieces",
    "insert_after_last",
    "refuse_raw_markers",
    "split_at_placeholders",
    "written_block_pieces",
]

#: A piece of a prompt: text, or the index (0-based) of a clip whose audio run goes there.
Piece = str | int


@attrs.frozen
class AudioMarkers:
    """A family's audio token and the delimiters around each run, with their ids.

    :param audio: the token repeated once per prompt position of a clip.
    :param audio_id: its id.
    :param bos: the token before each run (``""``: the family has none).
    :param eos: the token after each run (``""``: none).
    :param bos_id: ``bos``'s id (``None`` without one).
    :param eos_id: ``eos``'s id (``None`` without one).
    """

    audio: str
    audio_id: int
    bos: str = ""
    eos: str = ""
    bos_id: int | None = None
    eos_id: int | None = None

    @property
    def reserved(self) -> tuple[str, ...]:
        """The tokens that only audiogate may place: the audio token and the delimiters."""
        return tuple(t for t in (self.audio, self.bos, self.eos) if t)

    @property
    def block(self) -> str:
        """One placeholder between the delimiters, as a template prints an audio part."""
        return self.bos + self.audio + self.eos

    def configured(self, options: Mapping[str, Any], **keys: str) -> AudioMarkers:
        """These markers with each one the policy's ``options`` set replaced.

        :param keys: the option key of a field where the family's differs from the usual
            one (``audio_token``, ``audio_token_id``, ``audio_bos_token``,
            ``audio_bos_token_id``, ``audio_eos_token``, ``audio_eos_token_id``), e.g.
            ``audio_id="audio_token_index"``.
        """
        changes: dict[str, Any] = {}
        for field, default in _OPTION_KEYS.items():
            key = keys.get(field, default)
            current = getattr(self, field)
            if key in options and current not in (None, ""):
                value = options[key]
                changes[field] = int(value) if field.endswith("_id") else str(value)
        return attrs.evolve(self, **changes)

    @property
    def token_ids(self) -> tuple[tuple[str, int], ...]:
        """Each reserved token with the id the policy gives it."""
        pairs = ((self.audio, self.audio_id), (self.bos, self.bos_id), (self.eos, self.eos_id))
        return tuple((token, value) for token, value in pairs if token and value is not None)


#: The usual policy option of each :class:`AudioMarkers` field.
_OPTION_KEYS: Final = {
    "audio": "audio_token",
    "audio_id": "audio_token_id",
    "bos": "audio_bos_token",
    "bos_id": "audio_bos_token_id",
    "eos": "audio_eos_token",
    "eos_id": "audio_eos_token_id",
}


def check_clips(
    clips: Sequence[ClipSlot],
    *,
    audio_tokens: Callable[[int], int],
    max_frames: int,
    pooling: str,
) -> None:
    """Refuse clips out of order or claiming other than the family's token count.

    :param audio_tokens: the family's geometry: prompt positions for ``frames`` valid
        feature frames (``0 <= frames <= max_frames``).
    :param pooling: how the family makes tokens of frames, with ``{expected}`` where the
        count goes (``"Qwen2-Audio pools them into {expected}"``).
    :raises PlaceholderError: an ordinal that is not the clip's position, a count that is
        not the geometry's, or a clip without a token.
    """
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"audio clip {index + 1} carries ordinal {clip.ordinal}; expected {index + 1}"
            )
        expected = audio_tokens(clip.frames) if 0 <= clip.frames <= max_frames else None
        if expected is None or clip.tokens != expected or clip.tokens < 1:
            raise PlaceholderError(
                f"audio clip {clip.ordinal} claims {clip.tokens} tokens for {clip.frames} valid "
                f"frames; {pooling.replace('{expected}', str(expected))} (at least 1 is needed)"
            )


def refuse_raw_markers(text: str, markers: Sequence[str], message: str) -> None:
    """Refuse ``text`` holding any of ``markers``.

    :param message: the refusal, with ``{marker}`` where the marker's repr goes.
    :raises PlaceholderError: the first marker found.
    """
    for marker in markers:
        if marker in text:
            raise PlaceholderError(message.replace("{marker}", repr(marker)))


def check_media_part(
    segment: MediaSegment, expected: int, clips: Sequence[ClipSlot], *, family: str
) -> None:
    """Refuse a chat media part that is not the ``expected``-th audio part.

    :param family: the model's name, for the refusal of image and video parts.
    :raises PlaceholderError: another kind of part, or an ordinal out of order or past the
        clips.
    """
    kind, ordinal = segment.kind, segment.ordinal
    if kind != "audio":
        raise PlaceholderError(
            f"the prompt has a {kind} part (ordinal {ordinal}); audiogate's {family} plugin "
            f"prepares audio only"
        )
    if ordinal != expected or ordinal > len(clips):
        raise PlaceholderError(
            f"audio part {ordinal} appears where audio part {expected} is expected; "
            f"the request has {len(clips)} audio clip(s), each placed once, in order"
        )


def check_parts_placed(placed: int, clips: Sequence[ClipSlot]) -> None:
    """Refuse a chat prompt placing ``placed`` audio parts for another number of clips."""
    if placed != len(clips):
        raise PlaceholderError(
            f"the prompt places {placed} audio part(s) but the request has "
            f"{len(clips)} audio clip(s)"
        )


def _text_of(segment: PromptSegment | None) -> str:
    return segment.text if isinstance(segment, TextSegment) else ""


def delimited_chat_pieces(
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    markers: AudioMarkers,
    *,
    family: str,
    opening: Callable[[int], str] | None = None,
    closing: Callable[[PromptSegment | None], str] | None = None,
    raw_message: str,
) -> list[Piece]:
    """A chat rendering's pieces, each audio part's run between the delimiters.

    An audio part arrives *bare* (the core's sentinel where the template prints the
    part) and gets the template's block around its run, or already *wrapped* (text ending
    in the opening before it, text starting with ``markers.eos`` after it: a rendering that
    kept the template's block, such as ``processor(text=<rendered>)``) and gets just its
    run. Afterwards each delimiter appears once per clip and the audio token nowhere.

    :param opening: the template's text before the ``k``-th part's run (default
        ``markers.bos``); it must end with ``markers.bos``.
    :param closing: the template's text after a bare part's run, given the segment that
        follows it (``None`` at the end; default ``markers.eos``); it must start with
        ``markers.eos``.
    :param raw_message: the refusal of a raw audio token, with ``{marker}``.
    :raises PlaceholderError: a part out of order, another kind of part, a half-wrapped
        part, a raw audio token, or a delimiter without its clip.
    """
    open_text = opening or (lambda ordinal: markers.bos)
    close_text = closing or (lambda after: markers.eos)
    pieces: list[Piece] = []
    expected = 1
    for position, segment in enumerate(segments):
        if isinstance(segment, TextSegment):
            pieces.append(segment.text)
            continue
        check_media_part(segment, expected, clips, family=family)
        before = _text_of(segments[position - 1] if position else None)
        after_segment = segments[position + 1] if position + 1 < len(segments) else None
        label = open_text(expected)
        opened = before.endswith(markers.bos)
        closed = _text_of(after_segment).startswith(markers.eos)
        if opened and closed and before.endswith(label):
            pieces.append(expected - 1)
        elif not opened and not closed:
            pieces.extend((label, expected - 1, close_text(after_segment)))
        else:
            raise PlaceholderError(
                f"audio part {expected} is half wrapped in {markers.bos}…{markers.eos}; "
                f"expected either the bare part or the template's "
                f"{label + markers.audio + markers.eos!r}"
            )
        expected += 1
    check_parts_placed(expected - 1, clips)
    text = "".join(p for p in pieces if isinstance(p, str))
    refuse_raw_markers(text, (markers.audio,), raw_message)
    for marker in (markers.bos, markers.eos):
        if marker and text.count(marker) != len(clips):
            raise PlaceholderError(
                f"the rendered prompt contains {text.count(marker)} {marker!r} for "
                f"{len(clips)} audio part(s); raw audio markers are refused"
            )
    return pieces


def split_at_placeholders(
    texts: Sequence[str],
    placeholder: str,
    clips: Sequence[ClipSlot],
    block: Callable[[int], Sequence[Piece]],
) -> list[Piece] | None:
    """A plain prompt's pieces with ``block(k)`` at its ``k``-th ``placeholder``.

    :returns: ``None`` where no text holds the placeholder.
    :raises PlaceholderError: a number of placeholders other than the clips'.
    """
    written = sum(text.count(placeholder) for text in texts)
    if not written:
        return None
    if written != len(clips):
        raise PlaceholderError(
            f"the prompt has {written} {placeholder!r} placeholder(s) for {len(clips)} audio "
            f"clip(s); write one per clip, in clip order, or none"
        )
    pieces: list[Piece] = []
    clip = 0
    for text in texts:
        for index, part in enumerate(text.split(placeholder)):
            if index:
                pieces.extend(block(clip))
                clip += 1
            pieces.append(part)
    return pieces


def written_block_pieces(
    texts: Sequence[str],
    clips: Sequence[ClipSlot],
    markers: AudioMarkers,
    *,
    anchor: str,
    raw_message: str,
) -> list[Piece]:
    """A plain prompt in which the user writes the template's block
    (``markers.block``) once per clip, in clip order; without any, the blocks of all clips
    after the last ``anchor``.

    :param raw_message: the refusal of a reserved token outside a block, with ``{marker}``.
    :raises PlaceholderError: a reserved token outside a block, or a number of blocks other
        than the clips'.
    """
    for text in texts:
        refuse_raw_markers(text.replace(markers.block, ""), markers.reserved, raw_message)
    pieces = split_at_placeholders(
        texts, markers.block, clips, lambda clip: (markers.bos, clip, markers.eos)
    )
    if pieces is not None:
        return pieces
    blocks = [piece for index in range(len(clips)) for piece in (markers.bos, index, markers.eos)]
    return insert_after_last(texts, anchor, blocks)


#: The refusal of a raw audio marker where no clip is placed, for a family whose plain
#: prompt writes the template's whole block (:func:`block_pieces`).
BLOCK_RAW_MESSAGE: Final = (
    "{where} contains the raw audio marker {marker} where no clip is placed; audio is "
    "placed by audio parts, or in a plain prompt by one '{block}' per clip"
)


def block_pieces(
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    markers: AudioMarkers,
    *,
    family: str,
    anchor: str,
) -> list[Piece]:
    """The pieces of a chat-rendered prompt (:func:`delimited_chat_pieces`: its audio
    parts) or of a plain one (:func:`written_block_pieces`: one written block per clip, or
    all of them after the last ``anchor``), refusing raw markers with
    :data:`BLOCK_RAW_MESSAGE`.

    :param family: the family's name in refusals.
    """

    def raw(where: str) -> str:
        return BLOCK_RAW_MESSAGE.replace("{where}", where).replace("{block}", markers.block)

    if any(isinstance(s, MediaSegment) for s in segments):
        return delimited_chat_pieces(
            segments, clips, markers, family=family, raw_message=raw("the rendered prompt")
        )
    texts = [s.text for s in segments if isinstance(s, TextSegment)]
    return written_block_pieces(texts, clips, markers, anchor=anchor, raw_message=raw("the prompt"))


def insert_after_last(texts: Sequence[str], anchor: str, blocks: Sequence[Piece]) -> list[Piece]:
    """``blocks`` right after the last ``anchor`` of ``texts`` (at the start without one).

    Where the template puts audio that opens a user turn: ``anchor`` is its user turn's
    opening (``"<|im_start|>user\\n"``).
    """
    for index in range(len(texts) - 1, -1, -1):
        at = texts[index].rfind(anchor)
        if at >= 0:
            cut = at + len(anchor)
            head, tail = texts[index][:cut], texts[index][cut:]
            return [*texts[:index], head, *blocks, tail, *texts[index + 1 :]]
    return [*blocks, *texts]


#: Tokenizers already found to map the markers to their ids (checked once per tokenizer
#: object and markers: the check encodes up to three tokens, which costs as much as a
#: short prompt). A tokenizer that cannot be weakly referenced is checked every time.
_CHECKED: Final[weakref.WeakKeyDictionary[Any, frozenset[AudioMarkers]]] = (
    weakref.WeakKeyDictionary()
)
_CHECKED_LOCK: Final = threading.Lock()


def check_tokenizer(tokenizer: Any, markers: AudioMarkers) -> None:
    """Refuse a tokenizer that does not encode each reserved token as its policy id.

    :raises PolicyError: a token mapped to another id, or encoded as several ids.
    """
    with _CHECKED_LOCK, contextlib.suppress(TypeError):
        if markers in _CHECKED.get(tokenizer, frozenset()):
            return
    for token, expected in markers.token_ids:
        value = tokenizer.convert_tokens_to_ids(token)
        got = value if isinstance(value, int) else None
        ids = list(tokenizer.encode(token, add_special_tokens=False))
        if got != expected or ids != [expected]:
            raise PolicyError(
                f"the tokenizer maps {token!r} to {got} (encodes it as {ids}); the "
                f"audio policy needs the single id {expected}",
                file="tokenizer",
                value=got,
            )
    with _CHECKED_LOCK, contextlib.suppress(TypeError):
        _CHECKED[tokenizer] = _CHECKED.get(tokenizer, frozenset()) | {markers}


def assemble(
    pieces: Sequence[Piece],
    clips: Sequence[ClipSlot],
    markers: AudioMarkers,
    tokenizer: Any,
) -> ExpandedPrompt:
    """The pieces as an expanded prompt: each clip index becomes its run of audio tokens.

    Adjacent text is merged first, so the only split points are the audio runs; the run's
    token and its delimiters are atomic special tokens, so encoding piece by piece equals
    encoding the whole text.

    :param tokenizer: a transformers tokenizer, or ``None`` for the text alone.
    :returns: the text; with a tokenizer also the ids and each clip's span of audio ids
        (the text tokenizes to exactly those ids).
    :raises PlaceholderError: text that tokenizes to the audio id.
    :raises PolicyError: the tokenizer's audio ids differ from the policy's.
    """
    merged: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        elif not (isinstance(piece, str) and not piece):
            merged.append(piece)
    text = "".join(p if isinstance(p, str) else markers.audio * clips[p].tokens for p in merged)
    if tokenizer is None:
        return ExpandedPrompt(
            input_ids=(), text=text, audio_spans=(), audio_token_id=markers.audio_id
        )

    check_tokenizer(tokenizer, markers)
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for piece in merged:
        if isinstance(piece, str):
            encoded = [int(i) for i in tokenizer.encode(piece, add_special_tokens=False)]
            if markers.audio_id in encoded:
                raise PlaceholderError(
                    f"prompt text tokenizes to the audio id {markers.audio_id} outside the "
                    f"audio positions"
                )
            ids.extend(encoded)
        else:
            start = len(ids)
            ids.extend([markers.audio_id] * clips[piece].tokens)
            spans.append((start, len(ids)))
    tokens = [clip.tokens for clip in clips]
    if not check_span_count(spans, tokens):
        raise PlaceholderError(f"expanded audio spans {spans} do not match clip tokens {tokens}")
    return ExpandedPrompt(
        input_ids=tuple(ids),
        text=text,
        audio_spans=tuple(spans),
        audio_token_id=markers.audio_id,
    )
