"""Write (or ``--check``) the stand-in tokenizer of the Qwen3-Omni example directory
(``examples/models/qwen3-omni-30b-a3b-instruct/``).

Uses the project's generator (``examples/models/build_tokenizers.py``: its ``StandIn``
and ``build``); :data:`STAND_IN` is the entry to add to its list once families are merged.
``config.json`` and ``preprocessor_config.json`` are committed as written (their sources
are in ``docs/provenance.md``).

    python plugins/qwen3omni/tests/qwen3omni_build_example.py [--check]
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from audiogate_qwen3omni.prompt import CHAT_TEMPLATE

ROOT = Path(__file__).resolve().parents[3]
MODEL_DIR = ROOT / "examples" / "models" / "qwen3-omni-30b-a3b-instruct"

#: The real ids: Qwen3's added tokens 151643-151668 and the Omni tokens after them, as
#: ``config.json`` numbers them (``audio_start/end_token_id`` 151669/151670,
#: ``tts_pad/bos/eos_token_id`` 151671-151673, ``audio_token_id`` 151675). The
#: non-special added tokens (``<tool_call>``, ``<think>``, FIM) are left out.
SPECIAL_TOKENS = {
    "<|endoftext|>": 151_643,
    "<|im_start|>": 151_644,
    "<|im_end|>": 151_645,
    "<|object_ref_start|>": 151_646,
    "<|object_ref_end|>": 151_647,
    "<|box_start|>": 151_648,
    "<|box_end|>": 151_649,
    "<|quad_start|>": 151_650,
    "<|quad_end|>": 151_651,
    "<|vision_start|>": 151_652,
    "<|vision_end|>": 151_653,
    "<|vision_pad|>": 151_654,
    "<|image_pad|>": 151_655,
    "<|video_pad|>": 151_656,
    "<|audio_start|>": 151_669,
    "<|audio_end|>": 151_670,
    "<tts_pad>": 151_671,
    "<tts_text_bos>": 151_672,
    "<tts_text_eod>": 151_673,
    "<tts_text_bos_single>": 151_674,
    "<|audio_pad|>": 151_675,
}
#: The named tokens ``Qwen3OmniMoeProcessor`` reads from its tokenizer.
EXTRA_SPECIAL_TOKENS = {
    "audio_token": "<|audio_pad|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
}


def generator() -> ModuleType:
    """``examples/models/build_tokenizers.py`` as a module."""
    path = ROOT / "examples" / "models" / "build_tokenizers.py"
    spec = importlib.util.spec_from_file_location("_build_tokenizers", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def stand_in(module: ModuleType) -> Any:
    """The ``StandIn`` record of this example."""
    return module.StandIn(
        directory=MODEL_DIR.name,
        special_tokens=SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=EXTRA_SPECIAL_TOKENS,
    )


def main(argv: list[str]) -> int:
    module = generator()
    spec = stand_in(module)
    if "--check" not in argv:
        module.build(spec, MODEL_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        module.build(spec, Path(tmp))
        stale = [
            name
            for name in module.TOKENIZER_FILES
            if (Path(tmp) / name).exists()
            and (Path(tmp) / name).read_bytes() != (MODEL_DIR / name).read_bytes()
        ]
    for name in stale:
        print(f"stale: {MODEL_DIR.name}/{name}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
