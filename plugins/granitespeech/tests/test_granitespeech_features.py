"""The numpy frontend against ``GraniteSpeechFeatureExtractor`` (transformers 5.24.0,
torchaudio's ``MelSpectrogram`` via the stand-in of ``granitespeech_helpers``) and the
exact float64 evaluation of the same algorithm.

Tolerance: every value within 3e-7 of the exact evaluation, and within
``max(1e-5, reference error + 3e-7)`` of the reference, where "reference error" is the
reference's own distance from the exact evaluation (its float32 STFT: up to ~5e-5 on
pure tones, ~4e-7 on broadband signals); never more than 1e-4. Window and mel bank are
torch's and torchaudio's bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from granitespeech_helpers import exact_reference, make_signal, melscale_fbanks, reference_features

import audiogate.dsp.blocks as blocks
from audiogate.cancel import NEVER
from audiogate.errors import FeatureError, LimitError
from audiogate.records import readonly
from audiogate_granitespeech.geometry import audio_tokens, granite_geometry
from audiogate_granitespeech.logmel import hann_window_torch
from audiogate_granitespeech.melbank import htk_mel_bank

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

EXACT = 3e-7
PARITY = 1e-5
CEILING = 1e-4


def assert_parity(ours: np.ndarray, reference: np.ndarray, exact: np.ndarray) -> None:
    assert ours.shape == reference.shape == exact.shape
    assert np.abs(ours - exact).max() <= EXACT
    own = np.abs(reference - exact)
    distance = np.abs(ours - reference)
    assert (distance <= np.maximum(PARITY, own + EXACT)).all()
    assert distance.max() <= CEILING


def extract(host, policy, waveform):
    wave = readonly(np.asarray(waveform, dtype=np.float32).copy())
    plan = host.plan_features(policy, rate_hz=16_000, samples=wave.size, clip_index=0)
    return host.extract_features(policy, plan, wave, rate_hz=16_000, clip_index=0, cancel=NEVER)


def test_window_is_torchs_bit_for_bit():
    ours = hann_window_torch().view(np.uint32)
    assert np.array_equal(ours, torch.hann_window(400).numpy().view(np.uint32))


def test_mel_bank_is_torchaudios_bit_for_bit():
    ours = htk_mel_bank()
    theirs = melscale_fbanks(257, 0.0, 8000.0, 80, 16_000).numpy()
    assert ours.shape == (257, 80)
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


@pytest.mark.parametrize(
    "samples", [257, 258, 319, 320, 321, 359, 360, 361, 479, 480, 481, 4_960, 16_000, 16_159]
)
def test_geometry_matches_the_extractor(samples):
    x = make_signal("noise", samples=samples, seed=samples)
    reference = reference_features([x])
    geometry = granite_geometry(samples)
    assert reference["input_features"].shape == (1, geometry.rows, 160)
    assert reference["audio_embed_sizes"].tolist() == [geometry.tokens]
    assert reference["input_features_mask"].shape == (1, geometry.tokens)


def test_token_arithmetic():
    assert [audio_tokens(r) for r in (0, 1, 15, 16, 30, 31, 50)] == [0, 3, 3, 6, 6, 9, 12]
    assert granite_geometry(16_000).tokens == 12  # 1 s: 101 frames, 50 rows
    assert granite_geometry(480_000).tokens == 300  # 30 s: 1,500 rows


KINDS = ("noise", "speechlike", "tone", "silence", "clipped", "crescendo")
LENGTHS = (257, 320, 481, 5_000, 16_000, 16_161, 48_317)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("samples", LENGTHS)
def test_one_clip_matches_the_extractor(host, policy, kind, samples):
    x = make_signal(kind, samples=samples, seed=samples)
    ours = extract(host, policy, x).features
    reference = reference_features([x])["input_features"][0]
    assert_parity(ours, reference, exact_reference(x))


def test_silence_is_exact(host, policy):
    ours = extract(host, policy, np.zeros(16_000, dtype=np.float32)).features
    assert (ours == np.float32(-1.5)).all()


@pytest.mark.slow
def test_long_clip_matches_the_extractor(host, policy):
    x = make_signal("speechlike", samples=16_000 * 75 + 123, seed=3)
    ours = extract(host, policy, x).features
    reference = reference_features([x])["input_features"][0]
    assert_parity(ours, reference, exact_reference(x))


BATCHES = [
    [("noise", 16_000), ("speechlike", 8_000), ("tone", 300)],
    [("crescendo", 5_000), ("noise", 5_100)],
    # Clip 1's loudest frame is one of its reflected last frames: in the batch its
    # maximum drops, and its interior frames are recomputed (collate's second path).
    [("crescendo", 4_000), ("noise", 4_150), ("crescendo", 4_399), ("noise", 4_401)],
    [("clipped", 48_000), ("crescendo", 320), ("silence", 16_000)],
    [("speechlike", 16_000), ("speechlike", 16_000)],
    [("noise", 16_000), ("noise", 15_999), ("noise", 15_841), ("noise", 15_800)],
]


@pytest.mark.parametrize("case", BATCHES)
def test_a_batch_matches_the_extractor_on_the_padded_batch(host, policy, case):
    waves = [make_signal(kind, samples=n, seed=i) for i, (kind, n) in enumerate(case)]
    clips = [extract(host, policy, w) for w in waves]
    batch = host.collate_features(policy, clips).inputs
    reference = reference_features(waves)
    np.testing.assert_array_equal(
        batch["input_features_mask"], reference["input_features_mask"].astype(bool)
    )
    assert batch["input_features_mask"].dtype == np.bool_
    total = max(w.size for w in waves)
    for row, wave in enumerate(waves):
        padded = np.zeros(total, dtype=np.float32)
        padded[: wave.size] = wave
        assert_parity(
            batch["input_features"][row],
            reference["input_features"][row],
            exact_reference(padded),
        )


def test_threads_give_the_same_bytes(host, policy, monkeypatch):
    x = make_signal("speechlike", samples=16_000 * 9, seed=1)
    monkeypatch.setattr(blocks, "BLOCK_THREADS", 2)
    two = extract(host, policy, x).features.tobytes()
    monkeypatch.setattr(blocks, "BLOCK_THREADS", 1)
    assert extract(host, policy, x).features.tobytes() == two


@pytest.mark.parametrize("samples", [0, 1, 160, 256])
def test_256_samples_or_fewer_are_refused(host, policy, samples):
    with pytest.raises(FeatureError, match="too short"):
        host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)


def test_more_than_the_cap_is_refused_not_truncated(host, policy):
    host.plan_features(policy, rate_hz=16_000, samples=4_800_000, clip_index=0)
    with pytest.raises(LimitError):
        host.plan_features(policy, rate_hz=16_000, samples=4_800_001, clip_index=0)


def test_other_rates_are_refused_by_the_frontend(host, policy):
    with pytest.raises(FeatureError, match="16000 Hz"):
        host.plan_features(policy, rate_hz=22_050, samples=22_050, clip_index=0)
