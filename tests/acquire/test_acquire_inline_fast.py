"""The fast base64 path (pybase64) against binascii's strict mode: the same bytes for
every string both accept, the same refusal (and message) for every string either refuses."""

from __future__ import annotations

import base64
import binascii
import random

import pytest

from audiogate.acquire.context import ClipContext, RequestBudget, SourceRefused
from audiogate.acquire.inline import decode_base64

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# Characters a strict decoder must refuse anywhere in the bulk: padding out of place,
# the URL-safe alphabet, whitespace, controls, Latin-1, a lone surrogate, an emoji.
_FOREIGN = ["=", "-", "_", " ", "\n", "\r", "\t", ".", "\x00", "\x7f", "é", "ÿ", "\udc80", "😀"]


def _ctx() -> ClipContext:
    budget = RequestBudget(max_bytes_per_clip=1 << 20, max_bytes_per_request=1 << 30)
    return ClipContext(clip_index=0, cap=budget.cap(0))


def _reference(text: str) -> bytes | str:
    """What binascii's strict mode alone makes of ``text`` (after decode_base64's own
    length and padding checks, which both paths share): bytes, or "refused"."""
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return "refused"


def _outcome(text: str, slice_chars: int) -> bytes | str:
    try:
        return decode_base64(text, _ctx(), slice_chars=slice_chars)
    except SourceRefused as error:
        return f"refused: {error}"


@pytest.mark.parametrize("slice_chars", [4, 12, 4096])
def test_random_strings_decode_or_refuse_as_binascii_strict_does(slice_chars):
    rng = random.Random(31)
    for _ in range(3000):
        data = rng.randbytes(rng.randrange(1, 120))
        chars = list(base64.b64encode(data).decode())
        for _ in range(rng.choice([0, 0, 1, 2])):
            chars[rng.randrange(len(chars))] = rng.choice(_FOREIGN + list(_ALPHABET))
        text = "".join(chars)
        outcome = _outcome(text, slice_chars)
        if isinstance(outcome, bytes):
            assert outcome == _reference(text)
        else:
            # Refused by decode_base64's own checks (length, padding, trailing bits) or
            # by the decoder: the strict reference refuses it too, or it is non-canonical.
            assert _reference(text) == "refused" or "trailing bits" in outcome


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "QUJD" * 300 + "QU-D" + "QUJD",
            "invalid base64 (Only base64 data is allowed): '-' at character 1202",
        ),
        ("QUJD" * 5 + "QUJé", "'é' at character 23"),
        ("QUJD\udc80UJD", "string argument should contain only ASCII characters"),
        ("QUJDQQ=A", "invalid base64"),
    ],
)
def test_a_refusal_in_the_bulk_names_the_character_as_before(text, message):
    with pytest.raises(SourceRefused) as caught:
        decode_base64(text, _ctx())
    assert message in str(caught.value)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 300_001])
@pytest.mark.parametrize("slice_chars", [4, 8, 400_000])
def test_the_last_quantum_and_slice_edges_round_trip(size, slice_chars):
    data = random.Random(size).randbytes(size)
    text = base64.b64encode(data).decode()
    assert decode_base64(text, _ctx(), slice_chars=slice_chars) == data
