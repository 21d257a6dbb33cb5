"""``AudiogateProcessor`` against each family's transformers processor (5.24.0) on the
bundled example directories: keys, shapes, dtypes, ids and masks equal, features within
the family's parity tolerance; and audiogate's refusals where transformers would go on.

Gemma 3n's, Phi-4 MM's and the Qwen Omni processors also hold an image (and video)
processor, which needs PIL and torchvision (not installed): the references are built
from the checkpoint's tokenizer and feature extractor with a stand-in image processor,
never called without images. Granite Speech's extractor needs torchaudio (no wheel for
torch 2.13): its plugin tests' stand-in is used. Voxtral's cannot be built here (its
audio path needs mistral-common): that test is skipped with the reason.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

import torch
from transformers import AutoFeatureExtractor, AutoTokenizer, BatchFeature
from transformers.processing_utils import ProcessorMixin

from audiogate.errors import (
    AcquisitionError,
    AudioGateError,
    ChatRequestError,
    ContextLimitError,
    LimitError,
    PlaceholderError,
    PolicyError,
)
from audiogate.integrations.transformers_processor import AudiogateProcessor

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
RATE = 16_000


class _NoImages:
    """Stands in for the image processor a processor is constructed with."""

    model_input_names: tuple[str, ...] = ()


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _without_image_check(monkeypatch: pytest.MonkeyPatch) -> None:
    original = ProcessorMixin.check_argument_for_proper_class

    def check(self: Any, name: str, argument: Any) -> Any:
        if isinstance(argument, _NoImages):
            return _NoImages
        return original(self, name, argument)

    monkeypatch.setattr(ProcessorMixin, "check_argument_for_proper_class", check)


def _auto(directory: Path, _monkeypatch: pytest.MonkeyPatch) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(directory)


def _gemma3n(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from transformers import Gemma3nProcessor

    _without_image_check(monkeypatch)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    return Gemma3nProcessor(
        feature_extractor=AutoFeatureExtractor.from_pretrained(directory),
        image_processor=_NoImages(),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )


def _phi4mm(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from transformers import Phi4MultimodalProcessor

    _without_image_check(monkeypatch)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    return Phi4MultimodalProcessor(
        image_processor=_NoImages(),
        audio_processor=AutoFeatureExtractor.from_pretrained(directory),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )


def _omni(processor_class: str) -> Callable[..., Any]:
    def build(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
        import transformers

        _without_image_check(monkeypatch)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        return getattr(transformers, processor_class)(
            image_processor=_NoImages(),
            video_processor=_NoImages(),
            feature_extractor=AutoFeatureExtractor.from_pretrained(directory),
            tokenizer=tokenizer,
            chat_template=tokenizer.chat_template,
        )

    return build


def _granitespeech(directory: Path, _monkeypatch: pytest.MonkeyPatch) -> Any:
    # GraniteSpeechFeatureExtractor needs torchaudio, which has no wheel for torch 2.13:
    # the plugin's tests' stand-in (torchaudio's MelSpectrogram transcribed onto
    # torch.stft), registered for the session as those tests register it.
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "plugins" / "granitespeech" / "tests"
    spec = importlib.util.spec_from_file_location(
        "_granitespeech_oracle", path / "granitespeech_helpers.py"
    )
    assert spec is not None
    assert spec.loader is not None
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    helpers.install_torchaudio_stand_in()
    return _auto(directory, _monkeypatch)


#: directory → (reference builder, audio text of clip k, feature tolerance, mask key
#: whose false rows the reference computes from padding and audiogate fills with zeros)
FAMILIES: dict[str, tuple[Callable[..., Any], Callable[[int], str], float, str | None]] = {
    "qwen2-audio-7b-instruct": (
        _auto,
        lambda k: f"Audio {k}: <|audio_bos|><|AUDIO|><|audio_eos|>\n",
        # 3e-5 but where the reference's own float32 error is larger (qwen2audio_helpers).
        5e-5,
        None,
    ),
    "gemma-3n-e4b-it": (_gemma3n, lambda k: "<audio_soft_token>", 5e-6, None),
    "phi-4-multimodal-instruct-hf": (
        _phi4mm,
        lambda k: "<|audio|>",
        2e-6,
        "audio_attention_mask",
    ),
    # The family's ceiling against the reference on the stand-in (its features tests).
    "granite-speech-3.3-2b": (_granitespeech, lambda k: "<|audio|>", 1e-4, None),
    "qwen2.5-omni-7b": (
        _omni("Qwen2_5OmniProcessor"),
        lambda k: "<|audio_bos|><|AUDIO|><|audio_eos|>",
        1e-4,
        None,
    ),
    "qwen3-omni-30b-a3b-instruct": (
        _omni("Qwen3OmniMoeProcessor"),
        lambda k: "<|audio_start|><|audio_pad|><|audio_end|>",
        1e-4,
        None,
    ),
    # Both families' parity tolerance (their plugins' helpers): float32 log-mel rounding.
    "audio-flamingo-3-hf": (_auto, lambda k: "<sound>", 1e-4, None),
    # GlmAsrProcessor expands the template's block as is; a bare <|pad|> it leaves
    # unwrapped, which audiogate's family wraps (its chat rules).
    "glm-asr-nano-2512": (
        _auto,
        lambda k: "<|begin_of_audio|><|pad|><|end_of_audio|>",
        1e-4,
        None,
    ),
}
#: Their processors refuse more than one clip in one text ("must match 1:1"), which the
#: families take (the clips' runs in order, as the model consumes them).
ONE_CLIP_PER_TEXT = frozenset({"audio-flamingo-3-hf", "glm-asr-nano-2512"})
#: Its processor pads a call's clips to the longest before framing them, so a shorter
#: clip's last frames see zeros; the family frames each clip alone (its collate module).
FRAMED_ALONE = frozenset({"qwen3-omni-30b-a3b-instruct"})
#: Its chat template takes string content only (TypeError on a list of parts).
STRING_CONTENT_TEMPLATE = frozenset({"granite-speech-3.3-2b"})
#: Their processors pad texts (on the left) unless told not to, and an explicit
#: ``padding=True`` pads their features to the longest clip too, shorter than the 30 s
#: window their encoders add position embeddings to: audiogate keeps whole windows.
PADS_BY_DEFAULT = frozenset({"audio-flamingo-3-hf", "glm-asr-nano-2512"})
#: Their processors cut a clip into 30 s windows (one feature row each) up to 10 minutes.
WINDOWED = ("audio-flamingo-3-hf", "glm-asr-nano-2512")
#: Their processors take a clip past 30 s whole (one longer feature row).
UNWINDOWED_LONG = ("granite-speech-3.3-2b", "qwen2.5-omni-7b", "qwen3-omni-30b-a3b-instruct")


def _tone(seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * hz * t) + 0.01 * np.cos(2 * np.pi * 3_100 * t)).astype(
        np.float32
    )


def _pcm16(seconds: float) -> np.ndarray:
    return np.round(_tone(seconds) * 32_767).astype(np.int16)


def _wav(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(samples.tobytes())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def processors() -> dict[str, AudiogateProcessor]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        return {name: AudiogateProcessor.from_pretrained(MODELS / name) for name in FAMILIES}


def _assert_same(
    name: str, expected: Any, got: Any, *, reference: Any = None, clips: Any = ()
) -> None:
    """``got`` is ``expected``; for a family in :data:`FRAMED_ALONE` given several
    ``clips``, each clip's features are compared with ``reference``'s for it alone."""
    _, token, tolerance, padded_mask = FAMILIES[name]
    alone = name in FRAMED_ALONE and len(clips) > 1
    assert isinstance(got, BatchFeature)
    assert sorted(got.keys()) == sorted(expected.keys())
    for key, want in expected.items():
        have = got[key]
        assert tuple(have.shape) == tuple(want.shape), key
        assert have.dtype == want.dtype, key
        if not torch.is_floating_point(want):
            assert torch.equal(have, want), key
            continue
        if alone:
            for index, clip in enumerate(clips):
                one = reference(text=token(1), audio=[clip], sampling_rate=RATE)[key][0]
                np.testing.assert_allclose(
                    have[index][..., : one.shape[-1]].numpy(),
                    np.asarray(one),
                    atol=tolerance,
                    rtol=0,
                )
            continue
        valid = torch.ones(want.shape[:2], dtype=torch.bool)
        if padded_mask is not None and padded_mask in expected:
            valid = expected[padded_mask].bool()
        np.testing.assert_allclose(
            have[valid].numpy(), want[valid].numpy(), atol=tolerance, rtol=0, err_msg=key
        )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_one_text_one_clip(name, processors, monkeypatch):
    build, token, _, _ = FAMILIES[name]
    reference = build(MODELS / name, monkeypatch)
    text = f"Listen. {token(1)}What is said?"
    audio = _tone(2.0)
    kwargs: dict[str, Any] = {"sampling_rate": RATE, "return_tensors": "pt"}
    expected = reference(text=text, audio=[audio], **kwargs)
    _assert_same(name, expected, processors[name](text=text, audio=[audio], **kwargs))
    # One array without a list, under the older keyword: the same.
    _assert_same(name, expected, processors[name](text=text, audios=audio, **kwargs))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_one_text_two_clips(name, processors, monkeypatch):
    build, token, _, _ = FAMILIES[name]
    reference = build(MODELS / name, monkeypatch)
    text = f"First {token(1)} then {token(2)}compare."
    clips = [_tone(2.0), _tone(0.7, 1_000.0)]
    kwargs: dict[str, Any] = {"sampling_rate": RATE, "return_tensors": "pt"}
    if name in ONE_CLIP_PER_TEXT:
        with pytest.raises(ValueError, match="1:1"):
            reference(text=text, audio=clips, **kwargs)
        got = processors[name](text=text, audio=clips, **kwargs)
        assert got["input_features"].shape[0] == 2
        return
    _assert_same(
        name,
        reference(text=text, audio=clips, **kwargs),
        processors[name](text=text, audio=clips, **kwargs),
        reference=reference,
        clips=clips,
    )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_batch_of_texts_one_clip_each_padded(name, processors, monkeypatch):
    build, token, _, _ = FAMILIES[name]
    reference = build(MODELS / name, monkeypatch)
    texts = [f"A long question first. {token(1)}Answer it.", f"{token(1)}Short."]
    clips = [_tone(1.2), _tone(3.1, 250.0)]
    kwargs: dict[str, Any] = {"sampling_rate": RATE, "return_tensors": "pt", "padding": True}
    if name in PADS_BY_DEFAULT:
        del kwargs["padding"]
    expected = reference(text=texts, audio=clips, **kwargs)
    got = processors[name](text=texts, audio=clips, **kwargs)
    assert int(got["attention_mask"].sum()) < got["attention_mask"].numel()  # really padded
    _assert_same(name, expected, got, reference=reference, clips=clips)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_apply_chat_template_tokenized(name, processors, monkeypatch):
    build, _, _, _ = FAMILIES[name]
    reference = build(MODELS / name, monkeypatch)
    messages = [
        {
            "role": "user",
            "content": [{"type": "audio", "audio": _tone(1.5)}, {"type": "text", "text": "Why?"}],
        }
    ]
    kwargs: dict[str, Any] = {
        "tokenize": True,
        "return_dict": True,
        "return_tensors": "pt",
        "add_generation_prompt": True,
    }
    if name in STRING_CONTENT_TEMPLATE:
        # Its template concatenates string content only (the model card writes the audio
        # token into it); audiogate's chat path renders audio parts as text first.
        with pytest.raises(TypeError):
            reference.apply_chat_template(messages, **kwargs)
        with pytest.raises(ChatRequestError):
            processors[name].apply_chat_template(messages, add_generation_prompt=True)
        typed = [{"role": "user", "content": f"{FAMILIES[name][1](1)}Why?"}]
        text = reference.apply_chat_template(typed, add_generation_prompt=True)
        expected = reference(text=text, audio=[_tone(1.5)], sampling_rate=RATE, return_tensors="pt")
        _assert_same(name, expected, processors[name].apply_chat_template(messages, **kwargs))
        return
    expected = reference.apply_chat_template(messages, **kwargs)
    _assert_same(name, expected, processors[name].apply_chat_template(messages, **kwargs))
    text = processors[name].apply_chat_template(messages, add_generation_prompt=True)
    assert text == reference.apply_chat_template(messages, add_generation_prompt=True)


@pytest.mark.parametrize("name", WINDOWED)
@pytest.mark.parametrize("tensors", ["pt", "np"])
def test_clips_past_30_s_are_windowed_the_same(name, tensors, processors, monkeypatch):
    build, token, tolerance, _ = FAMILIES[name]
    reference = build(MODELS / name, monkeypatch)
    texts = [f"{token(1)}Transcribe.", f"Now this one: {token(1)}"]
    clips = [_tone(65.0), _tone(31.5, 700.0)]
    # Their processors return only torch tensors; audiogate's NumPy ones hold the same.
    expected = reference(text=texts, audio=clips, sampling_rate=RATE, return_tensors="pt")
    got = processors[name](text=texts, audio=clips, sampling_rate=RATE, return_tensors=tensors)
    assert all(
        isinstance(value, torch.Tensor if tensors == "pt" else np.ndarray) for value in got.values()
    )
    assert got["input_features"].shape[0] == 3 + 2  # 65 s and 31.5 s: 30 s windows
    assert sorted(got.keys()) == sorted(expected.keys())
    for key, want in expected.items():
        want, have = np.asarray(want), np.asarray(got[key])
        assert (have.shape, have.dtype) == (want.shape, want.dtype), key
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(have, want, atol=tolerance, rtol=0, err_msg=key)
        else:
            np.testing.assert_array_equal(have, want, err_msg=key)


@pytest.mark.parametrize("name", UNWINDOWED_LONG)
@pytest.mark.parametrize("tensors", ["pt", "np"])
def test_a_clip_past_30_s_matches(name, tensors, processors, monkeypatch):
    build, token, tolerance, _ = FAMILIES[name]
    reference = build(MODELS / name, monkeypatch)
    text, clip = f"{token(1)}Summarize.", _tone(45.5, 330.0)
    expected = reference(text=text, audio=[clip], sampling_rate=RATE, return_tensors=tensors)
    got = processors[name](text=text, audio=[clip], sampling_rate=RATE, return_tensors=tensors)
    assert sorted(got.keys()) == sorted(expected.keys())
    for key, want in expected.items():
        have = got[key]
        assert type(have) is type(want), key
        want, have = np.asarray(want), np.asarray(have)
        assert (have.shape, have.dtype) == (want.shape, want.dtype), key
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(have, want, atol=tolerance, rtol=0, err_msg=key)
        else:
            np.testing.assert_array_equal(have, want, err_msg=key)


def test_voxtral_cannot_be_verified_here():
    import importlib.util

    from transformers import AutoProcessor

    if importlib.util.find_spec("mistral_common") is not None:
        pytest.skip("mistral-common is installed, but Voxtral's parity is not written yet")

    directory = MODELS / "voxtral-mini-3b-2507"
    reference = AutoProcessor.from_pretrained(directory)
    # Its __call__ refuses the audio token; audio goes only through apply_chat_template,
    # which encodes it with mistral-common's tokenizer (MistralCommonBackend).
    with pytest.raises(ValueError, match="apply_chat_template"):
        reference(text="[AUDIO]What?", audio=[_tone(1.0)], sampling_rate=RATE)
    assert AudiogateProcessor.from_pretrained(directory).processor_class == "VoxtralProcessor"
    pytest.skip("VoxtralProcessor's audio path needs mistral-common, which is not installed")


def test_bytes_paths_and_arrays_prepare_the_same(processors, tmp_path):
    processor = processors["qwen2-audio-7b-instruct"]
    samples = _pcm16(1.3)
    path = tmp_path / "clip.wav"
    path.write_bytes(_wav(samples))
    text = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nWhat?"
    from_array = processor(text=text, audio=samples, sampling_rate=RATE, return_tensors="np")
    for source in (_wav(samples), path, str(path)):
        got = processor(text=text, audio=[source], return_tensors="np")
        assert sorted(got.keys()) == sorted(from_array.keys())
        for key in from_array:
            np.testing.assert_array_equal(got[key], from_array[key])


def test_without_tensors_ids_are_lists(processors):
    processor = processors["phi-4-multimodal-instruct-hf"]
    out = processor(text="<|audio|>Hi", audio=[_tone(1.0)], sampling_rate=RATE)
    assert isinstance(out["input_ids"], list)
    assert isinstance(out["input_ids"][0], list)
    assert out["attention_mask"] == [[1] * len(out["input_ids"][0])]


def test_refusals_where_transformers_goes_on(processors):
    qwen = processors["qwen2-audio-7b-instruct"]
    text = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nWhat?"
    # Qwen2AudioProcessor cuts a clip past 30 s to 30 s without a word.
    with pytest.raises(LimitError):
        qwen(text=text, audio=[_tone(31.0)], sampling_rate=RATE)
    # A waveform's rate is not assumed.
    with pytest.raises(AcquisitionError):
        qwen(text=text, audio=[_tone(1.0)])
    with pytest.raises(PlaceholderError, match="1 audio token"):
        qwen(text=text, audio=[_tone(1.0), _tone(1.0)], sampling_rate=RATE)
    with pytest.raises(TypeError, match="truncation"):
        qwen(text=text, audio=[_tone(1.0)], sampling_rate=RATE, truncation=True)
    with pytest.raises(TypeError, match="audio= or audios="):
        qwen(text=text, audio=[_tone(1.0)], audios=[_tone(1.0)], sampling_rate=RATE)
    with pytest.raises(TypeError, match="numpy waveform"):
        qwen(text=text, audio=[[0.0] * 100], sampling_rate=RATE)
    gemma = processors["gemma-3n-e4b-it"]
    with pytest.raises(ValueError, match="padding=True"):
        gemma(
            text=["<audio_soft_token>a", "<audio_soft_token>a b c d e f"],
            audio=[_tone(1.0), _tone(1.0)],
            sampling_rate=RATE,
            return_tensors="np",
        )


def test_a_remote_code_checkpoint_has_no_transformers_processor():
    with pytest.raises(PolicyError, match="no processor for model_type 'phi4mm'"):
        AudiogateProcessor.from_pretrained(MODELS / "phi-4-multimodal-instruct")


def test_exported_lazily():
    import audiogate

    assert audiogate.AudiogateProcessor is AudiogateProcessor
    assert "AudiogateProcessor" in audiogate.__all__


def test_text_only_and_batched_conversations_match(processors, monkeypatch):
    name = "qwen2-audio-7b-instruct"
    reference = FAMILIES[name][0](MODELS / name, monkeypatch)
    processor = processors[name]
    kwargs: dict[str, Any] = {"return_tensors": "pt"}
    _assert_same(
        name, reference(text="hello there", **kwargs), processor(text="hello there", **kwargs)
    )
    with_audio = [
        {
            "role": "user",
            "content": [{"type": "audio", "audio": _tone(1.0)}, {"type": "text", "text": "Hi"}],
        }
    ]
    text_only = [{"role": "user", "content": [{"type": "text", "text": "Hello, who are you?"}]}]
    chat: dict[str, Any] = {"tokenize": True, "add_generation_prompt": True}
    assert processor.apply_chat_template(with_audio, **chat) == reference.apply_chat_template(
        with_audio, **chat
    )
    batched = {**chat, "return_dict": True, "return_tensors": "pt", "padding": True}
    _assert_same(
        name,
        reference.apply_chat_template([with_audio, text_only], **batched),
        processor.apply_chat_template([with_audio, text_only], **batched),
    )


def test_chat_audio_from_bytes_paths_and_the_gates_own_parts(processors, tmp_path):
    import base64

    processor = processors["gemma-3n-e4b-it"]
    samples = _pcm16(1.1)
    path = tmp_path / "clip.wav"
    path.write_bytes(_wav(samples))

    def turn(part: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [part, {"type": "text", "text": "What?"}]}]

    chat: dict[str, Any] = {
        "tokenize": True,
        "return_dict": True,
        "return_tensors": "np",
        "add_generation_prompt": True,
    }
    expected = processor.apply_chat_template(turn({"type": "audio", "audio": samples}), **chat)
    encoded = base64.b64encode(_wav(samples)).decode()
    for part in (
        {"type": "audio", "audio": _wav(samples)},
        {"type": "audio", "path": str(path)},
        {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}},
    ):
        got = processor.apply_chat_template(turn(part), **chat)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    # URLs are the gate's to fetch, under its policy: off by default.
    with pytest.raises(AudioGateError):
        processor.apply_chat_template(
            turn({"type": "audio", "url": "http://example.com/a.wav"}), **chat
        )
    mixed = [
        {
            "role": "user",
            "content": [
                {"type": "audio", "audio": samples},
                {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}},
            ],
        }
    ]
    with pytest.raises(ChatRequestError, match="not both"):
        processor.apply_chat_template(mixed, **chat)


def test_the_gates_budgets_apply():
    processor = AudiogateProcessor.from_pretrained(
        MODELS / "qwen2-audio-7b-instruct", max_prefill_tokens=40
    )
    text = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\nWhat?"
    with pytest.raises(ContextLimitError):
        processor(text=text, audio=[_tone(2.0)], sampling_rate=RATE)
    # Text forging audiogate's private sentinels next to audio is refused, not parsed.
    with pytest.raises(PlaceholderError):
        processor(
            text=f"<|audiogate_media_00_audio_1|>{text}", audio=[_tone(0.5)], sampling_rate=RATE
        )
