"""Arrays as vLLM's msgpack carries them: ``[dtype, shape, Ext(3, raw bytes)]``.

vLLM's ``MsgpackEncoder`` writes a tensor as its dtype name without the ``torch.``
prefix, its shape, and its contiguous little-endian bytes as extension type 3 (a raw
view). Floating features travel in the model dtype: ``bfloat16`` (vLLM's default for
these checkpoints), ``float16`` or ``float32``. numpy has no bfloat16: it is made here
from float32 by rounding to the nearest even 16-bit pattern (what ``torch.Tensor.to``
does), NaN kept quiet.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from audiogate.vllm.msgpack import Ext

__all__ = [
    "FLOAT_DTYPES",
    "RAW_VIEW",
    "FloatDtype",
    "bfloat16_bits",
    "decode_tensor",
    "encode_tensor",
    "from_bfloat16_bits",
]

#: vLLM's extension code for a tensor's raw bytes (``CUSTOM_TYPE_RAW_VIEW``).
RAW_VIEW: Final = 3

FloatDtype = Literal["bfloat16", "float16", "float32"]
FLOAT_DTYPES: Final[tuple[FloatDtype, ...]] = ("bfloat16", "float16", "float32")

_NUMPY: Final[dict[str, np.dtype[Any]]] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "float64": np.dtype("<f8"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}


def bfloat16_bits(values: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """The bfloat16 bit patterns of ``values`` (as float32), rounded to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(bits.view(np.float32))
    if nan.any():
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def from_bfloat16_bits(bits: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    """float32 values of bfloat16 bit patterns (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def encode_tensor(array: npt.ArrayLike, float_dtype: FloatDtype) -> list[Any]:
    """``array`` as vLLM's msgpack tensor triple; floating arrays in ``float_dtype``,
    integer and boolean arrays in their own dtype.

    :raises ValueError: an unsupported dtype.
    """
    values = np.asarray(array)
    shape = [int(n) for n in values.shape]
    if values.dtype.kind == "f":
        if float_dtype == "bfloat16":
            raw = bfloat16_bits(values).astype("<u2", copy=False).tobytes()
            return ["bfloat16", shape, Ext(RAW_VIEW, raw)]
        values = values.astype(_NUMPY[float_dtype], copy=False)
        return [float_dtype, shape, Ext(RAW_VIEW, np.ascontiguousarray(values).tobytes())]
    name = "bool" if values.dtype.kind == "b" else values.dtype.name
    if name not in _NUMPY:
        raise ValueError(f"no vLLM tensor encoding for dtype {values.dtype}")
    data = np.ascontiguousarray(values, dtype=_NUMPY[name]).tobytes()
    return [name, shape, Ext(RAW_VIEW, data)]


def decode_tensor(triple: Any) -> npt.NDArray[Any]:
    """The array of a ``[dtype, shape, Ext(3, bytes)]`` triple; bfloat16 as float32.

    :raises ValueError: not such a triple, an unknown dtype, or bytes that do not fill
        the shape.
    """
    if not (isinstance(triple, list) and len(triple) == 3):
        raise ValueError("a vLLM tensor is [dtype, shape, raw bytes]")
    name, shape, raw = triple
    if not isinstance(raw, Ext) or raw.code != RAW_VIEW:
        raise ValueError("a vLLM tensor's data is extension type 3")
    if not (isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)):
        raise ValueError(f"invalid tensor shape {shape!r}")
    count = int(np.prod(shape, dtype=np.int64))
    if name == "bfloat16":
        if len(raw.data) != 2 * count:
            raise ValueError(f"{len(raw.data)} bytes do not fill a bfloat16 {shape}")
        return from_bfloat16_bits(np.frombuffer(raw.data, "<u2")).reshape(shape)
    if name not in _NUMPY:
        raise ValueError(f"unknown tensor dtype {name!r}")
    dtype = _NUMPY[name]
    if len(raw.data) != dtype.itemsize * count:
        raise ValueError(f"{len(raw.data)} bytes do not fill a {name} {shape}")
    return np.frombuffer(raw.data, dtype).reshape(shape)
