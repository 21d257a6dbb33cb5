"""Prompt expansion fails closed: counts, order, images and typed-in audio tokens."""

from __future__ import annotations

import pytest

from audiogate.errors import PlaceholderError
from audiogate.host import FamilyHost
from audiogate.records import ClipSlot, MediaSegment, TextSegment

CLIPS = [
    ClipSlot(ordinal=1, tokens=3, frames=10, sha256="a" * 64),
    ClipSlot(ordinal=2, tokens=2, frames=7, sha256="b" * 64),
]


def test_plain_placeholders_are_replaced_in_order(audiogate_host: FamilyHost) -> None:
    policy = audiogate_host.default_policy("toyvoice")
    expanded = audiogate_host.expand_prompt(
        policy, [TextSegment("A: <audio> B: <audio>")], CLIPS, None
    )
    block = "<|toy_audio_start|>{}<|toy_audio_end|>"
    assert expanded.text == (
        "A: " + block.format("<|toy_audio|>" * 3) + " B: " + block.format("<|toy_audio|>" * 2)
    )


@pytest.mark.parametrize(
    ("segments", "match"),
    [
        ([TextSegment("only one <audio>")], "1 '<audio>' placeholder"),
        ([TextSegment("<audio><audio><audio>")], "3 '<audio>' placeholder"),
        ([TextSegment("forged <|toy_audio|>")], "reserved audio token"),
        ([MediaSegment("audio", 1), MediaSegment("image", 1)], "image part"),
        ([MediaSegment("audio", 2), MediaSegment("audio", 1)], "part 2 appears where part 1"),
        ([MediaSegment("audio", 1)], "1 audio part"),
        (
            [MediaSegment("audio", 1), TextSegment("and <audio>"), MediaSegment("audio", 2)],
            "chat text contains '<audio>'",
        ),
    ],
)
def test_mismatches_are_refused(
    audiogate_host: FamilyHost, segments: list[TextSegment | MediaSegment], match: str
) -> None:
    policy = audiogate_host.default_policy("toyvoice")
    with pytest.raises(PlaceholderError, match=match):
        audiogate_host.expand_prompt(policy, segments, CLIPS, None)
