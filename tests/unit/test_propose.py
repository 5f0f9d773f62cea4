"""Propose-and-verify: what a proposal's text yields as names, and that a proposed entry opens
the answer only when the index defines it on a page retrieval ranked."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from topics.queries import QueryRequest
from topics.retrieved import Candidate
from workers.evidence.stage import attach_definitions
from workers.retrieval.definitions import DefinitionHit
from workers.retrieval.propose import MAX_NAMES, NameProposer, parse_names


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("csv.reader, open", ["csv.reader", "open"]),
        ("`datetime.now().strftime('%Y-%m-%d')`", ["datetime.now"]),
        ("1. copy.deepcopy\n2. copy.copy", ["copy.deepcopy", "copy.copy"]),
        ("atexit, atexit, atexit", ["atexit"]),
        ("\\dt", ["\\dt"]),
        ("sorted(), key=lambda x: x['key']", ["sorted", "key=lambda x: x['key']"]),
        ("a, b, c, d, e", ["a", "b", "c"][:MAX_NAMES]),
        ("", []),
        ("You could use " + "very " * 20 + "long prose.", []),
    ],
)
def test_the_names_of_a_proposal(text: str, names: list[str]) -> None:
    assert parse_names(text) == names


def _entry(doc_id: str, name: str, *, proposed: bool) -> Candidate:
    hit = DefinitionHit(
        entry_id=f"def-{name}",
        doc_id=doc_id,
        version=1,
        source=f"{doc_id}.html",
        name=name,
        kind="function",
        signature=f"{name}(x)",
        summary=f"Does {name}.",
        example="",
        anchor=name,
        score=0.1,
    )
    return hit.candidate(proposed=proposed)


def _passage(doc_id: str) -> Candidate:
    return Candidate(chunk_id=f"c-{doc_id}", doc_id=doc_id, text="text", score=1.0)


def test_a_proposed_entry_is_attached_first_only_from_a_ranked_page() -> None:
    top = [_passage("csv"), _passage("io")]
    stranger = _entry("hashlib", "hashlib.scrypt", proposed=True)
    proposed = _entry("csv", "csv.reader", proposed=True)
    searched = _entry("io", "io.open", proposed=False)
    out = attach_definitions(top, [stranger, proposed, searched])
    assert [c.chunk_id for c in out] == ["c-csv", "c-io", "def-csv.reader", "def-io.open"]
    assert attach_definitions(top, [stranger]) == top


def test_a_proposal_server_that_fails_proposes_nothing_and_fails_no_question() -> None:
    proposer = NameProposer("http://llm", "m", timeout_s=1)
    proposer._client = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(503, text="loading"))
    )
    assert proposer.propose(["How do I read a CSV file?", "How do I sort?"]) == [[], []]
    proposer._client = httpx.Client(
        transport=httpx.MockTransport(
            lambda request: httpx.Response(200, json={"choices": [{"message": {"content": 7}}]})
        )
    )
    assert proposer.propose(["How do I read a CSV file?"]) == [["7"]]
    proposer.close()


def test_a_proposal_request_carries_the_fixed_instruction_and_the_question() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "csv.reader"}}]})

    proposer = NameProposer("http://llm/", "qwen", timeout_s=1)
    proposer._client = httpx.Client(transport=httpx.MockTransport(handler))
    request = QueryRequest(
        tenant="t", query="How do I read a CSV file?", deadline=dt.datetime.now(dt.UTC)
    )
    assert proposer.propose([request.query]) == [["csv.reader"]]
    body = seen[0]
    assert body["model"] == "qwen" and body["temperature"] == 0
    messages = body["messages"]
    assert isinstance(messages, list) and messages[1]["content"] == request.query
    proposer.close()
