"""Qwen2-Audio: pinned policy defaults, recognized keys and the family spec.

Source rules from the Qwen2-Audio serving guide (docs/provenance.md: 30 s per source, more
than 320 samples, exact all-zero refusal, 750 rows of 16,384 bytes). Source rates are what
the reference processor takes through ``librosa.load``: every rate soxr converts (8 to
192 kHz) and any channel count the core downmixes; the guide's rates and channels
(16, 44.1 and 48 kHz, one or two channels) are the *strict profile* a deployment may set
(``strict_source_rates`` and ``max_source_channels: 2``). The
frontend is ``WhisperFeatureExtractor(feature_size=128)`` with ``Qwen2AudioProcessor``
as shipped by Qwen/Qwen2-Audio-7B-Instruct (its framing constants in
:mod:`audiogate_qwen2audio.geometry`) (``preprocessor_config.json``: 16 kHz,
``n_fft`` 400, ``hop_length`` 160, ``chunk_length`` 30, ``n_samples`` 480,000,
``nb_max_frames`` 3000; ``config.json``: ``audio_token_index`` 151646,
``audio_config.num_mel_bins`` 128, ``audio_config.max_source_positions`` 1500).
"""

from __future__ import annotations

from typing import Final

from audiogate.family import FamilySpec
from audiogate.policy import (
    LIMIT_NAMESPACES,
    AudioPolicy,
    PolicyKey,
    flat_constants,
    load_packaged_schema,
    standard_keys,
)
from audiogate_qwen2audio._version import __version__
from audiogate_qwen2audio.geometry import (
    HOP,
    MAX_FRAMES,
    MAX_ROWS,
    MAX_SAMPLES,
    N_FFT,
    N_MELS,
    SAMPLE_RATE_HZ,
)
from audiogate_qwen2audio.references import REFERENCE_RE

__all__ = [
    "AUDIO_BOS_TOKEN",
    "AUDIO_BOS_TOKEN_ID",
    "AUDIO_EOS_TOKEN",
    "AUDIO_EOS_TOKEN_ID",
    "AUDIO_TOKEN",
    "AUDIO_TOKEN_INDEX",
    "FAMILY",
    "MIN_SAMPLES",
    "MODEL_TYPES",
    "PINNED",
    "POLICY_KEYS",
    "REVISION",
    "ROW_BYTES",
    "SOURCE_RATES_HZ",
    "STRICT_CHANNELS",
    "spec",
]

FAMILY: Final = "qwen2audio"
#: Reference: the checkpoint's processor as transformers 5.24.0 implements it.
REVISION: Final = "Qwen/Qwen2-Audio-7B-Instruct@transformers-5.24.0"
MODEL_TYPES: Final = ("qwen2_audio",)

MIB: Final = 1 << 20
#: The strict profile's rates (``strict_source_rates``), from the serving guide:
#: "Supported rates are 16000, 44100 and 48000 Hz, with one or two channels."
SOURCE_RATES_HZ: Final = (16_000, 44_100, 48_000)
#: The strict profile's channels (a deployment sets ``max_source_channels: 2``).
STRICT_CHANNELS: Final = 2
#: Every rate ``librosa.load`` resamples with soxr, as for the other families.
MIN_SOURCE_RATE_HZ: Final = 8_000
MAX_SOURCE_RATE_HZ: Final = 192_000
MAX_CHANNELS: Final = 8
MAX_SECONDS: Final = 30
#: The serving guide: a source must produce one pooled row, "more than 320 canonical
#: samples".
MIN_SAMPLES: Final = 321
MAX_CLIPS: Final = 16
#: The serving guide: each pooled row is 4096 float32 values of downstream capacity.
ROW_BYTES: Final = 4096 * 4
AUDIO_TOKEN: Final = "<|AUDIO|>"
AUDIO_BOS_TOKEN: Final = "<|audio_bos|>"
AUDIO_EOS_TOKEN: Final = "<|audio_eos|>"
AUDIO_TOKEN_INDEX: Final = 151_646  # <|AUDIO|>, config.json audio_token_index
#: Adjacent added tokens of the Qwen2-Audio vocabulary (the same ids carry the same
#: strings in Qwen2.5-Omni, which extends it); expansion checks them against the tokenizer.
AUDIO_BOS_TOKEN_ID: Final = 151_647
AUDIO_EOS_TOKEN_ID: Final = 151_648

# Per-clip result: features (128 × 3000 float32) + bool mask (3000) + 750 rows × 16 KiB
# = 13,827,000 B; the preflight adds the collated copy (1,539,000 B per clip). Sixteen
# maximal clips need 245,856,000 B (234.5 MiB), which the 256 MiB budget admits.
PINNED: Final = AudioPolicy(
    family=FAMILY,
    revision=REVISION,
    target_rate_hz=SAMPLE_RATE_HZ,
    resampling="soxr_hq",
    min_source_rate_hz=MIN_SOURCE_RATE_HZ,
    max_source_rate_hz=MAX_SOURCE_RATE_HZ,
    max_source_channels=MAX_CHANNELS,
    refuse_all_zero=True,
    min_samples_per_clip=MIN_SAMPLES,
    max_duration_seconds=MAX_SECONDS,
    max_samples_per_clip=MAX_SAMPLES,
    # 30 s of 48 kHz stereo f32 is 11,520,000 B of samples; 16 MiB leaves room for headers
    # and metadata chunks (longer or wider PCM sources are compressed or shorter).
    max_encoded_bytes_per_clip=16 * MIB,
    max_frames_per_clip=MAX_FRAMES,
    # 16 clips, as for the other families: the serving guide bounds sources only through
    # its common media profile, not per prompt.
    max_clips=MAX_CLIPS,
    # The serving guide's reference combined configuration gives its media profile 64 MiB
    # of shared source bytes.
    max_encoded_bytes_per_request=64 * MIB,
    # Aggregates of 16 maximal clips (30 s each at the highest allowed rate).
    max_source_samples_per_request=MAX_CLIPS * MAX_SECONDS * MAX_SOURCE_RATE_HZ,
    max_normalized_samples_per_request=MAX_CLIPS * MAX_SAMPLES,
    max_source_duration_us_per_request=MAX_CLIPS * MAX_SECONDS * 1_000_000,
    max_frames_per_request=MAX_CLIPS * MAX_FRAMES,
    # 16 retained 30 s waveforms at 16 kHz are 30,720,000 B.
    max_waveform_result_bytes_per_request=32 * MIB,
    # Those plus one clip in flight (a 192 kHz source: 23.04 MB decoded, a few MiB of
    # soxr): ~60 MB.
    max_waveform_working_bytes_per_request=96 * MIB,
    # 16 maximal clips need 234.5 MiB (see above).
    max_prepared_result_bytes_per_request=256 * MIB,
    # Whisper frames are centred: a clip of N samples has ceil(N/160) valid frames.
    frame_length_samples=HOP,
    frame_hop_samples=HOP,
    pad_multiple_samples=HOP,
    placeholder="rows_per_clip",
    options={
        "audio_token_index": AUDIO_TOKEN_INDEX,
        "audio_bos_token_id": AUDIO_BOS_TOKEN_ID,
        "audio_eos_token_id": AUDIO_EOS_TOKEN_ID,
        "audio_token": AUDIO_TOKEN,
        "audio_bos_token": AUDIO_BOS_TOKEN,
        "audio_eos_token": AUDIO_EOS_TOKEN,
        # What the chat template prints for each audio part, whatever its payload: a core
        # that renders audio parts as parts must swap the k-th one for the k-th sentinel
        # (prompt.py accepts that form as well as flattened text sentinels).
        "chat_audio_marker": AUDIO_TOKEN,
        "max_rows_per_clip": MAX_ROWS,
        "row_bytes": ROW_BYTES,
        "strict_source_rates": False,
    },
)

POLICY_KEYS: Final = standard_keys(
    PINNED,
    declared_frame_length=N_FFT,
    extra=(
        PolicyKey(
            target="options.strict_source_rates",
            paths=(f"/{LIMIT_NAMESPACES[0]}/strict_source_rates",),
            kind="boolean",
            description="the strict profile's rates: only 16000, 44100 and 48000 Hz",
        ),
        PolicyKey(
            target="options.audio_token_index",
            paths=("/audio_token_index",),
            maximum=2**31 - 1,
            description="<|AUDIO|> id",
        ),
        PolicyKey(
            target="options.feature_size",
            paths=("/feature_size", "/feature_extractor/feature_size"),
            const=N_MELS,
            description="mel bins of the Whisper frontend",
        ),
        PolicyKey(
            target="options.n_fft",
            paths=("/n_fft", "/feature_extractor/n_fft"),
            const=N_FFT,
            description="FFT size of the Whisper frontend",
        ),
        PolicyKey(
            target="options.hop_length",
            paths=("/hop_length",),
            const=HOP,
            description="frame hop of the Whisper frontend",
        ),
        PolicyKey(
            target="options.n_samples",
            paths=("/n_samples",),
            const=MAX_SAMPLES,
            description="samples of the Whisper window every clip is padded to",
        ),
        PolicyKey(
            target="options.nb_max_frames",
            paths=("/nb_max_frames",),
            const=MAX_FRAMES,
            description="feature frames of the Whisper window",
        ),
        PolicyKey(
            target="options.chunk_length",
            paths=("/chunk_length",),
            const=MAX_SECONDS,
            description="seconds of the Whisper window",
        ),
        PolicyKey(
            target="options.num_mel_bins",
            paths=("/audio_config/num_mel_bins",),
            const=N_MELS,
            description="mel bins the audio encoder consumes",
        ),
        PolicyKey(
            target="options.max_source_positions",
            paths=("/audio_config/max_source_positions",),
            const=MAX_FRAMES // 2,
            description="encoder positions (features must be 2 × this frames long)",
        ),
        # WhisperFeatureExtractor saves its padding side flat; the model reads
        # feature_attention_mask as right padding, so another side is refused, not ignored.
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
        schema=load_packaged_schema(__package__ or "audiogate_qwen2audio"),
        revision=REVISION,
        version=__version__,
        summary="Qwen2-Audio: soxr HQ, 128-bin Whisper log-mel, <|AUDIO|> per pooled row",
        source_reference=REFERENCE_RE,
        feature_backends=("numpy", "mlx"),
    )
