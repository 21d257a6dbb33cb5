"""End to end through the core pipeline: preflight, decode, resample, features, collate."""

from __future__ import annotations

import numpy as np
import pytest
from phi4mm_helpers import signal, wav_bytes
from reference_phi4mm import compute_audio_embed_size, original_features

from audiogate.decode import decode, inspect
from audiogate.errors import DecodeError, FeatureError
from audiogate.host import FamilyHost

pipeline = pytest.importorskip("audiogate.pipeline")

# (rate, channels, encoding, seconds): every branch of the integer-ratio rule.
CLIPS = [
    (44_100, 2, "pcm16", 1.3),
    (8_000, 1, "f32", 0.7),
    (11_025, 2, "f32", 0.5),
    (48_000, 1, "pcm16", 2.0),
]


def _encoded(specs):
    return [
        pipeline.EncodedClip(
            data=wav_bytes(signal(round(r * s), r, channels=c, seed=i), r, e), ordinal=i + 1
        )
        for i, (r, c, e, s) in enumerate(specs)
    ]


def test_a_mixed_request_matches_the_original_clip_by_clip(host: FamilyHost, remote) -> None:
    encoded = _encoded(CLIPS)
    batch = pipeline.prepare_clips(host, remote, encoded)
    assert batch.family == "phi4mm"
    features = batch.inputs.inputs["input_audio_embeds"]
    mask = batch.inputs.inputs["audio_attention_mask"]
    assert features.shape == (4, max(c.frames for c in batch.clips), 80)
    for index, clip in enumerate(batch.clips):
        data = encoded[index].data
        source = decode(data, inspect(data, clip_index=index), clip_index=index)
        expected = original_features(source.astype(np.float64), CLIPS[index][0])
        assert clip.frames == expected.shape[0]
        assert clip.tokens == compute_audio_embed_size(clip.frames)
        assert np.abs(features[index, : clip.frames] - expected).max() <= 2e-6
        assert mask[index].sum() == clip.frames
    assert batch.inputs.tokens == tuple(c.tokens for c in batch.clips)
    assert [c.effective_rate_hz for c in batch.clips] == [16_000, 8_000, 8_000, 16_000]


def test_the_pipeline_refuses_what_the_frontend_refuses(host: FamilyHost, remote) -> None:
    with pytest.raises(DecodeError) as info:
        pipeline.prepare_clips(host, remote, _encoded([(7_999, 1, "pcm16", 1.0)]))
    assert info.value.code == "rate_below_minimum"
    with pytest.raises(FeatureError, match="too short"):
        # 0.03 s at 44.1 kHz halves to 662 samples: fine; 0.008 s gives 177: too short.
        pipeline.prepare_clips(host, remote, _encoded([(44_100, 1, "pcm16", 0.008)]))


def test_the_native_variant_resamples_with_soxr_to_16khz(host: FamilyHost, native) -> None:
    batch = pipeline.prepare_clips(
        host, native, _encoded([(44_100, 1, "pcm16", 1.0), (7_000, 1, "f32", 0.5)])
    )
    assert [c.effective_rate_hz for c in batch.clips] == [16_000, 16_000]
    # transformers' load_audio length: ceil(n · 16000 / fs).
    assert [c.normalized_samples for c in batch.clips] == [16_000, 8_000]
    assert [c.frames for c in batch.clips] == [98, 48]
