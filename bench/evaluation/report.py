"""The evaluation report: its JSON model, its Markdown rendering and the one-line summary."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench.evaluation.metrics import AnswerMetrics, ContainmentMetrics, RetrievalMetrics


class ModeReport(BaseModel):
    """Retrieval metrics of one mode, overall and per ``kind`` and ``corpus`` (answerable
    questions only); ``seconds_per_question``: wall time of the mode's stages (embedding,
    searches, rerank) divided by the questions, run in batches."""

    model_config = ConfigDict(frozen=True)

    overall: RetrievalMetrics
    by_kind: dict[str, RetrievalMetrics]
    by_corpus: dict[str, RetrievalMetrics]
    seconds_per_question: float


class PassagesReport(BaseModel):
    """Answer-in-top-k of the passages the rerank pool sends on (``mode``'s list cut at
    ``top_k``, promoted identifiers and definition entries after it; see
    :func:`bench.evaluation.run.served_passages`), overall and per ``kind`` and ``corpus``
    (answerable questions only)."""

    model_config = ConfigDict(frozen=True)

    mode: str
    top_k: int
    overall: ContainmentMetrics
    by_kind: dict[str, ContainmentMetrics]
    by_corpus: dict[str, ContainmentMetrics]


class TierReport(BaseModel):
    """One answer configuration (``routed``, ``evidence``, ``small``, ``large``,
    ``llm:<model>``): its answer metrics overall and per kind; ``share``: the share of
    questions each tier answered; ``empty``: completions with no usable text (replaced by the
    evidence answer); ``truncated``: LLM answers cut at their token limit; ``fallbacks``: LLM
    completions replaced by the evidence answer; ``errors``: typed errors; prompt tokens and
    latency (evidence stage plus generation, per question) as p50/p95."""

    model_config = ConfigDict(frozen=True)

    overall: AnswerMetrics
    by_kind: dict[str, AnswerMetrics]
    share: dict[str, float]
    empty: int = 0
    truncated: int = 0
    fallbacks: int = 0
    errors: int = 0
    prompt_tokens_p50: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    #: The off-topic probe set (:data:`~bench.evaluation.questions.OFF_TOPIC_QUESTIONS`)
    #: answered in this configuration; ``None`` when it did not run.
    off_topic: AnswerMetrics | None = None


class AnswersReport(BaseModel):
    """Answer metrics of the default configuration, overall and per ``kind`` and ``corpus``;
    ``seconds_per_question``: generation wall time divided by the questions;
    ``empty_completions``: answers for which the model generated no text (at most the one
    token that hit a stop sequence); the generation pool then answers its not-in-the-documents
    sentence, which counts as a refusal."""

    model_config = ConfigDict(frozen=True)

    mode: str
    top_k: int
    overall: AnswerMetrics
    by_kind: dict[str, AnswerMetrics]
    by_corpus: dict[str, AnswerMetrics]
    seconds_per_question: float
    empty_completions: int = 0
    #: The default configuration is ``routed``; every configuration measured, by name.
    tiers: dict[str, TierReport] = {}
    #: The off-topic probe set answered by the default configuration (not in ``overall``).
    off_topic: AnswerMetrics | None = None


class QuestionRecord(BaseModel):
    """One question's outcome: its rank per mode (``None``: no expected page in the list, or
    an ``absent`` question), the pages of the default mode's top passages, and its answer with
    its size in the serving model's tokens (``completion_tokens`` <= 1 with the
    not-in-the-documents sentence: the model produced no text and the pool answered that).

    ``history`` holds the earlier questions of a follow-up and ``standalone`` the question that
    was retrieved and answered (``None`` when it is ``question`` itself); ``answer_first``: a
    pattern matches the answer's first sentence (a refusal, for a question whose right answer
    is one); ``words``: the answer's words; ``first_cited_page``: the page of the first passage
    the answer cites (``corpus:page``, or the document's location outside the manuals);
    ``answer_rank``: the 1-based position of the first passage sent on that an answer pattern
    matches (``None``: none does, or the question is not answerable)."""

    model_config = ConfigDict(frozen=True)

    id: str
    corpus: str
    kind: str
    question: str
    expected_pages: list[str]
    ranks: dict[str, int | None]
    top_pages: list[str]
    answer: str | None = None
    correct: bool | None = None
    refused: bool | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    history: list[str] = []
    standalone: str | None = None
    answer_patterns: list[str] = []
    answer_first: bool | None = None
    words: int | None = None
    latency_ms: float | None = None
    first_cited_page: str | None = None
    answer_rank: int | None = None


class Headline(BaseModel):
    """The numbers of the benchmark summary (``eval.<name>``): the default retrieval mode's
    hit@5 and MRR@10 and the default answer configuration's answers (``None`` when not
    measured, e.g. answer metrics with ``--no-generate``).

    Attributes:
        answer_accuracy: over all questions of the file.
        howto_accuracy: over its ``howto`` questions.
        answer_first_rate: answerable questions whose answer's first sentence matches.
        factual_words_p50: words of the answers to ``factual`` questions, p50.
        answer_words_p50, answer_words_p90: words of all answers.
        absent_refusal_rate: ``absent`` questions refused.
        off_topic_refusal_rate: the off-topic probe set refused (the file's own ``off_topic``
            questions when the probes did not run).
        false_refusal_rate: answerable questions refused.
        answer_latency_p50_ms: the ``routed`` configuration's answer latency (else the first's).
        hit_at_1: the default retrieval mode's hit@1.
        answer_in_top_1, answer_in_top_3, answer_in_top_5: answerable questions with an answer
            pattern in the first 1, 3, 5 passages sent on.
        crag_score: CRAG score (accurate rate - hallucination rate) of all questions.
        hallucination_rate, missing_rate: CRAG hallucinated and missing answers, of all.
    """

    model_config = ConfigDict(frozen=True)

    hit_at_5: float | None
    mrr_at_10: float | None
    answer_accuracy: float | None
    absent_refusal_rate: float | None
    false_refusal_rate: float | None = None
    answer_latency_p50_ms: float | None = None
    howto_accuracy: float | None = None
    answer_first_rate: float | None = None
    factual_words_p50: float | None = None
    answer_words_p50: float | None = None
    answer_words_p90: float | None = None
    off_topic_refusal_rate: float | None = None
    hit_at_1: float | None = None
    answer_in_top_1: float | None = None
    answer_in_top_3: float | None = None
    answer_in_top_5: float | None = None
    crag_score: float | None = None
    hallucination_rate: float | None = None
    missing_rate: float | None = None


class EvalReport(BaseModel):
    """Everything one ``ragstream eval`` run measured (written as ``eval.json``)."""

    model_config = ConfigDict(frozen=True)

    questions_file: str
    n_questions: int
    tenant: str
    index_alias: str
    started_at: str
    duration_s: float
    default_mode: str
    config: dict[str, str | int | float | None]
    headline: Headline
    modes: dict[str, ModeReport]
    skipped_modes: dict[str, str]
    answers: AnswersReport | None
    questions: list[QuestionRecord]
    #: Answer-in-top-k of the passages sent on (``None`` when the default mode did not run).
    passages: PassagesReport | None = None
    #: The off-topic probe file run beside the questions ("" when it did not run) and its
    #: questions' records (answered by the default configuration).
    off_topic_file: str = ""
    off_topic_questions: list[QuestionRecord] = []

    def aggregate_only(self) -> EvalReport:
        """A copy without any one question's record (its question, answer, ranks): the
        aggregate numbers only, for judging a blind set without reading its answers."""
        return self.model_copy(update={"questions": [], "off_topic_questions": []})

    def with_headline(self) -> EvalReport:
        """A copy whose headline holds the default mode's hit@5 and MRR@10 and the default
        answer configuration's accuracy, refusal rates, words and latency."""
        mode = self.modes.get(self.default_mode)
        a = self.answers
        answers = a.overall if a is not None else None
        tiers = a.tiers if a is not None else {}
        routed = tiers.get("routed") or next(iter(tiers.values()), None)
        kinds = a.by_kind if a is not None else {}
        howto, factual = kinds.get("howto"), kinds.get("factual")
        off_topic_of = (a.off_topic or a.overall) if a is not None else None
        off_topic = off_topic_of.off_topic_refusal_rate if off_topic_of is not None else None
        held = self.passages.overall if self.passages is not None else None
        headline = Headline(
            hit_at_5=mode.overall.hit_at_5 if mode else None,
            mrr_at_10=mode.overall.mrr_at_10 if mode else None,
            answer_accuracy=answers.answer_accuracy if answers else None,
            absent_refusal_rate=answers.absent_refusal_rate if answers else None,
            false_refusal_rate=answers.false_refusal_rate if answers else None,
            answer_latency_p50_ms=routed.latency_p50_ms if routed else None,
            howto_accuracy=howto.answer_accuracy if howto else None,
            answer_first_rate=answers.answer_first_rate if answers else None,
            factual_words_p50=factual.words_p50 if factual else None,
            answer_words_p50=answers.words_p50 if answers else None,
            answer_words_p90=answers.words_p90 if answers else None,
            off_topic_refusal_rate=off_topic,
            hit_at_1=mode.overall.hit_at_1 if mode else None,
            answer_in_top_1=held.at_1 if held else None,
            answer_in_top_3=held.at_3 if held else None,
            answer_in_top_5=held.at_5 if held else None,
            crag_score=answers.crag_score if answers else None,
            hallucination_rate=answers.hallucination_rate if answers else None,
            missing_rate=answers.missing_rate if answers else None,
        )
        return self.model_copy(update={"headline": headline})


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _retrieval_rows(label: str, m: RetrievalMetrics, extra: str = "") -> str:
    return (
        f"| {label} | {m.n} | {_f(m.hit_at_1)} | {_f(m.hit_at.get(3))} | {_f(m.hit_at_5)} "
        f"| {_f(m.hit_at_10)} | {_f(m.hit_at.get(30))} | {_f(m.mrr_at_10)} |{extra}"
    )


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _answer_row(label: str, m: AnswerMetrics) -> str:
    return (
        f"| {label} | {m.n} | {m.correct} | {_f(m.answer_accuracy)} "
        f"| {_f(m.answerable_accuracy)} | {m.absent_n} | {_f(m.absent_refusal_rate)} "
        f"| {_f(m.false_refusal_rate)} | {m.off_topic_n} | {_f(m.off_topic_refusal_rate)} "
        f"| {m.answer_first} | {_f(m.answer_first_rate)} | {_n(m.words_p50)} "
        f"| {_n(m.words_p90)} | {_n(m.latency_p50_ms)} | {_n(m.latency_p95_ms)} "
        f"| {m.accurate} | {m.hallucinated} | {m.missing} | {_f(m.crag_score)} |"
    )


RETRIEVAL_HEAD = (
    "| {col} | n | hit@1 | hit@3 | hit@5 | hit@10 | hit@30 | MRR@10 |{extra_head}\n"
    "|---|---|---|---|---|---|---|---|{extra_rule}"
)
ANSWER_HEAD = (
    "| {col} | n | correct | accuracy | accuracy (answerable) | absent | absent refusal rate "
    "| false refusal rate | off-topic | off-topic refusal rate | answer first "
    "| answer first rate (answerable) | words p50 | words p90 | latency p50 ms | p95 ms "
    "| accurate | hallucinated | missing | CRAG score |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)
SUMMARY_HEAD = (
    "| {col} | n | hit@1 | MRR@10 | answer in top 1 | top 3 | top 5 | accuracy | CRAG score "
    "| hallucinated | missing |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def to_markdown(report: EvalReport) -> str:
    """The report as Markdown tables: modes, per kind, per corpus, answers, per question."""
    lines = [
        f"# Evaluation: {report.questions_file}",
        "",
        f"{report.n_questions} questions, tenant `{report.tenant}`, index "
        f"`{report.index_alias}`, {report.started_at}, {report.duration_s:.0f} s. "
        f"Default configuration: `{report.default_mode}` "
        + ", ".join(f"{k}={v}" for k, v in report.config.items()),
        *_summary_lines(report),
        "",
        "## Retrieval (answerable questions; rank = first chunk of an expected page)",
        "",
        RETRIEVAL_HEAD.format(col="mode", extra_head=" s/question |", extra_rule="---|"),
    ]
    for mode, m in report.modes.items():
        lines.append(_retrieval_rows(mode, m.overall, f" {m.seconds_per_question:.3f} |"))
    for mode, reason in report.skipped_modes.items():
        lines.append(f"| {mode} | skipped: {reason} |||||||")
    for group in ("kind", "corpus"):
        lines += [
            "",
            f"### Per {group}",
            "",
            RETRIEVAL_HEAD.format(col=f"mode / {group}", extra_head="", extra_rule=""),
        ]
        for mode, m in report.modes.items():
            groups = m.by_kind if group == "kind" else m.by_corpus
            lines += [_retrieval_rows(f"{mode} / {g}", gm) for g, gm in groups.items()]
    if report.answers is not None:
        a = report.answers
        lines += [
            "",
            f"## Answers (`{a.mode}`, top {a.top_k} passages, "
            f"{a.seconds_per_question:.1f} s/question, {a.empty_completions} empty completions)",
            "",
            ANSWER_HEAD.format(col="group"),
            _answer_row("all", a.overall),
        ]
        lines += [_answer_row(f"kind {k}", m) for k, m in a.by_kind.items()]
        lines += [_answer_row(f"corpus {c}", m) for c, m in a.by_corpus.items()]
        if a.off_topic is not None:
            lines.append(_answer_row("off-topic probes (not in all)", a.off_topic))
        lines += _tier_lines(a)
    lines += ["", "## Questions", "", _question_head(report), _question_rule(report)]
    lines += [_question_row(report, q) for q in report.questions]
    return "\n".join(lines) + "\n"


def _summary_row(
    label: str,
    r: RetrievalMetrics | None,
    c: ContainmentMetrics | None,
    a: AnswerMetrics | None,
) -> str:
    n = a.n if a is not None else (r.n if r is not None else 0)
    cells = [
        _f(r.hit_at_1) if r else "-",
        _f(r.mrr_at_10) if r else "-",
        *([_f(c.at_1), _f(c.at_3), _f(c.at_5)] if c else ["-"] * 3),
        f"{_f(a.answer_accuracy)} ({a.correct}/{a.n})" if a else "-",
        _f(a.crag_score) if a else "-",
        f"{a.hallucinated} ({_f(a.hallucination_rate)})" if a else "-",
        f"{a.missing} ({_f(a.missing_rate)})" if a else "-",
    ]
    return f"| {label} | {n} | " + " | ".join(cells) + " |"


def _summary_lines(report: EvalReport) -> list[str]:
    """The default configuration's numbers side by side, overall and per kind: hit@1 and
    MRR@10 (answerable questions), answer in the top 1/3/5 passages sent on (answerable),
    accuracy, CRAG score, hallucinated and missing (all questions)."""
    mode = report.modes.get(report.default_mode)
    p, a = report.passages, report.answers
    if mode is None and p is None and a is None:
        return []
    kinds = sorted(
        set(mode.by_kind if mode else {})
        | set(p.by_kind if p else {})
        | set(a.by_kind if a else {})
    )
    rows = [
        _summary_row(
            "all",
            mode.overall if mode else None,
            p.overall if p else None,
            a.overall if a else None,
        )
    ]
    rows += [
        _summary_row(
            f"kind {k}",
            mode.by_kind.get(k) if mode else None,
            p.by_kind.get(k) if p else None,
            a.by_kind.get(k) if a else None,
        )
        for k in kinds
    ]
    return [
        "",
        f"## Summary (`{report.default_mode}`, the first answer configuration)",
        "",
        "n: the group's questions (hit@1, MRR@10 and answer in top k are over its answerable "
        "ones); answer in top k: an answer pattern matches one of the first k passages sent "
        "on; CRAG score: accurate rate - hallucination rate.",
        "",
        SUMMARY_HEAD.format(col="group"),
        *rows,
    ]


TIER_HEAD = (
    "| configuration | correct | accuracy | CRAG score | hallucinated | missing "
    "| answer first rate | words p50 | absent refusal "
    "| off-topic probes refused | false refusal | empty | truncated "
    "| fallbacks | errors | prompt tokens p50 | latency p50 ms | p95 ms | tiers |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _tier_lines(a: AnswersReport) -> list[str]:
    if not a.tiers:
        return []
    lines = ["", "### Answer configurations", "", TIER_HEAD]
    for name, t in a.tiers.items():
        m = t.overall
        share = ", ".join(f"{k} {v:.2f}" for k, v in sorted(t.share.items()))
        probe = t.off_topic.off_topic_refusal_rate if t.off_topic is not None else None
        lines.append(
            f"| {name} | {m.correct}/{m.n} | {_f(m.answer_accuracy)} | {_f(m.crag_score)} "
            f"| {m.hallucinated} | {m.missing} | {_f(m.answer_first_rate)} | {_n(m.words_p50)} "
            f"| {_f(m.absent_refusal_rate)} | {_f(probe)} | {_f(m.false_refusal_rate)} | {t.empty} "
            f"| {t.truncated} | {t.fallbacks} | {t.errors} | {t.prompt_tokens_p50 or '-'} "
            f"| {t.latency_p50_ms or '-'} | {t.latency_p95_ms or '-'} | {share} |"
        )
    lines += [
        "",
        "### Per kind and configuration",
        "",
        ANSWER_HEAD.format(col="configuration / kind"),
    ]
    for name, t in a.tiers.items():
        lines += [_answer_row(f"{name} / {k}", m) for k, m in t.by_kind.items()]
    return lines


def _question_head(report: EvalReport) -> str:
    modes = " | ".join(report.modes)
    return f"| id | kind | {modes} | correct | first | refused | answer |"


def _question_rule(report: EvalReport) -> str:
    return "|---|---|" + "---|" * len(report.modes) + "---|---|---|---|"


def _question_row(report: EvalReport, q: QuestionRecord) -> str:
    ranks = " | ".join("-" if q.ranks.get(m) is None else str(q.ranks[m]) for m in report.modes)
    answer = (q.answer or "").replace("\n", " ").replace("|", "\\|")[:120]
    flags = [_yn(q.correct), _yn(q.answer_first), _yn(q.refused)]
    return f"| {q.id} | {q.kind} | {ranks} | {' | '.join(flags)} | {answer} |"


def _yn(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def summary_line(report: EvalReport, out_dir: Path | None = None) -> str:
    """One line: the default mode's hit@5 and MRR@10; the default answer configuration's
    accuracy, how-to accuracy, answer-first rate, words p50, absent / off-topic / false
    refusal rates and latency p50."""
    h = report.headline
    text = (
        f"eval: {report.n_questions} questions, {report.default_mode}: "
        f"hit@5 {_f(h.hit_at_5)} MRR@10 {_f(h.mrr_at_10)}"
    )
    if report.passages is not None:
        text += (
            f", answer in top 1/3/5 passages {_f(h.answer_in_top_1)}/{_f(h.answer_in_top_3)}"
            f"/{_f(h.answer_in_top_5)}"
        )
    if report.answers is not None:
        a = report.answers.overall
        text += (
            f"; answers {a.correct}/{a.n} correct ({_f(h.answer_accuracy)}), "
            f"how-to {_f(h.howto_accuracy)}, answer first {_f(h.answer_first_rate)}, "
            f"words p50 {_n(h.answer_words_p50)} (factual {_n(h.factual_words_p50)}), "
            f"absent refusal rate {_f(h.absent_refusal_rate)}, "
            f"off-topic refusal rate {_f(h.off_topic_refusal_rate)}, "
            f"false refusal rate {_f(h.false_refusal_rate)}, "
            f"answer latency p50 {h.answer_latency_p50_ms or '-'} ms, "
            f"CRAG score {_f(h.crag_score)} (hallucinated {a.hallucinated}, "
            f"missing {a.missing})"
        )
    best = max(report.modes.items(), key=lambda kv: kv[1].overall.mrr_at_10 or 0.0, default=None)
    if best is not None:
        text += f"; best MRR@10 {best[0]} {_f(best[1].overall.mrr_at_10)}"
    return text + (f" -> {out_dir}" if out_dir is not None else "")


#: Characters of an answer shown in the side-by-side file.
SIDE_ANSWER_CHARS = 400


def _cell(text: str, limit: int | None = None) -> str:
    one = " ".join(text.split())
    if limit is not None and len(one) > limit:
        one = one[: limit - 1].rstrip() + "\u2026"
    return one.replace("|", "\\|")


def _side_block(q: QuestionRecord) -> list[str]:
    if q.answer is None:
        mark = "not answered"
    else:
        mark = " · ".join(
            [
                "**correct**" if q.correct else "**wrong**",
                "answer first" if q.answer_first else "answer not first",
                *(["refused"] if q.refused else []),
                *([f"error {q.error}"] if q.error else []),
                f"{q.words} words" if q.words is not None else "",
                f"{q.latency_ms:.0f} ms" if q.latency_ms is not None else "",
            ]
        ).strip(" ·")
    lines = [f"#### {q.id} ({q.corpus}) — {mark}", ""]
    for n, earlier in enumerate(q.history, start=1):
        lines.append(f"- earlier question {n}: {_cell(earlier)}")
    lines.append(f"- **Q**: {_cell(q.question)}")
    if q.standalone is not None:
        lines.append(f"- asked as: {_cell(q.standalone)}")
    lines.append(f"- **A**: {_cell(q.answer or '', SIDE_ANSWER_CHARS)}")
    expected = ", ".join(f"`{p}`" for p in q.answer_patterns) or "-"
    pages = ", ".join(q.expected_pages) or "none (a refusal is right)"
    lines.append(f"- expected: {expected} on {pages}")
    cited = q.first_cited_page or "-"
    top = q.top_pages[0] if q.top_pages else "-"
    lines += [f"- first cited page: {cited}; top retrieved page: {top}", ""]
    return lines


#: Order of the kinds in the side-by-side file (others after them, by name).
KIND_ORDER = ("factual", "howto", "deep", "followup", "absent", "off_topic")


def _kind_rank(kind: str) -> tuple[int, str]:
    return (KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER), kind)


def _side_order(records: list[QuestionRecord]) -> list[QuestionRecord]:
    """Wrong answers first, then right ones not answered first, then the rest; file order
    within each."""
    return sorted(records, key=lambda q: (bool(q.correct), bool(q.answer_first)))


def to_side_by_side(report: EvalReport) -> str:
    """Each question beside its answer (the default configuration's), grouped by kind with the
    wrong answers first: question, earlier questions of a follow-up and the standalone
    question asked, the answer (cut at :data:`SIDE_ANSWER_CHARS`), the expected patterns and
    pages, the first cited page, and the correct / answer-first marks; then the off-topic
    probes. Meant to be read by a person in five minutes."""
    h = report.headline
    tier = next(iter(report.answers.tiers), "?") if report.answers is not None else "-"
    lines = [
        f"# Side by side: {report.questions_file}",
        "",
        f"{report.n_questions} questions, `{report.default_mode}`, configuration `{tier}`, "
        f"{report.started_at}. Accuracy {_f(h.answer_accuracy)}, how-to {_f(h.howto_accuracy)}, "
        f"answer first {_f(h.answer_first_rate)}, words p50 {_n(h.answer_words_p50)}, "
        f"absent refused {_f(h.absent_refusal_rate)}, off-topic refused "
        f"{_f(h.off_topic_refusal_rate)}, false refusals {_f(h.false_refusal_rate)}.",
        "",
    ]
    groups: dict[str, list[QuestionRecord]] = {}
    for q in sorted(report.questions, key=lambda q: _kind_rank(q.kind)):
        groups.setdefault(q.kind, []).append(q)
    if report.off_topic_questions:
        groups["off-topic probes"] = list(report.off_topic_questions)
    for kind, records in groups.items():
        right = sum(1 for q in records if q.correct)
        first = sum(1 for q in records if q.answer_first)
        lines += [f"## {kind}: {right}/{len(records)} correct, {first} answer first", ""]
        for q in _side_order(records):
            lines += _side_block(q)
    return "\n".join(lines).rstrip("\n") + "\n"


def write_report(
    report: EvalReport, out_dir: Path, *, side_by_side: bool = True
) -> tuple[Path, Path]:
    """Write ``eval.json``, ``eval.md`` and (``side_by_side``) ``side_by_side.md`` into
    ``out_dir`` (created); returns the first two paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "eval.json", out_dir / "eval.md"
    json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    md_path.write_text(to_markdown(report), encoding="utf-8")
    if side_by_side:
        (out_dir / "side_by_side.md").write_text(to_side_by_side(report), encoding="utf-8")
    return json_path, md_path
