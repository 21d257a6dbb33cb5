"""A tiny family plugin for core tests, registered directly (never installed).

Frames are non-overlapping 160-sample blocks of the 16 kHz waveform, a clip's tokens are
``ceil(frames / 2)``, and features are the blocks themselves, so expected values are
easy to derive. Knobs make it block, fail or record what it did.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from audiogate import FamilySpec, hookimpl
from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import FeatureError
from audiogate.policy import AudioPolicy, build_schema, standard_keys
from audiogate.records import ClipFeatures, FeatureBatch, FeaturePlan, ResamplePlan, readonly

HOP = 160
MIB = 1 << 20

TOY_POLICY = AudioPolicy(
    family="toyfam",
    revision="toy-rev-1",
    resampling="toy_repeat",
    min_source_rate_hz=8_000,
    max_source_rate_hz=48_000,
    max_duration_seconds=30,
    max_samples_per_clip=480_000,
    max_encoded_bytes_per_clip=64 * MIB,
    max_frames_per_clip=3_000,
    max_clips=16,
    max_encoded_bytes_per_request=64 * MIB,
    max_source_samples_per_request=48_000 * 60,
    max_normalized_samples_per_request=960_000,
    max_source_duration_us_per_request=60_000_000,
    max_frames_per_request=6_000,
    max_waveform_result_bytes_per_request=8 * MIB,
    max_waveform_working_bytes_per_request=64 * MIB,
    max_prepared_result_bytes_per_request=64 * MIB,
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=HOP,
    placeholder="rows_per_clip",
)


def toy_tokens(frames: int) -> int:
    return math.ceil(frames / 2)


class ToyFamily:
    """The toy family's hook implementations.

    Resampling: 16 kHz passes through; 8 kHz is upsampled by repeating each sample; 48 kHz
    is decimated by 3 (every third sample). Each loop polls the cancel token per block.
    """

    def __init__(
        self,
        *,
        policy: AudioPolicy = TOY_POLICY,
        gate: threading.Event | None = None,
        fail_with: Callable[[int], BaseException | None] | None = None,
        on_extract: Callable[[int], None] | None = None,
        feature_working_bytes: int = 0,
    ) -> None:
        self.policy = policy
        self.gate = gate
        self.fail_with = fail_with
        self.on_extract = on_extract
        self.feature_working_bytes = feature_working_bytes
        self.__name__ = f"toy-{id(self):x}"
        self.extracted: list[int] = []

    def _mine(self, policy: AudioPolicy) -> bool:
        return policy.family == self.policy.family

    @hookimpl
    def audiogate_register_families(self, register: Callable[[FamilySpec], None]) -> None:
        keys = standard_keys(self.policy, overflow_modes=("reject", "truncate"))
        register(
            FamilySpec(
                name=self.policy.family,
                model_types=("toy",),
                defaults=self.policy,
                keys=keys,
                schema=build_schema(self.policy.family, keys),
                revision=self.policy.revision,
                version="0.0.1",
            )
        )

    @hookimpl
    def audiogate_plan_resample(
        self, policy: AudioPolicy, source_rate_hz: int, source_samples: int
    ) -> ResamplePlan | None:
        if not self._mine(policy):
            return None
        factor = {8_000: 2.0, 16_000: 1.0, 48_000: 1 / 3}.get(source_rate_hz)
        if factor is None:
            raise FeatureError(f"toy family cannot resample {source_rate_hz} Hz")
        out = source_samples * 2 if factor == 2.0 else math.ceil(source_samples * factor)
        return ResamplePlan(
            source_rate_hz=source_rate_hz,
            source_samples=source_samples,
            output_rate_hz=16_000,
            output_samples=out,
            working_bytes=0,
            algorithm="toy_repeat",
        )

    @hookimpl
    def audiogate_resample(
        self,
        policy: AudioPolicy,
        plan: ResamplePlan,
        samples: np.ndarray,
        clip_index: int,
        cancel: CancelToken,
    ) -> np.ndarray | None:
        if not self._mine(policy):
            return None
        out = np.empty(plan.output_samples, dtype=np.float32)
        block = 4096
        for start in range(0, plan.output_samples, block):
            cancel.check(Checkpoint.RESAMPLE, clip_index)
            stop = min(start + block, plan.output_samples)
            idx = np.arange(start, stop)
            if plan.source_rate_hz == 8_000:
                out[start:stop] = samples[idx // 2]
            elif plan.source_rate_hz == 48_000:
                out[start:stop] = samples[idx * 3]
            else:
                out[start:stop] = samples[start:stop]
        return readonly(out)

    @hookimpl
    def audiogate_plan_features(
        self, policy: AudioPolicy, rate_hz: int, samples: int, clip_index: int
    ) -> FeaturePlan | None:
        if not self._mine(policy):
            return None
        frames = samples // HOP
        if frames == 0:
            raise FeatureError(
                f"{samples} samples is shorter than one {HOP}-sample frame", clip_index=clip_index
            )
        return FeaturePlan(
            frames=frames,
            tokens=toy_tokens(frames),
            feature_shape=(frames, HOP),
            feature_bytes=frames * HOP * 4,
            working_bytes=self.feature_working_bytes,
        )

    @hookimpl
    def audiogate_extract_features(
        self,
        policy: AudioPolicy,
        plan: FeaturePlan,
        waveform: np.ndarray,
        clip_index: int,
        cancel: CancelToken,
    ) -> ClipFeatures | None:
        if not self._mine(policy):
            return None
        if self.on_extract is not None:
            self.on_extract(clip_index)
        if self.gate is not None:
            while not self.gate.wait(0.01):
                cancel.check(Checkpoint.FEATURE, clip_index)
        if self.fail_with is not None:
            error = self.fail_with(clip_index)
            if error is not None:
                raise error
        out = np.empty(plan.feature_shape, dtype=np.float32)
        for start in range(0, plan.frames, 8):
            cancel.check(Checkpoint.FEATURE, clip_index)
            stop = min(start + 8, plan.frames)
            out[start:stop] = waveform[start * HOP : stop * HOP].reshape(stop - start, HOP)
        self.extracted.append(clip_index)
        return ClipFeatures(features=readonly(out), frames=plan.frames, tokens=plan.tokens)

    @hookimpl
    def audiogate_collate_features(
        self, policy: AudioPolicy, clips: Sequence[ClipFeatures]
    ) -> FeatureBatch | None:
        if not self._mine(policy):
            return None
        longest = max(c.frames for c in clips)
        batch = np.zeros((len(clips), longest, HOP), dtype=np.float32)
        mask = np.zeros((len(clips), longest), dtype=bool)
        for i, clip in enumerate(clips):
            batch[i, : clip.frames] = clip.features
            mask[i, : clip.frames] = True
        return FeatureBatch(
            inputs={"features": readonly(batch), "mask": readonly(mask)},
            tokens=tuple(c.tokens for c in clips),
        )


def toy_policy(**changes: Any) -> AudioPolicy:
    """The toy policy with some fields changed."""
    return attrs.evolve(TOY_POLICY, **changes)
