"""What admission makes: each clip's plan and the request's, before any sample exists."""

from __future__ import annotations

import attrs

from audiogate.decode.geometry import ClipGeometry
from audiogate.policy import AudioPolicy
from audiogate.records import FeaturePlan, ResamplePlan

__all__ = ["ClipPlan", "RequestPlan"]


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
