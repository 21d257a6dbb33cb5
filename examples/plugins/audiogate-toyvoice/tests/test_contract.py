"""toyvoice passes audiogate's family contract suite (``audiogate.testing.contract``)."""

from __future__ import annotations

from pathlib import Path

from audiogate.testing.contract import FamilyContract

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoint"

#: A stand-in tokenizer: toyvoice's audio tokens at the ids its policy pins, plus the
#: turn markers of a minimal chat template.
SPECIAL_TOKENS = {
    "<|toy_audio_start|>": 1_000,
    "<|toy_audio|>": 1_001,
    "<|toy_audio_end|>": 1_002,
    "<|user|>": 1_003,
    "<|assistant|>": 1_004,
    "<|end|>": 1_005,
}
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class TestToyvoiceContract(FamilyContract):
    family = "toyvoice"
    sample_rates_hz = (16_000, 8_000, 44_100, 48_000)
    model_dir = CHECKPOINT  # configs only: the tokenizer is the stand-in below
    special_tokens = SPECIAL_TOKENS
    chat_template = CHAT_TEMPLATE
    user_placeholder = "<audio>"
