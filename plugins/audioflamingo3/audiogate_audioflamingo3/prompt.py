"""Prompt expansion: each clip becomes n × ``<sound>`` (its pooled rows).

``AudioFlamingo3Processor`` replaces each ``<sound>`` of the text by ``<sound>`` × the
clip's rows. Two inputs reach :func:`expand_prompt`:

* **Chat** (the segments come from chat messages). The checkpoint's template
  (:data:`CHAT_TEMPLATE`) prints a message with list content as ``<sound>`` (once, if the
  message has any audio part) followed by all its text parts joined, wherever the audio
  parts were among them. The core turns each audio part into a text part holding its
  sentinel, which this template prints among the joined text, so each clip's run is
  moved to the start of its message's content (right after ``<|im_start|>{role}\\n``):
  the text the processor expands from the real rendering. Several audio parts in one
  message (which the processor refuses: one audio per prompt) get their runs there one
  after another, in clip order, as the model consumes the rows. A ``<sound>`` typed in
  chat text is refused.
* **Plain** (text only). Each ``<sound>`` in the text is one clip's placeholder, in clip
  order, as the processor reads it; their number must equal the clips'. Without any,
  the runs of all clips, in order, are inserted right after the last
  ``<|im_start|>user\\n`` (where the template puts a user turn's audio), or at the start of
  the prompt when it has no user turn.

With no clips the text is kept as it is, and a ``<sound>`` in it is refused. Image parts
are refused (Audio Flamingo 3 has no image input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs

from audiogate.errors import PlaceholderError, PolicyError
from audiogate.policy import AudioPolicy
from audiogate.records import (
    ClipSlot,
    ExpandedPrompt,
    MediaSegment,
    PromptSegment,
    TextSegment,
    check_span_count,
)
from audiogate_audioflamingo3.geometry import MAX_FRAMES, audio_tokens
from audiogate_audioflamingo3.policy import AUDIO_TOKEN, AUDIO_TOKEN_ID

__all__ = ["CHAT_TEMPLATE", "TURN_START", "USER_TURN", "expand_prompt"]

#: nvidia/audio-flamingo-3-hf's processor chat template, as transformers'
#: ``convert_audioflamingo3_to_hf.py`` writes it (``processor_chat_template``).
CHAT_TEMPLATE: Final = (
    "{% if messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages if m['content'] is not none %}"
    "<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}"
    "{{ m['content'] }}"
    "{% else %}"
    "{% set audio = namespace(found=False) %}"
    "{% set text_buf = namespace(v='') %}"
    "{% for c in m['content'] %}"
    "{% if c.get('type') == 'audio' or 'audio' in c %}"
    "{% set audio.found = True %}"
    "{% elif c.get('type') == 'text' or 'text' in c %}"
    "{% set text_buf.v = text_buf.v + c['text'] %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if audio.found %}{{ '<sound>' }}{% endif %}{{ text_buf.v }}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% endif %}"
)
#: What starts every rendered message; its content starts after the role's line.
TURN_START: Final = "<|im_start|>"
#: Where a user turn's content starts in the rendered template.
USER_TURN: Final = "<|im_start|>user\n"


@attrs.frozen
class _Markers:
    audio: str
    audio_id: int


def _markers(policy: AudioPolicy) -> _Markers:
    options = policy.options
    return _Markers(
        audio=str(options.get("audio_token", AUDIO_TOKEN)),
        audio_id=int(options.get("audio_token_id", AUDIO_TOKEN_ID)),
    )


def _check_clips(clips: Sequence[ClipSlot]) -> None:
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"audio clip {index + 1} carries ordinal {clip.ordinal}; expected {index + 1}"
            )
        expected = audio_tokens(clip.frames) if 0 <= clip.frames <= MAX_FRAMES else None
        if expected is None or clip.tokens != expected or clip.tokens < 1:
            raise PlaceholderError(
                f"audio clip {clip.ordinal} claims {clip.tokens} tokens for {clip.frames} valid "
                f"frames; Audio Flamingo 3 pools them into {expected} (at least 1 is needed)"
            )


def _refuse_raw_marker(text: str, marker: str, where: str) -> None:
    if marker in text:
        raise PlaceholderError(
            f"{where} contains the raw audio token {marker!r} with no clip behind it; in chat "
            f"messages audio is placed by audio parts only"
        )


# A prompt as pieces: text, or the index of a clip whose rows go there.
_Piece = str | int


def _content_start(text: str) -> int:
    """Offset in ``text`` where the last rendered message's content starts (0: none)."""
    turn = text.rfind(TURN_START)
    if turn < 0:
        return 0
    line_end = text.find("\n", turn)
    return len(text) if line_end < 0 else line_end + 1


def _chat_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: _Markers
) -> list[_Piece]:
    text = ""
    anchors: list[int] = []  # per clip: where its run goes in ``text``
    for segment in segments:
        if isinstance(segment, TextSegment):
            text += segment.text
            continue
        if segment.kind != "audio":
            raise PlaceholderError(
                f"the prompt has a {segment.kind} part (ordinal {segment.ordinal}); "
                f"Audio Flamingo 3 accepts audio only"
            )
        expected = len(anchors) + 1
        if segment.ordinal != expected or segment.ordinal > len(clips):
            raise PlaceholderError(
                f"audio part {segment.ordinal} appears where audio part {expected} is expected; "
                f"the request has {len(clips)} audio clip(s), each placed once, in order"
            )
        # The template prints a message's audio before its joined text parts.
        anchors.append(_content_start(text))
    if len(anchors) != len(clips):
        raise PlaceholderError(
            f"the prompt places {len(anchors)} audio part(s) but the request has "
            f"{len(clips)} audio clip(s)"
        )
    _refuse_raw_marker(text, markers.audio, "the rendered prompt")
    pieces: list[_Piece] = []
    cursor = 0
    for index, anchor in enumerate(anchors):
        pieces.append(text[cursor:anchor])
        pieces.append(index)
        cursor = anchor
    pieces.append(text[cursor:])
    return pieces


def _plain_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: _Markers
) -> list[_Piece]:
    text = "".join(s.text for s in segments if isinstance(s, TextSegment))
    parts = text.split(markers.audio)
    placeholders = len(parts) - 1
    if placeholders:
        if placeholders != len(clips):
            raise PlaceholderError(
                f"the prompt has {placeholders} {markers.audio!r} placeholder(s) for "
                f"{len(clips)} audio clip(s); write one per clip, in order, or none"
            )
        pieces: list[_Piece] = [parts[0]]
        for index, part in enumerate(parts[1:]):
            pieces.extend((index, part))
        return pieces
    at = text.rfind(USER_TURN)
    cut = at + len(USER_TURN) if at >= 0 else 0
    return [text[:cut], *range(len(clips)), text[cut:]]


def _token_id(tokenizer: Any, token: str) -> int | None:
    value = tokenizer.convert_tokens_to_ids(token)
    return value if isinstance(value, int) else None


def _check_tokenizer(tokenizer: Any, markers: _Markers) -> None:
    got = _token_id(tokenizer, markers.audio)
    ids = tokenizer.encode(markers.audio, add_special_tokens=False)
    if got != markers.audio_id or list(ids) != [markers.audio_id]:
        raise PolicyError(
            f"the tokenizer maps {markers.audio!r} to {got} (encodes it as {list(ids)}); the "
            f"audio policy needs the single id {markers.audio_id}",
            file="tokenizer",
            value=got,
        )


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    *,
    chat: bool = False,
) -> ExpandedPrompt:
    """Expand a chat-rendered or plain prompt (see the module docstring).

    :param chat: the segments come from chat messages (always so with a media segment).
    :returns: the text with every clip's n ``<sound>``; with a tokenizer also the ids and
        each clip's span of audio ids (the text tokenizes to exactly those ids).
    :raises PlaceholderError: a missing, extra, reordered or unknown audio position or
        placeholder, an image part, or a ``<sound>`` typed in chat text.
    :raises PolicyError: the tokenizer's ``<sound>`` id differs from the policy's.
    """
    markers = _markers(policy)
    _check_clips(clips)
    if chat or any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips, markers)
    else:
        pieces = _plain_pieces(segments, clips, markers)

    # Adjacent text merged; the only split points are the runs of the atomic special
    # token <sound>, so encoding piece by piece equals encoding the whole text.
    merged: list[_Piece] = []
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

    _check_tokenizer(tokenizer, markers)
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
