"""The O(1) per-chunk path (issue #34): the transport decodes in batches, yet a chunk
that crosses a limit is still refused when it comes; the budget is reserved ahead and
given back; the admission bound is searched once per (host, policy, format)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import attrs
import pytest
from stream_helpers import family_host, noise_pcm16, policy_of, raw_pcm16

from audiogate.budget import ByteBudget
from audiogate.decode import inspect
from audiogate.errors import LimitError
from audiogate.streaming import admission as admission_module
from audiogate.streaming.admission import StreamAdmission
from audiogate.streaming.frontend import RESERVE_AHEAD_FRAMES, open_clip_stream
from audiogate.streaming.stage import SOURCE_BATCH_FRAMES, batch_frames
from audiogate.streaming.transport import DECODE_BATCH_FRAMES, prepare_stream

RATE = 16_000
CHUNK_FRAMES = RATE // 50


def test_batches_are_half_a_second_within_bounds() -> None:
    assert batch_frames(48_000) == 24_000
    assert batch_frames(8_000) == 4_000
    assert batch_frames(1_000) == 1_024
    assert batch_frames(384_000) == SOURCE_BATCH_FRAMES == DECODE_BATCH_FRAMES


@pytest.mark.parametrize("family", ["qwen2audio", "granitespeech", "gemma3n"])
def test_the_crossing_chunk_is_refused_when_it_comes(family: str) -> None:
    """Two seconds admitted: chunk 100 (the first past 2 s) is refused, though its
    samples and the 24 chunks before it still wait for their batch."""
    policy = attrs.evolve(policy_of(family), max_duration_seconds=2)
    budget = ByteBudget(1 << 30, limit="stream bytes")
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for index in range(200):
            sent = index + 1
            yield noise_pcm16(CHUNK_FRAMES, seed=index).tobytes()

    with pytest.raises(LimitError, match="duration"):
        asyncio.run(
            prepare_stream(
                family_host(), policy, chunks(), source_format=raw_pcm16(RATE), budget=budget
            )
        )
    assert sent == 2 * RATE // CHUNK_FRAMES + 1
    assert budget.held == 0


def test_the_budget_is_reserved_ahead_and_released() -> None:
    budget = ByteBudget(1 << 30, limit="stream bytes")
    header = inspect(bytes(2), clip_index=0, source_format=raw_pcm16(RATE))
    stream = open_clip_stream(family_host(), policy_of("qwen2audio"), header, budget=budget)
    stream.admit(CHUNK_FRAMES)
    first = budget.held
    assert first > 0
    for _ in range(RESERVE_AHEAD_FRAMES // CHUNK_FRAMES - 1):
        stream.admit(CHUNK_FRAMES)  # within the reservation: nothing taken
    assert budget.held == first
    stream.admit(2 * CHUNK_FRAMES)
    assert budget.held > first
    stream.close()
    assert budget.held == 0


def test_the_admission_bound_is_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    header = inspect(bytes(2), clip_index=0, source_format=raw_pcm16(22_050))
    host, policy = family_host(), attrs.evolve(policy_of("voxtral"), max_duration_seconds=7)
    first = StreamAdmission(host, policy, header)
    calls = 0
    search = StreamAdmission._last_admitted

    def counted(self: StreamAdmission) -> int | None:
        nonlocal calls
        calls += 1
        return search(self)

    monkeypatch.setattr(StreamAdmission, "_last_admitted", counted)
    again = StreamAdmission(host, policy, header)
    assert calls == 0
    assert again.max_frames == first.max_frames == 7 * 22_050
    # Another policy object (even an equal one) is searched for itself.
    StreamAdmission(host, attrs.evolve(policy), header)
    assert calls == 1
    assert len(admission_module._BOUNDS) <= admission_module._BOUNDS_MAX
