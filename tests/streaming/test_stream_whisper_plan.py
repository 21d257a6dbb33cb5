"""A Whisper family's feature stream finishes only the clip it streamed: a plan of another
length (one source frame more or less) is a :class:`PluginError`, not zero padding."""

from __future__ import annotations

import pytest

from audiogate.errors import PluginError
from audiogate.host import create_host
from audiogate.testing.streaming import noise_samples, open_stream, whole_clip_plan

#: The six families whose stream is audiogate.streaming.whisper's.
WHISPER_STREAM_FAMILIES = (
    "qwen2audio",
    "qwen25omni",
    "qwen3omni",
    "voxtral",
    "audioflamingo3",
    "glmasr",
)


@pytest.fixture(scope="module")
def host():
    return create_host()


@pytest.mark.parametrize("family", WHISPER_STREAM_FAMILIES)
@pytest.mark.parametrize("rate", [16_000, 48_000])
def test_a_plan_of_another_length_is_refused(host, family, rate):
    policy = host.default_policy(family)
    for planned in (rate + 1, rate - 1, rate + rate // 100):
        stream = open_stream(host, policy, rate)
        stream.push(noise_samples(rate, 3))
        with pytest.raises(PluginError, match="streamed over"):
            stream.finish(whole_clip_plan(host, policy, rate, planned))
        stream.close()
        assert stream.nbytes == 0


@pytest.mark.parametrize("family", WHISPER_STREAM_FAMILIES)
def test_the_streamed_length_is_finished(host, family):
    policy = host.default_policy(family)
    stream = open_stream(host, policy, 48_000)
    stream.push(noise_samples(48_000, 3))
    waveform, features = stream.finish(whole_clip_plan(host, policy, 48_000, 48_000))
    assert waveform.shape == (16_000,)
    assert features.tokens > 0
