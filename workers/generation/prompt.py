"""The grounded-answer prompt, fitted to one server slot's context window.

Passages are numbered ``[1]..[n]`` in rank order and the model is told to answer only from
them, to cite them as ``[n]`` and to say :data:`NOT_IN_DOCUMENTS` when they do not hold the
answer (the numbered-source convention of RAG prompts since Lewis et al. 2020 and of
citation-evaluated generation, Gao et al. 2023, "Enabling LLMs to Generate Text with
Citations"). The answer's ``[n]`` map back to ``Prompt.passages_used[n - 1]``.

Budget (all in the serving model's tokens): ``prompt_tokens + max_answer_tokens +
safety_margin <= n_ctx_per_slot``, always. Lowest-ranked passages are dropped first; the room
left after the last whole passage goes to the next passage, trimmed (binary search on its
character length, measured by the counter); if the instruction and question alone do not fit,
the question is trimmed. The rendered prompt is counted as a whole before it is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ragstream.errors import ConfigurationError
from topics.answers import NOT_IN_DOCUMENTS
from topics.retrieved import Candidate
from workers.errors import PromptTooLongError

PromptStyle = Literal["completion", "chat"]


INSTRUCTION = (
    "Answer the question using only the numbered passages below. "
    "Cite the passages you use as [n]. "
    f'If the passages do not contain the answer, say "{NOT_IN_DOCUMENTS}"'
)

#: The instruction of prompts over evidence spans (the LLM tiers): a short answer that quotes
#: the exact names and values of the evidence and cites it.
EVIDENCE_INSTRUCTION = (
    "Answer the question in one or two short sentences, using only the numbered evidence "
    "below. Use the exact names, values and commands the evidence gives, and cite the evidence "
    "you use as [n]. "
    f'If the evidence does not contain the answer, say "{NOT_IN_DOCUMENTS}"'
)

#: Tokens a chat template adds around each message (role markers, turn delimiters); an upper
#: bound for common templates (ChatML: 5, Gemma: 6, Llama 3: 5).
CHAT_TOKENS_PER_MESSAGE = 8

#: Appended to a trimmed passage or question.
ELLIPSIS = " ..."


class TokenCounter(Protocol):
    """Counts tokens in the serving model's tokenizer."""

    def count(self, texts: Sequence[str]) -> list[int]:
        """Return the token count of each text, in order (``len == len(texts)``)."""
        ...


@dataclass(frozen=True)
class Prompt:
    """A budgeted prompt.

    Attributes:
        style: ``completion`` (``text`` is set) or ``chat`` (``messages`` is set).
        text: The completion prompt, ending in ``"Answer:"``.
        messages: Chat messages, ``[{"role": "system"|"user", "content": ...}]``.
        passages_used: The passages in the prompt, in order; ``[n]`` is ``passages_used[n-1]``.
        prompt_tokens: Measured size of the prompt in the serving model's tokens.
        dropped: How many of the given passages were left out entirely.
        trimmed: The last passage was cut to fit.
        question_trimmed: The question itself was cut (instruction + question overflowed).
    """

    style: PromptStyle
    passages_used: list[Candidate]
    prompt_tokens: int
    dropped: int = 0
    trimmed: bool = False
    question_trimmed: bool = False
    text: str | None = None
    messages: list[dict[str, str]] | None = field(default=None)


def passage_block(n: int, passage: Candidate, text: str | None = None) -> str:
    """Render one passage as ``[n] title (source)\\ntext``.

    Args:
        n: 1-based number the answer cites.
        passage: The candidate; an empty title falls back to its ``doc_id``.
        text: Replacement body (a trimmed ``passage.text``); ``None`` uses the full text.
    """
    title = passage.title or passage.doc_id
    header = f"[{n}] {title} ({passage.source})" if passage.source else f"[{n}] {title}"
    return f"{header}\n{passage.text if text is None else text}"


class PromptBuilder:
    """Builds prompts that always fit one slot of the serving model.

    Args:
        tokenizer: Token counter of the serving model (``ServerTokenCounter`` in production).
        n_ctx_per_slot: Context window of one server slot, in tokens (``n_ctx / n_parallel``).
        max_answer_tokens: Tokens reserved for the answer (the request's ``max_tokens``).
        style: ``completion`` for base models, ``chat`` for instruction-tuned ones.
        safety_margin_tokens: Extra tokens kept free (BOS, tokenizer edge effects).
        min_partial_tokens: A trimmed passage is only added when at least this many tokens
            are free for it; shorter fragments are noise.
        instruction: The instruction text (defaults to :data:`INSTRUCTION`).

    Raises:
        ConfigurationError: ``max_answer_tokens + safety_margin_tokens`` leaves no room.
    """

    def __init__(
        self,
        tokenizer: TokenCounter,
        n_ctx_per_slot: int,
        max_answer_tokens: int,
        style: PromptStyle = "completion",
        *,
        safety_margin_tokens: int = 8,
        min_partial_tokens: int = 32,
        instruction: str = INSTRUCTION,
    ) -> None:
        self.max_answer_tokens = max_answer_tokens
        self.budget_tokens = n_ctx_per_slot - max_answer_tokens - safety_margin_tokens
        if self.budget_tokens <= 0:
            raise ConfigurationError(
                f"n_ctx_per_slot={n_ctx_per_slot} leaves no prompt room after "
                f"max_answer_tokens={max_answer_tokens} and a {safety_margin_tokens}-token margin"
            )
        self.tokenizer = tokenizer
        self.style = style
        self.min_partial_tokens = min_partial_tokens
        self.instruction = instruction
        self._instruction: str | None = None  # one build()'s own instruction, if given

    # -- rendering ------------------------------------------------------------------------

    def _context_and_question(self, question: str, blocks: Sequence[str]) -> str:
        context = "\n\n".join(blocks)
        return f"Context:\n{context}\n\nQuestion: {question}"

    def render(self, question: str, blocks: Sequence[str]) -> str | list[dict[str, str]]:
        """Render the prompt text (completion) or messages (chat) for these passage blocks."""
        body = self._context_and_question(question, blocks)
        instruction = self._instruction or self.instruction
        if self.style == "chat":
            return [
                {"role": "system", "content": instruction},
                {"role": "user", "content": body},
            ]
        return f"{instruction}\n\n{body}\nAnswer:"

    def measure(self, question: str, blocks: Sequence[str]) -> int:
        """Tokens of the rendered prompt (chat: contents plus a per-message overhead)."""
        rendered = self.render(question, blocks)
        if isinstance(rendered, str):
            return self.tokenizer.count([rendered])[0]
        counts = self.tokenizer.count([m["content"] for m in rendered])
        return sum(counts) + CHAT_TOKENS_PER_MESSAGE * len(rendered)

    def _fits(self, question: str, blocks: Sequence[str]) -> bool:
        return self.measure(question, blocks) <= self.budget_tokens

    # -- budgeting ------------------------------------------------------------------------

    def _longest_fitting_prefix(self, text: str, fits: _Fits) -> str | None:
        """Longest ``text[:n] + ELLIPSIS`` (cut at a space when one is near) that fits."""
        lo, hi = 0, len(text)  # invariant: a cut at lo fits (or lo == 0), at hi + 1 does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(text[:mid].rstrip() + ELLIPSIS):
                lo = mid
            else:
                hi = mid - 1
        if lo == 0:
            return None
        space = text.rfind(" ", 0, lo + 1)
        cut = space if space > lo // 2 else lo
        for end in (cut, lo):  # prefer a word boundary; tokenizers are not quite monotone
            candidate = text[:end].rstrip() + ELLIPSIS
            if fits(candidate):
                return candidate
        return None

    def _fit_question(self, question: str) -> tuple[str, bool]:
        if self._fits(question, []):
            return question, False
        trimmed = self._longest_fitting_prefix(question, lambda q: self._fits(q, []))
        if trimmed is None:
            raise PromptTooLongError(
                f"the instruction alone exceeds the prompt budget of {self.budget_tokens} tokens"
            )
        return trimmed, True

    def _whole_passages(self, question: str, blocks: Sequence[str], base_tokens: int) -> list[str]:
        """Longest prefix of ``blocks`` that fits: estimate from per-block counts, then verify."""
        if not blocks:
            return []
        sizes = self.tokenizer.count(blocks)
        total, k = base_tokens, 0
        for size in sizes:
            if total + size + 1 > self.budget_tokens:  # +1: the "\n\n" separator
                break
            total += size + 1
            k += 1
        while k > 0 and not self._fits(question, blocks[:k]):
            k -= 1
        return list(blocks[:k])

    def _partial_passage(
        self, question: str, kept: list[str], n: int, passage: Candidate
    ) -> str | None:
        room = self.budget_tokens - self.measure(question, kept)
        if room < self.min_partial_tokens:
            return None

        def fits(text: str) -> bool:
            return self._fits(question, [*kept, passage_block(n, passage, text)])

        text = self._longest_fitting_prefix(passage.text, fits)
        return None if text is None else passage_block(n, passage, text)

    def build(
        self, question: str, passages: Sequence[Candidate], *, instruction: str | None = None
    ) -> Prompt:
        """Build the prompt for ``question`` over ``passages`` (best first).

        Args:
            question: The user's question.
            passages: Candidates in rank order; the lowest-ranked are dropped first.
            instruction: This prompt's instruction (e.g. :data:`EVIDENCE_INSTRUCTION`);
                ``None`` uses the builder's.

        Returns:
            A :class:`Prompt` with ``prompt_tokens <= budget_tokens``.

        Raises:
            PromptTooLongError: The instruction alone does not fit (a misconfiguration).
            BackendUnavailableError: The token counter's server cannot be reached.
        """
        self._instruction = instruction
        try:
            return self._build(question, passages)
        finally:
            self._instruction = None

    def _build(self, question: str, passages: Sequence[Candidate]) -> Prompt:
        question, question_trimmed = self._fit_question(question)
        blocks = [passage_block(i + 1, p) for i, p in enumerate(passages)]
        kept = self._whole_passages(question, blocks, self.measure(question, []))
        trimmed = False
        if len(kept) < len(passages):
            partial = self._partial_passage(question, kept, len(kept) + 1, passages[len(kept)])
            if partial is not None:
                kept.append(partial)
                trimmed = True
        tokens = self.measure(question, kept)
        if tokens > self.budget_tokens:  # pragma: no cover - every step above verified it
            raise PromptTooLongError(f"prompt of {tokens} tokens over {self.budget_tokens}")
        rendered = self.render(question, kept)
        return Prompt(
            style=self.style,
            passages_used=list(passages[: len(kept)]),
            prompt_tokens=tokens,
            dropped=len(passages) - len(kept),
            trimmed=trimmed,
            question_trimmed=question_trimmed,
            text=rendered if isinstance(rendered, str) else None,
            messages=None if isinstance(rendered, str) else rendered,
        )


class _Fits(Protocol):
    def __call__(self, text: str, /) -> bool: ...
