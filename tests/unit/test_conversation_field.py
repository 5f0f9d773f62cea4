"""The conversation travels as its own field of the query event: every stage answers the
standalone question it makes, the caches key on it and on the last answer, and a follow-up is
never answered with the passage the user has just been shown."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from topics.queries import MAX_TURNS, QueryRequest, Turn
from workers.caches import exact_key
from workers.conversation import (
    answer_names,
    last_answer,
    question_of,
    split_context,
    standalone_question,
)
from workers.evidence.select import EvidenceSelector, repeats, shingles
from workers.retrieval.query import Bm25Boosts, bm25_query


@dataclass(frozen=True)
class P:
    text: str
    title: str = ""
    chunk_id: str = "c"
    doc_id: str = "d"


PORT = "Which TCP port does the PostgreSQL server listen on by default?"
PORT_ANSWER = "The server listens on TCP port 5432 by default [1]."


def _request(query: str, *turns: Turn) -> QueryRequest:
    return QueryRequest(
        tenant="t", query=query, conversation=turns, deadline=dt.datetime.now(dt.UTC)
    )


def test_question_of_is_the_standalone_question_and_query_stays_as_typed() -> None:
    follow = _request("And how do I change it?", Turn(question=PORT, answer=PORT_ANSWER))
    assert follow.query == "And how do I change it?"
    assert question_of(follow) == standalone_question([PORT], "And how do I change it?")
    assert split_context(question_of(follow))[0] != follow.query
    assert last_answer(follow) == PORT_ANSWER
    alone = _request("What is VACUUM?")
    assert question_of(alone) == "What is VACUUM?" and last_answer(alone) == ""
    # round trip through the wire form keeps the turns
    again = QueryRequest.model_validate_json(follow.model_dump_json())
    assert again.conversation == follow.conversation


def test_the_conversation_is_bounded_and_a_turn_needs_its_question() -> None:
    with pytest.raises(ValidationError):
        _request("q", *[Turn(question=f"q{i}?") for i in range(MAX_TURNS + 1)])
    with pytest.raises(ValidationError):
        Turn(question="")
    with pytest.raises(ValidationError):
        Turn(question="q", answer="x" * 8001)
    assert Turn(question="q").answer == ""


def test_the_cache_key_follows_the_standalone_question_and_the_last_answer() -> None:
    a = _request("And how do I change it?", Turn(question=PORT, answer=PORT_ANSWER))
    b = _request("And how do I change it?", Turn(question=PORT, answer="Something else [1]."))
    c = _request("And how do I change it?", Turn(question="What is VACUUM?"))
    keys = {exact_key(r, 1) for r in (a, b, c)}
    assert len(keys) == 3
    assert exact_key(a, 1) == exact_key(
        _request("And how do I change it?", Turn(question=PORT, answer=PORT_ANSWER)), 1
    )


def test_shingles_and_repeats() -> None:
    shown = shingles(PORT_ANSWER)
    assert repeats("The server listens on TCP port 5432 by default.", shown)
    assert not repeats("Change it with the port setting in postgresql.conf.", shown)
    assert not repeats("anything", frozenset())
    assert shingles("[1] [2]") == frozenset()
    assert shingles("Two words") == frozenset({("two", "words")})


SETTINGS = (
    "port (integer). The TCP port the server listens on; 5432 by default. "
    "This parameter can only be set at server start.\n\n"
    "To change the port, set port in postgresql.conf or pass -p to postgres, "
    "then restart the server."
)


def test_the_selector_does_not_give_the_span_the_user_has_just_read() -> None:
    selector = EvidenceSelector(None)
    question = "Which TCP port does the server listen on, and how do I change the port?"
    [first] = selector.select([(question, [P(SETTINGS)])])
    shown_text = first.spans[0].text
    [again] = selector.select([(question, [P(SETTINGS)])], shown=[shown_text])
    assert all(not repeats(s.text, shingles(shown_text)) for s in again.spans)
    assert shown_text not in [s.text for s in again.spans]
    # nothing shown: the same evidence as without the argument
    [same] = selector.select([(question, [P(SETTINGS)])], shown=[""])
    assert same.spans == first.spans


def test_the_last_answers_names_join_the_context_and_a_standalone_question_keeps_it() -> None:
    memo = Turn(
        question="How can I memoize the results of an expensive Python function?",
        answer="functools.lru_cache(user_function): Decorator to wrap a function [3]",
    )
    follow = question_of(_request("And how do I wipe out everything it has remembered?", memo))
    question, context = split_context(follow)
    assert "memoize" in context and context.endswith("functools.lru_cache user_function")
    assert "functools" not in question
    # asked in a conversation, a question whose words stand alone still carries the context
    alone = _request("Which function returns the current working directory?", memo)
    assert split_context(question_of(alone)) == (alone.query, context)
    assert standalone_question([memo.question], alone.query) == alone.query
    assert answer_names("The server listens on TCP port 5432 by default [1].") == ()
    assert answer_names("os.getcwd(), os.chdir() and os.getcwd() again") == (
        "os.getcwd",
        "os.chdir",
    )


def test_bm25_matches_a_follow_ups_context_apart_from_its_question() -> None:
    body = bm25_query("How do I clear it?", [], 10, Bm25Boosts(context=0.5), "memoize lru_cache")
    should = body["query"]["bool"]["should"]
    on_text = [c["match"]["text"] for c in should if "text" in c["match"]]
    assert on_text == [
        {"query": "How do I clear it?"},
        {"query": "memoize lru_cache", "boost": 0.5},
    ]
    assert any("text_stemmed" in c["match"] and c["match"]["text_stemmed"]["boost"] == 0.5
               for c in should)  # fmt: skip
    plain = bm25_query("How do I clear it?", [], 10, Bm25Boosts(context=0.5))
    assert len(plain["query"]["bool"]["should"]) == len(should) - 2
    off = bm25_query("How do I clear it?", [], 10, Bm25Boosts(context=0.0), "memoize")
    assert off == plain
