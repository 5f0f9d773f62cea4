"""The one citation builder: ``[n]`` numbers of an answer to the passages they cite.

Both answer paths use it: the evidence tier (the passages its quoted spans come from) and the
LLM tiers (the passages the completion cites as ``[n]``, or every passage of the prompt when
it cites none, and the evidence fallback's quoted passages).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Protocol

from topics.responses import Citation

#: A citation marker in an answer: ``[n]`` with a 1-3 digit passage number.
CITE = re.compile(r"\[(\d{1,3})\]")


class Citable(Protocol):
    """A passage as events carry it (:class:`topics.retrieved.Candidate`)."""

    @property
    def doc_id(self) -> str: ...
    @property
    def chunk_id(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def source(self) -> str: ...


def citations_of(numbers: Collection[int], passages: Sequence[Citable]) -> tuple[Citation, ...]:
    """Citations of ``passages`` by 1-based number, in ascending order; numbers outside
    ``1..len(passages)`` are skipped."""
    return tuple(
        Citation(
            n=n,
            doc_id=passages[n - 1].doc_id,
            chunk_id=passages[n - 1].chunk_id,
            title=passages[n - 1].title,
            source=passages[n - 1].source,
        )
        for n in sorted(set(numbers))
        if 1 <= n <= len(passages)
    )


def citations(answer: str, used: Sequence[Citable]) -> tuple[Citation, ...]:
    """Passages cited as ``[n]`` in ``answer``; every passage ``used`` if it cites none."""
    numbers = {int(m) for m in CITE.findall(answer) if 1 <= int(m) <= len(used)}
    return citations_of(numbers or range(1, len(used) + 1), used)
