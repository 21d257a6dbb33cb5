"""A restart does not recompute: features persisted by one process are served by the next
process (a store-tier hit, nothing decoded), identical, for every family."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"

_PROCESS = """
import hashlib, json, sys
from pathlib import Path
from audiogate.api import AudioGate
from audiogate.store import SourceStore
from audiogate.testing.audio import encoded_clip
import audiogate.pipeline.process as process

decodes = []
real = process.decode
process.decode = lambda *a, **k: (decodes.append(1), real(*a, **k))[1]
root = Path({root!r})
store = SourceStore.open(root / "store")
gate = AudioGate.from_model_dir(
    {model!r}, store=store, feature_cache_bytes=64 << 20, feature_store=store
)
if {first!r}:
    (root / "sha").write_text(gate.add_source(encoded_clip(seconds=3.0, seed=1).data).record.sha256)
ref = {{"type": "audio_ref", "audio_ref": {{"sha256": (root / "sha").read_text()}}}}
result = gate.prepare([{{"role": "user", "content": [ref, {{"type": "text", "text": "Hi"}}]}}])
print(json.dumps({{
    "decodes": len(decodes),
    "hits": gate.feature_cache.hits,
    "input_ids": [int(i) for i in result.input_ids],
    "features": [hashlib.sha256(f.tobytes()).hexdigest() for f in result.features],
}}))
"""


def _run(model: Path, root: Path, *, first: bool) -> dict:
    code = _PROCESS.format(root=str(root), model=str(model), first=first)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "model", ["gemma-3n-e4b-it", "phi-4-multimodal-instruct", "qwen2-audio-7b-instruct"]
)
def test_a_new_process_serves_the_persisted_features(model, tmp_path) -> None:
    computed = _run(MODELS / model, tmp_path, first=True)
    assert (computed["decodes"], computed["hits"]) == (1, 0)
    restarted = _run(MODELS / model, tmp_path, first=False)
    assert (restarted["decodes"], restarted["hits"]) == (0, 1)
    assert restarted["input_ids"] == computed["input_ids"]
    assert restarted["features"] == computed["features"]
