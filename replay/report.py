"""The replay report: each logged answer beside the candidate's, and what changed, as
``report.json`` and ``report.md``.

Per query, *before* is the logged answer (:class:`topics.answers.Answer`) and *after* the
shadow answer. Definitions:

- **changed**: the status differs, or the answer text, or the error code; the text is compared
  with whitespace collapsed and each citation mark ``[n]`` read as the chunk it cites, so a
  passage cited under another number is no change and another passage under the same number is;
- **citations**: the cited chunks; *gained* are cited after only, *lost* before only, and the
  *overlap* is their Jaccard index: chunks cited on both sides over chunks cited on either
  (1.0 when both cite nothing); ``doc_overlap`` is the same over the cited documents;
- **refusal**: an answered query whose text declines (:func:`replay.measures.
  is_refusal`, the evaluation's one definition around :data:`topics.answers.NOT_IN_DOCUMENTS`);
  *gained* refuses after only, *lost* before only;
- **latency**: from the query's submission (the API's logging of it, before; the shadow
  submission, after) to the end of its last traced stage, in ms; the answer's hop to the
  client is in neither. Logged answers served from the answer cache are left out of *before*
  (``cached_before`` counts them); shadow answers are never cached.

A query the shadow pools did not answer in time is ``unanswered`` and left out of the
changed, citation and refusal counts.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from replay.measures import is_refusal, percentiles, trace_end
from replay.pacing import achieved_rate, max_in_window
from replay.shadow import Replayed
from topics.answers import Answer
from topics.base import StageTiming
from topics.responses import Citation, QueryResponse

#: A citation mark, ``[3]``.
_MARK = re.compile(r"\[(\d+)\]")


@dataclass(frozen=True)
class Side:
    """One side of a query: what the logged or the shadow answer said."""

    status: str
    tier: str
    answer: str | None
    error: str | None
    citations: list[dict[str, Any]]
    refused: bool
    latency_ms: float | None
    cached: bool = False

    @property
    def chunks(self) -> set[str]:
        return {c["chunk_id"] for c in self.citations}

    @property
    def docs(self) -> set[str]:
        return {c["doc_id"] for c in self.citations}

    def outcome(self) -> tuple[str, str]:
        """What "changed" compares: the status and the answer text (citation marks as the
        chunks they cite) or the error code."""
        chunk = {str(c["n"]): c["chunk_id"] for c in self.citations}
        text = _MARK.sub(lambda m: f"[{chunk.get(m.group(1), m.group(1))}]", self.answer or "")
        return self.status, self.error or " ".join(text.split())


@dataclass(frozen=True)
class QueryDiff:
    """One logged query replayed."""

    n: int
    logged_id: str
    shadow_id: str
    query: str
    logged_at: str | None
    sent_s: float
    before: Side
    after: Side
    changed: bool
    citations_gained: list[str]
    citations_lost: list[str]
    overlap: float | None
    doc_overlap: float | None


@dataclass
class ReplayReport:
    """The whole report (``report.json`` is :func:`dataclasses.asdict` of it)."""

    run: dict[str, Any]
    candidate: dict[str, Any]
    summary: dict[str, Any]
    queries: list[QueryDiff] = field(default_factory=list)


def _ms(trace: Sequence[StageTiming], start: dt.datetime) -> float | None:
    if not trace:
        return None
    return round((trace_end(trace, start) - start).total_seconds() * 1000, 1)


def _cites(citations: Sequence[Citation]) -> list[dict[str, Any]]:
    return [
        {"n": c.n, "doc_id": c.doc_id, "chunk_id": c.chunk_id, "title": c.title} for c in citations
    ]


def before_side(answer: Answer) -> Side:
    """The logged answer's side."""
    start = answer.created_at
    return Side(
        status=answer.status,
        tier=answer.tier,
        answer=answer.answer,
        error=answer.error.code.value if answer.error else None,
        citations=_cites(answer.citations),
        refused=answer.status == "answered" and is_refusal(answer.answer or ""),
        latency_ms=None if answer.cached or start is None else _ms(answer.trace, start),
        cached=answer.cached,
    )


def after_side(response: QueryResponse | None, sent_at: dt.datetime) -> Side:
    """The shadow answer's side (``unanswered`` when none came)."""
    if response is None:
        return Side("unanswered", "", None, None, [], False, None)
    answered = response.status == "answered"
    return Side(
        status="answered" if answered else "failed",
        tier=response.tier,
        answer=response.answer if answered else None,
        error=response.error.code.value if response.error else None,
        citations=_cites(response.citations),
        refused=answered and is_refusal(response.answer or ""),
        latency_ms=_ms(response.trace, sent_at),
    )


def _jaccard(a: set[str], b: set[str]) -> float:
    return round(len(a & b) / len(a | b), 4) if a | b else 1.0


def diff(n: int, r: Replayed) -> QueryDiff:
    """Compare one replayed query's two sides."""
    before, after = before_side(r.logged), after_side(r.response, r.sent_at)
    answered = after.status != "unanswered"
    return QueryDiff(
        n=n,
        logged_id=r.logged.request_id,
        shadow_id=r.request_id,
        query=r.logged.query,
        logged_at=r.logged.created_at.isoformat() if r.logged.created_at else None,
        sent_s=r.sent_s,
        before=before,
        after=after,
        changed=answered and before.outcome() != after.outcome(),
        citations_gained=sorted(after.chunks - before.chunks) if answered else [],
        citations_lost=sorted(before.chunks - after.chunks) if answered else [],
        overlap=_jaccard(before.chunks, after.chunks) if answered else None,
        doc_overlap=_jaccard(before.docs, after.docs) if answered else None,
    )


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _latency(values: Sequence[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    p = percentiles(got)
    return {"n": len(got), "p50": p.get("p50"), "p95": p.get("p95")}


def summarise(diffs: Sequence[QueryDiff], rate_per_s: float, max_in_flight: int) -> dict[str, Any]:
    """The report's numbers (see the module docstring for each definition)."""
    done = [d for d in diffs if d.after.status != "unanswered"]
    sent = [d.sent_s for d in diffs]
    return {
        "replayed": len(diffs),
        "answered": sum(d.after.status == "answered" for d in diffs),
        "failed": sum(d.after.status == "failed" for d in diffs),
        "unanswered": len(diffs) - len(done),
        "answers": {
            "changed": sum(d.changed for d in done),
            "unchanged": sum(not d.changed for d in done),
        },
        "citations": {
            "mean_overlap": _mean([d.overlap for d in done if d.overlap is not None]),
            "mean_doc_overlap": _mean([d.doc_overlap for d in done if d.doc_overlap is not None]),
            "gained": sum(len(d.citations_gained) for d in done),
            "lost": sum(len(d.citations_lost) for d in done),
            "queries_with_gains": sum(bool(d.citations_gained) for d in done),
            "queries_with_losses": sum(bool(d.citations_lost) for d in done),
        },
        "refusals": _flips(done, "refused"),
        "failures": _flips(done, "failed"),
        "tiers": {
            "before": dict(Counter(d.before.tier or "none" for d in done)),
            "after": dict(Counter(d.after.tier or "none" for d in done)),
        },
        "latency_ms": {
            "before": _latency([d.before.latency_ms for d in diffs]),
            "after": _latency([d.after.latency_ms for d in diffs]),
            "cached_before": sum(d.before.cached for d in diffs),
        },
        "rate": {
            "bound_per_s": rate_per_s,
            "max_in_flight": max_in_flight,
            "submitted": len(sent),
            "achieved_per_s": achieved_rate(sent),
            "max_in_any_1s": max_in_window(sent),
        },
    }


def _flips(done: Sequence[QueryDiff], what: str) -> dict[str, int]:
    def has(side: Side) -> bool:
        return side.refused if what == "refused" else side.status == "failed"

    return {
        "before": sum(has(d.before) for d in done),
        "after": sum(has(d.after) for d in done),
        "gained": sum(has(d.after) and not has(d.before) for d in done),
        "lost": sum(has(d.before) and not has(d.after) for d in done),
    }


def build_report(
    replayed: Sequence[Replayed],
    *,
    run: dict[str, Any],
    candidate: dict[str, Any],
    rate_per_s: float,
    max_in_flight: int,
) -> ReplayReport:
    """The report of a shadow run."""
    diffs = [diff(i + 1, r) for i, r in enumerate(replayed)]
    return ReplayReport(run, candidate, summarise(diffs, rate_per_s, max_in_flight), diffs)


def write_report(report: ReplayReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    as_json, as_md = out_dir / "report.json", out_dir / "report.md"
    as_json.write_text(json.dumps(asdict(report), indent=2, default=str) + "\n")
    as_md.write_text(render_markdown(report))
    return as_json, as_md


def summary_line(report: ReplayReport) -> str:
    """One line for the terminal."""
    s = report.summary
    lat = s["latency_ms"]
    return (
        f"replayed {s['replayed']} ({s['unanswered']} unanswered): {s['answers']['changed']} "
        f"answers changed, citations overlap {s['citations']['mean_overlap']}, refusals "
        f"+{s['refusals']['gained']}/-{s['refusals']['lost']}, p50 "
        f"{lat['before']['p50']} -> {lat['after']['p50']} ms, at {s['rate']['achieved_per_s']}/s"
    )


def _cell(text: object) -> str:
    return re.sub(r"\s*\n\s*", "<br>", str(text)).replace("|", "\\|") if text is not None else ""


def render_markdown(report: ReplayReport) -> str:
    """The report for a person: the numbers, then every changed answer side by side."""
    s, run, cand = report.summary, report.run, report.candidate
    lat, cit = s["latency_ms"], s["citations"]
    settings = ", ".join(f"`{k}={v}`" for k, v in cand["settings"].items()) or "none"
    lines = [
        f"# Shadow replay {run['id']}",
        "",
        f"Tenant `{run['selection']['tenant']}`, logged {run['selection']['since'] or 'any time'}"
        f" to {run['selection']['until'] or 'now'}: {s['replayed']} of {run['in_window']} "
        f"queries (seed {run['selection']['seed']}). Candidate: alias `{cand['alias']}`, tier "
        f"`{cand['tier']}`, model `{cand['model'] or 'the live one'}`, settings {settings}.",
        "",
        "| | before (logged) | after (candidate) |",
        "|---|---:|---:|",
        f"| answered / failed / unanswered | {_count(report, 'before')} | "
        f"{s['answered']} / {s['failed']} / {s['unanswered']} |",
        f"| refusals | {s['refusals']['before']} | {s['refusals']['after']} |",
        f"| latency p50 / p95, ms | {lat['before']['p50']} / {lat['before']['p95']} "
        f"(n={lat['before']['n']}) | {lat['after']['p50']} / {lat['after']['p95']} "
        f"(n={lat['after']['n']}) |",
        f"| tiers | {_tiers(s['tiers']['before'])} | {_tiers(s['tiers']['after'])} |",
        "",
        f"- answers changed: **{s['answers']['changed']}** of "
        f"{s['answers']['changed'] + s['answers']['unchanged']}",
        f"- citations: mean overlap {cit['mean_overlap']} (documents {cit['mean_doc_overlap']}); "
        f"{cit['gained']} gained in {cit['queries_with_gains']} queries, {cit['lost']} lost in "
        f"{cit['queries_with_losses']}",
        f"- refusals gained {s['refusals']['gained']}, lost {s['refusals']['lost']}; failures "
        f"gained {s['failures']['gained']}, lost {s['failures']['lost']}",
        f"- logged answers served from the cache (not in the latency before): "
        f"{lat['cached_before']}",
        f"- submit rate: bound {s['rate']['bound_per_s']}/s, achieved "
        f"{s['rate']['achieved_per_s']}/s, at most {s['rate']['max_in_any_1s']} in any second, "
        f"at most {s['rate']['max_in_flight']} in flight",
        "",
        "## Changed answers",
        "",
    ]
    changed = [d for d in report.queries if d.changed]
    if not changed:
        lines += ["None.", ""]
    for d in changed:
        lines += [
            f"### {d.n}. {_cell(d.query)}",
            "",
            "| | before (logged) | after (candidate) |",
            "|---|---|---|",
            f"| status, tier | {d.before.status}, {d.before.tier or '-'} | "
            f"{d.after.status}, {d.after.tier or '-'} |",
            f"| answer | {_cell(d.before.answer or d.before.error)} | "
            f"{_cell(d.after.answer or d.after.error)} |",
            f"| citations | {_cell(_titles(d.before))} | {_cell(_titles(d.after))} |",
            f"| latency, ms | {d.before.latency_ms} | {d.after.latency_ms} |",
            "",
            f"Citation overlap {d.overlap}: {len(d.citations_gained)} gained, "
            f"{len(d.citations_lost)} lost.",
            "",
        ]
    return "\n".join(lines)


def _count(report: ReplayReport, side: str) -> str:
    sides = [getattr(d, side) for d in report.queries]
    answered = sum(x.status == "answered" for x in sides)
    failed = sum(x.status == "failed" for x in sides)
    return f"{answered} / {failed} / -"


def _tiers(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def _titles(side: Side) -> str:
    return "; ".join(f"[{c['n']}] {c['title'] or c['doc_id']}" for c in side.citations) or "-"
