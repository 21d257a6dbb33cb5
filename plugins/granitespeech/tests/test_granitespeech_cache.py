"""Features served from the feature cache and the persisted feature store collate into
the same batch as freshly computed ones: the clip's extras (its samples, peaks and the
waveform its padded frames are recomputed from) survive the store's blob."""

from __future__ import annotations

import numpy as np

import audiogate_granitespeech.plugin as family_plugin
from audiogate.api import AudioGate
from audiogate.host import create_host
from audiogate.store import SourceStore
from audiogate.testing.audio import encoded_clip
from audiogate_granitespeech.features import GraniteSpeechClipFeatures
from conftest import MODEL_DIR


def gate(store: SourceStore) -> AudioGate:
    host = create_host(plugins=[family_plugin], load_entry_points=False)
    return AudioGate.from_model_dir(
        MODEL_DIR, host=host, store=store, feature_cache_bytes=64 << 20, feature_store=store
    )


def test_persisted_features_collate_as_computed_ones(tmp_path):
    store = SourceStore.open(tmp_path / "store")
    first = gate(store)
    digests = [
        first.add_source(encoded_clip(seconds=s, seed=i).data).record.sha256
        for i, s in enumerate((2.3, 0.7))
    ]
    messages = [
        {
            "role": "user",
            "content": [
                *({"type": "audio_ref", "audio_ref": {"sha256": d}} for d in digests),
                {"type": "text", "text": "Compare."},
            ],
        }
    ]
    computed = first.prepare(messages)
    again = gate(SourceStore.open(tmp_path / "store"))
    served = again.prepare(messages)
    assert again.feature_cache.hits == 2
    assert served.input_ids == computed.input_ids
    for name, array in computed.model_inputs.items():
        assert served.model_inputs[name].tobytes() == array.tobytes(), name
    assert served.batch is not None
    for clip in served.batch.clips:
        assert isinstance(clip.features, GraniteSpeechClipFeatures)
        assert np.shares_memory(clip.features.waveform, clip.waveform)
