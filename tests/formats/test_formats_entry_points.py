"""Every way audio enters recognises the container from the bytes unless one is declared
(issue #32): chat parts without ``format`` or with ``"auto"``, ``audio_url`` parts (the
shape vLLM and OpenAI clients send), data URIs, and the library's own clips. A declared
format the bytes contradict is refused naming both."""

from __future__ import annotations

import base64

import pytest
from formatkit import REPO, accounting, entries, prepare, read, skip_without_decoder

from audiogate.errors import AcquisitionError, AudioGateError, DecodeError
from audiogate.pipeline import EncodedClip

pytest.importorskip("transformers")

#: One file of each container of the corpus (its smallest), WAV included.
ONE_PER_CONTAINER = {e["container"]: e for e in sorted(entries(), key=lambda e: -e["bytes"])}


@pytest.fixture(scope="module")
def chat_gate():
    from audiogate.api import AudioGate

    return AudioGate.from_model_dir(REPO / "examples" / "models" / "gemma-3n-e4b-it")


def _messages(part: dict) -> list[dict]:
    return [{"role": "user", "content": [part, {"type": "text", "text": "Transcribe."}]}]


def _input_audio(data: bytes, **declared: str) -> dict:
    return {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(data).decode(), **declared},
    }


#: The media type a client would put in a data URI for each container.
MEDIA_TYPES = {"wav": "wav", "rf64": "wav", "aiff": "aiff", "aifc": "aiff", "flac": "flac"}
MEDIA_TYPES |= {"mp3": "mpeg", "ogg": "ogg", "webm": "webm", "matroska": "x-matroska"}
MEDIA_TYPES |= {"mp4": "mp4", "au": "basic", "caf": "x-caf", "rifx": "wav"}


def _audio_url(data: bytes, media: str = "wav", **declared: str) -> dict:
    uri = f"data:audio/{media};base64," + base64.b64encode(data).decode()
    return {"type": "audio_url", "audio_url": {"url": uri, **declared}}


PARTS = {
    "input_audio without format": lambda data, _: _input_audio(data),
    "input_audio format auto": lambda data, _: _input_audio(data, format="auto"),
    "input_audio format AUTO": lambda data, _: _input_audio(data, format="AUTO"),
    "audio_url without format": lambda data, media: _audio_url(data, media),
    "audio_url format auto": lambda data, media: _audio_url(data, media, format="auto"),
}


@pytest.mark.parametrize("container", sorted(ONE_PER_CONTAINER))
@pytest.mark.parametrize("shape", sorted(PARTS))
def test_a_part_without_a_declared_format_is_recognised_from_its_bytes(
    chat_gate, container: str, shape: str
) -> None:
    entry = ONE_PER_CONTAINER[container]
    skip_without_decoder(container)
    data = read(entry)
    part = PARTS[shape](data, MEDIA_TYPES[container])
    got = accounting(chat_gate.prepare(_messages(part)))
    want = accounting(prepare("gemma3n", data))
    for key in ("source_rate", "channels", "source_samples", "tokens", "sha256"):
        assert got[key] == want[key], key


@pytest.mark.parametrize("container", sorted(ONE_PER_CONTAINER))
def test_a_library_clip_is_recognised_from_its_bytes_by_default(container: str) -> None:
    entry = ONE_PER_CONTAINER[container]
    skip_without_decoder(container)
    clip = EncodedClip(data=read(entry), ordinal=1)  # no source_format: the bytes say
    assert clip.source_format.container == "auto"
    assert accounting(prepare("gemma3n", clip.data))["source_rate"] == entry["rate"]


def test_an_audio_url_mp3_declared_as_wav_is_refused_naming_both(chat_gate) -> None:
    (entry,) = [e for e in entries() if e["file"] == "mp3-cbr24-mono-8000.mp3"]
    with pytest.raises(AcquisitionError) as caught:
        chat_gate.prepare(_messages(_audio_url(read(entry), format="wav")))
    message = str(caught.value)
    assert "declared format wav does not match the bytes" in message
    assert "sniffed MP3" in message


def test_bytes_that_are_no_audio_format_are_refused_naming_what_they_are(chat_gate) -> None:
    with pytest.raises(DecodeError) as caught:
        chat_gate.prepare(_messages(_input_audio(b"%PDF-1.7\n" + b"\0" * 4096)))
    assert caught.value.code == "unknown_container"
    assert "found PDF" in str(caught.value)
    with pytest.raises(AudioGateError, match="no known signature"):
        chat_gate.prepare(_messages(_audio_url(b"\x01\x02\x03\x04" * 1024)))


@pytest.mark.parametrize("container", ["mp3", "flac", "ogg"])
def test_a_source_added_without_a_format_is_recognised_from_its_bytes(
    tmp_path, container: str
) -> None:
    from audiogate.api import AudioGate
    from audiogate.store import SourceStore

    entry = ONE_PER_CONTAINER[container]
    data = read(entry)
    store = SourceStore.open(tmp_path / "store")
    try:
        gate = AudioGate.from_model_dir(
            REPO / "examples" / "models" / "gemma-3n-e4b-it", store=store
        )
        added = gate.add_source(data)  # no source_format: the bytes say
        reference = {"type": "audio_ref", "audio_ref": {"sha256": added.record.sha256}}
        got = accounting(gate.prepare(_messages(reference)))
        want = accounting(prepare("gemma3n", data))
        for key in ("source_rate", "channels", "source_samples", "tokens", "sha256"):
            assert got[key] == want[key], key
    finally:
        store.close()


#: The containers declared by name since #32 (AU, CAF, RIFX: decoded by libsndfile in the
#: decoder process) and the names a client may give each.
NAMED = {"au": ("au", "snd", "AU"), "caf": ("caf",), "rifx": ("rifx",)}


def _declared_parts(data: bytes, name: str, container: str) -> dict[str, dict]:
    return {
        "input_audio": _input_audio(data, format=name),
        "audio_url": _audio_url(data, MEDIA_TYPES[container], format=name),
    }


@pytest.mark.parametrize("container", sorted(NAMED))
def test_au_caf_and_rifx_are_declared_by_name_at_every_entry_point(
    chat_gate, tmp_path, container: str
) -> None:
    from audiogate.api import AudioGate
    from audiogate.decode import SourceFormat
    from audiogate.store import SourceStore

    entry = ONE_PER_CONTAINER[container]
    data = read(entry)
    want = accounting(prepare("gemma3n", data))
    got: dict[str, dict] = {}
    for name in NAMED[container]:
        for shape, part in _declared_parts(data, name, container).items():
            got[f"{shape} {name}"] = accounting(chat_gate.prepare(_messages(part)))
    clip = EncodedClip(data=data, source_format=SourceFormat(container), ordinal=1)
    got["library clip"] = accounting(chat_gate.prepare(prompt="Transcribe: ", clips=[clip]))
    store = SourceStore.open(tmp_path / "store")
    try:
        gate = AudioGate.from_model_dir(
            REPO / "examples" / "models" / "gemma-3n-e4b-it", store=store
        )
        added = gate.add_source(data, source_format=SourceFormat(container))
        reference = {"type": "audio_ref", "audio_ref": {"sha256": added.record.sha256}}
        got["source"] = accounting(gate.prepare(_messages(reference)))
    finally:
        store.close()
    for path, result in got.items():
        for key in ("source_rate", "channels", "source_samples", "tokens", "sha256"):
            assert result[key] == want[key], (path, key)


#: A file of another container for each named one: what the declaration contradicts.
OTHER = {"au": "caf", "caf": "rifx", "rifx": "wav", "wav": "au"}


@pytest.mark.parametrize("declared", sorted(OTHER))
def test_a_named_container_the_bytes_contradict_is_refused_naming_both(
    chat_gate, tmp_path, declared: str
) -> None:
    from audiogate.api import AudioGate
    from audiogate.decode import SourceFormat
    from audiogate.store import SourceStore

    sent = OTHER[declared]
    data = read(ONE_PER_CONTAINER[sent])
    found = {"au": "Sun AU", "caf": "CAF", "rifx": "RIFX", "wav": "RIFF/WAVE"}
    messages: dict[str, str] = {}
    # The data URI's media type is the declared format's, as its sender would give it.
    for shape, part in _declared_parts(data, declared, declared).items():
        with pytest.raises(AudioGateError) as caught:
            chat_gate.prepare(_messages(part))
        messages[shape] = str(caught.value)
    clip = EncodedClip(data=data, source_format=SourceFormat(declared), ordinal=1)
    with pytest.raises(AudioGateError) as caught:
        chat_gate.prepare(prompt="Transcribe: ", clips=[clip])
    messages["library clip"] = str(caught.value)
    store = SourceStore.open(tmp_path / "store")
    try:
        gate = AudioGate.from_model_dir(
            REPO / "examples" / "models" / "gemma-3n-e4b-it", store=store
        )
        with pytest.raises(AudioGateError) as caught:
            gate.add_source(data, source_format=SourceFormat(declared))
        messages["source"] = str(caught.value)
    finally:
        store.close()
    if declared == "wav":
        # A library clip declared WAV keeps the RIFF walker's refusal (not_riff_wave): it
        # names the header it wanted and the bytes it got.
        walker = messages.pop("library clip")
        assert "missing RIFF/WAVE header: got '.snd'" in walker, walker
    for path, message in messages.items():
        assert f"declared {declared}" in message or f"format {declared}" in message, (
            path,
            message,
        )
        assert found[sent] in message, (path, message)


@pytest.mark.parametrize(("media", "container"), [("basic", "au"), ("x-caf", "caf")])
def test_a_data_uri_media_type_names_au_and_caf(chat_gate, media: str, container: str) -> None:
    data = read(ONE_PER_CONTAINER[container])
    got = accounting(chat_gate.prepare(_messages(_audio_url(data, media, format=container))))
    assert got["source_samples"] == accounting(prepare("gemma3n", data))["source_samples"]
    with pytest.raises(AcquisitionError, match=f"does not match the declared format {container}"):
        chat_gate.prepare(_messages(_audio_url(data, "mpeg", format=container)))


def test_an_upload_content_type_names_au_and_caf() -> None:
    from audiogate.decode import SourceFormat
    from audiogate.server.sources import CONTENT_TYPES

    assert CONTENT_TYPES["audio/basic"] == CONTENT_TYPES["audio/x-au"] == SourceFormat("au")
    assert CONTENT_TYPES["audio/x-caf"] == SourceFormat("caf")
