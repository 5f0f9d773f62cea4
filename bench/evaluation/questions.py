"""Evaluation questions (JSONL) and the mapping of retrieved chunks to manual pages.

A question file has one JSON object a line, the format of the team's ``shared/eval``:
``id``, ``corpus`` (a key of the corpus roots, e.g. ``python-3.11``), ``question``,
``answer_patterns`` (Python regexes, matched case-insensitively), ``expected_pages`` (pages
relative to the manual's html root that hold the answer; empty for ``absent`` questions) and
``kind`` (``factual``, ``howto``, ``deep``, ``absent``, ``off_topic`` or ``followup``), and an
optional ``history``: the earlier *user questions* of the conversation, oldest first, each a
string or a turn object ``{"question": ..., "answer": ...}`` (the API's conversation shape). A
turn's ``answer`` is not used: the earlier turns are answered by the system under evaluation,
as its user would have seen them, whatever the set's writer expected. ``answer_patterns`` may
be empty only for a question whose correct answer is a refusal (``absent``, ``off_topic``).

- ``absent``: about the manuals' subject, but the manuals do not hold the answer (a tool or
  function they do not have); answered correctly by a refusal.
- ``off_topic``: about nothing the manuals are about (the weather, a recipe, another product);
  ``expected_pages`` must be empty, and a refusal is the correct answer.
- ``followup``: a question that only makes sense after earlier turns; ``history`` must not be
  empty. The evaluation asks the standalone question that
  :func:`workers.conversation.standalone_question` makes of the history and the question, and
  records both.

:data:`OFF_TOPIC_QUESTIONS` is the repository's off-topic probe set, which ``ragstream eval``
also runs beside any question file (its refusal rate is reported on its own).

A chunk belongs to the page its ``source`` (or, when that is empty, its ``doc_id``) names: bulk
ingestion stores the absolute path of the file in both. The path is made relative to the root
of the corpus it lies under, so ``/usr/share/doc/python3.11/html/library/os.html`` is page
``library/os.html`` of ``python-3.11``. The Sphinx reST source of a page, which a walk of the
Python manual also ingests (``_sources/library/os.rst.txt``), counts as that page
(``library/os.html``): it holds the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ragstream.errors import PermanentError

#: Html roots of the two manuals (Debian ``python3.11-doc`` and ``postgresql-doc-15``).
CORPUS_ROOTS: Mapping[str, Path] = {
    "python-3.11": Path("/usr/share/doc/python3.11/html"),
    "postgresql-15": Path("/usr/share/doc/postgresql-doc-15/html"),
}
#: The repository's own sample set, used when no file is given.
SAMPLE_QUESTIONS = Path(__file__).with_name("questions.sample.jsonl")
#: Off-topic probes run beside every question file (``ragstream eval --no-off-topic`` skips them).
OFF_TOPIC_QUESTIONS = Path(__file__).with_name("questions.offtopic.jsonl")

Kind = Literal["factual", "howto", "deep", "absent", "off_topic", "followup"]
#: Kinds whose correct answer is a refusal.
REFUSAL_KINDS: frozenset[str] = frozenset({"absent", "off_topic"})
_SPHINX_SOURCE = re.compile(r"^_sources/(?P<page>.+?)(\.rst)?\.txt$")


class EvaluationError(PermanentError):
    """The evaluation cannot run as asked (bad input file, options or corpus roots)."""


class QuestionFileError(EvaluationError):
    """A question file cannot be read, or a line is not a valid question (names the line)."""


class EvalQuestion(BaseModel):
    """One evaluation question (see the module docstring for the fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    corpus: str = Field(min_length=1)
    question: str = Field(min_length=1, max_length=4000)
    answer_patterns: tuple[str, ...] = ()
    expected_pages: tuple[str, ...] = ()
    kind: Kind
    history: tuple[str, ...] = ()

    @field_validator("history", mode="before")
    @classmethod
    def _turn_questions(cls, value: Any) -> Any:
        """A turn object ``{"question": q, "answer": a}`` stands for its question ``q``."""
        if not isinstance(value, list | tuple):
            return value
        out = []
        for turn in value:
            if not isinstance(turn, dict):
                out.append(turn)
            elif set(turn) - {"question", "answer"} or "question" not in turn:
                raise ValueError("a history turn is a question or {question, answer}")
            else:
                out.append(turn["question"])
        return out

    @model_validator(mode="after")
    def _kind_fits(self) -> EvalQuestion:
        if not self.answer_patterns and self.kind not in ("absent", "off_topic"):
            raise ValueError("answer_patterns is empty: only a refusal question may have none")
        if self.kind == "off_topic" and self.expected_pages:
            raise ValueError("an off_topic question has no expected_pages")
        if self.kind == "followup" and not self.history:
            raise ValueError("a followup question needs its history (earlier questions)")
        if any(not h.strip() for h in self.history):
            raise ValueError("history holds an empty question")
        return self

    @property
    def answerable(self) -> bool:
        """The manuals hold the answer (``expected_pages`` is not empty)."""
        return bool(self.expected_pages)


def load_questions(path: Path) -> list[EvalQuestion]:
    """Read a JSONL question file; blank lines are skipped.

    Raises:
        QuestionFileError: the file cannot be read; a line is not JSON, misses a field, has a
            pattern that does not compile, or repeats an ``id``; the file holds no question.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionFileError(f"{path}: cannot read: {exc}") from exc
    questions: list[EvalQuestion] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            q = EvalQuestion.model_validate(json.loads(line))
            for pattern in q.answer_patterns:
                re.compile(pattern)
        except (ValueError, ValidationError, re.error) as exc:
            raise QuestionFileError(f"{path}:{n}: {exc}") from exc
        if q.id in seen:
            raise QuestionFileError(f"{path}:{n}: duplicate id {q.id!r}")
        seen.add(q.id)
        questions.append(q)
    if not questions:
        raise QuestionFileError(f"{path}: no questions")
    return questions


@dataclass(frozen=True, slots=True)
class PageRef:
    """A page of a manual: its corpus and its path relative to the manual's html root."""

    corpus: str
    page: str

    def __str__(self) -> str:
        return f"{self.corpus}:{self.page}"


def page_of(location: str, roots: Mapping[str, Path] = CORPUS_ROOTS) -> PageRef | None:
    """The manual page that a chunk's ``source`` (or ``doc_id``) path lies in.

    Args:
        location: an absolute file path (a ``file://`` prefix is accepted).
        roots: corpus name -> html root.

    Returns:
        The page, with ``_sources/<page>.rst.txt`` mapped to ``<page>.html``; ``None`` when the
        path is under no root (another tenant's document, a URL, an empty string).
    """
    path = PurePosixPath(location.removeprefix("file://"))
    if not path.is_absolute():
        return None
    for corpus, root in roots.items():
        if path.is_relative_to(root.as_posix()):
            rel = path.relative_to(root.as_posix()).as_posix()
            source = _SPHINX_SOURCE.match(rel)
            if source:
                rel = source["page"] + ".html"  # not with_suffix: "library/os.path"
            return PageRef(corpus, rel)
    return None


def parse_roots(specs: list[str]) -> dict[str, Path]:
    """``["python-3.11=/path/html", ...]`` -> corpus roots; empty -> :data:`CORPUS_ROOTS`.

    Raises:
        EvaluationError: a spec is not ``NAME=ABSOLUTE_PATH``.
    """
    if not specs:
        return dict(CORPUS_ROOTS)
    roots: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_absolute():
            raise EvaluationError(f"corpus root {spec!r} is not NAME=ABSOLUTE_PATH")
        roots[name] = Path(path)
    return roots
