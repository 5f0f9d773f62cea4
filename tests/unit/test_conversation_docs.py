"""docs/http-api.md (Conversations) and docs/console.md (Follow-ups) state the follow-up rewrite
as ``workers/conversation.py`` makes it: its context marker, its numbers (read from the module,
so that a changed constant fails here until the pages say it) and the worked example, which the
rewrite is run on."""

from __future__ import annotations

import re

from ragstream.settings import PROJECT_ROOT
from topics.queries import MAX_TURNS
from workers import conversation as c

DOCS = PROJECT_ROOT / "docs"
#: The docs' worked example: an earlier question, the follow-up, and what it becomes.
EARLIER = "Which TCP port does the PostgreSQL server listen on by default?"
FOLLOW_UP = "And how do I change it?"


def _bullet(page: str, title: str) -> str:
    """The list item of ``page`` that starts with ``- **title**``, its lines joined and its
    whitespace collapsed (the pages wrap at 100 columns)."""
    text = (DOCS / page).read_text()
    match = re.search(rf"^- \*\*{re.escape(title)}\*\*.*?(?=^- |^\S|\Z)", text, re.M | re.S)
    assert match is not None, f"{page} has no '- **{title}**' item"
    return " ".join(match[0].split())


def test_the_worked_example_is_what_the_rewrite_makes() -> None:
    question, context = c.split_context(
        c.standalone_question([EARLIER], FOLLOW_UP, named=("a", "b"), in_conversation=True)
    )
    assert question == "How do I change the TCP port?"
    assert context == f"{EARLIER} a b"


def test_the_http_api_page_states_the_rewrite_as_the_code_makes_it() -> None:
    text = _bullet("http-api.md", "Conversations")
    for stated in (
        f"`{c.CONTEXT_MARKER}` follows",
        f"the last {c.MAX_CONTEXT_QUESTIONS} earlier questions",
        f"up to {c.MAX_ANSWER_NAMES} code names the last answer opened with",
        f"its first {c.ANSWER_OPENING_CHARS} characters",
        f"its last {c.MAX_CONTEXT_CHARS} characters",
        f"fewer than {c.SELF_CONTAINED_WORDS} content words",
        f"fewer than {c.MIN_CONTENT_WORDS} content words at all",
        f"the last {MAX_TURNS} turns",
        f"(at most {MAX_TURNS})",
        '"How do I change the TCP port?"',
    ):
        assert stated in text, f"docs/http-api.md, Conversations, does not say {stated!r}"


def test_the_console_page_states_the_same_rewrite() -> None:
    text = _bullet("console.md", "Follow-ups")
    example = (
        f'"How do I change the TCP port?{c.CONTEXT_MARKER}'
        f"<the last {c.MAX_CONTEXT_QUESTIONS} earlier questions> "
        f'<up to {c.MAX_ANSWER_NAMES} code names the last answer opened with>"'
    )
    assert example in text, f"docs/console.md, Follow-ups, does not say {example!r}"
    assert f"up to {MAX_TURNS})" in text
