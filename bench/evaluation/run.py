"""Run an evaluation: every question through each retrieval mode, then answers.

This measures the system as it serves: the live chunk index (alias ``ragstream-chunks`` by
default), the retrieval pool's embedder and searches, the rerank pool's backends and top-K
selection, and the generation pools' prompt and model server (see
:mod:`bench.evaluation.modes` and :mod:`bench.evaluation.answers`). Kafka, the caches and the API
are not involved: the stages are called in-process, so the numbers are those of the components,
not of a cached answer.

A question with a ``history`` (a follow-up) is asked as a conversation, as a client asks it: its
earlier questions are answered first (the same retrieval, definitions and first answer tier;
:func:`earlier_answers`), then the follow-up is sent with those turns, questions and answers,
as the event's ``conversation`` (:func:`workers.conversation.question_of` makes it standalone;
the evidence stage does not give the last answer again). Its record keeps the standalone
question. The
off-topic probe set (:data:`~bench.evaluation.questions.OFF_TOPIC_QUESTIONS`, unless
``EvalOptions.off_topic`` is ``None``) is retrieved and answered with the file's questions, in
every configuration, and reported on its own (``answers.off_topic``, each tier's
``off_topic``, ``off_topic_questions``): it never enters the file's own metrics. A probe whose
text is a question of the file is answered once.

Answer containment (``passages``; :func:`~bench.evaluation.metrics.answer_passage_rank`) is
judged on the passages the rerank pool sends on, built in-process as the pool builds them
(:func:`served_passages`): the default mode's list (the fused top N scored by the configured
rerank backend and ordered by :func:`workers.rerank.select_top_k` with the per-document cap) cut
at top K, then the evidence stage's identifier promotion and the definition entries appended
(:mod:`workers.pools.rerank`). These are the passages the answers are produced from, not the
citations of an answer; each passage's text is its title line and text, as the reranker reads
it. It needs the default mode, not answers: ``--no-generate`` measures it too.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from elasticsearch import Elasticsearch

from bench.evaluation.answers import Answer, Answerer, AnswerJob, tier_configs
from bench.evaluation.metrics import (
    Judged,
    answer_metrics,
    answer_passage_rank,
    answer_words,
    containment_metrics,
    first_relevant_rank,
    group_by,
    is_answer_first,
    is_correct,
    percentile,
    retrieval_metrics,
)
from bench.evaluation.modes import ALL_MODES, ModeRunner, plan_modes, rerank_text
from bench.evaluation.questions import (
    CORPUS_ROOTS,
    OFF_TOPIC_QUESTIONS,
    REFUSAL_KINDS,
    SAMPLE_QUESTIONS,
    EvalQuestion,
    EvaluationError,
    load_questions,
    page_of,
)
from bench.evaluation.report import (
    AnswersReport,
    EvalReport,
    Headline,
    ModeReport,
    PassagesReport,
    QuestionRecord,
    TierReport,
    write_report,
)
from ragstream.errors import ConfigurationError, RagstreamError, TransientError
from ragstream.settings import Settings
from replay.measures import is_refusal
from topics.queries import QueryRequest, Turn
from topics.retrieved import Candidate
from workers.conversation import question_of, standalone_question
from workers.pools.components import build_proposer, definition_candidates
from workers.retrieval.definitions import DefinitionIndex

#: Questions per ``_msearch`` round trip.
SEARCH_BATCH = 16
#: Pages of the default mode's top passages listed per question in the report.
TOP_PAGES = 5


@dataclass(frozen=True)
class EvalOptions:
    """What to run.

    Attributes:
        modes: retrieval modes to compare (:data:`bench.evaluation.modes.ALL_MODES`); those that
            cannot run here are reported as skipped.
        tenant: the tenant whose chunks are searched.
        index_alias: the chunk index alias; ``None``: ``settings.elasticsearch.index_alias``.
        generate: also generate answers with the default configuration.
        limit: evaluate only the first ``limit`` questions.
        top_n: fused candidates (N); ``None``: ``settings.retrieval.top_n``.
        top_k: passages given to generation (K); ``None``: ``settings.rerank.top_k``.
        max_tokens: answer budget in tokens; ``None``: the generation settings'.
        instruction: the prompt's instruction; ``None``: the generation pool's.
        roots: corpus name -> the manual's html root, for mapping chunks to pages.
        tiers: answer configurations to measure (:func:`bench.evaluation.answers.
            tier_configs`); the first is the one the records and the headline show.
        llms: ``(catalog model, server URL)`` pairs, each measured as ``llm:<model>``.
        off_topic: the off-topic probe file run beside the questions; ``None``: none.
    """

    modes: tuple[str, ...] = ALL_MODES
    tenant: str = "default"
    index_alias: str | None = None
    generate: bool = True
    limit: int | None = None
    top_n: int | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    instruction: str | None = None
    roots: Mapping[str, Path] = field(default_factory=lambda: dict(CORPUS_ROOTS))
    tiers: tuple[str, ...] = ("routed", "evidence", "small")
    llms: tuple[tuple[str, str], ...] = ()
    off_topic: Path | None = OFF_TOPIC_QUESTIONS


#: An earlier turn's key in :func:`earlier_answers`: its conversation before it and its question.
TurnKey = tuple[tuple[str, ...], str]
#: Retrieval kept between runs of :func:`run_evaluation` over the same questions (the rule
#: ablation, :mod:`bench.evaluation.ablation`): keyed by the modes and the requests, each run's
#: query vectors, ranked lists and definition entries. The rules of the evidence stage act after
#: retrieval, so a second run with a rule switched off retrieves nothing again.
RetrievalMemo = dict[tuple[Any, ...], tuple[Any, ...]]


#: The fields of a request that differ between two runs asking the same (fresh ids, the time).
_PER_RUN_FIELDS = frozenset({"deadline", "event_id", "created_at", "request_id"})


def memo_key(alias: str, modes: Sequence[str], requests: Sequence[QueryRequest]) -> tuple[Any, ...]:
    """The :data:`RetrievalMemo` key of retrieving ``requests`` in ``modes`` from ``alias``:
    what they ask, not the ids and times each run gives them afresh (with those in it, no run
    found the one before)."""
    return (
        alias,
        tuple(modes),
        tuple(r.model_dump_json(exclude=set(_PER_RUN_FIELDS)) for r in requests),
    )


def earlier_answers(
    settings: Settings,
    qs: Sequence[EvalQuestion],
    options: EvalOptions,
    say: Callable[[str], None],
    memo: RetrievalMemo | None = None,
) -> dict[TurnKey, str]:
    """The answer of every earlier turn of the follow-ups in ``qs``, keyed by ``(the questions
    before it, its question)``: each asked as a question of its own (after the questions before
    it, without their answers) through the default mode and the first of ``options.tiers``.
    An earlier turn that errs answers "" (the follow-up is then asked with its question only).

    Raises:
        As :func:`run_evaluation`.
    """
    keys = list(dict.fromkeys((q.history[:j], h) for q in qs for j, h in enumerate(q.history)))
    if not keys:
        return {}
    turns = [
        EvalQuestion(
            id=f"turn-{n}",
            corpus=next(q.corpus for q in qs if h in q.history),
            question=h,
            answer_patterns=(".",),
            kind="followup" if before else "factual",
            history=before,
        )
        for n, (before, h) in enumerate(keys, start=1)
    ]
    say(f"answering {len(turns)} earlier turns of the follow-ups")
    inner = replace(options, limit=None, off_topic=None, tiers=options.tiers[:1], modes=())
    report = run_evaluation(settings, turns, inner, earlier={}, memo=memo)
    return {k: r.answer or "" for k, r in zip(keys, report.questions, strict=True)}


def conversation(q: EvalQuestion, earlier: Mapping[TurnKey, str]) -> tuple[Turn, ...]:
    """The ``conversation`` of ``q``'s event: its history's questions with their answers in
    ``earlier`` ("" for one not there)."""
    return tuple(
        Turn(question=h, answer=earlier.get((q.history[:j], h), ""))
        for j, h in enumerate(q.history)
    )


def asked(q: EvalQuestion) -> str:
    """The text retrieved and answered for ``q``: the question itself, or for a follow-up the
    standalone question made of its history (:func:`workers.conversation.
    standalone_question`)."""
    return standalone_question(q.history, q.question) if q.history else q.question


def _probes(
    path: Path | None, qs: list[EvalQuestion]
) -> tuple[list[EvalQuestion], list[int], list[EvalQuestion]]:
    """``(probes, rows, every)``: the probe questions of ``path``; for each, its row in
    ``every``, which is ``qs`` followed by the probes not already in ``qs`` (a probe asked as a
    question of ``qs`` is answered once)."""
    if path is None:
        return [], [], qs
    probes = load_questions(path)
    rows = {asked(q): i for i, q in enumerate(qs)}
    every = list(qs)
    where: list[int] = []
    for p in probes:
        text = asked(p)
        if text not in rows:
            rows[text] = len(every)
            every.append(p)
        where.append(rows[text])
    return probes, where, every


def default_mode(settings: Settings) -> str:
    """The mode the running system uses: hybrid retrieval, then the configured reranker."""
    return f"hybrid+{settings.rerank.backend}"


@dataclass
class _Run:
    """Ranked lists and stage timings gathered for every question."""

    lists: dict[str, list[list[Candidate]]] = field(default_factory=dict)
    #: The fused candidates (top N) of every question, as the rerank pool receives them.
    candidates: list[list[Candidate]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def add(self, mode: str, lists: list[list[Candidate]], seconds: float) -> None:
        self.lists.setdefault(mode, []).extend(lists)
        self.seconds[mode] = self.seconds.get(mode, 0.0) + seconds

    def skip(self, mode: str, reason: str) -> None:
        self.lists.pop(mode, None)
        self.seconds.pop(mode, None)
        self.skipped[mode] = reason


def run_evaluation(
    settings: Settings,
    questions: Sequence[EvalQuestion],
    options: EvalOptions,
    *,
    questions_file: str = "",
    progress: Callable[[str], None] | None = None,
    earlier: Mapping[TurnKey, str] | None = None,
    memo: RetrievalMemo | None = None,
) -> EvalReport:
    """Evaluate ``questions`` (see the module docstring) and return the report. ``earlier``:
    the follow-ups' earlier answers (:func:`earlier_answers`; ``None``: answered here first
    when answers are asked). ``memo``: retrieval of earlier runs (:data:`RetrievalMemo`),
    used and filled; its timings are those of the run that retrieved.

    Raises:
        EvaluationError: no question, or the default mode cannot run while answers are asked.
        ValueError: an unknown mode.
        TransientError: Elasticsearch, Redis or the model server failed.
    """
    say = progress or (lambda _msg: None)
    qs = list(questions[: options.limit] if options.limit else questions)
    if not qs:
        raise EvaluationError("no questions to evaluate")
    probes, probe_rows, every = _probes(options.off_topic if options.generate else None, qs)
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    default = default_mode(settings)
    plan = plan_modes(options.modes, settings)
    if options.generate and default in plan.skipped:
        raise EvaluationError(f"the default mode {default} cannot run: {plan.skipped[default]}")
    to_run = list(plan.runnable)
    if options.generate and default not in to_run:
        to_run.append(default)
    top_n = options.top_n or settings.retrieval.top_n
    top_k = options.top_k or settings.rerank.top_k
    alias = options.index_alias or settings.elasticsearch.index_alias

    from ingest.factory import build_embedder

    embedder = build_embedder(settings, role="query")
    if earlier is None:
        earlier = earlier_answers(settings, every, options, say, memo) if options.generate else {}
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    requests = [
        QueryRequest(
            tenant=options.tenant,
            query=q.question,
            conversation=conversation(q, earlier),
            deadline=deadline,
            top_n=top_n,
            top_k=top_k,
        )
        for q in every
    ]
    key = memo_key(alias, to_run, requests)
    if memo is not None and key in memo:
        vectors, run, definitions = memo[key]
    else:
        vectors, run, definitions = _retrieve_all(settings, embedder, alias, to_run, requests, say)
        if memo is not None:
            memo[key] = (vectors, run, definitions)
    if options.generate and default in run.skipped:
        raise EvaluationError(f"the default mode {default} cannot run: {run.skipped[default]}")
    answers: dict[str, list[Answer]] | None = None
    gen_s = 0.0
    served = (
        served_passages(requests, run.lists[default], run.candidates, definitions, top_k)
        if default in run.lists
        else None
    )
    if options.generate and served is not None:
        jobs = _jobs(embedder, requests, vectors, served)
        configs = tier_configs(settings, options.tiers, options.llms)
        say(f"answering {len(jobs)} questions in {', '.join(c.name for c in configs)}")
        tg = time.perf_counter()
        answers = _generate(settings, embedder, options, jobs, configs, say)
        gen_s = time.perf_counter() - tg
    main = next(iter(answers.values())) if answers else None
    rows = list(range(len(qs)))
    records, judged = _records(qs, rows, run, (main, served), options.roots, default)
    probe_records, probe_judged = _records(
        probes, probe_rows, run, (main, served), options.roots, default
    )
    return EvalReport(
        questions_file=questions_file,
        n_questions=len(qs),
        tenant=options.tenant,
        index_alias=alias,
        started_at=started.isoformat(timespec="seconds"),
        duration_s=round(time.perf_counter() - t0, 1),
        default_mode=default,
        config=_config(settings, options, top_n, top_k),
        headline=Headline(
            hit_at_5=None, mrr_at_10=None, answer_accuracy=None, absent_refusal_rate=None
        ),
        modes={
            m: _mode_report(qs, [r.ranks[m] for r in records], run.seconds[m] / len(every))
            for m in run.lists
        },
        skipped_modes={**plan.skipped, **run.skipped},
        passages=_passages_report(qs, records, default, top_k) if served is not None else None,
        answers=_answers_report(
            qs,
            answers,
            judged,
            default=default,
            top_k=top_k,
            gen_s=gen_s,
            probes=(probes, probe_rows, probe_judged),
        )
        if answers
        else None,
        questions=records,
        off_topic_file=str(options.off_topic) if probes else "",
        off_topic_questions=probe_records,
    ).with_headline()


def _retrieve_all(  # noqa: PLR0917 - one call site
    settings: Settings,
    embedder: Any,
    alias: str,
    to_run: Sequence[str],
    requests: Sequence[QueryRequest],
    say: Callable[[str], None],
) -> tuple[npt.NDArray[np.float32], _Run, list[list[Candidate]]]:
    """The query vectors, the ranked lists of every mode (their seconds include the embedding)
    and the definition entries of ``requests``."""
    tv = time.perf_counter()
    vectors = embedder.embed([question_of(r) for r in requests])
    embed_s = time.perf_counter() - tv
    es = Elasticsearch(
        settings.elasticsearch.url, request_timeout=settings.elasticsearch.request_timeout_s
    )
    try:
        runner = _checked_runner(es, alias, settings, embedder)
        run = _retrieve(runner, to_run, requests, vectors, say)
        definitions = _definitions(settings, es, alias, requests, vectors)
    finally:
        es.close()
    for mode in run.seconds:
        run.seconds[mode] += embed_s
    return vectors, run, definitions


def _definitions(
    settings: Settings,
    es: Elasticsearch,
    alias: str,
    requests: Sequence[QueryRequest],
    vectors: npt.NDArray[np.float32],
) -> list[list[Candidate]]:
    """The retrieval pool's definition entries of every request (with its name proposer,
    never shed: an evaluation is not under load)."""
    proposer = build_proposer(settings)
    try:
        return definition_candidates(
            DefinitionIndex(es, alias),
            requests,
            vectors,
            settings.retrieval.definitions_top,
            proposer,
        )
    finally:
        if proposer is not None:
            proposer.close()


def served_passages(
    requests: Sequence[QueryRequest],
    ranked: Sequence[Sequence[Candidate]],
    candidates: Sequence[Sequence[Candidate]],
    definitions: Sequence[Sequence[Candidate]],
    top_k: int,
) -> list[list[Candidate]]:
    """The passages the rerank pool (with its evidence stage) sends on for each request, as
    :mod:`workers.pools.rerank` builds them: the first ``top_k`` of the default mode's ranked
    list, then :func:`~workers.evidence.stage.promote_identifiers` (at most two further fused
    candidates holding a name the question asks for) and
    :func:`~workers.evidence.stage.attach_definitions` (the definition entries of its pages).

    Args:
        requests: one per question.
        ranked: per request, the reranked list (``select_top_k`` order), best first.
        candidates: per request, the fused top-N candidates the rerank pool received.
        definitions: per request, the retrieval pool's definition entries.
        top_k: passages kept from ``ranked`` (K).

    Returns:
        Per request, its passages, best first.
    """
    from workers.evidence.stage import attach_definitions, promote_identifiers

    return [
        attach_definitions(
            promote_identifiers(question_of(r), list(ranked[i][:top_k]), list(candidates[i])),
            definitions[i],
        )
        for i, r in enumerate(requests)
    ]


def _jobs(
    embedder: Any,
    requests: Sequence[QueryRequest],
    vectors: npt.NDArray[np.float32],
    passages: Sequence[Sequence[Candidate]],
) -> list[AnswerJob]:
    """The answer job of every request: its passages (:func:`served_passages`) and the
    router's tier."""
    from workers.pools.components import build_router

    router = build_router(embedder)
    return [
        AnswerJob(r, passages[i], router.route(r, vectors[i]).tier) for i, r in enumerate(requests)
    ]


def _generate(  # noqa: PLR0917 - one call site
    settings: Settings,
    embedder: Any,
    options: EvalOptions,
    jobs: list[AnswerJob],
    configs: Sequence[Any],
    say: Callable[[str], None],
) -> dict[str, list[Answer]]:
    answerer = Answerer(settings, embedder, options.max_tokens, options.instruction)
    try:
        out = {}
        for config in configs:
            say(f"answers of {config.name}")
            out[config.name] = answerer.answer(jobs, config)
        return out
    finally:
        answerer.close()


def _config(
    settings: Settings, options: EvalOptions, top_n: int, top_k: int
) -> dict[str, str | int | float | None]:
    return {
        "top_n": top_n,
        "top_k": top_k,
        "max_chunks_per_doc": settings.rerank.max_chunks_per_doc,
        "rrf_k": settings.retrieval.rrf_k,
        "bm25_size": settings.retrieval.bm25_size,
        "knn_k": settings.retrieval.knn_k,
        "chunk_tokens": settings.chunking.chunk_tokens,
        "llm": settings.llm.base_url,
        "prompt_style": settings.llm.prompt_style,
        "max_tokens": options.max_tokens or settings.llm.max_tokens,
        "instruction": "the generation pool's"
        if options.instruction is None
        else options.instruction,
    }


def _checked_runner(es: Elasticsearch, alias: str, settings: Settings, embedder: Any) -> ModeRunner:
    """The mode runner of ``alias``, after checking that the index was built with the
    configured embedding model (raises :class:`EvaluationError` if not)."""
    runner = ModeRunner(es, alias, settings)
    try:
        runner.hybrid.check_model(embedder.model_id, embedder.dim)
    except RagstreamError as exc:
        raise EvaluationError(str(exc)) from exc
    return runner


def _retrieve(
    runner: ModeRunner,
    modes: Sequence[str],
    requests: Sequence[QueryRequest],
    vecs: npt.NDArray[np.float32],
    say: Callable[[str], None],
) -> _Run:
    run = _Run()
    singles = [m for m in modes if m in ("bm25", "knn")]
    reranked = [m for m in modes if m.startswith("hybrid+")]
    fused_needed = "hybrid" in modes or bool(reranked)
    for start in range(0, len(requests), SEARCH_BATCH):
        batch = list(requests[start : start + SEARCH_BATCH])
        bvec = vecs[start : start + SEARCH_BATCH]
        say(f"retrieving questions {start + 1}-{start + len(batch)} of {len(requests)}")
        if singles:
            t = time.perf_counter()
            bm25, knn = runner.single_lists(batch, bvec)
            took = time.perf_counter() - t
            for mode, lists in (("bm25", bm25), ("knn", knn)):
                if mode in singles:
                    run.add(mode, lists, took)
        if not fused_needed:
            continue
        t = time.perf_counter()
        fused = runner.fused(batch, bvec)
        fused_s = time.perf_counter() - t
        run.candidates.extend(fused)
        if "hybrid" in modes:
            run.add("hybrid", fused, fused_s)
        for mode in [m for m in reranked if m not in run.skipped]:
            t = time.perf_counter()
            try:
                lists = runner.reranked(mode.removeprefix("hybrid+"), batch, fused)
            except (ConfigurationError, TransientError) as exc:  # no model; server failing
                run.skip(mode, f"{type(exc).__name__}: {exc}")
                continue
            run.add(mode, lists, fused_s + time.perf_counter() - t)
    return run


def _records(  # noqa: PLR0917 - one call site per question set
    qs: Sequence[EvalQuestion],
    rows: Sequence[int],
    run: _Run,
    served: tuple[list[Answer] | None, list[list[Candidate]] | None],
    roots: Mapping[str, Path],
    default: str,
) -> tuple[list[QuestionRecord], list[Judged]]:
    """Per question (``qs[i]`` is row ``rows[i]`` of the run, the answers and the passages
    sent on, ``served``): its record, and its :class:`Judged` answer if answered."""
    answers, passages = served
    records: list[QuestionRecord] = []
    judged: list[Judged] = []
    for q, i in zip(qs, rows, strict=True):
        ranks: dict[str, int | None] = {}
        for mode, lists in run.lists.items():
            pages = [page_of(c.source or c.doc_id, roots) for c in lists[i]]
            ranks[mode] = first_relevant_rank(pages, q.corpus, q.expected_pages)
        top = run.lists[default][i][:TOP_PAGES] if default in run.lists else []
        text = asked(q)
        record = QuestionRecord(
            id=q.id,
            corpus=q.corpus,
            kind=q.kind,
            question=q.question,
            expected_pages=list(q.expected_pages),
            ranks=ranks,
            top_pages=[str(page_of(c.source or c.doc_id, roots) or c.doc_id) for c in top],
            history=list(q.history),
            standalone=None if text == q.question else text,
            answer_patterns=list(q.answer_patterns),
            answer_rank=answer_passage_rank(
                [rerank_text(c) for c in passages[i]], q.answer_patterns
            )
            if passages is not None and q.answerable
            else None,
        )
        if answers is not None:
            a = answers[i]
            j = judge(q, a)
            judged.append(j)
            first = a.cited[0] if a.cited else None
            record = record.model_copy(
                update={
                    "prompt_tokens": a.prompt_tokens,
                    "completion_tokens": a.completion_tokens,
                    "answer": a.text,
                    "correct": j.correct,
                    "refused": j.refused,
                    "error": a.error,
                    "answer_first": j.first,
                    "words": j.words,
                    "latency_ms": round(a.latency_ms, 1),
                    "first_cited_page": None
                    if first is None
                    else str(page_of(first, roots) or first),
                }
            )
        records.append(record)
    return records, judged


def judge(q: EvalQuestion, a: Answer) -> Judged:
    """How ``a`` answers ``q``: correct (a pattern, within the word limit; for a question the
    manuals cannot answer, a refusal that matches its patterns: the shared set's rule "an
    absent question is answered correctly by a refusal", so a quote that happens to say "not
    ... in the documentation" is no right answer; any refusal when it has no patterns),
    refused, answered first (:func:`~bench.evaluation.metrics.is_answer_first`), its words and
    latency; an error response is neither correct nor a refusal and has no words."""
    ok = a.error is None
    no = ok and refused(a)
    refusal_expected = q.kind in REFUSAL_KINDS or not q.answerable
    if refusal_expected and not q.answer_patterns:  # any refusal is right
        correct = no
    else:
        correct = ok and (no or not refusal_expected) and is_correct(a.text, q.answer_patterns)
    return Judged(
        answerable=q.answerable,
        correct=correct,
        refused=no,
        kind=q.kind,
        first=ok
        and is_answer_first(
            a.text,
            q.answer_patterns,
            refusal_expected=refusal_expected,
            refused=no,
        ),
        words=answer_words(a.text) if ok else None,
        latency_ms=a.latency_ms,
        error=not ok,
    )


def _judge(qs: Sequence[EvalQuestion], answers: Sequence[Answer]) -> list[Judged]:
    return [judge(q, a) for q, a in zip(qs, answers, strict=True)]


def refused(answer: Answer) -> bool:
    """Whether ``answer`` declines to answer: the system's own refusal (known, not guessed), or
    a model's text that says so (:func:`is_refusal`). A quoted piece of evidence is never a
    refusal, whatever words it quotes ("Cannot find function ..." in a C example)."""
    if answer.outcome in ("evidence", "fallback"):
        return False
    return answer.outcome == "refusal" or is_refusal(answer.text)


def _tier_report(
    qs: list[EvalQuestion],
    answers: list[Answer],
    probes: tuple[list[EvalQuestion], list[int]],
) -> TierReport:
    """One configuration's report: ``answers`` holds a row for every question of ``qs``
    (first) and the probes (``probes``: the probe questions and their rows)."""
    probe_qs, probe_rows = probes
    probe_judged = _judge(probe_qs, [answers[r] for r in probe_rows])
    answers = answers[: len(qs)]
    judged = _judge(qs, answers)
    pairs = list(zip(qs, judged, strict=True))
    tiers = [a.tier for a in answers]
    prompts = [float(a.prompt_tokens) for a in answers if a.prompt_tokens]
    return TierReport(
        overall=answer_metrics(judged),
        by_kind={
            k: answer_metrics([j for _, j in g])
            for k, g in group_by(pairs, lambda p: p[0].kind).items()
        },
        share={t: round(tiers.count(t) / len(tiers), 3) for t in sorted(set(tiers))},
        empty=sum(1 for a in answers if a.empty),
        truncated=sum(1 for a in answers if a.truncated),
        fallbacks=sum(1 for a in answers if a.outcome == "fallback"),
        errors=sum(1 for a in answers if a.error is not None),
        prompt_tokens_p50=percentile(prompts, 50),
        latency_p50_ms=percentile([a.latency_ms for a in answers], 50),
        latency_p95_ms=percentile([a.latency_ms for a in answers], 95),
        off_topic=answer_metrics(probe_judged) if probe_qs else None,
    )


def _answers_report(
    qs: list[EvalQuestion],
    answers: dict[str, list[Answer]],
    judged: list[Judged],
    *,
    default: str,
    top_k: int,
    gen_s: float,
    probes: tuple[list[EvalQuestion], list[int], list[Judged]],
) -> AnswersReport:
    pairs = list(zip(qs, judged, strict=True))
    main = next(iter(answers.values()))[: len(qs)]
    probe_qs, probe_rows, probe_judged = probes
    return AnswersReport(
        mode=default,
        top_k=top_k,
        overall=answer_metrics(judged),
        by_kind={
            k: answer_metrics([j for _, j in g])
            for k, g in group_by(pairs, lambda p: p[0].kind).items()
        },
        by_corpus={
            c: answer_metrics([j for _, j in g])
            for c, g in group_by(pairs, lambda p: p[0].corpus).items()
        },
        seconds_per_question=round(gen_s / len(next(iter(answers.values()))), 3),
        empty_completions=sum(1 for a in main if a.empty),
        tiers={name: _tier_report(qs, a, (probe_qs, probe_rows)) for name, a in answers.items()},
        off_topic=answer_metrics(probe_judged) if probe_qs else None,
    )


def _passages_report(
    qs: list[EvalQuestion], records: list[QuestionRecord], default: str, top_k: int
) -> PassagesReport:
    """Answer-in-top-k of the passages sent on, over the answerable questions of ``qs``."""
    pairs = [(q, r.answer_rank) for q, r in zip(qs, records, strict=True) if q.answerable]
    return PassagesReport(
        mode=default,
        top_k=top_k,
        overall=containment_metrics([r for _, r in pairs]),
        by_kind={
            k: containment_metrics([r for _, r in g])
            for k, g in group_by(pairs, lambda p: p[0].kind).items()
        },
        by_corpus={
            c: containment_metrics([r for _, r in g])
            for c, g in group_by(pairs, lambda p: p[0].corpus).items()
        },
    )


def _mode_report(qs: list[EvalQuestion], ranks: list[int | None], seconds: float) -> ModeReport:
    pairs = [(q, r) for q, r in zip(qs, ranks, strict=True) if q.answerable]
    return ModeReport(
        overall=retrieval_metrics([r for _, r in pairs]),
        by_kind={
            k: retrieval_metrics([r for _, r in g])
            for k, g in group_by(pairs, lambda p: p[0].kind).items()
        },
        by_corpus={
            c: retrieval_metrics([r for _, r in g])
            for c, g in group_by(pairs, lambda p: p[0].corpus).items()
        },
        seconds_per_question=round(seconds, 4),
    )


@dataclass(frozen=True)
class BenchEval:
    """What ``make bench`` takes from an evaluation: the headline numbers and the report.

    Attributes:
        hit_at_5: share of answerable questions with an expected page in the default mode's
            top 5 chunks.
        mrr_at_10: mean reciprocal rank at 10 of the default mode.
        answer_accuracy: share of answers matching their patterns (``None`` without answers).
        absent_refusal_rate: share of ``absent`` questions answered with a refusal.
        report: the full report; ``json_path``/``md_path``: where it was written.
        false_refusal_rate: share of answerable questions refused (``None`` without answers).
        answer_latency_p50_ms: median answer latency of the default configuration, ms.
    """

    hit_at_5: float | None
    mrr_at_10: float | None
    answer_accuracy: float | None
    absent_refusal_rate: float | None
    report: EvalReport
    json_path: Path
    md_path: Path
    false_refusal_rate: float | None = None
    answer_latency_p50_ms: float | None = None

    def summary(self) -> dict[str, float | None]:
        """The headline numbers by name (``eval.<name>`` in ``summary.json``): those above and
        the rest of :class:`~bench.evaluation.report.Headline` (how-to accuracy, answer-first
        rate, words, off-topic refusal rate)."""
        return self.report.headline.model_dump()


def evaluate_for_bench(
    settings: Settings,
    out_dir: Path,
    questions_file: Path | None = None,
    options: EvalOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchEval:
    """Run the evaluation and write ``eval.json`` and ``eval.md`` into ``out_dir``.

    Args:
        settings: the settings tree.
        out_dir: output directory (created).
        questions_file: JSONL questions; ``None``: the repository's sample set.
        options: what to run; ``None``: every mode, with answers, tenant ``default``.
        progress: called with a line of progress now and then.

    Raises:
        QuestionFileError: the question file is unreadable or invalid.
        EvaluationError, TransientError: as :func:`run_evaluation`.
    """
    path = questions_file or SAMPLE_QUESTIONS
    report = run_evaluation(
        settings,
        load_questions(path),
        options or EvalOptions(),
        questions_file=str(path),
        progress=progress,
    )
    json_path, md_path = write_report(report, out_dir)
    h = report.headline
    return BenchEval(
        h.hit_at_5,
        h.mrr_at_10,
        h.answer_accuracy,
        h.absent_refusal_rate,
        report,
        json_path,
        md_path,
        h.false_refusal_rate,
        h.answer_latency_p50_ms,
    )
