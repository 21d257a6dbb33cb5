"""One request, from open to close: :class:`Request`.

A request is opened by :meth:`audiogate.api.AudioGate.request` (or by ``prepare`` /
``prepare_async``, which open one and close it) and goes through these steps, in order:

1. :meth:`Request.validate`: the prompt text's bound, the family's text references,
   the messages flattened (media parts become private sentinels), the clip count;
2. :meth:`Request.render`: the chat template, its sentinels parsed back (failing closed),
   before any audio is read;
3. :meth:`Request.acquire_async` or its sync twin :meth:`Request.acquire`: the audio
   (the only I/O), under the acquisition policy's ceilings;
4. :meth:`Request.preflight`: every budget planned from the headers;
5. :meth:`Request.compute`: the CPU work (decode → resample → features, the prompt's
   expansion; a long prompt's rendering too), on the gate's worker or in the caller's
   thread;
6. :meth:`Request.result`: the :class:`~audiogate.api.PreparedRequest`;
7. :meth:`Request.close`: releases what the request holds (the leases on stored
   sources, its worker job and reservation) and records its outcome in the worker's
   metrics, exactly once.

:meth:`Request.run` (blocking) and :meth:`Request.run_async` drive steps 1 to 6; the
blocking and async calls, the reference server and the batch engine all do. The owner of
a request closes it: ``prepare`` when it returns, the server once the answer is admitted
into its body budget (or refused there), so what is counted is what the client got.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from audiogate.acquire import SourceAccess, acquire_parts, acquire_parts_sync
from audiogate.acquire.clip import EncodedClip
from audiogate.cache import FeatureCache
from audiogate.cancel import CancelToken, Checkpoint, cancellable
from audiogate.chat import (
    FlattenedChat,
    flatten_messages,
    parse_rendered,
    require_unicode,
    split_references,
)
from audiogate.chat.prompt_text import (
    INLINE_RENDER_BYTES,
    TEXT_HOST_BYTES_PER_BYTE,
    check_prompt_text,
)
from audiogate.decode.decoder import inspects_long
from audiogate.errors import (
    AudioGateError,
    ContextLimitError,
    PlaceholderError,
    PluginError,
    SourceLostError,
)
from audiogate.extras import require_module
from audiogate.host import FamilyHost
from audiogate.metrics.outcome import record_outcome
from audiogate.pipeline.plans import RequestPlan
from audiogate.pipeline.preflight import preflight
from audiogate.pipeline.prepared import PreparedBatch
from audiogate.pipeline.process import Progress, process_request
from audiogate.policy import AudioPolicy, FeatureBackend
from audiogate.records import ClipSlot, ExpandedPrompt, PromptSegment, TextSegment
from audiogate.store import ANONYMOUS_OWNER

if TYPE_CHECKING:
    from audiogate.api import AudioGate
    from audiogate.worker import AudioJob, AudioWorker

__all__ = [
    "PreparedRequest",
    "Request",
    "TensorKind",
    "check_audio_positions",
    "convert_tensors",
    "process_planned",
]

TensorKind = Literal["np", "mlx", "pt"]


@attrs.frozen(kw_only=True)
class PreparedRequest:
    """Everything a model needs for one request, plus the accounting.

    :param input_ids: the expanded prompt's token ids (empty without a tokenizer).
    :param text: the expanded prompt text where the family has a text form.
    :param audio_spans: per clip, ``(start, stop)`` of its audio positions in ``input_ids``.
    :param variant: the checkpoint variant the inputs are named for (``policy.variant``):
        ``"remote_code"`` or ``"native"`` for Phi-4 MM, ``"default"`` for a family with one.
    :param batch: the prepared audio (``None`` for a request without audio).
    :param features: per-clip feature arrays (numpy, or mlx when asked for).
    :param masks: per-clip frame masks (or ``None`` where the family has none).
    :param model_inputs: the collated arrays, named as the model's forward expects.
    """

    family: str
    policy: AudioPolicy = attrs.field(repr=False)
    input_ids: tuple[int, ...]
    text: str | None
    audio_spans: tuple[tuple[int, int], ...]
    variant: str = "default"
    batch: PreparedBatch | None = attrs.field(repr=False)
    features: tuple[Any, ...] = attrs.field(repr=False)
    masks: tuple[Any, ...] = attrs.field(repr=False)
    model_inputs: Mapping[str, Any] = attrs.field(repr=False)

    @property
    def prefill_positions(self) -> int | None:
        """Length of the expanded prompt, when it was tokenized."""
        return len(self.input_ids) if self.input_ids else None

    def summary(self, *, policy_source: str = "") -> dict[str, Any]:
        """The family preparation summary as JSON (what ``audiogate prepare --json`` prints)."""
        clips = [clip.accounting() for clip in self.batch.clips] if self.batch else []
        totals: dict[str, Any] = self.batch.totals.as_dict() if self.batch else {}
        if self.prefill_positions is not None:
            totals["prefill_positions"] = self.prefill_positions
        return {
            "family": self.family,
            "policy_source": policy_source,
            "clips": clips,
            "totals": totals,
        }


class Request:
    """One request of an :class:`~audiogate.api.AudioGate`; see the module docstring.

    The arguments are :meth:`~audiogate.api.AudioGate.prepare_async`'s. A call that
    cannot be a request (no input, messages and a prompt, an unknown ``return_tensors``)
    raises ``TypeError`` / ``ValueError`` here, before any work, and counts nowhere.
    """

    def __init__(
        self,
        gate: AudioGate,
        messages: Sequence[Mapping[str, Any]] | None = None,
        *,
        prompt: str | None = None,
        clips: Sequence[EncodedClip] | None = None,
        cancel: CancelToken | None = None,
        return_tensors: TensorKind | None = None,
        progress: Progress | None = None,
        feature_backend: FeatureBackend | None = None,
        owner: str = ANONYMOUS_OWNER,
    ) -> None:
        if messages is None and prompt is None and clips is None:
            raise TypeError("give chat messages, or a plain prompt and/or clips")
        if messages is not None and prompt is not None:
            raise TypeError("give either chat messages or a plain prompt, not both")
        self.convert = convert_tensors(return_tensors)  # a wrong value fails before any work
        policy = gate.policy
        if feature_backend is not None and feature_backend != policy.feature_backend:
            policy = attrs.evolve(policy, feature_backend=feature_backend)
            gate.host.check_feature_backend(policy.family, policy.feature_backend)
        if return_tensors is None and policy.feature_backend == "mlx":
            # What the backend computed is mx arrays: the inputs a family derives from
            # the prompt (numpy) follow them.
            self.convert = convert_tensors("mlx")
        self.gate = gate
        self.policy: AudioPolicy = policy
        self.cancel = cancellable(cancel)
        self.progress = progress
        self.worker: AudioWorker | None = gate.worker
        store = gate.store
        self.owner = owner
        self.access = SourceAccess(store, owner, gate.source_wait_s) if store is not None else None
        self.messages = messages
        self.prompt = prompt
        self.clips: list[EncodedClip] | None = None if clips is None else list(clips)
        #: The prompt text's UTF-8 bytes (what rendering and tokenizing reserve).
        self.text_bytes = 0
        self.flat: FlattenedChat | None = None
        #: The rendered prompt's segments (``None``: not rendered yet).
        self.segments: list[PromptSegment] | None = None
        self.plan: RequestPlan | None = None
        self.batch: PreparedBatch | None = None
        self.expanded: ExpandedPrompt | None = None
        self._text_result: PreparedRequest | None = None
        self._completed: tuple[float, int] | None = None
        self._job: AudioJob[Any] | None = None
        #: Chat messages without an audio part (known once validated).
        self.text_only = False
        #: Whether rendering is CPU work of its own (known once validated): a text-only
        #: request (rendered and tokenized at once) or more than ``INLINE_RENDER_BYTES``.
        self.renders_off_loop = False
        self._closed = False
        self._close_lock = threading.Lock()

    # --- what the request is ---------------------------------------------------------

    @property
    def chat(self) -> bool:
        """Whether the request comes from chat messages (not a plain prompt)."""
        return self.messages is not None

    # --- the steps -------------------------------------------------------------------

    def validate(self) -> None:
        """Bound the prompt text, place the family's text references, flatten the
        messages and match given clips with their audio parts (before any template or
        tokenizer sees the text).

        :raises ContextLimitError: more prompt text than ``max_prompt_text_bytes``.
        :raises ChatRequestError: messages that are not valid chat messages.
        :raises PlaceholderError: given clips that do not match the audio parts.
        """
        gate = self.gate
        reference = gate._source_reference if self.access is not None else None
        if self.messages is not None:
            self.text_bytes = check_prompt_text(self.messages, gate.max_prompt_text_bytes)
            messages = self.messages
            if reference is not None:
                # The family's text references become audio_ref parts where they stand:
                # numbered with the audio parts in message order.
                messages = split_references(messages, reference)
            flat = self.flat = flatten_messages(messages, parts=gate._renders_parts)
            given, audio_parts = self.clips, flat.audio_parts
            self.text_only = not audio_parts
            self.renders_off_loop = self.text_only or self.text_bytes > INLINE_RENDER_BYTES
            if self.text_only and given:
                raise PlaceholderError(
                    f"{len(given)} clip(s) were given but the messages have no audio part"
                )
            if audio_parts and given is not None and len(given) != len(audio_parts):
                raise PlaceholderError(
                    f"the messages have {len(audio_parts)} audio part(s) but "
                    f"{len(given)} clip(s) were given"
                )
        elif self.prompt is not None:
            self.text_bytes = check_prompt_text(self.prompt, gate.max_prompt_text_bytes)
            require_unicode(self.prompt, "the prompt")

    def render(self) -> None:
        """Render the messages with the chat template (audio parts as sentinels) and
        parse the sentinels back; a plain prompt is used as it is. A text-only request is
        also expanded and its result made (it has no other step).

        :raises ChatRequestError: the template refuses the messages.
        :raises PlaceholderError: the rendered text does not hold each sentinel once.
        """
        flat = self.flat
        if flat is None:
            self.segments = [TextSegment(self.prompt)] if self.prompt is not None else []
            return
        rendered = self.gate._render(flat.messages)
        if self.text_only:
            self._text_result = self._text_only(flat, rendered)
            self.segments = []
            return
        assert flat.codec is not None
        self.segments = parse_rendered(
            rendered,
            flat.codec,
            expected={"audio": len(flat.audio_parts), "image": len(flat.image_parts)},
        )

    def acquire(self) -> None:
        """The audio, read in the calling thread (a URL part on an event loop of its
        own); the sync twin of :meth:`acquire_async`."""
        parts = self._parts_to_acquire()
        if parts:
            policy = self.gate.acquisition
            read = acquire_parts_sync(parts, policy=policy, cancel=self.cancel, sources=self.access)
            self._take_acquired(read)

    async def acquire_async(self) -> None:
        """The audio of the request's parts (inline, data URI, media file, URL, stored
        source) under the acquisition policy's ceilings; cancelling the awaiting task
        stops a read at its next chunk."""
        parts = self._parts_to_acquire()
        if parts:
            policy = self.gate.acquisition
            read = await acquire_parts(
                parts, policy=policy, cancel=self.cancel, sources=self.access
            )
            self._take_acquired(read)

    def preflight(self) -> None:
        """Plan every budget from the clips' headers (nothing is decoded).

        :raises PreprocessCancelled: the token was cancelled (with a worker).
        :raises WorkerUnavailableError: the gate's worker is shut down.
        :raises LimitError: a policy budget is exceeded.
        """
        if self.worker is not None:
            self.worker.check_open(self.cancel)
        self.plan = preflight(self.gate.host, self.policy, self.clips or (), cancel=self.cancel)

    def compute(self, worker: AudioWorker | None = None) -> None:
        """The CPU work due now: a deferred rendering (:attr:`renders_off_loop`), else
        decode → resample → features and the prompt's expansion; ``worker``: the worker
        whose thread runs it (its decoders, its metrics' waveform series, a family's
        unexpected exception as a ``PluginError``)."""
        if self.segments is None:
            self.render()
            return
        assert self.plan is not None
        started = time.perf_counter()
        gate, policy, token = self.gate, self.policy, self.cancel
        batch = self.batch = process_planned(
            gate.host,
            self.plan,
            self.clips or (),
            cancel=token,
            # A disabled cache (a budget of 0, the default without a worker) is no cache;
            # an enabled one is the owner's own part (no existence oracle across owners).
            cache=gate.feature_cache.scoped(self.owner) if gate.feature_cache.max_bytes else None,
            worker=worker,
            progress=self.progress,
        )
        segments = self.segments
        try:
            expanded = self._expand(batch, segments) if segments else None
        except AudioGateError:
            raise
        except Exception as exc:
            if worker is None:
                raise
            raise PluginError(
                f"finishing the {policy.family!r} request raised {type(exc).__name__}: {exc}"
            ) from exc
        self.expanded = expanded
        if worker is not None:
            # A client gone while its prompt was expanded is cancelled, not completed.
            token.check(Checkpoint.FEATURE)
        prefill = len(expanded.input_ids) if expanded and expanded.input_ids else None
        # What the metrics record once it is closed as completed: its preprocessing wall
        # time and its prefill length (the audio tokens without a tokenized prompt).
        self._completed = (
            time.perf_counter() - started,
            batch.totals.tokens if prefill is None else prefill,
        )

    def result(self) -> PreparedRequest:
        """What the model needs (the arrays converted as ``return_tensors`` asks)."""
        if self._text_result is not None:
            return self._text_result
        batch, expanded, policy, convert = self.batch, self.expanded, self.policy, self.convert
        assert batch is not None
        return PreparedRequest(
            family=policy.family,
            policy=policy,
            input_ids=expanded.input_ids if expanded else (),
            text=expanded.text if expanded else None,
            audio_spans=expanded.audio_spans if expanded else (),
            variant=policy.variant,
            batch=batch,
            features=tuple(convert(c.features.features) for c in batch.clips),
            masks=tuple(
                None if c.features.mask is None else convert(c.features.mask) for c in batch.clips
            ),
            model_inputs={
                k: convert(v) for k, v in _model_inputs(policy.family, batch, expanded).items()
            },
        )

    def close(self, error: BaseException | None = None, *, cancelled: bool = False) -> None:
        """End the request, once (later calls do nothing): release its leases and its
        worker job (a job still running keeps its reservation until it stops, at its next
        checkpoint), and count it in the worker's metrics, as it was answered:

        * completed: no ``error``, and audio was prepared (a text-only success counts
          nowhere);
        * cancelled: ``cancelled`` (its client left), a ``PreprocessCancelled`` or
          ``asyncio.CancelledError``, or an interruption (``KeyboardInterrupt``);
        * else a rejection under ``error``'s reason.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            job, self._job = self._job, None
            if job is not None and not job.future.done():
                self.cancel.cancel()
                job.release_when_done()
            if isinstance(error, SourceLostError) and self.gate.store is not None:
                # Also what the pipeline's digest proof finds (leases read unhashed).
                self.gate.store.mark_lost(error.sha256)
        finally:
            # The request's leases on stored sources end with it: a retirement waiting
            # for them completes now.
            if self.access is not None:
                self.access.release()
            self._record(None if cancelled else error, cancelled=cancelled)

    def __enter__(self) -> Request:
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        self.close(error)

    def _expand(
        self, batch: PreparedBatch | None, segments: Sequence[PromptSegment]
    ) -> ExpandedPrompt:
        """The family's expansion of ``segments`` for ``batch``'s clips (none: text only).

        :raises ContextLimitError: more prefill tokens than ``max_prefill_tokens``.
        """
        gate = self.gate
        clips = batch.clips if batch is not None else ()
        slots = [
            ClipSlot(ordinal=c.ordinal, tokens=c.tokens, frames=c.frames, sha256=c.sha256)
            for c in clips
        ]
        expanded = gate.host.expand_prompt(
            self.policy, segments, slots, gate.tokenizer, chat=self.chat
        )
        if expanded.input_ids:
            check_audio_positions(expanded, [c.tokens for c in clips])
            limit = gate.max_prefill_tokens
            if limit is not None and len(expanded.input_ids) > limit:
                raise ContextLimitError(
                    "prefill tokens", actual=len(expanded.input_ids), maximum=limit
                )
        return expanded

    def _text_only(self, flat: FlattenedChat, rendered: str) -> PreparedRequest:
        # Still the family's prompt rules, with no clips: user text holding an audio
        # placeholder, reference or reserved token literal is refused here too, so no
        # audio id ever reaches the model without features behind it. Image parts keep
        # their positions (or are refused by a family without images).
        segments: list[PromptSegment] = [TextSegment(rendered)]
        if flat.codec is not None:
            segments = parse_rendered(
                rendered, flat.codec, expected={"audio": 0, "image": len(flat.image_parts)}
            )
        expanded = self._expand(None, segments)
        policy, convert = self.policy, self.convert
        return PreparedRequest(
            family=policy.family,
            policy=policy,
            input_ids=expanded.input_ids,
            text=expanded.text,
            audio_spans=(),
            variant=policy.variant,
            batch=None,
            features=(),
            masks=(),
            model_inputs={k: convert(v) for k, v in expanded.model_inputs.items()},
        )

    # --- the drivers -----------------------------------------------------------------

    def run(self) -> PreparedRequest:
        """Steps 1 to 6 in the calling thread (waiting on the gate's worker for the CPU
        work); no event loop of its own unless a part is a URL."""
        self.validate()
        if self.renders_off_loop:
            self._compute_here_or_on_worker()
        else:
            self.render()
        if not self.text_only:
            self.acquire()
            self.preflight()
            self._compute_here_or_on_worker()
        return self.result()

    def run_and_close(self) -> PreparedRequest:
        """:meth:`run`, then :meth:`close` with its outcome (what ``prepare`` does)."""
        try:
            result = self.run()
        except BaseException as error:
            self.close(error)
            raise
        self.close()
        return result

    async def run_async_and_close(self) -> PreparedRequest:
        """:meth:`run_async`, then :meth:`close` with its outcome."""
        try:
            result = await self.run_async()
        except BaseException as error:
            self.close(error)
            raise
        self.close()
        return result

    async def run_async(self) -> PreparedRequest:
        """Steps 1 to 6 on the running event loop; the CPU work on the gate's worker, or
        in a thread without one. Cancelling the awaiting task cancels the request's
        token: acquisition and processing stop at their next checkpoint."""
        self.validate()
        if self.renders_off_loop:
            await self._compute_off_loop()
        else:
            self.render()
        if not self.text_only:
            await self.acquire_async()
            if self._preflights_long():
                # A large compressed clip's container walk is pure Python (up to tens of
                # ms): in a thread, the event loop keeps serving the other connections.
                await asyncio.to_thread(self.preflight)
            else:
                self.preflight()
            await self._compute_off_loop()
        return self.result()

    # --- helpers ---------------------------------------------------------------------

    def reserved_bytes(self) -> tuple[int, int]:
        """``(encoded, host)`` bytes the worker reserves for :meth:`compute` now: a
        deferred rendering's text, else the plan's bytes and the prompt's tokenizing."""
        text = max(0, self.text_bytes) * TEXT_HOST_BYTES_PER_BYTE  # text_host_bytes
        if self.segments is None or self.plan is None:
            return 0, text
        return self.plan.encoded_bytes, self.plan.host_bytes + text

    def _compute_here_or_on_worker(self) -> None:
        if self.worker is None:
            self.compute()
            return
        job = self._job = self.worker.submit_request(self)
        try:
            job.result()
        except BaseException:
            if not job.done():  # interrupted while it waits (Ctrl-C): cancel the job
                job.cancel()
            raise
        finally:
            self._forget(job)

    def _preflights_long(self) -> bool:
        return any(clip.header is None and inspects_long(clip.data) for clip in self.clips or ())

    async def _compute_off_loop(self) -> None:
        if self.worker is None:
            try:
                await asyncio.to_thread(self.compute)
            except asyncio.CancelledError:
                self.cancel.cancel()
                raise
            return
        job = self._job = self.worker.submit_request(self)
        try:
            await self.worker.wait_async(job)
        finally:
            self._forget(job)

    def _forget(self, job: AudioJob[Any]) -> None:
        # A job that has ended is no longer this request's to release: without it, the
        # request and its job (whose task is the request) are no reference cycle.
        if job.future.done():
            self._job = None

    def _parts_to_acquire(self) -> list[Mapping[str, Any]]:
        """The parts this request still reads: its audio parts unless clips were given;
        a plain prompt's text references to stored sources that no given clip is."""
        if self.flat is not None:
            return [] if self.clips is not None else list(self.flat.audio_parts)
        reference = self.gate._source_reference
        if self.prompt is None or self.access is None or reference is None:
            return []
        given = {clip.sha256 for clip in self.clips or ()}
        digests = dict.fromkeys(match.group(1) for match in reference.finditer(self.prompt))
        return [
            {"type": "audio_ref", "audio_ref": {"sha256": d}} for d in digests if d not in given
        ]

    def _take_acquired(self, read: list[EncodedClip]) -> None:
        if self.flat is not None:
            self.clips = read
            return
        # A plain prompt's clips: one per text reference, in prompt order, the given clip
        # of that digest where there is one, else the stored source (the family's
        # expansion then refuses a given clip that no reference names).
        pattern = self.gate._source_reference
        assert self.prompt is not None
        assert pattern is not None
        given = self.clips or []
        digests = list(dict.fromkeys(m.group(1) for m in pattern.finditer(self.prompt)))
        by_digest = {clip.sha256: clip for clip in given}
        by_digest.update((clip.sha256, clip) for clip in read)
        named = set(digests)
        ordered = [by_digest[d] for d in digests]
        ordered += [clip for clip in given if clip.sha256 not in named]
        self.clips = [attrs.evolve(clip, ordinal=i) for i, clip in enumerate(ordered, 1)]

    def _record(self, error: BaseException | None, *, cancelled: bool) -> None:
        if self.worker is None:
            return  # a gate without a worker has no metrics
        metrics, family = self.worker.metrics, self.policy.family
        if cancelled or not (error is None or isinstance(error, Exception)):
            record_outcome(metrics, family, None)  # its client left, or an interruption
        elif error is not None:
            record_outcome(metrics, family, error)
        elif self._completed is not None:
            latency_s, prefill = self._completed
            metrics.record_completed(family, latency_seconds=latency_s, prefill_tokens=prefill)
        elif self.clips and self.plan is not None:
            record_outcome(metrics, family, None)  # admitted audio that was never prepared


def check_audio_positions(expanded: ExpandedPrompt, tokens: Sequence[int]) -> None:
    """Exactly the features' audio positions, per clip, in the expanded prompt.

    :raises PlaceholderError: a run whose length or ids differ from its clip's tokens.
    """
    # The invariant every family must keep: exactly the features' positions, per clip.
    ids = expanded.input_ids
    if len(expanded.audio_spans) != len(tokens):
        raise PlaceholderError(
            f"the expanded prompt has {len(expanded.audio_spans)} audio runs for "
            f"{len(tokens)} clips"
        )
    for ordinal, ((start, stop), want) in enumerate(
        zip(expanded.audio_spans, tokens, strict=True), 1
    ):
        run = ids[start:stop]
        if stop - start != want or run.count(expanded.audio_token_id) != len(run):
            raise PlaceholderError(
                f"clip {ordinal} has {stop - start} audio positions in the prompt but its "
                f"features produce {want}"
            )
    total = ids.count(expanded.audio_token_id)
    if total != sum(tokens):
        raise PlaceholderError(
            f"the expanded prompt holds {total} audio token ids but the features produce "
            f"{sum(tokens)}"
        )


def _model_inputs(
    family: str, batch: PreparedBatch, expanded: ExpandedPrompt | None
) -> dict[str, Any]:
    """The collated audio inputs and the inputs the family derives from the prompt."""
    inputs = dict(batch.inputs.inputs)
    extra = expanded.model_inputs if expanded is not None else {}
    clash = sorted(set(inputs) & set(extra))
    if clash:
        raise PluginError(
            f"family {family!r} names {', '.join(clash)} both in its collated audio inputs "
            "and in its expanded prompt's model inputs"
        )
    inputs.update(extra)
    return inputs


def process_planned(
    host: FamilyHost,
    plan: RequestPlan,
    clips: Sequence[EncodedClip],
    *,
    cancel: CancelToken,
    cache: FeatureCache | None,
    worker: AudioWorker | None = None,
    progress: Progress | None = None,
) -> PreparedBatch:
    """Run a preflighted request's audio stages; on a ``worker``'s thread, with its
    decoders, its waveform series recorded, a family's unexpected exception raised as
    a ``PluginError``, and the Feature checkpoint after the stages."""
    if worker is None:
        return process_request(host, plan, clips, cancel=cancel, progress=progress, cache=cache)
    family = plan.policy.family
    try:
        batch = process_request(
            host, plan, clips, cancel=cancel, decoders=worker.decoders, cache=cache
        )
    except AudioGateError:
        raise
    except Exception as exc:
        raise PluginError(
            f"family {family!r} raised {type(exc).__name__} while preparing audio: {exc}"
        ) from exc
    totals = batch.totals
    worker.metrics.record_waveforms(
        family,
        source_duration_us=totals.duration_us,
        source_samples=totals.source_samples,
        normalized_samples=totals.normalized_samples,
        frames=totals.frames,
        tokens=totals.tokens,
    )
    cancel.check(Checkpoint.FEATURE)
    return batch


def convert_tensors(kind: TensorKind | None) -> Callable[[Any], Any]:
    """The conversion of each result array for ``return_tensors=kind``.

    :raises ValueError: an unknown kind.
    :raises MissingExtraError: the kind's library is not installed.
    """
    if kind is None:
        return lambda array: array
    if kind == "np":
        import numpy as np

        def to_numpy(array: Any) -> Any:
            if isinstance(array, np.ndarray):
                return array
            # An mx.array's buffer would be shared (and writable): a read-only copy, like
            # every array the numpy backend returns.
            copy = np.array(array, copy=True)
            copy.setflags(write=False)
            return copy

        return to_numpy
    if kind == "mlx":
        mx = require_module(
            "mlx.core",
            purpose="return_tensors='mlx'",
            hint="on Linux also `pip install 'mlx[cpu]'`; or ask for 'np'",
        )
        return lambda array: mx.array(array)
    if kind == "pt":
        torch = require_module("torch", purpose="return_tensors='pt'", hint="or ask for 'np'")
        import numpy as np

        def to_torch(array: Any) -> Any:
            # The arrays are read-only and shared with the batch: from_numpy would warn
            # and let the model write into them. One copy, owned by the tensor.
            return torch.from_numpy(np.array(array, copy=True))

        return to_torch
    raise ValueError(f"return_tensors must be 'np', 'mlx' or 'pt', not {kind!r}")
