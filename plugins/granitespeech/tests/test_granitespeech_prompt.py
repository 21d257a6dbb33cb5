"""Prompt expansion: chat audio parts and plain ``<|audio|>`` placeholders, against the
processor's own expansion and the refusals."""

from __future__ import annotations

import attrs
import pytest
from granitespeech_helpers import SYSTEM_PROMPT

from audiogate.errors import PlaceholderError, PolicyError
from audiogate.records import ClipSlot, MediaSegment, TextSegment
from audiogate_granitespeech.geometry import audio_tokens
from audiogate_granitespeech.prompt import expand_prompt

pytest.importorskip("transformers")

AUDIO = "<|audio|>"
AUDIO_ID = 49_159


def slots(*rows: int) -> list[ClipSlot]:
    return [
        ClipSlot(ordinal=i + 1, tokens=audio_tokens(r), frames=r, sha256=f"{i:064x}")
        for i, r in enumerate(rows)
    ]


def render(tokenizer, user: str) -> str:
    return str(
        tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            tokenize=False,
            add_generation_prompt=True,
        )
    )


def test_the_template_renders_the_model_cards_prompt(tokenizer):
    assert render(tokenizer, f"{AUDIO}hi") == (
        f"<|start_of_role|>system<|end_of_role|>{SYSTEM_PROMPT}<|end_of_text|>\n"
        f"<|start_of_role|>user<|end_of_role|>{AUDIO}hi<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>"
    )


def test_plain_placeholders_expand_as_the_processor_does(policy, tokenizer, processor):
    import numpy as np

    rendered = render(tokenizer, f"{AUDIO}first, {AUDIO}second")
    waves = [np.full(n, 0.1, dtype=np.float32) for n in (16_000, 4_000)]
    reference = processor(rendered, waves, return_tensors="np")
    expanded = expand_prompt(policy, [TextSegment(rendered)], slots(50, 12), tokenizer)
    assert list(expanded.input_ids) == reference["input_ids"][0].tolist()
    assert [b - a for a, b in expanded.audio_spans] == [12, 3]
    assert expanded.text == rendered.replace(AUDIO, AUDIO * 12, 1).replace(
        f", {AUDIO}", f", {AUDIO * 3}"
    )


def test_chat_parts_become_runs_where_the_part_was(policy, tokenizer):
    segments = [TextSegment("a"), MediaSegment("audio", 1), TextSegment("b")]
    segments += [MediaSegment("audio", 2), TextSegment("c")]
    expanded = expand_prompt(policy, segments, slots(1, 16), tokenizer, chat=True)
    assert expanded.text == f"a{AUDIO * 3}b{AUDIO * 6}c"


def test_without_placeholders_the_clips_open_the_last_user_turn(policy, tokenizer):
    rendered = render(tokenizer, "Transcribe.")
    expanded = expand_prompt(policy, [TextSegment(rendered)], slots(15, 15), None)
    turn = "<|start_of_role|>user<|end_of_role|>"
    assert expanded.text == rendered.replace(turn, turn + AUDIO * 6)


@pytest.mark.parametrize("count", [1, 3])
def test_another_count_of_placeholders_is_refused(policy, tokenizer, count):
    with pytest.raises(PlaceholderError, match="placeholder"):
        expand_prompt(policy, [TextSegment(AUDIO * count)], slots(5, 5), tokenizer)


def test_a_placeholder_without_audio_is_refused(policy, tokenizer):
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, [TextSegment(f"say {AUDIO}")], [], tokenizer)
    with pytest.raises(PlaceholderError):
        expand_prompt(policy, [TextSegment(f"say {AUDIO}")], [], tokenizer, chat=True)


def test_a_placeholder_typed_beside_chat_parts_is_refused(policy, tokenizer):
    segments = [TextSegment(AUDIO), MediaSegment("audio", 1)]
    with pytest.raises(PlaceholderError, match="raw audio placeholder"):
        expand_prompt(policy, segments, slots(5), tokenizer, chat=True)


def test_images_and_misordered_parts_are_refused(policy, tokenizer):
    with pytest.raises(PlaceholderError, match="image"):
        expand_prompt(policy, [MediaSegment("image", 1)], [], tokenizer, chat=True)
    segments = [MediaSegment("audio", 2), MediaSegment("audio", 1)]
    with pytest.raises(PlaceholderError, match="expected"):
        expand_prompt(policy, segments, slots(5, 5), tokenizer, chat=True)


def test_a_clip_whose_tokens_contradict_its_rows_is_refused(policy, tokenizer):
    bad = [ClipSlot(ordinal=1, tokens=4, frames=15, sha256="0" * 64)]
    with pytest.raises(PlaceholderError, match="projector"):
        expand_prompt(policy, [TextSegment(AUDIO)], bad, tokenizer)


def test_a_tokenizer_with_another_audio_id_is_refused(policy, tokenizer):
    other = attrs.evolve(policy, options={**policy.options, "audio_token_index": 49_155})
    with pytest.raises(PolicyError, match="49155"):
        expand_prompt(other, [TextSegment(AUDIO)], slots(5), tokenizer)


def test_the_example_tokenizer_is_fresh():
    from build_example_model import main

    assert main(["--check"]) == 0
