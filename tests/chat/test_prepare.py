"""Chat requests to model inputs through the public API, on the bundled checkpoints.

Tokenizers are built in the test from each family's real special tokens and chat
template (``examples/models/build_tokenizers.py``), audio is generated, and the tiny
random models consume the result.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest

from audiogate.api import AudioGate
from audiogate.chat import ChatRequestError
from audiogate.errors import (
    ContextLimitError,
    DecodeError,
    LimitError,
    PlaceholderError,
    PluginError,
    RequestError,
)
from audiogate.pipeline import EncodedClip
from audiogate.records import TextSegment
from audiogate.testing.audio import noise, tone, wav_bytes
from audiogate.testing.tiny_models import REMOTE_PHI4MM_FORWARD_PARAMETERS

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "examples" / "models"
DIRECTORIES = {
    "phi4mm": "phi-4-multimodal-instruct",
    "phi4mm-native": "phi-4-multimodal-instruct-hf",
    "gemma3n": "gemma-3n-e4b-it",
    "qwen2audio": "qwen2-audio-7b-instruct",
    # Their stand-in tokenizers are checked in (each family's tests rebuild and compare).
    "voxtral": "voxtral-mini-3b-2507",
    "granitespeech": "granite-speech-3.3-2b",
    "audioflamingo3": "audio-flamingo-3-hf",
    "glmasr": "glm-asr-nano-2512",
    "qwen25omni": "qwen2.5-omni-7b",
    "qwen3omni": "qwen3-omni-30b-a3b-instruct",
}
#: The shipped families (the keys above that are family names).
FAMILIES = [key for key in DIRECTORIES if key != "phi4mm-native"]
#: The families with image input.
IMAGES = ("phi4mm", "phi4mm-native", "gemma3n")


def _load_builder():
    spec = importlib.util.spec_from_file_location(
        "build_tokenizers", MODELS / "build_tokenizers.py"
    )
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_tokenizers"] = module
    spec.loader.exec_module(module)
    return module


BUILDER = _load_builder()


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    """Copies of the bundled checkpoints whose tokenizers are rebuilt here, in the test."""
    import shutil

    out = {name: MODELS / name for name in DIRECTORIES.values()}
    root = tmp_path_factory.mktemp("models")
    for spec in BUILDER.STAND_INS:
        target = root / spec.directory
        shutil.copytree(MODELS / spec.directory, target)
        for name in BUILDER.TOKENIZER_FILES:
            (target / name).unlink(missing_ok=True)
        BUILDER.build(spec, target)
        out[spec.directory] = target
    return out


@pytest.fixture(scope="module")
def gates(model_dirs) -> dict[str, AudioGate]:
    return {key: AudioGate.from_model_dir(model_dirs[name]) for key, name in DIRECTORIES.items()}


def wav_b64(seconds: float, *, rate_hz: int = 16_000, seed: int = 0, channels: int = 1) -> str:
    samples = noise(samples=int(seconds * rate_hz), channels=channels, amplitude=0.2, seed=seed)
    samples = samples + tone(seconds=seconds, rate_hz=rate_hz, channels=channels, amplitude=0.2)
    return base64.b64encode(wav_bytes(samples, rate_hz=rate_hz)).decode()


def audio_part(seconds: float, **kw) -> dict:
    return {"type": "input_audio", "input_audio": {"data": wav_b64(seconds, **kw), "format": "wav"}}


def url_part(seconds: float, **kw) -> dict:
    return {
        "type": "audio_url",
        "audio_url": {"url": "data:audio/wav;base64," + wav_b64(seconds, **kw)},
    }


def mixed_messages(*, image: bool = True, system: bool = True) -> list[dict]:
    first = [
        {"type": "text", "text": "alpha"},
        audio_part(1.0, seed=1),
        {"type": "text", "text": "beta"},
    ]
    if image:
        first.append({"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}})
    head = [{"role": "system", "content": "You answer briefly."}] if system else []
    return [
        *head,
        {"role": "user", "content": first},
        {"role": "assistant", "content": "delta"},
        {
            "role": "user",
            "content": [url_part(0.5, rate_hz=48_000, seed=2), {"type": "text", "text": "gamma"}],
        },
    ]


def decoded(gate: AudioGate, ids) -> str:
    return gate.tokenizer.decode(list(ids), skip_special_tokens=False)


@pytest.mark.parametrize("family", list(DIRECTORIES))
def test_mixed_parts_over_several_messages_land_in_exact_positions(gates, family: str) -> None:
    gate = gates[family]
    image = family in IMAGES
    # mistral-common (Voxtral) refuses a system message in a conversation with audio.
    result = gate.prepare(mixed_messages(image=image, system=family != "voxtral"))
    batch = result.batch
    assert batch is not None
    assert [c.ordinal for c in batch.clips] == [1, 2]
    ids = result.input_ids
    assert result.prefill_positions == len(ids)
    # Each clip's run holds exactly its feature tokens, in clip order.
    spans = result.audio_spans
    assert [b - a for a, b in spans] == [c.tokens for c in batch.clips]
    assert spans[0][1] <= spans[1][0]
    before, between, after = (
        decoded(gate, ids[: spans[0][0]]),
        decoded(gate, ids[spans[0][1] : spans[1][0]]),
        decoded(gate, ids[spans[1][1] :]),
    )
    if family == "audioflamingo3":
        # Its template prints each message's audio first, then the message's text parts:
        # the first run opens the first user turn, before alpha and beta.
        assert "alpha" not in before + after
        assert between.index("alpha") < between.index("beta") < between.index("delta")
    else:
        assert "alpha" in before
        assert "alpha" not in between + after
        assert "beta" in between
    assert "delta" in between
    assert "gamma" in after
    if image:
        image_text = {
            "phi4mm": "<|endoftext10|>",
            "phi4mm-native": "<|image|>",
            "gemma3n": "<image_soft_token>",
        }
        marker = image_text[family]
        assert marker in between
        assert marker not in before + after
    # The text form tokenizes to the same ids.
    assert result.text is not None
    assert tuple(gate.tokenizer.encode(result.text, add_special_tokens=False)) == ids
    # Features, masks and collated inputs come with it.
    assert len(result.features) == 2
    assert all(isinstance(f, np.ndarray) and f.dtype == np.float32 for f in result.features)
    assert result.model_inputs


@pytest.mark.parametrize("family", list(DIRECTORIES))
def test_requests_without_audio_render_exactly_as_before(gates, family: str) -> None:
    gate = gates[family]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    result = gate.prepare(messages)
    expected = gate.tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert result.text == expected
    assert result.batch is None
    assert result.audio_spans == ()
    assert result.input_ids == tuple(gate.tokenizer.encode(expected, add_special_tokens=False))


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "Listen to this: "}, "audio", {"type": "text", "text": " and?"}],
        ["audio", {"type": "text", "text": " Transcribe."}],
        [{"type": "text", "text": "Clip:\n"}, "audio", {"type": "text", "text": "\n"}, "audio"],
    ],
    ids=["text-audio-text", "audio-text", "text-audio-text-audio"],
)
def test_gemma_chat_text_is_the_processors_around_audio_parts(gates, content) -> None:
    # Gemma 3n's template trims each text part of list content; the prepared text equals
    # the template on the real parts with each <audio_soft_token> expanded, as
    # Gemma3nProcessor does.
    from audiogate_gemma3n.prompt import audio_block

    gate = gates["gemma3n"]
    real = [{"type": "audio"} if p == "audio" else p for p in content]
    ours = [
        {"type": "input_audio", "input_audio": {"data": wav_b64(0.5), "format": "wav"}}
        if p == "audio"
        else p
        for p in content
    ]
    expected = gate.tokenizer.apply_chat_template(
        [{"role": "user", "content": real}], tokenize=False, add_generation_prompt=True
    ).replace("<audio_soft_token>", audio_block(188))
    result = gate.prepare([{"role": "user", "content": ours}])
    assert result.text == expected
    assert result.input_ids == tuple(gate.tokenizer.encode(expected, add_special_tokens=False))


@pytest.mark.parametrize("family", list(DIRECTORIES))
def test_requests_without_audio_may_use_text_parts(gates, family: str) -> None:
    # OpenAI-style list content without audio works with every template, including
    # Phi-4 MM's remote-code one, which only takes strings.
    gate = gates[family]
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    plain = [{"role": "user", "content": "Hi"}]
    result = gate.prepare(parts)
    assert result.batch is None
    assert result.text == gate.prepare(plain).text


@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("phi4mm", "<|endoftext11|> hello"),
        ("phi4mm", "<|audio_1|> hello"),
        ("phi4mm-native", "<|audio|> hello"),
        ("gemma3n", "<audio_soft_token> hello"),
        ("gemma3n", "<start_of_audio> hello"),
        ("qwen2audio", "<|audio_bos|><|AUDIO|><|audio_eos|> hello"),
        ("qwen2audio", "describe [audio:" + "ab" * 32 + "]"),
        ("qwen2audio", "describe [audio:xyz]"),
        ("voxtral", "[AUDIO] hello"),
        ("voxtral", "[BEGIN_AUDIO] hello"),
        ("granitespeech", "<|audio|> hello"),
        ("audioflamingo3", "<sound> hello"),
        ("glmasr", "<|pad|> hello"),
        ("glmasr", "<|begin_of_audio|> hello"),
        ("qwen25omni", "<|audio_bos|><|AUDIO|><|audio_eos|> hello"),
        ("qwen25omni", "<|AUDIO|> hello"),
        ("qwen3omni", "<|audio_start|><|audio_pad|><|audio_end|> hello"),
        ("qwen3omni", "<|audio_pad|> hello"),
    ],
)
def test_requests_without_audio_still_refuse_audio_markers(gates, family: str, text) -> None:
    # With no audio part, user text may not claim audio: no audio id without features.
    with pytest.raises(PlaceholderError):
        gates[family].prepare([{"role": "user", "content": text}])


@pytest.mark.parametrize(
    ("family", "clips"),
    # Two clips for the later families (their own tests run one; keeps this file fast).
    [
        (f, n)
        for f in FAMILIES
        for n in ((1, 2) if f in ("phi4mm", "gemma3n", "qwen2audio") else (2,))
    ],
)
def test_tiny_models_consume_what_the_api_prepares(gates, family: str, clips: int) -> None:
    pytest.importorskip("torch")
    from audiogate.testing.tiny_models import build_tiny_model, forward_tiny_model

    gate = gates[family]
    content = [audio_part(1.2 + 0.7 * k, seed=k) for k in range(clips)]
    content.append({"type": "text", "text": "Describe the audio."})
    result = gate.prepare([{"role": "user", "content": content}])
    model = build_tiny_model(family)
    out = forward_tiny_model(family, model, result.input_ids, result.model_inputs)
    assert out.logits.shape[0] == 1
    # The model's own check: one audio position too many is refused.
    audio_id = result.input_ids[result.audio_spans[0][0]]
    start = result.audio_spans[-1][1]
    broken = (*result.input_ids[:start], audio_id, *result.input_ids[start:])
    with pytest.raises((ValueError, RuntimeError)):
        forward_tiny_model(family, model, broken, result.model_inputs)


def test_blocking_and_async_prepare_agree(gates) -> None:
    gate = gates["gemma3n"]
    messages = [{"role": "user", "content": [audio_part(1.0), {"type": "text", "text": "hi"}]}]
    a = gate.prepare(messages)
    b = asyncio.run(gate.prepare_async(messages))
    assert a.input_ids == b.input_ids
    assert a.features[0].tobytes() == b.features[0].tobytes()


def test_plain_prompt_with_clips_uses_the_family_placeholder_rules(gates) -> None:
    gate = gates["phi4mm"]
    clip = EncodedClip(data=base64.b64decode(wav_b64(1.0)), ordinal=1, origin="bytes")
    result = gate.prepare(prompt="<|user|><|audio_1|>Transcribe.<|end|><|assistant|>", clips=[clip])
    assert sum(b - a for a, b in result.audio_spans) == result.batch.clips[0].tokens
    with pytest.raises(PlaceholderError, match=r"exactly once"):
        gate.prepare(prompt="<|user|><|audio_2|>x<|end|><|assistant|>", clips=[clip])


def test_messages_with_pre_acquired_clips_match_by_position(gates) -> None:
    gate = gates["qwen2audio"]
    data = base64.b64decode(wav_b64(1.0))
    marker = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    messages = [{"role": "user", "content": [marker, {"type": "text", "text": "hi"}]}]
    by_clip = gate.prepare(messages, clips=[EncodedClip(data=data, ordinal=1, origin="file")])
    inline = [{"role": "user", "content": [audio_part(1.0), {"type": "text", "text": "hi"}]}]
    assert by_clip.input_ids == gate.prepare(inline).input_ids
    with pytest.raises(PlaceholderError, match="1 audio part"):
        gate.prepare(messages, clips=[])


# --- fail closed --------------------------------------------------------------------


def test_injected_sentinel_text_is_refused(gates) -> None:
    messages = [
        {
            "role": "user",
            "content": [audio_part(1.0), {"type": "text", "text": "<|audiogate_media_0_audio_1|>"}],
        }
    ]
    with pytest.raises(PlaceholderError, match="reserved media sentinel"):
        gates["gemma3n"].prepare(messages)


@pytest.mark.parametrize(
    ("rewrite", "match"),
    [
        (lambda text, s: text.replace(s, ""), "contains 0 audio"),
        (lambda text, s: text.replace(s, s + s), "out of sequence"),
        (lambda text, s: text.replace(s, s.replace("audio_1", "audio_2")), "out of sequence"),
        (lambda text, s: text.replace(s, s[:-2]), "malformed"),
    ],
    ids=["missing", "duplicated", "renumbered", "malformed"],
)
def test_a_template_that_drops_or_mangles_sentinels_fails_closed(
    model_dirs, rewrite, match
) -> None:
    base = AudioGate.from_model_dir(model_dirs[DIRECTORIES["gemma3n"]])

    def renderer(messages):
        text = base.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
        )
        start = text.index("<|audiogate_media_")
        sentinel = text[start : text.index("|>", start) + 2]
        return rewrite(text, sentinel)

    gate = AudioGate.from_model_dir(model_dirs[DIRECTORIES["gemma3n"]], renderer=renderer)
    messages = [{"role": "user", "content": [audio_part(1.0), {"type": "text", "text": "x"}]}]
    with pytest.raises(PlaceholderError, match=match):
        gate.prepare(messages)


def test_the_template_renders_before_any_audio_is_acquired(model_dirs, monkeypatch) -> None:
    # Acquired bytes leave the acquisition budget when acquisition returns: nothing may
    # wait between it and the worker's admission (a slow template would hold them
    # outside every budget), and a template that refuses the messages costs no download.
    import audiogate.request

    events: list[str] = []
    acquire = audiogate.request.acquire_parts_sync  # prepare()'s: in the calling thread

    def recording(*args, **kwargs):
        events.append("acquire")
        return acquire(*args, **kwargs)

    monkeypatch.setattr(audiogate.request, "acquire_parts_sync", recording)
    base = AudioGate.from_model_dir(model_dirs[DIRECTORIES["gemma3n"]])

    def renderer(messages):
        events.append("render")
        return base._render(messages)

    gate = AudioGate.from_model_dir(model_dirs[DIRECTORIES["gemma3n"]], renderer=renderer)
    messages = [{"role": "user", "content": [audio_part(1.0), {"type": "text", "text": "x"}]}]
    gate.prepare(messages)
    assert events[-2:] == ["render", "acquire"]

    def refusing(messages):
        events.append("refused")
        raise ValueError("the template refuses")

    events.clear()
    with pytest.raises(ValueError, match="the template refuses"):
        AudioGate.from_model_dir(model_dirs[DIRECTORIES["gemma3n"]], renderer=refusing).prepare(
            messages
        )
    assert "acquire" not in events


def test_invalid_audio_rejects_the_request_instead_of_dropping_it(gates) -> None:
    bad = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(b"RIFF1234WAVEjunk").decode(), "format": "wav"},
    }
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, bad]}]
    with pytest.raises(DecodeError):
        gates["phi4mm"].prepare(messages)


def test_unsupported_parts_are_refused_not_dropped(gates) -> None:
    messages = [
        {
            "role": "user",
            "content": [audio_part(1.0), {"type": "video_url", "video_url": {"url": "x"}}],
        }
    ]
    with pytest.raises(ChatRequestError, match="video_url"):
        gates["gemma3n"].prepare(messages)


def test_max_prefill_rejects_with_context_limit(model_dirs) -> None:
    gate = AudioGate.from_model_dir(model_dirs[DIRECTORIES["gemma3n"]], max_prefill_tokens=100)
    messages = [{"role": "user", "content": [audio_part(1.0), {"type": "text", "text": "x"}]}]
    with pytest.raises(ContextLimitError, match="prefill tokens") as info:
        gate.prepare(messages)
    assert info.value.reason == "context_limit"
    assert info.value.maximum == 100


def test_family_budgets_apply_to_chat_requests(gates) -> None:
    messages = [{"role": "user", "content": [audio_part(31.0), {"type": "text", "text": "x"}]}]
    with pytest.raises(LimitError, match="duration"):
        gates["gemma3n"].prepare(messages)


def test_chat_messages_need_a_template(gates) -> None:
    gate = AudioGate.from_family("gemma3n")
    with pytest.raises(RequestError, match="chat template") as info:
        gate.prepare([{"role": "user", "content": [audio_part(1.0)]}])
    # The gate lacks a template: nothing about the prompt's placeholders is wrong.
    assert not isinstance(info.value, PlaceholderError)
    assert str(info.value).startswith("invalid request: chat messages need a chat template")


def test_mlx_arrays_on_request(gates) -> None:
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed on this platform")
    gate = gates["gemma3n"]
    messages = [{"role": "user", "content": [audio_part(1.0), {"type": "text", "text": "x"}]}]
    result = gate.prepare(messages, return_tensors="mlx")
    assert isinstance(result.features[0], mx.array)
    assert np.allclose(np.array(result.features[0]), gate.prepare(messages).features[0])


def test_an_unknown_feature_backend_is_refused_before_any_work(gates) -> None:
    gate = gates["gemma3n"]
    messages = [{"role": "user", "content": [audio_part(0.5), {"type": "text", "text": "x"}]}]
    for backend in ("MLX", "torch", ""):
        with pytest.raises(ValueError, match="feature_backend"):
            gate.prepare(messages, feature_backend=backend)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="feature_backend"):
            AudioGate(host=gate.host, policy=gate.policy, feature_backend=backend)  # type: ignore[arg-type]


def test_numpy_arrays_from_the_mlx_backend_are_read_only_copies(gates) -> None:
    pytest.importorskip("mlx.core", reason="mlx is not installed on this platform")
    gate = gates["gemma3n"]
    messages = [{"role": "user", "content": [audio_part(0.5), {"type": "text", "text": "x"}]}]
    result = gate.prepare(messages, feature_backend="mlx", return_tensors="np")
    features = result.features[0]
    assert isinstance(features, np.ndarray)
    assert not features.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        features[0, 0] = 1.0


def test_return_tensors_mlx_without_mlx_names_the_extra() -> None:
    import subprocess

    script = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx.core'] = None\n"
        "from audiogate.api import _converter\n"
        "from audiogate.errors import MissingExtraError\n"
        "try:\n    _converter('mlx')\nexcept MissingExtraError as exc:\n    print('extra', exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("extra")
    assert "pip install 'audiogate[mlx]'" in out.stdout


def test_tokenizer_loading_never_follows_auto_map_or_remote_code(monkeypatch) -> None:
    import transformers

    from audiogate.api import load_tokenizer

    def refuse(*args, **kwargs):
        raise AssertionError("AutoTokenizer would follow config.json auto_map")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    # The real Phi-4 MM config.json maps AutoTokenizer to a hub repository.
    tokenizer = load_tokenizer(MODELS / DIRECTORIES["phi4mm"])
    assert tokenizer.convert_tokens_to_ids("<|endoftext11|>") == 200_011
    assert tokenizer.chat_template


def test_a_template_refusing_the_messages_is_a_chat_request_error(gates) -> None:
    # Gemma 3n's template raises on roles that do not alternate.
    messages = [
        {"role": "user", "content": [audio_part(1.0)]},
        {"role": "user", "content": "again"},
    ]
    with pytest.raises(ChatRequestError, match="chat template rejected"):
        gates["gemma3n"].prepare(messages)


# --- inputs the family derives from the prompt (Phi-4 MM remote code's input_mode) ---

IMAGE = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}


@pytest.mark.parametrize(
    ("content", "mode"),
    [
        ([{"type": "text", "text": "hi"}], 0),  # InputMode.LANGUAGE
        ([IMAGE, {"type": "text", "text": "hi"}], 1),  # VISION
        ([audio_part(0.6), {"type": "text", "text": "hi"}], 2),  # SPEECH
        ([IMAGE, audio_part(0.6), audio_part(0.7, seed=3), {"type": "text", "text": "hi"}], 3),
    ],
)
def test_phi4mm_remote_inputs_are_what_its_forward_takes(gates, content, mode: int) -> None:
    result = gates["phi4mm"].prepare([{"role": "user", "content": content}])
    assert set(result.model_inputs) <= REMOTE_PHI4MM_FORWARD_PARAMETERS
    input_mode = result.model_inputs["input_mode"]
    assert input_mode.dtype == np.int64
    assert input_mode.tolist() == [mode]  # as Phi4MMProcessor returns it
    assert not input_mode.flags.writeable
    if mode >= 2:
        assert result.model_inputs["input_audio_embeds"].shape[0] == len(result.batch.clips)
        assert "audio_input_features" not in result.model_inputs


def test_phi4mm_native_inputs_have_no_input_mode(gates) -> None:
    content = [IMAGE, audio_part(0.6), {"type": "text", "text": "hi"}]
    result = gates["phi4mm-native"].prepare([{"role": "user", "content": content}])
    assert set(result.model_inputs) == {
        "audio_input_features",
        "audio_embed_sizes",
        "audio_attention_mask",
    }
    assert gates["phi4mm-native"].prepare([{"role": "user", "content": "hi"}]).model_inputs == {}


def test_prompt_inputs_follow_return_tensors(gates) -> None:
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed on this platform")
    gate = gates["phi4mm"]
    for content in ("hi", [audio_part(0.6), {"type": "text", "text": "hi"}]):
        messages = [{"role": "user", "content": content}]
        for result in (
            gate.prepare(messages, return_tensors="mlx"),
            gate.prepare(messages, feature_backend="mlx"),
        ):
            assert isinstance(result.model_inputs["input_mode"], mx.array)
        assert isinstance(gate.prepare(messages).model_inputs["input_mode"], np.ndarray)


def test_a_prompt_input_named_like_an_audio_input_is_a_plugin_error(gates, monkeypatch) -> None:
    gate = gates["phi4mm"]
    expand = gate.host.expand_prompt

    def clashing(*args, **kwargs):
        expanded = expand(*args, **kwargs)
        extra = {"audio_embed_sizes": np.zeros(1, np.int64)}
        return attrs.evolve(expanded, model_inputs=extra)

    monkeypatch.setattr(gate.host, "expand_prompt", clashing)
    with pytest.raises(PluginError, match="audio_embed_sizes"):
        gate.prepare(
            [{"role": "user", "content": [audio_part(0.6), {"type": "text", "text": "x"}]}]
        )


@pytest.mark.parametrize(
    ("family", "placeholder"),
    [
        ("phi4mm", "<|endoftext10|>"),
        ("phi4mm-native", "<|image|>"),
        ("gemma3n", "<image_soft_token>"),
    ],
)
def test_an_image_without_audio_keeps_its_position(gates, family: str, placeholder) -> None:
    # No audio part, one image part: the image still reaches the family's expansion
    # (before, list-capable templates dropped the unknown part and string-only ones
    # failed on the list).
    content = [{"type": "text", "text": "look"}, IMAGE, {"type": "text", "text": "here"}]
    result = gates[family].prepare([{"role": "user", "content": content}])
    assert result.text is not None
    assert result.text.count(placeholder) == 1
    assert result.text.index("look") < result.text.index(placeholder) < result.text.index("here")
    assert result.batch is None
    assert result.audio_spans == ()


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in IMAGES])
def test_an_image_without_audio_is_refused_where_the_family_has_no_images(gates, family) -> None:
    with pytest.raises(PlaceholderError, match="audio only"):
        gates[family].prepare([{"role": "user", "content": [IMAGE]}])


@pytest.mark.parametrize(
    ("family", "typed"),
    [("phi4mm", "<|image_1|>"), ("phi4mm-native", "<|image|>")],
)
def test_an_image_placeholder_typed_in_a_chat_without_media_is_refused(gates, family, typed):
    # In chat messages every media position is a part; typed, it has no image behind it.
    with pytest.raises(PlaceholderError, match="image"):
        gates[family].prepare([{"role": "user", "content": f"{typed} what is this?"}])


def test_a_plain_prompt_keeps_its_image_placeholders(gates) -> None:
    # A plain prompt is the caller's own text: its image placeholders are positions for
    # the images the caller passes to the model.
    gate = gates["phi4mm"]
    clip = EncodedClip(data=base64.b64decode(wav_b64(0.6)), ordinal=1)
    result = gate.prepare(prompt=gate.chat_prompt("<|image_1|><|audio_1|>Describe."), clips=[clip])
    assert result.text is not None
    assert result.text.count("<|endoftext10|>") == 1
    assert result.model_inputs["input_mode"].tolist() == [3]


def test_a_plain_prompt_that_is_not_valid_unicode_is_a_typed_error(gates) -> None:
    clip = EncodedClip(data=base64.b64decode(wav_b64(0.6)), ordinal=1)
    with pytest.raises(RequestError, match=r"^invalid request: the prompt is not valid Unicode"):
        gates["qwen2audio"].prepare(prompt="hi \udcff", clips=[clip])


def test_an_untyped_error_while_expanding_is_a_plugin_error(gates) -> None:
    from audiogate import create_host, hookimpl

    class Choking:
        @hookimpl(tryfirst=True)
        def audiogate_expand_prompt(self, policy):
            raise TypeError("tokenizer choked")

    host = create_host(plugins=[Choking()], load_entry_points=True)
    with pytest.raises(PluginError, match="raised TypeError in audiogate_expand_prompt"):
        host.expand_prompt(gates["gemma3n"].policy, [TextSegment("hi")], [], None)
