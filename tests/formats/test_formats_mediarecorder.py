"""A MediaRecorder WebM (live: unknown sizes, no duration) is admitted by every family
at its real length (issue #32): admission measures its packets within a bounded walk,
instead of planning for bytes × 5,760 capped at the policy, which Phi-4 MM's work cap
refused whatever the length. Checked on a built recording and on one that headless
Chromium's MediaRecorder wrote (in the corpus)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from formatkit import FAMILIES, accounting, entries, gate, prepare, read
from shipped import shipped_families

from audiogate.decode import DecodeLimits, inspect
from audiogate.decode.decoder import ADMISSION_ELEMENTS
from audiogate.decode.geometry import AUTO
from audiogate.decode.remux import measure_webm_opus, remux_webm_opus
from audiogate.pipeline import EncodedClip

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from test_webm_remux import _el, _matroska, _ogg_opus_packets


def _long_recording(head: bytes, packets: list[bytes], repeats: int) -> bytes:
    """A live WebM of ``packets`` × ``repeats`` in one Cluster of unknown size (built in
    one join: ``_matroska`` grows its bytes block by block)."""
    blocks = [_el(0xA3, b"\x81\x00\x00\x80" + packet) for packet in packets]
    cluster = _el(0x1F43B675, b"", unknown=True)
    return _matroska(head, [], 0, live=True) + cluster + b"".join(blocks) * repeats


@pytest.fixture(scope="module")
def recording() -> bytes:
    head, packets, _trim = _ogg_opus_packets()
    return _matroska(head, packets * 4, 0, live=True)  # about 6 s, as Chrome writes it


def test_admission_measures_a_live_webm_to_its_decoded_length(recording):
    limits = DecodeLimits(max_duration_us=30 * 60 * 1_000_000)
    geometry = inspect(recording, clip_index=0, source_format=AUTO, limits=limits)
    assert geometry.frames == remux_webm_opus(recording).samples
    assert geometry.frames < 10 * 48_000  # not the 30-minute bound


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_admits_a_short_mediarecorder_webm(family, recording):
    clip = accounting(prepare(family, recording))
    assert clip["source_rate"] == 48_000
    assert clip["source_samples"] == remux_webm_opus(recording).samples


def test_the_admission_walk_is_bounded(recording):
    head, packets, _trim = _ogg_opus_packets()
    long = _long_recording(head, packets, 3_000)  # 76 minutes of packets
    measured = measure_webm_opus(long, stop_after=None, max_elements=ADMISSION_ELEMENTS)
    assert measured.stopped
    assert measured.elements == ADMISSION_ELEMENTS + 1
    # Past the cap, the walk stops there: the bound stands and the cap refuses it.
    capped = measure_webm_opus(long, stop_after=48_000 * 60, max_elements=ADMISSION_ELEMENTS)
    assert capped.stopped
    assert capped.elements < 4_000


# --- a real browser's recording ----------------------------------------------------------

#: Headless Chromium's MediaRecorder (scripts/capture_mediarecorder.py): 2.5 s of speech
#: from its fake audio device, 250 ms chunks, as a web app uploads it.
CAPTURED = "mediarecorder-chromium-opus-mono-48000.webm"


@pytest.fixture(scope="module")
def chromium() -> dict:
    (entry,) = [e for e in entries() if e["file"] == CAPTURED]
    return entry


def test_the_browser_capture_is_a_live_webm(chromium):
    data = read(chromium)
    assert chromium["encoder"] == "chromium MediaRecorder"
    assert data[:4] == b"\x1aE\xdf\xa3"
    assert b"webm" in data[:64]
    # The Segment's size is unknown (a live recording: 0x01FFFFFFFFFFFFFF), no Duration.
    segment = data.index(b"\x18\x53\x80\x67")
    assert data[segment + 4 : segment + 12] == b"\x01" + b"\xff" * 7
    assert b"\x44\x89" not in data[segment : data.index(b"\x1f\x43\xb6\x75")]
    assert (chromium["codec"], chromium["rate"]) == ("opus", 48_000)


@pytest.mark.parametrize("family", [f.name for f in shipped_families()])
def test_every_family_admits_the_browser_capture_at_its_length(family, chromium):
    """Each shipped family (its pinned defaults) accepts it: decoded to FFmpeg's sample
    count, and features computed for it."""
    result = gate(family).prepare(
        prompt="Transcribe: ", clips=[EncodedClip(data=read(chromium), ordinal=1)]
    )
    clip = accounting(result)
    assert (clip["source_rate"], clip["channels"]) == (48_000, 1)
    assert clip["source_samples"] == chromium["frames"]
    assert clip["tokens"] > 0
    (features,) = result.features
    assert features.size
    assert np.isfinite(features).all()
