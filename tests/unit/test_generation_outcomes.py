"""Compressed prompts and how a completion is judged before it is published."""

from __future__ import annotations

from topics.responses import EvidenceSpan
from topics.retrieved import Candidate
from workers.generation.compress import compress, is_repetitive, judge, last_whole_sentence

TEXT = "Alpha is first. Beta is second. Gamma is third. Delta is fourth."


def _cand(chunk_id: str, text: str = TEXT) -> Candidate:
    return Candidate(
        chunk_id=chunk_id, doc_id=f"doc-{chunk_id}", text=text, title=chunk_id, score=1.0
    )


def _span(n: int, start: int, end: int, score: float = 1.0) -> EvidenceSpan:
    return EvidenceSpan(
        n=n, chunk_id=f"c{n}", doc_id="d", start=start, end=end, text=TEXT[start:end], score=score
    )


def test_compress_keeps_only_evidence_and_renumbers_by_best_span() -> None:
    passages = [_cand("c1"), _cand("c2"), _cand("c3")]
    spans = [_span(3, 16, 31, 0.9), _span(1, 48, 64, 0.8), _span(3, 0, 15, 0.7)]
    prompt_passages, renumbered = compress(passages, spans)
    assert [p.chunk_id for p in prompt_passages] == ["c3", "c1"]
    assert prompt_passages[0].text == "Alpha is first. Beta is second."  # reading order, adjacent
    assert prompt_passages[1].text == "Delta is fourth."
    assert [s.n for s in renumbered] == [1, 2, 1]


def test_compress_marks_gaps_between_distant_spans_and_drops_bad_numbers() -> None:
    passages = [_cand("c1")]
    spans = [_span(1, 0, 15), _span(1, 48, 64), _span(4, 0, 5)]
    prompt_passages, renumbered = compress(passages, spans)
    assert prompt_passages[0].text == "Alpha is first. ... Delta is fourth."
    assert len(renumbered) == 2


def test_empty_and_stop_only_completions_fall_back() -> None:
    assert judge("", "stop").fallback
    assert judge("  \n ", "stop").fallback
    assert judge("Question:", "stop", stop=["Question:"]).reason == "empty"


def test_length_cut_keeps_the_last_whole_sentence_and_marks_it() -> None:
    judged = judge("It is 128 MB [1]. It can be raised with the setting and then", "length")
    assert judged.text == "It is 128 MB [1]." and judged.truncated and not judged.fallback
    assert judge("The setting controls how much memory the server uses for", "length").fallback


def test_a_repeating_completion_is_garbage_not_an_answer() -> None:
    garbage = "\\gset\nAnswer: \\gset\nAnswer: \\gset\nAnswer: \\gset\nAnswer:"
    assert is_repetitive(garbage)
    assert judge(garbage, "length").reason == "repeated"


def test_a_clean_answer_is_kept_as_is() -> None:
    judged = judge(" Use subprocess.run with capture_output=True [2]. ", "stop")
    assert (
        judged.text == "Use subprocess.run with capture_output=True [2]." and not judged.truncated
    )
    assert last_whole_sentence("no end") == ""


def test_lines_that_differ_only_in_their_citation_are_a_loop() -> None:
    """Issue 39: the small tier repeated one sentence five times, each citing another passage,
    and the judge let it through."""
    loop = "\n".join(f"The backup generator serial number is GX-5531 [{n}]." for n in range(1, 6))
    assert is_repetitive(loop)
    judged = judge(loop, "stop")
    assert judged.text == "The backup generator serial number is GX-5531 [1]."
    assert judged.reason == "repeated_cut"
    assert is_repetitive("Use venv [1]. Use venv [2, 3]. use venv.")
    assert not is_repetitive("Install it [1]. Activate it [1]. Run it [2].")


def test_a_numbered_loop_is_repetitive_and_a_numbered_list_is_not() -> None:
    """A small model's loop often numbers its repeats ("1. Create ... 2. Create ..."), on lines
    or in one line; a list of different steps is no loop."""
    loop = "\n".join(f"{i}. Create a virtual environment in the directory." for i in range(1, 10))
    assert is_repetitive(loop + "\n10.")
    assert is_repetitive("1. Use venv. 2. Use venv. 3. Use venv.")
    assert not is_repetitive("1. Create it.\n2. Activate it.\n3. Install packages.")
    assert not is_repetitive("1.\n2.\n3.")
