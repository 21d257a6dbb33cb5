"""The header a record keeps from its upload: references are admitted by it, without
reading the bytes on a feature-cache hit, under the policy of the gate that serves them;
a lost blob is refused all the same (docs/sources.md, "Reading a source")."""

from __future__ import annotations

import base64
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from storekit import source

from audiogate.api import AudioGate, load_tokenizer
from audiogate.decode import inspect
from audiogate.errors import LimitError, SourceLostError
from audiogate.store import SourceStore
from audiogate.store.source_record import header_from_text, header_text

pytest.importorskip("transformers")

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"
MIB = 1 << 20


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(MODEL)


@pytest.fixture
def directory_store(tmp_path: Path):
    opened = SourceStore.open(tmp_path / "directory")
    yield opened
    opened.close()


def gate(tokenizer: Any, store: SourceStore | None, **changes: Any) -> AudioGate:
    made = AudioGate.from_model_dir(
        MODEL, tokenizer=tokenizer, store=store, feature_cache_bytes=64 * MIB
    )
    if changes:
        made.policy = attrs.evolve(made.policy, **changes)
    return made


def user(part: dict) -> list[dict]:
    return [{"role": "user", "content": [part, {"type": "text", "text": "What is it?"}]}]


def ref(sha: str) -> dict:
    return {"type": "audio_ref", "audio_ref": {"sha256": sha}}


def inline(data: bytes) -> dict:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}


class CountingReads:
    """Counts the blob backend's reads."""

    def __init__(self, store: SourceStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = store.blobs.read

        def read(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(store.blobs, "read", read)


def same(a: Any, b: Any) -> None:
    assert a.input_ids == b.input_ids
    for x, y in zip(a.features, b.features, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_an_upload_records_its_header_and_a_restart_keeps_it(tokenizer, backing) -> None:
    store = backing.open()
    data = source(2.0, seed=1)
    added = gate(tokenizer, store).add_source(data)
    assert added.record.header == inspect(data, clip_index=0)
    store.close()
    reopened = backing.open()
    record = reopened.get(added.record.sha256, owner="anonymous")
    assert record.header == added.record.header
    lease = reopened.lease(record.sha256, owner="anonymous", read=False)
    assert lease.header == record.header
    assert lease.data == data
    lease.release()
    reopened.close()


def test_a_hit_reads_no_blob_and_gives_what_inline_audio_gives(
    tokenizer, store, monkeypatch
) -> None:
    serving = gate(tokenizer, store)
    data = source(2.0, seed=2)
    sha = serving.add_source(data).record.sha256
    expected = serving.prepare(user(inline(data)))  # computes and caches the features
    reads = CountingReads(store, monkeypatch)
    first = serving.prepare(user(ref(sha)))
    second = serving.prepare(user(ref(sha)))
    assert reads.count == 0
    same(first, expected)
    same(second, expected)
    assert first.batch is not None
    assert first.batch.clips[0].encoded_bytes == len(data)
    # A miss reads it once, proves it and computes the same features.
    serving.feature_cache.clear()
    same(serving.prepare(user(ref(sha))), expected)
    assert reads.count == 1


def test_another_models_policy_refuses_a_recorded_header_over_its_limit(tokenizer, store) -> None:
    # Uploaded under 30 s per clip; served by a gate that admits 1 s, sharing the cache
    # that holds the clip (limits are not in the cache's key).
    uploader = gate(tokenizer, store)
    data = source(2.0, seed=3)
    sha = uploader.add_source(data).record.sha256
    uploader.prepare(user(ref(sha)))
    strict = gate(tokenizer, store, max_duration_seconds=1, max_samples_per_clip=16_000)
    strict.feature_cache = uploader.feature_cache
    with pytest.raises(LimitError) as from_bytes:
        strict.prepare(user(inline(data)))
    with pytest.raises(LimitError) as from_header:
        strict.prepare(user(ref(sha)))
    assert str(from_header.value) == str(from_bytes.value)
    # Refused by admission, before any look-up, though the cache holds the clip.
    assert len(uploader.feature_cache) == 1
    assert uploader.feature_cache.hits == 0


def test_a_lost_blob_is_refused_though_its_features_are_cached(tokenizer, store, backing) -> None:
    serving = gate(tokenizer, store)
    data = source(seed=4)
    sha = serving.add_source(data).record.sha256
    serving.prepare(user(ref(sha)))
    backing.lose(sha)
    with pytest.raises(SourceLostError, match=sha):
        serving.prepare(user(ref(sha)))
    assert store.get(sha, owner="anonymous").status == "lost"
    # A blob of the wrong size is lost too.
    again = serving.add_source(data).record.sha256
    backing.write_blob(again, data[:-2])
    with pytest.raises(SourceLostError):
        serving.prepare(user(ref(again)))


def test_an_index_from_before_headers_is_read_through_its_bytes(
    tokenizer, tmp_path, monkeypatch
) -> None:
    store = SourceStore.open(tmp_path / "old")
    serving = gate(tokenizer, store)
    data = source(seed=5)
    sha = serving.add_source(data).record.sha256
    store.close()
    index = tmp_path / "old" / "index.sqlite3"
    with sqlite3.connect(index) as db:  # the schema before this column
        db.execute("ALTER TABLE sources DROP COLUMN header")
    reopened = SourceStore.open(tmp_path / "old")
    assert reopened.get(sha, owner="anonymous").header is None
    serving = gate(tokenizer, reopened)
    reads = CountingReads(reopened, monkeypatch)
    same(serving.prepare(user(ref(sha))), serving.prepare(user(inline(data))))
    assert reads.count == 1  # read with its lease: its header is read from it
    reopened.close()


def test_a_header_is_kept_only_as_this_core_read_it(tokenizer) -> None:
    geometry = inspect(source(seed=6), clip_index=0)
    text = header_text(geometry)
    assert header_from_text(text) == geometry
    assert header_from_text(text.replace('"core":"', '"core":"0.0.0-')) is None
    assert header_from_text(text.replace('"frames":', '"frame":')) is None
    assert header_from_text("{not json") is None
    assert header_from_text(None) is None
    assert header_text(attrs.evolve(geometry, exact=False)) is None
    assert header_text(attrs.evolve(geometry, container="flac", encoding="flac")) is None


# --- the embedded index --------------------------------------------------------------


def test_a_look_up_does_not_wait_for_a_writer(directory_store) -> None:
    store = directory_store
    sha = store.add(source(seed=9), owner="alice", duration_us=1_000_000).record.sha256
    writing = threading.Event()
    done = threading.Event()

    def hold_the_write_lock() -> None:
        with store.records._writer.write():  # what an upload holds through its fsyncs
            writing.set()
            done.wait(10)

    writer = threading.Thread(target=hold_the_write_lock)
    writer.start()
    try:
        assert writing.wait(10)
        started = time.monotonic()
        lease = store.lease(sha, owner="alice", read=False, verify=False)
        assert time.monotonic() - started < 5
        lease.release()
    finally:
        done.set()
        writer.join()


def test_a_look_up_by_digest_uses_an_index(directory_store) -> None:
    # Every reference looks its digest up: not a scan of every record ever kept.
    plan = directory_store.records._reader.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM sources WHERE sha256 = ? ORDER BY id", ("0",)
    ).fetchall()
    assert any("INDEX sources_sha256" in str(row) for row in plan), plan
