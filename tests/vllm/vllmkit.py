"""Helpers of the vLLM tests: an app per family with its render endpoints, where
vLLM's environment is, and the comparison of an answer with vLLM's recorded one."""

from __future__ import annotations

import base64
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from starlette.testclient import TestClient

from audiogate import AudioGate
from audiogate.host import create_host
from audiogate.server.app import ServerWorker, create_app
from audiogate.vllm import decode_tensor
from audiogate.vllm.fixtures import CLIPS, RenderCase, request_body
from audiogate.vllm.msgpack import unpackb

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
#: family → the bundled checkpoint it is compared on.
MODEL_DIRS = {
    "qwen2audio": MODELS / "qwen2-audio-7b-instruct",
    "gemma3n": MODELS / "gemma-3n-e4b-it",
    "glmasr": MODELS / "glm-asr-nano-2512",
    "voxtral": MODELS / "voxtral-mini-3b-2507",
    "audioflamingo3": MODELS / "audio-flamingo-3-hf",
    "granitespeech": MODELS / "granite-speech-3.3-2b",
    "qwen25omni": MODELS / "qwen2.5-omni-7b",
    "qwen3omni": MODELS / "qwen3-omni-30b-a3b-instruct",
}
#: (family, clip channels) vLLM 0.32 refuses and audiogate renders: vLLM's Voxtral hands
#: the clip to mistral-common before mixing it down, which raises "audio_array.ndim=2"
#: for any stereo clip (a 400).
VLLM_REFUSES_STEREO = frozenset({"voxtral"})
#: The families whose render the protocol tests (test_vllm_render.py) look into.
PROTOCOL_FAMILIES = ("gemma3n", "qwen2audio")
CHAT_RENDER = "/v1/chat/completions/render"
COMPLETION_RENDER = "/v1/completions/render"


def vllm_env() -> Path:
    """Where ``scripts/vllm/setup_env.sh`` puts vLLM's environment."""
    return Path(os.environ.get("AUDIOGATE_VLLM_ENV", ROOT.parent / "vllm-env"))


class RenderApp:
    """One family's app and its gate, served in process."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.model_dir = MODEL_DIRS[family]
        self.served = self.model_dir.name
        host = create_host()
        self.gate = AudioGate.from_model_dir(self.model_dir, host=host, worker=ServerWorker(host))
        self.client = TestClient(create_app(self.gate, served_model=self.served))

    def render(self, body: dict[str, Any], path: str = CHAT_RENDER) -> Any:
        return self.client.post(path, json=body)


#: Largest |difference| of a feature value where the clip is resampled (48 kHz), by family;
#: measured: 0.56 (Qwen2-Audio's normalized log-mel), 4.2 (Gemma 3n's log-mel; the
#: resampling_algorithm policy of issue #31 narrows it), 0.56 (GLM-ASR's and Audio
#: Flamingo 3's, Qwen2.5-Omni's and Qwen3-Omni's Whisper log-mel), 0.34 (Granite
#: Speech's); Voxtral's items are waveforms.
RESAMPLED_MAX_DIFF = {
    "qwen2audio": 1.0,
    "gemma3n": 6.0,
    "glmasr": 1.0,
    "voxtral": 1.0,
    "audioflamingo3": 1.0,
    "granitespeech": 1.0,
    "qwen25omni": 1.0,
    "qwen3omni": 1.0,
}


def _vllm_items(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        unpackb(zlib.decompress(base64.b64decode(item["zlib_base64"])))
        for item in answer["features"]["kwargs_data"]["audio"]
    ]


def _resampled(case_parts: tuple[str, ...]) -> list[bool]:
    return [CLIPS[p[6:]].rate_hz != 16_000 for p in case_parts if p.startswith("audio:")]


def _compare_metadata(ours: Any, theirs: Any) -> None:
    # The tensors vLLM keeps on the CPU (chunk counts, embedding sizes), once more per
    # item; None where a family has none.
    if theirs is None:
        assert ours is None
        return
    assert set(ours) == set(theirs)
    for modality, items in theirs.items():
        assert len(ours[modality]) == len(items)
        for mine, recorded in zip(ours[modality], items, strict=True):
            assert (mine is None) == (recorded is None)
            if recorded is not None:
                assert unpackb(base64.b64decode(mine)) == unpackb(base64.b64decode(recorded))


def compare_answer(app: RenderApp, case: RenderCase, recorded: dict[str, Any]) -> None:
    """Send ``case`` to ``app`` and compare the answer with vLLM's ``recorded`` one."""
    response = app.render(request_body(case, app.served))
    if (
        app.family in VLLM_REFUSES_STEREO
        and recorded["status"] == 400
        and "ndim=2" in recorded["answer"]["error"]["message"]
    ):
        assert response.status_code == 200, response.text  # audiogate mixes down
        return
    assert response.status_code == recorded["status"], response.text
    if recorded["status"] != 200:
        return  # both refuse (adjacent Gemma 3n clips: overlapping placeholder ranges)
    ours, theirs = response.json(), recorded["answer"]
    assert set(ours) == set(theirs)
    assert ours["token_ids"] == theirs["token_ids"]
    assert ours["sampling_params"] == theirs["sampling_params"]
    for field in ("model", "stream", "stream_options", "cache_salt", "priority", "output_mode"):
        assert ours[field] == theirs[field], field
    assert ours["request_id"].split("-")[0] == theirs["request_id"].split("-")[0]
    assert len(ours["request_id"]) == len(theirs["request_id"])  # answers no longer
    if theirs["features"] is None:
        assert ours["features"] is None
        return
    ours_f, theirs_f = ours["features"], theirs["features"]
    assert ours_f["mm_placeholders"] == theirs_f["mm_placeholders"]
    _compare_metadata(ours_f["mm_metadata"], theirs_f["mm_metadata"])
    # Hashes differ by design (audiogate's cover the policy and the dtype too).
    assert len(ours_f["mm_hashes"]["audio"]) == len(theirs_f["mm_hashes"]["audio"])
    mine = [unpackb(base64.b64decode(item)) for item in ours_f["kwargs_data"]["audio"]]
    sizes = [item["base64_chars"] for item in theirs_f["kwargs_data"]["audio"]]
    assert [len(item) for item in ours_f["kwargs_data"]["audio"]] == sizes
    for ours_item, theirs_item, resampled in zip(
        mine, _vllm_items(theirs), _resampled(case.parts), strict=True
    ):
        # A map's order means nothing to vLLM's decoder (it builds a dict), and vLLM's
        # own order varies from run to run.
        assert sorted(ours_item) == sorted(theirs_item)
        for key, elem in theirs_item.items():
            assert ours_item[key]["field"] == elem["field"]
            dtype, shape, _ = elem["data"]
            assert ours_item[key]["data"][:2] == [dtype, shape], key
            got = decode_tensor(ours_item[key]["data"]).astype(np.float64)
            want = decode_tensor(elem["data"]).astype(np.float64)
            if dtype in ("bool", "int32", "int64"):
                assert np.array_equal(got, want), key  # the masks, counts and sizes
            elif resampled:
                assert np.max(np.abs(got - want)) < RESAMPLED_MAX_DIFF[app.family], key
            else:
                # One bf16 unit in the last place (8 significant bits) at most.
                np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-10, err_msg=key)
