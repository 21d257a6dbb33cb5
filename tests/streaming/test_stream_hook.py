"""The family-declared streaming stage (``open_feature_stream``, issue #34): optional in a
package, ``None`` means accumulate, and the core keeps admission and the reservation."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stream_helpers import family_host, noise_pcm16, policy_of, raw_pcm16, same_clip, whole_clip

from audiogate import FamilyStages, create_host, hookimpl, package_stages
from audiogate.budget import ByteBudget
from audiogate.cancel import NEVER
from audiogate.decode import inspect
from audiogate.errors import PluginError
from audiogate.family import OPTIONAL_STAGE_MODULES, STAGE_MODULES
from audiogate.host import FamilyHost
from audiogate.records import ResamplePlan
from audiogate.streaming.frontend import (
    AccumulatingClipStream,
    IncrementalClipStream,
    open_clip_stream,
)
from audiogate.streaming.stage import FeatureStream
from audiogate.streaming.transport import streamed_prepared_clip

RATE = 16_000


def _host_with(stages: Callable[[], FamilyStages]) -> FamilyHost:
    """A host of Qwen2-Audio's spec registered with other stages (a third party's)."""
    spec = family_host().family("qwen2audio").spec

    class Plugin:
        @hookimpl
        def audiogate_register_families(self, register: Callable[..., Any]) -> None:
            register(spec, stages=stages())

    return create_host(plugins=[Plugin()], load_entry_points=False)


def _probe(host: FamilyHost) -> ResamplePlan:
    return host.plan_resample(
        policy_of("qwen2audio"), source_rate_hz=RATE, source_samples=RATE, clip_index=0
    )


def _stream_whole(host: FamilyHost, frames: int = RATE, **kwargs: Any) -> tuple[Any, Any]:
    policy = policy_of("qwen2audio")
    data = noise_pcm16(frames, seed=11).tobytes()
    header = inspect(data, clip_index=0, source_format=raw_pcm16(RATE))
    return open_clip_stream(host, policy, header, **kwargs), data


def test_hook_audiogate_open_feature_stream() -> None:
    host = family_host()
    stream = host.open_feature_stream(
        policy_of("qwen2audio"),
        source_rate_hz=RATE,
        resample=_probe(host),
        clip_index=0,
        cancel=NEVER,
    )
    assert isinstance(stream, FeatureStream)
    assert stream.nbytes == 0
    assert stream.planned_nbytes(RATE) >= RATE * 4
    stream.close()
    stream.close()  # idempotent


def test_the_streaming_module_is_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert STAGE_MODULES["open_feature_stream"] == ("streaming", "open_feature_stream")
    assert "streaming" in OPTIONAL_STAGE_MODULES
    package = tmp_path / "ag_nostream"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    stages = package_stages("ag_nostream")
    assert stages.open_feature_stream is not None
    assert stages.open_feature_stream(policy=None, resample=None) is None
    # A required module stays required.
    assert stages.plan_features is not None
    with pytest.raises(ModuleNotFoundError):
        stages.plan_features(policy=None)


def test_a_streaming_module_that_fails_to_import_is_not_taken_for_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "ag_badstream"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "streaming.py").write_text("import ag_no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stages = package_stages("ag_badstream")
    assert stages.open_feature_stream is not None
    with pytest.raises(ModuleNotFoundError, match="ag_no_such_dependency_here"):
        stages.open_feature_stream(policy=None)
    sys.modules.pop("ag_badstream", None)


def _qwen_stages(**overrides: Any) -> FamilyStages:
    """Qwen2-Audio's stages without its streaming module (a family that never wrote one)."""
    return package_stages("audiogate_qwen2audio", **{"open_feature_stream": None, **overrides})


def test_a_third_party_family_without_streaming_accumulates() -> None:
    host = _host_with(_qwen_stages)
    stream, data = _stream_whole(host)
    assert isinstance(stream, AccumulatingClipStream)
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    for start in range(0, samples.shape[0], 320):
        stream.push(samples[start : start + 320])
    streamed = stream.finish()
    assert not streamed.incremental
    whole = whole_clip(policy_of("qwen2audio"), data, raw_pcm16(RATE))
    same_clip(streamed_prepared_clip(streamed, sha256=whole.sha256, encoded_bytes=len(data)), whole)


def test_a_family_answering_none_accumulates() -> None:
    asked: list[int] = []

    def open_feature_stream(policy: Any, *, source_rate_hz: int) -> None:
        asked.append(source_rate_hz)

    host = _host_with(lambda: _qwen_stages(open_feature_stream=open_feature_stream))
    stream, _ = _stream_whole(host)
    assert isinstance(stream, AccumulatingClipStream)
    assert asked == [RATE]
    stream.close()


def test_the_shipped_whisper_family_streams_incrementally() -> None:
    stream, _ = _stream_whole(family_host())
    assert isinstance(stream, IncrementalClipStream)
    stream.close()


def test_a_stage_returning_something_else_is_a_plugin_error() -> None:
    host = _host_with(lambda: _qwen_stages(open_feature_stream=lambda: object()))
    with pytest.raises(PluginError, match="expected a FeatureStream"):
        _stream_whole(host)


class _Broken:
    """A feature stream that fails in ``push`` with an untyped error."""

    def __init__(self) -> None:
        self.closed = 0

    @property
    def nbytes(self) -> int:
        return 0

    def planned_nbytes(self, more_frames: int) -> int:
        return more_frames * 4

    def push(self, samples: Any) -> None:
        raise ZeroDivisionError("boom")

    def finish(self, clip_plan: Any) -> Any:
        raise AssertionError("not reached")

    def close(self) -> None:
        self.closed += 1


def test_an_untyped_error_in_the_stream_is_a_plugin_error_and_releases_the_budget() -> None:
    broken = _Broken()
    host = _host_with(lambda: _qwen_stages(open_feature_stream=lambda: broken))
    budget = ByteBudget(1 << 30, limit="stream bytes")
    stream, data = _stream_whole(host, budget=budget)
    assert isinstance(stream, IncrementalClipStream)
    samples = np.frombuffer(data, dtype="<i2").astype(np.float32)
    with pytest.raises(PluginError, match=r"qwen2audio.*ZeroDivisionError.*push"):
        stream.push(samples[:320])
    assert budget.held == 0
    assert broken.closed == 1
    stream.close()
    assert broken.closed == 1


class _WrongShape(_Broken):
    def push(self, samples: Any) -> None:
        pass

    def finish(self, clip_plan: Any) -> Any:
        from audiogate.records import ClipFeatures, readonly

        features = readonly(np.zeros((3, 3), dtype=np.float32))
        return readonly(np.zeros(clip_plan.normalized_samples, dtype=np.float32)), ClipFeatures(
            features=features, mask=None, frames=1, tokens=1
        )


def test_streamed_features_are_checked_as_extracted_ones() -> None:
    host = _host_with(lambda: _qwen_stages(open_feature_stream=_WrongShape))
    budget = ByteBudget(1 << 30, limit="stream bytes")
    stream, data = _stream_whole(host, budget=budget)
    stream.push(np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768))
    with pytest.raises(PluginError, match="planned"):
        stream.finish()
    assert budget.held == 0
