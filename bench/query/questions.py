"""Questions for load: the repository's sample question set, else a built-in list.

Every request gets a unique text (:func:`unique_query`) so that no two requests of a run share
an exact answer-cache key; see :mod:`bench.query.run` for how the semantic cache is
kept out of the measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragstream.settings import PROJECT_ROOT

#: The evaluation's sample questions (one JSON object a line with a ``question`` field).
SAMPLE_QUESTIONS = PROJECT_ROOT / "bench" / "evaluation" / "questions.sample.jsonl"

#: Used while the sample set does not exist: realistic questions over the Python 3.11 and
#: PostgreSQL 15 manuals, of the lengths and kinds users ask (look-ups, how-tos, explanations).
BUILT_IN_QUESTIONS: tuple[str, ...] = (
    "What does the walrus operator := do in Python?",
    "How do I read a file line by line in Python?",
    "What is the difference between a list and a tuple?",
    "How can I sort a list of dictionaries by a key?",
    "What does functools.lru_cache do and what is its default maxsize?",
    "How do I create a virtual environment with venv?",
    "What exceptions can json.loads raise?",
    "How does asyncio.gather handle exceptions in one of the awaitables?",
    "What is the purpose of __slots__ in a class?",
    "How do I parse command-line arguments with argparse?",
    "What does the with statement do with a context manager?",
    "How do dataclasses generate __init__ and __repr__?",
    "What is the Global Interpreter Lock?",
    "How do I format a datetime as an ISO 8601 string?",
    "Which module provides regular expressions and how do I compile a pattern?",
    "How do I run a subprocess and capture its output?",
    "What is the default port PostgreSQL listens on?",
    "How do I create an index concurrently in PostgreSQL?",
    "What does VACUUM FULL do differently from plain VACUUM?",
    "Which isolation levels does PostgreSQL support?",
    "How do I list all tables in psql?",
    "What is the default value of shared_buffers?",
    "How does autovacuum decide when to vacuum a table?",
    "What is a partial index and when should I use one?",
    "How do I grant SELECT on all tables in a schema to a role?",
    "What does EXPLAIN ANALYZE show?",
    "How do I set up streaming replication with a standby server?",
    "What is the maximum length of an identifier in PostgreSQL?",
    "How do I use a common table expression with WITH RECURSIVE?",
    "Which data type should I use for money amounts in PostgreSQL?",
    "What does the work_mem setting control?",
    "How do I back up a single database with pg_dump?",
)


def load_questions(path: Path | None = None) -> tuple[list[str], str]:
    """The questions to draw load from, and where they came from.

    Args:
        path: a JSONL file with a ``question`` field per line; ``None`` means
            :data:`SAMPLE_QUESTIONS` if it exists, else :data:`BUILT_IN_QUESTIONS`.

    Returns:
        ``(questions, source)``; ``source`` is the file path or ``"built-in"``.

    Raises:
        FileNotFoundError: an explicit ``path`` does not exist.
        ValueError: the file holds no questions, or a line is not a JSON object with a
            non-empty ``question``.
    """
    if path is None:
        if not SAMPLE_QUESTIONS.exists():
            return list(BUILT_IN_QUESTIONS), "built-in"
        path = SAMPLE_QUESTIONS
    questions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not str(row.get("question", "")).strip():
            raise ValueError(f"{path}:{number}: expected an object with a 'question'")
        questions.append(str(row["question"]).strip())
    if not questions:
        raise ValueError(f"{path} holds no questions")
    return questions, str(path)


def unique_query(question: str, run: str, n: int) -> str:
    """``question`` tagged with the run and the request number, e.g. ``"... [a1b2c3r17]"``.

    The tag changes the normalised text (so the exact answer-cache key) of every request; it
    is one opaque token, so it barely moves BM25 scores or the query embedding.
    """
    return f"{question} [{run}r{n}]"
