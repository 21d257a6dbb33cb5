"""What vLLM calls each family's inputs: one adapter per family, in one table.

Everything here is specific to the vLLM versions in :data:`SUPPORTED_VLLM`: the names of
the per-item tensors (``MultiModalKwargsItem`` keys), which positions a placeholder range
covers, and the architectures vLLM serves a family under. A family outside this module
joins the table with :func:`register_vllm_family`, or declares its adapter under the
``audiogate.vllm`` entry-point group (``name = "module:ADAPTER"``), loaded the first time
the family is asked for.

Per item (one clip), as vLLM 0.32 renders it:

========== ============================================== ===================================
family     tensors                                        placeholder range
========== ============================================== ===================================
qwen2audio ``input_features`` [128, 3000] float,          the run of ``<|AUDIO|>``
           ``feature_attention_mask`` [3000] int32
gemma3n    ``input_features_padded`` [frames, 128] float, the whole block: the newline token,
           ``input_features_mask`` [frames] bool          ``<start_of_audio>``, the soft
                                                          tokens, ``<end_of_audio>``, the
                                                          newline token (192 for 188 tokens)
audio-     ``input_features`` [chunks, 128, 3000] float,  the run of ``<sound>``
flamingo3  ``feature_attention_mask`` [chunks, 3000]
           int32 (both flat over the chunks),
           ``chunk_counts`` [] int64 (kept on the CPU)
glmasr     as audioflamingo3                              the run of ``<|pad|>`` (not the
                                                          begin/end-of-audio tokens)
granite-   ``input_features`` [frames, 160] float,        the run of ``<|audio|>``; the
speech     ``audio_embed_sizes`` [] int64 (on the CPU)    template reads a string: vLLM
                                                          puts the clips before the text
voxtral    ``audio_arrays`` [30 s chunks x 480000] float: the run of ``[AUDIO]``
           the normalized 16 kHz waveform, zero-padded
           (vLLM computes the log-mel in the model)
qwen25omni ``input_audio_features`` [128, frames] float: the run of ``<|AUDIO|>``
           the valid frames only, flat over them,
           ``feature_attention_mask`` [30000] int32 and
           ``audio_feature_lengths`` [] int64, both on the CPU
qwen3omni  as qwen25omni, but the frame mask is [frames]  the run of ``<|audio_pad|>``
           float32 (kept in float32: vLLM casts only what
           it does not keep on the CPU)
========== ============================================== ===================================

Phi-4 MM is not in the table: vLLM serves it only through the checkpoint's remote code,
which audiogate never runs (and vLLM's transformers-native class was removed in 0.12).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from typing import Any, Final, Literal

import attrs
import numpy as np

from audiogate.errors import PluginError
from audiogate.request import PreparedRequest

__all__ = [
    "BATCHED",
    "ENTRY_POINT_GROUP",
    "FLAT_CHUNKS",
    "FLAT_FRAMES",
    "SUPPORTED_VLLM",
    "TESTED_VLLM",
    "FieldLayout",
    "VllmFamily",
    "VllmVersionError",
    "batched_field",
    "check_vllm_version",
    "register_vllm_family",
    "vllm_families",
    "vllm_family",
]

#: The vLLM releases whose render protocol (``GenerateRequest`` with ``kwargs_data``)
#: and per-family names this module follows: ``(first, first unsupported)``.
SUPPORTED_VLLM: Final = ((0, 21, 0), (0, 33, 0))
#: The release the committed fixtures were recorded with (``tests/data/vllm/``).
TESTED_VLLM: Final = "0.32.0"
#: Entry points of this group each name a :class:`VllmFamily`.
ENTRY_POINT_GROUP: Final = "audiogate.vllm"


class VllmVersionError(RuntimeError):
    """An installed vLLM outside :data:`SUPPORTED_VLLM`."""


def _release(version: str) -> tuple[int, int, int]:
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits or 0))
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def check_vllm_version(version: str) -> None:
    """Refuse a vLLM release outside :data:`SUPPORTED_VLLM`.

    :raises VllmVersionError: naming the range.
    """
    first, stop = SUPPORTED_VLLM
    if not first <= _release(version) < stop:
        raise VllmVersionError(
            f"vLLM {version} is not supported: audiogate's vLLM adapter follows vLLM "
            f">={'.'.join(map(str, first))},<{'.'.join(map(str, stop))} "
            f"(fixtures recorded with {TESTED_VLLM})"
        )


#: ``items(prepared, clip) -> {vLLM key: array}`` for one clip.
ItemTensors = Callable[[PreparedRequest, int], Mapping[str, np.ndarray]]
#: ``placeholder(prepared, clip) -> (offset, length)`` into ``prepared.input_ids``.
PlaceholderRange = Callable[[PreparedRequest, int], tuple[int, int]]
#: ``layout(array) -> field``: how vLLM's msgpack names the field of one item's tensor
#: (``[factory, {keyword: value}]`` of vLLM's ``MultiModalFieldConfig``).
FieldLayout = Callable[[np.ndarray], list[Any]]


def batched_field(*, keep_on_cpu: bool = False) -> FieldLayout:
    """One tensor per item (``MultiModalFieldConfig.batched``)."""

    def layout(array: np.ndarray) -> list[Any]:
        return ["batched", {"keep_on_cpu": keep_on_cpu}]

    return layout


def _flat_over_chunks(array: np.ndarray) -> list[Any]:
    # ``flat_from_sizes(..., dim=0)``: the item is the slice of its chunks along the first
    # axis, written as [start, stop, step] relative to the item's own tensor.
    return ["flat", {"keep_on_cpu": False, "slices": [[[0, int(array.shape[0]), None]]], "dim": 0}]


def _flat_over_frames(array: np.ndarray) -> list[Any]:
    # ``flat_from_sizes(..., dim=1)``: the item is its frames along the second axis.
    whole, frames = [None, None, None], [0, int(array.shape[1]), None]
    return ["flat", {"keep_on_cpu": False, "slices": [[whole, frames]], "dim": 1}]


#: A tensor of one item's frames along its second axis (``flat_from_sizes``, ``dim=1``).
FLAT_FRAMES: Final[FieldLayout] = _flat_over_frames
#: A tensor of one item's chunks along its first axis (``flat_from_sizes``, ``dim=0``).
FLAT_CHUNKS: Final[FieldLayout] = _flat_over_chunks
BATCHED: Final[FieldLayout] = batched_field()


def _str_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class VllmFamily:
    """How one audiogate family's prepared request reads in vLLM.

    :param family: the audiogate family name.
    :param architectures: the ``config.json`` architectures vLLM serves it under.
    :param keys: the per-item tensor names, sorted (as vLLM writes them).
    :param items: one clip's tensors, named as vLLM's ``MultiModalKwargsItem``.
    :param placeholder: one clip's placeholder range in the expanded prompt.
    :param modality: the ``features`` key (``"audio"``).
    :param wire: a tag of this layout, part of every ``mm_hash``: bump it when ``items``
        or ``placeholder`` change what they give.
    :param fields: per key, its field layout where it is not :data:`BATCHED`.
    :param content_format: how vLLM hands a message's content to the chat template:
        ``"openai"`` (the parts as they are: the template places each clip) or
        ``"string"`` (the template reads a string: vLLM puts every clip's placeholder
        first, each followed by a newline, then the message's text parts joined by
        newlines).
    :param max_clips: the most clips vLLM's model takes in one prompt, or ``None``.
    :param context_length: the text model's ``max_position_embeddings`` where
        ``config.json`` does not say (transformers' default for the family's text
        config, which vLLM's context length then is).
    """

    family: str
    architectures: tuple[str, ...] = attrs.field(converter=_str_tuple)
    keys: tuple[str, ...] = attrs.field(converter=_str_tuple)
    items: ItemTensors
    placeholder: PlaceholderRange
    modality: str = "audio"
    wire: str = "1"
    fields: Mapping[str, FieldLayout] = attrs.field(factory=dict)
    content_format: Literal["openai", "string"] = "openai"
    max_clips: int | None = None
    context_length: int = 32_768

    def field(self, key: str, array: np.ndarray) -> list[Any]:
        """The msgpack field of tensor ``key`` of one item."""
        return self.fields.get(key, BATCHED)(array)


def _span(prepared: PreparedRequest, clip: int) -> tuple[int, int]:
    start, stop = prepared.audio_spans[clip]
    return start, stop - start


def _qwen2audio_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    features = np.asarray(prepared.features[clip])
    mask = prepared.masks[clip]
    if mask is None:
        raise PluginError("qwen2audio prepared a clip without its frame mask")
    return {
        "input_features": features,
        "feature_attention_mask": np.asarray(mask).astype(np.int32),
    }


def _gemma3n_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    features = np.asarray(prepared.features[clip])
    mask = prepared.masks[clip]
    if mask is None:
        mask = np.ones(features.shape[0], dtype=bool)
    return {"input_features_padded": features, "input_features_mask": np.asarray(mask, bool)}


def _gemma3n_placeholder(prepared: PreparedRequest, clip: int) -> tuple[int, int]:
    # vLLM's range is the processor's whole replacement: the blank-line token before
    # <start_of_audio> (merged with a preceding newline into one token), the block, and
    # the blank-line token after <end_of_audio>.
    start, stop = prepared.audio_spans[clip]
    options = prepared.policy.options
    ids = prepared.input_ids
    boa, eoa = int(options["boa_token_id"]), int(options["eoa_token_id"])
    if start < 2 or stop + 2 > len(ids) or ids[start - 1] != boa or ids[stop] != eoa:
        raise PluginError(
            f"gemma3n clip {clip}: the audio block at {start}:{stop} is not wrapped in "
            "a newline token and <start_of_audio> ... <end_of_audio> and a newline token"
        )
    return start - 2, stop - start + 4


def _chunked_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    # Audio Flamingo 3 and GLM-ASR: the clip's 30 s chunks, each with its frame mask.
    features = np.asarray(prepared.features[clip])
    mask = prepared.masks[clip]
    if features.ndim != 3 or mask is None:
        raise PluginError(
            f"{prepared.family} prepared clip {clip} as {features.shape} without chunk masks"
        )
    return {
        "input_features": features,
        "feature_attention_mask": np.asarray(mask).astype(np.int32),
        "chunk_counts": np.asarray(features.shape[0], dtype=np.int64),
    }


def _granitespeech_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    features = np.asarray(prepared.features[clip])
    start, stop = prepared.audio_spans[clip]
    return {
        "input_features": features,
        "audio_embed_sizes": np.asarray(stop - start, dtype=np.int64),
    }


def _voxtral_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    # vLLM's Voxtral computes its log-mel inside the model: the item is the clip's
    # normalized 16 kHz waveform, zero-padded to whole 30 s chunks (one per 3000 frames
    # of the features audiogate prepared, so the lengths agree with the placeholders).
    batch = prepared.batch
    if batch is None:
        raise PluginError("voxtral prepared audio without its clips")
    waveform = np.asarray(batch.clips[clip].waveform, dtype=np.float32).reshape(-1)
    features = np.asarray(prepared.features[clip])
    chunks = features.shape[0] if features.ndim == 3 else 1
    samples = chunks * _VOXTRAL_CHUNK_SAMPLES
    if waveform.shape[0] > samples:
        raise PluginError(
            f"voxtral clip {clip}: {waveform.shape[0]} samples for {chunks} chunks of 30 s"
        )
    padded = np.zeros(samples, dtype=np.float32)
    padded[: waveform.shape[0]] = waveform
    return {"audio_arrays": padded}


#: Voxtral's chunk: 30 s at 16 kHz.
_VOXTRAL_CHUNK_SAMPLES: Final = 480_000


def _omni_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    # The Omni thinkers: only the valid frames travel ([mel, frames]), with the padded
    # frame mask and the frame count kept on the CPU (vLLM's _postprocess_hf_mm_data).
    features = np.asarray(prepared.features[clip])
    mask = prepared.masks[clip]
    if features.ndim != 2 or mask is None:
        raise PluginError(
            f"{prepared.family} prepared clip {clip} as {features.shape} without a frame mask"
        )
    valid = np.asarray(mask, dtype=bool).reshape(-1)
    return {
        "input_audio_features": features[:, valid],
        "feature_attention_mask": valid.astype(np.int32),
        "audio_feature_lengths": np.asarray(int(valid.sum()), dtype=np.int64),
    }


def _qwen3omni_items(prepared: PreparedRequest, clip: int) -> Mapping[str, np.ndarray]:
    # As Qwen2.5-Omni's, but vLLM's Qwen3-Omni frame mask is the unpadded float one.
    items = dict(_omni_items(prepared, clip))
    items["feature_attention_mask"] = items["feature_attention_mask"].astype(np.float32)
    return items


_OMNI_FIELDS: Final[Mapping[str, FieldLayout]] = {
    "input_audio_features": _flat_over_frames,
    "feature_attention_mask": batched_field(keep_on_cpu=True),
    "audio_feature_lengths": batched_field(keep_on_cpu=True),
}

_CHUNK_FIELDS: Final[Mapping[str, FieldLayout]] = {
    "input_features": FLAT_CHUNKS,
    "feature_attention_mask": FLAT_CHUNKS,
    "chunk_counts": batched_field(keep_on_cpu=True),
}

QWEN2AUDIO: Final = VllmFamily(
    family="qwen2audio",
    architectures=("Qwen2AudioForConditionalGeneration",),
    keys=("feature_attention_mask", "input_features"),
    items=_qwen2audio_items,
    placeholder=_span,
)
GEMMA3N: Final = VllmFamily(
    family="gemma3n",
    architectures=("Gemma3nForConditionalGeneration",),
    keys=("input_features_mask", "input_features_padded"),
    items=_gemma3n_items,
    placeholder=_gemma3n_placeholder,
)

AUDIOFLAMINGO3: Final = VllmFamily(
    family="audioflamingo3",
    architectures=("AudioFlamingo3ForConditionalGeneration",),
    keys=("chunk_counts", "feature_attention_mask", "input_features"),
    items=_chunked_items,
    placeholder=_span,
    fields=_CHUNK_FIELDS,
    max_clips=1,
)
GLMASR: Final = VllmFamily(
    family="glmasr",
    architectures=("GlmAsrForConditionalGeneration",),
    keys=("chunk_counts", "feature_attention_mask", "input_features"),
    items=_chunked_items,
    placeholder=_span,
    fields=_CHUNK_FIELDS,
    context_length=8192,
)
GRANITESPEECH: Final = VllmFamily(
    family="granitespeech",
    architectures=("GraniteSpeechForConditionalGeneration",),
    keys=("audio_embed_sizes", "input_features"),
    items=_granitespeech_items,
    placeholder=_span,
    fields={"audio_embed_sizes": batched_field(keep_on_cpu=True)},
    content_format="string",
    max_clips=1,
    context_length=2048,
)

VOXTRAL: Final = VllmFamily(
    family="voxtral",
    architectures=("VoxtralForConditionalGeneration",),
    keys=("audio_arrays",),
    items=_voxtral_items,
    placeholder=_span,
    context_length=131_072,
)

QWEN25OMNI: Final = VllmFamily(
    family="qwen25omni",
    architectures=("Qwen2_5OmniForConditionalGeneration", "Qwen2_5OmniModel"),
    keys=("audio_feature_lengths", "feature_attention_mask", "input_audio_features"),
    items=_omni_items,
    placeholder=_span,
    fields=_OMNI_FIELDS,
)
QWEN3OMNI: Final = VllmFamily(
    family="qwen3omni",
    architectures=("Qwen3OmniMoeForConditionalGeneration",),
    keys=("audio_feature_lengths", "feature_attention_mask", "input_audio_features"),
    items=_qwen3omni_items,
    placeholder=_span,
    fields=_OMNI_FIELDS,
)

_lock = threading.Lock()
_table: dict[str, VllmFamily] = {
    adapter.family: adapter
    for adapter in (
        QWEN2AUDIO,
        GEMMA3N,
        AUDIOFLAMINGO3,
        GLMASR,
        GRANITESPEECH,
        VOXTRAL,
        QWEN25OMNI,
        QWEN3OMNI,
    )
}
_entry_points_loaded = False


def register_vllm_family(adapter: VllmFamily, *, replace: bool = False) -> None:
    """Add ``adapter`` to the table.

    :raises ValueError: the family has an adapter already (unless ``replace``).
    """
    with _lock:
        if adapter.family in _table and not replace:
            raise ValueError(f"family {adapter.family!r} already has a vLLM adapter")
        _table[adapter.family] = adapter


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    for entry in found:
        adapter: Any = entry.load()
        if not isinstance(adapter, VllmFamily):
            raise PluginError(
                f"entry point {entry.name!r} of {ENTRY_POINT_GROUP!r} is a "
                f"{type(adapter).__name__}, not a VllmFamily"
            )
        with _lock:
            _table.setdefault(adapter.family, adapter)


def vllm_families() -> dict[str, VllmFamily]:
    """Every family with a vLLM adapter, by name."""
    _load_entry_points()
    with _lock:
        return dict(_table)


def vllm_family(family: str) -> VllmFamily | None:
    """The adapter of ``family``, or ``None`` when vLLM does not serve it."""
    return vllm_families().get(family)
