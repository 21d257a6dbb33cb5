"""Prompt expansion: each clip → ``<|audio_start|>``, n × ``<|audio_pad|>``, ``<|audio_end|>``.

``Qwen3OmniMoeProcessor`` replaces each ``<|audio_pad|>`` of the text, in order, by as
many ``<|audio_pad|>`` as the clip has encoder rows; the checkpoint's chat template prints
every audio part as ``<|audio_start|><|audio_pad|><|audio_end|>``. Two inputs reach
:func:`expand_prompt`:

* **Chat** (the segments contain :class:`~audiogate.records.MediaSegment` s). The core
  turns each audio part into a text part holding its sentinel, which the template prints
  verbatim, so each audio segment arrives *bare* and becomes the template's block with its
  n ``<|audio_pad|>``: the text the processor makes of the unflattened message. A segment
  that arrives already *wrapped* (text ending in ``<|audio_start|>`` before it, text
  starting with ``<|audio_end|>`` after it) becomes just the n ``<|audio_pad|>``.
* **Plain** (text only). The user writes the template's block,
  ``<|audio_start|><|audio_pad|><|audio_end|>``, once per clip in clip order (exactly as
  many as there are clips); each is expanded. Without any block, the blocks of all clips,
  in order, go right after the last ``<|im_start|>user\\n`` (where the template puts audio
  parts that come first in a user turn), or at the start of a prompt with no user turn.

Any other ``<|audio_pad|>``, ``<|audio_start|>`` or ``<|audio_end|>`` in the text is
refused (it would reach the model as an audio position with no features behind it), as
are image and video parts (this family's audiogate plugin prepares audio only).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
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
from audiogate_qwen3omni.geometry import MAX_FRAMES, audio_tokens
from audiogate_qwen3omni.policy import (
    AUDIO_BOS_TOKEN,
    AUDIO_BOS_TOKEN_ID,
    AUDIO_EOS_TOKEN,
    AUDIO_EOS_TOKEN_ID,
    AUDIO_TOKEN,
    AUDIO_TOKEN_INDEX,
)

__all__ = ["CHAT_TEMPLATE", "USER_TURN", "expand_prompt"]

#: Qwen/Qwen3-Omni-30B-A3B-Instruct's chat template as far as it renders system, user and
#: assistant turns of text and media parts (reconstructed: no stored copy of the
#: checkpoint's ``chat_template.json`` was found; its tool-call and reasoning branches are
#: not reproduced, see docs/provenance.md). No default system turn; each content part in
#: order: text verbatim, audio ``<|audio_start|><|audio_pad|><|audio_end|>``, image and
#: video between ``<|vision_start|>`` and ``<|vision_end|>``.
CHAT_TEMPLATE: Final = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{{- '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{%- elif content['type'] == 'video' or 'video' in content %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
#: Where a user turn's content starts in the rendered template.
USER_TURN: Final = "<|im_start|>user\n"


@attrs.frozen
class _Markers:
    audio: str
    bos: str
    eos: str
    audio_id: int
    bos_id: int
    eos_id: int

    @property
    def reserved(self) -> tuple[str, ...]:
        return (self.audio, self.bos, self.eos)

    @property
    def block(self) -> str:
        """What the template prints for one audio part."""
        return self.bos + self.audio + self.eos


def _markers(policy: AudioPolicy) -> _Markers:
    options = policy.options
    return _Markers(
        audio=str(options.get("audio_token", AUDIO_TOKEN)),
        bos=str(options.get("audio_bos_token", AUDIO_BOS_TOKEN)),
        eos=str(options.get("audio_eos_token", AUDIO_EOS_TOKEN)),
        audio_id=int(options.get("audio_token_index", AUDIO_TOKEN_INDEX)),
        bos_id=int(options.get("audio_bos_token_id", AUDIO_BOS_TOKEN_ID)),
        eos_id=int(options.get("audio_eos_token_id", AUDIO_EOS_TOKEN_ID)),
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
                f"frames; Qwen3-Omni's audio encoder makes {expected} rows of them (at least 1 is "
                f"needed)"
            )


def _refuse_raw_markers(text: str, markers: Sequence[str], where: str) -> None:
    for marker in markers:
        if marker in text:
            raise PlaceholderError(
                f"{where} contains the raw audio marker {marker!r} where no clip is placed; "
                f"audio is placed by audio parts, or in a plain prompt by one "
                f"'<|audio_start|><|audio_pad|><|audio_end|>' per clip"
            )


# A prompt as pieces: text, or the index of a clip whose audio rows go there.
_Piece = str | int


def _block(clip_index: int, markers: _Markers) -> list[_Piece]:
    return [markers.bos, clip_index, markers.eos]


def _chat_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: _Markers
) -> list[_Piece]:
    pieces: list[_Piece] = []
    expected = 1
    for position, segment in enumerate(segments):
        if isinstance(segment, TextSegment):
            pieces.append(segment.text)
            continue
        if segment.kind != "audio":
            raise PlaceholderError(
                f"the prompt has a {segment.kind} part (ordinal {segment.ordinal}); the "
                f"Qwen3-Omni plugin prepares audio only"
            )
        if segment.ordinal != expected or segment.ordinal > len(clips):
            raise PlaceholderError(
                f"audio part {segment.ordinal} appears where audio part {expected} is expected; "
                f"the request has {len(clips)} audio clip(s), each placed once, in order"
            )
        before = segments[position - 1] if position else None
        after = segments[position + 1] if position + 1 < len(segments) else None
        opened = isinstance(before, TextSegment) and before.text.endswith(markers.bos)
        closed = isinstance(after, TextSegment) and after.text.startswith(markers.eos)
        if opened and closed:
            pieces.append(segment.ordinal - 1)
        elif not opened and not closed:
            pieces.extend(_block(segment.ordinal - 1, markers))
        else:
            raise PlaceholderError(
                f"audio part {segment.ordinal} is half wrapped in {markers.bos}…{markers.eos}; "
                f"expected either the bare part or the template's {markers.block!r}"
            )
        expected += 1
    if expected - 1 != len(clips):
        raise PlaceholderError(
            f"the prompt places {expected - 1} audio part(s) but the request has "
            f"{len(clips)} audio clip(s)"
        )
    text = "".join(p for p in pieces if isinstance(p, str))
    _refuse_raw_markers(text, (markers.audio,), "the rendered prompt")
    for marker in (markers.bos, markers.eos):
        if text.count(marker) != len(clips):
            raise PlaceholderError(
                f"the rendered prompt contains {text.count(marker)} {marker!r} for "
                f"{len(clips)} audio part(s); raw audio markers are refused"
            )
    return pieces


def _plain_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], markers: _Markers
) -> list[_Piece]:
    texts = [s.text for s in segments if isinstance(s, TextSegment)]
    for text in texts:
        _refuse_raw_markers(text.replace(markers.block, ""), markers.reserved, "the prompt")
    written = sum(text.count(markers.block) for text in texts)
    if written:
        if written != len(clips):
            raise PlaceholderError(
                f"the prompt has {written} {markers.block!r} for {len(clips)} audio clip(s); "
                f"write one per clip, in clip order"
            )
        pieces: list[_Piece] = []
        clip = 0
        for text in texts:
            parts = text.split(markers.block)
            for index, part in enumerate(parts):
                if index:
                    pieces.extend(_block(clip, markers))
                    clip += 1
                pieces.append(part)
        return pieces
    blocks = [piece for index in range(len(clips)) for piece in _block(index, markers)]
    for segment_index in range(len(texts) - 1, -1, -1):
        at = texts[segment_index].rfind(USER_TURN)
        if at >= 0:
            cut = at + len(USER_TURN)
            head, tail = texts[segment_index][:cut], texts[segment_index][cut:]
            return [*texts[:segment_index], head, *blocks, tail, *texts[segment_index + 1 :]]
    return [*blocks, *texts]


def _token_id(tokenizer: Any, token: str) -> int | None:
    value = tokenizer.convert_tokens_to_ids(token)
    return value if isinstance(value, int) else None


#: Tokenizers already found to map the markers to their ids (checked once per tokenizer
#: object and markers: the check encodes three tokens, which costs as much as a short
#: prompt). A tokenizer that cannot be weakly referenced is checked every time.
_CHECKED: Final[weakref.WeakKeyDictionary[Any, frozenset[_Markers]]] = weakref.WeakKeyDictionary()
_CHECKED_LOCK: Final = threading.Lock()


def _check_tokenizer(tokenizer: Any, markers: _Markers) -> None:
    with _CHECKED_LOCK, contextlib.suppress(TypeError):
        if markers in _CHECKED.get(tokenizer, frozenset()):
            return
    _check_tokenizer_ids(tokenizer, markers)
    with _CHECKED_LOCK, contextlib.suppress(TypeError):
        _CHECKED[tokenizer] = _CHECKED.get(tokenizer, frozenset()) | {markers}


def _check_tokenizer_ids(tokenizer: Any, markers: _Markers) -> None:
    for token, expected in (
        (markers.audio, markers.audio_id),
        (markers.bos, markers.bos_id),
        (markers.eos, markers.eos_id),
    ):
        got = _token_id(tokenizer, token)
        ids = tokenizer.encode(token, add_special_tokens=False)
        if got != expected or list(ids) != [expected]:
            raise PolicyError(
                f"the tokenizer maps {token!r} to {got} (encodes it as {list(ids)}); the "
                f"audio policy needs the single id {expected}",
                file="tokenizer",
                value=got,
            )


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt:
    """Expand a chat-rendered or plain prompt (see the module docstring).

    :returns: the text with every clip's n ``<|audio_pad|>``; with a tokenizer also the ids
        and each clip's span of audio ids (the text tokenizes to exactly those ids).
    :raises PlaceholderError: a missing, extra, reordered or repeated audio position, an
        image or video part, or a raw audio marker.
    :raises PolicyError: the tokenizer's audio token ids differ from the policy's.
    """
    markers = _markers(policy)
    _check_clips(clips)
    if any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips, markers)
    else:
        pieces = _plain_pieces(segments, clips, markers)

    # Merge adjacent text so the only split points are the audio runs, which sit between
    # the atomic special tokens <|audio_start|> and <|audio_end|>: encoding piece by piece
    # then equals encoding the whole text.
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
