"""PromptBuilder: budget always kept, drop-then-trim order, numbering, both prompt styles."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import pytest

from ragstream.errors import ConfigurationError
from topics.answers import NOT_IN_DOCUMENTS
from topics.retrieved import Candidate
from workers.errors import PromptTooLongError
from workers.generation.prompt import (
    CHAT_TOKENS_PER_MESSAGE,
    INSTRUCTION,
    Prompt,
    PromptBuilder,
    PromptStyle,
)


class WhitespaceCounter:
    """One token per whitespace-separated word; records how often it was called."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, texts: Sequence[str]) -> list[int]:
        self.calls += 1
        return [len(t.split()) for t in texts]


def passage(i: int, words: int, rng: random.Random | None = None) -> Candidate:
    body = " ".join(f"w{i}_{(rng or random).randint(0, 9)}" for _ in range(words))
    return Candidate(
        chunk_id=f"c{i}", doc_id=f"d{i}", text=body, title=f"T{i}", source=f"s{i}.md", score=1 / i
    )


def rendered(prompt: Prompt) -> str:
    if prompt.text is not None:
        return prompt.text
    assert prompt.messages is not None
    return "\n".join(m["content"] for m in prompt.messages)


def builder(n_ctx: int = 400, answer: int = 64, style: PromptStyle = "completion") -> PromptBuilder:
    return PromptBuilder(WhitespaceCounter(), n_ctx, answer, style)


@pytest.mark.parametrize("style", ["completion", "chat"])
def test_never_over_budget_for_random_passage_sets(style: PromptStyle) -> None:
    rng = random.Random(7)
    for _ in range(300):
        answer = rng.randint(1, 100)
        n_ctx = answer + 8 + rng.randint(60, 1100)  # the instruction alone is ~40 words
        b = builder(n_ctx, answer, style)
        passages = [passage(i, rng.randint(1, 400), rng) for i in range(1, rng.randint(0, 12) + 1)]
        question = " ".join(["why"] * rng.randint(1, 150))
        prompt = b.build(question, passages)
        measured = b.measure(*_question_and_blocks(prompt))
        assert prompt.prompt_tokens == measured
        assert prompt.prompt_tokens + answer + 8 <= n_ctx
        assert prompt.dropped == len(passages) - len(prompt.passages_used)
        assert prompt.passages_used == passages[: len(prompt.passages_used)]


def _question_and_blocks(prompt: Prompt) -> tuple[str, list[str]]:
    body = rendered(prompt)
    question = body.rsplit("Question: ", 1)[1].removesuffix("\nAnswer:")
    context = body.split("Context:\n", 1)[1].rsplit("\n\nQuestion: ", 1)[0]
    blocks = re.split(r"\n\n(?=\[\d+\] )", context) if context else []
    return question, blocks


def test_everything_fits_nothing_dropped() -> None:
    passages = [passage(i, 20) for i in (1, 2, 3)]
    prompt = builder(1000).build("What is w?", passages)
    assert (prompt.dropped, prompt.trimmed, prompt.question_trimmed) == (0, False, False)
    assert prompt.passages_used == passages


def test_drops_lowest_ranked_first_then_trims_the_last_kept() -> None:
    passages = [passage(i, 100) for i in (1, 2, 3, 4, 5)]
    b = builder(n_ctx=400, answer=64)  # budget 328: instruction + two whole passages + part
    prompt = b.build("What?", passages)
    assert [p.chunk_id for p in prompt.passages_used] == ["c1", "c2", "c3"]
    assert prompt.dropped == 2
    assert prompt.trimmed
    text = rendered(prompt)
    assert passages[0].text in text and passages[1].text in text
    assert passages[2].text not in text  # the third is cut ...
    assert passages[2].text[:40] in text and "[3] T3 (s3.md)" in text
    assert text.count(" ...") == 1
    assert prompt.prompt_tokens > b.budget_tokens - 5  # ... to fill the budget


def test_top_passage_alone_too_long_is_trimmed() -> None:
    prompt = builder(n_ctx=300, answer=64).build("What?", [passage(1, 1000), passage(2, 10)])
    assert [p.chunk_id for p in prompt.passages_used] == ["c1"]
    assert prompt.trimmed and prompt.dropped == 1


def test_small_leftover_is_not_filled_with_a_fragment() -> None:
    b = PromptBuilder(WhitespaceCounter(), 400, 64, min_partial_tokens=1000)
    prompt = b.build("What?", [passage(i, 100) for i in (1, 2, 3)])
    assert len(prompt.passages_used) == 2
    assert not prompt.trimmed


def test_numbering_matches_passages_used() -> None:
    passages = [passage(i, 30) for i in range(1, 8)]
    prompt = builder(n_ctx=500).build("Q?", passages)
    text = rendered(prompt)
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\] ", text, flags=re.MULTILINE)]
    assert numbers == list(range(1, len(prompt.passages_used) + 1))
    for n, used in enumerate(prompt.passages_used, start=1):
        assert f"[{n}] {used.title} ({used.source})\n" in text


def test_instruction_and_citation_convention_present() -> None:
    prompt = builder(1000).build("Where?", [passage(1, 5)])
    assert prompt.text is not None
    assert prompt.text.startswith(INSTRUCTION)
    assert "[n]" in INSTRUCTION and NOT_IN_DOCUMENTS in INSTRUCTION
    assert "answer" in INSTRUCTION.lower() and "only" in INSTRUCTION


def test_completion_shape_ends_with_answer_cue() -> None:
    prompt = builder(1000).build("Where is it?", [passage(1, 5)])
    assert prompt.style == "completion" and prompt.messages is None
    assert prompt.text is not None
    assert "\n\nContext:\n[1] T1 (s1.md)\n" in prompt.text
    assert prompt.text.endswith("\n\nQuestion: Where is it?\nAnswer:")


def test_chat_shape_system_and_user_messages() -> None:
    b = builder(1000, style="chat")
    prompt = b.build("Where is it?", [passage(1, 5)])
    assert prompt.style == "chat" and prompt.text is None
    assert prompt.messages is not None
    assert [m["role"] for m in prompt.messages] == ["system", "user"]
    assert prompt.messages[0]["content"] == INSTRUCTION
    user = prompt.messages[1]["content"]
    assert user.startswith("Context:\n[1] T1 (s1.md)\n")
    assert user.endswith("\n\nQuestion: Where is it?")
    words = sum(len(m["content"].split()) for m in prompt.messages)
    assert prompt.prompt_tokens == words + 2 * CHAT_TOKENS_PER_MESSAGE


def test_overlong_question_is_trimmed_and_marked() -> None:
    b = builder(n_ctx=200, answer=64)
    prompt = b.build(" ".join(["why"] * 500), [passage(1, 50)])
    assert prompt.question_trimmed
    assert prompt.prompt_tokens <= b.budget_tokens
    assert prompt.passages_used == []
    assert prompt.dropped == 1


def test_instruction_alone_too_long_raises() -> None:
    b = PromptBuilder(WhitespaceCounter(), 40, 8, safety_margin_tokens=8)
    with pytest.raises(PromptTooLongError):
        b.build("Q?", [])


def test_no_room_at_all_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        PromptBuilder(WhitespaceCounter(), 128, 128)


def test_counter_calls_stay_logarithmic() -> None:
    counter = WhitespaceCounter()
    b = PromptBuilder(counter, 2048, 128)
    b.build("Q?", [passage(i, 300) for i in range(1, 51)])
    assert counter.calls < 40
