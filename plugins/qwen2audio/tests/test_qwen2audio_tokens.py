"""Frames and pooled-row counts: the one function, against the model and the processor."""

from __future__ import annotations

import numpy as np
import pytest

from audiogate_qwen2audio.geometry import audio_tokens, whisper_geometry
from audiogate_qwen2audio.melbank import slaney_mel_filters, whisper_mel_matrix


@pytest.mark.parametrize(
    ("samples", "frames", "tokens"),
    [
        (321, 3, 1),  # the serving guide's minimum: more than 320 samples, one row
        (800, 5, 1),  # 0.05 s
        (16_000, 100, 25),  # 1 s
        (116_800, 730, 182),  # 7.3 s
        (480_000, 3000, 750),  # 30 s: the serving guide's 750 rows
    ],
)
def test_documented_counts(samples, frames, tokens):
    geometry = whisper_geometry(samples)
    assert (geometry.valid_frames, geometry.tokens) == (frames, tokens)


def test_320_samples_give_no_pooled_row():
    assert whisper_geometry(320).tokens == 0
    assert whisper_geometry(321).tokens == 1


def test_formula_matches_the_models_own_length_arithmetic():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import Qwen2AudioEncoderConfig
    from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioEncoder

    encoder = Qwen2AudioEncoder(
        Qwen2AudioEncoderConfig(
            d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32
        )
    )
    lengths = torch.arange(0, 3001)
    _, pooled = encoder._get_feat_extract_output_lengths(lengths)
    assert [audio_tokens(int(n)) for n in lengths] == pooled.tolist()


def test_processor_formula_for_every_frame_count():
    # Qwen2AudioProcessor: (((l - 1) // 2 + 1) - 2) // 2 + 1 over the mask sum.
    for frames in range(3, 3001):
        assert audio_tokens(frames) == (((frames - 1) // 2 + 1) - 2) // 2 + 1


def test_computed_frames_are_exactly_those_whose_window_touches_audio():
    for samples in [*range(321, 1200), *range(478_000, 480_001, 7), 480_000]:
        geometry = whisper_geometry(samples)
        assert geometry.valid_frames == -(-samples // 160)
        touching = [t for t in range(3000) if 160 * t - 200 < samples]
        assert geometry.computed_frames == len(touching)


def test_out_of_range_is_a_programming_error():
    with pytest.raises(ValueError, match=r"0\.\.480000"):
        whisper_geometry(480_001)
    with pytest.raises(ValueError, match=r"0\.\.3000"):
        audio_tokens(3001)


def test_mel_bank_equals_transformers_bit_for_bit():
    pytest.importorskip("transformers")
    from transformers.audio_utils import mel_filter_bank

    want = mel_filter_bank(201, 128, 0, 8000, 16000, norm="slaney", mel_scale="slaney")
    got = slaney_mel_filters(n_fft=400, n_mels=128, f_min_hz=0.0, f_max_hz=8000.0, rate_hz=16000)
    np.testing.assert_array_equal(got, want)
    sparse = whisper_mel_matrix()
    assert sparse.shape == (128, 201)
    assert sparse.dtype == np.float32
    np.testing.assert_array_equal(sparse.toarray(), want.T.astype(np.float32))
    assert sparse.nnz == np.count_nonzero(want)


def test_mel_bank_refuses_impossible_bands():
    with pytest.raises(ValueError, match="f_max_hz"):
        slaney_mel_filters(n_fft=400, n_mels=128, f_min_hz=0.0, f_max_hz=9000.0, rate_hz=16000)
