"""The Phi-4 MM streaming stage: resampling and the SpeechLib log-mel computed as samples
arrive.

:func:`open_feature_stream` returns a :class:`Phi4MMFeatureStream` whose ``finish`` equals
:func:`~audiogate_phi4mm.resample.resample` then :func:`~audiogate_phi4mm.features.
extract_features` of the concatenated samples, bit for bit:

* the resamplers run as streams. :class:`DecimateStream` (the integer-ratio rule): the
  whole clip computes blocks of :data:`~audiogate_phi4mm.resample.BLOCK_OUTPUTS` outputs
  as float64 products of up to ``chunk`` rows of 20 outputs; the stream runs each of those
  products, with the same rows and the same shape, once the source it reads has arrived.
  :class:`ExactResampleStream` (``scipy_polyphase_exact``): SciPy's ``upfirdn`` on a
  window starting at a multiple of ``fs/g`` gives each output the whole clip's float32 sum
  (:func:`~audiogate_phi4mm.resample.resample_exact` relies on the same), so any output
  whose inputs have arrived is computed. The identity and relabelled rates pass the
  samples through; the native variant's soxr HQ runs as the core's
  :class:`~audiogate.streaming.stage.SourceResampler`, zero-padded to the plan at the end.
* the log-mel frames: frame ``t`` reads samples ``t·hop .. t·hop + window - 1``. Its
  power spectrum (pre-emphasis, window, FFT, ``|S|²``: elementwise steps and one FFT
  per row) depends on nothing else, so it is computed as soon as those samples have
  arrived, into the stream's buffer of one block's spectra. The mel projection is not:
  the whole clip projects blocks of :data:`~audiogate_phi4mm.logmel.BLOCK_FRAMES` (256)
  frames from frame 0 with BLAS products, whose sums depend on the product's shape and
  on a row's place in it (OpenBLAS's kernels treat the rows past the last multiple of
  their unroll apart, and which rows those are differs between CPUs: with AVX-512 a row
  of a 64-row product sums differently from the same row of a 198-row one; without it
  only one-row products did). So the stream projects exactly the whole clip's blocks,
  each once its last spectrum is in, and the last, incomplete one at ``finish``: the
  same products with the same shapes, on any CPU.

Left for ``finish``: the source batch still gathering (under half a second,
:func:`~audiogate.streaming.stage.batch_frames`), the resampler's last outputs (the
decimator's last products, whose windows reach past the clip's end), the spectra of
the frames they complete (fewer than :data:`STREAM_SPECTRA_FRAMES` otherwise), and the
mel projection and log of the clip's last block (its spectra were computed as they
came: under 256 rows of small products).

Not streamed (``None``: the core accumulates the clip): the mlx backend, a rate the
frontend refuses, and resamplers of other plugins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.dsp.scratch import thread_scratch
from audiogate.errors import AudioGateError, PluginError
from audiogate.policy import AudioPolicy
from audiogate.records import ClipFeatures, ResamplePlan, readonly
from audiogate.streaming.scaffold import (
    BatchedFeatureStream,
    FramedSink,
    IdentityStream,
    SourceStream,
    SourceWindow,
    SoxrStreamAdapter,
    core_source_stream,
)
from audiogate_phi4mm.geometry import Frontend, frame_count, frontend_for
from audiogate_phi4mm.logmel import (
    BLOCK_FRAMES,
    _bank_bands,
    _scaled_window,
    _Scratch,
    mel_rows,
    power_rows,
)
from audiogate_phi4mm.melbank import FFT_BINS, MEL_FILTERS, BankName
from audiogate_phi4mm.resample import (
    ALGORITHM,
    BLOCK_OUTPUTS,
    EXACT,
    GROUP_OUTPUTS,
    HALF_LENGTH_PER_FACTOR,
    PRODUCT_MULTIPLY_ADDS,
    _tap_matrices,
    exact_filter,
)

if TYPE_CHECKING:
    from audiogate.pipeline.plans import ClipPlan

__all__ = [
    "STREAM_BLOCK_FRAMES",
    "STREAM_SPECTRA_FRAMES",
    "DecimateStream",
    "ExactResampleStream",
    "IdentityStream",
    "Phi4MMFeatureStream",
    "Phi4MMLogMelStream",
    "SoxrStreamAdapter",
    "open_feature_stream",
    "open_resample_stream",
]

#: Frames whose mel products run together while streaming: the whole clip's blocks
#: (see above), so that every mel product has the whole clip's shape.
STREAM_BLOCK_FRAMES: Final = BLOCK_FRAMES
#: Spectra are computed once this many frames are ready (0.16 s at 16 kHz; every source
#: batch, half a second, computes its frames').
STREAM_SPECTRA_FRAMES: Final = 16


class DecimateStream:
    """:func:`~audiogate_phi4mm.resample.decimate` (``resample_poly(x, 1, down)``) as a
    stream, product by product as the whole clip computes them.

    :param down: the integer factor, 2 to 12.
    """

    def __init__(self, *, down: int) -> None:
        if not down >= 2:
            raise ValueError(f"down must be at least 2, got {down}")
        self._down = down
        self._main, self._tail = _tap_matrices(down)
        self._half = HALF_LENGTH_PER_FACTOR * down
        self._span = GROUP_OUTPUTS * down
        self._chunk = max(1, PRODUCT_MULTIPLY_ADDS // (GROUP_OUTPUTS * self._span))
        self._block_rows = -(-BLOCK_OUTPUTS // GROUP_OUTPUTS)
        self._window = SourceWindow()
        self._block = 0  # the next product: block and first row
        self._top = 0

    @property
    def nbytes(self) -> int:
        return int(self._window.samples.nbytes)

    def output_bound(self, source_frames: int) -> int:
        return -(-source_frames // self._down)

    def _origin(self, block: int, top: int) -> int:
        """Absolute source index of row ``top`` of ``block``'s buffer (negative: zeros)."""
        return block * BLOCK_OUTPUTS * self._down - self._half + top * self._span

    def _product(
        self, block: int, top: int, bottom: int, count: int, stop: int
    ) -> npt.NDArray[np.float32]:
        """Rows ``top .. bottom`` of ``block`` (``count`` outputs in the block), the
        source zero from ``stop`` on: the whole clip's two products and their sum."""
        rows = bottom - top
        grid = self._window.span(self._origin(block, top), (rows + 1) * self._span, stop).reshape(
            rows + 1, self._span
        )
        result = np.empty((rows, GROUP_OUTPUTS), dtype=np.float64)
        carry = np.empty((rows, GROUP_OUTPUTS), dtype=np.float64)
        np.matmul(grid[:rows], self._main, out=result)
        np.matmul(grid[1:, : self._tail.shape[0]], self._tail, out=carry)
        result += carry
        outputs = min(bottom * GROUP_OUTPUTS, count) - top * GROUP_OUTPUTS
        return result.reshape(-1)[:outputs].astype(np.float32)

    def _advance(self, bottom: int, rows: int) -> None:
        self._top = bottom
        if bottom >= rows:
            self._block, self._top = self._block + 1, 0
        self._window.drop_before(self._origin(self._block, self._top))

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self._window.append(samples)
        received = self._window.stop
        parts: list[npt.NDArray[np.float32]] = []
        while True:
            bottom = min(self._top + self._chunk, self._block_rows)
            # A product whose rows' windows have all arrived belongs to a block that is
            # full in the whole clip too (its windows end past the block's last output).
            if self._origin(self._block, bottom + 1) > received:
                break
            parts.append(self._product(self._block, self._top, bottom, BLOCK_OUTPUTS, received))
            self._advance(bottom, self._block_rows)
        if not parts:
            return np.empty(0, dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def finish(self) -> npt.NDArray[np.float32]:
        n = self._window.stop
        total = self.output_bound(n)
        parts: list[npt.NDArray[np.float32]] = []
        while self._block * BLOCK_OUTPUTS < total:
            count = min(BLOCK_OUTPUTS, total - self._block * BLOCK_OUTPUTS)
            rows = -(-count // GROUP_OUTPUTS)
            bottom = min(self._top + self._chunk, rows)
            parts.append(self._product(self._block, self._top, bottom, count, n))
            self._advance(bottom, rows)
        if not parts:
            return np.empty(0, dtype=np.float32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


class ExactResampleStream:
    """:func:`~audiogate_phi4mm.resample.resample_exact` (``resample_poly(x, up, down)``
    in float32) as a stream.

    :param up: the ratio's numerator; ``down``: its denominator (coprime).
    """

    def __init__(self, *, up: int, down: int) -> None:
        if up < 1 or down < 1:
            raise ValueError(f"up and down must be >= 1, got {up} and {down}")
        self._up, self._down = up, down
        _, self._pre_remove = exact_filter(up, down, 0)
        self._window = SourceWindow()
        self._next = 0  # outputs returned

    @property
    def nbytes(self) -> int:
        return int(self._window.samples.nbytes)

    def output_bound(self, source_frames: int) -> int:
        return -(-source_frames * self._up // self._down)

    def _outputs(self, stop: int, n: int) -> npt.NDArray[np.float32]:
        """Outputs ``next .. stop`` of a clip of (at least) ``n`` samples, as
        :func:`~audiogate_phi4mm.resample.resample_exact` computes a block."""
        from scipy.signal import upfirdn

        up, down, pre = self._up, self._down, self._pre_remove
        h, _ = exact_filter(up, down, n)
        taps = h.shape[0]
        first = self._next
        low = max(0, -(-((first + pre) * down - taps + 1) // up))
        start = low // down * down
        end = min(n, (stop - 1 + pre) * down // up + 1)
        shift = start * up // down
        x = self._window.samples
        window = upfirdn(h, x[start - self._window.base : end - self._window.base], up, down)
        out = np.asarray(window[first + pre - shift : stop + pre - shift], dtype=np.float32)
        self._next = stop
        # The next window starts at a multiple of down before its first input; a longer
        # clip's filter has a few more (zero) taps at its end, so keep a margin.
        next_low = -(-((stop + pre) * down - taps + 1) // up) - down - 1
        self._window.drop_before(max(0, next_low) // down * down)
        return out

    def push(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self._window.append(samples)
        received = self._window.stop
        # Output m reads inputs up to (m + pre_remove)·down // up.
        stop = min(
            (received * self._up - 1) // self._down + 1 - self._pre_remove,
            self.output_bound(received),
        )
        if stop <= self._next:
            return np.empty(0, dtype=np.float32)
        return self._outputs(stop, received)

    def finish(self) -> npt.NDArray[np.float32]:
        n = self._window.stop
        total = self.output_bound(n)
        if total <= self._next:
            return np.empty(0, dtype=np.float32)
        return self._outputs(total, n)


class Phi4MMLogMelStream(FramedSink):
    """The normalized waveform and its SpeechLib log-mel frames, computed as it arrives.

    A frame's power spectrum depends only on its samples, so each is computed as soon as
    they have arrived (at least :data:`STREAM_SPECTRA_FRAMES` at a time), into the
    stream's buffer of one block's spectra; the mel projection (BLAS products, see the
    module) runs on the whole clip's blocks of :data:`STREAM_BLOCK_FRAMES` rows, each
    once its last spectrum is in, and on the clip's last block at ``finish``.

    :param frontend: the framing of the effective rate.
    :param bank: the mel bank (``"speechlib"``, or ``"native"`` for the native variant).
    """

    def __init__(
        self,
        *,
        frontend: Frontend,
        bank: BankName,
        clip_index: int = 0,
        cancel: CancelToken = NEVER,
    ) -> None:
        super().__init__(width=MEL_FILTERS, hop_samples=frontend.hop_samples)
        self._frontend = frontend
        self._bands = _bank_bands(bank)
        self._window_weights = _scaled_window(frontend.window_samples)
        self._clip_index = clip_index
        self._cancel = cancel
        # The power spectra of the current block's frames (the columns past the kept
        # bins stay zero, as in the whole clip's scratch); frames 0 .. spectra are done.
        self._power = np.zeros((STREAM_BLOCK_FRAMES, FFT_BINS), dtype=np.float32)
        self._spectra = 0

    @property
    def nbytes(self) -> int:
        """The waveform's, the rows' and the block's spectra's buffers."""
        return super().nbytes + int(self._power.nbytes)

    def planned_nbytes(self, samples: int) -> int:
        """:attr:`nbytes` once the waveform holds ``samples`` samples (a bound)."""
        return super().planned_nbytes(samples) + int(self._power.nbytes)

    def _scratch(self) -> _Scratch:
        frontend = self._frontend
        return thread_scratch(("phi4mm.log_mel", frontend), lambda: _Scratch(frontend))

    def _compute(self, stop: int) -> None:
        """The power spectra of frames ``spectra .. stop``, and the log-mel of every
        block they complete."""
        frontend = self._frontend
        hop, win = frontend.hop_samples, frontend.window_samples
        wave = self._waveform.view()
        scratch = self._scratch()
        while self._spectra < stop:
            self._cancel.check(Checkpoint.FEATURE, self._clip_index)
            lo = self._spectra
            block = lo - lo % STREAM_BLOCK_FRAMES
            hi = min(stop, block + STREAM_BLOCK_FRAMES)
            origin = lo * hop
            power_rows(
                wave[origin : origin + (hi - lo - 1) * hop + win],
                frontend=frontend,
                window=self._window_weights,
                scratch=scratch,
                out=self._power[lo - block : hi - block],
            )
            self._spectra = hi
            if hi - block == STREAM_BLOCK_FRAMES:
                self._mel(block, hi, scratch)

    def _mel(self, lo: int, hi: int, scratch: _Scratch) -> None:
        """The log-mel of the block of frames ``lo .. hi`` (its spectra are in)."""
        rows = self._rows.grow(hi)
        mel_rows(self._power[: hi - lo], bands=self._bands, scratch=scratch, out=rows[lo:hi])
        self._rows.done = hi

    def push(self, samples: npt.NDArray[np.float32]) -> None:
        """Append samples ``[shape=(k,)]``; compute the spectra of the frames complete."""
        if samples.shape[0] == 0:
            return
        self._waveform.extend(samples)
        ready = frame_count(len(self._waveform), self._frontend)
        if ready - self._spectra >= STREAM_SPECTRA_FRAMES:
            self._compute(ready)

    def finish(
        self, *, samples: int, frames: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """The read-only waveform and features ``[shape=(frames, 80)]``.

        :raises PluginError: the waveform does not give ``frames`` frames.
        """
        waveform = self._waveform.view()
        if waveform.shape[0] != samples or frame_count(samples, self._frontend) != frames:
            raise PluginError(
                f"phi4mm clip {self._clip_index}: the stream resampled {waveform.shape[0]} "
                f"samples, the plan has {samples} samples and {frames} frames"
            )
        self._compute(frames)
        if self._rows.done < frames:  # the clip's last, incomplete block
            self._cancel.check(Checkpoint.FEATURE, self._clip_index)
            self._mel(self._rows.done, frames, self._scratch())
        features = self._rows.take(frames)
        self._power = np.empty((0, FFT_BINS), dtype=np.float32)
        return waveform, readonly(features)


class Phi4MMFeatureStream(BatchedFeatureStream[Phi4MMLogMelStream, ClipFeatures]):
    """Phi-4 MM's :class:`~audiogate.streaming.stage.FeatureStream`: the core's source
    batches (:class:`~audiogate.streaming.scaffold.BatchedFeatureStream`) through the
    streaming resampler into :class:`Phi4MMLogMelStream`.

    :param resampler: the clip's resampler as a stream.
    :param probe: the resample plan the stream runs (probed at any length).
    """

    family = "phi4mm"
    plan_detail_keys = ("up", "down")

    def __init__(
        self,
        resampler: SourceStream,
        *,
        probe: ResamplePlan,
        frontend: Frontend,
        bank: BankName,
        clip_index: int = 0,
        cancel: CancelToken = NEVER,
    ) -> None:
        super().__init__(
            resampler,
            Phi4MMLogMelStream(frontend=frontend, bank=bank, clip_index=clip_index, cancel=cancel),
            probe=probe,
            clip_index=clip_index,
            cancel=cancel,
        )

    def features(
        self, sink: Phi4MMLogMelStream, clip_plan: ClipPlan
    ) -> tuple[npt.NDArray[np.float32], ClipFeatures]:
        """The waveform and the SpeechLib log-mel of the planned clip."""
        plan = clip_plan.features
        waveform, features = sink.finish(
            samples=clip_plan.resample.output_samples, frames=plan.frames
        )
        return waveform, ClipFeatures(features=features, frames=plan.frames, tokens=plan.tokens)


def open_resample_stream(resample: ResamplePlan) -> SourceStream | None:
    """The streaming form of a resample plan, or ``None`` (an algorithm it cannot run)."""
    if resample.algorithm == ALGORITHM:
        return DecimateStream(down=int(resample.detail["down"]))
    if resample.algorithm == EXACT:
        return ExactResampleStream(up=int(resample.detail["up"]), down=int(resample.detail["down"]))
    return core_source_stream(resample)


def open_feature_stream(
    policy: AudioPolicy,
    *,
    source_rate_hz: int,
    resample: ResamplePlan,
    clip_index: int = 0,
    cancel: CancelToken = NEVER,
) -> Phi4MMFeatureStream | None:
    """The clip's feature stream, or ``None`` (the core accumulates the clip): another
    feature backend than numpy, an effective rate the frontend refuses, or a resampler
    this plugin does not run.

    :param resample: the family's plan probed for ``source_rate_hz``.
    """
    if policy.feature_backend != "numpy" or resample.source_rate_hz != source_rate_hz:
        return None
    try:
        frontend = frontend_for(policy, resample.output_rate_hz, clip_index=clip_index)
    except AudioGateError:
        return None  # the whole clip's plan refuses it, with its error
    resampler = open_resample_stream(resample)
    if resampler is None:
        return None
    return Phi4MMFeatureStream(
        resampler,
        probe=resample,
        frontend=frontend,
        bank="native" if policy.variant == "native" else "speechlib",
        clip_index=clip_index,
        cancel=cancel,
    )
