"""What processing makes: each clip's waveform, features and accounting, and the batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.pipeline.plans import RequestPlan
from audiogate.policy import AudioPolicy
from audiogate.policy.model import frozen_mapping
from audiogate.records import ClipFeatures, FeatureBatch

__all__ = ["PreparedBatch", "PreparedClip", "RequestTotals"]


@attrs.frozen(kw_only=True)
class PreparedClip:
    """One clip's owned waveform, features and accounting.

    The accounting follows mlxcel's ``OwnedAudioWaveform`` (``src/audio/preprocessing.rs``).
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
