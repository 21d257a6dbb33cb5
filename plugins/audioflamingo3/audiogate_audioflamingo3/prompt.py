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

from audiogate.expansion import (
    AudioMarkers,
    Piece,
    assemble,
    check_clips,
    check_media_part,
    check_parts_placed,
    insert_after_last,
    refuse_raw_markers,
    split_at_placeholders,
)
from audiogate.policy import AudioPolicy
from audiogate.records import ClipSlot, ExpandedPrompt, MediaSegment, PromptSegment, TextSegment
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


_RAW: Final = (
    "the rendered prompt contains the raw audio token {marker} with no clip behind it; in "
    "chat messages audio is placed by audio parts only"
)


#: The checkpoint's audio token (its policy's options may name another).
_MARKERS: Final = AudioMarkers(audio=AUDIO_TOKEN, audio_id=AUDIO_TOKEN_ID)


def _content_start(text: str) -> int:
    """Offset in ``text`` where the last rendered message's content starts (0: none)."""
    turn = text.rfind(TURN_START)
    if turn < 0:
        return 0
    line_end = text.find("\n", turn)
    return len(text) if line_end < 0 else line_end + 1


def _chat_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: AudioMarkers
) -> list[Piece]:
    text = ""
    anchors: list[int] = []  # per clip: where its run goes in ``text``
    for segment in segments:
        if isinstance(segment, TextSegment):
            text += segment.text
            continue
        check_media_part(segment, len(anchors) + 1, clips, family="Audio Flamingo 3")
        # The template prints a message's audio before its joined text parts.
        anchors.append(_content_start(text))
    check_parts_placed(len(anchors), clips)
    refuse_raw_markers(text, markers.reserved, _RAW)
    pieces: list[Piece] = []
    cursor = 0
    for index, anchor in enumerate(anchors):
        pieces.append(text[cursor:anchor])
        pieces.append(index)
        cursor = anchor
    pieces.append(text[cursor:])
    return pieces


def _plain_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: AudioMarkers
) -> list[Piece]:
    text = "".join(s.text for s in segments if isinstance(s, TextSegment))
    pieces = split_at_placeholders([text], markers.audio, clips, lambda clip: (clip,))
    if pieces is not None:
        return pieces
    return insert_after_last([text], USER_TURN, range(len(clips)))


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
    markers = _MARKERS.configured(policy.options)
    check_clips(
        clips,
        audio_tokens=audio_tokens,
        max_frames=MAX_FRAMES,
        pooling="Audio Flamingo 3 pools them into {expected}",
    )
    if chat or any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips, markers)
    else:
        pieces = _plain_pieces(segments, clips, markers)
    return assemble(pieces, clips, markers, tokenizer)
