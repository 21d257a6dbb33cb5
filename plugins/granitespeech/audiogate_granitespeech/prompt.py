"""Prompt expansion: each clip's position becomes n × ``<|audio|>``.

``GraniteSpeechProcessor`` replaces the k-th ``<|audio|>`` of the text with
``audio_embed_sizes[k]`` copies of itself; the model card writes the placeholder at the
start of the user's turn (``"<|audio|>can you transcribe the speech into a written
format?"``), with no delimiters around it. Two inputs reach :func:`expand_prompt`:

* **Chat** (media segments). The checkpoint's template (Granite 3.3's, see
  :data:`CHAT_TEMPLATE`) prints string contents verbatim and cannot print a list of
  parts, so the core flattens each audio part into a text sentinel that arrives here as
  a bare :class:`~audiogate.records.MediaSegment`; it becomes the clip's n
  ``<|audio|>``, where the user would have typed the placeholder.
* **Plain** (text only). The text carries one ``<|audio|>`` per clip, in clip order, as
  the processor takes it; each becomes that clip's n ``<|audio|>``. Another non-zero
  count is refused (the processor would fail on it, or leave audio unplaced); a text
  without any gets the clips' runs, in order, at the start of its last user turn
  (after ``<|start_of_role|>user<|end_of_role|>``), or at its start without one.

A ``<|audio|>`` typed into chat text, or into a plain prompt of a request without audio,
is refused, as are image parts (Granite Speech has no image input).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

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
from audiogate_granitespeech.geometry import audio_tokens
from audiogate_granitespeech.policy import AUDIO_TOKEN, AUDIO_TOKEN_INDEX

__all__ = ["CHAT_TEMPLATE", "USER_TURN", "expand_prompt"]

#: Where a user turn's content starts in the rendered template.
USER_TURN: Final = "<|start_of_role|>user<|end_of_role|>"

#: The chat template of ibm-granite/granite-speech-3.3-2b's tokenizer: Granite 3.3
#: instruct's (system default with the date, tools, documents, thinking and controls).
#: Reconstructed from a stored copy of Granite 3.3's template (docs/provenance.md).
CHAT_TEMPLATE: Final = (
    "{# Alias tools -> available_tools #}\n"
    "{%- if tools and not available_tools -%}\n"
    "    {%- set available_tools = tools -%}\n"
    "{%- endif -%}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "     {%- set system_message = messages[0]['content'] %}\n"
    "     {%- set loop_messages = messages[1:] %}\n"
    " {%- else %}\n"
    '     {%- set system_message = "Knowledge Cutoff Date: April 2024.\\nToday\'s Date: " + '
    "strftime_now('%B %d, %Y') + \".\\nYou are Granite, developed by IBM.\" %}\n"
    "     {%- if available_tools and documents %}\n"
    '         {%- set system_message = system_message + " You are a helpful assistant with '
    "access to the following tools. When a tool is required to answer the user's query, "
    "respond only with <|tool_call|> followed by a JSON list of tools used. If a tool does "
    "not exist in the provided list of tools, notify the user that you do not have the "
    "ability to fulfill the request.\\nWrite the response to the user's input by strictly "
    "aligning with the facts in the provided documents. If the information needed to "
    "answer the question is not available in the documents, inform the user that the "
    'question cannot be answered based on the available data." %}\n'
    "     {%- elif available_tools %}\n"
    '         {%- set system_message = system_message + " You are a helpful assistant with '
    "access to the following tools. When a tool is required to answer the user's query, "
    "respond only with <|tool_call|> followed by a JSON list of tools used. If a tool does "
    "not exist in the provided list of tools, notify the user that you do not have the "
    'ability to fulfill the request." %}\n'
    "     {%- elif documents %}\n"
    "         {%- set system_message = system_message + \" Write the response to the user's "
    "input by strictly aligning with the facts in the provided documents. If the "
    "information needed to answer the question is not available in the documents, inform "
    'the user that the question cannot be answered based on the available data." %}\n'
    "    {%- elif thinking %}\n"
    '    {%- set system_message = system_message + " You are a helpful AI assistant.\\n'
    "Respond to every user query in a comprehensive and detailed way. You can write down "
    "your thoughts and reasoning process before responding. In the thought process, "
    "engage in a comprehensive cycle of analysis, summarization, exploration, "
    "reassessment, reflection, backtracing, and iteration to develop well-considered "
    "thinking process. In the response section, based on various attempts, explorations, "
    "and reflections from the thoughts section, systematically present the final "
    "solution that you deem correct. The response should summarize the thought process. "
    "Write your thoughts between <think></think> and write your response between "
    '<response></response> for each user query." %}\n'
    "     {%- else %}\n"
    '         {%- set system_message = system_message + " You are a helpful AI assistant." %}\n'
    "     {%- endif %}\n"
    "     {%- if 'citations' in controls and documents %}\n"
    "         {%- set system_message = system_message + '\\nUse the symbols <|start_of_cite|> "
    "and <|end_of_cite|> to indicate when a fact comes from a document in the search "
    "result, e.g <|start_of_cite|> {document_id: 1}my fact <|end_of_cite|> for a fact from "
    "document 1. Afterwards, list all the citations with their corresponding documents in "
    "an ordered list.' %}\n"
    "     {%- endif %}\n"
    "     {%- if 'hallucinations' in controls and documents %}\n"
    "         {%- set system_message = system_message + '\\nFinally, after the response is "
    "written, include a numbered list of sentences from the response with a corresponding "
    "risk value that are hallucinated and not based in the documents.' %}\n"
    "     {%- endif %}\n"
    "     {%- set loop_messages = messages %}\n"
    " {%- endif %}\n"
    " {{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\\n' }}\n"
    " {%- if available_tools %}\n"
    "     {{- '<|start_of_role|>available_tools<|end_of_role|>' }}\n"
    "     {{- available_tools | tojson(indent=4) }}\n"
    "     {{- '<|end_of_text|>\\n' }}\n"
    " {%- endif %}\n"
    " {%- if documents %}\n"
    "     {%- for document in documents %}\n"
    "         {{- '<|start_of_role|>document {\"document_id\": \"' + document['doc_id'] | string "
    "+ '\"}<|end_of_role|>\\n' }}\n"
    "         {{- document['text'] }}\n"
    "         {{- '<|end_of_text|>\\n' }}\n"
    "              {%- endfor %}\n"
    " {%- endif %}\n"
    " {%- for message in loop_messages %}\n"
    "     {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] "
    "+ '<|end_of_text|>\\n' }}\n"
    "     {%- if loop.last and add_generation_prompt %}\n"
    "         {{- '<|start_of_role|>assistant' }}\n"
    "             {%- if controls %}\n"
    "                 {{- ' ' + controls | tojson()}}\n"
    "             {%- endif %}\n"
    "         {{- '<|end_of_role|>' }}\n"
    "     {%- endif %}\n"
    " {%- endfor %}"
)


def _check_clips(clips: Sequence[ClipSlot]) -> None:
    for index, clip in enumerate(clips):
        if clip.ordinal != index + 1:
            raise PlaceholderError(
                f"audio clip {index + 1} carries ordinal {clip.ordinal}; expected {index + 1}"
            )
        expected = audio_tokens(clip.frames) if clip.frames >= 0 else None
        if expected is None or clip.tokens != expected or clip.tokens < 1:
            raise PlaceholderError(
                f"audio clip {clip.ordinal} claims {clip.tokens} tokens for {clip.frames} rows; "
                f"Granite Speech's projector gives {expected} (at least 1 row is needed)"
            )


# A prompt as pieces: text, or the index of a clip whose audio tokens go there.
_Piece = str | int


def _chat_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], audio: str
) -> list[_Piece]:
    pieces: list[_Piece] = []
    expected = 1
    for segment in segments:
        if isinstance(segment, TextSegment):
            if audio in segment.text:
                raise PlaceholderError(
                    f"the rendered prompt contains the raw audio placeholder {audio!r}; in "
                    f"chat messages audio is placed by audio parts only"
                )
            pieces.append(segment.text)
            continue
        if segment.kind != "audio":
            raise PlaceholderError(
                f"the prompt has a {segment.kind} part (ordinal {segment.ordinal}); "
                f"Granite Speech accepts audio only"
            )
        if segment.ordinal != expected or segment.ordinal > len(clips):
            raise PlaceholderError(
                f"audio part {segment.ordinal} appears where audio part {expected} is "
                f"expected; the request has {len(clips)} audio clip(s), each placed once, "
                f"in order"
            )
        pieces.append(segment.ordinal - 1)
        expected += 1
    if expected - 1 != len(clips):
        raise PlaceholderError(
            f"the prompt places {expected - 1} audio part(s) but the request has "
            f"{len(clips)} audio clip(s)"
        )
    return pieces


def _plain_pieces(
    segments: Sequence[PromptSegment], clips: Sequence[ClipSlot], audio: str
) -> list[_Piece]:
    text = "".join(s.text for s in segments if isinstance(s, TextSegment))
    parts = text.split(audio)
    if len(parts) == 1 and clips:
        # No placeholder at all: the clips go where the model card puts them, at the
        # start of the last user turn (or of the prompt, without one).
        at = text.rfind(USER_TURN)
        cut = at + len(USER_TURN) if at >= 0 else 0
        parts = [text[:cut], *([""] * (len(clips) - 1)), text[cut:]]
    if len(parts) - 1 != len(clips):
        raise PlaceholderError(
            f"the prompt has {len(parts) - 1} {audio!r} placeholder(s) for {len(clips)} audio "
            f"clip(s); write one {audio!r} per clip, in clip order"
        )
    pieces: list[_Piece] = [parts[0]]
    for index, part in enumerate(parts[1:]):
        pieces.extend((index, part))
    return pieces


#: Tokenizers already found to map the placeholder to its id, per (placeholder, id): a
#: gate expands with one tokenizer for its lifetime, so each is checked once.
_CHECKED: Final[weakref.WeakKeyDictionary[Any, set[tuple[str, int]]]] = weakref.WeakKeyDictionary()


def _check_tokenizer(tokenizer: Any, audio: str, audio_id: int) -> None:
    try:
        checked = _CHECKED.setdefault(tokenizer, set())
    except TypeError:  # not weakly referenceable: check every time
        checked = set()
    if (audio, audio_id) in checked:
        return
    _verify_tokenizer(tokenizer, audio, audio_id)
    checked.add((audio, audio_id))


#: Per tokenizer, the ids of recently encoded prompt pieces (a chat's template text and
#: system prompt repeat from request to request); at most :data:`_PIECES` pieces of at
#: most :data:`_PIECE_CHARS` characters each.
_ENCODED: Final[weakref.WeakKeyDictionary[Any, OrderedDict[str, tuple[int, ...]]]] = (
    weakref.WeakKeyDictionary()
)
_ENCODED_LOCK: Final = threading.Lock()
_PIECES: Final = 64
_PIECE_CHARS: Final = 4096


def _encoded(tokenizer: Any, piece: str) -> tuple[int, ...]:
    """``tokenizer.encode(piece, add_special_tokens=False)``, remembered for short pieces."""
    if len(piece) > _PIECE_CHARS:
        return tuple(int(i) for i in tokenizer.encode(piece, add_special_tokens=False))
    with _ENCODED_LOCK:
        try:
            cache = _ENCODED.setdefault(tokenizer, OrderedDict())
        except TypeError:  # not weakly referenceable
            cache = OrderedDict()
        found = cache.get(piece)
        if found is not None:
            cache.move_to_end(piece)
            return found
    ids = tuple(int(i) for i in tokenizer.encode(piece, add_special_tokens=False))
    with _ENCODED_LOCK:
        cache[piece] = ids
        if len(cache) > _PIECES:
            cache.popitem(last=False)
    return ids


def _verify_tokenizer(tokenizer: Any, audio: str, audio_id: int) -> None:
    got = tokenizer.convert_tokens_to_ids(audio)
    ids = list(tokenizer.encode(audio, add_special_tokens=False))
    if got != audio_id or ids != [audio_id]:
        raise PolicyError(
            f"the tokenizer maps {audio!r} to {got} (encodes it as {ids}); the audio policy "
            f"needs the single id {audio_id}",
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

    :returns: the text with every clip's n ``<|audio|>``; with a tokenizer also the ids
        and each clip's span of audio ids (the text tokenizes to exactly those ids).
    :raises PlaceholderError: a missing, extra, reordered or raw audio position, or an
        image part.
    :raises PolicyError: the tokenizer's ``<|audio|>`` id differs from the policy's.
    """
    audio = str(policy.options.get("audio_token", AUDIO_TOKEN))
    audio_id = int(policy.options.get("audio_token_index", AUDIO_TOKEN_INDEX))
    _check_clips(clips)
    if chat or any(isinstance(s, MediaSegment) for s in segments):
        pieces = _chat_pieces(segments, clips, audio)
    else:
        pieces = _plain_pieces(segments, clips, audio)
    text = "".join(p if isinstance(p, str) else audio * clips[p].tokens for p in pieces)
    if tokenizer is None:
        return ExpandedPrompt(input_ids=(), text=text, audio_spans=(), audio_token_id=audio_id)
    _check_tokenizer(tokenizer, audio, audio_id)
    # <|audio|> is an atomic special token, so the text around each run encodes alone to
    # what it encodes to within the whole text.
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for piece in pieces:
        if isinstance(piece, str):
            if piece:
                ids.extend(_encoded(tokenizer, piece))
            continue
        start = len(ids)
        ids.extend([audio_id] * clips[piece].tokens)
        spans.append((start, len(ids)))
    if sum(1 for i in ids if i == audio_id) != sum(clip.tokens for clip in clips):
        raise PlaceholderError(
            f"prompt text tokenizes to the audio id {audio_id} outside the audio positions"
        )
    tokens = [clip.tokens for clip in clips]
    if not check_span_count(spans, tokens):
        raise PlaceholderError(f"expanded audio spans {spans} do not match clip tokens {tokens}")
    return ExpandedPrompt(
        input_ids=tuple(ids), text=text, audio_spans=tuple(spans), audio_token_id=audio_id
    )
