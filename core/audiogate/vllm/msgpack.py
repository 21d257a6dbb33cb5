"""MessagePack as vLLM's multimodal items use it, both ways, on the ``msgpack`` library.

vLLM writes a ``MultiModalKwargsItem`` as maps, arrays, strings, integers, booleans, nil
and extension type 3 (a tensor's raw bytes). Encoding is the ``msgpack`` C extension's
(the shortest encoding of each value, as vLLM's msgspec writes); decoding, used for
tests and for reading vLLM's own answers, adds the checks a reader of untrusted bytes
needs: no trailing bytes, no duplicate or non-scalar map keys, bounded nesting.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import msgpack

__all__ = ["MAX_DEPTH", "Ext", "MsgpackError", "packb", "unpackb"]

#: Nesting deeper than this is refused when decoding (vLLM's items are 4 levels deep).
MAX_DEPTH: Final = 32


class MsgpackError(ValueError):
    """Bytes that are not msgpack of the supported subset."""


@attrs.frozen
class Ext:
    """A msgpack extension value: ``code`` (-128..127) and its ``data``."""

    code: int
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")


def _default(value: Any) -> Any:
    if isinstance(value, Ext):
        return msgpack.ExtType(value.code, value.data)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise MsgpackError(f"cannot encode a {type(value).__name__}")


def packb(value: Any) -> bytes:
    """``value`` (None, bool, int, float, str, bytes, :class:`Ext`, dicts with such keys,
    lists and tuples) as msgpack bytes.

    :raises MsgpackError: a value of another type, or an integer beyond 64 bits.
    """
    try:
        packed: bytes = msgpack.packb(value, default=_default, use_bin_type=True)
    except OverflowError as error:
        raise MsgpackError(f"an integer does not fit 64 bits: {error}") from None
    except (TypeError, ValueError) as error:
        raise MsgpackError(str(error)) from None
    return packed


def _pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for key, item in pairs:
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise MsgpackError(
                f"a map key must be a string or an integer, got {type(key).__name__}"
            )
        if key in result:
            raise MsgpackError(f"duplicate map key {key!r}")
        result[key] = item
    return result


def _depth(value: Any, limit: int) -> None:
    # Iterative: a hostile document must not exhaust Python's stack either.
    stack = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if depth > limit:
            raise MsgpackError(f"msgpack nested deeper than {limit}")
        if isinstance(current, list):
            stack.extend((item, depth + 1) for item in current)
        elif isinstance(current, dict):
            stack.extend((item, depth + 1) for item in current.values())


def unpackb(data: bytes) -> Any:
    """The value ``data`` encodes (the subset :func:`packb` writes, plus 32-bit floats).

    :raises MsgpackError: truncated or trailing bytes, an unsupported type, a duplicate or
        non-scalar map key, or nesting deeper than :data:`MAX_DEPTH`.
    """
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=False,
            object_pairs_hook=_pairs,
            ext_hook=lambda code, payload: Ext(code, bytes(payload)),
        )
    except msgpack.ExtraData as error:
        raise MsgpackError(f"{len(error.extra)} bytes after the msgpack value") from None
    except msgpack.StackError:
        raise MsgpackError(f"msgpack nested deeper than {MAX_DEPTH}") from None
    except msgpack.FormatError as error:
        raise MsgpackError(f"unsupported msgpack: {error}") from None
    except MsgpackError:
        raise
    except ValueError as error:
        if "incomplete" in str(error) or "truncated" in str(error) or not data:
            raise MsgpackError("truncated msgpack") from None
        raise MsgpackError(f"invalid msgpack: {error}") from None
    _depth(value, MAX_DEPTH)
    return value
