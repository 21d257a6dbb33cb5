"""The public entry point: one :class:`AudioGate` per loaded model, chat messages in,
model-ready token ids and features out.

Every server path goes through :meth:`AudioGate.prepare_async` (or the blocking
:meth:`AudioGate.prepare`)::

    gate = AudioGate.from_model_dir("models/gemma-3n-e4b-it")
    result = gate.prepare(messages)            # OpenAI-style chat messages
    model(input_ids=result.input_ids, **result.model_inputs)  # as tensors of your framework

Each call opens one :class:`~audiogate.request.Request` and closes it when it returns;
the request owns the steps: validate and flatten the messages (media parts become
private sentinels), render the checkpoint's chat template and parse the sentinels back
(failing closed), all before any audio is acquired; then acquire the audio under hard
ceilings, preflight every budget from headers, decode → resample → features, expand the
sentinels with the family's placeholders, and check that the prompt holds exactly as
many audio positions as the features produce. Waveforms already in memory go to
:meth:`AudioGate.prepare_waveforms`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from audiogate.acquire import AcquisitionPolicy
from audiogate.acquire.waveforms import WaveformLayout, waveform_clips
from audiogate.cache import FeatureCache, FeatureStore
from audiogate.cancel import CancelToken, cancellable
from audiogate.chat import (
    MAX_PROMPT_TEXT_BYTES,
    ChatRequestError,
    renders_parts,
)
from audiogate.chat.prompt_text import prompt_text_limit
from audiogate.decode.geometry import AUTO, SourceFormat
from audiogate.errors import (
    AudioGateError,
    PlaceholderError,
    PluginError,
    PolicyError,
    RequestError,
    SourceStoreMissingError,
)
from audiogate.extras import require_module
from audiogate.host import FamilyHost, create_host
from audiogate.pipeline import EncodedClip, Progress
from audiogate.policy import (
    AudioPolicy,
    FeatureBackend,
    check_tokenizer_files,
    read_checkpoint_configs,
)
from audiogate.records import (
    ClipSlot,
    MediaSegment,
    PromptSegment,
    TextSegment,
)
from audiogate.request import (
    PreparedRequest,
    Request,
    TensorKind,
    check_audio_positions,
    convert_tensors,
)
from audiogate.store import ANONYMOUS_OWNER, AddedSource, Scope, SourceStatus, SourceStore
from audiogate.worker import AudioWorker

if TYPE_CHECKING:
    from collections.abc import AsyncIterable

    from audiogate.budget import ByteBudget
    from audiogate.pipeline.prepared import PreparedClip

__all__ = ["AudioGate", "PreparedRequest", "Renderer", "load_tokenizer"]

#: ``renderer(messages) -> prompt text``; by default the tokenizer's chat template.
Renderer = Callable[[Sequence[Mapping[str, Any]]], str]


def load_tokenizer(model_dir: str | os.PathLike[str]) -> Any | None:
    """The model directory's tokenizer and chat template, offline, never running remote
    code; ``None`` when the directory has no tokenizer files.

    :raises PolicyError: the tokenizer files are there but cannot be loaded.
    :raises MissingExtraError: transformers (the ``chat`` extra) is not installed to read
        them: a gate without the checkpoint's tokenizer would give no token ids and no
        chat template.

    A ``tokenizer.json`` is loaded directly as a fast tokenizer: ``AutoTokenizer`` would
    follow ``config.json``'s ``auto_map`` (Phi-4 MM's names a hub repository and asks to
    run custom code), which a server must never do.
    """
    root = Path(model_dir)
    if not check_tokenizer_files(root):
        return None
    transformers = require_module(
        "transformers",
        purpose=f"reading the tokenizer files of {root}",
        hint="or pass tokenizer= to AudioGate",
    )
    try:
        if (root / "tokenizer.json").exists():
            # Only the fast tokenizer class: ``AutoTokenizer`` imports transformers' model
            # configuration code and, through it, torch (most of a second).
            tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(
                str(root), local_files_only=True
            )
        else:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                str(root), local_files_only=True, trust_remote_code=False
            )
    except Exception as exc:
        # A broken tokenizer file is a bad checkpoint, like a broken config file.
        raise PolicyError(
            f"its tokenizer cannot be loaded: {type(exc).__name__}: {exc}", file=str(root)
        ) from exc
    _check_chat_template(tokenizer, root)
    return tokenizer


def _check_chat_template(tokenizer: Any, root: Path) -> None:
    """Compile the tokenizer's chat template(s) now: one that cannot compile would
    otherwise pass start-up and fail every chat request as if the client were wrong.

    :raises PolicyError: a template that is not text or does not compile.
    """
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        return
    named = template if isinstance(template, Mapping) else {"": template}
    compile_template: Callable[[str], Any] | None
    try:
        from transformers.utils.chat_template_utils import (
            _compile_jinja_template as compile_template,
        )
    except ImportError:  # moved in another transformers version: checked when first used
        compile_template = None
    for name, text in named.items():
        which = f"its chat template {name!r}" if name else "its chat template"
        if not isinstance(text, str):
            raise PolicyError(
                f"{which} must be text, got {type(text).__name__}",
                file=str(root),
            )
        if compile_template is None:
            continue
        try:
            compile_template(text)  # what apply_chat_template runs (and caches)
        except Exception as exc:
            raise PolicyError(
                f"{which} does not compile: {type(exc).__name__}: {exc}",
                file=str(root),
            ) from exc


class AudioGate:
    """The audio boundary of one loaded model.

    :param host: the plugin host.
    :param policy: the model's audio policy.
    :param tokenizer: a Hugging Face tokenizer (chat template and text tokens), or ``None``.
    :param renderer: renders chat messages to prompt text (default: the tokenizer's
        template); called on the event loop of :meth:`prepare_async`.
    :param acquisition: ceilings and destination policy for audio sources.
    :param worker: a bounded worker to run the CPU work on (default: the calling thread).
    :param max_prefill_tokens: refuse prompts longer than this (``context_limit``).
    :param max_prompt_text_bytes: refuse chat messages (or a plain prompt) with more text
        than this (UTF-8 bytes, ``context_limit``) before any template or tokenizer sees
        them; lowered to ``max_prefill_tokens`` times the tokenizer's longest token
        (:func:`audiogate.chat.prompt_text.prompt_text_limit`).
    :param policy_source: shown in summaries (the model directory or ``--family NAME``).
    :param feature_backend: ``"numpy"`` (default) or ``"mlx"`` (``pip install
        'audiogate[mlx]'``); overridable per call.
    :param feature_cache_bytes: without a worker, the budget of this gate's feature cache
        (``0``, the default: none); with one, the worker's cache is used (give the budget
        to :class:`~audiogate.worker.AudioWorker`).
    :param feature_store: the persistent tier of this gate's feature cache.
    :param store: the source store ``audio_ref`` parts (and the family's text references,
        such as Qwen2-Audio's ``[audio:<sha256>]``) are resolved through
        (docs/sources.md); without one, such a part is refused.
    :param source_wait_s: how long a reference to a processing source waits (default:
        the store's).
    """

    def __init__(
        self,
        *,
        host: FamilyHost,
        policy: AudioPolicy,
        tokenizer: Any | None = None,
        renderer: Renderer | None = None,
        acquisition: AcquisitionPolicy | None = None,
        worker: AudioWorker | None = None,
        max_prefill_tokens: int | None = None,
        policy_source: str = "",
        feature_backend: FeatureBackend = "numpy",
        max_prompt_text_bytes: int = MAX_PROMPT_TEXT_BYTES,
        feature_cache_bytes: int = 0,
        feature_store: FeatureStore | None = None,
        store: SourceStore | None = None,
        source_wait_s: float | None = None,
    ) -> None:
        self.store = store
        self.source_wait_s = source_wait_s
        if worker is not None and (feature_cache_bytes or feature_store is not None):
            raise TypeError(
                "a gate with a worker uses the worker's feature cache: pass "
                "feature_cache_bytes and feature_store to AudioWorker"
            )
        #: Prepared clips by source digest and policy: the worker's, or this gate's own.
        self.feature_cache = (
            worker.feature_cache
            if worker is not None
            else FeatureCache(feature_cache_bytes, store=feature_store)
        )
        self.host = host
        self.policy = attrs.evolve(policy, feature_backend=feature_backend)
        host.check_feature_backend(policy.family, self.policy.feature_backend)
        self.tokenizer = tokenizer
        self.renderer = renderer
        self.acquisition = (acquisition or AcquisitionPolicy()).narrowed(policy)
        self.worker = worker
        self.max_prefill_tokens = max_prefill_tokens
        self.policy_source = policy_source
        #: The prompt text bytes a request may carry (checked before rendering).
        self.max_prompt_text_bytes = prompt_text_limit(
            max_prefill_tokens=max_prefill_tokens, tokenizer=tokenizer, cap=max_prompt_text_bytes
        )

    # --- construction ----------------------------------------------------------------

    @classmethod
    def from_model_dir(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        host: FamilyHost | None = None,
        tokenizer: Any | None = None,
        **options: Any,
    ) -> AudioGate:
        """Load a checkpoint directory: its policy (from its own config files) and its
        tokenizer (``AutoTokenizer``, offline) unless one is given.

        :raises PolicyError: the checkpoint cannot serve: an invalid or unreadable config
            or tokenizer file, a chat template that does not compile, or a tokenizer
            that the family's expansion of one probe clip refuses (token ids that
            contradict it).
        """
        host = host or create_host()
        configs = read_checkpoint_configs(model_dir)
        family = host.family_for_model_type(configs.model.get("model_type"))
        policy = host.parse_policy(family.spec.name, configs)
        if tokenizer is None:
            tokenizer = load_tokenizer(model_dir)
        gate = cls(
            host=host, policy=policy, tokenizer=tokenizer, policy_source=str(model_dir), **options
        )
        if tokenizer is not None:
            gate._probe_expansion()
        return gate

    @classmethod
    def from_family(
        cls, family: str, *, host: FamilyHost | None = None, **options: Any
    ) -> AudioGate:
        """A family's pinned defaults, without a checkpoint (no tokenizer unless given)."""
        host = host or create_host()
        return cls(
            host=host,
            policy=host.default_policy(family),
            policy_source=f"--family {family}",
            **options,
        )

    # --- preparing -------------------------------------------------------------------

    def request(
        self,
        messages: Sequence[Mapping[str, Any]] | None = None,
        *,
        prompt: str | None = None,
        clips: Sequence[EncodedClip] | None = None,
        cancel: CancelToken | None = None,
        return_tensors: TensorKind | None = None,
        progress: Progress | None = None,
        feature_backend: FeatureBackend | None = None,
        owner: str = ANONYMOUS_OWNER,
    ) -> Request:
        """Open one request (:class:`~audiogate.request.Request`) for a caller that drives
        it itself: ``with gate.request(messages) as request: result = request.run()``
        (or ``await request.run_async()``); its owner closes it once. The arguments are
        :meth:`prepare_async`'s."""
        return Request(
            self,
            messages,
            prompt=prompt,
            clips=clips,
            cancel=cancel,
            return_tensors=return_tensors,
            progress=progress,
            feature_backend=feature_backend,
            owner=owner,
        )

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]] | None = None,
        *,
        prompt: str | None = None,
        clips: Sequence[EncodedClip] | None = None,
        cancel: CancelToken | None = None,
        return_tensors: TensorKind | None = None,
        progress: Progress | None = None,
        feature_backend: FeatureBackend | None = None,
        owner: str = ANONYMOUS_OWNER,
    ) -> PreparedRequest:
        """Blocking :meth:`prepare_async` (for CLIs, tests and threaded servers): the chat
        template renders before the audio is acquired, then the audio is prepared.

        Without a worker, everything runs in the calling thread, with no event loop or
        thread of its own (a request with a URL part runs its acquisition on an event loop
        of its own); with one, the calling thread submits to it and waits. The checks,
        errors and metrics are :meth:`prepare_async`'s.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "AudioGate.prepare() called inside an event loop; await prepare_async()"
            )
        return Request(
            self,
            messages,
            prompt=prompt,
            clips=clips,
            cancel=cancel,
            return_tensors=return_tensors,
            progress=progress,
            feature_backend=feature_backend,
            owner=owner,
        ).run_and_close()

    async def prepare_async(
        self,
        messages: Sequence[Mapping[str, Any]] | None = None,
        *,
        prompt: str | None = None,
        clips: Sequence[EncodedClip] | None = None,
        cancel: CancelToken | None = None,
        return_tensors: TensorKind | None = None,
        progress: Progress | None = None,
        feature_backend: FeatureBackend | None = None,
        owner: str = ANONYMOUS_OWNER,
    ) -> PreparedRequest:
        """Prepare chat ``messages`` (or a plain ``prompt`` with ``clips``).

        With messages, the chat template renders first (audio parts as sentinels), and only
        then is audio acquired, from their ``input_audio`` / ``audio_url`` parts, unless
        ``clips`` are given too: then the audio parts only mark positions and are matched
        with ``clips`` in order (for callers that acquire audio themselves). With a plain
        prompt, the prompt is used as is (the family's own placeholder rules apply; absent
        placeholders are inserted). Cancelling the awaiting task cancels acquisition and
        processing.

        :param return_tensors: ``"np"``, ``"mlx"`` or ``"pt"`` (torch tensors, each a copy
            of its read-only array, which the caller may write to); by default what the
            backend computed.
        :param progress: ``progress(stage, clip_index, clip_count)`` (in-thread runs only).
        :param feature_backend: ``"numpy"`` or ``"mlx"`` for this call (default: the gate's).
        :param owner: who asks: stored sources are resolved as this owner sees them
            (its own, and shared ones); the leases are held until this call returns.
        :raises AudioGateError: a typed error; nothing is silently dropped.

        With a worker, every request is counted once in its metrics when it ends
        (:meth:`audiogate.request.Request.close`): completed, cancelled, or under its
        error's reason. A text-only success is not counted (it is not an audio request).
        """
        return await Request(
            self,
            messages,
            prompt=prompt,
            clips=clips,
            cancel=cancel,
            return_tensors=return_tensors,
            progress=progress,
            feature_backend=feature_backend,
            owner=owner,
        ).run_async_and_close()

    @functools.cached_property
    def _source_reference(self) -> re.Pattern[str] | None:
        return self.host.family(self.policy.family).spec.source_reference

    def prepare_waveforms(
        self,
        audio: Any,
        *,
        sampling_rate: int,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        layout: WaveformLayout | None = None,
        cancel: CancelToken | None = None,
        return_tensors: TensorKind | None = None,
        feature_backend: FeatureBackend | None = None,
    ) -> PreparedRequest:
        """Prepare waveforms already in memory, as a transformers feature extractor takes
        them: ``gate.prepare_waveforms(array, sampling_rate=16_000, prompt=...)``.

        :param audio: one ``numpy.ndarray`` or a list of them (one clip each): dtype
            ``float32``, ``float64`` (cast to float32) or ``int16``; ``[shape=(samples,)]``
            mono, or 2-D with ``layout`` (:mod:`audiogate.acquire.waveforms`).
        :param sampling_rate: the waveforms' rate in Hz; the policy admits it or not, and
            the family resamples it, as for a decoded clip.
        :param prompt: a plain prompt placing the clips (the family's placeholders; absent
            ones are inserted); :meth:`chat_prompt` wraps text in the chat template.
        :param messages: chat messages instead, whose audio parts mark the clips' places
            in order (their sources are not read).
        :param layout: ``"channels_first"`` (``(channels, samples)``) or
            ``"channels_last"`` (``(samples, channels)``), for 2-D waveforms.
        :raises AcquisitionError: an array that is not a waveform (origin ``"waveform"``).
        :raises AudioGateError: what :meth:`prepare` raises for the same audio as a WAV.
        """
        clips = waveform_clips(
            audio,
            sampling_rate=sampling_rate,
            policy=self.acquisition,
            layout=layout,
            cancel=cancel,
        )
        return self.prepare(
            messages,
            prompt=prompt,
            clips=clips,
            cancel=cancel,
            return_tensors=return_tensors,
            feature_backend=feature_backend,
        )

    async def prepare_waveforms_async(
        self,
        audio: Any,
        *,
        sampling_rate: int,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        layout: WaveformLayout | None = None,
        cancel: CancelToken | None = None,
        return_tensors: TensorKind | None = None,
        feature_backend: FeatureBackend | None = None,
    ) -> PreparedRequest:
        """:meth:`prepare_waveforms` on the running event loop (the CPU work on the worker,
        or in a thread without one)."""
        clips = waveform_clips(
            audio,
            sampling_rate=sampling_rate,
            policy=self.acquisition,
            layout=layout,
            cancel=cancel,
        )
        return await self.prepare_async(
            messages,
            prompt=prompt,
            clips=clips,
            cancel=cancel,
            return_tensors=return_tensors,
            feature_backend=feature_backend,
        )

    # --- sources ---------------------------------------------------------------------

    @functools.cached_property
    def stream_budget(self) -> ByteBudget:
        """The bytes :meth:`prepare_stream` holds at once, over every stream of this gate
        (the worker's ``max_inflight_host_bytes``, or its default without a worker)."""
        from audiogate.budget import ByteBudget
        from audiogate.worker import WorkerLimits

        limits = self.worker.limits if self.worker is not None else WorkerLimits()
        return ByteBudget(limits.max_inflight_host_bytes, limit="in-flight stream bytes")

    async def prepare_stream(
        self,
        chunks: AsyncIterable[bytes],
        *,
        source_format: SourceFormat,
        cancel: CancelToken | None = None,
        feature_backend: FeatureBackend | None = None,
        incremental: bool = True,
    ) -> PreparedClip:
        """Prepare one clip from byte chunks as they arrive (docs/streaming.md): each
        chunk is decoded, admitted and pushed into the family's frontend at once, so
        after the last one only the frontend's ``finish()`` remains.

        The result is the clip :meth:`prepare` makes of the same bytes (same plan,
        features and accounting; ``sha256`` of every byte received). Its bytes are held
        in :attr:`stream_budget` while it runs and given back exactly once, however it
        ends; with a worker, the outcome is counted in its metrics as a request's.

        :param chunks: the clip's bytes, in order, in chunks of any size.
        :param source_format: ``SourceFormat.raw("pcm16", rate_hz=..., channels=...)``,
            ``SourceFormat("wav")`` (the header first), or a compressed container
            (:func:`audiogate.streaming.transport.prepare_stream`).
        :param cancel: cancels the stream at its next chunk; cancelling the awaiting task
            does too.
        :param feature_backend: ``"numpy"`` or ``"mlx"`` for this call (default: the gate's).
        :param incremental: ``False``: accumulate and prepare the whole clip at the end.
        :raises LimitError: at the chunk that crosses a limit (the whole clip's error).
        :raises MemoryLimitError: the stream's bytes do not fit :attr:`stream_budget`.
        :raises DecodeError: malformed bytes (the whole clip's codes).
        :raises PreprocessCancelled: ``cancel`` was cancelled.
        """
        import time

        from audiogate.metrics.outcome import Completed, record_outcome
        from audiogate.streaming.transport import prepare_stream, record_stream_waveforms

        policy = self.policy
        if feature_backend is not None and feature_backend != policy.feature_backend:
            self.host.check_feature_backend(policy.family, feature_backend)
            policy = attrs.evolve(policy, feature_backend=feature_backend)
        started = time.perf_counter()
        outcome: Completed | BaseException | None = None
        try:
            clip = await prepare_stream(
                self.host,
                policy,
                chunks,
                source_format=source_format,
                budget=self.stream_budget,
                cancel=cancellable(cancel),
                incremental=incremental,
            )
        except BaseException as exc:
            outcome = exc
            raise
        else:
            outcome = Completed(
                latency_seconds=time.perf_counter() - started, prefill_tokens=clip.tokens
            )
            if self.worker is not None:
                record_stream_waveforms(self.worker.metrics, policy.family, clip)
            return clip
        finally:
            if self.worker is not None:
                record_outcome(self.worker.metrics, policy.family, outcome)

    def add_source(
        self,
        data: bytes,
        *,
        owner: str = ANONYMOUS_OWNER,
        scope: Scope = "private",
        source_format: SourceFormat = AUTO,
        status: SourceStatus = "ready",
        cancel: CancelToken | None = None,
    ) -> AddedSource:
        """Admit ``data`` under this model's policy (the same acquisition, sniffing and
        header admission as inline audio) and store it (docs/sources.md).

        :param status: ``"processing"`` to have references wait until
            :meth:`~audiogate.store.SourceStore.mark_ready`, else ``"ready"``.
        :raises SourceStoreMissingError: the gate has no store.
        :raises AudioGateError: admission refuses the bytes, or a quota refuses them.
        """
        if self.store is None:
            raise SourceStoreMissingError("add_source")
        from audiogate.store.admission import admit_source

        admitted = admit_source(
            data,
            host=self.host,
            policy=self.policy,
            acquisition=self.acquisition,
            source_format=source_format,
            cancel=cancellable(cancel),
        )
        return self.store.add(
            admitted.clip.data,
            owner=owner,
            scope=scope,
            source_format=source_format,
            duration_us=admitted.duration_us,
            status=status,
            header=admitted.geometry,
        )

    def prepare_user_turn(
        self, text: str | None, clips: Sequence[EncodedClip], **options: Any
    ) -> PreparedRequest:
        """``text`` as one user turn of the checkpoint's chat template, with ``clips``
        (what ``audiogate prepare --model DIR --prompt`` and ``audiogate batch`` rows do).

        The clips are audio parts before the text, so the chat path places them where the
        template puts audio (a family whose audio goes at the start of the message puts it
        there, not before the template's first token). A text that places the clips itself
        with the family's placeholders (``<|audio_1|>``, ``[audio:<sha256>]``, ...), which
        the chat path would refuse (:meth:`places_audio`), is prepared as before: the
        template around it as a plain prompt. Without a template: a plain prompt.
        ``options`` are :meth:`prepare`'s.
        """
        if self.renderer is None and not getattr(self.tokenizer, "chat_template", None):
            return self.prepare(prompt=text, clips=clips, **options)
        if text and self.places_audio(text):
            return self.prepare(prompt=self.chat_prompt(text), clips=clips, **options)
        # The parts only mark positions: the clips come as ``clips``.
        marker = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
        content: list[dict[str, Any]] = [dict(marker) for _ in clips]
        if text:
            content.append({"type": "text", "text": text})
        return self.prepare([{"role": "user", "content": content}], clips=clips, **options)

    def places_audio(self, text: str) -> bool:
        """Whether ``text`` holds what the family's chat path refuses in a text part: its
        audio placeholders or markers (``<|audio_1|>``, ``<|AUDIO|>``, ...) or its source
        references (``[audio:<sha256>]``).

        The family's own expansion answers, on ``text`` alone as chat text without clips
        (no tokenizer, no audio, no metrics): it refuses exactly what a chat text part may
        not hold.
        """
        reference = self._source_reference
        if reference is not None and reference.search(text):
            return True
        try:
            self.host.expand_prompt(self.policy, [TextSegment(text)], [], None, chat=True)
        except PlaceholderError:
            return True
        return False

    def chat_prompt(self, text: str) -> str:
        """The chat template around one user message ``text``, with the generation prompt.

        Passed as ``prepare(prompt=...)``, it is a plain prompt like any other: the
        family's placeholders in ``text`` place the clips, and where it has none, the
        family inserts them where its processor would (what ``audiogate prepare --model
        DIR --prompt`` does).
        """
        return self._render([{"role": "user", "content": text}])

    # --- steps -----------------------------------------------------------------------

    @functools.cached_property
    def _renders_parts(self) -> bool:
        # Probed once per gate: whether the template (or renderer) prints list content
        # part by part; see audiogate.chat.messages.
        return renders_parts(self._render)

    def _render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        if self.renderer is not None:
            return self.renderer(messages)
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise RequestError(
                "chat messages need a chat template, and this gate has none: load a model "
                "directory with a tokenizer, or pass renderer="
            )
        try:
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages], tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:
            # Templates raise (jinja's ``raise_exception``) on messages they do not accept,
            # e.g. roles that do not alternate: a bad request, not a server error.
            raise ChatRequestError(
                f"the chat template rejected the messages: {type(exc).__name__}: {exc}"
            ) from exc
        return str(text)

    def _probe_expansion(self) -> None:
        """Expand one clip (a second, or the longest allowed) once, at load: a tokenizer
        whose special tokens contradict the policy's token ids would otherwise fail every
        request with audio.

        :raises PolicyError: the family's expansion refuses the probe.
        """
        policy = self.policy
        samples = max(
            policy.min_samples_per_clip, min(policy.target_rate_hz, policy.max_samples_per_clip)
        )
        try:
            plan = self.host.plan_features(
                policy, rate_hz=policy.target_rate_hz, samples=samples, clip_index=0
            )
            slot = ClipSlot(ordinal=1, tokens=plan.tokens, frames=plan.frames, sha256="0" * 64)
            segments: list[PromptSegment] = [
                TextSegment("Listen: "),
                MediaSegment("audio", 1),
                TextSegment("\n"),
            ]
            expanded = self.host.expand_prompt(policy, segments, [slot], self.tokenizer, chat=True)
            if expanded.input_ids:
                check_audio_positions(expanded, [slot.tokens])
        except (PolicyError, PluginError):  # a plugin bug stays one
            raise
        except AudioGateError as exc:
            raise PolicyError(
                f"its tokenizer does not fit the audio policy: {exc}", file=self.policy_source
            ) from exc


#: ``return_tensors``'s conversion (kept here for code that imported it from 0.1.0).
_converter = convert_tensors
