"""The persisted feature tier is checksummed as a whole (issue #32): every single flipped
bit of a stored entry, in its magic, digest, header or arrays, is a miss, never other
content (version 1 checked the arrays only: 124 of 2,332 flips loaded altered records);
a plugin step failing on hits recomputes them from the source."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from audiogate import create_host, hookimpl
from audiogate.cache import CachedClip, FeatureCache, FeatureKey, from_blob, to_blob
from audiogate.pipeline import EncodedClip, PreparedClip, prepare_clips
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, FeatureBatch, readonly
from audiogate.testing.audio import noise, wav_bytes


def _entry(samples: int) -> CachedClip:
    waveform = readonly(np.linspace(-0.5, 0.5, samples, dtype=np.float32))
    frames = samples // 160
    features = readonly(waveform[: frames * 160].reshape(frames, 160).copy())
    duration_us = samples * 1_000_000 // 16_000
    return CachedClip(
        PreparedClip(
            index=0,
            ordinal=1,
            origin="bytes",
            sha256="a" * 64,
            encoded_bytes=samples * 2 + 44,
            source_rate_hz=16_000,
            channels=1,
            source_samples=samples,
            duration_us=duration_us,
            normalized_samples=samples,
            effective_rate_hz=16_000,
            frames=frames,
            tokens=(frames + 1) // 2,
            received_duration_us=duration_us,
            processed_duration_us=duration_us,
            truncated=False,
            waveform=waveform,
            features=ClipFeatures(features=features, frames=frames, tokens=(frames + 1) // 2),
        )
    )


def test_every_single_bit_flip_of_a_stored_entry_is_a_miss() -> None:
    key = FeatureKey("a" * 64, "f" * 64)
    blob = to_blob(key, _entry(480))
    assert blob is not None
    good = from_blob(key, blob)
    assert good is not None
    np.testing.assert_array_equal(good.clip.waveform, _entry(480).clip.waveform)
    accepted = []
    damaged = bytearray(blob)
    for bit in range(len(blob) * 8):
        damaged[bit // 8] ^= 1 << (bit % 8)
        if from_blob(key, bytes(damaged)) is not None:
            accepted.append(bit)
        damaged[bit // 8] ^= 1 << (bit % 8)
    assert accepted == []
    assert len(blob) * 8 > 10_000  # every region was flipped: magic, digest, header, arrays


def test_a_truncated_or_extended_entry_is_a_miss() -> None:
    key = FeatureKey("a" * 64, "f" * 64)
    blob = to_blob(key, _entry(320))
    assert blob is not None
    for cut in range(0, len(blob), 7):
        assert from_blob(key, blob[:cut]) is None
    assert from_blob(key, blob + b"\0") is None


def test_a_plugin_step_failing_on_hits_recomputes_them_from_the_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "core"))
    from toyfamily import TOY_POLICY, ToyFamily

    class FailsOnce(ToyFamily):
        fail = False

        @hookimpl
        def audiogate_collate_features(
            self, policy: AudioPolicy, clips: Sequence[ClipFeatures]
        ) -> FeatureBatch | None:
            if self.fail and self._mine(policy):
                self.fail = False
                raise ValueError("could not broadcast (3,128) into (63,128)")
            return super().audiogate_collate_features(policy, clips)

    toy = FailsOnce()
    host = create_host(load_entry_points=False, plugins=[toy])
    cache = FeatureCache(1 << 20)
    clips = [
        EncodedClip(data=wav_bytes(noise(samples=n, seed=n), rate_hz=16_000), ordinal=i + 1)
        for i, n in enumerate((3_200, 4_800))
    ]
    first = prepare_clips(host, TOY_POLICY, clips, cache=cache)
    assert len(toy.extracted) == 2
    toy.fail = True
    again = prepare_clips(host, TOY_POLICY, clips, cache=cache)
    assert len(toy.extracted) == 4  # both hits recomputed from their bytes
    np.testing.assert_array_equal(again.inputs.inputs["features"], first.inputs.inputs["features"])
    prepare_clips(host, TOY_POLICY, clips, cache=cache)
    assert len(toy.extracted) == 4  # the recomputed entries are hits again
