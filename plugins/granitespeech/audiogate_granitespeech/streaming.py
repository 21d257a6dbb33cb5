"""The Granite Speech streaming stage: the log-mel computed as a streamed clip arrives.

The source is resampled as one stream (soxr HQ, :class:`~audiogate.streaming.stage.
SourceResampler`, or the identity at 16 kHz) in the core's source batches
(:class:`~audiogate.streaming.scaffold.BatchedFeatureStream`, which also checks the plan,
zero-pads to librosa's length and keeps the byte accounting). Every frame whose 400-sample
window lies inside the samples received so far (``160 t + 200 <= n``, frames 0 and 1
through the reflection of samples 1..200, the others straight from the samples,
:func:`~audiogate_granitespeech.logmel.interior_block`) is computed with the whole-clip
kernel once :data:`STREAM_BLOCK_FRAMES` are ready (every source batch), with the running
maximum, into one buffer in the features'
layout (two frames a row); each block is clamped to the running maximum minus 8 when one
of its values is under it, and scaled to ``x / 4 + 1``. Those frames do not depend on the
clip's final length.

What remains for ``finish()``: the resampler's tail and librosa's zero padding to the
planned length, the frames the last samples complete, the last frames (their windows
read the reflected end of the clip, at most two) clamped and scaled with the final maximum,
and the re-clamp of the streamed blocks the final maximum changes (a value under the
final floor, clamped with a lower one: the scaling is monotone, so the clamp commutes
with it); the buffer is handed over without a copy. Each frame goes through the same
float32 / float64 operations as in
:func:`~audiogate_granitespeech.logmel.granite_log_mel` and frames are independent, so
the result is bit-identical to the whole clip's (``tests/streaming``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import CancelToken, Checkpoint
from audiogate.errors import PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan, readonly
from audiogate.streaming.buffer import GrowingArray
from audiogate.streaming.scaffold import (
    BatchedFeatureStream,
    FrameRows,
    SourceStream,
    core_source_stream,
)
from audiogate_granitespeech.features import GraniteSpeechClipFeatures
from audiogate_granitespeech.geometry import (
    FEATURE_DIM,
    HALF_WINDOW,
    HOP,
    N_MELS,
    SAMPLE_RATE_HZ,
    WIN_LENGTH,
    granite_geometry,
    interior_frames,
)
from audiogate_granitespeech.logmel import (
    BLOCK_FRAMES,
    HEAD_FRAMES,
    batch_frames,
    clamp_and_scale,
    interior_block,
    log_mel_block,
)

if TYPE_CHECKING:
    from audiogate.pipeline.plans import ClipPlan

__all__ = [
    "STREAM_BLOCK_FRAMES",
    "GraniteFeatureStream",
    "GraniteLogMelSink",
    "open_feature_stream",
]

#: Interior frames are computed once this many are ready (0.16 s of audio): every source
#: batch (half a second) computes its frames, so ``finish()`` has only the clip's end left.
STREAM_BLOCK_FRAMES: Final = 16


def _scaled(value: np.float32) -> np.float32:
    """``value / 4 + 1`` in float32, as :func:`~audiogate_granitespeech.logmel.
    clamp_and_scale` computes it (float32 scalar operations round as the array's)."""
    return np.float32(np.float32(value * np.float32(0.25)) + np.float32(1.0))


def _end_frames(
    waveform: npt.NDArray[np.float32], first: int, out: npt.NDArray[np.float32]
) -> bool:
    """The frames ``first ..`` (``len(out)`` of them) whose windows read the clip's
    reflected end, into ``out``: the samples copied into one small block (no index
    arrays, no block pool), the whole clip's kernel on it. ``False`` (nothing written)
    where a window also reads the clip's start or reflects past it: the caller takes
    :func:`~audiogate_granitespeech.logmel.batch_frames`."""
    count, samples = out.shape[0], waveform.shape[0]
    start = HOP * first - HALF_WINDOW
    stop = HOP * (first + count - 1) + HALF_WINDOW  # one past the last sample read
    mirror = 2 * (samples - 1) - (stop - 1)  # the reflected end's lowest source index
    if first < HEAD_FRAMES or start < 0 or mirror < 0 or stop <= samples or count > BLOCK_FRAMES:
        return False
    segment = np.empty(stop - start, dtype=np.float32)
    inside = samples - start
    segment[:inside] = waveform[start:]
    segment[inside:] = waveform[mirror : samples - 1][::-1]  # x[N - 1 + k] = x[N - 1 - k]
    frames = np.empty((count, WIN_LENGTH), dtype=np.float32)
    for index in range(count):
        frames[index] = segment[HOP * index : HOP * index + WIN_LENGTH]
    log_mel_block(frames, out)
    return True


class GraniteLogMelSink:
    """The 16 kHz waveform and its interior log-mel frames, computed as it arrives (the
    :class:`~audiogate.streaming.scaffold.FeatureSink` of :class:`GraniteFeatureStream`).

    The frames are written into one buffer in the features' layout (a frame is 80
    values, a row two frames) and each block is clamped and scaled as it is made:
    clamped to the running maximum minus 8 when one of its values is under it, then
    ``x / 4 + 1``. Since that scaling is monotone, ``max(g(max(x, a)), g(b)) ==
    g(max(x, b))`` for ``b >= a``: ``finish`` re-clamps, in the scaled domain, only the
    blocks with a value under the final floor that were clamped with a lower one.

    :param clip_index: zero-based clip index (cancellation and errors).
    :param cancel: polled before every computed block.
    """

    def __init__(self, *, clip_index: int, cancel: CancelToken) -> None:
        self._samples = GrowingArray(np.float32)
        self._rows = FrameRows(N_MELS)
        # Per streamed block: (first frame, frames, floor it was clamped with, its
        # smallest unclamped value), the float32 values as Python floats (exact).
        self._blocks: list[tuple[int, int, float, float]] = []
        self._peak = np.float32(-np.inf)
        self._clip_index = clip_index
        self._cancel = cancel
        #: Frames re-clamped by :meth:`finish` (0 when no block needed it).
        self.reclamped_frames = 0

    @property
    def samples(self) -> int:
        """16 kHz samples so far."""
        return len(self._samples)

    @property
    def nbytes(self) -> int:
        """The waveform's buffer and the frames'."""
        return self._samples.nbytes + self._rows.nbytes

    def planned_nbytes(self, samples: int) -> int:
        """:attr:`nbytes` once the waveform holds ``samples`` samples: the buffers'
        capacities (one frame of 80 float32 per 160 samples, and one more)."""
        return self._samples.capacity_for(samples) * 4 + self._rows.planned_nbytes(
            samples // HOP + 1
        )

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Append 16 kHz samples ``[shape=(k,)]``; compute every complete block of
        interior frames now available."""
        if samples.shape[0]:
            self._samples.extend(samples)
            self._advance(STREAM_BLOCK_FRAMES)

    def _advance(self, minimum: int) -> None:
        waveform = self._samples.view()
        ready = interior_frames(waveform.shape[0])
        first = self._rows.done
        if ready - first < minimum:
            return
        self._cancel.check(Checkpoint.FEATURE, self._clip_index)
        block = self._rows.grow(ready)[first:ready]
        head = min(max(HEAD_FRAMES - first, 0), ready - first)
        if head:  # frames 0 and 1 read the reflection of samples 1..200
            batch_frames(
                waveform,
                total_samples=waveform.shape[0],
                first=first,
                stop=first + head,
                clip_index=self._clip_index,
                cancel=self._cancel,
                out=block[:head],
            )
        if head < block.shape[0]:  # the others read the samples themselves
            interior_block(waveform, first + head, block[head:])
        self._rows.done = ready
        self._peak = max(self._peak, np.float32(block.max()))
        floor = np.float32(self._peak - np.float32(8.0))
        smallest = np.float32(block.min())
        used = np.float32(-np.inf)
        if not smallest >= floor:  # NaN too
            np.maximum(block, floor, out=block)
            used = floor
        block *= np.float32(0.25)
        block += np.float32(1.0)
        self._blocks.append((first, ready - first, float(used), float(smallest)))

    def finish(
        self, clip_plan: ClipPlan
    ) -> tuple[npt.NDArray[np.float32], GraniteSpeechClipFeatures]:
        """The 16 kHz waveform and the features of the whole clip as ``clip_plan`` plans,
        once every sample (librosa's zero padding included) was pushed.

        :raises PluginError: the waveform or its feature shape is not the plan's.
        """
        resample = clip_plan.resample
        if len(self._samples) != resample.output_samples:
            raise PluginError(
                f"the resampler streamed {len(self._samples)} samples, planned "
                f"{resample.output_samples}"
            )
        waveform = self._samples.view()
        geometry = granite_geometry(waveform.shape[0])
        if geometry.feature_shape != tuple(clip_plan.features.feature_shape):
            raise PluginError(
                f"{waveform.shape[0]} samples give {geometry.feature_shape}, planned "
                f"{clip_plan.features.feature_shape}"
            )
        # The interior frames the last pushes left, then the frames of the clip's end.
        self._advance(1)
        first = self._rows.done
        interior = geometry.interior
        if first != interior:
            raise PluginError(f"streamed {first} interior frames, the clip has {interior}")
        interior_peak = float(self._peak) if interior else float("-inf")
        peak = self._peak
        tail = self._rows.grow(geometry.frames)[first : geometry.frames]
        if first < geometry.frames:
            self._cancel.check(Checkpoint.FEATURE, self._clip_index)
            if not _end_frames(waveform, first, tail):
                batch_frames(
                    waveform,
                    total_samples=geometry.samples,
                    first=first,
                    stop=geometry.frames,
                    clip_index=self._clip_index,
                    cancel=self._cancel,
                    out=tail,
                )
            peak = max(peak, np.float32(tail.max()))
        floor = np.float32(peak - np.float32(8.0))
        clamp_and_scale(tail, floor)
        # The global step on what streamed: only the blocks it changes.
        scaled = _scaled(floor)
        logs = self._rows.take(geometry.frames)
        self.reclamped_frames = 0
        bound = float(floor)  # (exact: the blocks' floats compare as their float32s)
        for start, count, used, smallest in self._blocks:
            if used < bound and not smallest >= bound:
                part = logs[start : start + count]
                np.maximum(part, scaled, out=part)
                self.reclamped_frames += count
        self._blocks.clear()
        flat = logs.reshape(-1)
        features = flat[: geometry.rows * FEATURE_DIM].reshape(geometry.rows, FEATURE_DIM)
        readonly(flat)
        result = GraniteSpeechClipFeatures(
            features=readonly(features),
            mask=None,
            frames=geometry.rows,
            tokens=geometry.tokens,
            samples=geometry.samples,
            peak=float(peak),
            interior_peak=interior_peak,
            waveform=waveform,
        )
        return waveform, result


class GraniteFeatureStream(BatchedFeatureStream[GraniteLogMelSink, GraniteSpeechClipFeatures]):
    """One clip's Granite Speech features, fed source samples as they arrive: the core's
    source batches (:class:`~audiogate.streaming.scaffold.BatchedFeatureStream`) through
    the streaming resampler into :class:`GraniteLogMelSink`.

    :param resampler: the clip's streaming resampler (to 16 kHz).
    :param probe: the resample plan the stream runs (probed at any length).
    :param clip_index: zero-based clip index (cancellation and errors).
    :param cancel: polled before every batch and every computed block.
    """

    family = "granitespeech"

    def __init__(
        self, resampler: SourceStream, *, probe: ResamplePlan, clip_index: int, cancel: CancelToken
    ) -> None:
        super().__init__(
            resampler,
            GraniteLogMelSink(clip_index=clip_index, cancel=cancel),
            probe=probe,
            clip_index=clip_index,
            cancel=cancel,
        )

    def features(
        self, sink: GraniteLogMelSink, clip_plan: ClipPlan
    ) -> tuple[npt.NDArray[np.float32], GraniteSpeechClipFeatures]:
        """The waveform and the clamped, stacked log-mel of the planned clip."""
        return sink.finish(clip_plan)


def open_feature_stream(
    policy: AudioPolicy, *, resample: ResamplePlan, clip_index: int, cancel: CancelToken
) -> GraniteFeatureStream | None:
    """The clip's feature stream (``None``: a resampler that does not stream or another
    rate than 16 kHz: the accumulating frontend takes the clip)."""
    if resample.output_rate_hz != SAMPLE_RATE_HZ:
        return None
    resampler = core_source_stream(resample)
    if resampler is None:
        return None
    return GraniteFeatureStream(resampler, probe=resample, clip_index=clip_index, cancel=cancel)
