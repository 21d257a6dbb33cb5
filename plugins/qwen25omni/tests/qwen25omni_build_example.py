"""Write (or ``--check``) the stand-in tokenizer of ``examples/models/qwen2.5-omni-7b/``.

Uses the project's generator (``examples/models/build_tokenizers.py``: its ``StandIn``
and ``build``); :data:`STAND_IN` is the entry to add to its list once families are merged.
``config.json`` and ``preprocessor_config.json`` are committed as written (their sources
are in ``docs/provenance.md``).

    python plugins/qwen25omni/tests/qwen25omni_build_example.py [--check]
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from audiogate_qwen25omni.prompt import CHAT_TEMPLATE

ROOT = Path(__file__).resolve().parents[3]
MODEL_DIR = ROOT / "examples" / "models" / "qwen2.5-omni-7b"

#: The real ids (``added_tokens.json`` of the checkpoint; the thinker config's ids agree).
SPECIAL_TOKENS = {
    "<|endoftext|>": 151_643,
    "<|im_start|>": 151_644,
    "<|im_end|>": 151_645,
    "<|AUDIO|>": 151_646,
    "<|audio_bos|>": 151_647,
    "<|audio_eos|>": 151_648,
    "<|vision_bos|>": 151_652,
    "<|vision_eos|>": 151_653,
    "<|vision_pad|>": 151_654,
    "<|IMAGE|>": 151_655,
    "<|VIDEO|>": 151_656,
}
#: The named tokens ``Qwen2_5OmniProcessor`` reads from its tokenizer.
EXTRA_SPECIAL_TOKENS = {
    "audio_token": "<|AUDIO|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
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
