"""A feature-cache entry (a prepared clip), and its blob for the persistent tier (numpy
``.npy`` arrays in one blob).

Blob layout: ``MAGIC``, the 32-byte SHA-256 of everything after it, a 4-byte
little-endian header length, a UTF-8 JSON header, then the ``.npy`` images of the arrays
(``allow_pickle=False`` both ways). The header holds the key, the accounting, the
:class:`~audiogate.records.ClipFeatures` class and its fields (scalars inline, arrays by
index). The digest covers the header and the arrays alike, so any damage (a single
flipped bit anywhere) is refused before anything is parsed; loading then checks the key
and the consistency of what it holds. Anything that does not check out is ``None`` (a
miss), never an error.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import sys
from collections.abc import Iterator
from typing import Any, Final, cast

import attrs
import numpy as np

from audiogate.cache.key import FeatureKey
from audiogate.pipeline.prepared import PreparedClip
from audiogate.records import ClipFeatures, FeatureBatch, readonly

__all__ = ["ENTRY_OVERHEAD_BYTES", "ORIGIN_STORED_FEATURES", "CachedClip", "from_blob", "to_blob"]

#: Charged per entry on top of its arrays: the records, the key, the LRU's node.
ENTRY_OVERHEAD_BYTES: Final = 1024

#: The ``origin`` of a clip loaded from the persistent tier, until a hit places it.
ORIGIN_STORED_FEATURES: Final = "stored features"

# Version 2: the whole blob is checksummed (version 1 checked its arrays only, so a
# flipped bit in the header could load other content).
MAGIC: Final = b"AGFEAT\x00\x02"
_DIGEST_BYTES: Final = 32
_LENGTH = struct.Struct("<I")
#: A header larger than this is not one we wrote.
_MAX_HEADER: Final = 1 << 20

#: The accounting of a prepared clip that does not depend on the request it came in
#: (the blob keeps these; ``index``, ``ordinal`` and ``origin`` are the request's).
_INT_FIELDS: Final = (
    "encoded_bytes",
    "source_rate_hz",
    "channels",
    "source_samples",
    "duration_us",
    "normalized_samples",
    "effective_rate_hz",
    "frames",
    "tokens",
    "received_duration_us",
    "processed_duration_us",
)


@attrs.frozen
class CachedClip:
    """A feature-cache entry: the :class:`~audiogate.pipeline.PreparedClip` processing
    made (its read-only waveform and :class:`~audiogate.records.ClipFeatures`, any subclass
    a family returns); its ``index``, ``ordinal`` and ``origin`` are those of the request
    that computed it, and a hit takes its own request's (:meth:`placed`).

    :param collated: the family's collated inputs of a request of this clip alone, so a
        single-clip hit skips collation (kept in memory only, charged with the entry).
    """

    clip: PreparedClip
    collated: FeatureBatch | None = attrs.field(default=None, repr=False, eq=False)

    def placed(self, *, index: int, ordinal: int, origin: str) -> PreparedClip:
        """The clip as the ``index``-th clip of another request (the same arrays)."""
        return attrs.evolve(self.clip, index=index, ordinal=ordinal, origin=origin)

    def arrays(self) -> Iterator[Any]:
        """Every array the entry holds (the waveform, the features' fields, then the
        collated inputs)."""
        yield self.clip.waveform
        features = self.clip.features
        for field in attrs.fields(type(features)):
            value = getattr(features, field.name)
            if hasattr(value, "nbytes") and hasattr(value, "shape"):
                yield value
        if self.collated is not None:
            yield from self.collated.inputs.values()

    @property
    def cacheable(self) -> bool:
        """Whether every array is a numpy array (mlx results are not cached)."""
        return attrs.has(type(self.clip.features)) and all(
            isinstance(a, np.ndarray) for a in self.arrays()
        )

    @property
    def nbytes(self) -> int:
        """The bytes the entry keeps alive: each distinct buffer once, plus overhead."""
        seen: dict[int, int] = {}
        for array in self.arrays():
            base = array
            while isinstance(base, np.ndarray) and base.base is not None:
                base = base.base
            size = int(getattr(base, "nbytes", array.nbytes))
            seen[id(base)] = max(seen.get(id(base), 0), size)
        return sum(seen.values()) + ENTRY_OVERHEAD_BYTES

    def freeze(self) -> None:
        """Make every array read-only: the entry is shared by every request that hits it."""
        for array in self.arrays():
            array.flags.writeable = False


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def to_blob(key: FeatureKey, entry: CachedClip) -> bytes | None:
    """The blob of ``entry`` under ``key``; ``None`` when it holds something the blob
    cannot carry faithfully (a non-numpy array, a non-JSON detail or feature field)."""
    if not entry.cacheable:
        return None
    clip = entry.clip
    detail = dict(clip.detail)
    try:
        if json.loads(json.dumps(detail)) != detail:
            return None
    except (TypeError, ValueError):
        return None
    arrays: list[np.ndarray] = []
    index: dict[int, int] = {}

    def ref(array: np.ndarray) -> int:
        if id(array) not in index:
            index[id(array)] = len(arrays)
            arrays.append(array)
        return index[id(array)]

    feature_fields: dict[str, Any] = {}
    for field in attrs.fields(type(clip.features)):
        value = getattr(clip.features, field.name)
        if isinstance(value, np.ndarray):
            feature_fields[field.name] = {"array": ref(value)}
        elif _scalar(value):
            feature_fields[field.name] = {"value": value}
        else:
            return None
    waveform = ref(clip.waveform)
    images = []
    for array in arrays:
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
        images.append(buffer.getvalue())
    payload = b"".join(images)
    cls = type(clip.features)
    header = {
        "sha256": key.sha256,
        "fingerprint": key.fingerprint,
        "accounting": {name: getattr(clip, name) for name in _INT_FIELDS},
        "truncated": clip.truncated,
        "detail": detail,
        "waveform": waveform,
        "class": [cls.__module__, cls.__qualname__],
        "features": feature_fields,
        "lengths": [len(image) for image in images],
    }
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = b"".join((_LENGTH.pack(len(head)), head, payload))
    return b"".join((MAGIC, hashlib.sha256(body).digest(), body))


def _features_class(module: str, qualname: str) -> type[ClipFeatures] | None:
    """The class named, only from a module this process has already imported: data never
    triggers an import (a family's extractor module is imported by its first clip)."""
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, ClipFeatures) and attrs.has(found):
        return cast("type[ClipFeatures]", found)
    return None


def from_blob(key: FeatureKey, blob: object) -> CachedClip | None:
    """The clip a blob holds, if it is a valid blob of ``key``; else ``None``."""
    try:
        return _load(key, blob)
    except Exception:  # a corrupt blob is a miss, whatever is wrong with it
        return None


def _load(key: FeatureKey, blob: object) -> CachedClip | None:
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        return None
    data = memoryview(blob).cast("B")
    body_at = len(MAGIC) + _DIGEST_BYTES
    start = body_at + _LENGTH.size
    if len(data) < start or bytes(data[: len(MAGIC)]) != MAGIC:
        return None
    # The whole blob's digest first: nothing damaged is parsed.
    if hashlib.sha256(data[body_at:]).digest() != bytes(data[len(MAGIC) : body_at]):
        return None
    (length,) = _LENGTH.unpack(data[body_at:start])
    if length > _MAX_HEADER or start + length > len(data):
        return None
    header = json.loads(bytes(data[start : start + length]))
    payload = data[start + length :]
    if header["sha256"] != key.sha256 or header["fingerprint"] != key.fingerprint:
        return None
    lengths = header["lengths"]
    if not all(type(n) is int and n >= 0 for n in lengths) or sum(lengths) != len(payload):
        return None
    arrays: list[np.ndarray] = []
    offset = 0
    for n in lengths:
        array = np.lib.format.read_array(
            io.BytesIO(payload[offset : offset + n]), allow_pickle=False
        )
        arrays.append(readonly(array))
        offset += n
    cls = _features_class(*header["class"])
    if cls is None:
        return None
    fields: dict[str, Any] = {}
    for name, spec in header["features"].items():
        fields[name] = arrays[spec["array"]] if "array" in spec else spec["value"]
    if set(fields) != {f.name for f in attrs.fields(cls) if f.init}:
        return None
    features = cls(**fields)
    accounting = header["accounting"]
    if set(accounting) != set(_INT_FIELDS) or not all(
        type(v) is int and v >= 0 for v in accounting.values()
    ):
        return None
    waveform = arrays[header["waveform"]]
    clip = PreparedClip(
        index=0,
        ordinal=1,
        origin=ORIGIN_STORED_FEATURES,
        sha256=key.sha256,
        truncated=bool(header["truncated"]),
        detail=header["detail"],
        waveform=waveform,
        features=features,
        **accounting,
    )
    return CachedClip(clip) if _consistent(clip) else None


def _consistent(clip: PreparedClip) -> bool:
    """The arrays agree with the accounting (what the host checks of a fresh result)."""
    waveform, features = clip.waveform, clip.features
    mask = features.mask
    return (
        waveform.dtype == np.float32
        and waveform.shape == (clip.normalized_samples,)
        and isinstance(features.features, np.ndarray)
        and features.features.dtype == np.float32
        and features.frames == clip.frames
        and features.tokens == clip.tokens
        and (mask is None or (isinstance(mask, np.ndarray) and mask.dtype == np.bool_))
    )
