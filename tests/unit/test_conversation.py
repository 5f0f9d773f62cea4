"""Follow-up questions made standalone from the conversation's earlier questions."""

from __future__ import annotations

import pytest

from workers.conversation import (
    CONTEXT_MARKER,
    is_follow_up,
    kind_asked,
    split_context,
    standalone_question,
    topic_of,
)


def test_a_follow_up_takes_the_topic_of_the_earlier_question() -> None:
    out = standalone_question(
        ["Which TCP port does the PostgreSQL server listen on by default?"],
        "And how do I change it?",
    )
    question, context = split_context(out)
    assert question == "How do I change the TCP port?"
    assert context == "Which TCP port does the PostgreSQL server listen on by default?"


def test_a_what_is_topic_replaces_a_closing_that() -> None:
    out = standalone_question(["What is the default isolation level?"], "How do I change that?")
    assert out.startswith("How do I change the default isolation level?" + CONTEXT_MARKER)


@pytest.mark.parametrize(
    "question",
    [
        "I need a scratch folder that gets wiped automatically when I'm done. What should I use?",
        "How can I launch another program from my script and get whatever it printed back?",
        "Which pickle protocol version does Python 3.11 use by default?",
    ],
)
def test_a_question_that_stands_alone_is_unchanged(question: str) -> None:
    assert not is_follow_up(question)
    assert standalone_question(["What is VACUUM?"], question) == question


def test_a_question_about_it_leans_on_the_conversation_however_long() -> None:
    question = "Does it block other sessions from writing to the table while it runs?"
    assert is_follow_up(question)
    out = standalone_question(["What does the VACUUM command do?"], question)
    assert split_context(out) == (
        "Does the VACUUM command block other sessions from writing to the table while it runs?",
        "What does the VACUUM command do?",
    )
    # Another conversation, another question: the answer cache cannot mix them up.
    assert standalone_question(["What does CREATE INDEX do?"], question) != out


def test_no_history_leaves_the_question_alone_and_answers_are_never_history() -> None:
    assert standalone_question([], "And how do I change it?") == "And how do I change it?"
    # Only the last two earlier questions are carried, their own context removed.
    out = standalone_question(
        ["What is VACUUM?", "What is autovacuum?", f"What is ANALYZE?{CONTEXT_MARKER}old"],
        "What about it?",
    )
    assert split_context(out)[1] == "What is autovacuum? What is ANALYZE?"


def test_topics_of_the_common_question_forms() -> None:
    # A question for the default of something is about that thing (a later "it" is the
    # cache, the setting), not about its default.
    assert topic_of("What is the default maxsize of the lru_cache?") == "the lru_cache"
    assert topic_of("What is the default value of the shared_buffers setting?") == (
        "the shared_buffers setting"
    )
    assert topic_of("What is the default isolation level?") == "the default isolation level"
    assert topic_of("Which TCP port does the server listen on?") == "the TCP port"
    assert topic_of("What does the VACUUM command do?") == "the VACUUM command"
    assert topic_of("How do I create a database from the shell?") == "a database from the shell"
    assert topic_of("Is this a question?") == ""


def test_which_one_asks_for_the_kind_the_earlier_question_named() -> None:
    earlier = "Which function of the os module returns the current working directory as a string?"
    rewritten = standalone_question([earlier], "And which one changes it?")
    assert rewritten.startswith("Which function changes it?")
    assert kind_asked("Which pg_dumpall option dumps only roles?") == "option"
    # An earlier question that named no kind leaves "one" as it is.
    assert standalone_question(["How do I create a database?"], "Which one is faster?").startswith(
        "Which one is faster?"
    )
