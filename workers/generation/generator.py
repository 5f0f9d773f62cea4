"""The generator of the generation pools: budget each prompt, generate a batch concurrently,
build the answers; and the token sink that streams answer tokens as they arrive.

Per batch: every prompt is budgeted in the serving model's tokens (:mod:`workers.generation.
prompt`), then ALL requests are submitted concurrently so a continuous-batching server
(llama.cpp here, ``vllm serve`` in production) batches them. Tokens go to the
:class:`TokenSink` as they arrive, which publishes them a whole sentence at a time (``seq`` in
order, then a ``final`` marker; the pool publishes
them as outputs of its handler while the batch runs); the final answer carries citations,
token usage, the trace and the keys the delivery pool caches it at. An unreachable backend is
retried with back-off until the request's deadline, then answered with
``BACKEND_UNAVAILABLE``; every other failure is a typed error.

With evidence (the rerank pool's evidence stage), the prompt holds the evidence spans, not whole
chunks (:func:`workers.generation.compress.compress`), and every completion is judged before it
is published (:func:`workers.generation.compress.judge`): an empty or stop-only completion is
replaced by the evidence answer (the one the evidence stage composed, carried by the event:
never composed again here), one cut at its token limit is kept up to its last whole sentence
and one that repeats itself up to its last whole sentence before the first repeat, both marked
``truncated`` (or replaced by the evidence answer when no sentence is whole). The token sink
shows a completion a whole sentence at a time and never past its first repeat, so a stream
never shows what the judge drops. A question that does not fit the prompt budget is a
``PROMPT_TOO_LONG`` error, never a silently cut question. A response not in the OpenAI API's
shape (:class:`~workers.errors.MalformedGenerationError`) is answered with the evidence answer
(``finish`` ``malformed`` in the trace), or with a ``BACKEND_UNAVAILABLE`` error when there is
none.

Cancellation (:mod:`workers.cancel`): a request whose client disconnected is not generated, and
one in flight is stopped within :data:`CANCEL_POLL_S` (its HTTP stream to the LLM server is
closed, which frees the server's slot); either is answered with a ``CANCELLED`` error that
still carries its citations and evidence, so the query log records it. The pool around it is
:mod:`workers.pools.generation`; the evaluation and the query benchmark's baseline call it
directly.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Sequence

import structlog

from ragstream.retry import RetryPolicy
from topics.answers import NOT_IN_DOCUMENTS, is_refusal
from topics.queries import QueryRequest
from topics.registry import RESPONSES, TOKENS
from topics.reranked import RerankedPassages
from topics.responses import Citation, ErrorCode, EvidenceSpan, QueryResponse, TokenUsage
from topics.tokens import AnswerToken
from workers.caches import CacheKeys
from workers.citations import citations, citations_of
from workers.conversation import question_of
from workers.errors import (
    BackendUnavailableError,
    MalformedGenerationError,
    PromptTooLongError,
    code_of,
    error_response,
    llm_outcome,
)
from workers.generation.backend import (
    GenerationBackend,
    GenerationRequest,
    GenerationResult,
    OnToken,
)
from workers.generation.compress import Judged, clean_prefix, compress, judge
from workers.generation.prompt import EVIDENCE_INSTRUCTION, Prompt, PromptBuilder
from workers.metrics import (
    LLM_LATENCY,
    LLM_REQUESTS,
    LLM_TOKENS,
    LLM_TTFT,
    init_llm_labels,
)
from workers.runtime.handler import Emit, Outcome, derive_event_id
from workers.runtime.metrics import ERRORS, MODEL_CALLS

log = structlog.get_logger(__name__)

#: Seconds between two reads of the cancellation flags of the requests being generated.
CANCEL_POLL_S = 0.5

#: Which of these request ids are cancelled (:meth:`workers.cancel.Cancellations.cancelled`).
CancelCheck = Callable[[Sequence[str]], set[str]]


#: Characters a sentence's end (``compress.clean_prefix``) is in or right after.
_ENDS = frozenset(".!?\n])\"'")


class TokenSink:
    """Publishes answer tokens as they arrive, as ``rag.tokens`` outputs of the generation
    handler.

    Args:
        publish: publishes one output while the batch runs: the pool runner's
            :meth:`~workers.runtime.runner.PoolRunner.emit_now` (through the runtime's producer,
            to a declared output only, its send result checked with the batch's outputs).
    """

    def __init__(self, publish: Callable[[Emit], None]) -> None:
        self._publish = publish

    def stream(
        self, request: QueryRequest, first_seq: int = 0
    ) -> tuple[OnToken, Callable[[str | None], None]]:
        """``(on_token, finish)`` for one request: tokens get ``seq`` ``first_seq``,
        ``first_seq + 1``, ... (1 when the evidence event took ``seq`` 0).

        Deltas are held until they are safe to show: a whole sentence at a time, and none from
        the first line or sentence that repeats an earlier one on
        (:func:`~workers.generation.compress.clean_prefix`), so a completion the judge cuts or
        replaces never streamed what it loses, and a looping model shows no loop. White space
        before the answer's first character is not sent (the recorded answer is stripped).
        ``finish(answer)`` sends the rest of the published ``answer`` when what was shown is
        its beginning (nothing more when the evidence answer replaced the completion, which
        then showed nothing), then the ``final`` marker."""
        seq = first_seq
        received = ""
        shown = ""

        def send(text: str, final: bool) -> None:
            nonlocal seq
            event = AnswerToken(
                event_id=derive_event_id(request.request_id, f"token:{seq}"),
                tenant=request.tenant,
                request_id=request.request_id,
                seq=seq,
                text=text,
                final=final,
            )
            self._publish(Emit(TOKENS, event))
            seq += 1

        def on_token(text: str) -> None:
            nonlocal received, shown
            before = received[-1:]
            received += text
            # A sentence can only have ended at an end mark in this token or just before it:
            # the rest of the tokens add nothing that can be shown (clean_prefix is not run).
            if not _ENDS.intersection(text) and before not in _ENDS:
                return
            safe = clean_prefix(received.lstrip())
            if len(safe) > len(shown) and safe.startswith(shown):
                send(safe[len(shown) :], False)
                shown = safe

        def finish(answer: str | None = None) -> None:
            if answer and answer.startswith(shown) and len(answer) > len(shown):
                send(answer[len(shown) :], False)
            send("", True)

        return on_token, finish


class Generator:
    """Runs one batch: budget prompts, generate concurrently with retries, build responses.

    Args:
        backend: the model server's client.
        builder: budgets each prompt in the serving model's tokens.
        tokens: where answer tokens go as they arrive; ``None``: not streamed.
        cache_keys: the answer-cache keys each answer carries for the delivery pool (the
            cache's one writer) to store it at; ``None``: answers are not cached.
        tier: the generation tier (``small`` or ``large``).
        backoff: the retry policy for an unreachable backend; its deadline option is each
            request's deadline (the pools give ``max_attempts=None``: only the deadline ends
            the retries).
        stop: the backend's stop sequences (a completion made of one is empty).
        cancelled: reads which requests were cancelled (their client left); ``None``: none is.
        cancel_poll_s: seconds between two such reads while generating.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        builder: PromptBuilder,
        *,
        tokens: TokenSink | None,
        cache_keys: CacheKeys | None,
        tier: str,
        backoff: RetryPolicy,
        stop: Sequence[str] = (),
        cancelled: CancelCheck | None = None,
        cancel_poll_s: float = CANCEL_POLL_S,
    ) -> None:
        self.cancelled = cancelled
        self.cancel_poll_s = cancel_poll_s
        self.stop = tuple(stop)
        self.backend = backend
        self.builder = builder
        self.tokens = tokens
        self.cache_keys = cache_keys
        self.tier = tier
        self.backoff = backoff
        self._loop = asyncio.new_event_loop()
        init_llm_labels(tier)
        ERRORS.labels(f"generation-{tier}", BackendUnavailableError.__name__)  # at 0 from start

    def run(self, events: list[RerankedPassages]) -> list[Outcome]:
        """Answers (or typed errors) for ``events``, in order."""
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        out: dict[int, Outcome] = {}
        prompts, shown = self._prompts(events, out)
        self._drop_cancelled(events, prompts, out)
        streams = {
            i: self._stream(events[i].request, 1 if events[i].evidence else 0) for i in prompts
        }
        results = self._loop.run_until_complete(self._generate(events, prompts, streams))
        if prompts:
            MODEL_CALLS.labels(f"generate-{self.tier}").inc()
        for i, e in enumerate(events):
            if i in out:
                continue
            if i not in prompts:
                out[i] = Emit(RESPONSES, self._answer(e, None, None, started, t0))
                continue
            result = results[i]
            if isinstance(result, MalformedGenerationError) and e.fallback and e.evidence:
                # Nothing usable came back: the evidence answer, as for an empty completion.
                log.warning(
                    "generation.malformed", request_id=e.request.request_id, error=str(result)
                )
                result = GenerationResult(e.request.request_id, "", 0, 0, "malformed", None, 0.0)
            if isinstance(result, BaseException):
                msg = f"{type(result).__name__}: {result}"
                code = code_of(result)
                out[i] = Emit(RESPONSES, error_response(e, code, msg, f"generation-{self.tier}"))
                continue
            answer = self._answer(e, (prompts[i], shown[i]), result, started, t0)
            finish = streams[i][1]
            if finish is not None:  # the rest of the published answer, then the final marker
                finish(answer.answer if answer.status == "answered" else None)
            out[i] = Emit(RESPONSES, answer)
        return [out[i] for i in range(len(events))]

    def _prompts(
        self, events: list[RerankedPassages], out: dict[int, Outcome]
    ) -> tuple[dict[int, Prompt], dict[int, tuple[EvidenceSpan, ...]]]:
        """The budgeted prompt of each event with passages and the evidence as that prompt
        numbers it, by index; a question over the budget is answered ``PROMPT_TOO_LONG`` in
        ``out`` instead."""
        prompts: dict[int, Prompt] = {}
        shown: dict[int, tuple[EvidenceSpan, ...]] = {}
        for i, e in enumerate(events):
            if not e.passages:
                continue
            try:
                prompts[i], shown[i] = self._prompt(e)
            except (PromptTooLongError, MalformedGenerationError) as exc:
                stage = f"generation-{self.tier}"
                out[i] = Emit(RESPONSES, error_response(e, code_of(exc), str(exc), stage))
        return prompts, shown

    def _drop_cancelled(
        self, events: list[RerankedPassages], prompts: dict[int, Prompt], out: dict[int, Outcome]
    ) -> None:
        """Answer each request among ``prompts`` that was cancelled with ``CANCELLED`` (in
        ``out``) and drop its prompt: it is never sent to the LLM."""
        if self.cancelled is None or not prompts:
            return
        gone = self.cancelled([events[i].request.request_id for i in prompts])
        stage = f"generation-{self.tier}"
        msg = "the client disconnected before generation; nothing was generated"
        for i in [i for i in prompts if events[i].request.request_id in gone]:
            del prompts[i]
            out[i] = Emit(RESPONSES, error_response(events[i], ErrorCode.CANCELLED, msg, stage))

    async def _watch(self, flags: dict[str, asyncio.Event]) -> None:
        """Set the event of each request in ``flags`` once it is cancelled (polls every
        ``cancel_poll_s``; runs until cancelled itself)."""
        check = self.cancelled
        assert check is not None
        while True:
            await asyncio.sleep(self.cancel_poll_s)
            open_ids = [rid for rid, flag in flags.items() if not flag.is_set()]
            for rid in await asyncio.to_thread(check, open_ids):
                flags[rid].set()

    def _prompt(self, e: RerankedPassages) -> tuple[Prompt, tuple[EvidenceSpan, ...]]:
        """The budgeted prompt of ``e`` (over its evidence when it has some, else its passages)
        and its evidence renumbered to the prompt's passages (compressed once per answer).

        Raises:
            PromptTooLongError: the question does not fit the prompt budget.
        """
        renumbered: tuple[EvidenceSpan, ...] = ()
        if e.evidence:
            passages, spans = compress(e.passages, e.evidence)
            renumbered = tuple(spans)
            prompt = self.builder.build(
                question_of(e.request), passages, instruction=EVIDENCE_INSTRUCTION
            )
        else:
            prompt = self.builder.build(question_of(e.request), e.passages)
        if prompt.question_trimmed:
            raise PromptTooLongError(
                f"the question does not fit the {self.builder.budget_tokens}-token prompt "
                "budget of the serving model; ask a shorter question"
            )
        return prompt, renumbered

    def close(self) -> None:
        """Close the backend's connections, the token counter and the event loop (finalising
        the async generators a timed-out stream left suspended, so none is destroyed pending)."""
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.backend.aclose())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()
        closer = getattr(self.builder.tokenizer, "close", None)
        if callable(closer):
            closer()

    def _stream(
        self, request: QueryRequest, first_seq: int
    ) -> tuple[OnToken | None, Callable[[str | None], None] | None]:
        if self.tokens is None:
            return None, None
        on_token, finish = self.tokens.stream(request, first_seq)
        return on_token, finish

    async def _generate(
        self,
        events: list[RerankedPassages],
        prompts: dict[int, Prompt],
        streams: dict[int, tuple[OnToken | None, Callable[[str | None], None] | None]],
    ) -> dict[int, GenerationResult | BaseException]:
        results: dict[int, GenerationResult | BaseException] = {}
        pending = sorted(prompts)
        by_id = {events[i].request.request_id: i for i in pending}
        flags = {rid: asyncio.Event() for rid in by_id}
        watcher = asyncio.ensure_future(self._watch(flags)) if self.cancelled and flags else None
        try:
            await self._attempts(events, prompts, streams, pending, results, flags)
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
        return results

    async def _attempts(  # noqa: PLR0917 - one call site
        self,
        events: list[RerankedPassages],
        prompts: dict[int, Prompt],
        streams: dict[int, tuple[OnToken | None, Callable[[str | None], None] | None]],
        pending: list[int],
        results: dict[int, GenerationResult | BaseException],
        flags: dict[str, asyncio.Event],
    ) -> None:
        """Generate ``pending``, retrying an unreachable backend until each deadline."""
        attempt = 0
        by_id = {events[i].request.request_id: i for i in pending}
        while pending:
            requests = [
                GenerationRequest(
                    events[i].request.request_id, prompts[i], self._budget(events[i].request)
                )
                for i in pending
            ]
            outcomes = await self.backend.generate_many(
                requests, lambda rid: streams[by_id[rid]][0], flags.get
            )
            attempt += 1
            retry = []
            delay_s = self.backoff.delay_ms(attempt) / 1000
            for i, outcome in zip(pending, outcomes, strict=True):
                results[i] = outcome
                self._observe(outcome)
                deadline = events[i].request.deadline.timestamp()
                if isinstance(outcome, BackendUnavailableError) and self.backoff.allows(
                    attempt, delay_s, deadline=deadline
                ):
                    retry.append(i)
            if retry:
                log.warning("generation.backend_unavailable", retry=len(retry), attempt=attempt)
                await asyncio.sleep(delay_s)
            pending = retry

    def _budget(self, request: QueryRequest) -> int | None:
        """The answer budget of ``request`` in tokens: its ``max_tokens``, at most what the
        prompt was budgeted for (``builder.max_answer_tokens``); ``None``: the backend's."""
        if request.max_tokens is None:
            return None
        return min(request.max_tokens, self.builder.max_answer_tokens)

    def _observe(self, outcome: GenerationResult | BaseException) -> None:
        """Count one LLM request attempt in the ``ragstream_llm_*`` metrics; a failed one also
        in the pool's ``ragstream_errors_total`` (by exception class, as the runtime counts
        the errors a handler raises)."""
        tier = self.tier
        if isinstance(outcome, BaseException):
            LLM_REQUESTS.labels(tier, llm_outcome(outcome)).inc()
            ERRORS.labels(f"generation-{tier}", type(outcome).__name__).inc()
            return
        LLM_REQUESTS.labels(tier, "ok").inc()
        if outcome.ttft_ms is not None:
            LLM_TTFT.labels(tier).observe(outcome.ttft_ms / 1000)
        LLM_LATENCY.labels(tier).observe(outcome.total_ms / 1000)
        LLM_TOKENS.labels(tier, "prompt").inc(outcome.prompt_tokens)
        LLM_TOKENS.labels(tier, "completion").inc(outcome.completion_tokens)

    def _answer(
        self,
        e: RerankedPassages,
        budgeted: tuple[Prompt, tuple[EvidenceSpan, ...]] | None,
        result: GenerationResult | None,
        started: dt.datetime,
        t0: float,
    ) -> QueryResponse:
        """The response to ``e`` from its completion ``result`` over ``budgeted`` = ``(prompt,
        evidence renumbered to it)``; ``None``: no passages, nothing was generated."""
        took = (time.perf_counter() - t0) * 1000
        cites: tuple[Citation, ...] = ()
        evidence = e.evidence
        truncated = False
        if budgeted is None or result is None:
            answer, usage = NOT_IN_DOCUMENTS, TokenUsage()
            detail: dict[str, str | int | float | bool] = {"passages": 0}
        else:
            prompt, renumbered = budgeted
            judged = judge(result.text, result.finish_reason, self.stop)
            answer, cites, evidence, outcome = self._publishable(e, prompt, renumbered, judged)
            truncated = judged.truncated and outcome == "llm"
            usage = TokenUsage(
                prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens
            )
            detail = {
                "passages": len(prompt.passages_used),
                "dropped": prompt.dropped,
                "trimmed": prompt.trimmed,
                "ttft_ms": round(result.ttft_ms or 0.0, 1),
                "finish": result.finish_reason,
                "outcome": outcome,
            }
            if judged.reason:
                detail["judged"] = judged.reason
        response = QueryResponse(
            event_id=derive_event_id(e.event_id, f"generation-{self.tier}"),
            tenant=e.tenant,
            request_id=e.request.request_id,
            status="answered",
            answer=answer,
            citations=cites,
            evidence=evidence,
            truncated=truncated,
            usage=usage,
            tier=self.tier,
            degraded=e.degraded,
            trace=e.trace,
            callback_url=e.request.callback_url,
            cache_keys=(
                None if self.cache_keys is None else self.cache_keys.of(e.request, e.index_version)
            ),
        ).traced(f"generation-{self.tier}", started, took, **detail)
        return response

    def _publishable(
        self,
        e: RerankedPassages,
        prompt: Prompt,
        renumbered: tuple[EvidenceSpan, ...],
        judged: Judged,
    ) -> tuple[str, tuple[Citation, ...], tuple[EvidenceSpan, ...], str]:
        """``(answer, citations, evidence, outcome)`` for a judged completion; ``outcome`` is
        ``llm``, ``refusal`` (the model's not-in-the-documents sentence), ``evidence`` (the
        evidence answer replaced an unusable completion) or ``empty`` (nothing to fall back on).
        """
        if judged.fallback:
            if e.fallback is None or not e.evidence:
                return NOT_IN_DOCUMENTS, (), (), "empty"
            # The evidence answer the evidence stage composed (never composed again here).
            cites = citations_of(e.fallback.cited, e.passages)
            return e.fallback.text, cites, e.evidence, "evidence"
        if is_refusal(judged.text):  # "not in the documents" cites nothing
            return judged.text, (), renumbered, "refusal"
        return judged.text, citations(judged.text, prompt.passages_used), renumbered, "llm"
