"""Waveforms an embedder already holds (numpy arrays and their rate) as encoded clips.

:func:`waveform_clips` turns each array into a headerless raw source with its declared
encoding, rate and channels (``SourceFormat.raw``) and admits it like any other bytes
(:func:`~audiogate.acquire.acquire_bytes`): the same ceilings, then the same header
admission (rates, channels, duration), decoding, resampling and features as a WAV.

Accepted arrays:

* dtype ``float32`` (kept exactly), ``float64`` (cast to float32, as the families'
  frontends compute in float32) or ``int16`` (PCM16, kept exactly); floats are samples
  in ``[-1, 1]``; non-finite samples are refused when the clip is decoded;
* ``[shape=(samples,)]``: mono; ``[shape=(channels, samples)]`` with
  ``layout="channels_first"`` or ``[shape=(samples, channels)]`` with
  ``layout="channels_last"``. A 2-D array is always one multi-channel clip, never a batch
  (unlike transformers' feature extractors): give a list for several clips.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import numpy as np

from audiogate.acquire.acquire import acquire_bytes
from audiogate.acquire.clip import EncodedClip
from audiogate.acquire.policy import AcquisitionPolicy
from audiogate.cancel import CancelToken
from audiogate.decode.geometry import SourceFormat
from audiogate.errors import AcquisitionError

__all__ = ["ORIGIN_WAVEFORM", "WaveformLayout", "waveform_clips"]

#: The ``origin`` of a refused waveform in its :class:`~audiogate.errors.AcquisitionError`.
ORIGIN_WAVEFORM: Final = "waveform"
#: How a 2-D waveform holds its channels.
WaveformLayout: TypeAlias = Literal["channels_first", "channels_last"]
_LAYOUTS: Final = ("channels_first", "channels_last")


def waveform_clips(
    audio: Any,
    *,
    sampling_rate: int,
    policy: AcquisitionPolicy,
    layout: WaveformLayout | None = None,
    cancel: CancelToken | None = None,
) -> list[EncodedClip]:
    """One encoded clip per waveform, ordinals ``1..n``.

    :param audio: one ``numpy.ndarray``, or a list (or tuple) of them.
    :param sampling_rate: the rate of every waveform, in Hz (an ``int``).
    :param layout: how a 2-D waveform holds its channels (required for one).
    :raises AcquisitionError: not an array, an unsupported dtype or shape, an empty
        waveform, a rate that is not a positive ``int`` (origin ``"waveform"``).
    :raises LimitError: too many waveforms or bytes (the acquisition ceilings).
    """
    arrays = list(audio) if isinstance(audio, list | tuple) else [audio]
    if not arrays:
        raise AcquisitionError("no waveform was given", clip_index=None, origin=ORIGIN_WAVEFORM)
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, int | np.integer):
        raise AcquisitionError(
            f"sampling_rate must be an int (Hz), got {type(sampling_rate).__name__}",
            clip_index=None,
            origin=ORIGIN_WAVEFORM,
        )
    rate = int(sampling_rate)
    if rate < 1:
        raise AcquisitionError(
            f"sampling_rate must be positive, got {rate}", clip_index=None, origin=ORIGIN_WAVEFORM
        )
    if layout is not None and layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'channels_first' or 'channels_last', not {layout!r}")
    blobs: list[bytes] = []
    formats: list[SourceFormat] = []
    for index, array in enumerate(arrays):
        interleaved, encoding = _interleaved(array, layout, index)
        blobs.append(interleaved.tobytes())
        channels = 1 if interleaved.ndim == 1 else int(interleaved.shape[1])
        formats.append(SourceFormat.raw(encoding, rate_hz=rate, channels=channels))
    return acquire_bytes(blobs, policy=policy, cancel=cancel, source_format=formats)


def _interleaved(
    array: Any, layout: WaveformLayout | None, index: int
) -> tuple[np.ndarray[Any, Any], Literal["pcm16", "f32"]]:
    """``array`` as little-endian ``[shape=(samples,)]`` or ``[shape=(samples, channels)]``."""

    def refuse(detail: str) -> AcquisitionError:
        return AcquisitionError(detail, clip_index=index, origin=ORIGIN_WAVEFORM)

    if not isinstance(array, np.ndarray):
        raise refuse(
            f"a waveform must be a numpy array, got {type(array).__name__} "
            "(numpy.asarray(samples, dtype=numpy.float32) makes one)"
        )
    if array.dtype == np.int16:
        encoding: Literal["pcm16", "f32"] = "pcm16"
        dtype = "<i2"
    elif array.dtype in (np.float32, np.float64):
        encoding, dtype = "f32", "<f4"
    else:
        raise refuse(f"a waveform's dtype must be float32, float64 or int16, got {array.dtype}")
    if array.ndim == 2:
        if layout is None:
            raise refuse(
                f"a 2-D waveform {array.shape} needs layout='channels_first' for "
                "(channels, samples) or layout='channels_last' for (samples, channels); "
                "several clips go in a list"
            )
        if layout == "channels_first":
            array = array.T
    elif array.ndim != 1:
        raise refuse(
            f"a waveform must be 1-D (samples,) or 2-D, got {array.ndim} dimensions {array.shape}"
        )
    if array.size == 0:
        raise refuse(f"the waveform is empty, shape {array.shape}")
    return np.ascontiguousarray(array, dtype=dtype), encoding
