"""Chat through the public API (``AudioGate.prepare`` on the example directory, WAV bytes
in) against the reference processor on the chat template's text: the same ids and model
inputs."""

from __future__ import annotations

import numpy as np
import pytest
from qwen25omni_helpers import MODEL_DIR, TOLERANCE, make_signal, transformers_load, wav_bytes

import audiogate_qwen25omni.plugin as family_plugin
from audiogate.acquire import AcquisitionPolicy, acquire_bytes
from audiogate.api import AudioGate
from audiogate.host import create_host

pytest.importorskip("torch")
pytest.importorskip("transformers")

PART = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}


@pytest.mark.slow
def test_a_chat_with_two_clips_gives_the_processors_ids_and_inputs(processor, tmp_path):
    gate = AudioGate.from_model_dir(
        MODEL_DIR, host=create_host(plugins=[family_plugin], load_entry_points=False)
    )
    # Lengths of whole 160-sample frames at 16 kHz (see the README on several clips).
    datas = [
        wav_bytes(
            make_signal("am", samples=48_000, rate_hz=48_000, channels=2, seed=1),
            rate_hz=48_000,
            subtype="PCM_16",
        ),
        wav_bytes(make_signal("noise", samples=8_000, seed=2), rate_hz=16_000, subtype="FLOAT"),
    ]
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [PART, {"type": "text", "text": "Compare this with "}, PART],
        },
    ]
    prepared = gate.prepare(
        messages, clips=acquire_bytes(datas, policy=AcquisitionPolicy().narrowed(gate.policy))
    )
    rendered = processor.apply_chat_template(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "audio", "audio": "a"},
                    {"type": "text", "text": "Compare this with "},
                    {"type": "audio", "audio": "b"},
                ],
            },
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    waveforms = [transformers_load(d, tmp_path, f"c{i}.wav") for i, d in enumerate(datas)]
    reference = processor(text=rendered, audio=waveforms, return_tensors="np")
    assert list(prepared.input_ids) == reference["input_ids"][0].tolist()
    inputs = prepared.model_inputs
    np.testing.assert_array_equal(
        inputs["feature_attention_mask"], reference["feature_attention_mask"]
    )
    mask = reference["feature_attention_mask"].astype(bool)
    ours = np.asarray(inputs["input_features"]).transpose(0, 2, 1)[mask]
    theirs = reference["input_features"].transpose(0, 2, 1)[mask]
    assert np.abs(ours - theirs).max() <= TOLERANCE
