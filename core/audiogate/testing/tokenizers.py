"""Small stand-in tokenizers with a family's real special tokens at their real ids.

Real checkpoints' tokenizers are large and cannot be downloaded here. A stand-in keeps
what audiogate depends on: byte-level text tokens (ids 0-255), the family's special
tokens at their real ids (a sparse vocabulary, so the file stays a few kilobytes), and
the checkpoint's chat template. Tokenizing text gives different ids from the real
tokenizer; special tokens, placeholders and template structure are identical.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["build_stand_in_tokenizer"]


def build_stand_in_tokenizer(
    special_tokens: Mapping[str, int],
    *,
    chat_template: str | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    pad_token: str | None = None,
    unk_token: str | None = None,
    save_to: str | Path | None = None,
) -> Any:
    """Build a ``transformers`` fast tokenizer (byte-level BPE, no merges).

    :param special_tokens: token string → its real id; each is matched whole in text. Byte
        tokens use ids 0-255 when no special id is below 256, else the lowest free ids.
    :param chat_template: the checkpoint's Jinja chat template.
    :param save_to: also ``save_pretrained`` into this directory.
    :returns: a ``PreTrainedTokenizerFast``.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    # Byte tokens take ids 0-255, unless a special token needs one of those (Gemma's
    # ``<pad>`` 0, ``<bos>`` 2, ``<end_of_turn>`` 106): then the bytes take the lowest ids
    # no special token uses, so every special token keeps its real id.
    taken = set(special_tokens.values())
    free = (i for i in itertools.count() if i not in taken)
    vocab = {char: next(free) for char in alphabet}
    vocab.update(special_tokens)
    model = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    model.decoder = decoders.ByteLevel()
    # Added tokens that already exist in the model vocabulary keep their model ids.
    model.add_special_tokens(
        [AddedToken(tok, special=True, normalized=False) for tok in special_tokens]
    )
    named = {
        "bos_token": bos_token,
        "eos_token": eos_token,
        "pad_token": pad_token,
        "unk_token": unk_token,
    }
    # transformers 5 leaves this constructor unannotated.
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=model, **{k: v for k, v in named.items() if v is not None}
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    if save_to is not None:
        tokenizer.save_pretrained(str(save_to))
    return tokenizer
