"""The LLM yes/no reranker against an in-memory OpenAI-compatible server (httpx.MockTransport)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from ragstream.errors import PermanentError, TransientError
from workers.rerank.llm import LlmReranker, yes_probability


def _server(with_logprobs: bool) -> tuple[httpx.MockTransport, list[dict[str, object]]]:
    seen: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        relevant = "cats" in body["prompt"].split("\nQuestion:")[0]
        choice: dict[str, object] = {"text": " yes" if relevant else " no"}
        if with_logprobs:
            p = 0.8 if relevant else 0.1
            top = {" yes": math.log(p), " no": math.log(1 - p)}
            choice["logprobs"] = {"top_logprobs": [top]}
        return httpx.Response(200, json={"choices": [choice]})

    return httpx.MockTransport(handle), seen


def test_scores_are_p_yes_from_logprobs_in_input_order() -> None:
    transport, seen = _server(with_logprobs=True)
    reranker = LlmReranker("http://llm", model="small", transport=transport)
    scores = reranker.score([("pets?", "about cats"), ("pets?", "about tax"), ("q", "cats!")])
    assert scores == pytest.approx([0.8, 0.1, 0.8])
    assert reranker.requests_sent == 3
    body = seen[0]
    assert body["max_tokens"] == 1 and body["model"] == "small"
    assert str(body["prompt"]).endswith(
        "Is the passage relevant to the question? Answer yes or no.\nAnswer:"
    )


def test_text_fallback_without_logprobs() -> None:
    transport, _ = _server(with_logprobs=False)
    reranker = LlmReranker("http://llm", transport=transport)
    assert reranker.score([("q", "cats"), ("q", "dogs")]) == [1.0, 0.0]
    assert reranker.score([]) == []


@pytest.mark.parametrize(("status", "error"), [(503, TransientError), (400, PermanentError)])
def test_http_errors_are_translated(status: int, error: type[Exception]) -> None:
    transport = httpx.MockTransport(lambda _r: httpx.Response(status, text="nope"))
    with pytest.raises(error):
        LlmReranker("http://llm", transport=transport).score([("q", "p")])


def test_connection_failure_is_transient() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(TransientError):
        LlmReranker("http://llm", transport=httpx.MockTransport(refuse)).score([("q", "p")])


def test_yes_probability_sums_yes_variants() -> None:
    top = {" yes": math.log(0.5), "Yes": math.log(0.2), " no": math.log(0.3)}
    assert yes_probability({"logprobs": {"top_logprobs": [top]}}) == pytest.approx(0.7)


def test_yes_probability_reads_the_llama_cpp_layout() -> None:
    top = [
        {"token": " Yes", "logprob": math.log(0.2)},
        {"token": " No", "logprob": math.log(0.5)},
        {"token": " yes", "logprob": math.log(0.1)},
    ]
    choice = {"text": " No", "logprobs": {"content": [{"token": " No", "top_logprobs": top}]}}
    assert yes_probability(choice) == pytest.approx(0.3)
