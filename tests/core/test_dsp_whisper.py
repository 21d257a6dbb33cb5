"""The shared Whisper frontend (:mod:`audiogate.dsp.whisper`) against ``WhisperFeatureExtractor``.

Two oracles for every padding mode, 80 and 128 bins:

* the extractor itself (torch path, transformers 5.24), called as each family's processor
  calls it (``padding="max_length"``; ``"longest"`` with ``truncation=False``, alone and
  in a batch; Voxtral's ``pad_to_multiple_of=480000`` and reshape; Audio Flamingo 3's and
  GLM-ASR's 30 s chunks as one batch; ``do_normalize``): features within 1e-4 (its own
  float32 FFT error; 3e-5 on all but 1 value in 10,000 of these signals), masks equal;
* the same algorithm evaluated exactly in float64 from torch's windowed frames: within
  5e-7 everywhere, which pins padding, reflection, framing, bank, clamp and scale apart
  from the reference's FFT noise.
"""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest

import audiogate.dsp.blocks
from audiogate.cancel import NEVER, Checkpoint
from audiogate.dsp import whisper, whisper_geometry
from audiogate.dsp.whisper import whisper_log_mel, whisper_mel_matrix, whisper_plan
from audiogate.errors import PreprocessCancelled
from audiogate.testing.cancel import CancelAt

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PARITY = 1e-4
USUAL = 3e-5
EXACT = 5e-7
CHUNK = 480_000

_EXTRACTORS: dict[int, Any] = {}


def _extractor(n_mels: int) -> Any:
    if n_mels not in _EXTRACTORS:
        _EXTRACTORS[n_mels] = transformers.WhisperFeatureExtractor(feature_size=n_mels)
    return _EXTRACTORS[n_mels]


def _signal(kind: str, samples: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(samples + seed)
    t = np.arange(samples) / 16_000
    if kind == "noise":
        x = 0.2 * rng.standard_normal(samples)
    elif kind == "am":
        x = 0.3 * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) * np.sin(2 * np.pi * 440 * t)
        x += 0.1 * rng.standard_normal(samples)
    elif kind == "silence":
        x = np.zeros(samples)
    elif kind == "clipped":
        x = np.clip(3.0 * np.sin(2 * np.pi * 97 * t) + 0.2 * rng.standard_normal(samples), -1, 1)
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


def _reference(
    clips: list[np.ndarray], n_mels: int, **kwargs: Any
) -> tuple[np.ndarray, np.ndarray]:
    out = _extractor(n_mels)(
        clips if len(clips) > 1 else clips[0],
        sampling_rate=16_000,
        return_attention_mask=True,
        return_tensors="np",
        **kwargs,
    )
    return out["input_features"], out["attention_mask"].astype(bool)


def _exact(padded: np.ndarray, n_mels: int) -> np.ndarray:
    """One item, already zero-padded, evaluated exactly ``[shape=(n_mels, P // 160)]``."""
    from transformers.audio_utils import mel_filter_bank

    reflected = np.pad(padded, 200, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(reflected, 400)[::160][: len(padded) // 160]
    windowed = (frames * torch.hann_window(400).numpy()).astype(np.float64)
    power = np.abs(np.fft.rfft(windowed, axis=-1)) ** 2
    mel = mel_filter_bank(201, n_mels, 0, 8000, 16000, norm="slaney", mel_scale="slaney")
    log = np.log10(np.maximum(power @ mel.astype(np.float32).astype(np.float64), 1e-10)).T
    return (np.maximum(log, log.max() - 8.0) + 4.0) / 4.0


def _padded(x: np.ndarray, length: int) -> np.ndarray:
    out = np.zeros(length, dtype=np.float32)
    out[: x.shape[0]] = x
    return out


def _check(got: np.ndarray, want: np.ndarray, exact: np.ndarray | None = None) -> None:
    assert got.shape == want.shape
    assert got.dtype == np.float32
    distance = np.abs(got - want)
    assert distance.max() <= PARITY, distance.max()
    assert (distance > USUAL).mean() <= 1e-4
    if exact is not None:
        assert np.abs(got - exact).max() <= EXACT


def _ours(x: np.ndarray, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    return whisper_log_mel(x, whisper_plan(x.shape[0], **kwargs), clip_index=0, cancel=NEVER)


MAX_LENGTHS = (1, 199, 200, 201, 321, 400, 16_000, 16_161, 479_799, 479_841, 480_000)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("samples", MAX_LENGTHS)
def test_max_length_is_the_extractors_default_call(n_mels: int, samples: int) -> None:
    x = _signal("am", samples)
    features, mask = _ours(x, n_mels=n_mels)
    want, want_mask = _reference([x], n_mels, padding="max_length")
    _check(features, want, _exact(_padded(x, CHUNK), n_mels)[None])
    np.testing.assert_array_equal(mask, want_mask)
    assert features.shape == (1, n_mels, 3000)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("samples", [201, 319, 320, 321, 519, 520, 521, 16_000, 16_159, 500_001])
def test_longest_alone_pads_nothing(n_mels: int, samples: int) -> None:
    x = _signal("noise", samples)
    features, mask = _ours(x, n_mels=n_mels, padding="longest")
    want, want_mask = _reference([x], n_mels, padding="longest", truncation=False)
    _check(features, want, _exact(x, n_mels)[None])
    np.testing.assert_array_equal(mask, want_mask)
    assert features.shape == (1, n_mels, samples // 160)


@pytest.mark.parametrize(("short", "longest"), [(5_000, 16_000), (15_900, 16_000), (321, 700)])
def test_longest_in_a_batch_pads_to_the_longest_clip(short: int, longest: int) -> None:
    # The shorter clip's last frames see zeros, not its own reflection, and its mask
    # has ceil(N / 160) ones: both depend on the batch's longest clip.
    x, y = _signal("am", short), _signal("noise", longest)
    want, want_mask = _reference([x, y], 128, padding="longest", truncation=False)
    for index, clip in enumerate((x, y)):
        plan = whisper_plan(clip.shape[0], padding="longest", padded_samples=longest)
        features, mask = whisper_log_mel(clip, plan, clip_index=0, cancel=NEVER)
        _check(features[0], want[index], _exact(_padded(clip, longest), 128))
        np.testing.assert_array_equal(mask[0], want_mask[index])


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("samples", [1, 1_000, 479_999, 480_000, 480_001, 1_000_000])
def test_multiple_is_voxtrals_call_and_reshape(n_mels: int, samples: int) -> None:
    x = _signal("am", samples)
    features, mask = _ours(x, n_mels=n_mels, padding="multiple")
    flat, want_mask = _reference(
        [x], n_mels, padding=True, truncation=False, pad_to_multiple_of=CHUNK
    )
    windows = -(-samples // CHUNK)
    # VoxtralProcessor._retrieve_input_features: reshape(n_mels, -1, 3000).transpose(0, 1)
    want = flat.reshape(n_mels, -1, 3000).transpose(1, 0, 2)
    exact = _exact(_padded(x, windows * CHUNK), n_mels).reshape(n_mels, -1, 3000)
    _check(features, want, exact.transpose(1, 0, 2))
    np.testing.assert_array_equal(mask.reshape(1, -1), want_mask)
    assert features.shape == (windows, n_mels, 3000)


@pytest.mark.parametrize("samples", [0, 1, 1_000, 480_000, 480_001, 960_000, 1_000_321])
def test_windows_are_audio_flamingos_and_glm_asrs_chunks(samples: int) -> None:
    x = _signal("noise", samples)
    features, mask = _ours(x, padding="windows")
    count = max(1, -(-samples // CHUNK))
    chunks = [x[i * CHUNK : min((i + 1) * CHUNK, samples)] for i in range(count)]
    want, want_mask = _reference(chunks, 128)
    exact = np.stack([_exact(_padded(chunk, CHUNK), 128) for chunk in chunks])
    _check(features, want, exact)
    np.testing.assert_array_equal(mask, want_mask)


@pytest.mark.parametrize(
    ("padding", "samples"), [("max_length", 16_000), ("longest", 16_001), ("windows", 500_000)]
)
def test_normalize_is_do_normalize_per_item(padding: str, samples: int) -> None:
    x = _signal("am", samples) + np.float32(0.3)
    features, mask = _ours(x, padding=padding, normalize=True)
    if padding == "windows":
        chunks = [x[:CHUNK], x[CHUNK:]]
        want, want_mask = _reference(chunks, 128, do_normalize=True)
    else:
        extra = {"truncation": False} if padding == "longest" else {}
        want, want_mask = _reference([x], 128, padding=padding, do_normalize=True, **extra)
    _check(features, want)
    np.testing.assert_array_equal(mask, want_mask)


@pytest.mark.parametrize("kind", ["silence", "clipped"])
@pytest.mark.parametrize("padding", ["max_length", "longest", "multiple", "windows"])
def test_silence_and_clipping(kind: str, padding: str) -> None:
    x = _signal(kind, 48_000)
    features, _ = _ours(x, padding=padding, n_mels=80)
    extra: dict[str, Any] = {"padding": "max_length"}
    if padding == "longest":
        extra = {"padding": "longest", "truncation": False}
    elif padding == "multiple":
        extra = {"padding": True, "truncation": False, "pad_to_multiple_of": CHUNK}
    want, _ = _reference([x], 80, **extra)
    _check(features.reshape(want.shape), want)
    if kind == "silence":
        assert (features == np.float32(-1.5)).all()


def test_the_banks_are_transformers_in_float32() -> None:
    from transformers.audio_utils import mel_filter_bank

    for n_mels in (80, 128):
        want = mel_filter_bank(201, n_mels, 0, 8000, 16000, norm="slaney", mel_scale="slaney")
        got = whisper_mel_matrix(n_mels).toarray()
        np.testing.assert_array_equal(got, want.T.astype(np.float32))
    assert whisper_mel_matrix(128) is whisper_mel_matrix(128)
    with pytest.raises(ValueError, match="n_mels must be one of"):
        whisper_mel_matrix(64)


def test_the_window_is_torchs_bit_for_bit() -> None:
    np.testing.assert_array_equal(whisper.hann_window_torch(), torch.hann_window(400).numpy())


@pytest.mark.parametrize(
    ("samples", "kwargs", "message"),
    [
        (480_001, {}, "exceed the 480000-sample window"),
        (100, {"n_mels": 64}, "n_mels must be one of"),
        (100, {"padding": "right"}, "padding must be one of"),
        (-1, {}, "samples must be >= 0"),
        (0, {"padding": "longest"}, "padding='longest' needs"),
        (200, {"padding": "longest"}, "padding='longest' needs"),
        (300, {"padding": "longest", "padded_samples": 299}, "padding='longest' needs"),
        (300, {"padded_samples": 400}, "applies to padding='longest'"),
        (0, {"padding": "multiple"}, "at least one sample"),
        (100, {"chunk_samples": 1_000}, "multiple of 160"),
    ],
)
def test_out_of_range_plans_are_refused(samples: int, kwargs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        whisper_plan(samples, **kwargs)


def test_a_waveform_that_is_not_the_planned_length_is_refused() -> None:
    with pytest.raises(ValueError, match="does not match the planned 1000 samples"):
        whisper_log_mel(np.zeros(999, np.float32), whisper_plan(1000), clip_index=2, cancel=NEVER)


def test_results_are_read_only_and_the_input_untouched() -> None:
    x = _signal("noise", 600_000)
    before = x.copy()
    features, mask = _ours(x, padding="windows", normalize=True)
    assert not features.flags.writeable
    assert not mask.flags.writeable
    assert features.flags.c_contiguous
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize(
    ("padding", "samples"),
    [("max_length", 200_001), ("multiple", 1_000_000), ("windows", 1_000_000), ("longest", 99_999)],
)
def test_threads_change_nothing(monkeypatch, padding: str, samples: int) -> None:
    x = _signal("am", samples)
    threaded = _ours(x, padding=padding)
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
    single = _ours(x, padding=padding)
    np.testing.assert_array_equal(threaded[0], single[0])
    np.testing.assert_array_equal(threaded[1], single[1])


@pytest.mark.parametrize(
    ("padding", "samples", "blocks"),
    [
        ("max_length", 480_000, 12),
        ("max_length", 1_000, 1),
        ("multiple", 960_000, 24),  # blocks never straddle a window
        ("windows", 480_001, 12 + 1),
    ],
)
def test_cancellation_is_polled_before_the_clip_and_every_block(
    padding: str, samples: int, blocks: int
) -> None:
    x = _signal("noise", samples)
    plan = whisper_plan(samples, padding=padding)
    counter = CancelAt()
    whisper_log_mel(x, plan, clip_index=0, cancel=counter)
    assert counter.count(Checkpoint.FEATURE) == 1 + blocks
    with pytest.raises(PreprocessCancelled) as caught:
        whisper_log_mel(x, plan, clip_index=4, cancel=CancelAt(Checkpoint.FEATURE, nth=2))
    assert caught.value.checkpoint == "Feature"
    assert caught.value.clip_index == 4


@pytest.mark.parametrize(
    ("padding", "samples", "normalize"),
    [
        ("max_length", 480_000, False),
        ("max_length", 16_000, True),
        ("longest", 321_000, False),
        ("multiple", 1_000_000, False),
        ("windows", 1_000_000, True),
    ],
)
def test_a_fresh_thread_stays_within_the_plan(padding: str, samples: int, normalize: bool) -> None:
    # A fresh thread builds its block scratch inside the call, as a request's first does.
    x = _signal("noise", samples)
    plan = whisper_plan(samples, padding=padding, normalize=normalize)
    peak: list[int] = []

    def run() -> None:
        tracemalloc.start()
        whisper_log_mel(x, plan, clip_index=0, cancel=NEVER)
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
        plan = whisper_plan(samples, padding=padding, normalize=normalize)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    assert peak[0] <= plan.working_bytes + plan.feature_bytes, (peak[0], plan)


def test_the_plan_counts_what_the_result_holds() -> None:
    plan = whisper_plan(1_000_000, padding="multiple", n_mels=80)
    features, mask = whisper_log_mel(_signal("noise", 1_000_000), plan, clip_index=0, cancel=NEVER)
    assert features.nbytes + mask.nbytes == plan.feature_bytes
    assert (plan.windows, plan.window_frames) == mask.shape == (3, 3000)
    assert plan.valid_frames == int(mask.sum()) == 6250
    assert plan.computed_frames == 6252
    # The plan's arithmetic imports no SciPy: a family's policy may import it.
    assert whisper_geometry.whisper_plan is whisper_plan
