"""Prompt expansion: each clip becomes ``[BEGIN_AUDIO]`` + ``375 k`` × ``[AUDIO]``.

This is what mistral-common's ``InstructTokenizerV7`` (``VoxtralProcessor.
apply_chat_template``) writes for an audio chunk of a user message, at the chunk's place
among the message's text chunks: ``<s>[INST]`` + chunks in order + ``[/INST]``.

Two inputs reach :func:`expand_prompt`:

* **Chat** (the segments contain :class:`~audiogate.records.MediaSegment` s): the stand-in
  chat template (``examples/models/voxtral-mini-3b-2507``) renders the messages as
  mistral-common does, each audio part a sentinel where it stands; every bare audio
  segment becomes its clip's block. The template joins non-empty text of a turn with a
  blank line (:data:`JOIN`), sentinels included, where mistral-common joins only adjacent
  text (an audio chunk ends the run): the one join on each side of an audio segment is
  dropped.
* **Plain** (text only): Voxtral has no text placeholder (``VoxtralProcessor`` refuses
  ``[AUDIO]`` in text), so the blocks of all clips, in order, go right after the last
  ``[INST]`` (where an audio-first user turn puts them, as in the model card's examples and
  mistral-common's transcription request), else after a leading ``<s>``, else first.

Refused (``PlaceholderError``): raw ``[AUDIO]`` / ``[BEGIN_AUDIO]`` in text; image parts
(Voxtral has no image input); a system prompt (``[SYSTEM_PROMPT]``) in a request with audio,
which mistral-common's validator refuses before tokenizer version 13 (Voxtral's is v7).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
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
from audiogate_voxtral.geometry import TOKENS_PER_WINDOW, WINDOW_FRAMES
from audiogate_voxtral.policy import (
    AUDIO_TOKEN,
    AUDIO_TOKEN_ID,
    BEGIN_AUDIO_TOKEN,
    BEGIN_AUDIO_TOKEN_ID,
)

__all__ = ["BOS", "CONTROL_TOKENS", "JOIN", "SYSTEM_PROMPT", "USER_TURN", "expand_prompt"]

#: Where a user turn's content starts in the rendered prompt.
USER_TURN: Final = "[INST]"
BOS: Final = "<s>"
#: mistral-common (tokenizer v7) refuses a system message in a conversation with audio.
SYSTEM_PROMPT: Final = "[SYSTEM_PROMPT]"
#: What mistral-common's normalizer (and the template) puts between adjacent text.
JOIN: Final = "\n\n"
#: Control tokens a rendered Voxtral prompt holds (mistral-common's instruct format).
#: Text is split at them and each becomes its id, so that a tokenizer which encodes them
#: as plain text (mistral-common's ``MistralCommonBackend`` on the real ``tekken.json``)
#: gives the ids a fast tokenizer's added tokens give.
CONTROL_TOKENS: Final = (
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[TRANSCRIBE]",
)


@attrs.frozen
class _Markers:
    audio: str
    begin: str
    audio_id: int
    begin_id: int


def _markers(policy: AudioPolicy) -> _Markers:
    options = policy.options
    return _Markers(
        audio=str(options.get("audio_token", AUDIO_TOKEN)),
        begin=str(options.get("begin_audio_token", BEGIN_AUDIO_TOKEN)),
        audio_id=int(options.get("audio_token_id", AUDIO_TOKEN_ID)),
        begin_id=int(options.get("begin_audio_token_id", BEGIN_AUDIO_TOKEN_ID)),
    )


def _check_clips(clips: Sequence[ClipSlot]) -> None:
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"audio clip {index + 1} carries ordinal {clip.ordinal}; expected {index + 1}"
            )
        windows, rest = divmod(clip.frames, WINDOW_FRAMES)
        if rest or windows < 1 or clip.tokens != windows * TOKENS_PER_WINDOW:
            raise PlaceholderError(
                f"audio clip {clip.ordinal} claims {clip.tokens} tokens for {clip.frames} "
                f"frames; Voxtral gives {TOKENS_PER_WINDOW} per {WINDOW_FRAMES}-frame window"
            )


def _refuse(texts: Sequence[str], markers: _Markers, *, with_audio: bool) -> None:
    for text in texts:
        for marker in (markers.audio, markers.begin):
            if marker in text:
                raise PlaceholderError(
                    f"the prompt contains the raw audio marker {marker!r}; audio is placed by "
                    f"audio parts (chat) or by audiogate (plain prompts) only"
                )
        if with_audio and SYSTEM_PROMPT in text:
            raise PlaceholderError(
                "the prompt has a system prompt and audio; Voxtral's tokenizer (mistral-common "
                "v7) refuses system messages in a conversation with audio"
            )


# A prompt as pieces: text, or the index of a clip whose block goes there.
_Piece = str | int


def _chat_pieces(segments: Sequence[PromptSegment], clips: Sequence[ClipSlot]) -> list[_Piece]:
    pieces: list[_Piece] = []
    expected = 1
    for position, segment in enumerate(segments):
        if isinstance(segment, TextSegment):
            text = segment.text
            before = segments[position - 1] if position else None
            after = segments[position + 1] if position + 1 < len(segments) else None
            if isinstance(before, MediaSegment) and text.startswith(JOIN):
                text = text[len(JOIN) :]
            if isinstance(after, MediaSegment) and text.endswith(JOIN):
                text = text[: -len(JOIN)]
            pieces.append(text)
            continue
        if segment.kind != "audio":
            raise PlaceholderError(
                f"the prompt has a {segment.kind} part (ordinal {segment.ordinal}); "
                f"Voxtral accepts audio only"
            )
        if segment.ordinal != expected or segment.ordinal > len(clips):
            raise PlaceholderError(
                f"audio part {segment.ordinal} appears where audio part {expected} is expected; "
                f"the request has {len(clips)} audio clip(s), each placed once, in order"
            )
        pieces.append(segment.ordinal - 1)
        expected += 1
    if expected - 1 != len(clips):
        raise PlaceholderError(
            f"the prompt places {expected - 1} audio part(s) but the request has "
            f"{len(clips)} audio clip(s)"
        )
    return pieces


def _plain_pieces(segments: Sequence[PromptSegment], clips: Sequence[ClipSlot]) -> list[_Piece]:
    texts = [s.text for s in segments if isinstance(s, TextSegment)]
    blocks: list[_Piece] = list(range(len(clips)))
    for index in range(len(texts) - 1, -1, -1):
        at = texts[index].rfind(USER_TURN)
        if at >= 0:
            cut = at + len(USER_TURN)
            head, tail = texts[index][:cut], texts[index][cut:]
            return [*texts[:index], head, *blocks, tail, *texts[index + 1 :]]
    if texts and texts[0].startswith(BOS):
        return [BOS, *blocks, texts[0][len(BOS) :], *texts[1:]]
    return [*blocks, *texts]


def _token_id(tokenizer: Any, token: str) -> int | None:
    """``token``'s id if the tokenizer has it as one token (and maps the id back)."""
    try:
        value = tokenizer.convert_tokens_to_ids(token)
        back = tokenizer.convert_ids_to_tokens(value) if isinstance(value, int) else None
    except (KeyError, ValueError, IndexError):
        return None
    return value if isinstance(value, int) and back == token else None


def _check_tokenizer(tokenizer: Any, markers: _Markers) -> dict[str, int]:
    """The control tokens' ids; raises unless the audio markers have the policy's ids."""
    for token, expected in ((markers.audio, markers.audio_id), (markers.begin, markers.begin_id)):
        got = _token_id(tokenizer, token)
        if got != expected:
            raise PolicyError(
                f"the tokenizer maps {token!r} to {got}; the audio policy needs the single "
                f"id {expected}",
                file="tokenizer",
                value=got,
            )
    return {t: i for t in CONTROL_TOKENS if (i := _token_id(tokenizer, t)) is not None}


def _encode(tokenizer: Any, text: str, controls: Mapping[str, int]) -> list[int]:
    """``text`` encoded with each control token as its id and the text between encoded
    by the tokenizer (as a fast tokenizer splits at its added tokens)."""
    ids: list[int] = []
    cursor = 0
    pattern = _control_pattern(tuple(controls))
    for match in pattern.finditer(text) if controls else ():
        if match.start() > cursor:
            ids.extend(tokenizer.encode(text[cursor : match.start()], add_special_tokens=False))
        ids.append(controls[match.group(0)])
        cursor = match.end()
    if cursor < len(text):
        ids.extend(tokenizer.encode(text[cursor:], add_special_tokens=False))
    return [int(i) for i in ids]


@functools.lru_cache(maxsize=8)
def _control_pattern(tokens: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
) -> ExpandedPrompt:
    """Expand a chat-rendered or plain prompt (see the module docstring).

    :returns: the text with every clip's block; with a tokenizer also the ids (text
        pieces encoded one by one, as mistral-common encodes each text chunk) and each
        clip's span of ``[AUDIO]`` ids.
    :raises PlaceholderError: a missing, extra or reordered audio part, an image part, a
        raw audio marker, or a system prompt with audio.
    :raises PolicyError: the tokenizer's audio token ids differ from the policy's.
    """
    markers = _markers(policy)
    _check_clips(clips)
    texts = [s.text for s in segments if isinstance(s, TextSegment)]
    _refuse(texts, markers, with_audio=bool(clips))
    if any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips)
    else:
        pieces = _plain_pieces(segments, clips)

    # Adjacent text merged: the only split points are the audio blocks, where
    # mistral-common also starts a new chunk.
    merged: list[_Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        elif not (isinstance(piece, str) and not piece):
            merged.append(piece)
    text = "".join(
        p if isinstance(p, str) else markers.begin + markers.audio * clips[p].tokens for p in merged
    )
    if tokenizer is None:
        return ExpandedPrompt(
            input_ids=(), text=text, audio_spans=(), audio_token_id=markers.audio_id
        )

    controls = _check_tokenizer(tokenizer, markers)
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for piece in merged:
        if isinstance(piece, str):
            encoded = _encode(tokenizer, piece, controls)
            if markers.audio_id in encoded or markers.begin_id in encoded:
                raise PlaceholderError(
                    "prompt text tokenizes to an audio id outside the audio positions"
                )
            ids.extend(encoded)
        else:
            ids.append(markers.begin_id)
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
