"""Encoded test clips made in-process with PyAV (FFmpeg's encoders) and soundfile.

Only for tests and benchmarks: the corpus of real files made by real encoders lives in
``tests/data/audio``. Every function returns the encoded bytes of a deterministic signal.
"""

from __future__ import annotations

import io
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["COMPRESSED", "encode", "tone"]

#: format name → (PyAV container, PyAV codec); ``aiff`` is written by soundfile.
COMPRESSED: Final = {
    "flac": ("flac", "flac"),
    "mp3": ("mp3", "libmp3lame"),
    "ogg": ("ogg", "libopus"),
    "vorbis": ("ogg", "vorbis"),
    "webm": ("webm", "libopus"),
    "m4a": ("ipod", "aac"),
    "aiff": ("aiff", "pcm_s16be"),
}


def tone(
    *, rate_hz: int, seconds: float, channels: int = 1, freq_hz: float = 440.0
) -> npt.NDArray[np.float32]:
    """``[shape=(frames, channels)]`` a 0.5-amplitude sine per channel (freq × channel)."""
    frames = round(rate_hz * seconds)
    t = np.arange(frames, dtype=np.float64) / rate_hz
    cols = [0.5 * np.sin(2 * np.pi * freq_hz * (c + 1) * t) for c in range(channels)]
    return np.stack(cols, axis=1).astype(np.float32)


def encode(fmt: str, samples: npt.NDArray[np.float32], *, rate_hz: int) -> bytes:
    """Encode ``[shape=(frames, channels)]`` float samples as ``fmt`` (a :data:`COMPRESSED` key)."""
    import av

    container_name, codec_name = COMPRESSED[fmt]
    channels = samples.shape[1]
    buf = io.BytesIO()
    with av.open(buf, "w", format=container_name) as out:
        stream = out.add_stream(codec_name, rate=rate_hz)
        stream.layout = {1: "mono", 2: "stereo", 6: "5.1"}[channels]
        if codec_name == "vorbis":
            stream.codec_context.options = {"strict": "experimental"}
        sample_fmt = stream.codec_context.format.name
        frame_size = stream.codec_context.frame_size or 1024
        for start in range(0, samples.shape[0], frame_size):
            chunk = np.ascontiguousarray(samples[start : start + frame_size])
            if sample_fmt.endswith("p"):
                frame = av.AudioFrame.from_ndarray(
                    np.ascontiguousarray(chunk.T), format="fltp", layout=stream.layout.name
                )
            else:
                frame = av.AudioFrame.from_ndarray(
                    chunk.reshape(1, -1), format="flt", layout=stream.layout.name
                )
            frame.sample_rate = rate_hz
            frame.pts = start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()
