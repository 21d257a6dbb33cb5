"""Feature serialisation: base64 .npy straight from the array's memory, and safetensors;
decode_features inverts both exactly."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from serverkit import PREPARE, chat, wav_b64

from audiogate.server import requests as server_app
from audiogate.server.encoding import decode_features, encode_features, npy_base64

ARRAYS = {
    "scalar": np.array(1.5),
    "empty": np.zeros((0, 3), np.float32),
    "int64": np.arange(7, dtype=np.int64),
    "mask": np.array([[True, False, True, True, False]]),
    "strided": np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2],
    "fortran": np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    "float16": np.arange(5, dtype=np.float16),
    "int32": np.arange(10, dtype=np.int32).reshape(2, 5),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_npy_base64_is_the_npy_file(name: str) -> None:
    array = ARRAYS[name]
    text = b"".join(npy_base64(array))
    expected = io.BytesIO()
    np.save(expected, np.ascontiguousarray(array) if array.ndim else array)
    assert base64.b64decode(text, validate=True) == expected.getvalue()


@pytest.mark.parametrize("feature_format", ["npy", "safetensors"])
def test_encode_then_decode_round_trips(feature_format: str) -> None:
    if feature_format == "safetensors":
        pytest.importorskip("safetensors")
    document = json.loads(b"".join(encode_features(ARRAYS, feature_format)))
    assert document["format"] == feature_format
    decoded = decode_features(document)
    assert set(decoded) == set(ARRAYS)
    for name, array in ARRAYS.items():
        assert decoded[name].dtype == array.dtype
        assert decoded[name].shape == array.shape
        np.testing.assert_array_equal(decoded[name], array)
        assert document["shapes"][name] == list(array.shape)
        assert document["dtypes"][name] == str(array.dtype)


def test_decode_features_refuses_what_it_did_not_write() -> None:
    with pytest.raises(ValueError, match="unknown features format"):
        decode_features({"format": "pickle"})
    with pytest.raises(ValueError, match="malformed npy"):
        decode_features({"format": "npy", "inputs": {"x": "!!"}})


def test_safetensors_without_the_package_is_a_400(gemma, monkeypatch) -> None:
    monkeypatch.setattr(server_app, "safetensors_available", lambda: False)
    response = gemma.client.post(
        PREPARE, json=chat(wav_b64(0.5), audiogate={"feature_format": "safetensors"})
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestError"
    assert error["field"] == "audiogate.feature_format"
    assert "safetensors" in error["message"]
