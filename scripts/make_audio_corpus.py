"""Make the real-encoder audio corpus of ``tests/formats`` (issue #20).

Speech from a real text-to-speech program (espeak-ng), converted by real encoders (sox,
ffmpeg, lame, flac, opusenc, oggenc) into every accepted format, at 8 to 96 kHz, mono,
stereo and 6 channels. The encoded files are committed under ``tests/data/audio/`` with
``MANIFEST.json``, which this script writes: per file its container, codec, rate, channels,
the encoder command and, for lossy codecs, the sample count that FFmpeg decodes (gapless
trimming applied as FFmpeg does), so that the tests need no encoder and no FFmpeg.

Needs the Debian packages ``espeak-ng sox ffmpeg lame flac opus-tools vorbis-tools`` and,
in the interpreter, ``soundfile`` and ``av`` (PyAV). Deterministic where the tools allow
(fixed Ogg serials, FFmpeg's bitexact flags, sox's repeatable mode, no dither): rerunning
it rewrites the same bytes. Usage::

    python scripts/make_audio_corpus.py            # (re)write tests/data/audio
    python scripts/make_audio_corpus.py --check    # fail if a file would change
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "audio"
MANIFEST = "MANIFEST.json"

#: espeak-ng voices and Harvard sentences (IEEE 1969); channel ``k`` of a clip speaks
#: source ``(clip index + k) % 6``, so no two channels of a clip hold the same signal.
SOURCES = (
    ("en-us", "The birch canoe slid on the smooth planks."),
    ("en-gb", "Glue the sheet to the dark blue background."),
    ("en-us+f3", "It's easy to tell the depth of a well."),
    ("en-gb-scotland", "These days a chicken leg is a rare dish."),
    ("en-029", "Rice is often served in round bowls."),
    ("en-gb-x-rp", "The juice of lemons makes fine punch."),
)
#: Start of each clip in its source, past espeak-ng's leading silence.
LEAD_SECONDS = 0.08
#: Peak level of every master, in dBFS: headroom for the lossy decoders' overshoot.
PEAK_DB = -3

FFMPEG = [
    "ffmpeg", "-nostdin", "-v", "error", "-y", "-i", "{in}",
    "-map_metadata", "-1", "-fflags", "+bitexact", "-flags:a", "+bitexact",
]  # fmt: skip
SOX = ["sox", "-R", "-D", "-V1", "{in}"]

# (file, rate Hz, channels, seconds, master, command or commands). The master is the same
# clip as float32 (f32), 16-bit (s16) or 24-bit (s24) PCM WAV written by sox, or 12 or
# 20-bit (s12, s20) in an extensible WAV; "{in}" is it, "{out}" the file and "{mid}" a
# scratch file between two commands. The rates {8000, 11025, 16000, 22050, 24000, 32000,
# 44100, 48000, 88200, 96000} each occur several times; every container has mono and
# stereo or 6 ch.
CLIPS: tuple[tuple[str, int, int, float, str, list[Any]], ...] = (
    # WAV, plain headers (WAVE_FORMAT_PCM, _IEEE_FLOAT, _MULAW, _ALAW)
    ("wav-u8-mono-8000.wav", 8000, 1, 1.5, "f32",
     [*SOX, "-t", "wavpcm", "-e", "unsigned-integer", "-b", "8", "{out}"]),
    ("wav-s16-stereo-11025.wav", 11025, 2, 2.0, "f32",
     [*SOX, "-t", "wavpcm", "-e", "signed-integer", "-b", "16", "{out}"]),
    ("wav-s24-mono-96000.wav", 96000, 1, 1.2, "f32",
     [*SOX, "-t", "wavpcm", "-e", "signed-integer", "-b", "24", "{out}"]),
    ("wav-s32-stereo-32000.wav", 32000, 2, 1.3, "f32",
     [*SOX, "-t", "wavpcm", "-e", "signed-integer", "-b", "32", "{out}"]),
    ("wav-f32-6ch-16000.wav", 16000, 6, 1.0, "f32",
     [*SOX, "-t", "wavpcm", "-e", "floating-point", "-b", "32", "{out}"]),
    ("wav-f64-mono-22050.wav", 22050, 1, 1.7, "f32",
     [*SOX, "-t", "wavpcm", "-e", "floating-point", "-b", "64", "{out}"]),
    ("wav-mulaw-mono-8000.wav", 8000, 1, 2.5, "f32",
     [*SOX, "-t", "wav", "-e", "u-law", "-b", "8", "{out}"]),
    ("wav-alaw-stereo-8000.wav", 8000, 2, 1.5, "f32",
     [*FFMPEG, "-c:a", "pcm_alaw", "-f", "wav", "{out}"]),
    # WAV, WAVE_FORMAT_EXTENSIBLE headers
    ("wavext-s16-6ch-48000.wav", 48000, 6, 1.0, "f32",
     [*FFMPEG, "-c:a", "pcm_s16le", "-f", "wav", "{out}"]),
    ("wavext-s24-stereo-88200.wav", 88200, 2, 1.0, "f32",
     [*FFMPEG, "-c:a", "pcm_s24le", "-f", "wav", "{out}"]),
    ("wavext-f32-mono-24000.wav", 24000, 1, 2.0, "f32",
     [*FFMPEG, "-c:a", "pcm_f32le", "-f", "wav", "{out}"]),
    ("wavext-s32-mono-44100.wav", 44100, 1, 1.0, "f32",
     [*SOX, "-t", "wav", "-e", "signed-integer", "-b", "32", "{out}"]),
    ("wavext-f64-stereo-16000.wav", 16000, 2, 1.1, "f32",
     [*FFMPEG, "-c:a", "pcm_f64le", "-f", "wav", "{out}"]),
    # RF64
    ("rf64-s16-stereo-24000.wav", 24000, 2, 1.5, "f32",
     [*FFMPEG, "-c:a", "pcm_s16le", "-rf64", "always", "-f", "wav", "{out}"]),
    ("rf64-f32-mono-48000.wav", 48000, 1, 1.0, "f32",
     [*FFMPEG, "-c:a", "pcm_f32le", "-rf64", "always", "-f", "wav", "{out}"]),
    # AIFF and AIFF-C (NONE, sowt, fl32, ulaw)
    ("aiff-s16-stereo-44100.aiff", 44100, 2, 1.5, "f32",
     [*SOX, "-t", "aiff", "-e", "signed-integer", "-b", "16", "{out}"]),
    ("aiff-s24-mono-32000.aiff", 32000, 1, 1.5, "f32",
     [*SOX, "-t", "aiff", "-e", "signed-integer", "-b", "24", "{out}"]),
    ("aiff-s8-mono-11025.aiff", 11025, 1, 2.0, "f32",
     [*SOX, "-t", "aiff", "-e", "signed-integer", "-b", "8", "{out}"]),
    ("aifc-none-s16-6ch-22050.aifc", 22050, 6, 1.0, "f32",
     [*SOX, "-t", "aifc", "-e", "signed-integer", "-b", "16", "{out}"]),
    ("aifc-sowt-s16-stereo-16000.aifc", 16000, 2, 1.5, "f32",
     [*FFMPEG, "-c:a", "pcm_s16le", "-f", "aiff", "{out}"]),
    ("aifc-fl32-mono-48000.aifc", 48000, 1, 1.0, "f32",
     [*FFMPEG, "-c:a", "pcm_f32be", "-f", "aiff", "{out}"]),
    ("aifc-ulaw-mono-8000.aifc", 8000, 1, 2.0, "f32",
     [*FFMPEG, "-c:a", "pcm_mulaw", "-f", "aiff", "{out}"]),
    # FLAC
    ("flac-s16-stereo-44100.flac", 44100, 2, 2.5, "s16",
     ["flac", "--silent", "--force", "-8", "-o", "{out}", "{in}"]),
    ("flac-s24-mono-96000.flac", 96000, 1, 1.5, "s24",
     ["flac", "--silent", "--force", "-5", "-o", "{out}", "{in}"]),
    ("flac-s16-mono-8000.flac", 8000, 1, 2.0, "s16",
     [*FFMPEG, "-c:a", "flac", "-f", "flac", "{out}"]),
    ("flac-s16-6ch-48000.flac", 48000, 6, 1.0, "s16",
     ["flac", "--silent", "--force", "-5", "-o", "{out}", "{in}"]),
    # MP3: LAME CBR, VBR, MPEG-2.5, no Xing/LAME tag (no gapless info), ID3v2; FFmpeg's
    ("mp3-cbr128-stereo-44100.mp3", 44100, 2, 2.5, "s16",
     ["lame", "--quiet", "-b", "128", "{in}", "{out}"]),
    ("mp3-vbr-mono-22050.mp3", 22050, 1, 2.0, "s16",
     ["lame", "--quiet", "-V", "4", "{in}", "{out}"]),
    ("mp3-cbr24-mono-8000.mp3", 8000, 1, 2.0, "s16",
     ["lame", "--quiet", "-b", "24", "{in}", "{out}"]),
    ("mp3-notag-stereo-32000.mp3", 32000, 2, 1.5, "s16",
     ["lame", "--quiet", "-t", "-b", "96", "{in}", "{out}"]),
    ("mp3-id3v2-mono-11025.mp3", 11025, 1, 1.8, "s16",
     ["lame", "--quiet", "--id3v2-only", "--tt", "Harvard sentence", "--ta", "espeak-ng",
      "-b", "32", "{in}", "{out}"]),
    ("mp3-cbr64-stereo-24000.mp3", 24000, 2, 1.2, "s16",
     ["lame", "--quiet", "-b", "64", "{in}", "{out}"]),
    ("mp3-ffmpeg-stereo-48000.mp3", 48000, 2, 1.5, "s16",
     [*FFMPEG, "-c:a", "libmp3lame", "-b:a", "96k", "-f", "mp3", "{out}"]),
    ("mp3-ffmpeg-mono-16000.mp3", 16000, 1, 2.2, "s16",
     [*FFMPEG, "-c:a", "libmp3lame", "-b:a", "32k", "-f", "mp3", "{out}"]),
    # Ogg Vorbis
    ("vorbis-stereo-44100.ogg", 44100, 2, 2.5, "s16",
     ["oggenc", "--quiet", "--serial", "1", "-q", "3", "-o", "{out}", "{in}"]),
    ("vorbis-mono-16000.ogg", 16000, 1, 1.5, "s16",
     ["oggenc", "--quiet", "--serial", "2", "-q", "3", "-o", "{out}", "{in}"]),
    ("vorbis-6ch-48000.ogg", 48000, 6, 1.0, "s16",
     ["oggenc", "--quiet", "--serial", "3", "-q", "0", "-o", "{out}", "{in}"]),
    ("vorbis-mono-88200.ogg", 88200, 1, 1.0, "s16",
     ["oggenc", "--quiet", "--serial", "4", "-q", "0", "-o", "{out}", "{in}"]),
    ("vorbis-ffmpeg-mono-22050.ogg", 22050, 1, 2.0, "s16",
     [*FFMPEG, "-c:a", "libvorbis", "-q:a", "2", "-f", "ogg", "{out}"]),
    # Opus in Ogg (opusenc; 44.1 and 22.05 kHz sources are resampled by opusenc)
    ("opus-stereo-48000.opus", 48000, 2, 2.5, "s16",
     ["opusenc", "--quiet", "--serial", "1", "--bitrate", "48", "{in}", "{out}"]),
    ("opus-mono-16000.opus", 16000, 1, 1.5, "s16",
     ["opusenc", "--quiet", "--serial", "2", "--bitrate", "16", "{in}", "{out}"]),
    ("opus-mono-44100.opus", 44100, 1, 1.3, "f32",
     ["opusenc", "--quiet", "--serial", "3", "--bitrate", "24", "{in}", "{out}"]),
    ("opus-6ch-48000.opus", 48000, 6, 1.0, "s16",
     ["opusenc", "--quiet", "--serial", "4", "--bitrate", "96", "{in}", "{out}"]),
    ("opus-mono-8000.opus", 8000, 1, 2.0, "s16",
     ["opusenc", "--quiet", "--serial", "5", "--bitrate", "12", "{in}", "{out}"]),
    # Opus in WebM and Matroska (FFmpeg + libopus), always fed 48 kHz: FFmpeg 5.1's libopus
    # wrapper writes a 16 or 24 kHz input's pre-skip in input samples into OpusHead but in
    # time into Matroska's CodecDelay, and FFmpeg 5.1 and 8.1 then trim different counts.
    ("webm-opus-stereo-48000.webm", 48000, 2, 2.0, "s16",
     [*FFMPEG, "-c:a", "libopus", "-b:a", "48k", "-f", "webm", "{out}"]),
    ("webm-opus-mono-16000.webm", 16000, 1, 1.5, "s16",
     [*FFMPEG, "-ar", "48000", "-c:a", "libopus", "-b:a", "16k", "-f", "webm", "{out}"]),
    ("webm-opus-6ch-48000.webm", 48000, 6, 1.0, "s16",
     [*FFMPEG, "-c:a", "libopus", "-mapping_family", "1", "-b:a", "96k", "-f", "webm",
      "{out}"]),
    ("mka-opus-mono-24000.mka", 24000, 1, 1.4, "s16",
     [*FFMPEG, "-ar", "48000", "-c:a", "libopus", "-b:a", "24k", "-f", "matroska",
      "{out}"]),
    # AAC (FFmpeg's encoder) in MP4/M4A
    ("aac-stereo-44100.m4a", 44100, 2, 2.5, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "96k", "-f", "ipod", "{out}"]),
    ("aac-mono-24000.m4a", 24000, 1, 1.5, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "32k", "-f", "ipod", "{out}"]),
    ("aac-6ch-48000.m4a", 48000, 6, 1.0, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "192k", "-f", "ipod", "{out}"]),
    ("aac-mono-96000.mp4", 96000, 1, 1.0, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "64k", "-f", "mp4", "{out}"]),
    ("aac-mono-8000.m4a", 8000, 1, 2.0, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "16k", "-f", "ipod", "{out}"]),
    ("aac-stereo-22050.mp4", 22050, 2, 1.6, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "48k", "-f", "mp4", "{out}"]),
    # AAC in a fragmented MP4 (samples in moof/trun after an empty moov: what Safari's
    # MediaRecorder writes) and in a QuickTime .mov (version-1 sound description, the
    # esds inside a 'wave' box)
    ("aac-fragmented-mono-48000.m4a", 48000, 1, 2.0, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "64k", "-movflags", "frag_keyframe+empty_moov",
      "-frag_duration", "500000", "-f", "mp4", "{out}"]),
    ("aac-mov-stereo-44100.mov", 44100, 2, 1.5, "f32",
     [*FFMPEG, "-c:a", "aac", "-b:a", "96k", "-f", "mov", "{out}"]),
    # Formats libsndfile decodes beside the claimed ones (issue #32): IMA ADPCM WAV,
    # big-endian RIFX, Sun AU and CAF
    ("wav-ima-adpcm-mono-16000.wav", 16000, 1, 1.5, "s16",
     [*SOX, "-t", "wav", "-e", "ima-adpcm", "{out}"]),
    ("rifx-s16-stereo-11025.wav", 11025, 2, 1.0, "s16",
     [*SOX, "-t", "wav", "-B", "-e", "signed-integer", "-b", "16", "{out}"]),
    ("au-s16-mono-8000.au", 8000, 1, 2.0, "s16",
     [*SOX, "-t", "au", "-e", "signed-integer", "-b", "16", "{out}"]),
    ("au-ulaw-mono-8000.au", 8000, 1, 1.5, "f32",
     [*SOX, "-t", "au", "-e", "u-law", "{out}"]),
    ("caf-s16-mono-16000.caf", 16000, 1, 1.0, "s16",
     [*SOX, "-t", "caf", "-e", "signed-integer", "-b", "16", "{out}"]),
    # Apple Lossless in M4A (iPhone Voice Memos), FFmpeg's encoder
    ("alac-mono-16000.m4a", 16000, 1, 1.2, "s16",
     [*FFMPEG, "-c:a", "alac", "-f", "ipod", "{out}"]),
    # WAV codecs libsndfile decodes (issue #32): Microsoft ADPCM (a 50-byte fmt with the
    # coefficient table) and GSM 6.10 (65-byte blocks of 320 samples, 8 kHz mono), sox's
    ("wav-ms-adpcm-stereo-22050.wav", 22050, 2, 1.4, "s16",
     [*SOX, "-t", "wav", "-e", "ms-adpcm", "{out}"]),
    ("wav-gsm610-mono-8000.wav", 8000, 1, 2.0, "s16",
     [*SOX, "-t", "wav", "-e", "gsm-full-rate", "{out}"]),
    # Odd valid-bit depths (issue #32): flac's decoder writes a 12 or 20-bit FLAC as
    # WAVE_FORMAT_EXTENSIBLE, 16 or 24-bit containers holding 12 or 20 valid bits. The
    # FLAC is flac's encoding of the master quantised to that depth ({mid}).
    ("wavext-12in16-mono-8000.wav", 8000, 1, 1.0, "s12",
     [["flac", "--silent", "--force", "-5", "-o", "{mid}", "{in}"],
      ["flac", "--silent", "--force", "--decode", "-o", "{out}", "{mid}"]]),
    ("wavext-20in24-mono-16000.wav", 16000, 1, 1.0, "s20",
     [["flac", "--silent", "--force", "-5", "-o", "{mid}", "{in}"],
      ["flac", "--silent", "--force", "--decode", "-o", "{out}", "{mid}"]]),
)  # fmt: skip

#: Files a browser recorded (``scripts/capture_mediarecorder.py``): not reproducible, so
#: committed as captured and only described here, ``(file, seconds recorded, command)``.
CAPTURED: tuple[tuple[str, float, str], ...] = (
    ("mediarecorder-chromium-opus-mono-48000.webm", 2.5,
     "python scripts/capture_mediarecorder.py --seconds 2.5 --timeslice-ms 250 --out {out}"),
)  # fmt: skip

#: The ``fmt `` layout each file of an odd layout must have (the encoder's bytes are
#: checked, so a tool that writes another layout fails the build, not the tests).
LAYOUTS: dict[str, dict[str, Any]] = {
    "wav-ms-adpcm-stereo-22050.wav": {"format_tag": 2},
    "wav-gsm610-mono-8000.wav": {"format_tag": 0x31, "fmt_bytes": 20},
    "wavext-12in16-mono-8000.wav": {
        "format_tag": 0xFFFE, "subformat_tag": 1, "bits_per_sample": 16, "valid_bits": 12,
    },
    "wavext-20in24-mono-16000.wav": {
        "format_tag": 0xFFFE, "subformat_tag": 1, "bits_per_sample": 24, "valid_bits": 20,
    },
}  # fmt: skip

#: Container of each file, by its first bytes and extension (what the tests sniff too).
CONTAINERS = {
    ".aiff": "aiff",
    ".aifc": "aifc",
    ".flac": "flac",
    ".mp3": "mp3",
    ".ogg": "ogg",
    ".opus": "ogg",
    ".webm": "webm",
    ".mka": "matroska",
    ".m4a": "mp4",
    ".mp4": "mp4",
    ".mov": "mp4",
    ".au": "au",
    ".caf": "caf",
}
LOSSY = {"mp3", "vorbis", "opus", "aac"}
TOOLS = {
    "espeak-ng": ["espeak-ng", "--version"],
    "sox": ["sox", "--version"],
    "ffmpeg": ["ffmpeg", "-version"],
    "lame": ["lame", "--version"],
    "flac": ["flac", "--version"],
    "opusenc": ["opusenc", "--version"],
    "oggenc": ["oggenc", "--version"],
}


def run(cmd: Sequence[str]) -> bytes:
    """Run ``cmd``; its stdout, or exit with its stderr."""
    done = subprocess.run(list(cmd), capture_output=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.decode()}")
    return done.stdout


def tool_versions() -> dict[str, str]:
    import av
    import soundfile

    out = {}
    for name, cmd in TOOLS.items():
        if shutil.which(cmd[0]) is None:
            sys.exit(f"{cmd[0]} not found: apt-get install espeak-ng sox ffmpeg lame flac "
                     "opus-tools vorbis-tools")  # fmt: skip
        text = run(cmd).decode(errors="replace").strip()
        out[name] = text.splitlines()[0].strip() if text else "?"
    out["PyAV"] = f"{av.__version__} (FFmpeg {av.ffmpeg_version_info})"
    out["soundfile"] = f"{soundfile.__version__} ({soundfile.__libsndfile_version__})"
    return out


def speak(work: Path) -> list[Path]:
    """The six espeak-ng sources (22.05 kHz mono 16-bit WAV)."""
    paths = []
    for index, (voice, text) in enumerate(SOURCES):
        path = work / f"source{index}.wav"
        run(["espeak-ng", "-v", voice, "-s", "165", "-w", str(path), text])
        paths.append(path)
    return paths


def master(work: Path, sources: list[Path], index: int, rate: int, channels: int,
           seconds: float, which: str) -> dict[str, Path]:  # fmt: skip
    """The clip as float32, s16 and s24 WAV at ``rate`` with exactly ``seconds``, and as
    12 or 20-bit PCM (the s16 or s24 master truncated) where ``which`` asks for it."""
    inputs = [str(sources[(index + k) % len(sources)]) for k in range(channels)]
    merge = ["-M", *inputs] if channels > 1 else inputs
    start, frames = round(LEAD_SECONDS * rate), round(seconds * rate)
    f32 = work / f"master{index}.wav"
    effects = ["rate", "-v", str(rate), "pad", "0", "4", "trim", f"{start}s", f"{frames}s"]
    run(["sox", "-R", "-D", "-V1", *merge, "-e", "floating-point", "-b", "32", str(f32),
         *effects, "gain", "-n", str(PEAK_DB)])  # fmt: skip
    out = {"f32": f32}
    for name, bits in (("s16", "16"), ("s24", "24")):
        out[name] = work / f"master{index}-{name}.wav"
        run(["sox", "-R", "-D", "-V1", str(f32), "-e", "signed-integer", "-b", bits,
             str(out[name])])  # fmt: skip
    for name, valid, container in (("s12", 12, "s16"), ("s20", 20, "s24")):
        if name != which:
            continue
        out[name] = work / f"master{index}-{name}.wav"
        out[name].write_bytes(truncated_wav(out[container].read_bytes(), valid))
    return out


def truncated_wav(data: bytes, valid_bits: int) -> bytes:
    """sox's 16 or 24-bit PCM WAV with its samples truncated to ``valid_bits``, as
    WAVE_FORMAT_EXTENSIBLE declaring them (what flac's encoder reads as a source of that
    depth)."""
    chunks, pos = {}, 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        chunks[cid] = data[pos + 8 : pos + 8 + size]
        pos += 8 + size + (size & 1)
    tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", chunks[b"fmt "])
    if tag not in (1, 0xFFFE) or bits not in (16, 24):
        raise SystemExit(f"the master is not 16 or 24-bit PCM (tag {tag:#x}, {bits} bits)")
    width = bits // 8
    raw = np.frombuffer(chunks[b"data"], dtype=np.uint8).reshape(-1, width)
    # Little-endian samples: clear the low (bits - valid_bits) bits.
    keep = np.full(width, 0xFF, dtype=np.uint8)
    drop = bits - valid_bits
    keep[: drop // 8] = 0
    keep[drop // 8] = (0xFF << (drop % 8)) & 0xFF
    samples = (raw & keep).tobytes()
    fmt = struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * align, align, bits)
    mask = {1: 0x4}.get(channels, (1 << channels) - 1)  # mono: front centre
    fmt += struct.pack("<HHI", 22, valid_bits, mask) + PCM_GUID
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


#: KSDATAFORMAT_SUBTYPE_PCM.
PCM_GUID = bytes.fromhex("0100000000001000800000aa00389b71")


def wav_format_tag(data: bytes) -> dict[str, Any]:
    """The RIFF/RF64 ``fmt `` chunk's format tag (and sub-format of an extensible one)."""
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        if cid == b"fmt ":
            tag = struct.unpack_from("<H", data, pos + 8)[0]
            out: dict[str, Any] = {"riff": data[:4].decode(), "format_tag": tag}
            if tag == 0xFFFE:
                out["subformat_tag"] = struct.unpack_from("<H", data, pos + 8 + 24)[0]
            out["fmt_bytes"] = size
            out["bits_per_sample"] = struct.unpack_from("<H", data, pos + 8 + 14)[0]
            if tag == 0xFFFE:
                out["valid_bits"] = struct.unpack_from("<H", data, pos + 8 + 18)[0]
            return out
        pos += 8 + size + (size & 1)
    raise SystemExit("no fmt chunk")


def aifc_compression(data: bytes) -> str | None:
    """An AIFF-C ``COMM`` chunk's compression type (``None`` for plain AIFF)."""
    if data[8:12] != b"AIFC":
        return None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack_from(">I", data, pos + 4)[0]
        if cid == b"COMM":
            return data[pos + 8 + 18 : pos + 8 + 22].decode("latin-1")
        pos += 8 + size + (size & 1)
    raise SystemExit("no COMM chunk")


def probe(path: Path) -> dict[str, Any]:
    """ffprobe's codec, rate and channels of the first audio stream."""
    text = run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries",
                "stream=codec_name,sample_rate,channels", "-of", "json", str(path)])  # fmt: skip
    stream = json.loads(text)["streams"][0]
    return {
        "codec": stream["codec_name"],
        "rate": int(stream["sample_rate"]),
        "channels": int(stream["channels"]),
    }


def ffmpeg_decode(path: Path, channels: int) -> np.ndarray:
    """The FFmpeg command line's decode (float32, interleaved → ``(frames, channels)``)."""
    raw = run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(path), "-map", "0:a:0",
               "-c:a", "pcm_f32le", "-f", "f32le", "-"])  # fmt: skip
    return np.frombuffer(raw, dtype="<f4").reshape(-1, channels)


def pyav_decode(path: Path) -> tuple[int, int, int]:
    """PyAV's decode: (frames, rate, channels) over all decoded frames."""
    import av

    frames, rates, layouts = 0, set(), set()
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        for frame in container.decode(stream):
            frames += frame.samples
            rates.add(frame.sample_rate)
            layouts.add(len(frame.layout.channels))
    if len(rates) != 1 or len(layouts) != 1:
        raise SystemExit(f"{path.name}: PyAV decodes a changing geometry {rates} {layouts}")
    return frames, rates.pop(), layouts.pop()


def stats(samples: np.ndarray) -> dict[str, Any]:
    return {
        "sha256_f32le": hashlib.sha256(np.ascontiguousarray(samples, "<f4").tobytes()).hexdigest(),
        "peak": round(float(np.abs(samples).max()), 6),
        "rms": round(float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))), 6),
    }


def describe(path: Path, rate: int, channels: int, seconds: float) -> dict[str, Any]:
    """The manifest entry of one encoded file (its references included)."""
    import soundfile

    data = path.read_bytes()
    info = probe(path)
    entry: dict[str, Any] = {
        "file": path.name,
        "container": container_of(path, data),
        "codec": info["codec"],
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "source": {"rate": rate, "channels": channels, "seconds": seconds},
    }
    if entry["container"] in ("wav", "rf64"):
        entry["wav"] = wav_format_tag(data)
    if entry["container"] in ("aiff", "aifc"):
        entry["aifc_compression"] = aifc_compression(data)
    family = codec_family(info["codec"])
    entry["lossless"] = family not in LOSSY
    if entry["lossless"]:
        decoded = ffmpeg_decode(path, info["channels"])
        try:
            sf = soundfile.info(str(path))
        except RuntimeError:
            sf = None
        if sf is not None:
            got, _ = soundfile.read(str(path), dtype="float32", always_2d=True)
            if got.shape != decoded.shape or sf.samplerate != info["rate"]:
                raise SystemExit(f"{path.name}: soundfile {got.shape} != FFmpeg {decoded.shape}")
            entry.update(rate=sf.samplerate, channels=sf.channels, frames=sf.frames)
            entry["reference"] = {"reader": "soundfile", "subtype": sf.subtype}
        else:
            entry.update(rate=info["rate"], channels=info["channels"], frames=len(decoded))
            entry["reference"] = {"reader": "ffmpeg", **stats(decoded)}
    else:
        decoded = ffmpeg_decode(path, info["channels"])
        frames, av_rate, av_channels = pyav_decode(path)
        entry.update(rate=info["rate"], channels=info["channels"], frames=len(decoded))
        entry["reference"] = {
            "reader": "ffmpeg",
            "note": "frames: FFmpeg's decode with its gapless trimming (skip samples, "
            "edit lists, end padding), `ffmpeg -i FILE -f f32le -`",
            "pyav_frames": frames,  # PyAV's own FFmpeg build, for comparison
            **stats(decoded),
        }
        if (av_rate, av_channels) != (info["rate"], info["channels"]):
            raise SystemExit(f"{path.name}: PyAV geometry differs from ffprobe")
        try:  # for comparison only: libsndfile decodes Opus at OpusHead's input rate
            sf = soundfile.info(str(path))
            entry["reference"]["soundfile"] = {"rate": sf.samplerate, "frames": sf.frames}
        except RuntimeError:
            entry["reference"]["soundfile"] = None
    entry["seconds"] = round(entry["frames"] / entry["rate"], 6)
    return entry


def codec_family(codec: str) -> str:
    if codec.startswith("mp3"):
        return "mp3"
    return codec


def container_of(path: Path, data: bytes) -> str:
    if path.suffix == ".wav":
        return {b"RIFF": "wav", b"RF64": "rf64", b"RIFX": "rifx"}[data[:4]]
    return CONTAINERS[path.suffix]


def report(entry: dict[str, Any]) -> None:
    print(f"{entry['file']:36} {entry['codec']:10} {entry['rate']:6} Hz {entry['channels']} ch "
          f"{entry['frames']:7} frames {entry['bytes']:8} B")  # fmt: skip


def build(out: Path, work: Path, captured: Path) -> dict[str, Any]:
    """Encode every clip into ``out``, describe the browser captures found in
    ``captured``, and return the manifest."""
    versions = tool_versions()
    sources = speak(work)
    entries = []
    for index, (name, rate, channels, seconds, which, template) in enumerate(CLIPS):
        masters = master(work, sources, index, rate, channels, seconds, which)
        target = out / name
        steps = template if isinstance(template[0], list) else [template]
        mid = work / f"step{index}.flac"
        target.unlink(missing_ok=True)
        for step in steps:
            run([str(a).replace("{in}", str(masters[which])).replace("{out}", str(target))
                 .replace("{mid}", str(mid)) for a in step])  # fmt: skip
        entry = describe(target, rate, channels, seconds)
        layout = {k: entry.get("wav", {}).get(k) for k in LAYOUTS.get(name, {})}
        if layout != LAYOUTS.get(name, {}):
            raise SystemExit(f"{name}: {steps[-1][0]} wrote {layout}, not {LAYOUTS[name]}")
        entry["encoder"] = steps[-1][0]
        entry["command"] = " && ".join(
            " ".join(str(a).replace("{in}", f"master-{which}.wav").replace("{mid}", "mid.flac")
                     for a in step)
            for step in steps
        )  # fmt: skip
        entries.append(entry)
        report(entry)
    for name, seconds, command in CAPTURED:
        path = captured / name
        if not path.is_file():
            sys.exit(f"{path} is missing: {command.replace('{out}', str(path))}")
        entry = describe(path, 48_000, 1, seconds)
        entry["encoder"] = "chromium MediaRecorder"
        entry["command"] = command.replace("{out}", name)
        entries.append(entry)
        report(entry)
    return {
        "about": "Real-encoder corpus of tests/formats, written by scripts/make_audio_corpus.py "
        "(do not edit by hand). Each clip: espeak-ng speech, resampled and trimmed by sox to "
        "`source` (a float32/s16/s24 master WAV), then encoded by `command`. `rate`, "
        "`channels`, `frames` are what the decoder must produce: soundfile's read for "
        "lossless files, FFmpeg's decode (gapless trimming applied) for lossy ones. Files "
        "whose encoder is `chromium MediaRecorder` are a browser's recordings, committed as "
        "captured by scripts/capture_mediarecorder.py and only described here.",
        "sources": [{"voice": v, "text": t} for v, t in SOURCES],
        "tools": versions,
        "files": entries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="corpus folder")
    parser.add_argument("--check", action="store_true", help="fail if any file would change")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        target = work / "corpus" if args.check else args.out
        target.mkdir(parents=True, exist_ok=True)
        manifest = build(target, work, args.out)
        text = json.dumps(manifest, indent=1, sort_keys=False) + "\n"
        if args.check:
            captured = {name for name, _, _ in CAPTURED}
            stale = [
                e["file"]
                for e in manifest["files"]
                if e["file"] not in captured
                and (
                    not (args.out / e["file"]).exists()
                    or (args.out / e["file"]).read_bytes() != (target / e["file"]).read_bytes()
                )
            ]
            if stale:
                print("would change: " + ", ".join(stale))
                return 1
            return 0
        known = {e["file"] for e in manifest["files"]} | {MANIFEST}
        for old in args.out.iterdir():
            if old.name not in known and old.is_file():
                old.unlink()
        (args.out / MANIFEST).write_text(text, "utf-8")
        total = sum(e["bytes"] for e in manifest["files"])
        print(f"{len(manifest['files'])} files, {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
