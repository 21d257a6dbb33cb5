"""Build the stand-in tokenizer of ``examples/models/voxtral-mini-3b-2507``.

mistralai/Voxtral-Mini-3B-2507 ships one tokenizer file, ``tekken.json`` (mistral-common's
Tekken format, read by transformers' ``MistralCommonBackend``), and no ``tokenizer.json``.
The stand-in writes two files that tokenize every text to the same ids:

* ``tekken.json``: the real format (version ``v7``, 1000 special ids, the ``audio``
  section that drives mistral-common's ``AudioEncoder``), with the 256 byte tokens as its
  only vocabulary (no merges), so ``AutoProcessor`` with mistral-common installed loads it
  offline and ``apply_chat_template`` runs end to end.
* ``tokenizer.json`` / ``tokenizer_config.json`` / ``chat_template.jinja``: a byte-level
  fast tokenizer with the same 1000 special tokens at the same ids, and a Jinja template
  rendering mistral-common's instruct format (``InstructTokenizerV7``) for text, so
  audiogate (which loads ``tokenizer.json`` with ``PreTrainedTokenizerFast``) and
  ``AutoProcessor`` without mistral-common (``TokenizersBackend``) load it too. The real
  checkpoint has no such file: it is an addition of this example.

Byte ``b`` is id ``1000 + b`` in both (Tekken requires ranks 0-255 to be the bytes in
order; the fast tokenizer maps GPT-2's byte-level character of ``b`` to the same id).

Special ids (``SPECIAL_TOKENS``): 0-19 are mistral-common's Tekken defaults
(``Tekkenizer.DEPRECATED_SPECIAL_TOKENS``); ``[AUDIO]`` 24 is ``VoxtralProcessor``'s
``audio_token_id`` and ``config.json``'s; ``[BEGIN_AUDIO]`` 25 and ``[TRANSCRIBE]`` 34 as
published Voxtral tekken readers use them; ``[ARGS]`` 32 and ``[CALL_ID]`` 33 follow
mistral-common's later Tekken files (not verified for this checkpoint); every other id is
the ``<SPECIAL_{id}>`` filler Tekken generates.

    python plugins/voxtral/tests/voxtral_tokenizer.py            # rewrite the files
    python plugins/voxtral/tests/voxtral_tokenizer.py --check    # exit 1 if stale
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

__all__ = [
    "AUDIO_CONFIG",
    "CHAT_TEMPLATE",
    "MODEL_DIR",
    "NUM_SPECIAL",
    "PATTERN",
    "SPECIAL_TOKENS",
    "build",
    "byte_ids",
    "main",
    "tekken_document",
]

MODEL_DIR: Final = (
    Path(__file__).resolve().parents[3] / "examples" / "models" / ("voxtral-mini-3b-2507")
)
NUM_SPECIAL: Final = 1000
_NAMED: Final = {
    0: "<unk>",
    1: "<s>",
    2: "</s>",
    3: "[INST]",
    4: "[/INST]",
    5: "[AVAILABLE_TOOLS]",
    6: "[/AVAILABLE_TOOLS]",
    7: "[TOOL_RESULTS]",
    8: "[/TOOL_RESULTS]",
    9: "[TOOL_CALLS]",
    10: "[IMG]",
    11: "<pad>",
    12: "[IMG_BREAK]",
    13: "[IMG_END]",
    14: "[PREFIX]",
    15: "[MIDDLE]",
    16: "[SUFFIX]",
    17: "[SYSTEM_PROMPT]",
    18: "[/SYSTEM_PROMPT]",
    19: "[TOOL_CONTENT]",
    24: "[AUDIO]",
    25: "[BEGIN_AUDIO]",
    32: "[ARGS]",
    33: "[CALL_ID]",
    34: "[TRANSCRIBE]",
}
#: All 1000 special tokens, string → id.
SPECIAL_TOKENS: Final = {_NAMED.get(i, f"<SPECIAL_{i}>"): i for i in range(NUM_SPECIAL)}
#: Tekken's pre-tokenizer pattern (irrelevant without merges; kept for the format).
PATTERN: Final = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: The ``audio`` section: 16 kHz, 12.5 tokens/s (8 frames of hop 160 per token), 128
#: mel bins, audio padded to multiples of 30 s (mistral-common ``AudioConfig``).
AUDIO_CONFIG: Final = {
    "sampling_rate": 16000,
    "frame_rate": 12.5,
    "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
    "chunk_length_s": 30.0,
}
#: mistral-common's ``InstructTokenizerV7`` chat format for text conversations: ``<s>``,
#: ``[SYSTEM_PROMPT]…[/SYSTEM_PROMPT]`` where a system message stands, ``[INST]…[/INST]``
#: around each run of user messages, an assistant run right-stripped of spaces and closed
#: by ``</s>``. As mistral-common's normalizer does, consecutive messages of one role are
#: one turn, and non-empty text (parts of a message, and messages of a run) is joined with
#: a blank line. Audio parts are encoded by the processor (``[BEGIN_AUDIO]`` + one
#: ``[AUDIO]`` per 80 ms, no blank line around them), never by this template; audiogate
#: hands it each audio part as a text part holding a sentinel, and its expansion drops the
#: blank lines this template joins a sentinel with.
CHAT_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{%- set ns = namespace(text=false) -%}"
    "{%- for message in messages -%}"
    "{%- set role = message['role'] -%}"
    "{%- if role not in ('system', 'user', 'assistant') -%}"
    "{{ raise_exception('Voxtral: roles are system, user and assistant') }}"
    "{%- endif -%}"
    "{%- set opens = loop.first or role == 'system' or loop.previtem['role'] != role -%}"
    "{%- set closes = loop.last or role == 'system' or loop.nextitem['role'] != role -%}"
    "{%- if opens -%}"
    "{%- set ns.text = false -%}"
    "{%- if role == 'system' -%}[SYSTEM_PROMPT]{%- elif role == 'user' -%}[INST]{%- endif -%}"
    "{%- endif -%}"
    "{%- set content = message['content'] -%}"
    "{%- set parts = [{'type': 'text', 'text': content}] if content is string else content -%}"
    "{%- set ns.out = '' -%}"
    "{%- for part in parts -%}"
    "{%- if part['type'] != 'text' -%}"
    "{{ raise_exception('Voxtral: the template renders text parts; audio parts are "
    "encoded by the processor') }}"
    "{%- endif -%}"
    "{%- if part['text'] -%}"
    "{%- if ns.text -%}{%- set ns.out = ns.out + '\n\n' -%}{%- endif -%}"
    "{%- set ns.out = ns.out + part['text'] -%}"
    "{%- set ns.text = true -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if role == 'assistant' and closes -%}{{ ns.out.rstrip(' ') }}{{ eos_token }}"
    "{%- else -%}{{ ns.out }}{%- endif -%}"
    "{%- if closes -%}"
    "{%- if role == 'system' -%}[/SYSTEM_PROMPT]{%- elif role == 'user' -%}[/INST]{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
_FILES: Final = ("chat_template.jinja", "tekken.json", "tokenizer.json", "tokenizer_config.json")


def _gpt2_byte_chars() -> dict[int, str]:
    """GPT-2's byte → printable character map (the ByteLevel pre-tokenizer's alphabet)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = dict(zip(printable, printable, strict=True))
    extra = 256
    for byte in range(256):
        if byte not in chars:
            chars[byte] = extra
            extra += 1
    return {byte: chr(code) for byte, code in chars.items()}


def byte_ids() -> dict[int, int]:
    """Byte value → its token id in both stand-ins (``1000 + b``)."""
    return {byte: NUM_SPECIAL + byte for byte in range(256)}


def tekken_document() -> dict[str, Any]:
    """The stand-in ``tekken.json`` as a JSON document."""
    ids = byte_ids()
    vocab = []
    for byte, token_id in sorted(ids.items(), key=lambda item: item[1]):
        raw = bytes([byte])
        vocab.append(
            {
                "rank": token_id - NUM_SPECIAL,
                "token_bytes": base64.b64encode(raw).decode("ascii"),
                "token_str": raw.decode("latin-1") if 32 <= byte < 127 else None,
            }
        )
    special = [
        {"rank": token_id, "token_str": token, "is_control": True}
        for token, token_id in SPECIAL_TOKENS.items()
    ]
    return {
        "config": {
            "pattern": PATTERN,
            "num_vocab_tokens": len(vocab),
            "default_vocab_size": NUM_SPECIAL + len(vocab),
            "default_num_special_tokens": NUM_SPECIAL,
            "version": "v7",
        },
        "vocab": vocab,
        "special_tokens": special,
        "audio": AUDIO_CONFIG,
    }


def build(out: Path) -> None:
    """Write the four tokenizer files into ``out``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    chars = _gpt2_byte_chars()
    vocab = {chars[byte]: token_id for byte, token_id in byte_ids().items()}
    vocab.update(SPECIAL_TOKENS)
    model = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    model.decoder = decoders.ByteLevel()
    model.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    )
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=model,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))
    text = json.dumps(tekken_document(), indent=2, ensure_ascii=False) + "\n"
    (out / "tekken.json").write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files are stale")
    args = parser.parse_args(argv)
    if not args.check:
        build(MODEL_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        stale = [
            name
            for name in _FILES
            if (Path(tmp) / name).read_bytes() != (MODEL_DIR / name).read_bytes()
        ]
    if stale:
        print(f"stale: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
