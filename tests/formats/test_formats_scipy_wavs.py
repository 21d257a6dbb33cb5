"""The WAVs of SciPy's own test data (``scipy/io/tests/data/*.wav`` of the installed
package): odd bit depths (5, 12, 20, 36, 45, 53 bits), big-endian RIFX, RF64,
extensible headers, µ-law, unsigned 8-bit, truncated data and chunks. Each is either
accepted with the samples ``scipy.io.wavfile.read`` gives or refused with a typed error,
never an untyped exception:

* through the public API for each family (most of these files hold 5 to 10 samples, too
  short for any family's features: a typed refusal too), path against path with SciPy's
  samples sent as a float32 WAV;
* through the decode stage (:func:`audiogate.decode.inspect` and
  :func:`~audiogate.decode.decode`), which has no length minimum: the decoded mono
  waveform is SciPy's samples scaled to [-1, 1), averaged over channels in float64 and
  clamped, as the decode stage documents.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile
from formatkit import FAMILIES, TOLERANCE, accounting, auto_format, float_wav, prepare

from audiogate import decode as decode_stage
from audiogate.errors import AudioGateError, PluginError

scipy_io = pytest.importorskip("scipy.io")
DATA = Path(scipy_io.__file__).parent / "tests" / "data"
FILES = sorted(DATA.glob("*.wav")) if DATA.is_dir() else []


def scipy_samples(path: Path) -> tuple[int, np.ndarray] | None:
    """SciPy's read as float64 ``[shape=(frames, channels)]`` in [-1, 1), or ``None``
    where SciPy refuses the file. Integers are scaled by their container width: SciPy
    left-justifies 20/24-bit data in int32 and 36/45/53-bit data in int64, so this is
    ``value / 2**(bits - 1)`` of the declared depth."""
    from scipy.io import wavfile

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # WavFileWarning on the files meant to warn
            rate, data = wavfile.read(path)
    except (ValueError, OSError, EOFError):
        return None
    data = data.reshape(len(data), -1)
    if data.dtype == np.uint8:
        scaled = (data.astype(np.float64) - 128.0) / 128.0
    elif data.dtype.kind == "i":
        scaled = data.astype(np.float64) / float(2 ** (8 * data.dtype.itemsize - 1))
    else:
        scaled = data.astype(np.float64)
    return rate, scaled


def soundfile_samples(path: Path) -> tuple[int, np.ndarray] | None:
    try:
        data, rate = soundfile.read(path, dtype="float64", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError):
        return None
    return rate, data


@pytest.mark.skipif(not FILES, reason="SciPy's test data is not installed")
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_scipy_wav_is_read_as_scipy_reads_it_or_refused(path: Path, family: str) -> None:
    data = path.read_bytes()
    try:
        got = prepare(family, data)
    except PluginError:
        raise
    except AudioGateError:
        return  # a typed refusal
    reference = scipy_samples(path) or soundfile_samples(path)
    if reference is None:
        return  # neither SciPy nor libsndfile reads it: nothing to compare with
    rate, samples = reference
    want = prepare(family, float_wav(samples.astype(np.float32), rate_hz=rate))
    got_acc, want_acc = accounting(got), accounting(want)
    for key in ("source_rate", "channels", "source_samples", "frames", "tokens"):
        assert got_acc[key] == want_acc[key], (key, got_acc[key], want_acc[key])
    (g,), (w,) = got.batch.clips, want.batch.clips
    assert np.abs(g.waveform - w.waveform).max(initial=0.0) <= 1e-6
    (ours,), (theirs,) = got.features, want.features
    assert float(np.abs(ours - theirs).max(initial=0.0)) <= TOLERANCE[family]


@pytest.mark.skipif(not FILES, reason="SciPy's test data is not installed")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_scipy_wav_decodes_to_scipys_samples_or_is_refused(path: Path) -> None:
    data = path.read_bytes()
    try:
        geometry = decode_stage.inspect(data, clip_index=0, source_format=auto_format())
        got = decode_stage.decode(data, geometry, clip_index=0)
    except AudioGateError:
        return  # a typed refusal
    reference = scipy_samples(path) or soundfile_samples(path)
    if reference is None:
        return
    rate, samples = reference
    assert (geometry.rate_hz, geometry.channels, geometry.frames) == (rate, *samples.shape[::-1])
    want = np.clip(samples.mean(axis=1), -1.0, 1.0).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=2.0**-24)
