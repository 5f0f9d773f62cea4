"""The relevance gate on a tenant's own small corpus (issue 39 item 4): the real embedder,
Elasticsearch and the evidence tier through ``ragstream eval``; refusals and the real Redis
answer cache.

A fact stated in a chunk of a plant-room note among other facts scores under the manuals'
``min_relevance`` (0.83) against the question that asks for it; the kNN score alone refused
it as off-topic. A sentence of the tenant's document states every word of the question, so
it is answered now, while questions the documents do not state are still refused."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis
from typer.testing import CliRunner

from entry.cli import app
from ingest.ops import IngestOp
from ragstream.settings import Settings
from tests.integration.ingestkit import Kit
from topics.answers import NOT_IN_DOCUMENTS
from topics.queries import QueryRequest
from topics.responses import QueryResponse
from workers.caches import AnswerCache

TENANT = "gatetenant"

PLANT = """# Plant room notes

## Standby power

The plant room on level B2 houses the chillers, the boilers, the sprinkler pumps and the
standby power equipment of the east wing. Access is by badge; contractors sign in at the
security desk and collect the key from the duty engineer. The backup generator serial number
is GX-5531. The chilled water loop is dosed with inhibitor every quarter and the dosing log is
kept on the clipboard by the door. Sprinkler pump tests run on the first Monday of each month,
and the boiler flue is swept every autumn before the heating season starts. The air handling
units on the roof are serviced by Kelvair in April and October, when the belts and filters are
changed. Water meter readings are sent to the landlord on the last working day of the month.
The lift motor room is above the stair core and is locked; the lift engineer holds the only key.

## Cleaning

The floor drains are cleared weekly. Spill kits are stored beside the boiler and the fuel tank.
"""

REFUSE = ["documents do not contain"]
QUESTIONS = [
    {"id": "gx", "corpus": "plant", "question": "What is the backup generator serial number?",
     "answer_patterns": ["GX-5531"], "expected_pages": ["plant.md"], "kind": "factual"},
    {"id": "pump", "corpus": "plant", "question": "When do sprinkler pump tests run?",
     "answer_patterns": ["first Monday"], "expected_pages": ["plant.md"], "kind": "factual"},
    {"id": "absent", "corpus": "plant",
     "question": "What is the noise level of the chillers in decibels?",
     "answer_patterns": REFUSE, "expected_pages": [], "kind": "absent"},
    {"id": "weather", "corpus": "plant",
     "question": "What will the weather be like in Paris tomorrow?",
     "answer_patterns": REFUSE, "expected_pages": [], "kind": "off_topic"},
    {"id": "egg", "corpus": "plant",
     "question": "How long should I boil an egg to get a soft yolk?",
     "answer_patterns": REFUSE, "expected_pages": [], "kind": "off_topic"},
]  # fmt: skip


def test_a_question_the_tenant_document_states_is_answered_not_refused(
    kit: Kit, tmp_path: Path
) -> None:
    root = tmp_path / "plant"
    root.mkdir()
    path = root / "plant.md"
    path.write_text(PLANT)
    op = IngestOp(TENANT, str(path), data=path.read_bytes(), filename=str(path), source=str(path))
    assert kit.pipeline.apply([op])[0][0].status == "indexed"
    kit.index.refresh()
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    out = tmp_path / "out"

    result = CliRunner().invoke(
        app,
        ["eval", str(qfile), "--out", str(out), "--index", kit.index.alias, "--tenant", TENANT,
         "--root", f"plant={root}", "--modes", "hybrid+none", "--tiers", "evidence",
         "--no-off-topic"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    by_id = {q["id"]: q for q in report["questions"]}
    for qid in ("gx", "pump"):  # both refused as off_topic:relevance=0.80-0.83 before
        assert not by_id[qid]["refused"] and by_id[qid]["correct"], by_id[qid]
    for qid in ("absent", "weather", "egg"):  # no sentence states them: still refused
        assert by_id[qid]["refused"], by_id[qid]
    answers = report["answers"]["overall"]
    assert answers["false_refusal_rate"] == 0.0
    assert answers["absent_refusal_rate"] == 1.0 and answers["off_topic_refusal_rate"] == 1.0


def test_a_refusal_is_cached_exactly_and_never_served_to_a_paraphrase(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    client = redis.Redis.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95)
    tenant = unique_name("gate")
    asked = QueryRequest(
        tenant=tenant, query="Backup generator serial?", deadline=dt.datetime.now(dt.UTC)
    )
    refusal = QueryResponse(
        tenant=tenant, request_id=asked.request_id, status="answered", answer=NOT_IN_DOCUMENTS
    )
    vector = np.asarray([1.0, 0.0, 0.0], dtype=np.float32)
    cache.remember_query_vector(asked, vector)
    cache.put(asked, refusal, index_version=3)

    hit = cache.get_exact(asked, 3)  # the same words, the same documents: the same refusal
    assert hit is not None and hit.response.answer == NOT_IN_DOCUMENTS
    paraphrase = QueryRequest(
        tenant=tenant,
        query="What is the backup generator serial number?",
        deadline=dt.datetime.now(dt.UTC),
    )
    assert cache.get_semantic(paraphrase, vector, 3) is None  # a paraphrase gets a fresh try
    assert cache.get_exact(asked, 4) is None  # the documents changed
    client.close()


def _parts_table(rows: int) -> str:
    """A Markdown parts list of ``rows`` rows, as a tenant's inventory export writes one."""
    head = "# Spare parts register\n\n| Part | Serial | Location | Supplier |\n|---|---|---|---|\n"
    body = [
        f"| valve actuator {n} | VA-{1000 + n} | store {n % 7} | Hydrex |\n" for n in range(rows)
    ]
    body.insert(rows // 2, "| fire pump controller | FP-2207 | plant room B2 | Pumpco |\n")
    return head + "".join(body)


def test_a_question_over_a_table_is_answered_with_the_rows_cells_and_column_names(
    kit: Kit, tmp_path: Path
) -> None:
    """Issue 39: a question over a Markdown table was answered with the delimiter row and
    unrelated rows; the row that answers is quoted with its column names."""
    root = tmp_path / "parts"
    root.mkdir()
    path = root / "parts.md"
    path.write_text(_parts_table(300))
    op = IngestOp(TENANT, str(path), data=path.read_bytes(), filename=str(path), source=str(path))
    assert kit.pipeline.apply([op])[0][0].status == "indexed"
    kit.index.refresh()
    question = {
        "id": "fp", "corpus": "parts", "kind": "factual",
        "question": "What is the serial number of the fire pump controller?",
        "answer_patterns": ["FP-2207"], "expected_pages": ["parts.md"],
    }  # fmt: skip
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text(json.dumps(question) + "\n")
    out = tmp_path / "out"

    result = CliRunner().invoke(
        app,
        ["eval", str(qfile), "--out", str(out), "--index", kit.index.alias, "--tenant", TENANT,
         "--root", f"parts={root}", "--modes", "hybrid+none", "--tiers", "evidence",
         "--no-off-topic"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    (answered,) = json.loads((out / "eval.json").read_text())["questions"]
    assert answered["correct"], answered
    text = json.dumps(answered)
    assert "Serial: FP-2207" in text and "|---" not in text, answered
    assert "VA-" not in answered["answer"], answered  # no unrelated row follows
