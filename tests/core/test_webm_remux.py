"""WebM/Matroska Opus remuxed to Ogg Opus for libsndfile (``audiogate.decode.remux``).

Oracles: the corpus manifest's FFmpeg sample counts; FFmpeg's libopus wrapper (PyAV)
on the same packets; the Ogg Opus file the packets came from (path against path,
bit-exact: the same packets, pre-skip and end trimming in Matroska of every lacing);
real Ogg pages re-serialised byte for byte (the CRC).
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import random
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import soundfile

from audiogate.decode import child, decode, inspect
from audiogate.decode.geometry import AUTO
from audiogate.decode.isolation import DecoderPool
from audiogate.decode.remux import (
    _FIRST,
    _LAST,
    _laced_sizes,
    _OggWriter,
    _Walk,
    ogg_crc,
    remux_bound,
    remux_webm_opus,
)
from audiogate.errors import DecodeError

CORPUS = Path(__file__).resolve().parents[1] / "data" / "audio"
MANIFEST = {e["file"]: e for e in json.loads((CORPUS / "MANIFEST.json").read_text())["files"]}
MATROSKA_OPUS = sorted(
    name for name, e in MANIFEST.items() if e["container"] in ("webm", "matroska")
)
OGG_OPUS = "opus-mono-16000.opus"


def _decode_in_process(data: bytes, channels: int, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """The child's own backend for a WebM Opus clip, run here with PyAV unimportable."""
    monkeypatch.setitem(sys.modules, "av", None)
    header = {"container": "webm", "codec": "opus", "rate_hz": 48_000, "channels": channels}
    header["block_frames"] = 65_536
    backend = child._backend(header)
    assert backend is child._remuxed_blocks
    blocks = [np.array(block) for block in backend(data, header)]
    return np.concatenate(blocks) if blocks else np.empty((0, channels), np.float32)


def _sndfile_48k(data: bytes) -> np.ndarray:
    """An Ogg Opus stream decoded by libsndfile at 48 kHz (as the child does)."""
    header = {"codec": "opus", "rate_hz": 48_000, "block_frames": 1 << 20}
    with soundfile.SoundFile(io.BytesIO(data)) as probe:
        header["channels"] = probe.channels
    return np.concatenate([np.array(b) for b in child._soundfile_blocks(data, header)])


# --- the corpus: FFmpeg's length, rate and channels without PyAV ---------------------------


@pytest.mark.parametrize("name", MATROSKA_OPUS)
def test_corpus_matroska_opus_decodes_to_ffmpegs_length_without_pyav(name, monkeypatch):
    entry = MANIFEST[name]
    data = (CORPUS / name).read_bytes()
    geometry = inspect(data, clip_index=0, source_format=AUTO)
    assert (geometry.rate_hz, geometry.channels) == (entry["rate"], entry["channels"])
    samples = _decode_in_process(data, entry["channels"], monkeypatch)
    assert samples.shape == (entry["frames"], entry["channels"])
    assert remux_webm_opus(data).samples == entry["frames"]


@pytest.mark.parametrize("name", MATROSKA_OPUS)
def test_remuxed_stream_is_within_its_bound(name):
    data = (CORPUS / name).read_bytes()
    ogg = remux_webm_opus(data)
    # Ordinary packets: the Ogg framing costs less than Matroska's.
    assert len(ogg.data) <= len(data) <= remux_bound(len(data))


def _libopus_pcm(data: bytes) -> np.ndarray:
    """FFmpeg's libopus decoder (PyAV) on the Matroska packets, asked for float output.

    PyAV's default Opus decoder is FFmpeg's own (not libopus) and differs by far more
    than rounding, so libopus is asked for by name; and its float output, because the
    int16 one soft-clips near full scale (the Chromium capture peaks at 1.0135).
    """
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        context = av.CodecContext.create("libopus", "r")
        context.extradata = stream.codec_context.extradata
        context.sample_rate = 48_000
        context.options = {"request_sample_fmt": "flt"}
        channels = stream.codec_context.channels
        frames = [f.to_ndarray() for p in container.demux(stream) for f in context.decode(p)]
    assert all(f.dtype == np.float32 and f.shape[0] == 1 for f in frames)  # packed float
    return np.concatenate(frames, axis=1).reshape(-1, channels)


@pytest.mark.parametrize("name", MATROSKA_OPUS)
def test_samples_match_ffmpegs_libopus_decode(name, monkeypatch):
    if importlib.util.find_spec("av") is None:
        pytest.skip("needs PyAV (audiogate[codecs-ffmpeg]) as the oracle")
    data = (CORPUS / name).read_bytes()
    want = _libopus_pcm(data)
    got = _decode_in_process(data, MANIFEST[name]["channels"], monkeypatch)
    assert got.shape == want.shape
    # The mono mean (what the pipeline keeps; the two order 5.1 channels differently),
    # within float rounding of libopus's float decode (measured: at most 2.4e-7).
    error = np.abs(got.mean(axis=1, dtype=np.float64) - want.mean(axis=1)).max()
    assert error <= 1e-6, error


@pytest.mark.slow
def test_pool_decodes_webm_opus_with_pyav_hidden(tmp_path, monkeypatch):
    """Through real decoder processes whose ``import av`` fails."""
    blocker = tmp_path / "av"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('PyAV hidden by the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pool = DecoderPool(processes=1)
    try:
        for name in MATROSKA_OPUS:
            data = (CORPUS / name).read_bytes()
            geometry = inspect(data, clip_index=0, source_format=AUTO)
            got = decode(data, geometry, clip_index=0, decoders=pool)
            assert got.shape == (MANIFEST[name]["frames"],)
    finally:
        pool.close()


# --- a Matroska writer: the packets of a real Ogg Opus file, every lacing -----------------


def _ogg_pages(data: bytes) -> list[tuple[bytes, int, int, int, list[bytes], bool]]:
    """``(page bytes, type, granule, serial, packets completed, ends mid-packet)``."""
    pages, offset, carry = [], 0, b""
    while offset < len(data):
        _, _, kind, granule, serial, _, _, count = struct.unpack_from("<4sBBqIIIB", data, offset)
        table = data[offset + 27 : offset + 27 + count]
        body = offset + 27 + count
        packets, partial = [], carry
        for value in table:
            partial += data[body : body + value]
            body += value
            if value < 255:
                packets.append(partial)
                partial = b""
        pages.append((data[offset:body], kind, granule, serial, packets, bool(partial)))
        carry, offset = partial, body
    return pages


def _ogg_opus_packets() -> tuple[bytes, list[bytes], int]:
    """OpusHead, the audio packets and the end trimming of the corpus Ogg Opus file."""
    pages = _ogg_pages((CORPUS / OGG_OPUS).read_bytes())
    head = pages[0][4][0]
    audio = [p for page in pages[2:] for p in page[4]]
    total = sum(_toc_samples(p) for p in audio)
    return head, audio, total - pages[-1][2]


def _toc_samples(packet: bytes) -> int:
    config, code = packet[0] >> 3, packet[0] & 3
    size = (
        (480, 960, 1920, 2880)[config % 4]
        if config < 12
        else (480, 960)[config % 2]
        if config < 16
        else (120, 240, 480, 960)[config % 4]
    )
    return size * (1 if code == 0 else 2 if code < 3 else packet[1] & 0x3F)


def _size(n: int, *, unknown: bool = False) -> bytes:
    if unknown:
        return b"\x01\xff\xff\xff\xff\xff\xff\xff"
    return (n | (1 << 56)).to_bytes(8, "big")


def _el(element_id: int, payload: bytes, *, unknown: bool = False) -> bytes:
    return (
        element_id.to_bytes((element_id.bit_length() + 7) // 8, "big")
        + _size(len(payload), unknown=unknown)
        + payload
    )


def _uint(element_id: int, value: int) -> bytes:
    return _el(element_id, value.to_bytes(8, "big"))


def _track(number: int, kind: int, codec: bytes, private: bytes, extra: bytes = b"") -> bytes:
    fields = _uint(0xD7, number) + _uint(0x83, kind) + _el(0x86, codec)
    if kind == 2:
        fields += _el(0xE1, _el(0xB5, struct.pack(">d", 48000.0)) + _uint(0x9F, private[9]))
    return _el(0xAE, fields + _el(0x63A2, private) + extra)


def _block_body(track: int, frames: list[bytes], lacing: str) -> bytes:
    """A (Simple)Block's payload holding ``frames`` with the given lacing."""
    flags = {"none": 0, "xiph": 2, "fixed": 4, "ebml": 6}[lacing]
    body = bytes((0x80 | track,)) + b"\x00\x00" + bytes((0x80 | flags,))
    if lacing == "none":
        assert len(frames) == 1
        return body + frames[0]
    body += bytes((len(frames) - 1,))
    if lacing == "xiph":
        for frame in frames[:-1]:
            body += b"\xff" * (len(frame) // 255) + bytes((len(frame) % 255,))
    elif lacing == "ebml":
        body += _size(len(frames[0]))
        for previous, frame in itertools.pairwise(frames[:-1]):
            # A 7-byte signed vint: the difference plus 2^48 - 1, under the marker bit.
            body += (len(frame) - len(previous) + (1 << 48) - 1 | 1 << 49).to_bytes(7, "big")
    else:
        assert len({len(f) for f in frames}) == 1
    return body + b"".join(frames)


def _groups(packets: list[bytes], lacing: str) -> list[list[bytes]]:
    if lacing == "none":
        return [[p] for p in packets]
    if lacing == "fixed":  # runs of equal sizes
        runs: list[list[bytes]] = []
        for p in packets:
            if runs and len(runs[-1][0]) == len(p) and len(runs[-1]) < 256:
                runs[-1].append(p)
            else:
                runs.append([p])
        return runs
    return [packets[i : i + 7] for i in range(0, len(packets), 7)]


def _matroska(
    head: bytes,
    packets: list[bytes],
    trim: int,
    *,
    lacing: str = "none",
    live: bool = False,
    video: bool = False,
    codec: bytes = b"A_OPUS",
    last_in_group: bool = True,
) -> bytes:
    """A WebM file of ``packets``: ``live`` writes MediaRecorder's unknown sizes."""
    tracks = _track(1, 2, codec, head)
    if video:
        tracks = _track(2, 1, b"V_VP8", b"") + tracks
    clusters = b""
    groups = _groups(packets, lacing)
    trim_at = len(groups) - 1 if last_in_group else 0
    for start in range(0, len(groups), 10):
        content = _uint(0xE7, start)
        for index, group in enumerate(groups[start : start + 10], start):
            body = _block_body(1, group, lacing)
            if video:
                content += _el(0xA3, bytes((0x82, 0, 0, 0x80)) + b"\x9d\x01\x2a" * 40)
            if trim and index == trim_at:
                padding = round(trim * 1e9 / 48_000)
                content += _el(0xA0, _el(0xA1, body) + _el(0x75A2, padding.to_bytes(4, "big")))
            else:
                content += _el(0xA3, body)
        clusters += _el(0x1F43B675, content, unknown=live)
    segment = _el(0x1549A966, _uint(0x2AD7B1, 1_000_000)) + _el(0x1654AE6B, tracks) + clusters
    header = _el(0x1A45DFA3, _el(0x4282, b"webm"))
    return header + _el(0x18538067, segment, unknown=live)


@pytest.fixture(scope="module")
def opus_packets() -> tuple[bytes, list[bytes], int]:
    return _ogg_opus_packets()


@pytest.fixture(scope="module")
def ogg_reference() -> np.ndarray:
    return _sndfile_48k((CORPUS / OGG_OPUS).read_bytes())


@pytest.mark.parametrize("lacing", ["none", "xiph", "ebml", "fixed"])
@pytest.mark.parametrize(("live", "video"), [(False, False), (True, True)])
def test_every_lacing_decodes_bit_exactly_as_the_ogg_it_came_from(
    opus_packets, ogg_reference, lacing, live, video
):
    head, packets, trim = opus_packets
    data = _matroska(head, packets, trim, lacing=lacing, live=live, video=video)
    ogg = remux_webm_opus(data)
    assert ogg.packets == len(packets)
    assert ogg.samples == MANIFEST[OGG_OPUS]["frames"] == ogg_reference.shape[0]
    np.testing.assert_array_equal(_sndfile_48k(ogg.data), ogg_reference)


def test_a_packet_longer_than_a_page_continues_on_the_next(opus_packets):
    head, packets, _trim = opus_packets
    # 140,000 bytes: more than two pages of 255 x 255 (the TOC: one 20 ms CELT frame).
    big = bytes((0xF8,)) + bytes(139_999)
    ogg = remux_webm_opus(_matroska(head, [*packets[:3], big, *packets[3:6]], 0)).data
    pages = _ogg_pages(ogg)
    assert [p[5] for p in pages[2:]] == [True, True, False]
    assert [p[1] & 0x01 for p in pages[2:]] == [0, 1, 1]  # continued pages
    granules = [p[2] for p in pages[2:]]
    assert granules[:2] == [sum(_toc_samples(p) for p in packets[:3]), -1]  # none completes
    recovered = [p for page in pages[2:] for p in page[4]]
    assert recovered == [*packets[:3], big, *packets[3:6]]


def test_fixed_lacing_of_one_byte_frames_is_the_bound_case(opus_packets):
    head = opus_packets[0]
    frames = [bytes((0xF8,))] * 256  # 20 ms CELT frames of just a TOC byte
    data = _matroska(head, frames * 20, 0, lacing="fixed")
    ogg = remux_webm_opus(data)
    assert ogg.packets == 256 * 20
    assert 1.5 * len(data) < len(ogg.data) <= remux_bound(len(data))


# --- the Ogg CRC and page writer against real pages -------------------------------------


def _crc_by_table(data: bytes) -> int:
    """The Ogg CRC bit by bit (libogg's definition)."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def test_ogg_crc_is_libogg_s():
    rng = random.Random(5)
    for length in (0, 1, 2, 3, 255, 1000):
        data = bytes(rng.randrange(256) for _ in range(length))
        assert ogg_crc(data) == _crc_by_table(data)
    page = _ogg_pages((CORPUS / OGG_OPUS).read_bytes())[0][0]
    assert struct.unpack_from("<I", page, 22)[0] == ogg_crc(page[:22] + bytes(4) + page[26:])


def test_real_pages_are_rewritten_byte_for_byte():
    pages = _ogg_pages((CORPUS / OGG_OPUS).read_bytes())
    checked = 0
    for sequence, (raw, kind, granule, serial, packets, partial) in enumerate(pages):
        if kind & 0x01 or partial:
            continue  # pages that start or end inside a packet
        writer = _OggWriter(bound=1 << 20, clip_index=0, serial=serial)
        writer.sequence = sequence
        for packet in packets:
            writer.packet(packet, granule)
        writer.page(kind & (_FIRST | _LAST))
        assert writer.out.getvalue() == raw, sequence
        checked += 1
    assert checked == len(pages) >= 3


# --- refusals -----------------------------------------------------------------------------


def _refused(data: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        remux_webm_opus(data, clip_index=2)
    assert info.value.clip_index == 2
    return info.value


def test_malformed_lacing_is_a_typed_refusal():
    walk = _Walk(memoryview(b"\x02\x05\x05\x01\x02"), 0)
    # Xiph: 3 frames, 5 + 5 declared, 1 byte left.
    with pytest.raises(DecodeError, match="more bytes than its block holds"):
        _laced_sizes(walk, 1, 0, 5)
    with pytest.raises(DecodeError, match="fixed-size lacing of 3 frames over 4 bytes"):
        _laced_sizes(walk, 2, 0, 5)
    with pytest.raises(DecodeError, match="Xiph lacing runs past"):
        _laced_sizes(_Walk(memoryview(b"\x01\xff\xff"), 0), 1, 0, 3)
    assert _laced_sizes(_Walk(memoryview(b"\x02abcdef"), 0), 2, 0, 7) == ([2, 2, 2], 1)


def test_empty_and_bad_toc_frames_are_refused(opus_packets):
    head, packets, _ = opus_packets
    laced = _matroska(head, [packets[0], b"", packets[1]], 0, lacing="ebml")
    assert "empty Opus frame" in _refused(laced).detail
    # Code 3 with 63 frames of 20 ms: 1.26 s, past Opus's 120 ms.
    error = _refused(_matroska(head, [bytes((0xFB, 63))], 0))
    assert error.code == "decoder_error"
    assert "samples" in error.detail


def test_lying_and_truncated_sizes_are_refused(opus_packets):
    head, packets, trim = opus_packets
    data = _matroska(head, packets, trim)
    for cut in (len(data) - 1, len(data) // 2, 200):
        assert _refused(data[:cut]).code in ("decoder_error", "malformed_header")
    lying = bytearray(data)
    block = lying.index(bytes((0xA3,)) + _size(len(_block_body(1, packets[0:1], "none"))))
    lying[block + 1 : block + 9] = _size(1 << 40)
    assert "lying size" in _refused(bytes(lying)).detail


def test_trimming_mid_stream_is_refused(opus_packets):
    head, packets, trim = opus_packets
    data = _matroska(head, packets[:20], trim, last_in_group=False)
    assert "DiscardPadding" in _refused(data).detail


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda h, p: _matroska(h, p, 0, codec=b"A_VORBIS"), "unsupported_codec"),
        (lambda h, p: _matroska(b"OpusHeaX" + h[8:], p, 0), "malformed_header"),
        (lambda h, p: _matroska(h[:18] + b"\x01", p, 0), "malformed_header"),
        (lambda h, p: b"\x1a\x45\xdf\xa3\x80", "malformed_header"),
        (lambda h, p: b"", "malformed_header"),
    ],
)
def test_header_refusals_are_typed(opus_packets, change, code):
    head, packets, _ = opus_packets
    assert _refused(change(head, packets[:5])).code == code


def test_two_audio_tracks_or_encoded_blocks_are_refused(opus_packets):
    head, packets, _ = opus_packets
    data = _matroska(head, packets[:5], 0)
    tracks = _el(0x1654AE6B, _track(1, 2, b"A_OPUS", head))
    doubled = data.replace(tracks, _el(0x1654AE6B, _track(1, 2, b"A_OPUS", head) * 2))
    assert "2 audio tracks" in _refused(doubled).detail
    encoded = _el(0x1654AE6B, _track(1, 2, b"A_OPUS", head, _el(0x6D80, b"")))
    assert "ContentEncodings" in _refused(data.replace(tracks, encoded)).detail


def test_no_frames_remux_to_no_packets(opus_packets, monkeypatch):
    head = opus_packets[0]
    data = _matroska(head, [], 0)
    assert remux_webm_opus(data).packets == 0
    assert _decode_in_process(data, 1, monkeypatch).shape == (0, 1)


def test_mutated_webm_gives_only_typed_refusals():
    original = (CORPUS / "webm-opus-mono-16000.webm").read_bytes()
    outcomes = set()
    for index in range(150):
        rng = random.Random(zlib.crc32(f"remux/{index}".encode()))
        data = bytearray(original)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            kind = rng.randrange(3)
            if kind == 0:
                data[at] ^= rng.randint(1, 255)
            elif kind == 1:
                del data[at:]
            else:
                data[at : at + 4] = rng.choice((b"\xff" * 4, b"\x00" * 4, b"\x01\xff\xff\xff"))
        try:
            remux_webm_opus(bytes(data))
            outcomes.add("ok")
        except DecodeError as error:
            outcomes.add(error.code)
    assert outcomes <= {"ok", "decoder_error", "malformed_header", "unsupported_codec"}
    assert "ok" in outcomes
    assert len(outcomes) >= 2


# --- the backend choice and the extras ---------------------------------------------------


def test_backend_choice():
    def backend(container, codec):
        return child._backend({"container": container, "codec": codec})

    assert backend("webm", "opus") is child._remuxed_blocks
    assert backend("webm", "vorbis") is child._pyav_blocks
    assert backend("mp4", "aac") is child._pyav_blocks
    # Ogg and MP3 through libsndfile, one chained link or joined file at a time.
    assert backend("ogg", "opus") is child._joined_blocks
    assert backend("mp3", "mp3") is child._joined_blocks
    assert backend("flac", "flac") is child._soundfile_blocks


def _hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed


def test_webm_opus_needs_only_the_lgpl_codecs(opus_packets, monkeypatch):
    head, packets, _ = opus_packets
    _hide(monkeypatch, "av")
    inspect(_matroska(head, packets[:5], 0), clip_index=0, source_format=AUTO)
    with pytest.raises(DecodeError) as info:
        inspect(
            _matroska(head, packets[:5], 0, codec=b"A_VORBIS"), clip_index=0, source_format=AUTO
        )
    assert info.value.code == "codecs_unavailable"
    assert "audiogate[codecs-ffmpeg]" in str(info.value)
    assert "webm vorbis" in str(info.value)


def test_webm_opus_without_soundfile_names_the_lgpl_extra(opus_packets, monkeypatch):
    head, packets, _ = opus_packets
    _hide(monkeypatch, "soundfile")
    with pytest.raises(DecodeError) as info:
        inspect(_matroska(head, packets[:5], 0), clip_index=0, source_format=AUTO)
    assert info.value.code == "codecs_unavailable"
    assert "audiogate[codecs]" in str(info.value)
