"""Real files that this project did not write (issue #20), through the public API.

Every corpus file (``tests/data/audio``: espeak-ng speech encoded by sox, ffmpeg, lame,
flac, opusenc and oggenc) goes through ``AudioGate.prepare`` for each family whose policy
admits it; the others must be refused with a typed error.

* Lossless files: the same samples read by soundfile and sent as a float32 WAV give the
  same accounting and features within the family's parity bound (path against path).
* Lossy files: the same token counts as a clip of the length FFmpeg decodes, gapless
  trimming applied as FFmpeg does (the count is in the manifest, so no FFmpeg is needed).
"""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest
import soundfile
from formatkit import (
    CORPUS,
    FAMILIES,
    REPO,
    SAME_LENGTH,
    SAME_SAMPLES,
    TOLERANCE,
    accounting,
    admits,
    auto_format,
    entries,
    float_wav,
    manifest,
    prepare,
    read,
    skip_without_decoder,
    stand_in,
)

from audiogate import decode as decode_stage
from audiogate.errors import AudioGateError, PluginError

#: What the issue asks for, as (container, codec or WAV format tag, extensible?) — each
#: must be in the corpus.
WAV_TAGS = {"pcm": 1, "float": 3, "alaw": 6, "mulaw": 7}
RATES = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000, 88200, 96000)


def _id(entry: dict) -> str:
    return entry["file"].rsplit(".", 1)[0]


def _cases(lossless: bool) -> list:
    return [
        pytest.param(entry, family, id=f"{_id(entry)}-{family}")
        for entry in entries(lossless=lossless)
        for family in FAMILIES
    ]


def _refused(family: str, data: bytes) -> AudioGateError:
    with pytest.raises(AudioGateError) as caught:
        prepare(family, data)
    assert not isinstance(caught.value, PluginError), caught.value
    return caught.value


# --- the corpus itself -------------------------------------------------------------------


def test_corpus_files_are_the_manifests() -> None:
    listed = {e["file"] for e in entries()}
    on_disk = {p.name for p in CORPUS.iterdir()} - {"MANIFEST.json"}
    assert listed == on_disk
    for entry in entries():
        data = read(entry)
        assert len(data) == entry["bytes"], entry["file"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["file"]
    assert sum(e["bytes"] for e in entries()) < 6_000_000


def test_corpus_covers_every_format_rate_and_layout() -> None:
    files = entries()
    wav = [e for e in files if e["container"] in ("wav", "rf64")]
    wav_kinds = {(e["wav"]["format_tag"], e["wav"].get("subformat_tag"), e["codec"]) for e in wav}
    for codec in ("pcm_u8", "pcm_s16le", "pcm_s24le", "pcm_s32le", "pcm_f32le", "pcm_f64le"):
        tag = WAV_TAGS["float" if codec.startswith("pcm_f") else "pcm"]
        assert (tag, None, codec) in wav_kinds, codec  # plain header
    for codec in ("pcm_s16le", "pcm_s24le", "pcm_s32le", "pcm_f32le", "pcm_f64le"):
        tag = WAV_TAGS["float" if codec.startswith("pcm_f") else "pcm"]
        assert (0xFFFE, tag, codec) in wav_kinds, codec  # WAVE_FORMAT_EXTENSIBLE
    assert (WAV_TAGS["mulaw"], None, "pcm_mulaw") in wav_kinds
    assert (WAV_TAGS["alaw"], None, "pcm_alaw") in wav_kinds
    assert any(e["container"] == "rf64" for e in wav)
    containers = {(e["container"], e["codec"]) for e in files}
    for want in (
        ("aiff", "pcm_s16be"),
        ("flac", "flac"),
        ("mp3", "mp3"),
        ("ogg", "vorbis"),
        ("ogg", "opus"),
        ("webm", "opus"),
        ("mp4", "aac"),
    ):
        assert want in containers, want
    # WebM/Matroska decodes without PyAV only for Opus (formatkit.PYAV_CONTAINERS).
    assert {e["codec"] for e in files if e["container"] in ("webm", "matroska")} == {"opus"}
    assert {e["aifc_compression"] for e in files if e["container"] == "aifc"} >= {"NONE", "sowt"}
    assert {e["source"]["rate"] for e in files} >= set(RATES)
    for channels in (1, 2, 6):
        assert sum(e["channels"] == channels for e in files) >= 5, channels
    assert all(1.0 <= e["source"]["seconds"] <= 3.0 for e in files)
    assert set(manifest()["tools"]) >= {"espeak-ng", "sox", "ffmpeg", "lame", "flac", "opusenc"}


def test_corpus_holds_the_layouts_users_send_beside_the_claimed_ones() -> None:
    """Issue #32's layouts, each as a real encoder wrote it: ADPCM (IMA, Microsoft) and GSM
    6.10 WAV (sox), 12 and 20 valid bits in 16 and 24-bit extensible containers (flac's
    decoder), and a browser's MediaRecorder WebM/Opus (headless Chromium)."""
    wav = {e["file"]: e for e in entries() if e["container"] == "wav"}
    codecs = {e["codec"] for e in wav.values()}
    assert codecs >= {"adpcm_ima_wav", "adpcm_ms", "gsm_ms"}
    (gsm,) = [e for e in wav.values() if e["codec"] == "gsm_ms"]
    assert (gsm["wav"]["format_tag"], gsm["wav"]["fmt_bytes"]) == (0x31, 20)
    depths = {
        (e["wav"]["bits_per_sample"], e["wav"]["valid_bits"])
        for e in wav.values()
        if e["wav"].get("valid_bits") not in (None, e["wav"]["bits_per_sample"])
    }
    assert depths >= {(16, 12), (24, 20)}
    browser = [e for e in entries() if e["encoder"] == "chromium MediaRecorder"]
    assert [(e["container"], e["codec"], e["rate"]) for e in browser] == [("webm", "opus", 48_000)]


# --- lossless: the samples soundfile reads ------------------------------------------------


@pytest.mark.parametrize(("entry", "family"), _cases(lossless=True))
def test_lossless_file_gives_the_features_of_soundfiles_samples(entry: dict, family: str) -> None:
    data = read(entry)
    if not admits(family, rate=entry["rate"], channels=entry["channels"], frames=entry["frames"]):
        _refused(family, data)
        return
    if entry["reference"]["reader"] == "soundfile":
        samples, rate = soundfile.read(CORPUS / entry["file"], dtype="float32", always_2d=True)
    else:  # FFmpeg's decode (ALAC): the manifest holds its samples' digest (mono files)
        skip_without_decoder(entry["container"])
        assert entry["channels"] == 1, "a digest of interleaved samples, checked on mono"
        geometry = decode_stage.inspect(data, clip_index=0, source_format=auto_format())
        mono = decode_stage.decode(data, geometry, clip_index=0)
        digest = hashlib.sha256(np.ascontiguousarray(mono, "<f4").tobytes()).hexdigest()
        assert digest == entry["reference"]["sha256_f32le"], entry["file"]
        samples, rate = mono.reshape(-1, 1), geometry.rate_hz
    assert (rate, samples.shape) == (entry["rate"], (entry["frames"], entry["channels"]))
    got = prepare(family, data)
    want = prepare(family, float_wav(samples, rate_hz=rate))
    got_acc, want_acc = accounting(got), accounting(want)
    for key in (*SAME_SAMPLES, "tokens"):
        assert got_acc[key] == want_acc[key], (key, got_acc[key], want_acc[key])
    assert got.input_ids == want.input_ids
    (ours,), (theirs,) = got.features, want.features
    assert ours.shape == theirs.shape
    error = float(np.abs(ours - theirs).max())
    assert error <= TOLERANCE[family], (entry["file"], family, error)


# --- lossy: the length FFmpeg decodes -----------------------------------------------------


@pytest.mark.parametrize(("entry", "family"), _cases(lossless=False))
def test_lossy_file_gives_the_token_count_of_ffmpegs_length(entry: dict, family: str) -> None:
    skip_without_decoder(entry["container"])
    data = read(entry)
    geometry = {"rate": entry["rate"], "channels": entry["channels"], "frames": entry["frames"]}
    if not admits(family, **geometry):
        _refused(family, data)
        return
    got = accounting(prepare(family, data))
    want = accounting(prepare(family, stand_in(**geometry)))
    assert {k: got[k] for k in SAME_LENGTH} == {k: want[k] for k in SAME_LENGTH}


@pytest.mark.parametrize("entry", entries(lossless=False), ids=_id)
def test_lossy_file_decodes_to_ffmpegs_rate_channels_and_length(entry: dict) -> None:
    skip_without_decoder(entry["container"])
    # Gemma 3n's defaults admit every corpus clip (1 Hz to 192 kHz, 8 channels, 30 s).
    got = accounting(prepare("gemma3n", read(entry)))
    assert (got["source_rate"], got["channels"], got["source_samples"]) == (
        entry["rate"],
        entry["channels"],
        entry["frames"],
    )


# --- the declared format of a chat part ---------------------------------------------------

#: The ``format`` a client declares for each container (OpenAI's ``input_audio``).
DECLARED = {
    "wav": "wav",
    "rf64": "wav",
    "aiff": "aiff",
    "aifc": "aiff",
    "flac": "flac",
    "mp3": "mp3",
    "ogg": "ogg",
    "webm": "webm",
    "matroska": "webm",
    "mp4": "m4a",
    "au": "au",
    "caf": "caf",
    "rifx": "rifx",
}
#: A declaration each container's bytes are not.
WRONG = {"wav": "mp3", "rf64": "flac", "aiff": "wav", "aifc": "ogg", "flac": "mp3"}
WRONG |= {"mp3": "flac", "ogg": "webm", "webm": "ogg", "matroska": "m4a", "mp4": "mp3"}
WRONG |= {"au": "wav", "caf": "mp3", "rifx": "wav"}


@pytest.fixture(scope="module")
def chat_gate():
    pytest.importorskip("transformers")
    from audiogate.api import AudioGate

    return AudioGate.from_model_dir(REPO / "examples" / "models" / "gemma-3n-e4b-it")


def _chat(data: bytes, declared: str) -> list[dict]:
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode()}}
    part["input_audio"]["format"] = declared
    return [{"role": "user", "content": [part, {"type": "text", "text": "Transcribe."}]}]


def _file_ids(entry: dict) -> str:
    return _id(entry)


@pytest.mark.parametrize("entry", entries(), ids=_file_ids)
def test_declared_format_that_agrees_gives_the_sniffed_result(chat_gate, entry: dict) -> None:
    skip_without_decoder(entry["container"])
    data = read(entry)
    got = accounting(chat_gate.prepare(_chat(data, DECLARED[entry["container"]])))
    want = accounting(prepare("gemma3n", data))
    for key in (*SAME_SAMPLES, "tokens", "sha256"):
        assert got[key] == want[key], key
    if entry["codec"] == "opus" and entry["container"] == "ogg":
        assert accounting(chat_gate.prepare(_chat(data, "opus")))["tokens"] == want["tokens"]


@pytest.mark.parametrize("entry", entries(), ids=_file_ids)
def test_declared_format_that_disagrees_is_a_typed_refusal(chat_gate, entry: dict) -> None:
    with pytest.raises(AudioGateError) as caught:
        chat_gate.prepare(_chat(read(entry), WRONG[entry["container"]]))
    assert not isinstance(caught.value, PluginError), caught.value
