"""Prompt expansion: each clip becomes ``<|begin_of_audio|>`` + n × ``<|pad|>`` +
``<|end_of_audio|>``.

``GlmAsrProcessor`` replaces each ``<|pad|>`` of the text by ``<|pad|>`` × the clip's rows.
Two inputs reach :func:`expand_prompt`:

* **Chat** (the segments come from chat messages). The checkpoint's template
  (:data:`CHAT_TEMPLATE`) prints each audio part of a message as
  ``<|begin_of_audio|><|pad|><|end_of_audio|><|user|>\\n`` at the part's position and
  text parts verbatim, then trims the message's content. The core turns each audio
  part into a text part holding its sentinel, which the template prints at the part's
  position, so each audio media segment is replaced by that block with its n
  ``<|pad|>``; where the block ends the message's content (nothing, or the next role
  token, follows it), the trim has removed its final newline, and so does the expansion.
  A segment that arrives already wrapped (text ending in ``<|begin_of_audio|>`` before
  it, text starting with ``<|end_of_audio|>`` after it: the rendered template handed to
  ``processor(text=...)``, which the processor expands as is) gets just its rows. Any
  other ``<|pad|>``, ``<|begin_of_audio|>`` or ``<|end_of_audio|>`` in chat text is
  refused.
* **Plain** (text only). Each ``<|pad|>`` is one clip's placeholder, in clip order, as
  the processor reads it; their number must equal the clips'. A placeholder already
  between ``<|begin_of_audio|>`` and ``<|end_of_audio|>`` gets just its rows; a bare one
  is wrapped in the two; any other use of the delimiters is refused. Without any
  placeholder, each clip's template block is inserted, in order, right after the last
  ``<|user|>\\n`` (where the template puts audio that opens a user turn), or at the start
  of the prompt when it has no user turn.

With no clips the text is kept as it is, and any of the three audio tokens in it is
refused. Image parts are refused (GLM-ASR has no image input).
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
    refuse_raw_markers,
)
from audiogate.policy import AudioPolicy
from audiogate.records import ClipSlot, ExpandedPrompt, MediaSegment, PromptSegment, TextSegment
from audiogate_glmasr.geometry import MAX_FRAMES, audio_tokens
from audiogate_glmasr.policy import (
    AUDIO_BOS_TOKEN,
    AUDIO_BOS_TOKEN_ID,
    AUDIO_EOS_TOKEN,
    AUDIO_EOS_TOKEN_ID,
    AUDIO_TOKEN,
    AUDIO_TOKEN_ID,
)

__all__ = ["CHAT_TEMPLATE", "ROLE_TOKENS", "USER_TURN", "expand_prompt"]

#: zai-org/GLM-ASR-Nano-2512's chat template, as transformers'
#: ``convert_glmasr_weights_to_hf.py`` writes it with the processor.
CHAT_TEMPLATE: Final = """{%- macro to_text(content) -%}
{%- if content is string -%}
{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for item in content -%}
{%- if item is mapping and item.type == 'text' and item.text is defined -%}
{{- item.text -}}
{%- elif item is mapping and (item.type == 'audio' or 'audio' in item) -%}
<|begin_of_audio|><|pad|><|end_of_audio|><|user|>
{% elif item is string -%}
{{- item -}}
{%- endif -%}
{%- endfor -%}
{%- else -%}
{{- content -}}
{%- endif -%}
{%- endmacro -%}
{%- for m in messages -%}
{%- if m.role == 'system' -%}
<|system|>
{{ to_text(m.content) | trim }}
{%- elif m.role == 'user' -%}
<|user|>
{{ to_text(m.content) | trim }}
{%- elif m.role == 'assistant' -%}
<|assistant|>
{{ to_text(m.content) | trim }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|>
{% endif -%}"""
#: What the template prints to open each message (and the generation prompt): text that
#: starts with one of them right after an audio block ends that block's message.
ROLE_TOKENS: Final = ("<|system|>", "<|user|>", "<|assistant|>")
#: Where a user turn's content starts in the rendered template.
USER_TURN: Final = "<|user|>\n"
#: What the template prints after an audio part's ``<|end_of_audio|>``.
_BLOCK_TAIL: Final = "<|user|>\n"


_RAW: Final = (
    "{where} contains the raw audio token {marker} with no clip behind it; in chat messages "
    "audio is placed by audio parts only"
)


#: The checkpoint's audio tokens (its policy's options may name others).
_MARKERS: Final = AudioMarkers(
    audio=AUDIO_TOKEN,
    audio_id=AUDIO_TOKEN_ID,
    bos=AUDIO_BOS_TOKEN,
    bos_id=AUDIO_BOS_TOKEN_ID,
    eos=AUDIO_EOS_TOKEN,
    eos_id=AUDIO_EOS_TOKEN_ID,
)


def _chat_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: AudioMarkers
) -> list[Piece]:
    def closing(after: PromptSegment | None) -> str:
        # The template trims each message's content: a block that ends it loses its "\n".
        ends_content = after is None or (
            isinstance(after, TextSegment) and after.text.startswith(ROLE_TOKENS)
        )
        return markers.eos + (_BLOCK_TAIL[:-1] if ends_content else _BLOCK_TAIL)

    return delimited_chat_pieces(
        segments,
        clips,
        markers,
        family="GLM-ASR",
        closing=closing,
        raw_message=_RAW.replace("{where}", "the rendered prompt"),
    )


def _plain_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: AudioMarkers
) -> list[Piece]:
    text = "".join(s.text for s in segments if isinstance(s, TextSegment))
    parts = text.split(markers.audio)
    placeholders = len(parts) - 1
    if not placeholders:
        refuse_raw_markers(text, markers.reserved, _RAW.replace("{where}", "the prompt"))
        at = text.rfind(USER_TURN)
        cut = at + len(USER_TURN) if at >= 0 else 0
        blocks: list[Piece] = []
        for index in range(len(clips)):
            blocks.extend((markers.bos, index, markers.eos + _BLOCK_TAIL))
        return [text[:cut], *blocks, text[cut:]]
    if placeholders != len(clips):
        raise PlaceholderError(
            f"the prompt has {placeholders} {markers.audio!r} placeholder(s) for "
            f"{len(clips)} audio clip(s); write one per clip, in order, or none"
        )
    pieces: list[Piece] = []
    wrapped = 0
    for index in range(placeholders):
        left, right = parts[index], parts[index + 1]
        opened, closed = left.endswith(markers.bos), right.startswith(markers.eos)
        if opened != closed:
            raise PlaceholderError(
                f"audio placeholder {index + 1} is half wrapped in {markers.bos}…{markers.eos}; "
                f"write {markers.audio!r} bare or as {markers.bos + markers.audio + markers.eos!r}"
            )
        wrapped += opened
        pieces.append(left if opened else left + markers.bos)
        pieces.append(index)
        if not closed:
            parts[index + 1] = markers.eos + right
    pieces.append(parts[-1])
    written = "".join(p for p in pieces if isinstance(p, str))
    for marker in (markers.bos, markers.eos):
        if written.count(marker) != len(clips):
            raise PlaceholderError(
                f"the prompt uses {marker!r} outside its {len(clips)} audio placeholder(s); "
                f"it may only delimit a {markers.audio!r}"
            )
    return pieces


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
    :returns: the text with every clip's n ``<|pad|>``; with a tokenizer also the ids and
        each clip's span of audio ids (the text tokenizes to exactly those ids).
    :raises PlaceholderError: a missing, extra, reordered or unknown audio position or
        placeholder, an image part, or an audio token typed where it places no clip.
    :raises PolicyError: the tokenizer's audio token ids differ from the policy's.
    """
    markers = _MARKERS.configured(policy.options)
    check_clips(
        clips,
        audio_tokens=audio_tokens,
        max_frames=MAX_FRAMES,
        pooling="GLM-ASR merges them into {expected}",
    )
    if chat or any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips, markers)
    else:
        pieces = _plain_pieces(segments, clips, markers)
    return assemble(pieces, clips, markers, tokenizer)
