"""The stand-in tokenizer of ``examples/models/glm-asr-nano-2512`` (and of the tests).

Byte-level text tokens, the checkpoint's special tokens at their ids and its chat template
(:data:`audiogate_glmasr.prompt.CHAT_TEMPLATE`). Verified: ``<|pad|>`` 59260 (``config.json``
``audio_token_id``, the processor's ``audio_token``) and the end-of-turn ids 59246, 59253,
59255 (``text_config.eos_token_id``). The names of those three and every other id are
**reconstructed**: GLM-4's special-token sequence (``<|endoftext|>``, ``[MASK]``, ``[gMASK]``,
``[sMASK]``, ``<sop>``, ``<eop>``, ``<|system|>``, ``<|user|>``, ``<|assistant|>``,
``<|observation|>``, image and video delimiters) anchored so that its end-of-turn triple
(``<|endoftext|>``, ``<|user|>``, ``<|observation|>``) lands on 59246, 59253, 59255, which
puts the video delimiters at 59258-59259, ``<|pad|>`` next, and the audio delimiters after
it (59261, 59262). No stored copy of the checkpoint's tokenizer was found.

    python plugins/glmasr/tests/glmasr_tokenizer.py          # rewrite
    python plugins/glmasr/tests/glmasr_tokenizer.py --check  # exit 1 if stale
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from audiogate_glmasr.prompt import CHAT_TEMPLATE

__all__ = ["MODEL_DIR", "SPECIAL_TOKENS", "TOKENIZER_FILES", "build", "main", "stale"]

MODEL_DIR: Final = Path(__file__).resolve().parents[3] / "examples" / "models" / "glm-asr-nano-2512"
TOKENIZER_FILES: Final = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json")

_GLM4: Final = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|pad|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
)
SPECIAL_TOKENS: Final = {token: 59_246 + offset for offset, token in enumerate(_GLM4)}


def build(save_to: Path | None = None) -> Any:
    """The stand-in tokenizer; also saved into ``save_to`` when given. Its pad token is
    its eos token, as the conversion sets it."""
    from audiogate.testing.tokenizers import build_stand_in_tokenizer

    return build_stand_in_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|endoftext|>",
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
