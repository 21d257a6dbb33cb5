"""The adapter table: versions, registration by code and entry point, the served name."""

from __future__ import annotations

import argparse
from importlib import metadata
from typing import Any

import attrs
import pytest

from audiogate.errors import PluginError
from audiogate.server.options import add_serve_arguments, serve_options
from audiogate.vllm import adapter as adapter_module
from audiogate.vllm.adapter import (
    SUPPORTED_VLLM,
    TESTED_VLLM,
    VllmFamily,
    VllmVersionError,
    check_vllm_version,
    register_vllm_family,
    vllm_families,
    vllm_family,
)
from audiogate.vllm.render import vllm_messages


@pytest.mark.parametrize("version", [TESTED_VLLM, "0.21.0", "0.32.9.dev12+gabc", "0.32.0rc1"])
def test_supported_versions(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.20.9", "0.33.0", "1.0.0", "0.18.0"])
def test_unsupported_versions_are_refused(version: str) -> None:
    with pytest.raises(VllmVersionError, match="not supported"):
        check_vllm_version(version)
    assert SUPPORTED_VLLM[0] < SUPPORTED_VLLM[1]


def test_the_shipped_families() -> None:
    families = vllm_families()
    shipped = {"qwen2audio", "gemma3n", "audioflamingo3", "glmasr", "granitespeech", "voxtral"}
    assert shipped | {"qwen25omni", "qwen3omni"} <= set(families)
    assert vllm_family("phi4mm") is None  # vLLM serves it only through remote code
    assert families["gemma3n"].keys == ("input_features_mask", "input_features_padded")
    assert families["voxtral"].keys == ("audio_arrays",)
    assert families["granitespeech"].content_format == "string"
    assert families["audioflamingo3"].max_clips == families["granitespeech"].max_clips == 1


def test_string_content_puts_the_clips_first() -> None:
    # What vLLM does for a template that reads a string: clips first, each followed by a
    # newline, then the text parts joined by newlines; other messages as they are.
    clip = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "A:"}, clip, {"type": "text", "text": "B?"}, clip],
        },
        {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
    ]
    rewritten = vllm_messages(messages, vllm_families()["granitespeech"])
    assert rewritten[0] == messages[0]
    assert rewritten[1]["content"] == [
        clip,
        {"type": "text", "text": "\n"},
        clip,
        {"type": "text", "text": "\nA:\nB?"},
    ]
    assert rewritten[2]["content"] == [{"type": "text", "text": "x\ny"}]
    assert vllm_messages(messages, vllm_families()["qwen2audio"]) is messages


@pytest.fixture
def clean_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter_module, "_table", dict(adapter_module._table))
    monkeypatch.setattr(adapter_module, "_entry_points_loaded", False)


@pytest.mark.usefixtures("clean_table")
def test_a_family_registers_its_adapter() -> None:
    custom = attrs.evolve(adapter_module.QWEN2AUDIO, family="newfamily")
    register_vllm_family(custom)
    assert vllm_family("newfamily") is custom
    with pytest.raises(ValueError, match="already has"):
        register_vllm_family(custom)
    replaced = attrs.evolve(custom, wire="2")
    register_vllm_family(replaced, replace=True)
    assert vllm_family("newfamily") is replaced


class _EntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def load(self) -> Any:
        return self.value


@pytest.mark.usefixtures("clean_table")
def test_an_entry_point_adds_an_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    custom = attrs.evolve(adapter_module.GEMMA3N, family="plugged")

    def entry_points(*, group: str) -> list[_EntryPoint]:
        assert group == "audiogate.vllm"
        return [_EntryPoint("plugged", custom)]

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    assert vllm_family("plugged") is custom


@pytest.mark.usefixtures("clean_table")
def test_an_entry_point_that_is_not_an_adapter_is_a_plugin_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metadata, "entry_points", lambda *, group: [_EntryPoint("bad", object())])
    with pytest.raises(PluginError, match="not a VllmFamily"):
        vllm_family("bad")


def test_served_model_name_option() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--model", "examples/models/gemma-3n-e4b-it"])
    assert serve_options(args).served_model_name is None
    args = parser.parse_args(["--model", "m", "--served-model-name", "gemma"])
    assert serve_options(args).served_model_name == "gemma"
    assert isinstance(adapter_module.QWEN2AUDIO, VllmFamily)


@pytest.mark.parametrize(("name", "accepted"), [(None, "gemma-3n-e4b-it"), ("gemma", "gemma")])
def test_the_served_name_is_what_render_checks(name: str | None, accepted: str) -> None:
    from starlette.testclient import TestClient

    from audiogate.server.options import ServeOptions
    from audiogate.server.run import build_app

    options = ServeOptions(model_dir="examples/models/gemma-3n-e4b-it", served_model_name=name)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    with TestClient(build_app(options)) as client:
        ok = client.post("/v1/chat/completions/render", json={**body, "model": accepted})
        assert ok.status_code == 200
        assert ok.json()["model"] == accepted
        other = client.post("/v1/chat/completions/render", json={**body, "model": "x"})
        assert other.status_code == 404
