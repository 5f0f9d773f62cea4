"""The evaluation report: its JSON model, its Markdown rendering and the one-line summary."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bench.evaluation.metrics import AnswerMetrics, RetrievalMetrics


class ModeReport(BaseModel):
    """Retrieval metrics of one mode, overall and per ``kind`` and ``corpus`` (answerable
    questions only); ``seconds_per_question``: wall time of the mode's stages (embedding,
    searches, rerank) divided by the questions, run in batches."""

    model_config = ConfigDict(frozen=True)

    overall: RetrievalMetrics
    by_kind: dict[str, RetrievalMetrics]
    by_corpus: dict[str, RetrievalMetrics]
    seconds_per_question: float


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


class QuestionRecord(BaseModel):
    """One question's outcome: its rank per mode (``None``: no expected page in the list, or
    an ``absent`` question), the pages of the default mode's top passages, and its answer with
    its size in the serving model's tokens (``completion_tokens`` <= 1 with the
    not-in-the-documents sentence: the model produced no text and the pool answered that)."""

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


class Headline(BaseModel):
    """The four numbers of the benchmark summary (default configuration; ``None`` when not
    measured, e.g. answer metrics with ``--no-generate``)."""

    model_config = ConfigDict(frozen=True)

    hit_at_5: float | None
    mrr_at_10: float | None
    answer_accuracy: float | None
    absent_refusal_rate: float | None
    false_refusal_rate: float | None = None
    answer_latency_p50_ms: float | None = None


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

    def with_headline(self) -> EvalReport:
        """A copy whose headline holds the default mode's hit@5 and MRR@10 and the default
        answer configuration's accuracy, refusal rates and latency."""
        mode = self.modes.get(self.default_mode)
        answers = self.answers.overall if self.answers is not None else None
        tiers = self.answers.tiers if self.answers is not None else {}
        routed = tiers.get("routed") or next(iter(tiers.values()), None)
        headline = Headline(
            hit_at_5=mode.overall.hit_at_5 if mode else None,
            mrr_at_10=mode.overall.mrr_at_10 if mode else None,
            answer_accuracy=answers.answer_accuracy if answers else None,
            absent_refusal_rate=answers.absent_refusal_rate if answers else None,
            false_refusal_rate=answers.false_refusal_rate if answers else None,
            answer_latency_p50_ms=routed.latency_p50_ms if routed else None,
        )
        return self.model_copy(update={"headline": headline})


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _retrieval_rows(label: str, m: RetrievalMetrics, extra: str = "") -> str:
    return (
        f"| {label} | {m.n} | {_f(m.hit_at_1)} | {_f(m.hit_at.get(3))} | {_f(m.hit_at_5)} "
        f"| {_f(m.hit_at_10)} | {_f(m.hit_at.get(30))} | {_f(m.mrr_at_10)} |{extra}"
    )


def _answer_row(label: str, m: AnswerMetrics) -> str:
    return (
        f"| {label} | {m.n} | {m.correct} | {_f(m.answer_accuracy)} "
        f"| {_f(m.answerable_accuracy)} | {m.absent_n} | {_f(m.absent_refusal_rate)} "
        f"| {_f(m.false_refusal_rate)} |"
    )


RETRIEVAL_HEAD = (
    "| {col} | n | hit@1 | hit@3 | hit@5 | hit@10 | hit@30 | MRR@10 |{extra_head}\n"
    "|---|---|---|---|---|---|---|---|{extra_rule}"
)
ANSWER_HEAD = (
    "| {col} | n | correct | accuracy | accuracy (answerable) | absent | absent refusal rate "
    "| false refusal rate |\n|---|---|---|---|---|---|---|---|"
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
        lines += _tier_lines(a)
    lines += ["", "## Questions", "", _question_head(report), _question_rule(report)]
    lines += [_question_row(report, q) for q in report.questions]
    return "\n".join(lines) + "\n"


TIER_HEAD = (
    "| configuration | correct | accuracy | absent refusal | false refusal | empty | truncated "
    "| fallbacks | errors | prompt tokens p50 | latency p50 ms | p95 ms | tiers |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _tier_lines(a: AnswersReport) -> list[str]:
    if not a.tiers:
        return []
    lines = ["", "### Answer configurations", "", TIER_HEAD]
    for name, t in a.tiers.items():
        m = t.overall
        share = ", ".join(f"{k} {v:.2f}" for k, v in sorted(t.share.items()))
        lines.append(
            f"| {name} | {m.correct}/{m.n} | {_f(m.answer_accuracy)} "
            f"| {_f(m.absent_refusal_rate)} | {_f(m.false_refusal_rate)} | {t.empty} "
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
    return f"| id | kind | {modes} | correct | refused | answer |"


def _question_rule(report: EvalReport) -> str:
    return "|---|---|" + "---|" * len(report.modes) + "---|---|---|"


def _question_row(report: EvalReport, q: QuestionRecord) -> str:
    ranks = " | ".join("-" if q.ranks.get(m) is None else str(q.ranks[m]) for m in report.modes)
    answer = (q.answer or "").replace("\n", " ").replace("|", "\\|")[:120]
    flags = [_yn(q.correct), _yn(q.refused)]
    return f"| {q.id} | {q.kind} | {ranks} | {flags[0]} | {flags[1]} | {answer} |"


def _yn(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def summary_line(report: EvalReport, out_dir: Path | None = None) -> str:
    """One line: the default mode's hit@5 and MRR@10, answer accuracy, absent refusals."""
    h = report.headline
    text = (
        f"eval: {report.n_questions} questions, {report.default_mode}: "
        f"hit@5 {_f(h.hit_at_5)} MRR@10 {_f(h.mrr_at_10)}"
    )
    if report.answers is not None:
        a = report.answers.overall
        text += (
            f"; answers {a.correct}/{a.n} correct ({_f(h.answer_accuracy)}), "
            f"absent refusal rate {_f(h.absent_refusal_rate)}, "
            f"false refusal rate {_f(h.false_refusal_rate)}, "
            f"answer latency p50 {h.answer_latency_p50_ms or '-'} ms"
        )
    best = max(report.modes.items(), key=lambda kv: kv[1].overall.mrr_at_10 or 0.0, default=None)
    if best is not None:
        text += f"; best MRR@10 {best[0]} {_f(best[1].overall.mrr_at_10)}"
    return text + (f" -> {out_dir}" if out_dir is not None else "")


def write_report(report: EvalReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``eval.json`` and ``eval.md`` into ``out_dir`` (created); returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "eval.json", out_dir / "eval.md"
    json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    md_path.write_text(to_markdown(report), encoding="utf-8")
    return json_path, md_path
