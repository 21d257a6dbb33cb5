"""Granite Speech: pinned policy defaults, recognized keys and the family spec.

Reference: ``GraniteSpeechProcessor`` and ``GraniteSpeechFeatureExtractor`` of
transformers 5.24.0 (``models/granite_speech``) with the files of
ibm-granite/granite-speech-3.3-2b, the checkpoint transformers' documentation names (no
revision is pinned there: the hub's main, model revision 3.3.2; the bundled files are
reconstructed, see ``docs/provenance.md``): ``config.json`` ``audio_token_index`` 49159,
``window_size`` 15, ``downsample_rate`` 5, ``encoder_config.input_dim`` 160;
``preprocessor_config.json`` ``melspec_kwargs`` {16 kHz, ``n_fft`` 512, ``win_length``
400, ``hop_length`` 160, ``n_mels`` 80}, ``projector_window_size`` 15,
``projector_downsample_rate`` 5; ``processor_config.json`` ``audio_token`` ``<|audio|>``.

The processor neither truncates nor limits a clip's length, and the model takes any
length (its conformer attends in blocks of 200 frames). The per-clip and per-request
caps below are this family's serving budget, not a model limit; longer audio is
refused with a typed :class:`~audiogate.errors.LimitError`, never cut.
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import (
    AudioPolicy,
    PolicyKey,
    flat_constants,
    load_packaged_schema,
    standard_keys,
)
from audiogate_granitespeech._version import __version__
from audiogate_granitespeech.geometry import (
    DOWNSAMPLE_RATE,
    FEATURE_DIM,
    HOP,
    N_FFT,
    N_MELS,
    SAMPLE_RATE_HZ,
    WIN_LENGTH,
    WINDOW_ROWS,
    granite_geometry,
)

__all__ = [
    "AUDIO_TOKEN",
    "AUDIO_TOKEN_INDEX",
    "FAMILY",
    "MAX_CLIPS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MIN_SAMPLES",
    "MODEL_TYPES",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "spec",
]

FAMILY: Final = "granitespeech"
#: The checkpoint transformers' docs use, as transformers 5.24.0 processes it.
REVISION: Final = "ibm-granite/granite-speech-3.3-2b@transformers-5.24.0"
MODEL_TYPES: Final = ("granite_speech",)

MIB: Final = 1 << 20
#: Every rate ``librosa.load`` (transformers' ``load_audio``) resamples with soxr.
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
#: Serving budget per clip: five minutes (1,500 tokens). Not a model limit.
MAX_SECONDS: Final = 300
MAX_SAMPLES: Final = MAX_SECONDS * SAMPLE_RATE_HZ  # 4,800,000
#: Serving budget per request: ten minutes of audio over at most 16 clips.
MAX_CLIPS: Final = 16
MAX_REQUEST_SECONDS: Final = 600
#: ``torch.stft`` reflect-pads 256 samples at each end, which needs more than 256
#: samples: the reference raises on a shorter clip of its own.
MIN_SAMPLES: Final = N_FFT // 2 + 1
AUDIO_TOKEN: Final = "<|audio|>"
#: config.json ``audio_token_index`` of granite-speech-3.3-2b: the id after Granite
#: 3.3's 49,159 tokens (``<|end_of_plugin|>`` is 49158).
AUDIO_TOKEN_INDEX: Final = 49_159

_MAX_ROWS: Final = granite_geometry(MAX_SAMPLES).rows  # 15,000
_ROW_BYTES: Final = FEATURE_DIM * 4

PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="soxr_hq",
    min_source_rate_hz=MIN_SOURCE_RATE_HZ,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=MAX_CHANNELS,
    refuse_all_zero=False,
    min_samples_per_clip=MIN_SAMPLES,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    # Five minutes of 48 kHz stereo PCM16 are 57.6 MB; wider or faster PCM sources must
    # be compressed or shorter.
    max_encoded_bytes_per_clip=64 * MIB,
    max_frames_per_clip=_MAX_ROWS,
    max_clips=MAX_CLIPS,
    max_encoded_bytes_per_request=128 * MIB,
    max_source_samples_per_request=MAX_REQUEST_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_REQUEST_SECONDS * SAMPLE_RATE_HZ,
    max_source_duration_us_per_request=MAX_REQUEST_SECONDS * 1_000_000,
    # Rows of ten minutes, plus half a row of rounding per clip.
    max_frames_per_request=MAX_REQUEST_SECONDS * SAMPLE_RATE_HZ // (2 * HOP) + MAX_CLIPS,
    # Ten minutes of retained 16 kHz waveforms: 38.4 MB.
    max_waveform_result_bytes_per_request=40 * MIB,
    # Those, plus the longest source decoded at the highest rate (230.4 MB), the
    # decoder's block in 8 channels (5.2 MB) and soxr's scratch (1 MiB).
    max_waveform_working_bytes_per_request=280 * MIB,
    # Features of ten minutes (19.2 MB) plus the collated batch, every clip padded to the
    # longest: 16 × 15,000 rows × 640 B = 153.6 MB at worst.
    max_prepared_result_bytes_per_request=176 * MIB,
    # Frames counts stacked rows: a row per 320 samples, (N + 160) // 320 =
    # (N - 160) // 320 + 1, so the declared framing is a 160-sample frame every 320.
    frame_length_samples=HOP,
    frame_hop_samples=2 * HOP,
    pad_multiple_samples=1,
    placeholder="rows_per_clip",
    options={
        "audio_token_index": AUDIO_TOKEN_INDEX,
        "audio_token": AUDIO_TOKEN,
        "max_rows_per_clip": _MAX_ROWS,
        "row_bytes": _ROW_BYTES,
    },
)


def _melspec(name: str, value: int, description: str) -> PolicyKey:
    # transformers 5.24 takes these as flat constructor arguments and the hub file
    # nests them in ``melspec_kwargs``; the extractor ignores the nested copy, so
    # either spelling may only restate the value this frontend computes with.
    return PolicyKey(
        target=f"options.{name}",
        paths=(f"/melspec_kwargs/{name}", f"/{name}"),
        const=value,
        description=description,
    )


POLICY_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=HOP,
    declared_frame_hop=2 * HOP,
    extra=(
        PolicyKey(
            target="options.audio_token_index",
            paths=("/audio_token_index",),
            maximum=2**31 - 1,
            description="<|audio|> id",
        ),
        PolicyKey(
            target="options.audio_token",
            paths=("/audio_token",),
            kind="string",
            const=AUDIO_TOKEN,
            description="the audio placeholder token of the processor",
        ),
        PolicyKey(
            target="options.melspec_sample_rate",
            paths=("/melspec_kwargs/sample_rate",),
            const=SAMPLE_RATE_HZ,
            description="sample rate of the mel spectrogram, Hz",
        ),
        _melspec("n_fft", N_FFT, "FFT size of the mel spectrogram"),
        _melspec("win_length", WIN_LENGTH, "Hann window length of the mel spectrogram"),
        _melspec("hop_length", HOP, "frame hop of the mel spectrogram"),
        _melspec("n_mels", N_MELS, "HTK mel bins"),
        PolicyKey(
            target="options.feature_size",
            paths=("/feature_size",),
            const=N_MELS,
            description="mel bins (transformers saves n_mels as feature_size)",
        ),
        PolicyKey(
            target="options.projector_window_size",
            paths=("/projector_window_size", "/window_size"),
            const=WINDOW_ROWS,
            description="rows per projector window",
        ),
        PolicyKey(
            target="options.projector_downsample_rate",
            paths=("/projector_downsample_rate", "/downsample_rate"),
            const=DOWNSAMPLE_RATE,
            description="rows per projector query (window // rate queries per window)",
        ),
        PolicyKey(
            target="options.input_dim",
            paths=("/encoder_config/input_dim",),
            const=FEATURE_DIM,
            description="encoder input width: two stacked 80-bin frames",
        ),
        # SequenceFeatureExtractor saves its padding side flat; the extractor pads a
        # batch on the right whatever it says, so another side is refused, not ignored.
        *flat_constants(
            {"padding_side": ("right", "batch padding side: clips are padded at the end")}
        ),
    ),
)


def spec() -> FamilySpec:
    """The family registration record."""
    return FamilySpec(
        name=FAMILY,
        model_types=MODEL_TYPES,
        defaults=PINNED,
        keys=POLICY_KEYS,
        schema=load_packaged_schema(__package__ or "audiogate_granitespeech"),
        revision=REVISION,
        version=__version__,
        summary="Granite Speech: soxr HQ, 80-bin HTK log-mel in row pairs, 3 <|audio|> per 15 rows",
    )
