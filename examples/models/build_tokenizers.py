"""Regenerate the stand-in tokenizers of the bundled example model directories.

Each directory under ``examples/models/`` mirrors one real checkpoint: its real
(trimmed) ``config.json``, its real processor files, and a small stand-in tokenizer
built here. The stand-in has byte-level text tokens, the family's special tokens at
their real ids and the checkpoint's real chat template, so ``AutoTokenizer`` loads it
offline and ``apply_chat_template`` renders exactly what the real checkpoint renders.
Tokenizing plain text gives other ids than the real tokenizer (bytes, not BPE merges).

The tables and templates below are the only input; ``examples/models/README.md`` gives
the source of every id and template. Running the script twice writes identical files.

    python examples/models/build_tokenizers.py            # rewrite the committed files
    python examples/models/build_tokenizers.py --check    # exit 1 if they are stale
    python examples/models/build_tokenizers.py --out DIR  # write DIR/<name>/... instead
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MODELS_DIR", "STAND_INS", "TOKENIZER_FILES", "StandIn", "build", "build_all", "main"]

MODELS_DIR = Path(__file__).resolve().parent

#: What ``save_pretrained`` of a stand-in writes (transformers 5.24); nothing else is touched.
TOKENIZER_FILES = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class StandIn:
    """One stand-in tokenizer.

    :param directory: the model directory name under ``examples/models/``.
    :param special_tokens: token → its real id in the real tokenizer.
    :param chat_template: the real checkpoint's chat template, verbatim.
    :param extra_special_tokens: named model-specific tokens (``audio_token`` …) the
        real ``tokenizer_config.json`` declares; transformers processors read them.
    """

    directory: str
    special_tokens: Mapping[str, int]
    chat_template: str
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    unk_token: str | None = None
    extra_special_tokens: Mapping[str, str] = field(default_factory=dict)
    #: Ordinary (not special) tokens of the real vocabulary kept at their real ids and
    #: matched whole, longest first: Gemma's newline runs, which vLLM looks up by text.
    text_tokens: Mapping[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# microsoft/Phi-4-multimodal-instruct @ 93f923e1a7727d1c4f446756212d9d3e8fcc5d81
# (remote-code Phi4MMProcessor). tokenizer_config.json: bos = eos = pad = unk =
# <|endoftext|>; the chat template concatenates message['content'] as a string.

PHI4MM_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message"
    " and message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content']"
    " + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' +"
    " message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if"
    " add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

PHI4_ROLE_TOKENS = {
    "<|endoftext|>": 199_999,
    "<|assistant|>": 200_019,
    "<|end|>": 200_020,
    "<|user|>": 200_021,
    "<|system|>": 200_022,
    "<|tool|>": 200_023,
    "<|/tool|>": 200_024,
}

PHI4MM = StandIn(
    directory="phi-4-multimodal-instruct",
    special_tokens={
        **PHI4_ROLE_TOKENS,
        "<|endoftext10|>": 200_010,  # image placeholder the processor expands
        "<|endoftext11|>": 200_011,  # audio placeholder the processor expands
    },
    chat_template=PHI4MM_TEMPLATE,
    bos_token="<|endoftext|>",
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    unk_token="<|endoftext|>",
)

# ---------------------------------------------------------------------------------------
# The transformers-native conversion (Phi4MultimodalProcessor; hub refs/pr/70, refs/pr/94).
# Template and extra_special_tokens as transformers' own Phi4Multimodal processor test
# pins them (tests/models/phi4_multimodal/test_processor_phi4_multimodal.py).

PHI4_NATIVE_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' }}{% if message['content']"
    " is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}{%"
    " if content['type'] == 'image' %}{{ '<|image|>' }}{% elif content['type'] == 'audio' %}{{"
    " '<|audio|>' }}{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{%"
    " endfor %}{% endif %}{% if message['role'] == 'system' and 'tools' in message and"
    " message['tools'] is not none %}{{ '<|tool|>' + message['tools'] + '<|/tool|>' +"
    " '<|end|>' }}{% endif %}{{ '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{"
    " '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

PHI4_NATIVE = StandIn(
    directory="phi-4-multimodal-instruct-hf",
    special_tokens={
        **PHI4_ROLE_TOKENS,
        "<|image|>": 200_010,  # Phi4MultimodalVisionConfig.image_token_id
        "<|audio|>": 200_011,  # Phi4MultimodalAudioConfig.audio_token_id
    },
    chat_template=PHI4_NATIVE_TEMPLATE,
    bos_token="<|endoftext|>",
    eos_token="<|endoftext|>",
    pad_token="<|endoftext|>",
    unk_token="<|endoftext|>",
    extra_special_tokens={"image_token": "<|image|>", "audio_token": "<|audio|>"},
)

# ---------------------------------------------------------------------------------------
# google/gemma-3n-E4B-it. The template is the checkpoint's chat_template verbatim
# (newlines inside the Jinja string literals are real newline characters).

GEMMA3N_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'audio' -%}
                {{ '<audio_soft_token>' }}
            {%- elif item['type'] == 'image' -%}
                {{ '<image_soft_token>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

GEMMA3N = StandIn(
    directory="gemma-3n-e4b-it",
    special_tokens={
        "<pad>": 0,
        "<eos>": 1,
        "<bos>": 2,
        "<unk>": 3,
        "<start_of_turn>": 105,
        "<end_of_turn>": 106,
        "<start_of_image>": 255_999,  # boi_token_id
        "<start_of_audio>": 256_000,  # boa_token_id
        "<end_of_image>": 262_144,  # eoi_token_id
        "<image_soft_token>": 262_145,  # image_token_id
        "<end_of_audio>": 262_272,  # eoa_token_id
        "<audio_soft_token>": 262_273,  # audio_token_id
    },
    chat_template=GEMMA3N_TEMPLATE,
    bos_token="<bos>",
    eos_token="<eos>",
    pad_token="<pad>",
    unk_token="<unk>",
    # The real SentencePiece vocabulary has a token per newline run; vLLM's Gemma 3n
    # processor looks up "\n" ... "\n\n\n\n" to merge the blank lines around an audio
    # block, and the real tokenizer gives "user\n" + "\n\n" as one "\n\n\n".
    text_tokens={"\n": 107, "\n\n": 108, "\n\n\n": 109, "\n\n\n\n": 110},
    extra_special_tokens={
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "boi_token": "<start_of_image>",
        "eoa_token": "<end_of_audio>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    },
)

# ---------------------------------------------------------------------------------------
# Qwen/Qwen2-Audio-7B-Instruct. The hub ships no processor chat template, so
# Qwen2AudioProcessor applies its default_chat_template (transformers 5.24.0,
# models/qwen2_audio/processing_qwen2_audio.py); that is the template kept here.

QWEN2_AUDIO_TEMPLATE = (
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
    "{% if 'audio' in content or 'audio_url' in content or message['type'] == 'audio'"
    " or content['type'] == 'audio' %}"
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

QWEN2_AUDIO = StandIn(
    directory="qwen2-audio-7b-instruct",
    special_tokens={
        "<|endoftext|>": 151_643,
        "<|im_start|>": 151_644,
        "<|im_end|>": 151_645,
        "<|AUDIO|>": 151_646,  # audio_token_index
        "<|audio_bos|>": 151_647,
        "<|audio_eos|>": 151_648,
    },
    chat_template=QWEN2_AUDIO_TEMPLATE,
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
)

STAND_INS: tuple[StandIn, ...] = (PHI4MM, PHI4_NATIVE, GEMMA3N, QWEN2_AUDIO)


# ---------------------------------------------------------------------------------------


def build(spec: StandIn, save_to: Path) -> list[Path]:
    """Write the stand-in tokenizer files of ``spec`` into ``save_to``.

    :returns: the files written, sorted.
    """
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    save_to.mkdir(parents=True, exist_ok=True)
    tokenizer = build_stand_in_tokenizer(
        {**spec.special_tokens, **spec.text_tokens},
        chat_template=spec.chat_template,
        bos_token=spec.bos_token,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        unk_token=spec.unk_token,
    )
    if spec.text_tokens:
        tokenizer = _as_text_tokens(tokenizer, spec)
    if spec.extra_special_tokens:
        # What ``extra_special_tokens={...}`` in the real tokenizer_config.json sets on
        # load (transformers 5.24); the helper has no parameter for named tokens.
        tokenizer._set_model_specific_special_tokens(dict(spec.extra_special_tokens))
    tokenizer.save_pretrained(str(save_to))
    return sorted(save_to / name for name in TOKENIZER_FILES if (save_to / name).exists())


def _as_text_tokens(tokenizer: Any, spec: StandIn) -> Any:
    """``tokenizer`` with ``spec.text_tokens`` turned into ordinary added tokens (the
    helper adds every token as special, which decoding with ``skip_special_tokens``
    would drop)."""
    import json

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    document = json.loads(tokenizer.backend_tokenizer.to_str())
    for added in document["added_tokens"]:
        if added["content"] in spec.text_tokens:
            added["special"] = False
    named = {
        "bos_token": spec.bos_token,
        "eos_token": spec.eos_token,
        "pad_token": spec.pad_token,
        "unk_token": spec.unk_token,
    }
    rebuilt = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer.from_str(json.dumps(document)),
        **{k: v for k, v in named.items() if v is not None},
    )
    rebuilt.chat_template = spec.chat_template
    return rebuilt


def build_all(root: Path, specs: Sequence[StandIn] = STAND_INS) -> dict[str, list[Path]]:
    """Build every stand-in into ``root/<directory>``."""
    return {spec.directory: build(spec, root / spec.directory) for spec in specs}


def _stale(specs: Sequence[StandIn]) -> list[str]:
    """Files whose committed bytes differ from a fresh build (or that are missing)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            fresh_dir = Path(tmp) / spec.directory
            build(spec, fresh_dir)
            for name in TOKENIZER_FILES:
                fresh, committed = fresh_dir / name, MODELS_DIR / spec.directory / name
                if fresh.exists() != committed.exists() or (
                    fresh.exists() and fresh.read_bytes() != committed.read_bytes()
                ):
                    problems.append(f"{spec.directory}/{name}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only report stale files")
    parser.add_argument("--out", type=Path, default=None, help="write here, not in place")
    args: Any = parser.parse_args(argv)
    # Offline by construction: nothing here may reach the Hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        stale = _stale(STAND_INS)
        for name in stale:
            print(f"stale: {name}", file=sys.stderr)
        return 1 if stale else 0
    written = build_all(args.out if args.out is not None else MODELS_DIR)
    for directory, files in written.items():
        print(f"{directory}: {', '.join(f.name for f in files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
