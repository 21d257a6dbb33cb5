"""No existence oracle across owners (issue #35): the feature cache is scoped per owner,
so a request for bytes another owner sent does exactly the work of a request for bytes
nobody sent (counted in feature computations, not wall time), and answers the same."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from storekit import source

from audiogate.api import AudioGate, load_tokenizer
from audiogate.cache import lookup
from audiogate.store import SourceStore

pytest.importorskip("transformers")

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "gemma-3n-e4b-it"


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[AudioGate]:
    store = SourceStore.open(tmp_path / "store")
    yield AudioGate.from_model_dir(
        MODEL,
        tokenizer=load_tokenizer(MODEL),
        store=store,
        feature_cache_bytes=64 << 20,
        feature_store=store,
    )
    store.close()


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The digest of every clip whose features were computed (cache misses)."""
    seen: list[str] = []
    process_clip = lookup.process_clip

    def counting(*args: object, **kwargs: object) -> object:
        seen.append(args[3].sha256)  # type: ignore[attr-defined]
        return process_clip(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lookup, "process_clip", counting)
    return seen


def _user(part: dict) -> list[dict]:
    return [{"role": "user", "content": [part, {"type": "text", "text": "Describe it."}]}]


def _inline(data: bytes) -> dict:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}


def _ref(sha: str) -> dict:
    return {"type": "audio_ref", "audio_ref": {"sha256": sha}}


def test_inline_bytes_another_owner_sent_cost_what_never_sent_bytes_cost(
    gate: AudioGate, computed: list[str]
) -> None:
    theirs, fresh = source(1.0, seed=31), source(1.0, seed=32)
    gate.prepare(_user(_inline(theirs)), owner="alice")
    gate.prepare(_user(_inline(theirs)), owner="alice")
    assert len(computed) == 1  # alice's second request hit her own entry
    computed.clear()
    sent = gate.prepare(_user(_inline(theirs)), owner="bob")
    work_sent = len(computed)
    computed.clear()
    never = gate.prepare(_user(_inline(fresh)), owner="bob")
    work_never = len(computed)
    assert work_sent == work_never == 1
    assert sent.batch.clips[0].origin == never.batch.clips[0].origin
    # bob's own entries are his to hit.
    computed.clear()
    gate.prepare(_user(_inline(theirs)), owner="bob")
    assert computed == []


def test_a_stored_source_another_owner_uploaded_costs_what_a_fresh_one_costs(
    gate: AudioGate, computed: list[str]
) -> None:
    theirs, fresh = source(1.0, seed=33), source(1.0, seed=34)
    alice = gate.add_source(theirs, owner="alice").record.sha256
    gate.prepare(_user(_ref(alice)), owner="alice")
    computed.clear()
    work = []
    for data in (theirs, fresh):
        added = gate.add_source(data, owner="bob")
        assert added.created  # the same answer for both
        gate.prepare(_user(_ref(added.record.sha256)), owner="bob")
        work.append(len(computed))
        computed.clear()
    assert work == [1, 1]
