"""A stream's plan at its final length (#34): :func:`preflight_one` without the request's
walk, bit for bit the whole clip's :func:`preflight` (plan or error) at every length."""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pluggy
import pytest
from stream_helpers import FAMILIES, family_host, policy_of, raw_pcm16

from audiogate.acquire.clip import EncodedClip
from audiogate.decode import inspect
from audiogate.decode.geometry import ClipGeometry, SourceFormat
from audiogate.errors import AudioGateError
from audiogate.pipeline.preflight import preflight, preflight_one
from audiogate.policy import AudioPolicy
from audiogate.streaming import admission as admission_module
from audiogate.streaming.admission import StreamAdmission
from audiogate.streaming.frontend import open_clip_stream

RATES = (16_000, 48_000)
_PREFLIGHT = importlib.import_module("audiogate.pipeline.preflight")


def _wav_header(rate: int, channels: int, frames: int) -> bytes:
    block = 2 * channels
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", frames * block)
    return b"RIFF" + struct.pack("<I", len(body) + frames * block) + body


def _clip_bytes(
    container: str, rate: int, channels: int, frames: int
) -> tuple[bytes, SourceFormat]:
    """The whole clip of ``frames`` silent frames, and its source format."""
    payload = bytes(2 * channels * frames)
    if container == "wav":
        return _wav_header(rate, channels, frames) + payload, SourceFormat("wav")
    return payload, raw_pcm16(rate, channels)


def _stream_header(container: str, rate: int, channels: int) -> ClipGeometry:
    data, source_format = _clip_bytes(container, rate, channels, 1)
    return inspect(data, clip_index=0, source_format=source_format)


def _outcome(call: Callable[[], Any]) -> Any:
    """The plan, or the error's type and words."""
    try:
        return call()
    except AudioGateError as exc:
        return (type(exc).__name__, str(exc))


def _lengths(rate: int, bound: int | None, seed: int) -> list[int]:
    top = bound if bound is not None else rate * 45
    fixed = [1, 2, 3, 159, 160, 161, 320, 321, 400, 401, 479, 480, 481, rate // 100]
    fixed += [rate - 1, rate, rate + 1, rate * 30 - 1, rate * 30, rate * 30 + 1, top, top + 1]
    rng = np.random.default_rng(seed)
    return sorted({n for n in fixed + rng.integers(1, top + rate, 12).tolist() if n > 0})


def _check_all_lengths(
    policy: AudioPolicy, container: str, rate: int, channels: int, *, seed: int = 0
) -> None:
    host = family_host()
    admission = StreamAdmission(host, policy, _stream_header(container, rate, channels))
    for frames in _lengths(rate, admission.max_frames, seed):
        data, source_format = _clip_bytes(container, rate, channels, frames)
        clip = EncodedClip(data=data, source_format=source_format, ordinal=1)
        whole = _outcome(lambda: preflight(host, policy, [clip]))  # noqa: B023 (called at once)
        streamed = _outcome(lambda: admission.plan(frames))  # noqa: B023
        assert streamed == whole, (policy.family, container, rate, channels, frames)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_final_plan_is_the_whole_clips_at_every_length(family: str, rate: int) -> None:
    _check_all_lengths(policy_of(family), "raw", rate, 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_wav_streams_plan_counts_its_header_bytes(family: str) -> None:
    _check_all_lengths(policy_of(family), "wav", 48_000, 2, seed=1)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_encoded_bytes_per_clip": 64_000},
        {"max_encoded_bytes_per_request": 64_000},
        {"max_waveform_working_bytes_per_request": 300_000},
        {"max_prepared_result_bytes_per_request": 400_000},
        {"max_source_samples_per_request": 40_000},
        {"max_source_duration_us_per_request": 2_500_000},
        {"max_clips": 0},
    ],
)
@pytest.mark.parametrize("family", ["qwen2audio", "phi4mm", "voxtral"])
def test_every_limit_refuses_with_the_whole_clips_error(
    family: str, limits: dict[str, int]
) -> None:
    policy = attrs.evolve(policy_of(family), **limits)
    if limits.get("max_clips") == 0:
        # No admissible length at all: every plan is refused the whole clip's way.
        host = family_host()
        header = _stream_header("raw", 16_000, 1)
        data = bytes(2 * 16_000)
        whole = _outcome(
            lambda: preflight(
                host, policy, [EncodedClip(data=data, source_format=raw_pcm16(16_000), ordinal=1)]
            )
        )
        assert _outcome(lambda: preflight_one(host, policy, header, nbytes=len(data))) == whole
        return
    _check_all_lengths(policy, "raw", 16_000, 1, seed=2)
    _check_all_lengths(policy, "wav", 48_000, 2, seed=3)


def test_a_truncating_policy_plans_the_kept_prefix_as_the_whole_clip() -> None:
    policy = attrs.evolve(policy_of("gemma3n"), overflow="truncate")
    for rate in RATES:
        _check_all_lengths(policy, "raw", rate, 1, seed=4)


def test_the_final_plan_builds_no_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``finish()``'s plan is :func:`preflight_one`: no clip object, no request walk."""

    def walked(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the request's walk ran")

    host = family_host()
    policy = policy_of("qwen2audio")
    stream = open_clip_stream(host, policy, _stream_header("raw", 16_000, 1))
    monkeypatch.setattr(_PREFLIGHT, "preflight", walked)
    monkeypatch.setattr(admission_module, "preflight", walked, raising=False)
    stream.push(np.zeros(16_000, np.float32) + np.float32(0.1))
    done = stream.finish()
    monkeypatch.undo()
    data = bytes(2 * 16_000)
    assert done.plan == preflight(
        host, policy, [EncodedClip(data=data, source_format=raw_pcm16(16_000), ordinal=1)]
    )


def test_a_family_of_stages_is_planned_without_an_empty_pluggy_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host skips pluggy's call of a hook no plugin function implements for the
    family (every shipped family answers its plans by stages)."""
    empty: list[str] = []
    call = pluggy.HookCaller.__call__

    def counted(self: pluggy.HookCaller, **kwargs: object) -> object:
        if not self.get_hookimpls():
            empty.append(self.name)
        return call(self, **kwargs)

    monkeypatch.setattr(pluggy.HookCaller, "__call__", counted)
    host = family_host()
    policy = policy_of("qwen2audio")
    admission = StreamAdmission(host, policy, _stream_header("raw", 16_000, 1))
    assert admission.plan(16_000).clips[0].features.frames > 0
    assert empty == []
