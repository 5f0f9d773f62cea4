"""The demo's ten questions and its follow-up through any API, and two such records compared
(issue 38: the Compose stack answers as ``make demo`` does; docs/operations/containers.md).

    python -m tests.deploy.demo_answers ask URL KEY_FILE OUT.json
    python -m tests.deploy.demo_answers compare NATIVE.json COMPOSE.json

``ask`` asks what :func:`entry.demo.ask_questions` asks, in the same order (the ten sample
questions, then :data:`entry.demo.FOLLOW_UP`'s earlier question and its follow-up with the
earlier turn as history) and writes one row a question: id, question, status, answer, citations
(``n``, ``doc_id``, ``chunk_id``, ``title``, ``source``), tier. ``compare`` prints a Markdown
table: per question whether the status, the answer's text and the cited sources are the same.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from api.models import QueryResult
from entry.client import HttpClient
from entry.demo import FOLLOW_UP, load_questions

#: A citation recorded as the model's ``str()`` (``n=1 doc_id='...' ... source='...'``).
_FIELD = re.compile(r"(\w+)=(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"|(\d+))")


def row(qid: str, question: str, result: QueryResult) -> dict[str, Any]:
    """One question's record: its id, the question, and what came back."""
    return {
        "id": qid,
        "question": question,
        "status": result.status,
        "answer": result.answer,
        "citations": [c.model_dump() for c in result.citations],
        "tier": result.tier,
    }


def ask(url: str, key: str, limit: int = 10, timeout_s: float = 180) -> list[dict[str, Any]]:
    """Ask the demo's ``limit`` sample questions and its follow-up through the API at ``url``;
    return one :func:`row` each (the follow-up's id is ``follow-up``)."""
    rows = []
    with HttpClient(url, key, timeout_s=timeout_s + 150) as client:
        for q in load_questions()[:limit]:
            rows.append(
                row(q["id"], q["question"], client.query(q["question"], timeout_s=timeout_s))
            )
        earlier, follow_up = FOLLOW_UP
        first = client.query(earlier, timeout_s=timeout_s)
        turn = {"question": earlier, "answer": first.answer or ""}
        result = client.query(follow_up, timeout_s=timeout_s, history=[turn])
        rows.append(row("follow-up", follow_up, result))
    return rows


def citation(raw: str | dict[str, Any]) -> dict[str, Any]:
    """A recorded citation as a dict, whether recorded as one or as the model's ``str()``."""
    if isinstance(raw, dict):
        return raw
    return {m[1]: m[2] or m[3] or m[4] for m in _FIELD.finditer(raw)}


def compare(native: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown table rows: id, status, answer and cited sources of ``other`` against
    ``native`` (``same`` or what differs)."""
    theirs = {r["id"]: r for r in other}
    lines = [
        "| question | status | answer text | cited sources (chunks) |",
        "|---|---|---|---|",
    ]
    for mine in native:
        them = theirs.get(mine["id"])
        if them is None:
            lines.append(f"| {mine['id']} | missing | | |")
            continue
        status = (
            "same" if mine["status"] == them["status"] else f"{mine['status']} → {them['status']}"
        )
        answer = "identical" if mine["answer"] == them["answer"] else "different"
        a = [citation(c) for c in mine["citations"]]
        b = [citation(c) for c in them["citations"]]
        if [c.get("source") for c in a] != [c.get("source") for c in b]:
            cited = "different sources"
        elif [c.get("chunk_id") for c in a] != [c.get("chunk_id") for c in b]:
            cited = "same sources, other chunks"
        else:
            cited = f"identical ({len(a)})"
        lines.append(f"| {mine['id']} | {status} | {answer} | {cited} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``ask URL KEY_FILE OUT.json`` or ``compare NATIVE.json OTHER.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 4 and args[0] == "ask":
        rows = ask(args[1], Path(args[2]).read_text().strip())
        Path(args[3]).write_text(json.dumps(rows, indent=2) + "\n")
        print(f"{len(rows)} answers -> {args[3]}")
        return 0
    if len(args) == 3 and args[0] == "compare":
        native, other = (json.loads(Path(p).read_text()) for p in args[1:])
        print("\n".join(compare(native, other)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
