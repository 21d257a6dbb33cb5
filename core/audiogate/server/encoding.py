"""Model inputs as JSON: base64 ``.npy`` per array or one base64 safetensors blob.

The encoder writes bytes fragments that the response splices into its JSON body, so a
large feature array is base64-encoded once, straight from the array's memory (no
``.npy`` file image and no intermediate ``str``). :func:`decode_features` is the
client-side inverse (tests, the load test, and users).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from audiogate.extras import installed, require_module

__all__ = [
    "FEATURE_FORMATS",
    "FeatureFormat",
    "decode_features",
    "encode_features",
    "encoded_features_bound",
    "npy_base64",
    "safetensors_available",
]

FeatureFormat = Literal["npy", "safetensors"]

#: The ``audiogate.feature_format`` values a request may ask for.
FEATURE_FORMATS: Final[tuple[FeatureFormat, ...]] = ("npy", "safetensors")


def safetensors_available() -> bool:
    """Whether the optional ``safetensors`` package can be imported."""
    return installed("safetensors")


def _contiguous(array: Any) -> npt.NDArray[Any]:
    # Plugins hand out read-only C-contiguous arrays; only a strided view is copied
    # (``ascontiguousarray`` would turn a 0-d array into shape (1,)).
    data = np.asarray(array)
    return data if data.flags.c_contiguous else data.copy(order="C")


#: Bytes allowed per array for its ``.npy`` or safetensors header, shape and dtype JSON.
_HEADER_ALLOWANCE: Final = 512


def npy_base64(array: Any) -> list[bytes]:
    """Base64 of the ``.npy`` file of ``array``, as fragments whose concatenation is the
    base64 text (the array's memory is encoded in place, without a file image).

    The ``.npy`` header is followed by enough data bytes to make a multiple of 3, so the
    two base64 runs concatenate without inner padding.
    """
    data = _contiguous(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(data))
    head = header.getvalue()
    body = memoryview(data.data).cast("B") if data.size else memoryview(b"")
    split = min((-len(head)) % 3, len(body))
    first = base64.b64encode(head + bytes(body[:split]))
    if split == len(body):
        return [first]
    return [first, base64.b64encode(body[split:])]


def _safetensors_base64(inputs: Mapping[str, Any]) -> list[bytes]:
    save = require_module("safetensors.numpy", purpose="feature_format 'safetensors'").save
    blob = save({name: _contiguous(array) for name, array in inputs.items()})
    return [base64.b64encode(blob)]


def _describe(inputs: Mapping[str, Any]) -> bytes:
    shapes = {name: list(np.shape(array)) for name, array in inputs.items()}
    dtypes = {name: str(np.asarray(array).dtype) for name, array in inputs.items()}
    return (
        b'"shapes":'
        + json.dumps(shapes, separators=(",", ":")).encode()
        + b',"dtypes":'
        + json.dumps(dtypes, separators=(",", ":")).encode()
    )


def encoded_features_bound(inputs: Mapping[str, Any]) -> int:
    """An upper bound of the bytes :func:`encode_features` returns for ``inputs`` (either
    format): each array's base64 with a generous allowance for its header and JSON."""
    total = 256
    for name, array in inputs.items():
        nbytes = int(np.asarray(array).nbytes) + _HEADER_ALLOWANCE + 2 * len(name)
        total += 4 * -(-nbytes // 3) + 2 * _HEADER_ALLOWANCE + 2 * len(name)
    return total


def encode_features(inputs: Mapping[str, Any], feature_format: FeatureFormat) -> list[bytes]:
    """The ``features`` JSON object as bytes fragments.

    ``npy``: ``{"format": "npy", "inputs": {name: base64 .npy}, "shapes", "dtypes"}``;
    ``safetensors``: ``{"format": "safetensors", "data": base64 blob, "shapes", "dtypes"}``
    (``shapes`` and ``dtypes`` map each name to its shape list and dtype name).

    :raises ImportError: ``safetensors`` was asked for and is not installed (servers
        check :func:`safetensors_available` before doing the work).
    """
    if feature_format == "npy":
        parts: list[bytes] = [b'{"format":"npy","inputs":{']
        for position, (name, array) in enumerate(inputs.items()):
            if position:
                parts.append(b",")
            parts.append(json.dumps(name).encode() + b':"')
            parts.extend(npy_base64(array))
            parts.append(b'"')
        parts.append(b"},")
    elif feature_format == "safetensors":
        parts = [b'{"format":"safetensors","data":"', *_safetensors_base64(inputs), b'",']
    else:
        raise ValueError(f"feature_format must be one of {FEATURE_FORMATS}, not {feature_format!r}")
    parts.append(_describe(inputs))
    parts.append(b"}")
    return parts


def decode_features(features: Mapping[str, Any]) -> dict[str, npt.NDArray[Any]]:
    """The arrays of a response's ``features`` object (either format).

    :raises ValueError: the object is not a ``features`` object this module writes.
    :raises MissingExtraError: safetensors features where safetensors is not installed.
    """
    kind = features.get("format")
    try:
        if kind == "npy":
            return {
                name: np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False)
                for name, text in features["inputs"].items()
            }
        if kind == "safetensors":
            load = require_module("safetensors.numpy", purpose="safetensors features").load
            return dict(load(base64.b64decode(features["data"], validate=True)))
    except (KeyError, TypeError, binascii.Error) as exc:
        raise ValueError(f"malformed {kind} features object: {exc}") from exc
    raise ValueError(f"unknown features format {kind!r}; expected one of {FEATURE_FORMATS}")
