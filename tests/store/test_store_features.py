"""The feature cache's persistent tier on a store: a stored source's features are kept,
inline audio's are never encoded nor written (issue #29: every inline miss wrote and
fsynced its blob, then dropped it)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from storekit import source

from audiogate.api import AudioGate, load_tokenizer
from audiogate.cache import features as cache_features
from audiogate.store import SourceStore

pytest.importorskip("transformers")

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"
MIB = 1 << 20


@pytest.fixture
def gate(store: SourceStore) -> AudioGate:
    return AudioGate.from_model_dir(
        MODEL,
        tokenizer=load_tokenizer(MODEL),
        store=store,
        feature_cache_bytes=64 * MIB,
        feature_store=store,
    )


def _user(part: dict) -> list[dict]:
    return [{"role": "user", "content": [part, {"type": "text", "text": "Describe it."}]}]


def _inline(data: bytes) -> dict:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}


def _ref(sha: str) -> dict:
    return {"type": "audio_ref", "audio_ref": {"sha256": sha}}


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of fsyncs and of clips encoded for the persistent tier."""
    counts = {"fsync": 0, "encoded": 0}
    fsync, to_blob = os.fsync, cache_features.to_blob

    def counting_fsync(fd: int) -> None:
        counts["fsync"] += 1
        fsync(fd)

    def counting_to_blob(*args: object, **kwargs: object) -> bytes | None:
        counts["encoded"] += 1
        return to_blob(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(cache_features, "to_blob", counting_to_blob)
    return counts


def test_inline_audio_is_cached_in_memory_and_never_written(gate, store, backing, writes) -> None:
    data = source(2.0, seed=1)
    first = gate.prepare(_user(_inline(data)))
    assert writes == {"fsync": 0, "encoded": 0}
    sha = first.batch.clips[0].sha256
    assert backing.features(sha) == 0
    assert backing.staged() == 0
    assert not store.keeps_features(sha)
    again = gate.prepare(_user(_inline(data)))  # a memory hit, still nothing written
    assert gate.feature_cache is not None
    assert gate.feature_cache.hits == 1
    assert again.input_ids == first.input_ids
    assert writes == {"fsync": 0, "encoded": 0}


def test_a_stored_sources_features_are_kept_while_it_lives(gate, store, backing, writes) -> None:
    sha = gate.add_source(source(2.0, seed=2), owner="alice").record.sha256
    gate.prepare(_user(_ref(sha)), owner="alice")
    assert writes["encoded"] == 1
    assert store.keeps_features(sha)
    assert backing.features(sha) == 1
    store.retire(sha, owner="alice")
    assert not store.keeps_features(sha)
    assert backing.features(sha) == 0


def test_the_directory_store_fsyncs_a_stored_sources_features_only(tmp_path, writes) -> None:
    store = SourceStore.open(tmp_path / "store")
    try:
        sha = store.add(source(seed=3), owner="alice", duration_us=1_000_000).record.sha256
        uploaded = writes["fsync"]
        assert uploaded > 0  # the upload itself is durable
        store.put_features("0" * 64, "k", b"inline")  # no such source: nothing written
        assert writes["fsync"] == uploaded
        store.put_features(sha, "k", b"stored")
        assert writes["fsync"] > uploaded
    finally:
        store.close()
