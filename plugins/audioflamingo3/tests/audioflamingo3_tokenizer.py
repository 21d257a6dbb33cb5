"""The stand-in tokenizer of ``examples/models/audio-flamingo-3-hf`` (and of the tests).

Byte-level text tokens, the Qwen2.5 special tokens of the checkpoint's text model at their
real ids (151643-151664, Qwen/Qwen2.5-7B's ``added_tokens_decoder``), ``<sound>`` at 151669
(``config.json`` ``audio_token_id``) and the processor's chat template
(:data:`audiogate_audioflamingo3.prompt.CHAT_TEMPLATE`). The ids 151665-151668, 151670 and
151671 of the real vocabulary (VILA's media and sentinel tokens) are not reproduced: no
stored copy of the checkpoint's tokenizer was found, and audiogate never emits them.

    python plugins/audioflamingo3/tests/audioflamingo3_tokenizer.py          # rewrite
    python plugins/audioflamingo3/tests/audioflamingo3_tokenizer.py --check  # exit 1 if stale
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from audiogate_audioflamingo3.prompt import CHAT_TEMPLATE

__all__ = ["MODEL_DIR", "SPECIAL_TOKENS", "TOKENIZER_FILES", "build", "main", "stale"]

MODEL_DIR: Final = (
    Path(__file__).resolve().parents[3] / "examples" / "models" / "audio-flamingo-3-hf"
)
TOKENIZER_FILES: Final = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json")

_QWEN25: Final = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
SPECIAL_TOKENS: Final = {
    **{token: 151_643 + offset for offset, token in enumerate(_QWEN25)},
    "<sound>": 151_669,
}


def build(save_to: Path | None = None) -> Any:
    """The stand-in tokenizer; also saved into ``save_to`` when given."""
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    return build_stand_in_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        save_to=save_to,
    )


def stale() -> list[str]:
    """Committed tokenizer files whose bytes differ from a fresh build."""
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        return [
            name
            for name in TOKENIZER_FILES
            if (Path(tmp) / name).read_bytes() != (MODEL_DIR / name).read_bytes()
        ]


def main(argv: list[str]) -> int:
    """Rewrite the committed files, or with ``--check`` report stale ones."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if "--check" in argv:
        problems = stale()
        for name in problems:
            print(f"stale: {name}", file=sys.stderr)
        return 1 if problems else 0
    build(MODEL_DIR)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
