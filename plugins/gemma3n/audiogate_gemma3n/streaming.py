"""The Gemma 3n streaming stage: resampling and the USM log-mel computed as samples arrive.

:func:`open_feature_stream` returns a :class:`Gemma3nFeatureStream` whose ``finish`` equals
:func:`~audiogate_gemma3n.resample.resample` then :func:`~audiogate_gemma3n.features.
extract_features` of the concatenated samples, bit for bit:

* the resamplers run as streams. :class:`LinearResampleStream`: output ``i`` reads source
  samples ``i·fs // 16000`` and the next, so it is final as soon as both have arrived and
  is computed with the whole clip's float32 operations; only the outputs that clamp to
  the last sample wait for ``finish``. :class:`SincResampleStream`: each output is one
  phase's taps against a window of the source, final once the window has arrived. The
  whole clip computes each phase's outputs as BLAS products of up to 8,192 rows, and
  OpenBLAS's ``sgemv`` sums rows in groups of 4 from the product's first row, the
  remainder and one-row products differently; so the stream computes whole groups of 4
  inside the same 8,192-row products, and the product's last rows at ``finish``, as the
  whole clip groups them. A policy that selects the core's soxr HQ runs it as the
  core's :class:`~audiogate.streaming.stage.SourceResampler` (zero-padded to the plan).
* the log-mel frames: frame ``t`` reads normalized samples ``160·t .. 160·t + 511`` and
  does not depend on the frames around it (:mod:`audiogate_gemma3n.logmel`), so each is
  computed, in blocks of :data:`STREAM_BLOCK_FRAMES`, once its samples have arrived.

Left for ``finish``: the source batch still gathering (under a quarter of a second,
:func:`~audiogate.streaming.stage.batch_frames`), the resampler's last outputs (the
clamped edge, the last sinc windows), the frames whose window reaches past the clip's end
(with the zero padding to a multiple of 128 and the right-padding tail frames), at most
:data:`STREAM_BLOCK_FRAMES` - 1 interior frames, and the range check of the waveform
(a running minimum and maximum; the whole check runs only to raise its error).

Not streamed (``None``: the core accumulates the clip): left padding (the leading zeros
shift the frame grid by the final length), the mlx backend, and resamplers that do not
stream (the core's other than soxr HQ).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.errors import PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ResamplePlan, readonly
from audiogate.streaming.scaffold import (
    BatchedFeatureStream,
    FramedSink,
    IdentityStream,
    SourceStream,
    SourceWindow,
    SoxrStreamAdapter,
    core_source_stream,
)
from audiogate_gemma3n.features import Gemma3nClipFeatures, _check_waveform
from audiogate_gemma3n.geometry import (
    FEATURE_SIZE,
    FRAME_HOP_SAMPLES,
    FRAME_SAMPLES,
    SAMPLE_RATE_HZ,
    feature_frames,
    valid_frames_in_padded_batch,
)
from audiogate_gemma3n.logmel import log_mel_frames
from audiogate_gemma3n.resample import (
    LINEAR,
    SINC,
    linear_output_length,
    sinc_kernel,
    sinc_output_length,
)

if TYPE_CHECKING:
    from audiogate.pipeline.plans import ClipPlan

__all__ = [
    "STREAM_BLOCK_FRAMES",
    "Gemma3nFeatureStream",
    "Gemma3nLogMelStream",
    "IdentityStream",
    "LinearResampleStream",
    "SincResampleStream",
    "SoxrStreamAdapter",
    "open_feature_stream",
    "open_resample_stream",
]

#: Frames computed together while streaming (fewer wait for more samples): the per-call
#: cost of a block is then small next to its FFTs.
STREAM_BLOCK_FRAMES: Final = 32
#: Rows of one phase per product in :func:`~audiogate_gemma3n.resample.sinc_resample`.
_SINC_ROWS_PER_PRODUCT: Final = 8_192
#: Periods up to this many outputs are computed one strided slice per residue (as in
#: :func:`~audiogate_gemma3n.resample.linear_resample`).
_SLICED_PERIOD_MAX: Final = 32
#: OpenBLAS's ``sgemv`` sums the rows of a product in groups of this many.
_SINC_ROW_GROUP: Final = 4


class LinearResampleStream:
    """:func:`~audiogate_gemma3n.resample.linear_resample` as a stream.

    :param in_rate_hz: the source rate (not the output rate).
    :param out_rate_hz: the output rate.
    """

    def __init__(self, *, in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ) -> None:
        if in_rate_hz <= 0 or out_rate_hz <= 0 or in_rate_hz == out_rate_hz:
            raise ValueError(f"no linear resampling from {in_rate_hz} to {out_rate_hz} Hz")
        self._in, self._out = in_rate_hz, out_rate_hz
        self._window = SourceWindow()
        self._next = 0  # the first output not returned yet
        # P outputs advance exactly Q inputs; output k·P + r reads k·Q + left0[r] and the
        # next sample with the fraction frac0[r] (the whole clip's tables).
        g = math.gcd(in_rate_hz, out_rate_hz)
        self._period = (out_rate_hz // g, in_rate_hz // g)
        residues = np.arange(self._period[0], dtype=np.int64) * in_rate_hz
        self._left0 = residues // out_rate_hz
        self._frac0 = (residues % out_rate_hz).astype(np.float32)
        self._frac0 /= np.float32(out_rate_hz)

    @property
    def nbytes(self) -> int:
        return int(self._window.samples.nbytes)

    def output_bound(self, source_frames: int) -> int:
        return linear_output_length(source_frames, in_rate_hz=self._in, out_rate_hz=self._out)

    def _direct(self, first: int, out: npt.NDArray[np.float32], last: int) -> None:
        """Outputs ``first .. first + len(out)`` by the formula, neighbours clamped to
        absolute sample ``last``, with the whole clip's float32 operations (``b - a``,
        times the fraction ``float32(pos % out) / float32(out)``, plus ``a``)."""
        if out.shape[0] == 0:
            return
        pos = np.arange(first, first + out.shape[0], dtype=np.int64) * self._in
        left = pos // self._out
        frac = (pos % self._out).astype(np.float32) / np.float32(self._out)
        x, base = self._window.samples, self._window.base
        a = x[np.minimum(left, last) - base]
        b = x[np.minimum(left + 1, last) - base]
        np.subtract(b, a, out=out)
        np.multiply(out, frac, out=out)
        np.add(out, a, out=out)

    def _periods(self, first_period: int, dest: npt.NDArray[np.float32]) -> None:
        """Whole periods from ``first_period`` on into ``dest`` ``[shape=(rows, P)]``,
        as :func:`~audiogate_gemma3n.resample.linear_resample`'s bulk computes them
        (strided slices per residue, or one gather per block for long periods); every
        sample they read has arrived."""
        period, advance = self._period
        rows = dest.shape[0]
        x = self._window.samples
        origin = first_period * advance - self._window.base
        if period <= _SLICED_PERIOD_MAX:
            span = (rows - 1) * advance + 1
            for r in range(period):
                lo = origin + int(self._left0[r])
                a = x[lo : lo + span : advance]
                b = x[lo + 1 : lo + 1 + span : advance]
                column = dest[:, r]
                np.subtract(b, a, out=column)
                np.multiply(column, self._frac0[r], out=column)
                np.add(column, a, out=column)
            return
        view = np.lib.stride_tricks.as_strided(
            x[origin:], shape=(rows, advance + 1), strides=(advance * x.strides[0], x.strides[0])
        )
        a = view[:, self._left0]
        b = view[:, self._left0 + 1]
        np.subtract(b, a, out=dest)
        np.multiply(dest, self._frac0, out=dest)
        np.add(dest, a, out=dest)

    def _outputs(self, stop: int, last: int) -> npt.NDArray[np.float32]:
        """Outputs ``next .. stop`` (neighbours clamped to absolute sample ``last``)."""
        first = self._next
        out = np.empty(stop - first, dtype=np.float32)
        period, advance = self._period
        k0 = -(-first // period)
        # Whole periods whose every right neighbour is a real sample: the bulk path.
        k1 = max(k0, min(stop // period, last // advance))
        if k1 > k0:
            head = k0 * period - first
            self._direct(first, out[:head], last)
            self._periods(k0, out[head : head + (k1 - k0) * period].reshape(k1 - k0, period))
            self._direct(k1 * period, out[head + (k1 - k0) * period :], last)
        else:
            self._direct(first, out, last)
        self._next = stop
        self._window.drop_before(stop * self._in // self._out)
        return out

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self._window.append(samples)
        received = self._window.stop
        if received < 2:
            return np.empty(0, dtype=np.float32)
        # Output i is final once sample i·in // out + 1 has arrived: i·in < out·(received - 1).
        stop = -(-self._out * (received - 1) // self._in)
        return self._outputs(max(stop, self._next), received - 1)

    def finish(self) -> npt.NDArray[np.float32]:
        n = self._window.stop
        total = linear_output_length(n, in_rate_hz=self._in, out_rate_hz=self._out)
        if total <= self._next:
            return np.empty(0, dtype=np.float32)
        return self._outputs(total, n - 1)


class SincResampleStream:
    """:func:`~audiogate_gemma3n.resample.sinc_resample` (torchaudio's sinc) as a stream.

    Output ``k·out_step + p`` is phase ``p``'s taps against the source zero-padded by
    ``width`` in front, from padded sample ``k·in_step + offsets[p]``. Each phase's rows
    are computed in the whole clip's products (see the module docstring).
    """

    def __init__(self, *, in_rate_hz: int, out_rate_hz: int = SAMPLE_RATE_HZ) -> None:
        if in_rate_hz <= 0 or out_rate_hz <= 0 or in_rate_hz == out_rate_hz:
            raise ValueError(f"no sinc resampling from {in_rate_hz} to {out_rate_hz} Hz")
        self._in, self._out = in_rate_hz, out_rate_hz
        self._kernel = sinc_kernel(in_rate_hz, out_rate_hz)
        k = self._kernel
        # The padded source from absolute padded index ``base`` on; the front zeros first.
        self._window = SourceWindow()
        self._window.append(np.zeros(k.width, dtype=np.float32))
        self._received = 0
        self._rows = np.zeros(k.out_step, dtype=np.int64)  # rows computed per phase
        # Computed outputs not returned yet (the phases finish rows out of order), from
        # absolute output ``emitted`` on.
        self._pending = np.empty(0, dtype=np.float32)
        self._emitted = 0

    @property
    def nbytes(self) -> int:
        return int(self._window.samples.nbytes) + int(self._pending.nbytes)

    def output_bound(self, source_frames: int) -> int:
        return sinc_output_length(source_frames, in_rate_hz=self._in, out_rate_hz=self._out)

    def _rows_in_window(self, phase: int, padded_stop: int) -> int:
        """Rows of ``phase`` whose window lies before padded sample ``padded_stop``."""
        k = self._kernel
        room = padded_stop - int(k.offsets[phase]) - k.taps.shape[1]
        return 0 if room < 0 else room // k.in_step + 1

    def _product(self, phase: int, first: int, stop: int, out: npt.NDArray[np.float32]) -> None:
        """Rows ``first .. stop`` of ``phase`` as one product, into ``out``."""
        k = self._kernel
        band = k.taps.shape[1]
        x = self._window.samples
        start = first * k.in_step + int(k.offsets[phase]) - self._window.base
        view = np.lib.stride_tricks.as_strided(
            x[start:],
            shape=(stop - first, band),
            strides=(k.in_step * x.strides[0], x.strides[0]),
            writeable=False,
        )
        out[:] = view @ k.taps[phase]

    def _run(self, limits: npt.NDArray[np.int64], *, final: bool) -> None:
        """Compute each phase's rows up to ``limits[phase]``; while streaming only whole
        groups of 4 inside a product, at the end the products' own last rows."""
        k = self._kernel
        want = int(((limits - 1) * k.out_step + np.arange(k.out_step)).max(initial=-1)) + 1
        grow = want - self._emitted - self._pending.shape[0]
        if grow > 0:
            self._pending = np.concatenate((self._pending, np.zeros(grow, dtype=np.float32)))
        pending = self._pending
        for phase in range(k.out_step):
            done, limit = int(self._rows[phase]), int(limits[phase])
            while done < limit:
                product_end = (done // _SINC_ROWS_PER_PRODUCT + 1) * _SINC_ROWS_PER_PRODUCT
                stop = min(limit, product_end)
                first = done
                if final:
                    if stop - first == 1 and first % _SINC_ROWS_PER_PRODUCT:
                        # A one-row product sums differently: redo the group before it.
                        first -= _SINC_ROW_GROUP
                else:
                    stop = first + (stop - first) // _SINC_ROW_GROUP * _SINC_ROW_GROUP
                    if stop == first:
                        break
                rows = np.empty(stop - first, dtype=np.float32)
                self._product(phase, first, stop, rows)
                start = phase + first * k.out_step - self._emitted
                # Rows redone for the grouping were returned already (same values).
                skip = max(0, -(start // k.out_step)) if start < 0 else 0
                pending[start + skip * k.out_step :: k.out_step][: stop - first - skip] = rows[
                    skip:
                ]
                done = stop
            self._rows[phase] = done

    def _release(self) -> npt.NDArray[np.float32]:
        """The outputs every phase has computed, in order, and the source they no
        longer need dropped."""
        k = self._kernel
        ready = int((self._rows * k.out_step + np.arange(k.out_step)).min())
        count = ready - self._emitted
        if count <= 0:
            return np.empty(0, dtype=np.float32)
        out = self._pending[:count].copy()
        self._pending = self._pending[count:]
        self._emitted = ready
        # The next rows read from padded sample rows·in_step + offsets on, and a final
        # one-row product redoes the group of 4 before it.
        rows = self._rows
        kept = np.where(rows % _SINC_ROWS_PER_PRODUCT != 0, rows - _SINC_ROW_GROUP, rows)
        first = int((kept * k.in_step + k.offsets).min())
        self._window.drop_before(first)
        return out

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        k = self._kernel
        self._window.append(samples)
        self._received += samples.shape[0]
        # Rows whose window has arrived, and not past the shortest length this clip can
        # have (a longer clip only adds outputs).
        length = self.output_bound(self._received)
        phases = np.arange(k.out_step)
        by_length = np.maximum((length - phases + k.out_step - 1) // k.out_step, 0)
        padded_stop = self._window.stop
        limits = np.array(
            [
                min(self._rows_in_window(p, padded_stop), int(by_length[p]))
                for p in range(k.out_step)
            ],
            dtype=np.int64,
        )
        self._run(np.maximum(limits, self._rows), final=False)
        return self._release()

    def finish(self) -> npt.NDArray[np.float32]:
        k = self._kernel
        length = self.output_bound(self._received)
        phases = np.arange(k.out_step)
        counts = np.maximum((length - phases + k.out_step - 1) // k.out_step, 0)
        # The zeros behind the clip that its last windows read.
        need = (
            int(((counts - 1) * k.in_step + k.offsets).max(initial=0))
            + k.taps.shape[1]
            - self._window.stop
        )
        if need > 0:
            self._window.append(np.zeros(need, dtype=np.float32))
        self._run(counts.astype(np.int64), final=True)
        return self._release()


class Gemma3nLogMelStream(FramedSink):
    """The 16 kHz waveform and its USM log-mel frames, computed as samples arrive.

    :param clip_index: for errors and cancellation.
    :param cancel: polled before every block of frames.
    """

    def __init__(self, *, clip_index: int = 0, cancel: CancelToken = NEVER) -> None:
        super().__init__(width=FEATURE_SIZE, hop_samples=FRAME_HOP_SAMPLES)
        self._clip_index = clip_index
        self._cancel = cancel
        # A sample outside [-1, 1] (or NaN): features wait for finish, which raises.
        self._suspect = False

    def _compute(self, stop: int) -> None:
        """Frames ``next .. stop`` of the (zero-padded) waveform so far."""
        first = self._rows.done
        if stop <= first:
            return
        log_mel_frames(
            self._waveform.view(),
            lead_samples=0,
            first_frame=first,
            stop_frame=stop,
            out=self._rows.grow(stop)[first:stop],
            clip_index=self._clip_index,
            cancel=self._cancel,
        )
        self._rows.done = stop

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Append normalized samples ``[shape=(k,)]``; frame what became complete."""
        if samples.shape[0] == 0:
            return
        self._waveform.extend(samples)
        low, high = samples.min(), samples.max()
        if not (low >= -1.0 and high <= 1.0):  # NaN fails both
            self._suspect = True
        if self._suspect:
            return
        n = len(self._waveform)
        # Frame t reads samples 160·t .. 160·t + 511 (the 513th it unfolds is unused).
        ready = (n - FRAME_SAMPLES) // FRAME_HOP_SAMPLES + 1 if n >= FRAME_SAMPLES else 0
        if ready - self._rows.done >= STREAM_BLOCK_FRAMES:
            self._compute(ready)

    def finish(
        self, *, samples: int, tokens: int
    ) -> tuple[npt.NDArray[np.float32], Gemma3nClipFeatures]:
        """The read-only waveform and the clip's features, right-padded as the whole
        clip's :func:`~audiogate_gemma3n.features.extract_features` makes them.

        :param samples: the planned normalized samples (the waveform's length).
        :param tokens: the planned tokens.
        :raises FeatureError: a sample outside [-1, 1].
        :raises NonFiniteSampleError: a NaN or infinite sample.
        :raises PluginError: the waveform is not ``samples`` long.
        """
        waveform = self._waveform.view()
        if waveform.shape[0] != samples:
            raise PluginError(
                f"gemma3n clip {self._clip_index}: the stream resampled "
                f"{waveform.shape[0]} samples, the plan has {samples}"
            )
        if self._suspect:
            _check_waveform(waveform, self._clip_index)  # raises
        frames = feature_frames(samples)
        total = valid_frames_in_padded_batch(samples)  # the frames and the tail
        self._cancel.check(Checkpoint.FEATURE, self._clip_index)
        self._compute(total)
        computed = readonly(self._rows.take(total))
        features = Gemma3nClipFeatures(
            features=computed[:frames],
            mask=readonly(np.ones(frames, dtype=np.bool_)),
            frames=frames,
            tokens=tokens,
            samples=samples,
            padding_side="right",
            tail=computed[frames:],
            waveform=None,
        )
        return waveform, features


class Gemma3nFeatureStream(BatchedFeatureStream[Gemma3nLogMelStream, Gemma3nClipFeatures]):
    """Gemma 3n's :class:`~audiogate.streaming.stage.FeatureStream`: the core's source
    batches (:class:`~audiogate.streaming.scaffold.BatchedFeatureStream`) through the
    streaming resampler into :class:`Gemma3nLogMelStream`.

    :param resampler: the clip's resampler as a stream.
    :param probe: the resample plan the stream runs (probed at any length, to 16 kHz).
    """

    family = "gemma3n"

    def __init__(
        self,
        resampler: SourceStream,
        *,
        probe: ResamplePlan,
        clip_index: int = 0,
        cancel: CancelToken = NEVER,
    ) -> None:
        super().__init__(
            resampler,
            Gemma3nLogMelStream(clip_index=clip_index, cancel=cancel),
            probe=probe,
            clip_index=clip_index,
            cancel=cancel,
        )

    def features(
        self, sink: Gemma3nLogMelStream, clip_plan: ClipPlan
    ) -> tuple[npt.NDArray[np.float32], Gemma3nClipFeatures]:
        """The 16 kHz waveform and the right-padded features of the planned clip."""
        return sink.finish(
            samples=clip_plan.resample.output_samples, tokens=clip_plan.features.tokens
        )


def open_resample_stream(resample: ResamplePlan) -> SourceStream | None:
    """The streaming form of a resample plan, or ``None`` (an algorithm it cannot run)."""
    if resample.algorithm == LINEAR:
        return LinearResampleStream(in_rate_hz=resample.source_rate_hz)
    if resample.algorithm == SINC:
        return SincResampleStream(in_rate_hz=resample.source_rate_hz)
    return core_source_stream(resample)


def open_feature_stream(
    policy: AudioPolicy,
    *,
    source_rate_hz: int,
    resample: ResamplePlan,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> Gemma3nFeatureStream | None:
    """The clip's feature stream, or ``None`` (the core accumulates the clip): another
    feature backend than numpy, left padding, or a resampler this plugin does not run.

    :param resample: the family's plan probed for ``source_rate_hz``.
    """
    if policy.feature_backend != "numpy" or policy.options.get("padding_side", "right") != (
        "right"
    ):
        return None
    if resample.output_rate_hz != SAMPLE_RATE_HZ or resample.source_rate_hz != source_rate_hz:
        return None
    resampler = open_resample_stream(resample)
    if resampler is None:
        return None
    return Gemma3nFeatureStream(
        resampler,
        probe=resample,
        clip_index=clip_index,
        cancel=cancel,
    )
