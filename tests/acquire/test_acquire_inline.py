"""Strict base64 and data URIs: preflight before decoding, exact alphabet, padding, bits."""

from __future__ import annotations

import base64
import os

import pytest

from audiogate.acquire.context import ClipContext, RequestBudget, SourceRefused
from audiogate.acquire.inline import data_uri_payload, decode_base64
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.decode import WAV, SourceFormat
from audiogate.errors import LimitError, MemoryLimitError, PreprocessCancelled

RAW = SourceFormat.raw("pcm16", rate_hz=16000, channels=1)


def ctx(max_bytes: int = 1 << 20, cancel: CancelToken | None = None) -> ClipContext:
    budget = RequestBudget(max_bytes_per_clip=max_bytes, max_bytes_per_request=1 << 30)
    return ClipContext(clip_index=2, cap=budget.cap(2), cancel=cancel or CancelToken())


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 100, 65_537])
@pytest.mark.parametrize("slice_chars", [4, 8, 4096])
def test_round_trips_any_length_across_slice_boundaries(size, slice_chars):
    data = os.urandom(size)
    text = base64.b64encode(data).decode()
    if not text:
        with pytest.raises(SourceRefused, match="empty"):
            decode_base64(text, ctx())
        return
    assert decode_base64(text, ctx(), slice_chars=slice_chars) == data


def test_the_character_count_is_checked_before_anything_else():
    # ceil(4/3)*4 = 8 characters at most; the junk is never looked at.
    assert decode_base64("AAAAAA==", ctx(4)) == bytes(4)
    with pytest.raises(LimitError) as caught:
        decode_base64("!" * 12, ctx(4))
    error = caught.value
    assert (error.limit, error.actual, error.maximum, error.clip_index) == (
        "base64 characters",
        12,
        8,
        2,
    )


def test_over_the_request_budget_the_character_count_is_a_memory_limit():
    # The binding limit is what is left of the request's bytes: a memory limit, counted
    # as memory_limit like the same bytes read from a file.
    budget = RequestBudget(max_bytes_per_clip=1_000, max_bytes_per_request=10)
    tight = ClipContext(clip_index=1, cap=budget.cap(1))
    with pytest.raises(MemoryLimitError) as caught:
        decode_base64("A" * 40, tight)
    assert (caught.value.limit, caught.value.reason) == ("base64 characters", "memory_limit")
    with pytest.raises(LimitError) as caught:
        decode_base64("!" * 12, ctx(4))
    assert not isinstance(caught.value, MemoryLimitError)


def test_the_exact_decoded_size_is_checked_before_decoding():
    # 8 characters without padding are 6 bytes: within the preflight, over the cap.
    with pytest.raises(LimitError) as caught:
        decode_base64("AAAAAAAA", ctx(5))
    assert (caught.value.limit, caught.value.actual, caught.value.maximum) == (
        "encoded bytes per clip",
        6,
        5,
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("QUJD\n", "multiple of 4"),
        ("QUJ", "multiple of 4"),
        ("QQ", "multiple of 4"),
        ("QUJDQQ", "multiple of 4"),
        ("QUJD QUJ", "' '"),
        ("QUJD\nQUJ", "'\\\\n'"),
        ("QUJD\tQUJ", "'\\\\t'"),
        ("QU-D", "'-'"),
        ("QU_D", "'_'"),
        ("QUJé", "'é'"),
        ("QQ==QUJD", "padding '=' at character 2"),
        ("=QUJ", "padding '=' at character 0"),
        ("QQ=A", "invalid base64"),
        ("Q===", "padding '='"),
        ("QR==", "trailing bits"),
        ("QUK=", "trailing bits"),
    ],
)
def test_non_strict_base64_is_refused(text, needle):
    with pytest.raises(SourceRefused, match=needle):
        decode_base64(text, ctx())


def test_canonical_padding_is_accepted():
    assert decode_base64("QQ==", ctx()) == b"A"
    assert decode_base64("QUI=", ctx()) == b"AB"
    assert decode_base64("QUJD", ctx()) == b"ABC"


def test_cancellation_is_noticed_between_slices():
    class CancelAfter(CancelToken):
        __slots__ = ("calls",)

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def check(self, checkpoint: Checkpoint, clip_index: int | None = None) -> None:
            self.calls += 1
            if self.calls == 3:
                self.cancel()
            super().check(checkpoint, clip_index)

    token = CancelAfter()
    with pytest.raises(PreprocessCancelled) as caught:
        decode_base64("QUJD" * 100, ctx(cancel=token), slice_chars=8)
    assert (caught.value.checkpoint, caught.value.clip_index) == ("Acquisition", 2)


@pytest.mark.parametrize(
    ("uri", "fmt"),
    [
        ("data:audio/wav;base64,QUJD", WAV),
        ("data:audio/wave;base64,QUJD", WAV),
        ("data:audio/x-wav;base64,QUJD", WAV),
        ("data:audio/vnd.wave;codec=1;base64,QUJD", WAV),
        ("DATA:AUDIO/WAV;BASE64,QUJD", WAV),
        ("data:audio/pcm;rate=16000;base64,QUJD", RAW),
        ("data:audio/x-raw;base64,QUJD", RAW),
    ],
)
def test_data_uris_name_an_audio_type_that_matches_the_declaration(uri, fmt):
    start = data_uri_payload(uri, fmt)
    assert uri[start:] == "QUJD"
    assert decode_base64(uri, ctx(), start=start) == b"ABC"


@pytest.mark.parametrize(
    ("uri", "fmt", "needle"),
    [
        ("data:audio/wav,QUJD", WAV, "base64-encoded"),
        ("data:audio/wav;base64QUJD", WAV, "data:audio/<type>;base64,<data>"),
        ("data:audio/wav;charset=utf-8,QUJD", WAV, "base64-encoded"),
        ("data:;base64,QUJD", WAV, "not audio/<type>"),
        ("data:application/octet-stream;base64,QUJD", WAV, "not audio/<type>"),
        ("data:text/plain;base64,QUJD", WAV, "not audio/<type>"),
        ("data:audio/;base64,QUJD", WAV, "not audio/<type>"),
        ("data:audio/wav;rate;base64,QUJD", WAV, "not name=value"),
        ("data:audio/mpeg;base64,QUJD", WAV, "audio/mpeg does not match the declared format wav"),
        ("data:audio/wav;base64,QUJD", RAW, "does not match the declared raw format pcm16"),
        ("data:audio/L16;base64,QUJD", RAW, "audio/l16 does not match"),
        ("data:audio/wav" + ";x=y" * 100 + ";base64,QUJD", WAV, "data:audio/<type>"),
    ],
)
def test_malformed_or_mismatched_data_uris_are_refused(uri, fmt, needle):
    with pytest.raises(SourceRefused, match=needle.replace("(", r"\(").replace(")", r"\)")):
        data_uri_payload(uri, fmt)
