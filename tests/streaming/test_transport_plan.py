"""A stream's header at a length (admission's and the final plan's geometry, #34): the
header's every other field as :func:`attrs.evolve` copies it."""

from __future__ import annotations

import attrs
import pytest
from stream_helpers import family_host, policy_of, raw_pcm16

from audiogate.decode.geometry import ClipGeometry
from audiogate.decode.raw import inspect_raw
from audiogate.policy import MICROS_PER_SECOND
from audiogate.streaming.admission import StreamAdmission


def _evolved(header: ClipGeometry, frames: int) -> ClipGeometry:
    return attrs.evolve(
        header,
        frames=frames,
        duration_us=frames * MICROS_PER_SECOND // header.rate_hz,
        data_length=frames * header.frame_bytes,
        exact=True,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"data_offset": 44, "container": "wav"},
        {"exact": False, "prefix": True, "padding_frames": 7},
    ],
)
def test_the_header_at_a_length_is_the_evolved_header(changes: dict[str, object]) -> None:
    header = attrs.evolve(inspect_raw(4, raw_pcm16(16_000, 2), clip_index=0), **changes)
    admission = StreamAdmission(family_host(), policy_of("qwen2audio"), header)
    for frames in (0, 1, 159, 16_000, 16_000 * 30):
        geometry = admission.geometry(frames)
        assert geometry == _evolved(header, frames)
        assert type(geometry) is ClipGeometry
