"""The resampler against mistral-common's loader (``soxr.resample(x, rate, 16000, "HQ")`` at
soxr's own length), cancellation, and paths that must give the same samples or features:
whole buffer vs streamed bytes, one thread vs several, one request vs many at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import attrs
import numpy as np
import pytest
from voxtral_helpers import make_signal

import audiogate.dsp.blocks
from audiogate.cancel import NEVER, CancelToken
from audiogate.errors import DecodeError, PreprocessCancelled
from audiogate.pipeline import EncodedClip, prepare_clips
from audiogate.testing.audio import wav_bytes
from audiogate_voxtral.resample import plan_resample, resample

soxr = pytest.importorskip("soxr")

RATES = [8_000, 11_025, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000, 192_000]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("samples", [1, 3, 441, 9_999, 100_003])
def test_equals_soxr_resample_bit_for_bit(policy, rate, samples):
    x = make_signal("am", samples=samples, rate_hz=rate, seed=samples)
    plan = plan_resample(policy, source_rate_hz=rate, source_samples=samples, clip_index=0)
    got = resample(policy, plan, x, clip_index=0, cancel=NEVER)
    want = x if rate == 16_000 else soxr.resample(x, rate, 16_000, quality="HQ")
    assert plan.output_samples == want.shape[0]
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable


def test_only_the_allowed_rates_when_the_policy_names_them(policy):
    narrow = attrs.evolve(policy, allowed_source_rates_hz=(16_000, 48_000))
    plan_resample(narrow, source_rate_hz=48_000, source_samples=10, clip_index=0)
    with pytest.raises(DecodeError) as caught:
        plan_resample(narrow, source_rate_hz=44_100, source_samples=10, clip_index=2)
    assert (caught.value.code, caught.value.clip_index) == ("rate_not_allowed", 2)


def test_a_cancelled_resample_stops(policy):
    x = make_signal("noise", samples=480_000, rate_hz=48_000)
    plan = plan_resample(policy, source_rate_hz=48_000, source_samples=x.size, clip_index=1)
    token = CancelToken()
    token.cancel()
    with pytest.raises(PreprocessCancelled):
        resample(policy, plan, x, clip_index=1, cancel=token)


def test_streamed_bytes_resample_to_the_same_samples(host, policy):
    """Bytes fed to one ``SoxrStream`` in arbitrary pieces equal the pipeline's waveform."""
    from audiogate.resample import SoxrStream

    rate = 44_100
    data = wav_bytes(
        make_signal("am", samples=2 * rate, rate_hz=rate, channels=2, seed=9),
        rate_hz=rate,
        encoding="pcm16",
    )
    want = prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)]).clips[0].waveform
    payload = data[44:]
    stream = SoxrStream(in_rate_hz=rate, out_rate_hz=16_000)
    rng = np.random.default_rng(rate)
    pending, out, position = b"", [], 0
    while position < len(payload):
        size = int(rng.integers(1, 5_000))
        pending += payload[position : position + size]
        position += size
        whole = len(pending) // 4 * 4
        pcm = np.frombuffer(pending[:whole], dtype="<i2").reshape(-1, 2) / 32768.0
        pending = pending[whole:]
        out.append(stream.feed(pcm.mean(axis=1).astype(np.float32)))
    out.append(stream.finish())
    np.testing.assert_array_equal(np.concatenate(out), want)


@pytest.mark.parametrize("samples", [200_001, 480_000, 1_000_000])
def test_features_do_not_depend_on_the_thread_count(host, policy, monkeypatch, samples):
    x = make_signal("noise", samples=samples, seed=samples)
    plan = host.plan_features(policy, rate_hz=16_000, samples=samples, clip_index=0)

    def run():
        return host.extract_features(
            policy, plan, x, rate_hz=16_000, clip_index=0, cancel=NEVER
        ).features

    threaded = run()
    monkeypatch.setattr(audiogate.dsp.blocks, "BLOCK_THREADS", 1)
    np.testing.assert_array_equal(run(), threaded)


def test_concurrent_requests_give_each_its_own_result(host, policy):
    datas = [
        wav_bytes(make_signal("am", samples=16_000 * (i + 1), seed=i), rate_hz=16_000)
        for i in range(4)
    ]

    def run(data):
        return prepare_clips(host, policy, [EncodedClip(data=data, ordinal=1)]).inputs.inputs[
            "input_features"
        ]

    alone = [run(d) for d in datas]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(run, datas * 2))
    for index, features in enumerate(together):
        np.testing.assert_array_equal(features, alone[index % 4])
