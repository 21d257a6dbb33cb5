"""Qwen3-Omni test helpers: signals, WAV files and the reference processor."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

MODEL_DIR = (
    Path(__file__).resolve().parents[3] / "examples" / "models" / "qwen3-omni-30b-a3b-instruct"
)
AUDIO_ID = 151_675
#: Features within this of the torch reference (its float32 STFT is the difference).
TOLERANCE = 1e-4


def make_signal(
    kind: str, *, samples: int, rate_hz: int = 16_000, channels: int = 1, seed: int = 0
) -> np.ndarray:
    """float32 ``[shape=(n,)]`` or ``[shape=(n, channels)]``.

    ``noise``, ``am`` and ``pink`` stay within [-0.9, 0.9]; ``clipped`` is a tone driven
    4x past full scale and cut at ±1; ``silence`` is all zeros.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate_hz
    columns = []
    for channel in range(channels):
        f0 = rng.uniform(150, 3_000)
        if kind == "noise":
            x = 0.2 * rng.standard_normal(samples)
        elif kind == "am":
            envelope = 1 + 0.5 * np.sin(2 * np.pi * 3 * t + channel)
            x = 0.3 * envelope * np.sin(2 * np.pi * f0 * t) + 0.15 * rng.standard_normal(samples)
        elif kind == "pink":
            white = rng.standard_normal(samples)
            x = 0.05 * np.cumsum(white) / np.sqrt(np.arange(1, samples + 1)) + 0.05 * white
        elif kind == "clipped":
            x = np.clip(
                4.0 * np.sin(2 * np.pi * f0 * t) + 0.1 * rng.standard_normal(samples), -1, 1
            )
        elif kind == "silence":
            x = np.zeros(samples)
        else:
            raise ValueError(kind)
        columns.append(x if kind == "clipped" else np.clip(x, -0.9, 0.9))
    data = np.stack(columns, axis=1) if channels > 1 else columns[0]
    return data.astype(np.float32)


def wav_bytes(data: np.ndarray, *, rate_hz: int, subtype: str) -> bytes:
    """A WAV written by soundfile (``subtype`` ``"PCM_16"`` or ``"FLOAT"``)."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate_hz, format="WAV", subtype=subtype)
    return buffer.getvalue()


def transformers_load(data: bytes, tmp_path: Path, name: str) -> np.ndarray:
    """The waveform transformers' ``load_audio`` (soundfile backend = ``librosa.load``) gives."""
    from transformers.audio_utils import load_audio

    path = tmp_path / name
    path.write_bytes(data)
    return np.asarray(load_audio(str(path), sampling_rate=16_000, backend="soundfile"))


def build_processor() -> Any:
    """``Qwen3OmniMoeProcessor`` of the example directory: its tokenizer, its feature
    extractor (``AutoFeatureExtractor``) and its chat template, as ``AutoProcessor`` builds
    it. Its image and video processors need Pillow and torchvision, which the test
    environment does not have; the audio and text path never touches them, so they are
    left out (the processor's class check on them is bypassed for the construction only).
    """
    from unittest import mock

    from transformers import AutoFeatureExtractor, AutoTokenizer, Qwen3OmniMoeProcessor
    from transformers.processing_utils import ProcessorMixin

    tokenizer = AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    extractor = AutoFeatureExtractor.from_pretrained(str(MODEL_DIR), local_files_only=True)
    with mock.patch.object(
        ProcessorMixin, "check_argument_for_proper_class", lambda self, name, arg: type(arg)
    ):
        return Qwen3OmniMoeProcessor(
            image_processor=None,
            video_processor=None,
            feature_extractor=extractor,
            tokenizer=tokenizer,
            chat_template=tokenizer.chat_template,
        )


def render(processor: Any, clips: int, text: str = "What is it?") -> str:
    """The chat template's text for one user turn with ``clips`` audio parts and a question."""
    content: list[dict[str, Any]] = [{"type": "audio", "audio": "x"} for _ in range(clips)]
    content.append({"type": "text", "text": text})
    return str(
        processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
    )


def run_processor(processor: Any, text: str, waveforms: list[np.ndarray]) -> Any:
    """The processor as its docs call it: rendered text and 16 kHz arrays, numpy out."""
    return processor(text=text, audio=waveforms, return_tensors="np")
