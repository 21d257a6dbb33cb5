"""A drop-in for a model's transformers processor: :class:`AudiogateProcessor`.

Training and evaluation code calls a checkpoint's processor; swapping one line gives it
audiogate's decoding, budgets and typed refusals with the same ``BatchFeature``::

    processor = AudiogateProcessor.from_pretrained("models/qwen2-audio-7b-instruct")
    # was: processor = AutoProcessor.from_pretrained("models/qwen2-audio-7b-instruct")
    inputs = processor(text=prompt, audio=[waveform], sampling_rate=16_000, return_tensors="pt")
    model.generate(**inputs)

``inputs`` holds what the checkpoint's transformers processor returns: ``input_ids`` and
``attention_mask`` (int64, ``[shape=(texts, positions)]``) and the family's audio inputs
under the processor's names, shapes and dtypes (the family's collated inputs, which name
them as the model's forward takes them). What the processor itself adds or omits beyond
those (Gemma 3n's ``token_type_ids``; Phi-4 MM's mask, absent for one clip) is keyed by
the transformers processor class, never by the audiogate family (:data:`CONVENTIONS`).

How a call maps onto the gate (docs/transformers.md):

* ``processor(text=..., audio=...)``: each text is one request of the gate. The text is
  split at the family's audio token (the token the transformers processor expands), each
  occurrence becoming an audio part of one user message whose content is rendered as is
  (no chat template): the family then expands each part exactly as it expands an audio
  part of a chat request, from the text around it. Clips are given to the texts in order,
  as many as each text has audio tokens. Where the processor class expands the token in
  place (:attr:`ProcessorConventions.in_place`: Audio Flamingo 3), the text is the gate's
  plain prompt instead, which the family expands where the tokens are.
* ``processor.apply_chat_template(messages, tokenize=True, ...)``: the gate's chat path
  (the checkpoint's template renders with private sentinels in place of the audio parts).

Audio is a ``numpy`` waveform (with ``sampling_rate``), encoded bytes or a file path
(the caller's own file), or a list of them, one clip each; every clip is admitted,
decoded and resampled by the gate under its policy, so what transformers would truncate
or resample silently is a typed :class:`~audiogate.errors.AudioGateError` here.
transformers (the ``chat`` extra) is needed to load the tokenizer and build the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import numpy as np

from audiogate.acquire import acquire_bytes, acquire_paths
from audiogate.acquire.clip import EncodedClip
from audiogate.acquire.waveforms import WaveformLayout, waveform_clips
from audiogate.api import AudioGate
from audiogate.chat import AUDIO_PART_TYPES, ChatRequestError
from audiogate.decode.geometry import AUTO
from audiogate.errors import LimitError, PlaceholderError, PolicyError, RequestError
from audiogate.extras import require_module
from audiogate.policy import read_checkpoint_configs
from audiogate.request import PreparedRequest, TensorKind, convert_tensors

__all__ = ["CONVENTIONS", "AudiogateProcessor", "ProcessorConventions", "processor_class_name"]

#: ``mm_token_type_ids``' value at an audio position (transformers' ``ProcessorMixin``).
AUDIO_TOKEN_TYPE: Final = 3


@attrs.frozen(kw_only=True)
class ProcessorConventions:
    """What a transformers processor class returns beyond the tokenizer's ``input_ids`` and
    ``attention_mask`` and the family's collated audio inputs.

    :param token_type_ids: the key under which it returns per-position modality types
        (0 text, 3 audio), or ``None``.
    :param mask_for_many_clips: an audio mask key it returns only for more than one clip.
    :param in_place: it expands each audio token where the text has it, which the family's
        plain-prompt path does (its chat path moves audio where the chat template prints
        it: Audio Flamingo 3's to the start of the message).
    :param padding_side: the side it pads a batch of texts on whatever its tokenizer's
        ``padding_side`` says (``"left"``), or ``None``: the tokenizer's.
    :param padding: its ``padding`` when the caller gives none (``True``: it pads texts).
    :param return_tensors: its ``return_tensors`` when the caller gives none.
    """

    token_type_ids: str | None = None
    mask_for_many_clips: str | None = None
    in_place: bool = False
    padding_side: str | None = None
    padding: bool = False
    return_tensors: TensorKind | None = None


#: By transformers processor class name. ``Gemma3nProcessor`` returns its
#: ``mm_token_type_ids`` as ``token_type_ids`` (``return_mm_token_type_ids = True``);
#: ``Phi4MultimodalFeatureExtractor`` builds ``audio_attention_mask`` only when
#: ``len(feature_lengths) > 1``; ``AudioFlamingo3Processor`` and ``GlmAsrProcessor`` set
#: ``padding_side="left"`` in ``__call__`` unless the caller names one, and default to
#: ``padding=True`` and ``return_tensors="pt"`` (``text_kwargs``); the Qwen Omni
#: processors' ``text_kwargs`` pad on the left (transformers 5.24.0).
CONVENTIONS: Final[Mapping[str, ProcessorConventions]] = {
    "Gemma3nProcessor": ProcessorConventions(token_type_ids="token_type_ids"),
    "Phi4MultimodalProcessor": ProcessorConventions(mask_for_many_clips="audio_attention_mask"),
    "AudioFlamingo3Processor": ProcessorConventions(
        in_place=True, padding_side="left", padding=True, return_tensors="pt"
    ),
    "GlmAsrProcessor": ProcessorConventions(padding_side="left", padding=True, return_tensors="pt"),
    "Qwen2_5OmniProcessor": ProcessorConventions(padding_side="left"),
    "Qwen3OmniMoeProcessor": ProcessorConventions(padding_side="left"),
}

#: What one audio item may be: a waveform, encoded bytes, or a path to the caller's file.
AudioItem = Any
_TEXT_KEYS: Final = ("input_ids", "attention_mask")


def processor_class_name(model_type: object) -> str | None:
    """The transformers processor class ``AutoProcessor`` picks for ``model_type``, or
    ``None`` where transformers has none (a remote-code checkpoint)."""
    if not isinstance(model_type, str):
        return None
    processing_auto = require_module(
        "transformers.models.auto.processing_auto", purpose="AudiogateProcessor"
    )
    # Not re-exported (a lazy mapping's name table): read as the module's attribute.
    names: Mapping[str, Any] = getattr(processing_auto, "PROCESSOR_MAPPING_NAMES", {})
    name = names.get(model_type)
    return name if isinstance(name, str) else None


def _concatenated(messages: Sequence[Mapping[str, Any]]) -> str:
    """The messages' text as is, part after part: a processor's text is already rendered."""
    pieces: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces.extend(str(part.get("text", "")) for part in content)
    return "".join(pieces)


def _template_renderer(tokenizer: Any, options: Mapping[str, Any]) -> Callable[..., str]:
    def render(messages: Sequence[Mapping[str, Any]]) -> str:
        try:
            text = tokenizer.apply_chat_template(
                [dict(m) for m in messages], tokenize=False, **options
            )
        except Exception as exc:
            raise ChatRequestError(
                f"the chat template rejected the messages: {type(exc).__name__}: {exc}"
            ) from exc
        return str(text)

    return render


def _derived_gate(gate: AudioGate, renderer: Callable[..., str]) -> AudioGate:
    """``gate`` with another renderer: the same host, policy, tokenizer, budgets, worker,
    feature cache and store."""
    derived = AudioGate(
        host=gate.host,
        policy=gate.policy,
        tokenizer=gate.tokenizer,
        renderer=renderer,
        acquisition=gate.acquisition,
        worker=gate.worker,
        max_prefill_tokens=gate.max_prefill_tokens,
        policy_source=gate.policy_source,
        feature_backend=gate.policy.feature_backend,
        max_prompt_text_bytes=gate.max_prompt_text_bytes,
        store=gate.store,
        source_wait_s=gate.source_wait_s,
    )
    derived.feature_cache = gate.feature_cache
    return derived


def _special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids ``tokenizer(text)`` adds before and after the text's own ids (a BOS, ...).

    :raises PolicyError: the tokenizer adds them inside the text's ids.
    """
    bare = [int(i) for i in tokenizer("a", add_special_tokens=False)["input_ids"]]
    full = [int(i) for i in tokenizer("a")["input_ids"]]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    raise PolicyError(
        f"its tokenizer's special tokens do not wrap the text ({bare} became {full})",
        file="tokenizer",
    )


class AudiogateProcessor:
    """A model's transformers processor, computed by an :class:`~audiogate.api.AudioGate`.

    :param gate: the gate of the checkpoint (its tokenizer is required).
    :param processor_class: the transformers processor class whose output this matches
        (``"Qwen2AudioProcessor"``), for its :data:`CONVENTIONS`; ``None``: none.
    :raises PolicyError: the gate has no tokenizer, or its tokenizer's special tokens or
        audio token cannot be found.
    """

    def __init__(self, gate: AudioGate, *, processor_class: str | None = None) -> None:
        if gate.tokenizer is None:
            raise PolicyError(
                "a processor needs the checkpoint's tokenizer, and this gate has none",
                file=gate.policy_source or None,
            )
        self.gate = gate
        self.tokenizer: Any = gate.tokenizer
        self.processor_class = processor_class
        self.conventions = CONVENTIONS.get(processor_class or "", ProcessorConventions())
        #: The token the transformers processor expands into the clip's audio positions.
        self.audio_token = self._audio_token()
        self._prefix, self._suffix = _special_tokens(self.tokenizer)
        self._text_gate = _derived_gate(gate, _concatenated)
        self._chat_gates: dict[tuple[bool, bool | str], AudioGate] = {}

    @classmethod
    def from_pretrained(
        cls, model_dir: str | os.PathLike[str], **options: Any
    ) -> AudiogateProcessor:
        """Load the checkpoint directory like ``AutoProcessor.from_pretrained`` (offline;
        its policy, tokenizer and chat template, as :meth:`AudioGate.from_model_dir`).

        :param options: :meth:`AudioGate.from_model_dir`'s options (``worker``,
            ``acquisition``, ``max_prefill_tokens``, ...).
        :raises PolicyError: the checkpoint cannot serve, or transformers has no processor
            for its ``model_type`` (a remote-code checkpoint such as Phi-4 MM's original).
        """
        require_module("transformers", purpose="AudiogateProcessor", hint="or use AudioGate")
        model_type = read_checkpoint_configs(model_dir).model.get("model_type")
        name = processor_class_name(model_type)
        if name is None:
            raise PolicyError(
                f"transformers has no processor for model_type {model_type!r}; "
                "use AudioGate.from_model_dir for this checkpoint",
                file=str(Path(model_dir) / "config.json"),
            )
        return cls(AudioGate.from_model_dir(model_dir, **options), processor_class=name)

    # --- calls -----------------------------------------------------------------------

    def __call__(
        self,
        text: str | Sequence[str] | None = None,
        audio: AudioItem | Sequence[AudioItem] | None = None,
        *,
        audios: AudioItem | Sequence[AudioItem] | None = None,
        sampling_rate: int | None = None,
        return_tensors: TensorKind | None = None,
        padding: bool | str | None = None,
        add_special_tokens: bool = True,
        layout: WaveformLayout | None = None,
        **unsupported: Any,
    ) -> Any:
        """Prepare ``text`` (one prompt, or a list of prompts) and its audio.

        :param text: rendered prompt text holding the family's audio token
            (:attr:`audio_token`) once per clip.
        :param audio: one clip or a list of clips, given to the texts' audio tokens in
            order: a waveform (``numpy``, ``sampling_rate`` required; 2-D with
            ``layout``), encoded bytes, or a path. ``audios`` is the older name.
        :param padding: ``True`` / ``"longest"`` pads the texts' ids to the longest, on the
            processor class's side (else the tokenizer's); ``False`` refuses texts of
            different lengths as tensors;
            ``None``: the processor class's default (:data:`CONVENTIONS`), as is
            ``return_tensors=None``. The audio inputs are never padded to the longest
            clip (the encoders take whole windows).
        :param add_special_tokens: what ``tokenizer(text)`` adds (a BOS), as the
            transformers processor tokenizes.
        :returns: a ``transformers.BatchFeature``.
        :raises TypeError: an argument transformers' processor takes but audiogate does
            not (``truncation``, ``max_length``: audiogate refuses instead).
        :raises AudioGateError: a typed refusal (audio, limits, placeholders).
        """
        self._refuse(unsupported)
        if audio is not None and audios is not None:
            raise TypeError("give audio= or audios=, not both")
        audio = audio if audio is not None else audios
        if text is None:
            raise TypeError("give text=: the prompt with the audio token where each clip goes")
        texts = [text] if isinstance(text, str) else list(text)
        if not texts or not all(isinstance(t, str) for t in texts):
            raise TypeError("text must be a string or a non-empty list of strings")
        clips = self._clips(audio, sampling_rate=sampling_rate, layout=layout)
        counts = [t.count(self.audio_token) for t in texts]
        if sum(counts) != len(clips):
            raise PlaceholderError(
                f"the text holds {sum(counts)} audio token(s) {self.audio_token!r} but "
                f"{len(clips)} clip(s) were given"
            )
        results = []
        start = 0
        for one, count in zip(texts, counts, strict=True):
            given = _renumbered(clips[start : start + count])
            start += count
            if self.conventions.in_place:
                results.append(self._text_gate.prepare(prompt=one, clips=given or None))
            else:
                results.append(self._text_gate.prepare(self._messages(one), clips=given or None))
        return self._batch(results, [add_special_tokens] * len(results), return_tensors, padding)

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]],
        *,
        tokenize: bool = False,
        return_dict: bool = False,
        return_tensors: TensorKind | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        padding: bool | str | None = None,
        sampling_rate: int | None = None,
        **unsupported: Any,
    ) -> Any:
        """The chat template, as the transformers processor applies it.

        Without ``tokenize``, the template's text (audio parts rendered as the template
        renders them). With it, the gate's chat path: ``{"type": "audio", "audio": ...}``
        parts (a waveform at ``sampling_rate``, by default the policy's rate as
        transformers assumes; bytes) and ``{"type": "audio", "path": ...}`` parts are
        read here; OpenAI-style parts (``input_audio``, ``audio_url``, ``audio_ref``) and
        ``{"type": "audio", "url": ...}`` are acquired by the gate under its acquisition
        policy. A conversation mixes neither kind with the other.

        :returns: the text (or texts); with ``tokenize``, the ``input_ids`` (one row per
            conversation, also for one), or with ``return_dict`` the ``BatchFeature``.
        """
        self._refuse(unsupported)
        batched = bool(conversation) and not isinstance(conversation[0], Mapping)
        given: Any = conversation
        conversations: list[Sequence[Mapping[str, Any]]] = (
            [list(c) for c in given] if batched else [given]
        )
        options: dict[str, Any] = {
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
        }
        if not tokenize:
            render = _template_renderer(self.tokenizer, options)
            texts = [render(c) for c in conversations]
            return texts if batched else texts[0]
        gate = self._chat_gate(add_generation_prompt, continue_final_message)
        bos = getattr(self.tokenizer, "bos_token", None)
        results, specials = [], []
        for messages in conversations:
            converted, clips = self._chat_audio(messages, sampling_rate=sampling_rate)
            result = gate.prepare(converted, clips=clips)
            results.append(result)
            # transformers' rule: a rendered prompt starting with the BOS gets no more.
            specials.append(not (bos and (result.text or "").startswith(bos)))
        out = self._batch(results, specials, return_tensors, padding)
        # transformers returns the ids of one conversation as a batch of one too.
        return out if return_dict else out["input_ids"]

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        """The tokenizer's ``decode``."""
        return self.tokenizer.decode(*args, **kwargs)

    def batch_decode(self, *args: Any, **kwargs: Any) -> Any:
        """The tokenizer's ``batch_decode``."""
        return self.tokenizer.batch_decode(*args, **kwargs)

    # --- steps -----------------------------------------------------------------------

    def _audio_token(self) -> str:
        options = self.gate.policy.options
        named = options.get("audio_token") or getattr(self.tokenizer, "audio_token", None)
        if isinstance(named, str) and named:
            return named
        for key in ("audio_token_id", "audio_token_index"):
            value = options.get(key)
            if isinstance(value, int):
                token = self.tokenizer.convert_ids_to_tokens(value)
                if isinstance(token, str) and token:
                    return token
        raise PolicyError(
            "the audio policy names no audio token (options audio_token, audio_token_id)",
            file=self.gate.policy_source or None,
        )

    def _refuse(self, unsupported: Mapping[str, Any]) -> None:
        if unsupported:
            names = ", ".join(sorted(unsupported))
            raise TypeError(
                f"AudiogateProcessor does not take {names}: audiogate never truncates or "
                f"pads audio silently (a typed error says which limit a request exceeds)"
            )

    def _chat_gate(
        self, add_generation_prompt: bool, continue_final_message: bool | str
    ) -> AudioGate:
        key = (add_generation_prompt, continue_final_message)
        gate = self._chat_gates.get(key)
        if gate is None:
            options = {
                "add_generation_prompt": add_generation_prompt,
                "continue_final_message": continue_final_message,
            }
            gate = self._chat_gates[key] = _derived_gate(
                self.gate, _template_renderer(self.tokenizer, options)
            )
        return gate

    def _messages(self, text: str) -> list[dict[str, Any]]:
        """``text`` as one message of text parts and audio parts (at the audio tokens)."""
        parts: list[dict[str, Any]] = []
        pieces = text.split(self.audio_token)
        for index, piece in enumerate(pieces):
            if piece:
                parts.append({"type": "text", "text": piece})
            if index + 1 < len(pieces):
                parts.append({"type": "input_audio"})
        return [{"role": "user", "content": parts}]

    def _clips(
        self, audio: Any, *, sampling_rate: int | None, layout: WaveformLayout | None
    ) -> list[EncodedClip]:
        if audio is None:
            return []
        items = list(audio) if isinstance(audio, list | tuple) else [audio]
        policy = self.gate.acquisition
        if len(items) > policy.max_clips:
            raise LimitError("clip count", actual=len(items), maximum=policy.max_clips)
        clips: list[EncodedClip] = []
        for index, item in enumerate(items):
            if isinstance(item, np.ndarray):
                rate: Any = sampling_rate
                (clip,) = waveform_clips(item, sampling_rate=rate, policy=policy, layout=layout)
            elif isinstance(item, bytes | bytearray | memoryview):
                (clip,) = acquire_bytes([item], policy=policy, source_format=AUTO)
            elif isinstance(item, str | os.PathLike):
                (clip,) = acquire_paths([item], policy=policy, source_format=AUTO)
            else:
                raise TypeError(
                    f"audio item {index + 1} is a {type(item).__name__}; give a numpy "
                    f"waveform, encoded bytes or a file path"
                )
            clips.append(attrs.evolve(clip, ordinal=index + 1))
        total = sum(len(clip.data or b"") for clip in clips)
        if total > policy.max_bytes_per_request:
            raise LimitError(
                "encoded bytes per request", actual=total, maximum=policy.max_bytes_per_request
            )
        return clips

    def _chat_audio(
        self, messages: Sequence[Mapping[str, Any]], *, sampling_rate: int | None
    ) -> tuple[list[Mapping[str, Any]], list[EncodedClip] | None]:
        """transformers' ``{"type": "audio"}`` parts as audio parts of the gate, and the
        clips this process reads for them (``None``: the gate acquires them)."""
        converted: list[Mapping[str, Any]] = []
        local: list[Any] = []
        remote = 0
        for message in messages:
            content = message.get("content") if isinstance(message, Mapping) else None
            if not isinstance(content, list):
                converted.append(message)
                continue
            parts: list[Any] = []
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind in AUDIO_PART_TYPES:
                    remote += 1
                    parts.append(part)
                elif kind == "audio" and "url" in part:
                    remote += 1
                    parts.append({"type": "audio_url", "audio_url": {"url": part["url"]}})
                elif kind == "audio":
                    payload = part.get("audio", part.get("path"))
                    if payload is None:
                        raise ChatRequestError("an audio part needs 'audio', 'path' or 'url'")
                    local.append(payload)
                    parts.append({"type": "input_audio"})
                else:
                    parts.append(part)
            converted.append({**message, "content": parts})
        if local and remote:
            raise ChatRequestError(
                "a conversation gives audio either in this process ('audio', 'path') or for "
                "the gate to acquire ('url', input_audio, audio_url, audio_ref), not both"
            )
        if not local:
            return converted, None
        rate = sampling_rate if sampling_rate is not None else self.gate.policy.target_rate_hz
        return converted, self._clips(local, sampling_rate=rate, layout=None)

    def _batch(
        self,
        results: Sequence[PreparedRequest],
        specials: Sequence[bool],
        return_tensors: TensorKind | None,
        padding: bool | str | None,
    ) -> Any:
        """One ``BatchFeature`` of the requests' ids (wrapped in the tokenizer's special
        tokens where ``specials``), padded, and their audio inputs collated together."""
        transformers = require_module("transformers", purpose="AudiogateProcessor")
        if padding is None:
            padding = self.conventions.padding
        if return_tensors is None:
            return_tensors = self.conventions.return_tensors
        if padding not in (False, True, "longest", "do_not_pad"):
            raise ValueError(f"padding must be True, False or 'longest', not {padding!r}")
        rows: list[list[int]] = []
        types: list[list[int]] = []
        for result, special in zip(results, specials, strict=True):
            prefix, suffix = (self._prefix, self._suffix) if special else ([], [])
            rows.append([*prefix, *result.input_ids, *suffix])
            kinds = [0] * len(rows[-1])
            for start, stop in result.audio_spans:
                kinds[len(prefix) + start : len(prefix) + stop] = [AUDIO_TOKEN_TYPE] * (
                    stop - start
                )
            types.append(kinds)
        masks = [[1] * len(row) for row in rows]
        longest = max(len(row) for row in rows)
        if padding in (True, "longest") and any(len(row) != longest for row in rows):
            pad_id = self.tokenizer.pad_token_id
            if pad_id is None:
                raise ValueError("padding needs a pad token, and the tokenizer has none")
            side = self.conventions.padding_side or getattr(self.tokenizer, "padding_side", "right")
            left = side == "left"
            for values, fill in ((rows, int(pad_id)), (masks, 0), (types, 0)):
                for index, row in enumerate(values):
                    extra = [fill] * (longest - len(row))
                    values[index] = [*extra, *row] if left else [*row, *extra]
        elif return_tensors is not None and any(len(row) != longest for row in rows):
            raise ValueError(
                "the texts tokenize to different lengths; pass padding=True to batch them"
            )
        data: dict[str, Any] = {"input_ids": rows, "attention_mask": masks}
        if self.conventions.token_type_ids is not None:
            data[self.conventions.token_type_ids] = types
        audio = self._audio_inputs(results)
        convert = convert_tensors(return_tensors)
        if return_tensors is not None:
            data = {key: convert(np.asarray(value, dtype=np.int64)) for key, value in data.items()}
        data.update({key: convert(value) for key, value in audio.items()})
        return transformers.BatchFeature(data=data)

    def _audio_inputs(self, results: Sequence[PreparedRequest]) -> dict[str, Any]:
        with_audio = [r for r in results if r.batch is not None and r.batch.clips]
        if not with_audio:
            return {}
        if len(results) == 1:
            inputs = dict(with_audio[0].model_inputs)
        else:
            for result in with_audio:
                assert result.batch is not None
                derived = set(result.model_inputs) - set(result.batch.inputs.inputs)
                if derived:
                    raise RequestError(
                        f"the {result.family} family derives {', '.join(sorted(derived))} "
                        f"from each prompt; prepare its texts one at a time"
                    )
            clips = [c.features for r in with_audio if r.batch for c in r.batch.clips]
            policy = self.gate.policy
            inputs = dict(self.gate.host.collate_features(policy, clips).inputs)
        count = sum(len(r.batch.clips) for r in with_audio if r.batch is not None)
        many = self.conventions.mask_for_many_clips
        if many is not None and count == 1:
            inputs.pop(many, None)
        return inputs


def _renumbered(clips: Sequence[EncodedClip]) -> list[EncodedClip]:
    return [attrs.evolve(clip, ordinal=index + 1) for index, clip in enumerate(clips)]
