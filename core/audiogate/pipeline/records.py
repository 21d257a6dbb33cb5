"""Records of one request's trip through the pipeline: inputs, the plan, the result."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.decode import WAV, ClipGeometry, SourceFormat
from audiogate.policy import AudioPolicy
from audiogate.policy.model import frozen_mapping
from audiogate.records import ClipFeatures, FeatureBatch, FeaturePlan, ResamplePlan

__all__ = [
    "ClipPlan",
    "EncodedClip",
    "PreparedBatch",
    "PreparedClip",
    "RequestPlan",
    "RequestTotals",
]


def _as_bytes(value: bytes | bytearray | memoryview) -> bytes:
    return value if isinstance(value, bytes) else bytes(value)


@attrs.frozen(kw_only=True)
class EncodedClip:
    """One clip's encoded bytes, as acquired.

    :param data: the encoded bytes (copied to immutable ``bytes`` if given mutable).
    :param source_format: ``WAV`` or a raw ``SourceFormat``.
    :param ordinal: one-based placeholder ordinal (clip ``i`` must have ``i + 1``).
    :param origin: where the bytes came from (``"file"``, ``"inline base64"``, ``"data URI"``,
        ``"URL"``, ``"bytes"``), for observability only: it never changes the result.
    """

    data: bytes = attrs.field(converter=_as_bytes, repr=lambda d: f"<{len(d)} bytes>")
    source_format: SourceFormat = WAV
    ordinal: int
    origin: str = "bytes"

    @property
    def sha256(self) -> str:
        """Lowercase hex SHA-256 of the encoded bytes (content-digest references)."""
        return hashlib.sha256(self.data).hexdigest()


@attrs.frozen(kw_only=True)
class ClipPlan:
    """Everything known about one clip before any sample is decoded.

    :param decode_geometry: the geometry actually decoded (a prefix of ``geometry`` when a
        truncating policy needs only part of the source).
    :param normalized_samples: samples after resampling (and truncation).
    :param received_samples: samples the whole source would give after resampling.
    """

    index: int
    geometry: ClipGeometry
    decode_geometry: ClipGeometry
    resample: ResamplePlan
    normalized_samples: int
    received_samples: int
    features: FeaturePlan

    @property
    def truncated(self) -> bool:
        """Whether the clip is cut at the policy limit (opt-in truncate mode only)."""
        return self.normalized_samples < self.received_samples


@attrs.frozen(kw_only=True)
class RequestPlan:
    """A request that passed the preflight, with the bytes it will need.

    :param encoded_bytes: sum of the clips' encoded bytes.
    :param waveform_result_bytes: retained normalized waveforms (float32).
    :param waveform_working_bytes: peak waveform bytes (largest decoded source and its
        resampler scratch, plus the retained results).
    :param feature_working_bytes: peak scratch of the largest feature extraction.
    :param prepared_result_bytes: per-clip features and masks plus the collated batch.
    """

    policy: AudioPolicy
    clips: tuple[ClipPlan, ...]
    encoded_bytes: int
    waveform_result_bytes: int
    waveform_working_bytes: int
    feature_working_bytes: int
    prepared_result_bytes: int

    @property
    def host_bytes(self) -> int:
        """Peak host bytes the request may hold besides its encoded input."""
        return self.waveform_working_bytes + self.feature_working_bytes + self.prepared_result_bytes


@attrs.frozen(kw_only=True)
class PreparedClip:
    """One clip's owned waveform, features and accounting (families.md "Common ground").

    Durations are microseconds; ``effective_rate_hz`` is the rate the frontend treats the
    normalized waveform as. When a truncating policy cut the clip, ``processed_duration_us``
    is less than ``received_duration_us``.
    """

    index: int
    ordinal: int
    origin: str
    sha256: str
    encoded_bytes: int
    source_rate_hz: int
    channels: int
    source_samples: int
    duration_us: int
    normalized_samples: int
    effective_rate_hz: int
    frames: int
    tokens: int
    received_duration_us: int
    processed_duration_us: int
    truncated: bool
    waveform: npt.NDArray[np.float32] = attrs.field(repr=False, eq=False)
    features: ClipFeatures = attrs.field(repr=False, eq=False)
    detail: Mapping[str, Any] = attrs.field(factory=frozen_mapping, converter=frozen_mapping)

    def accounting(self) -> dict[str, Any]:
        """The JSON-ready accounting of this clip."""
        return {
            "ordinal": self.ordinal,
            "source_rate": self.source_rate_hz,
            "channels": self.channels,
            "source_samples": self.source_samples,
            "duration_us": self.duration_us,
            "encoded_bytes": self.encoded_bytes,
            "normalized_samples": self.normalized_samples,
            "effective_rate": self.effective_rate_hz,
            "frames": self.frames,
            "tokens": self.tokens,
            "truncated": self.truncated,
            "processed_duration_us": self.processed_duration_us,
            "sha256": self.sha256,
            **{k: v for k, v in self.detail.items()},
        }


@attrs.frozen(kw_only=True)
class RequestTotals:
    """Request totals over all clips."""

    clips: int
    encoded_bytes: int
    source_samples: int
    duration_us: int
    normalized_samples: int
    frames: int
    tokens: int

    def as_dict(self) -> dict[str, int]:
        """JSON-ready totals."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class PreparedBatch:
    """The immutable result of one request: clips in order, totals and model inputs."""

    family: str
    policy: AudioPolicy = attrs.field(repr=False)
    clips: tuple[PreparedClip, ...]
    totals: RequestTotals
    inputs: FeatureBatch = attrs.field(repr=False, eq=False)
    plan: RequestPlan = attrs.field(repr=False, eq=False)

    @property
    def boundaries(self) -> tuple[tuple[int, int, int], ...]:
        """``(ordinal, start, stop)`` of each clip in the flattened normalized samples."""
        out = []
        start = 0
        for clip in self.clips:
            out.append((clip.ordinal, start, start + clip.normalized_samples))
            start += clip.normalized_samples
        return tuple(out)
