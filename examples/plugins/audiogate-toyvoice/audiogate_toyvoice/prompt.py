"""toyvoice's prompt expansion: each clip becomes ``<|toy_audio_start|>``, one
``<|toy_audio|>`` per token, ``<|toy_audio_end|>``.

Two ways in, as the core hands them over:

* chat segments: the rendered chat template with one :class:`MediaSegment` per audio
  part; each must be audio, in order 1..n, one per clip;
* a plain prompt (text only): the user marks clips with ``<audio>``, one per clip in
  order, or not at all (then every clip goes before the text).

Both fail closed with :class:`~audiogate.errors.PlaceholderError`: a count that does not
match the clips, an image, an out-of-order part, ``<audio>`` typed into chat text, or the
model's own audio tokens typed into the text (they would become audio positions no clip
fills).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from audiogate.errors import PlaceholderError, PolicyError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipSlot, ExpandedPrompt, MediaSegment, PromptSegment, TextSegment
from audiogate_toyvoice.policy import AUDIO_END_TOKEN, AUDIO_START_TOKEN, AUDIO_TOKEN

__all__ = ["USER_PLACEHOLDER", "expand_prompt"]

#: What a plain prompt writes where a clip goes.
USER_PLACEHOLDER: Final = "<audio>"
_RESERVED: Final = (AUDIO_START_TOKEN, AUDIO_TOKEN, AUDIO_END_TOKEN)

#: Text, or the zero-based index of the clip whose block goes there.
_Piece = str | int


def _refuse_reserved(text: str) -> None:
    for token in _RESERVED:
        if token in text:
            raise PlaceholderError(
                f"the prompt text contains the reserved audio token {token!r}; mark a clip "
                f"with an audio part (chat) or {USER_PLACEHOLDER!r} (plain prompt)"
            )


def _chat_pieces(segments: Sequence[PromptSegment], clips: Sequence[ClipSlot]) -> list[_Piece]:
    pieces: list[_Piece] = []
    expected = 1
    for segment in segments:
        if isinstance(segment, TextSegment):
            _refuse_reserved(segment.text)
            if USER_PLACEHOLDER in segment.text:
                raise PlaceholderError(
                    f"the chat text contains {USER_PLACEHOLDER!r}; in chat messages a clip is "
                    "an audio part, and a placeholder typed as text has no clip behind it"
                )
            pieces.append(segment.text)
            continue
        if segment.kind != "audio":
            raise PlaceholderError(
                f"the prompt has an {segment.kind} part (ordinal {segment.ordinal}); "
                f"toyvoice takes audio only"
            )
        if segment.ordinal != expected or expected > len(clips):
            raise PlaceholderError(
                f"audio part {segment.ordinal} appears where part {expected} is expected; "
                f"the request has {len(clips)} clip(s), each placed once, in order"
            )
        pieces.append(segment.ordinal - 1)
        expected += 1
    if expected - 1 != len(clips):
        raise PlaceholderError(
            f"the prompt places {expected - 1} audio part(s) for {len(clips)} clip(s)"
        )
    return pieces


def _plain_pieces(segments: Sequence[PromptSegment], clips: Sequence[ClipSlot]) -> list[_Piece]:
    text = "".join(s.text for s in segments if isinstance(s, TextSegment))
    _refuse_reserved(text)
    parts = text.split(USER_PLACEHOLDER)
    marked = len(parts) - 1
    if marked == 0:
        return [*range(len(clips)), text]
    if marked != len(clips):
        raise PlaceholderError(
            f"the prompt has {marked} {USER_PLACEHOLDER!r} placeholder(s) for {len(clips)} "
            f"clip(s); write one per clip, or none"
        )
    pieces: list[_Piece] = [parts[0]]
    for index, after in enumerate(parts[1:]):
        pieces.extend((index, after))
    return pieces


def _token_ids(policy: AudioPolicy, tokenizer: Any) -> tuple[int, int, int]:
    ids = (
        int(policy.options["audio_start_token_id"]),
        int(policy.options["audio_token_id"]),
        int(policy.options["audio_end_token_id"]),
    )
    for token, expected in zip(_RESERVED, ids, strict=True):
        encoded = list(tokenizer.encode(token, add_special_tokens=False))
        if encoded != [expected]:
            raise PolicyError(
                f"the tokenizer encodes {token!r} as {encoded}; the audio policy needs the "
                f"single id {expected}",
                file="tokenizer",
                value=encoded,
            )
    return ids


def expand_prompt(
    policy: AudioPolicy,
    segments: Sequence[PromptSegment],
    clips: Sequence[ClipSlot],
    tokenizer: Any,
    *,
    chat: bool,
) -> ExpandedPrompt:
    """Expand ``segments`` for ``clips`` (see the module docstring).

    :param tokenizer: a tokenizer with the three audio tokens as single ids, or ``None``
        for the text form only.
    :param chat: the request came as chat messages. toyvoice needs no more than its
        segments: a chat's clips arrive as media segments, and ``<audio>`` typed into a
        chat without them has no clip and is refused as a count mismatch.
    :raises PlaceholderError: the placeholders do not match the clips.
    :raises PolicyError: the tokenizer's audio token ids differ from the policy's.
    """
    if any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips)
    else:
        pieces = _plain_pieces(segments, clips)

    def block(index: int) -> str:
        return AUDIO_START_TOKEN + AUDIO_TOKEN * clips[index].tokens + AUDIO_END_TOKEN

    text = "".join(p if isinstance(p, str) else block(p) for p in pieces)
    audio_id = int(policy.options["audio_token_id"])
    if tokenizer is None:
        return ExpandedPrompt(input_ids=(), text=text, audio_spans=(), audio_token_id=audio_id)
    start_id, audio_id, end_id = _token_ids(policy, tokenizer)
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for piece in pieces:
        if isinstance(piece, str):
            ids.extend(tokenizer.encode(piece, add_special_tokens=False))
            continue
        ids.append(start_id)
        spans.append((len(ids), len(ids) + clips[piece].tokens))
        ids.extend([audio_id] * clips[piece].tokens)
        ids.append(end_id)
    return ExpandedPrompt(
        input_ids=tuple(ids), text=text, audio_spans=tuple(spans), audio_token_id=audio_id
    )
