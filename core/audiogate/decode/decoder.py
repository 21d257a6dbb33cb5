"""The decode stage: :func:`inspect` (header only) and :func:`decode` (samples).

``inspect`` is the preflight: it reads the header (or the raw declaration), applies the
per-clip policy and returns a :class:`~audiogate.decode.ClipGeometry` without touching or
copying sample data and without allocating in proportion to any declared size.
``decode`` turns the samples that geometry describes into one read-only float32 mono
waveform, block by block, into a single preallocated array.

For any input bytes, both raise only audiogate errors. Every ``DecodeError`` carries a
stable ``code``:

``buffer_not_contiguous``
    a ``memoryview`` that is not C-contiguous.
``too_short``
    fewer than 12 bytes (no room for the RIFF/WAVE header).
``not_riff_wave``
    bytes 0..4 are not ``RIFF`` or bytes 8..12 are not ``WAVE``.
``riff_size_mismatch``
    the RIFF size field + 8 is not the buffer length.
``too_many_chunks``
    more than 256 chunks after the RIFF header.
``truncated_chunk_header``
    fewer than 8 bytes left where a chunk header should start.
``chunk_past_end``
    a chunk's declared size runs past the end of the buffer (never clamped;
    ``0xFFFFFFFF`` is not a streaming sentinel).
``missing_pad_byte``
    an odd-sized chunk ends the buffer without its pad byte (a truncation).
``duplicate_fmt`` / ``duplicate_data``
    a second ``fmt `` or ``data`` chunk.
``missing_fmt`` / ``missing_data``
    no ``fmt `` or no ``data`` chunk.
``fmt_too_short``
    a ``fmt `` chunk under 16 bytes.
``unsupported_format``
    a format tag, sub-format or bit depth other than PCM/16 or IEEE float/32.
``fmt_size_mismatch``
    a ``fmt `` chunk of a size other than 16 or 18 (PCM, float) or 40 (extensible).
``bad_cb_size``
    ``cbSize`` other than 0 (18-byte ``fmt ``) or 22 (extensible).
``unsupported_subformat``
    an extensible sub-format GUID other than PCM or IEEE float.
``extensible_valid_bits``
    an extensible ``wValidBitsPerSample`` other than the container bits.
``zero_channels_or_rate``
    zero channels or a zero rate (for raw sources: not positive).
``block_align_mismatch`` / ``byte_rate_mismatch``
    header fields inconsistent with channels, bits and rate.
``partial_frame``
    sample data that is not a whole number of frames (WAV or raw).
``rate_below_minimum`` / ``rate_not_allowed``
    the source rate is below the policy minimum or not one of its allowed rates.
``geometry_mismatch``
    ``decode`` was given a geometry that does not describe the buffer.
``all_zero``
    ``refuse_all_zero`` is set and every decoded sample is exactly 0.0.
``missing_ds64``
    an RF64 file whose first chunk is not a ``ds64`` chunk.
``unknown_container`` / ``format_mismatch``
    bytes of no accepted container, or not the declared one.
``malformed_header`` / ``unsupported_codec``
    a compressed container's header is malformed or names a codec not decoded here
    (:mod:`audiogate.decode.containers`).
``codecs_unavailable``
    the optional codecs for the container and codec are not installed (the message
    names the extra).
``decoder_error`` / ``stream_changed`` / ``truncated_stream``
    the codec refused the stream, its rate or channel count changed mid-way, or a
    lossless stream ended before the frames its header declares.
``decoder_crashed`` / ``decoder_timeout`` / ``decoder_memory_limit``
    the decoder process died, ran past its CPU or wall-clock time, or past its address
    space (:class:`~audiogate.decode.isolation.DecoderFailedError`).

The subclasses carry fixed codes: :class:`~audiogate.errors.EmptyAudioError` is
``empty`` (no bytes, empty ``data`` chunk, empty raw source) and
:class:`~audiogate.errors.NonFiniteSampleError` is ``non_finite`` (with the first
offending ``frame``). Policy caps raise :class:`~audiogate.errors.LimitError` named
``source sample rate``, ``source channels``, ``source frames per clip`` and
``source duration per clip``; cancellation raises
:class:`~audiogate.errors.PreprocessCancelled` at the ``Decode`` checkpoint.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from audiogate.cancel import NEVER, CancelToken, Checkpoint
from audiogate.decode.containers import (
    CODEC_FRAME_SLACK,
    CONTAINER_LABELS,
    StreamHeader,
    inspect_container,
    sniff_container,
    wav_codec_tag,
)
from audiogate.decode.geometry import (
    BYTES_PER_SAMPLE,
    CONVERT_ADVICE,
    OTHER_AUDIO_LABELS,
    WAV,
    ClipGeometry,
    DecodeLimits,
    SourceFormat,
    describe_signature,
)
from audiogate.decode.raw import inspect_raw
from audiogate.decode.samples import downmix_encoded, downmix_f32, downmix_pcm16
from audiogate.decode.wav import inspect_wav
from audiogate.errors import DecodeError, EmptyAudioError, LimitError, NonFiniteSampleError

if TYPE_CHECKING:
    from audiogate.decode.isolation import DecoderPool

__all__ = [
    "ADMISSION_ELEMENTS",
    "DECODE_ERROR_CODES",
    "INSPECT_OFF_LOOP_BYTES",
    "Buffer",
    "check_limits",
    "check_rate",
    "decode",
    "inspect",
    "inspects_long",
]

#: What ``inspect`` and ``decode`` accept: any contiguous buffer, never copied.
Buffer: TypeAlias = bytes | bytearray | memoryview

#: Every ``code`` a ``DecodeError`` from this package can carry.
DECODE_ERROR_CODES: Final = frozenset(
    {
        "buffer_not_contiguous",
        "too_short",
        "not_riff_wave",
        "riff_size_mismatch",
        "too_many_chunks",
        "truncated_chunk_header",
        "chunk_past_end",
        "missing_pad_byte",
        "duplicate_fmt",
        "duplicate_data",
        "missing_fmt",
        "missing_data",
        "fmt_too_short",
        "unsupported_format",
        "fmt_size_mismatch",
        "bad_cb_size",
        "unsupported_subformat",
        "extensible_valid_bits",
        "zero_channels_or_rate",
        "block_align_mismatch",
        "byte_rate_mismatch",
        "partial_frame",
        "rate_below_minimum",
        "rate_not_allowed",
        "geometry_mismatch",
        "all_zero",
        "empty",
        "non_finite",
        "missing_ds64",
        "unknown_container",
        "format_mismatch",
        "malformed_header",
        "unsupported_codec",
        "codecs_unavailable",
        "decoder_error",
        "stream_changed",
        "truncated_stream",
        "decoder_crashed",
        "decoder_timeout",
        "decoder_memory_limit",
    }
)

_DEFAULT_LIMITS: Final = DecodeLimits()


def _byte_view(data: Buffer, clip_index: int) -> memoryview:
    """A 1-D unsigned-byte view of ``data`` (no copy)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(
            f"audio clip {clip_index}: data must be bytes, bytearray or memoryview, "
            f"not {type(data).__name__}"
        )
    view = memoryview(data)
    if not view.c_contiguous:
        raise DecodeError(
            "the memoryview is not C-contiguous",
            clip_index=clip_index,
            code="buffer_not_contiguous",
        )
    if view.format == "B" and view.ndim == 1:
        return view
    return view.cast("B")


def check_rate(rate_hz: int, limits: DecodeLimits, *, clip_index: int) -> None:
    """The policy's rate checks (minimum, maximum, allowed set), in that order.

    WAV headers run them right after the zero channel/rate check and before the format
    checks, as mlxcel's ``inspect_wav`` does (``src/audio/preprocessing_wav.rs``), so a clip
    at a refused rate gets the rate error.

    :raises DecodeError: ``rate_below_minimum`` or ``rate_not_allowed``.
    :raises LimitError: source sample rate over its cap.
    """
    if rate_hz < limits.min_rate_hz:
        raise DecodeError(
            f"source sample rate {rate_hz} Hz is below the {limits.min_rate_hz} Hz minimum",
            clip_index=clip_index,
            code="rate_below_minimum",
        )
    if rate_hz > limits.max_rate_hz:
        raise LimitError(
            "source sample rate", actual=rate_hz, maximum=limits.max_rate_hz, clip_index=clip_index
        )
    allowed = limits.allowed_rates_hz
    if allowed is not None and rate_hz not in allowed:
        raise DecodeError(
            f"source sample rate {rate_hz} Hz is not allowed; allowed rates: "
            f"{', '.join(str(r) for r in sorted(allowed))} Hz",
            clip_index=clip_index,
            code="rate_not_allowed",
        )


def check_limits(geometry: ClipGeometry, limits: DecodeLimits, *, clip_index: int) -> None:
    """Apply the per-clip policy to a valid geometry, in the documented order.

    :raises DecodeError: ``rate_below_minimum`` or ``rate_not_allowed``.
    :raises LimitError: source sample rate, channels, frames or duration over its cap.
    """
    check_rate(geometry.rate_hz, limits, clip_index=clip_index)
    if geometry.channels > limits.max_channels:
        raise LimitError(
            "source channels",
            actual=geometry.channels,
            maximum=limits.max_channels,
            clip_index=clip_index,
        )
    if limits.max_frames is not None and geometry.frames > limits.max_frames:
        raise LimitError(
            "source frames per clip",
            actual=geometry.frames,
            maximum=limits.max_frames,
            clip_index=clip_index,
        )
    if limits.max_duration_us is not None and geometry.duration_us > limits.max_duration_us:
        raise LimitError(
            "source duration per clip",
            actual=geometry.duration_us,
            maximum=limits.max_duration_us,
            clip_index=clip_index,
        )


#: A compressed clip of this many bytes or more is inspected off the event loop
#: (:func:`inspects_long`).
INSPECT_OFF_LOOP_BYTES: Final = 64 * 1024


def inspects_long(data: Buffer) -> bool:
    """Whether :func:`inspect` of ``data`` may hold the GIL for long: a compressed clip
    (not WAV) of :data:`INSPECT_OFF_LOOP_BYTES` or more, whose container walk in pure
    Python (a live WebM's packets up to the caps, MP3 frames) takes up to tens of ms. A
    server inspects such a clip in a thread, not on its event loop, so that the walk
    does not stall every other connection for its whole length."""
    if len(data) < INSPECT_OFF_LOOP_BYTES:
        return False
    with memoryview(data) as view:
        return sniff_container(view[:64]) != "wav"


def inspect(
    data: Buffer,
    *,
    clip_index: int,
    source_format: SourceFormat = WAV,
    limits: DecodeLimits = _DEFAULT_LIMITS,
    cancel: CancelToken = NEVER,
) -> ClipGeometry:
    """Read a clip's header and apply the per-clip policy; samples are not touched.

    :param data: the encoded clip.
    :param clip_index: zero-based clip index, named in every error.
    :param source_format: :data:`~audiogate.decode.WAV`, or ``SourceFormat.raw(...)``.
    :param limits: the per-clip policy.
    :param cancel: polled at the ``Decode`` checkpoint at the start and after each chunk.
    :returns: the clip's geometry.
    :raises DecodeError: malformed or unsupported header, or a policy refusal (see the
        module docstring for the codes); :class:`~audiogate.errors.EmptyAudioError` for
        no sample frames.
    :raises LimitError: the clip exceeds a per-clip cap.
    :raises PreprocessCancelled: ``cancel`` was cancelled.
    """
    declared = source_format.container
    with _byte_view(data, clip_index) as view:
        if declared == "raw":
            cancel.check(Checkpoint.DECODE, clip_index)
            geometry = inspect_raw(view.nbytes, source_format, clip_index=clip_index)
        else:
            container = sniff_container(view) if view.nbytes else None
            if declared == "auto" and container is None and view.nbytes:
                _refuse_unrecognised(view, clip_index)
            if declared == "wav" or (declared == "auto" and container in (None, "wav")):
                # The strict RIFF walker: its refusals name what is wrong with a WAV.
                try:
                    geometry = inspect_wav(
                        view,
                        clip_index=clip_index,
                        cancel=cancel,
                        check_rate=lambda rate_hz: check_rate(
                            rate_hz, limits, clip_index=clip_index
                        ),
                    )
                except DecodeError as refused:
                    # ADPCM and GSM 6.10 WAV: libsndfile decodes them in a decoder process.
                    if refused.code != "unsupported_format" or wav_codec_tag(view) is None:
                        raise
                    try:
                        geometry = _inspect_compressed(view, "auto", "wavcodec", limits, clip_index)
                    except DecodeError:
                        raise refused from None
            else:
                cancel.check(Checkpoint.DECODE, clip_index)
                geometry = _inspect_compressed(view, declared, container, limits, clip_index)
    check_limits(geometry, limits, clip_index=clip_index)
    return geometry


def _refuse_unrecognised(view: memoryview, clip_index: int) -> None:
    """Bytes sent without a declared format that start with no container audiogate decodes:
    a RIFF file that is not WAVE goes on to the strict walker (which names what it is);
    anything else is refused here, naming what the bytes look like."""
    found = describe_signature(view)
    if found.startswith(("RIFF", "RF64", "BW64")):
        return
    advice = f"; {CONVERT_ADVICE}" if found in OTHER_AUDIO_LABELS else ""
    raise DecodeError(
        f"the bytes are not an audio format audiogate decodes (found {found}); accepted: "
        f"{', '.join(CONTAINER_LABELS.values())}, or headerless samples declared as pcm16 "
        f"or f32 with their sample_rate and channels{advice}",
        clip_index=clip_index,
        code="unknown_container",
    )


def _inspect_compressed(
    view: memoryview,
    declared: str,
    container: str | None,
    limits: DecodeLimits,
    clip_index: int,
) -> ClipGeometry:
    """The geometry of a compressed clip from its headers (``declared`` is not ``wav``)."""
    from audiogate.decode.isolation import missing_codecs

    if view.nbytes == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="no bytes")
    if container is None or container == "wav":
        found = "RIFF/WAVE" if container == "wav" else "no accepted container signature"
        raise DecodeError(
            f"declared {declared} does not match the bytes: found {found}",
            clip_index=clip_index,
            code="format_mismatch" if container == "wav" else "unknown_container",
        )
    expected = ("ogg", "webm") if declared == "opus" else (declared,)
    if declared != "auto" and container not in expected:
        raise DecodeError(
            f"declared {declared} does not match the bytes: found {CONTAINER_LABELS[container]}",
            clip_index=clip_index,
            code="format_mismatch",
        )
    try:
        header = inspect_container(view, container, clip_index=clip_index)  # type: ignore[arg-type]
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise DecodeError(
            f"malformed {CONTAINER_LABELS[container]} header: {exc}",
            clip_index=clip_index,
            code="malformed_header",
        ) from None
    if declared == "opus" and header.codec != "opus":
        raise DecodeError(
            f"declared opus does not match the bytes: {CONTAINER_LABELS[container]} "
            f"holding {header.codec}",
            clip_index=clip_index,
            code="format_mismatch",
        )
    check_rate(header.rate_hz, limits, clip_index=clip_index)
    missing = missing_codecs(container, clip_index=clip_index, codec=header.codec)
    if missing is not None:
        raise missing
    if header.live and header.codec == "opus":
        header = _measured(view, header, limits, clip_index)
    geometry = header.geometry(view.nbytes)
    if not geometry.exact:
        # An upper bound, not a length: plan for at most what the policy admits, and let
        # the decoder refuse a stream that turns out longer.
        cap = geometry.frames
        if limits.max_frames is not None:
            cap = min(cap, limits.max_frames)
        if limits.max_duration_us is not None:
            cap = min(cap, limits.max_duration_us * geometry.rate_hz // 1_000_000)
        if cap < geometry.frames:
            # A clip exactly at the cap ends with its codec's padding past it (an encoder
            # pads the last frame): that much is trimmed at the cap, not refused.
            geometry = attrs.evolve(
                geometry,
                frames=cap,
                duration_us=cap * 1_000_000 // geometry.rate_hz,
                padding_frames=CODEC_FRAME_SLACK.get(header.codec, 0),
            )
    return geometry


#: Matroska elements admission reads to measure a live WebM Opus (about 0.3 s of
#: Python; 30 minutes of 20 ms packets).
ADMISSION_ELEMENTS: Final = 100_000


def _measured(
    view: memoryview, header: StreamHeader, limits: DecodeLimits, clip_index: int
) -> StreamHeader:
    """A live WebM Opus (no duration: MediaRecorder's) measured from its packets, so it
    is planned for its length, not for ``bytes × 5,760`` capped at the policy (a plan
    that a family's work cap refuses whatever the length). The walk stops at the
    policy's cap or :data:`ADMISSION_ELEMENTS`; past either, the bound stands."""
    from audiogate.decode.remux import measure_webm_opus

    cap = limits.max_frames
    if limits.max_duration_us is not None:
        by_duration = limits.max_duration_us * header.rate_hz // 1_000_000
        cap = by_duration if cap is None else min(cap, by_duration)
    measured = measure_webm_opus(
        view, clip_index=clip_index, stop_after=cap, max_elements=ADMISSION_ELEMENTS
    )
    if cap is not None and measured.samples > cap:
        # Its packets pass the cap: refused here, before a decoder sees it.
        frames = measured.samples
        geometry = attrs.evolve(
            header.geometry(view.nbytes),
            frames=frames,
            duration_us=frames * 1_000_000 // header.rate_hz,
        )
        check_limits(geometry, limits, clip_index=clip_index)
    if measured.stopped or measured.samples < 1:
        return header
    return attrs.evolve(header, frames=measured.samples, live=False)


def _check_geometry(geometry: ClipGeometry, nbytes: int, clip_index: int) -> None:
    if not geometry.in_process:
        _check_compressed_geometry(geometry, nbytes, clip_index)
        return
    fields = (
        geometry.rate_hz,
        geometry.channels,
        geometry.frames,
        geometry.duration_us,
        geometry.data_offset,
        geometry.data_length,
    )
    consistent = (
        geometry.container in ("wav", "raw")
        and geometry.encoding in BYTES_PER_SAMPLE
        and all(isinstance(v, int) and not isinstance(v, bool) for v in fields)
        and geometry.rate_hz >= 1
        and geometry.channels >= 1
        and geometry.frames >= 1
        and geometry.data_offset >= 0
        and geometry.padding_frames == 0
        and geometry.data_length == geometry.frames * geometry.frame_bytes
        and geometry.duration_us == geometry.frames * 1_000_000 // geometry.rate_hz
    )
    if not consistent:
        raise DecodeError(
            f"the geometry is not self-consistent: {geometry!r}",
            clip_index=clip_index,
            code="geometry_mismatch",
        )
    if geometry.data_offset + geometry.data_length > nbytes:
        raise DecodeError(
            f"the geometry needs bytes {geometry.data_offset}.."
            f"{geometry.data_offset + geometry.data_length} but the buffer holds {nbytes}",
            clip_index=clip_index,
            code="geometry_mismatch",
        )


def _check_compressed_geometry(geometry: ClipGeometry, nbytes: int, clip_index: int) -> None:
    fields = (
        geometry.rate_hz,
        geometry.channels,
        geometry.frames,
        geometry.duration_us,
        geometry.padding_frames,
    )
    consistent = (
        geometry.container in CONTAINER_LABELS
        and all(isinstance(v, int) and not isinstance(v, bool) for v in fields)
        and geometry.rate_hz >= 1
        and geometry.channels >= 1
        and geometry.frames >= 1
        and 0 <= geometry.padding_frames <= max(CODEC_FRAME_SLACK.values())
        and geometry.data_offset == 0
        and geometry.data_length == nbytes
        and geometry.duration_us == geometry.frames * 1_000_000 // geometry.rate_hz
    )
    if not consistent:
        raise DecodeError(
            f"the geometry does not describe this {nbytes}-byte clip: {geometry!r}",
            clip_index=clip_index,
            code="geometry_mismatch",
        )


def decode(
    data: Buffer,
    geometry: ClipGeometry,
    *,
    clip_index: int,
    limits: DecodeLimits = _DEFAULT_LIMITS,
    cancel: CancelToken = NEVER,
    decoders: DecoderPool | None = None,
) -> npt.NDArray[np.float32]:
    """Convert the samples ``geometry`` describes into one clamped mono waveform.

    Channels are averaged in float64, clamped to ``[-1, 1]`` and stored as float32;
    PCM16 is ``int16 / 32768``. Work is done in blocks of
    :data:`~audiogate.decode.samples.BLOCK_FRAMES` frames into one preallocated array,
    so peak memory is the output plus a few small block buffers.

    :param data: the same encoded clip ``geometry`` was inspected from.
    :param geometry: from :func:`inspect`; re-checked against ``data`` and ``limits``.
    :param clip_index: zero-based clip index, named in every error.
    :param limits: the per-clip policy (``refuse_all_zero`` is applied here).
    :param cancel: polled at the ``Decode`` checkpoint before each block.
    :param decoders: the process pool of compressed clips (default:
        :func:`~audiogate.decode.isolation.default_pool`); WAV and raw PCM decode here.
    :returns: ``[shape=(geometry.frames,)]`` float32, C-contiguous, read-only; a
        compressed clip planned for an upper bound (``geometry.exact`` false) may be
        shorter.
    :raises NonFiniteSampleError: a float sample is NaN or infinite (first frame named).
    :raises DecodeError: ``geometry_mismatch``, or ``all_zero`` when refused.
    :raises LimitError: ``geometry`` exceeds a per-clip cap in ``limits``.
    :raises PreprocessCancelled: ``cancel`` was cancelled.
    """
    view = _byte_view(data, clip_index)
    _check_geometry(geometry, view.nbytes, clip_index)
    check_limits(geometry, limits, clip_index=clip_index)
    cancel.check(Checkpoint.DECODE, clip_index)

    if not geometry.in_process:
        del view
        return _decode_compressed(data, geometry, clip_index, limits, cancel, decoders)

    out = np.empty(geometry.frames, dtype=np.float32)
    count = geometry.frames * geometry.channels
    bad_frame: int | None = None
    if geometry.encoding not in ("pcm16", "f32"):
        bad_frame = downmix_encoded(
            view,
            out,
            encoding=geometry.encoding,
            data_offset=geometry.data_offset,
            channels=geometry.channels,
            clip_index=clip_index,
            cancel=cancel,
        )
    elif geometry.encoding == "pcm16":
        pcm = np.frombuffer(view, dtype="<i2", count=count, offset=geometry.data_offset)
        downmix_pcm16(pcm, out, channels=geometry.channels, clip_index=clip_index, cancel=cancel)
        del pcm
    else:
        flt = np.frombuffer(view, dtype="<f4", count=count, offset=geometry.data_offset)
        bad_frame = downmix_f32(
            flt, out, channels=geometry.channels, clip_index=clip_index, cancel=cancel
        )
        del flt
    # Drop the exports of the caller's buffer before raising, so a bytearray is not
    # left locked against resizing by the exception's traceback.
    del view
    if bad_frame is not None:
        raise NonFiniteSampleError(clip_index=clip_index, frame=bad_frame)
    return _finish(out, limits, clip_index)


def _finish(
    out: npt.NDArray[np.float32], limits: DecodeLimits, clip_index: int
) -> npt.NDArray[np.float32]:
    if limits.refuse_all_zero and not out.any():
        raise DecodeError(
            f"every one of its {out.shape[0]} decoded samples is exactly 0.0",
            clip_index=clip_index,
            code="all_zero",
        )
    out.flags.writeable = False
    return out


def _decode_compressed(
    data: Buffer,
    geometry: ClipGeometry,
    clip_index: int,
    limits: DecodeLimits,
    cancel: CancelToken,
    decoders: DecoderPool | None,
) -> npt.NDArray[np.float32]:
    from audiogate.decode.isolation import default_pool, missing_codecs

    missing = missing_codecs(geometry.container, clip_index=clip_index, codec=geometry.encoding)
    if missing is not None:
        raise missing
    pool = decoders if decoders is not None else default_pool()
    payload = data if isinstance(data, bytes) else bytes(data)
    out, written = pool.decode(payload, geometry, clip_index=clip_index, cancel=cancel)
    if written == 0:
        raise EmptyAudioError(clip_index=clip_index, detail="the stream decoded to no frames")
    if written < geometry.frames and geometry.exact and not geometry.prefix:
        raise DecodeError(
            f"the stream ended after {written} of the {geometry.frames} frames its header declares",
            clip_index=clip_index,
            code="truncated_stream",
        )
    return _finish(out[:written], limits, clip_index)
