"""The wire pieces: the msgpack subset and tensors as vLLM carries them."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from audiogate.vllm.msgpack import MAX_DEPTH, Ext, MsgpackError, packb, unpackb
from audiogate.vllm.tensors import bfloat16_bits, decode_tensor, encode_tensor

VALUES = [
    None,
    True,
    False,
    0,
    127,
    128,
    255,
    65_535,
    65_536,
    2**32,
    2**64 - 1,
    -1,
    -32,
    -33,
    -129,
    -32_769,
    -(2**31) - 1,
    -(2**63),
    1.5,
    "",
    "x" * 31,
    "é" * 40,
    "y" * 70_000,
    b"",
    b"\x00" * 300,
    [],
    list(range(20)),
    {"a": {"b": [1, {"c": None}]}},
    {str(i): i for i in range(20)},
    Ext(3, b"abcd"),
    Ext(3, b"a" * 3),
    Ext(3, b"z" * 70_000),
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_round_trip(value: object) -> None:
    assert unpackb(packb(value)) == value


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_bytes_match_the_msgpack_library(value: object) -> None:
    msgpack = pytest.importorskip("msgpack")

    def convert(v: object) -> object:
        if isinstance(v, Ext):
            return msgpack.ExtType(v.code, v.data)
        if isinstance(v, dict):
            return {k: convert(x) for k, x in v.items()}
        if isinstance(v, list):
            return [convert(x) for x in v]
        return v

    assert packb(value) == msgpack.packb(convert(value), use_bin_type=True)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "truncated"),
        (b"\x92\x01", "truncated"),
        (b"\x01\x02", "after the msgpack value"),
        (b"\xc1", "unsupported"),
        (b"\x82\xa1a\x01\xa1a\x02", "duplicate map key"),
        (b"\x81\x90\x01", "map key"),
        (b"\x91" * (MAX_DEPTH + 2) + b"\x01", "nested deeper"),
        (b"\xdb\xff\xff\xff\xff", "truncated"),
    ],
)
def test_malformed_msgpack_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(MsgpackError, match=match):
        unpackb(data)


def test_bfloat16_rounds_to_nearest_even_like_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.standard_normal(10_000).astype(np.float32) * 100,
            np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, 3.4e38, 1.00390625, 1.01171875], "f4"),
        ]
    )
    expected = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(bfloat16_bits(values), expected.view(np.uint16))
    assert np.isnan(decode_tensor(encode_tensor(np.array([np.nan], "f4"), "bfloat16"))).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_float_tensors_travel_in_the_model_dtype(dtype: str) -> None:
    values = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    triple = encode_tensor(values, dtype)  # type: ignore[arg-type]
    name, shape, raw = triple
    assert (name, shape) == (dtype, [2, 3, 4])
    assert isinstance(raw, Ext)
    assert raw.code == 3
    assert len(raw.data) == values.size * (4 if dtype == "float32" else 2)
    tolerance = {"bfloat16": 2**-8, "float16": 2**-11, "float32": 0.0}[dtype]
    np.testing.assert_allclose(decode_tensor(triple), values, rtol=tolerance, atol=0)


def test_integer_and_boolean_tensors_keep_their_dtype() -> None:
    mask = np.array([True, False, True])
    ints = np.array([1, 0, 1], dtype=np.int32)
    assert encode_tensor(mask, "bfloat16")[:2] == ["bool", [3]]
    assert encode_tensor(ints, "bfloat16")[:2] == ["int32", [3]]
    assert np.array_equal(decode_tensor(encode_tensor(ints, "float16")), ints)


@pytest.mark.parametrize(
    "triple",
    [
        ["float32", [2], Ext(3, b"\x00" * 4)],
        ["float32", [2], Ext(4, b"\x00" * 8)],
        ["complex64", [1], Ext(3, b"\x00" * 8)],
        ["float32", [-1], Ext(3, b"")],
        ["float32", [1]],
    ],
)
def test_malformed_tensors_are_refused(triple: list[object]) -> None:
    with pytest.raises(ValueError, match=r"tensor|bytes|dtype|shape"):
        decode_tensor(triple)


def test_answer_fragments_are_the_answers_json() -> None:
    # The items' base64 text is spliced in as bytes, never through the JSON encoder:
    # the joined fragments must be exactly the JSON of the same answer with strings.
    from audiogate.vllm.render import _base64, answer_fragments

    items = [b"\x00\x01" * 40, b"tensor bytes"]

    def answer(raw: bool) -> dict[str, object]:
        return {
            "request_id": 'chatcmpl-"audiogate-item-0"',
            "token_ids": [1, 2, 3],
            "features": {
                "mm_hashes": {"audio": ["a", "b"]},
                "kwargs_data": {"audio": [_base64(item, raw) for item in items]},
                "mm_metadata": {"audio": [None, _base64(b"meta", raw)]},
            },
            "sampling_params": {"stop": ['"audiogate-item-', "\n\n"]},
        }

    joined = b"".join(answer_fragments(answer(raw=True)))
    assert joined == json.dumps(answer(raw=False), separators=(",", ":")).encode()
    assert b"".join(answer_fragments({"token_ids": [1], "features": None})) == (
        b'{"token_ids":[1],"features":null}'
    )


def test_item_cache_encodes_each_hash_once_within_its_budget() -> None:
    from audiogate.vllm.render import ItemCache

    calls: list[str] = []

    def encoder(key: str, size: int) -> Callable[[], tuple[bytes, bytes | None]]:
        def encode() -> tuple[bytes, bytes | None]:
            calls.append(key)
            return b"i" * size, None if size % 2 else b"m"

        return encode

    cache = ItemCache(max_bytes=100)
    assert cache.get("a", encoder("a", 40)) == (b"i" * 40, b"m")
    assert cache.get("a", encoder("a", 40)) == (b"i" * 40, b"m")  # a hit: not encoded
    assert calls == ["a"]
    cache.get("b", encoder("b", 40))
    cache.get("a", encoder("a", 40))  # a used last: b goes first
    cache.get("c", encoder("c", 40))
    assert cache.nbytes <= 100
    cache.get("a", encoder("a", 40))
    cache.get("b", encoder("b", 40))
    assert calls == ["a", "b", "c", "b"]
    assert cache.get("big", encoder("big", 101)) == (b"i" * 101, None)  # never kept
    assert cache.nbytes <= 100
