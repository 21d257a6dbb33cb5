"""Generated WAV files through the whole pipeline, against Voxtral's reference pipeline.

Reference (``voxtral_helpers``): soundfile decode, channel mean, soxr HQ at soxr's length
(mistral-common's ``Audio``), zero padding to 30 s windows (``AudioEncoder.pad``) and
``VoxtralProcessor._retrieve_input_features`` (``WhisperFeatureExtractor``, 128 bins, one
clamp over all windows). Ours: ``audiogate.pipeline.prepare_clips`` (strict decoder, this
plugin's resample, feature and collate hooks). The features are compared on the 16 kHz
waveform our resampler produced, the waveform against the reference loader's.

The end-to-end test at the bottom runs ``VoxtralProcessor.apply_chat_template`` itself
(mistral-common's tokenizer on the example directory's ``tekken.json``) where
mistral-common is installed (the plugin's ``reference`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
from voxtral_helpers import (
    TOLERANCE,
    make_signal,
    reference_features,
    reference_waveform,
    wav_base64,
    wav_bytes,
)
from voxtral_tokenizer import MODEL_DIR

from audiogate.errors import FeatureError, LimitError
from audiogate.pipeline import EncodedClip, prepare_clips
from audiogate.testing.audio import wav_bytes as canonical_wav

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("soundfile")
pytest.importorskip("soxr")

# (rate, channels, seconds, kind, subtype): 8 to 96 kHz, one to six channels, 0.02 s to
# past two windows, silence and clipping; window edges (30 s exactly, one sample past).
CORPUS = [
    (8_000, 1, 0.02, "am", "PCM_16"),
    (11_025, 2, 1.0, "noise", "FLOAT"),
    (16_000, 1, 1.0, "am", "FLOAT"),
    (16_000, 6, 2.5, "noise", "PCM_16"),
    (22_050, 3, 0.5, "clipped", "FLOAT"),
    (24_000, 1, 3.0, "silence", "PCM_16"),
    (32_000, 4, 1.7, "tone", "FLOAT"),
    (44_100, 2, 1.0, "am", "PCM_16"),
    (48_000, 2, 1.0, "noise", "FLOAT"),
    (48_000, 5, 0.02, "clipped", "PCM_16"),
    (96_000, 1, 2.0, "am", "FLOAT"),
    (96_000, 6, 0.3, "noise", "FLOAT"),
    (16_000, 1, 30.0, "am", "PCM_16"),
    (44_100, 1, 30.0, "noise", "FLOAT"),
]
LONG = [
    (16_000, 1, 30.0 + 1 / 16_000, "noise", "FLOAT"),
    (48_000, 2, 61.3, "am", "PCM_16"),
    (8_000, 1, 65.0, "clipped", "FLOAT"),
]


def _check(host, policy, processor, rate, channels, seconds, kind, subtype):
    samples = round(seconds * rate)
    data = wav_bytes(
        make_signal(kind, samples=samples, rate_hz=rate, channels=channels, seed=rate + channels),
        rate_hz=rate,
        subtype=subtype,
    )
    batch = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])
    clip = batch.clips[0]
    want = reference_waveform(data)
    # Same decoder values and soxr stream; only the downmix rounds differently (float64
    # mean here, float32 in numpy's), so stereo and wider differ by an ulp or so.
    assert clip.waveform.shape == want.shape
    if channels == 1:
        np.testing.assert_array_equal(clip.waveform, want)
    else:
        np.testing.assert_allclose(clip.waveform, want, rtol=0, atol=2e-6)
    reference = reference_features(processor, np.asarray(clip.waveform))
    features = batch.inputs.inputs["input_features"]
    assert features.shape == reference.shape == (clip.tokens // 375, 128, 3000)
    assert features.dtype == np.float32
    assert float(np.abs(features - reference).max()) <= TOLERANCE
    windows = -(-want.shape[0] // 480_000)
    assert (clip.frames, clip.tokens) == (3000 * windows, 375 * windows)
    assert set(batch.inputs.inputs) == {"input_features"}


@pytest.mark.parametrize(("rate", "channels", "seconds", "kind", "subtype"), CORPUS)
def test_corpus_parity_with_the_reference(
    host, policy, processor, rate, channels, seconds, kind, subtype
):
    _check(host, policy, processor, rate, channels, seconds, kind, subtype)


@pytest.mark.parametrize(("rate", "channels", "seconds", "kind", "subtype"), LONG)
@pytest.mark.slow
def test_long_clips_are_split_into_windows_as_the_processor_splits_them(
    host, policy, processor, rate, channels, seconds, kind, subtype
):
    _check(host, policy, processor, rate, channels, seconds, kind, subtype)


def test_silence_gives_the_constant_floor(host, policy):
    batch = prepare_clips(
        host, policy, [EncodedClip(data=canonical_wav(np.zeros(8_000), rate_hz=16_000), ordinal=1)]
    )
    features = batch.inputs.inputs["input_features"]
    # log10(1e-10) = -10 everywhere, clamped at itself, (x + 4) / 4 = -1.5.
    assert np.unique(features).tolist() == [-1.5]


def test_a_30_second_clip_is_one_window_and_one_sample_more_is_two(host, policy):
    for samples, windows in ((480_000, 1), (480_001, 2)):
        data = canonical_wav(np.full(samples, 0.1), rate_hz=16_000)
        clip = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)]).clips[0]
        assert (clip.tokens, clip.frames) == (375 * windows, 3000 * windows)


def test_soxr_length_decides_the_window_at_a_boundary(host, policy):
    # 30 s at 44.1 kHz: soxr gives round(1,323,000 · 16000 / 44100) = 480,000 samples.
    data = canonical_wav(np.full(1_323_000, 0.1), rate_hz=44_100)
    clip = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)]).clips[0]
    assert (clip.normalized_samples, clip.tokens) == (480_000, 375)


def test_no_normalized_sample_is_refused(host, policy):
    # One sample at 44.1 kHz rounds to no 16 kHz sample: the processor would fail on it.
    with pytest.raises(FeatureError, match="too short"):
        prepare_clips(
            host,
            policy,
            [EncodedClip(data=canonical_wav(np.full(1, 0.1), rate_hz=44_100), ordinal=1)],
        )


@pytest.mark.slow
def test_past_30_minutes_is_refused_not_truncated(host, policy):
    samples = 1800 * 16_000
    data = canonical_wav(
        np.full(samples + 1, 0.1, dtype=np.float32), rate_hz=16_000, encoding="pcm16"
    )
    with pytest.raises(LimitError, match="duration"):
        prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)])


# --- the processor itself, end to end (mistral-common installed) -------------------------


@pytest.mark.parametrize(
    ("rates", "seconds"),
    [((16_000,), (1.0,)), ((44_100, 16_000), (31.0, 0.02)), ((8_000,), (3.3,))],
)
def test_apply_chat_template_end_to_end(rates, seconds):
    """``AudioGate.prepare`` against ``VoxtralProcessor.apply_chat_template`` on base64 WAV
    audio parts (mono: mistral-common refuses multi-channel base64 payloads)."""
    pytest.importorskip("mistral_common")
    from transformers import AutoProcessor

    import audiogate_voxtral.plugin as family_plugin
    from audiogate.api import AudioGate
    from audiogate.host import create_host

    processor = AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
    assert type(processor.tokenizer).__name__ == "MistralCommonBackend"
    payloads = [
        wav_base64(make_signal("am", samples=round(s * r), rate_hz=r, seed=i), rate_hz=r)
        for i, (r, s) in enumerate(zip(rates, seconds, strict=True))
    ]
    text = {"type": "text", "text": "What is said in the audio?"}
    reference = processor.apply_chat_template(
        [{"role": "user", "content": [*({"type": "audio", "base64": p} for p in payloads), text]}]
    )
    gate = AudioGate.from_model_dir(
        MODEL_DIR, host=create_host(plugins=[family_plugin], load_entry_points=False)
    )
    parts = [{"type": "input_audio", "input_audio": {"data": p, "format": "wav"}} for p in payloads]
    prepared = gate.prepare([{"role": "user", "content": [*parts, text]}])
    assert list(prepared.input_ids) == reference["input_ids"][0].tolist()
    want = reference["input_features"].numpy()
    got = prepared.model_inputs["input_features"]
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= TOLERANCE


def test_apply_chat_template_end_to_end_multi_turn():
    """Audio between text parts, two user messages in a row, an assistant turn: the ids
    mistral-common encodes (its normalizer joins adjacent text with a blank line)."""
    pytest.importorskip("mistral_common")
    from transformers import AutoProcessor

    import audiogate_voxtral.plugin as family_plugin
    from audiogate.api import AudioGate
    from audiogate.host import create_host

    processor = AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
    payloads = [
        wav_base64(make_signal("noise", samples=8_000 * (i + 1), seed=i), rate_hz=16_000)
        for i in range(4)
    ]

    def conversation(audio):
        return [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "First:"},
                    audio(0),
                    {"type": "text", "text": "and"},
                    {"type": "text", "text": "second:"},
                    audio(1),
                    audio(2),
                ],
            },
            {"role": "user", "content": "Same speaker?"},
            {"role": "assistant", "content": "Yes. "},
            {"role": "user", "content": [audio(3), {"type": "text", "text": "\n\nAnd this?"}]},
        ]

    reference = processor.apply_chat_template(
        conversation(lambda i: {"type": "audio", "base64": payloads[i]})
    )
    gate = AudioGate.from_model_dir(
        MODEL_DIR, host=create_host(plugins=[family_plugin], load_entry_points=False)
    )
    prepared = gate.prepare(
        conversation(
            lambda i: {"type": "input_audio", "input_audio": {"data": payloads[i], "format": "wav"}}
        )
    )
    assert list(prepared.input_ids) == reference["input_ids"][0].tolist()
    want = reference["input_features"].numpy()
    assert float(np.abs(prepared.model_inputs["input_features"] - want).max()) <= TOLERANCE


def test_the_checkpoints_own_tokenizer_file_alone(tmp_path):
    """A directory laid out as the real checkpoint (``tekken.json``, no ``tokenizer.json``):
    the gate loads mistral-common's backend, and a plain prompt's ids (control tokens as
    their ids, text as mistral-common encodes it) equal ``apply_chat_template``'s."""
    pytest.importorskip("mistral_common")
    import shutil

    from transformers import AutoProcessor

    import audiogate_voxtral.plugin as family_plugin
    from audiogate.acquire import AcquisitionPolicy, acquire_bytes
    from audiogate.api import AudioGate
    from audiogate.host import create_host

    for name in ("config.json", "preprocessor_config.json", "tekken.json"):
        shutil.copy(MODEL_DIR / name, tmp_path / name)
    gate = AudioGate.from_model_dir(
        tmp_path, host=create_host(plugins=[family_plugin], load_entry_points=False)
    )
    assert type(gate.tokenizer).__name__ == "MistralCommonBackend"
    audio = make_signal("am", samples=40_000, seed=3)
    data = wav_bytes(audio, rate_hz=16_000)
    prepared = gate.prepare(
        prompt="<s>[INST]Say what you hear.[/INST]",
        clips=acquire_bytes([data], policy=AcquisitionPolicy().narrowed(gate.policy)),
    )
    processor = AutoProcessor.from_pretrained(str(tmp_path), local_files_only=True)
    content = [
        {"type": "audio", "base64": wav_base64(audio, rate_hz=16_000)},
        {"type": "text", "text": "Say what you hear."},
    ]
    reference = processor.apply_chat_template([{"role": "user", "content": content}])
    assert list(prepared.input_ids) == reference["input_ids"][0].tolist()


def test_a_plain_transcription_prompt_gives_apply_transcription_requests_ids(tmp_path):
    """Voxtral's transcription mode, ``<s>[INST]`` + audio + ``[/INST]lang:en[TRANSCRIBE]``
    (mistral-common's ``encode_transcription``), as a plain prompt: the clip goes after the
    last ``[INST]``. (Its features differ: that path re-encodes the file as 16-bit WAV.)"""
    pytest.importorskip("mistral_common")
    from transformers import AutoProcessor

    import audiogate_voxtral.plugin as family_plugin
    from audiogate.acquire import AcquisitionPolicy, acquire_bytes
    from audiogate.api import AudioGate
    from audiogate.host import create_host

    data = wav_bytes(make_signal("noise", samples=520_000, seed=5), rate_hz=16_000)
    (tmp_path / "clip.wav").write_bytes(data)
    processor = AutoProcessor.from_pretrained(str(MODEL_DIR), local_files_only=True)
    reference = processor.apply_transcription_request(
        language="en", audio=str(tmp_path / "clip.wav"), model_id="mistralai/Voxtral-Mini-3B-2507"
    )
    gate = AudioGate.from_model_dir(
        MODEL_DIR, host=create_host(plugins=[family_plugin], load_entry_points=False)
    )
    prepared = gate.prepare(
        prompt="<s>[INST][/INST]lang:en[TRANSCRIBE]",
        clips=acquire_bytes([data], policy=AcquisitionPolicy().narrowed(gate.policy)),
    )
    assert list(prepared.input_ids) == reference["input_ids"][0].tolist()
    assert prepared.model_inputs["input_features"].shape == tuple(reference["input_features"].shape)
