"""The small part of MessagePack that vLLM's multimodal items use, both ways.

vLLM writes a ``MultiModalKwargsItem`` as maps, arrays, strings, integers, booleans, nil
and extension type 3 (a tensor's raw bytes). Encoding it here keeps the core free of a
msgpack dependency; the decoder exists for tests and for reading vLLM's own answers, and
refuses anything outside that subset.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

__all__ = ["Ext", "MsgpackError", "packb", "unpackb"]

#: Nesting deeper than this is refused when decoding (vLLM's items are 4 levels deep).
MAX_DEPTH: Final = 32


class MsgpackError(ValueError):
    """Bytes that are not msgpack of the supported subset."""


@attrs.frozen
class Ext:
    """A msgpack extension value: ``code`` (-128..127) and its ``data``."""

    code: int
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")


def _pack_int(value: int, out: bytearray) -> None:
    if 0 <= value < 0x80:
        out.append(value)
    elif -32 <= value < 0:
        out.append(value & 0xFF)
    elif 0 <= value <= 0xFF:
        out += b"\xcc" + struct.pack(">B", value)
    elif 0 <= value <= 0xFFFF:
        out += b"\xcd" + struct.pack(">H", value)
    elif 0 <= value <= 0xFFFFFFFF:
        out += b"\xce" + struct.pack(">I", value)
    elif 0 <= value < 1 << 64:
        out += b"\xcf" + struct.pack(">Q", value)
    elif value >= -0x80:
        out += b"\xd0" + struct.pack(">b", value)
    elif value >= -0x8000:
        out += b"\xd1" + struct.pack(">h", value)
    elif value >= -0x80000000:
        out += b"\xd2" + struct.pack(">i", value)
    elif value >= -(1 << 63):
        out += b"\xd3" + struct.pack(">q", value)
    else:
        raise MsgpackError(f"integer {value} does not fit 64 bits")


def _pack_length(n: int, fix: int | None, fix_max: int, codes: tuple[int, int, int]) -> bytes:
    if fix is not None and n <= fix_max:
        return bytes([fix | n])
    if codes[0] and n <= 0xFF:
        return bytes([codes[0]]) + struct.pack(">B", n)
    if n <= 0xFFFF:
        return bytes([codes[1]]) + struct.pack(">H", n)
    if n <= 0xFFFFFFFF:
        return bytes([codes[2]]) + struct.pack(">I", n)
    raise MsgpackError(f"a length of {n} does not fit 32 bits")


def _pack(value: Any, out: bytearray) -> None:
    if value is None:
        out.append(0xC0)
    elif value is True:
        out.append(0xC3)
    elif value is False:
        out.append(0xC2)
    elif isinstance(value, int):
        _pack_int(value, out)
    elif isinstance(value, float):
        out += b"\xcb" + struct.pack(">d", value)
    elif isinstance(value, str):
        data = value.encode()
        out += _pack_length(len(data), 0xA0, 31, (0xD9, 0xDA, 0xDB)) + data
    elif isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        out += _pack_length(len(data), None, 0, (0xC4, 0xC5, 0xC6)) + data
    elif isinstance(value, Ext):
        n = len(value.data)
        fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
        if n in fixed:
            out.append(fixed[n])
        else:
            out += _pack_length(n, None, 0, (0xC7, 0xC8, 0xC9))
        out += struct.pack(">b", value.code) + value.data
    elif isinstance(value, Mapping):
        out += _pack_length(len(value), 0x80, 15, (0, 0xDE, 0xDF))
        for key, item in value.items():
            _pack(key, out)
            _pack(item, out)
    elif isinstance(value, Sequence):
        out += _pack_length(len(value), 0x90, 15, (0, 0xDC, 0xDD))
        for item in value:
            _pack(item, out)
    else:
        raise MsgpackError(f"cannot encode a {type(value).__name__}")


def packb(value: Any) -> bytes:
    """``value`` (None, bool, int, float, str, bytes, :class:`Ext`, mappings with such keys,
    sequences) as msgpack bytes; the shortest encoding of each value, as msgspec writes."""
    out = bytearray()
    _pack(value, out)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)
        self.at = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.view):
            raise MsgpackError("truncated msgpack")
        chunk = self.view[self.at : self.at + n].tobytes()
        self.at += n
        return chunk

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]


def _length(reader: _Reader, code: int, bases: tuple[int, int, int]) -> int:
    width = {bases[0]: ">B", bases[1]: ">H", bases[2]: ">I"}[code]
    return int(reader.unpack(width))


def _unpack(reader: _Reader, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise MsgpackError(f"msgpack nested deeper than {MAX_DEPTH}")
    code = reader.take(1)[0]
    if code <= 0x7F:
        return code
    if code >= 0xE0:
        return code - 0x100
    if 0xA0 <= code <= 0xBF:
        return reader.take(code & 0x1F).decode()
    if 0x90 <= code <= 0x9F:
        return [_unpack(reader, depth + 1) for _ in range(code & 0x0F)]
    if 0x80 <= code <= 0x8F:
        return _map(reader, code & 0x0F, depth)
    simple = {0xC0: None, 0xC2: False, 0xC3: True}
    if code in simple:
        return simple[code]
    ints = {
        0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
        0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
        0xCA: ">f", 0xCB: ">d",
    }  # fmt: skip
    if code in ints:
        return reader.unpack(ints[code])
    if code in (0xD9, 0xDA, 0xDB):
        return reader.take(_length(reader, code, (0xD9, 0xDA, 0xDB))).decode()
    if code in (0xC4, 0xC5, 0xC6):
        return reader.take(_length(reader, code, (0xC4, 0xC5, 0xC6)))
    if code in (0xDC, 0xDD):
        n = _length(reader, code, (0, 0xDC, 0xDD))
        return [_unpack(reader, depth + 1) for _ in range(n)]
    if code in (0xDE, 0xDF):
        return _map(reader, _length(reader, code, (0, 0xDE, 0xDF)), depth)
    fixed_ext = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
    if code in fixed_ext:
        ext_code = reader.unpack(">b")
        return Ext(ext_code, reader.take(fixed_ext[code]))
    if code in (0xC7, 0xC8, 0xC9):
        n = _length(reader, code, (0xC7, 0xC8, 0xC9))
        ext_code = reader.unpack(">b")
        return Ext(ext_code, reader.take(n))
    raise MsgpackError(f"unsupported msgpack type byte 0x{code:02x}")


def _map(reader: _Reader, n: int, depth: int) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for _ in range(n):
        key = _unpack(reader, depth + 1)
        if not isinstance(key, (str, int)):
            raise MsgpackError(
                f"a map key must be a string or an integer, got {type(key).__name__}"
            )
        if key in result:
            raise MsgpackError(f"duplicate map key {key!r}")
        result[key] = _unpack(reader, depth + 1)
    return result


def unpackb(data: bytes) -> Any:
    """The value ``data`` encodes (the subset :func:`packb` writes, plus 32-bit floats).

    :raises MsgpackError: truncated or trailing bytes, an unsupported type, a duplicate or
        non-scalar map key, or nesting deeper than :data:`MAX_DEPTH`.
    """
    reader = _Reader(data)
    value = _unpack(reader, 0)
    if reader.at != len(reader.view):
        raise MsgpackError(f"{len(reader.view) - reader.at} bytes after the msgpack value")
    return value
