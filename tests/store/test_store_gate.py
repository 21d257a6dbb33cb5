"""Stored sources through the gate: ``audio_ref`` parts and Qwen2-Audio's ``[audio:<sha256>]``
give exactly what inline audio gives, in message order, under the store's ownership."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
from shipped import shipped_families
from storekit import source

from audiogate.api import AudioGate, load_tokenizer
from audiogate.decode.geometry import WAV
from audiogate.errors import (
    AcquisitionError,
    DecodeError,
    LimitError,
    SourceLostError,
    SourceNotFoundError,
    SourceRetiredError,
)
from audiogate.store import SourceStore

pytest.importorskip("transformers")

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
FAMILIES = {
    "gemma3n": "gemma-3n-e4b-it",
    "phi4mm": "phi-4-multimodal-instruct",
    "qwen2audio": "qwen2-audio-7b-instruct",
    "voxtral": "voxtral-mini-3b-2507",
    "granitespeech": "granite-speech-3.3-2b",
    "audioflamingo3": "audio-flamingo-3-hf",
    "glmasr": "glm-asr-nano-2512",
    "qwen25omni": "qwen2.5-omni-7b",
    "qwen3omni": "qwen3-omni-30b-a3b-instruct",
}


def test_every_shipped_family_is_checked() -> None:
    assert set(FAMILIES) == {family.name for family in shipped_families()}


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, object]:
    return {family: load_tokenizer(MODELS / name) for family, name in FAMILIES.items()}


def _gate(family: str, tokenizers, store: SourceStore | None) -> AudioGate:
    return AudioGate.from_model_dir(
        MODELS / FAMILIES[family], tokenizer=tokenizers[family], store=store
    )


def inline(data: bytes) -> dict:
    return {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"},
    }


def ref(sha: str) -> dict:
    return {"type": "audio_ref", "audio_ref": {"sha256": sha}}


def user(*parts: dict, text: str = "Describe the audio.") -> list[dict]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def _same(a, b) -> None:
    assert a.input_ids == b.input_ids
    assert a.audio_spans == b.audio_spans
    assert len(a.features) == len(b.features)
    for x, y in zip(a.features, b.features, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert sorted(a.model_inputs) == sorted(b.model_inputs)
    for name in a.model_inputs:
        np.testing.assert_array_equal(
            np.asarray(a.model_inputs[name]), np.asarray(b.model_inputs[name])
        )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_reference_prepares_exactly_what_the_inline_bytes_prepare(
    family, tokenizers, store
) -> None:
    gate = _gate(family, tokenizers, store)
    one, two, three = source(seed=1), source(0.5, seed=2), source(0.7, seed=3)
    shas = [gate.add_source(d, owner="alice").record.sha256 for d in (one, three)]
    expected = gate.prepare(user(inline(one), inline(two), inline(three)))
    mixed = gate.prepare(user(ref(shas[0]), inline(two), ref(shas[1])), owner="alice")
    _same(mixed, expected)
    assert [c.ordinal for c in mixed.batch.clips] == [1, 2, 3]
    assert [c.sha256 for c in mixed.batch.clips] == [
        shas[0],
        expected.batch.clips[1].sha256,
        shas[1],
    ]
    assert store.leases(shas[0], owner="alice") == 0  # released with the request


@pytest.mark.parametrize("family", list(FAMILIES))
def test_without_a_store_a_reference_is_refused_naming_the_option(family, tokenizers) -> None:
    gate = _gate(family, tokenizers, None)
    with pytest.raises(AcquisitionError, match="--store DIR") as refused:
        gate.prepare(user(ref("a" * 64)))
    assert refused.value.clip_index == 0


def test_references_are_resolved_as_their_caller_sees_them(tokenizers, store) -> None:
    gate = _gate("gemma3n", tokenizers, store)
    sha = gate.add_source(source(seed=4), owner="alice").record.sha256
    with pytest.raises(SourceNotFoundError) as theirs:
        gate.prepare(user(ref(sha)), owner="mallory")
    with pytest.raises(SourceNotFoundError) as missing:
        gate.prepare(user(ref("b" * 64)), owner="mallory")
    assert str(theirs.value) == str(missing.value).replace("b" * 64, sha)
    store.retire(sha, owner="alice")
    with pytest.raises(SourceRetiredError):
        gate.prepare(user(ref(sha)), owner="alice")


def test_a_malformed_reference_part_is_refused(tokenizers, store) -> None:
    gate = _gate("gemma3n", tokenizers, store)
    with pytest.raises(AcquisitionError, match="64 lowercase"):
        gate.prepare(user(ref("ABC")))
    with pytest.raises(AcquisitionError, match="unknown keys"):
        gate.prepare(user({"type": "audio_ref", "audio_ref": {"sha256": "a" * 64, "x": 1}}))


def test_qwen2audio_text_references_resolve_stored_sources_in_message_order(
    tokenizers, store
) -> None:
    gate = _gate("qwen2audio", tokenizers, store)
    one, two, three = source(seed=5), source(0.5, seed=6), source(0.7, seed=7)
    sha1 = gate.add_source(one).record.sha256
    sha3 = gate.add_source(three).record.sha256
    expected = gate.prepare(
        user(inline(one), {"type": "text", "text": "then"}, inline(two), inline(three))
    )
    texts = gate.prepare(
        user(
            {"type": "text", "text": f"[audio:{sha1}]then"},
            inline(two),
            {"type": "text", "text": f"[audio:{sha3}]"},
        )
    )
    _same(texts, expected)
    # A plain string message: references where they stand.
    plain = gate.prepare([{"role": "user", "content": f"[audio:{sha1}] Describe the audio."}])
    assert plain.batch.clips[0].sha256 == sha1


def test_qwen2audio_plain_prompt_references_resolve_stored_sources(tokenizers, store) -> None:
    gate = _gate("qwen2audio", tokenizers, store)
    data = source(seed=8)
    sha = gate.add_source(data).record.sha256
    prompt = gate.chat_prompt(f"[audio:{sha}] What is this?")
    from_store = gate.prepare(prompt=prompt)
    from audiogate.acquire import AcquisitionPolicy, acquire_bytes

    (clip,) = acquire_bytes([data], policy=AcquisitionPolicy())
    given = gate.prepare(prompt=prompt, clips=[clip])
    _same(from_store, given)
    without = _gate("qwen2audio", tokenizers, None)
    _same(without.prepare(prompt=prompt, clips=[clip]), given)


def test_an_upload_is_admitted_like_inline_audio_under_the_models_policy(tokenizers, store) -> None:
    gate = _gate("qwen2audio", tokenizers, store)
    with pytest.raises(AcquisitionError, match="empty"):
        gate.add_source(b"")
    with pytest.raises(AcquisitionError, match="does not match"):
        gate.add_source(b"RIFF" + b"\x00" * 100, source_format=WAV)
    with pytest.raises(DecodeError):  # undeclared: the bytes say RIFF, not WAVE
        gate.add_source(b"RIFF" + b"\x00" * 100)
    with pytest.raises(DecodeError):
        gate.add_source(source(seed=9)[:30])
    with pytest.raises(LimitError, match="duration"):
        gate.add_source(source(31.0, seed=9))  # Qwen2-Audio: 30 s per source
    added = gate.add_source(source(2.0, seed=10), scope="shared")
    assert added.record.duration_us == 2_000_000
    assert added.record.scope == "shared"
    assert store.list("anonymous") == [added.record]


def test_a_damaged_blob_is_never_served_through_a_reference(tokenizers, store, backing) -> None:
    # Leases read unhashed; the pipeline proves the digest before decoding. A hit serves
    # what was computed from the verified bytes; a miss refuses and marks the source lost.
    gate = AudioGate.from_model_dir(
        MODELS / FAMILIES["gemma3n"],
        tokenizer=tokenizers["gemma3n"],
        store=store,
        feature_cache_bytes=64 << 20,
    )
    data = source(seed=21)
    sha = gate.add_source(data, owner="alice").record.sha256
    expected = gate.prepare(user(inline(data)))
    first = gate.prepare(user(ref(sha)), owner="alice")
    _same(first, expected)
    backing.write_blob(sha, data[:-64] + bytes(64))  # same size, same header
    again = gate.prepare(user(ref(sha)), owner="alice")
    _same(again, expected)
    gate.feature_cache.clear()
    with pytest.raises(SourceLostError):
        gate.prepare(user(ref(sha)), owner="alice")
    assert store.get(sha, owner="alice").status == "lost"
    with pytest.raises(SourceLostError):
        gate.prepare(user(ref(sha)), owner="alice")
    # A direct read still checks the digest itself.
    with pytest.raises(SourceLostError):
        store.read(sha, owner="alice")
