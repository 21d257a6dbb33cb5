"""Write the stand-in tokenizer of ``examples/models/granite-speech-3.3-2b``.

The directory mirrors ibm-granite/granite-speech-3.3-2b: its (trimmed, reconstructed)
``config.json``, ``preprocessor_config.json`` and ``processor_config.json``, and a
stand-in tokenizer built here with Granite 3.3's special tokens and the checkpoint's
``<|audio|>`` at their real ids and its chat template (see ``docs/provenance.md``).

    python plugins/granitespeech/tests/build_example_model.py           # rewrite
    python plugins/granitespeech/tests/build_example_model.py --check   # exit 1 if stale
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from granitespeech_helpers import SPECIAL_TOKENS

from audiogate.testing.tokenizers import build_stand_in_tokenizer
from audiogate_granitespeech.prompt import CHAT_TEMPLATE

MODEL_DIR = Path(__file__).resolve().parents[3] / "examples" / "models" / "granite-speech-3.3-2b"
FILES = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json")


def build(target: Path) -> None:
    """Save the stand-in tokenizer's files into ``target``."""
    # Granite 3.3's tokenizer_config: bos = eos = pad = unk = <|end_of_text|>.
    build_stand_in_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<|end_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
        unk_token="<|end_of_text|>",
        save_to=target,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if not args.check:
        build(MODEL_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp))
        stale = [n for n in FILES if (Path(tmp) / n).read_bytes() != (MODEL_DIR / n).read_bytes()]
    if stale:
        print(f"stale: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
