"""The features stage of a family that feeds 30 s Whisper windows: :class:`WindowedWhisper`.

Audio Flamingo 3 and GLM-ASR cut a clip into 30 s windows, pad each to the window and
transform and clamp each on its own (their processors pass the windows to
``WhisperFeatureExtractor`` as a batch): :func:`audiogate.dsp.whisper.whisper_log_mel` in
its ``"windows"`` mode. What differs between such families is their geometry (how many
rows the encoder keeps of the frames), their shortest clip, their longest, and the name
of their audio token; a family's ``features.py`` builds one :class:`WindowedWhisper` from
its pinned constants and forwards its hooks' ``plan_features`` and ``extract_features``
to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken
from audiogate.dsp.whisper import WhisperPlan, whisper_log_mel, whisper_plan
from audiogate.dsp.whisper_geometry import SAMPLE_RATE_HZ
from audiogate.errors import FeatureError, LimitError
from audiogate.pipeline.preflight import COLLATED_BYTES
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeaturePlan

__all__ = ["WindowedGeometry", "WindowedWhisper"]


class WindowedGeometry(Protocol):
    """What a windowed family's geometry function says of a clip of ``samples``."""

    @property
    def samples(self) -> int: ...
    @property
    def windows(self) -> int: ...
    @property
    def valid_frames(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    @property
    def feature_shape(self) -> tuple[int, ...]: ...


@attrs.frozen(kw_only=True)
class WindowedWhisper:
    """One family's windowed Whisper features: plan and extraction from its geometry.

    :param geometry: the family's geometry of a clip of ``samples`` 16 kHz samples (the
        one function its token counts and feature shapes come from).
    :param n_mels: mel bins (128 for both shipped families).
    :param window_samples: samples per window (480,000: 30 s).
    :param min_samples: the shortest clip that gives one audio token.
    :param max_samples: the longest clip the encoder reads whole (more is refused, where
        the processor would drop the windows past it silently).
    :param max_rows: the most audio tokens of one clip.
    :param token: the family's audio token, for the refusal of a short clip.
    :param mask_itemsize: bytes of one frame of the collated mask (the family's collate
        stacks every clip's windows: ``windows × (n_mels × 3000 × 4 + 3000 ×
        mask_itemsize)`` bytes a clip, which the plan gives the preflight).
    """

    geometry: Callable[[int], WindowedGeometry]
    n_mels: int
    window_samples: int
    min_samples: int
    max_samples: int
    max_rows: int
    token: str
    mask_itemsize: int

    def frontend_plan(self, geometry: WindowedGeometry) -> WhisperPlan:
        """The shared Whisper frontend's plan of one clip (its windows, bytes, scratch)."""
        plan = whisper_plan(
            geometry.samples,
            n_mels=self.n_mels,
            padding="windows",
            chunk_samples=self.window_samples,
        )
        # One arithmetic, two places: the frontend's windows and mask must be the geometry's.
        assert plan.feature_shape == geometry.feature_shape, (plan.feature_shape, geometry)
        assert plan.valid_frames == geometry.valid_frames, (plan.valid_frames, geometry)
        return plan

    def checked_geometry(
        self, policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
    ) -> WindowedGeometry:
        """The clip's geometry once its rate and length are admitted.

        :raises FeatureError: not 16 kHz, or fewer than ``min_samples`` (or the policy's
            ``min_samples_per_clip``, where larger).
        :raises LimitError: ``duration samples``: more than ``max_samples`` (or the
            policy's ``max_samples_per_clip``, where smaller).
        """
        if rate_hz != SAMPLE_RATE_HZ:
            raise FeatureError(
                f"the Whisper frontend takes {SAMPLE_RATE_HZ} Hz input, not {rate_hz} Hz",
                clip_index=clip_index,
            )
        minimum = max(self.min_samples, policy.min_samples_per_clip)
        if samples < minimum:
            raise FeatureError(
                f"{samples} normalized samples at {SAMPLE_RATE_HZ} Hz is too short: more than "
                f"{minimum - 1} are needed (at least {minimum}) to produce one {self.token} row",
                clip_index=clip_index,
            )
        maximum = min(self.max_samples, policy.max_samples_per_clip)
        if samples > maximum:
            raise LimitError(
                "duration samples", actual=samples, maximum=maximum, clip_index=clip_index
            )
        geometry = self.geometry(samples)
        rows = min(self.max_rows, int(policy.options.get("max_rows_per_clip", self.max_rows)))
        assert 1 <= geometry.tokens <= rows, (samples, geometry.tokens, rows)
        return geometry

    def plan_features(
        self, policy: AudioPolicy, *, rate_hz: int, samples: int, clip_index: int
    ) -> FeaturePlan:
        """Windows, frames, tokens and bytes of one clip, before extraction."""
        geometry = self.checked_geometry(
            policy, rate_hz=rate_hz, samples=samples, clip_index=clip_index
        )
        plan = self.frontend_plan(geometry)
        windows, frames = geometry.feature_shape[0], geometry.feature_shape[-1]
        stacked = windows * frames * (self.n_mels * np.dtype(np.float32).itemsize)
        stacked += windows * frames * self.mask_itemsize
        return FeaturePlan(
            frames=geometry.valid_frames,
            tokens=geometry.tokens,
            feature_shape=geometry.feature_shape,
            feature_bytes=plan.feature_bytes,
            working_bytes=plan.working_bytes,
            detail={
                "windows": geometry.windows,
                "valid_frames": geometry.valid_frames,
                "computed_frames": plan.computed_frames,
                "rows": geometry.tokens,
                COLLATED_BYTES: stacked,
            },
        )

    def extract_features(
        self,
        policy: AudioPolicy,
        plan: FeaturePlan,
        waveform: npt.NDArray[np.float32],
        *,
        rate_hz: int,
        clip_index: int,
        cancel: CancelToken,
    ) -> ClipFeatures:
        """Features ``[shape=(windows, n_mels, 3000)]`` and the per-window frame masks
        ``[shape=(windows, 3000)]`` of one clip, as planned."""
        geometry = self.checked_geometry(
            policy, rate_hz=rate_hz, samples=int(waveform.shape[0]), clip_index=clip_index
        )
        if (geometry.valid_frames, geometry.tokens) != (plan.frames, plan.tokens):
            raise ValueError(
                f"clip {clip_index + 1}: {waveform.shape[0]} samples give "
                f"{geometry.valid_frames} frames / {geometry.tokens} tokens, but the plan has "
                f"{plan.frames} / {plan.tokens}"
            )
        features, mask = whisper_log_mel(
            np.ascontiguousarray(waveform, dtype=np.float32),
            self.frontend_plan(geometry),
            clip_index=clip_index,
            cancel=cancel,
        )
        return ClipFeatures(
            features=features, mask=mask, frames=geometry.valid_frames, tokens=geometry.tokens
        )
