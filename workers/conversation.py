"""Conversations: a follow-up question made standalone from the conversation's earlier questions.

Placeholder; the coordinator replaces it.
"""

from __future__ import annotations

from collections.abc import Sequence


def standalone_question(history: Sequence[str], question: str) -> str:
    """The question to retrieve and answer for ``question`` asked after ``history``.

    placeholder; the coordinator replaces it.

    Args:
        history: the conversation's earlier user questions, oldest first (not the answers).
        question: the latest user question.

    Returns:
        The earlier questions and the question, one a line.
    """
    return "\n".join([*history, question])
