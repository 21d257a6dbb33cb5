"""Windows, frames and token counts (``geometry``), the features plan, and the bundled
example model directory."""

from __future__ import annotations

import json

import numpy as np
import pytest

from audiogate.cancel import NEVER
from audiogate.errors import FeatureError, LimitError
from audiogate.policy.checkpoint import read_checkpoint_configs
from audiogate_audioflamingo3.geometry import (
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    af3_geometry,
    audio_tokens,
)
from audiogate_audioflamingo3.policy import MIN_SAMPLES

EDGES = [
    321,
    480,
    481,
    640,
    641,
    16_000,
    479_999,
    480_000,
    480_001,
    480_160,
    480_161,
    480_320,
    480_321,
    480_480,
    480_481,
    960_000,
    960_001,
    MAX_SAMPLES - 1,
    MAX_SAMPLES,
]


def processor_windows(samples: int) -> list[int]:
    """``AudioFlamingo3Processor._process_audio``'s window lengths, restated."""
    window, cap = 480_000, 20
    count = min(max(1, -(-samples // window)), cap)
    end = min(samples, count * window)
    return [min((i + 1) * window, end) - i * window for i in range(count)]


def model_tokens(window_frames: list[int]) -> int:
    """The model's count: ``_get_feat_extract_output_lengths`` per mask row, summed."""
    total = 0
    for frames in window_frames:
        conv = (frames - 1) // 2 + 1
        total += (conv - 2) // 2 + 1
    return total


@pytest.mark.parametrize("samples", EDGES)
def test_geometry_is_the_processors_and_the_models(samples):
    geometry = af3_geometry(samples)
    windows = processor_windows(samples)
    frames = [-(-n // 160) for n in windows]
    assert geometry.windows == len(windows)
    assert geometry.valid_frames == sum(frames)
    assert geometry.tokens == audio_tokens(sum(frames)) == model_tokens(frames)
    assert geometry.feature_shape == (len(windows), 128, 3000)


def test_token_counts_at_known_points():
    assert [audio_tokens(n) for n in (2, 3, 100, 3000, 4501, MAX_FRAMES)] == [
        0,
        1,
        25,
        750,
        1125,
        MAX_ROWS,
    ]
    assert af3_geometry(MIN_SAMPLES - 1).tokens == 0
    assert af3_geometry(MIN_SAMPLES).tokens == 1
    with pytest.raises(ValueError, match="samples must be in"):
        af3_geometry(MAX_SAMPLES + 1)


def test_plans_refuse_short_and_long_clips_typed(host, policy):
    with pytest.raises(FeatureError):
        host.plan_features(policy, rate_hz=16_000, samples=MIN_SAMPLES - 1, clip_index=2)
    with pytest.raises(LimitError):
        host.plan_features(policy, rate_hz=16_000, samples=MAX_SAMPLES + 1, clip_index=2)
    with pytest.raises(FeatureError):
        host.plan_features(policy, rate_hz=48_000, samples=16_000, clip_index=2)


@pytest.mark.parametrize("samples", [321, 480_000, 480_001, 1_234_567])
def test_extraction_is_what_was_planned(host, policy, samples):
    plan = host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)
    waveform = np.random.default_rng(samples).uniform(-0.5, 0.5, samples).astype(np.float32)
    waveform.flags.writeable = False
    features = host.extract_features(
        policy, plan, waveform, rate_hz=16_000, clip_index=0, cancel=NEVER
    )
    assert features.features.shape == plan.feature_shape
    assert features.mask is not None
    assert features.mask.shape == (plan.feature_shape[0], 3000)
    # Every window but the last is full; the last has ceil(rest / 160) leading ones.
    assert features.mask[:-1].all()
    rest = samples - 480_000 * (plan.feature_shape[0] - 1)
    assert int(features.mask[-1].sum()) == -(-rest // 160)
    assert features.mask[-1, : -(-rest // 160)].all()
    assert plan.detail["windows"] == plan.feature_shape[0]


def test_the_example_model_directory_loads_as_the_checkpoint(host, models_dir):
    transformers = pytest.importorskip("transformers")
    directory = models_dir / "audio-flamingo-3-hf"
    processor = transformers.AutoProcessor.from_pretrained(str(directory))
    assert type(processor).__name__ == "AudioFlamingo3Processor"
    assert (processor.audio_token, processor.audio_token_id) == ("<sound>", 151_669)
    assert processor.max_audio_len == 600
    extractor = transformers.AutoFeatureExtractor.from_pretrained(str(directory))
    assert type(extractor).__name__ == "WhisperFeatureExtractor"
    assert (extractor.feature_size, extractor.n_samples) == (128, 480_000)
    config = transformers.AutoConfig.from_pretrained(str(directory))
    assert (config.model_type, config.audio_token_id) == ("audioflamingo3", 151_669)
    policy = host.parse_policy("audioflamingo3", read_checkpoint_configs(directory))
    assert policy == host.default_policy("audioflamingo3")


def test_the_example_tokenizer_is_fresh(models_dir):
    pytest.importorskip("transformers")
    from audioflamingo3_tokenizer import stale

    assert stale() == []
    saved = json.loads((models_dir / "audio-flamingo-3-hf" / "tokenizer_config.json").read_text())
    assert saved["eos_token"] == "<|im_end|>"


def test_a_checkpoint_that_states_another_window_cap_is_refused(host, models_dir, tmp_path):
    """``max_audio_len`` other than 600 would change the processor's windows: refused."""
    from audiogate.errors import PolicyError

    source = models_dir / "audio-flamingo-3-hf"
    for name in ("config.json", "preprocessor_config.json"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    document = json.loads((source / "processor_config.json").read_text())
    document["max_audio_len"] = 300
    (tmp_path / "processor_config.json").write_text(json.dumps(document))
    with pytest.raises(PolicyError):
        host.parse_policy("audioflamingo3", read_checkpoint_configs(tmp_path))


@pytest.mark.slow
def test_the_reservation_covers_a_maximal_clip(host, policy):
    """The longest admitted clip (every window) allocates no more than its planned bytes."""
    import tracemalloc

    from audiogate.pipeline import preflight, prepare_clips
    from audiogate.testing.audio import encoded_clip

    seconds = MAX_SAMPLES / 16_000
    request = [encoded_clip(seconds=seconds, rate_hz=16_000, ordinal=1)]
    plan = preflight(host, policy, request)
    prepare_clips(host, policy, [encoded_clip(seconds=1.0, rate_hz=16_000)])  # warm caches
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        batch = prepare_clips(host, policy, request)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert batch.clips[0].tokens == plan.clips[0].features.tokens
    assert peak <= plan.host_bytes, (peak, plan)
