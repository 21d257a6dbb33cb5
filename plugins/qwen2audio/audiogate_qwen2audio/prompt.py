"""Prompt expansion: each clip becomes ``<|audio_bos|>`` + n × ``<|AUDIO|>`` + ``<|audio_eos|>``.

Two inputs reach :func:`expand_prompt`:

* **Chat** (the segments contain :class:`~audiogate.records.MediaSegment` s). The
  checkpoint's template (:data:`CHAT_TEMPLATE`) prints every audio part of a message as
  ``Audio {k}: <|audio_bos|><|AUDIO|><|audio_eos|>\\n`` (``k`` counted across the whole
  conversation) and text parts verbatim; it never prints an audio part's payload. The
  core (``audiogate.chat.flatten_messages``) turns each audio part into a text part
  holding its sentinel, which this template prints verbatim at the part's position, so
  each audio media segment arrives *bare* and is replaced by the block the
  template prints for an audio part, with its n ``<|AUDIO|>``: the same text the
  template renders for the unflattened message. A segment that arrives already
  *wrapped* (text ending in ``Audio k: <|audio_bos|>`` before it, text starting with
  ``<|audio_eos|>`` after it: a core that renders audio parts as parts and swaps the
  template-printed ``<|AUDIO|>`` for the sentinel) becomes just the n ``<|AUDIO|>``.
* **Plain** (text only). Content-digest references ``[audio:<sha256>]`` name the clips
  in order (:mod:`~audiogate_qwen2audio.references`); each becomes the template's block
  ``Audio {k}: <|audio_bos|>`` + n × ``<|AUDIO|>`` + ``<|audio_eos|>\\n``. Without any
  reference, the blocks of all clips, in order, are inserted right after the last
  ``<|im_start|>user\\n`` (where the template puts audio parts of a user turn), or at the
  start of the prompt when it has no user turn.

With no clips (a text-only chat request) the same rules leave the text as it is, and
refuse any reference. Raw ``<|AUDIO|>``, ``<|audio_bos|>`` or ``<|audio_eos|>`` in text
that no resolved source accounts for is refused (the Qwen2-Audio serving guide:
"Raw trained audio markers are refused without resolved sources"), as are image parts
(Qwen2-Audio has no image input).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from audiogate.errors import PlaceholderError
from audiogate.expansion import (
    AudioMarkers,
    Piece,
    assemble,
    check_clips,
    delimited_chat_pieces,
    insert_after_last,
    refuse_raw_markers,
)
from audiogate.policy import AudioPolicy
from audiogate.records import ClipSlot, ExpandedPrompt, MediaSegment, PromptSegment, TextSegment
from audiogate_qwen2audio.geometry import MAX_FRAMES, audio_tokens
from audiogate_qwen2audio.policy import (
    AUDIO_BOS_TOKEN,
    AUDIO_BOS_TOKEN_ID,
    AUDIO_EOS_TOKEN,
    AUDIO_EOS_TOKEN_ID,
    AUDIO_TOKEN,
    AUDIO_TOKEN_INDEX,
)
from audiogate_qwen2audio.references import find_references, match_references

__all__ = ["CHAT_TEMPLATE", "USER_TURN", "audio_block_prefix", "expand_prompt"]

#: Qwen/Qwen2-Audio-7B-Instruct's chat template (as transformers' ``Qwen2AudioProcessor``
#: ships it for checkpoints without one; the transformers copy also accepts
#: ``content['type'] == 'audio'`` parts and renders the same text).
CHAT_TEMPLATE: Final = (
    "{% set audio_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}"
    "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    "{% elif 'text' in content %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "<|im_start|>assistant\n"
    "{% endif %}"
)
#: Where a user turn's content starts in the rendered template.
USER_TURN: Final = "<|im_start|>user\n"


def audio_block_prefix(ordinal: int, bos: str = AUDIO_BOS_TOKEN) -> str:
    """The template's text before the ``ordinal``-th audio part's rows."""
    return f"Audio {ordinal}: {bos}"


_RAW: Final = (
    "{where} contains the raw trained audio marker {marker} with no resolved source; audio "
    "is placed by audio parts or [audio:<sha256>] references only"
)


#: The checkpoint's audio tokens (its policy's options may name others).
_MARKERS: Final = AudioMarkers(
    audio=AUDIO_TOKEN,
    audio_id=AUDIO_TOKEN_INDEX,
    bos=AUDIO_BOS_TOKEN,
    bos_id=AUDIO_BOS_TOKEN_ID,
    eos=AUDIO_EOS_TOKEN,
    eos_id=AUDIO_EOS_TOKEN_ID,
)


def _block(clip_index: int, markers: AudioMarkers) -> list[Piece]:
    """What the template prints for the ``clip_index``-th audio part, rows expanded."""
    return [audio_block_prefix(clip_index + 1, markers.bos), clip_index, f"{markers.eos}\n"]


def _chat_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: AudioMarkers
) -> list[Piece]:
    pieces = delimited_chat_pieces(
        segments,
        clips,
        markers,
        family="Qwen2-Audio",
        opening=lambda ordinal: audio_block_prefix(ordinal, markers.bos),
        closing=lambda after: f"{markers.eos}\n",
        raw_message=_RAW.replace("{where}", "the rendered prompt"),
    )
    if find_references([p for p in pieces if isinstance(p, str)]):
        raise PlaceholderError(
            "the prompt has audio parts and [audio:<sha256>] references; use one or the other"
        )
    return pieces


def _plain_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: AudioMarkers
) -> list[Piece]:
    texts = [s.text for s in segments if isinstance(s, TextSegment)]
    for text in texts:
        refuse_raw_markers(text, markers.reserved, _RAW.replace("{where}", "the prompt"))
    references = find_references(texts)
    if not references:
        blocks = [piece for index in range(len(clips)) for piece in _block(index, markers)]
        return insert_after_last(texts, USER_TURN, blocks)
    match_references(references, clips)
    by_segment: dict[int, list[int]] = {}
    for position, reference in enumerate(references):
        by_segment.setdefault(reference.segment, []).append(position)
    pieces: list[Piece] = []
    for segment_index, text in enumerate(texts):
        cursor = 0
        for position in by_segment.get(segment_index, []):
            reference = references[position]
            pieces.append(text[cursor : reference.start])
            pieces.extend(_block(position, markers))
            cursor = reference.stop
        pieces.append(text[cursor:])
    return pieces


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt:
    """Expand a chat-rendered or plain prompt (see the module docstring).

    :returns: the text with every clip's n ``<|AUDIO|>``; with a tokenizer also the ids
        and each clip's span of audio ids (the text tokenizes to exactly those ids).
    :raises PlaceholderError: a missing, extra, reordered, repeated, unknown or malformed
        audio position or reference, an image part, or a raw audio marker.
    :raises PolicyError: the tokenizer's audio token ids differ from the policy's.
    """
    markers = _MARKERS.configured(policy.options, audio_id="audio_token_index")
    check_clips(
        clips,
        audio_tokens=audio_tokens,
        max_frames=MAX_FRAMES,
        pooling="Qwen2-Audio pools them into {expected}",
    )
    if any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips, markers)
    else:
        pieces = _plain_pieces(segments, clips, markers)
    return assemble(pieces, clips, markers, tokenizer)
