"""The demo's ingest record (issue 53, item 4): what ``ragstream demo run`` ingested, how long
it took, and the machine's calibration of that run.

``ragstream demo run`` builds the record from the bulk job's rows in the SQL registry when the
job ends (:func:`job_record`), prints it as one line at its end (:func:`format_line`) and
writes it to ``.local/demo/ingest.json``, and also to ``.local/demo/ingest-full.json`` when
the job indexed every page anew (no page skipped as unchanged: a first ingest of both
manuals). ``make bench`` copies the latter to ``DIR/demo-ingest.json``, whose figures ``bench
summary`` reports as ``ingest.minutes_both_manuals``, ``ingest.entries_per_s`` and
``ingest.chunks_per_s_both_manuals`` (:func:`summary_numbers`), beside the calibration measured
in the same run (``ingest.demo_calibration``).

The counts: ``pages`` the job's documents; ``indexed``, ``unchanged``, ``failed`` its items by
outcome; ``chunks`` the passages written (the job's ``chunk_count``); ``definition_entries`` the
definition entries written beside them (:mod:`ingest.parsers.definitions`: each indexed
document's registry ids beyond its chunks); ``entries`` both, what the encoder embedded and the
index holds. ``seconds`` is the job's own time, ``started_at`` to ``finished_at`` (queueing
before a worker took it left out).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

#: Keys of the record, in the order :func:`format_line` prints them.
COUNT_KEYS = ("pages", "indexed", "unchanged", "failed", "chunks", "definition_entries", "entries")
#: What ``bench summary`` reads (``make bench`` copies ``ingest-full.json`` here).
SUMMARY_FILE = "demo-ingest.json"


def build_record(
    counts: dict[str, int],
    seconds: float,
    *,
    job_id: str,
    status: str,
    calibration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of one bulk job.

    Args:
        counts: ``pages``, ``indexed``, ``unchanged``, ``failed``, ``chunks`` and
            ``definition_entries`` (missing ones count 0).
        seconds: the job's time in seconds.
        job_id: the job's id.
        status: its final status.
        calibration: :func:`bench.calibration.measure` of the same run, or ``None``.

    Returns:
        The counts of :data:`COUNT_KEYS` (``entries`` = chunks + definition entries), ``job_id``,
        ``status``, ``seconds``, ``minutes`` (2 decimals), ``chunks_per_s`` and
        ``entries_per_s`` (over ``seconds``, 2 decimals; ``None`` for a job of no time),
        ``full`` (no page skipped as unchanged and some indexed: a first ingest) and
        ``calibration``.
    """
    out: dict[str, Any] = {k: int(counts.get(k, 0)) for k in COUNT_KEYS}
    out["entries"] = out["chunks"] + out["definition_entries"]
    out.update(job_id=job_id, status=status, seconds=round(seconds, 1))
    out["minutes"] = round(seconds / 60, 2)
    out["chunks_per_s"] = round(out["chunks"] / seconds, 2) if seconds > 0 else None
    out["entries_per_s"] = round(out["entries"] / seconds, 2) if seconds > 0 else None
    out["full"] = out["unchanged"] == 0 and out["indexed"] > 0
    out["calibration"] = calibration
    return out


def format_line(record: dict[str, Any]) -> str:
    """One line of the record, e.g. ``ingest: 1699 pages (1699 indexed, 0 unchanged, 0
    failed), 26000 chunks + 9000 definition entries = 35000 entries in 14.2 min: 30.5 chunks/s,
    41.1 entries/s``, then the calibration (``cpu loop 3.1e+06/s, encoder 32.5 texts/s``) when
    the record has one."""
    rate = record.get("chunks_per_s")
    entries_rate = record.get("entries_per_s")
    line = (
        f"ingest: {record['pages']} pages ({record['indexed']} indexed, {record['unchanged']} "
        f"unchanged, {record['failed']} failed), {record['chunks']} chunks + "
        f"{record['definition_entries']} definition entries = {record['entries']} entries in "
        f"{record['minutes']:.1f} min: {'-' if rate is None else f'{rate:g}'} chunks/s, "
        f"{'-' if entries_rate is None else f'{entries_rate:g}'} entries/s"
    )
    cal = record.get("calibration")
    if cal:
        encoder = cal.get("encoder_texts_per_s")
        line += f" (machine: cpu loop {cal['cpu_loop_per_s']:.3g}/s, encoder " + (
            "-)" if encoder is None else f"{encoder:g} texts/s)"
        )
    return line


def job_counts(sessions: sessionmaker[Session], job_id: str) -> dict[str, int]:
    """The counts of :func:`build_record` of bulk job ``job_id`` from the SQL registry.

    Raises:
        KeyError: no such job.
    """
    from sqlalchemy import func, select

    from ragstream.db.models import Document, IngestJob, IngestJobItem

    with sessions() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        by_status = dict(
            session.execute(
                select(IngestJobItem.status, func.count())
                .where(IngestJobItem.job_id == job_id)
                .group_by(IngestJobItem.status)
            ).all()
        )
        docs = session.execute(
            select(Document.chunk_ids, Document.chunk_count)
            .join(IngestJobItem, IngestJobItem.doc_id == Document.doc_id)
            .where(
                IngestJobItem.job_id == job_id,
                IngestJobItem.status == "indexed",
                Document.tenant == job.tenant,
            )
        ).all()
        return {
            "pages": int(job.total_documents),
            "indexed": int(by_status.get("indexed", 0)),
            "unchanged": int(by_status.get("unchanged", 0)),
            "failed": int(by_status.get("failed", 0)),
            "chunks": int(job.chunk_count),
            "definition_entries": sum(max(0, len(ids or []) - n) for ids, n in docs),
        }


def job_seconds(sessions: sessionmaker[Session], job_id: str) -> float | None:
    """Seconds from the job's ``started_at`` to its ``finished_at``; ``None`` while either is
    unset.

    Raises:
        KeyError: no such job.
    """
    from ragstream.db.models import IngestJob, as_utc

    with sessions() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        if job.started_at is None or job.finished_at is None:
            return None
        return (as_utc(job.finished_at) - as_utc(job.started_at)).total_seconds()


def write_record(record: dict[str, Any], state_dir: Path) -> list[Path]:
    """Write ``state_dir/ingest.json``, and ``state_dir/ingest-full.json`` when the record is
    ``full``; returns the paths written."""
    text = json.dumps(record, indent=2) + "\n"
    paths = [state_dir / "ingest.json"] + (
        [state_dir / "ingest-full.json"] if record["full"] else []
    )
    for path in paths:
        path.write_text(text, encoding="utf-8")
    return paths


def summary_numbers(record: dict[str, Any] | None) -> dict[str, Any]:
    """``ingest.*`` keys of ``bench summary`` from a full record: ``minutes_both_manuals``,
    ``entries_per_s``, ``chunks_per_s_both_manuals``, ``both_manuals_failed`` and
    ``demo_calibration``; each ``None`` without a record or from one that was not ``full``."""
    keys = ("minutes_both_manuals", "entries_per_s", "chunks_per_s_both_manuals",
            "both_manuals_failed", "demo_calibration")  # fmt: skip
    if not record or not record.get("full"):
        return dict.fromkeys(keys)
    values = (record["minutes"], record["entries_per_s"], record["chunks_per_s"],
              record["failed"], record.get("calibration"))  # fmt: skip
    return dict(zip(keys, values, strict=True))
