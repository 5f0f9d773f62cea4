"""Prometheus metrics of the query path: answers by tier, status and error code; LLM requests,
time to first token, latency and tokens; typed error responses by the stage that failed.

Where each is counted (every process exposes the default registry, see
:mod:`ragstream.metrics`):

- ``ragstream_answers_total{tier,status,code}``: the delivery pool, once per ``request_id``
  (the first final response it records in the query log; replays and duplicates are not
  counted), so it is the system's answer count whichever pool answered. ``code`` is the
  :class:`~topics.responses.ErrorCode` of an error and ``none`` for an answer; ``tier`` is the
  response's tier (``evidence``, ``small``, ``large``, ``cache``), or for an error without one
  the LLM tier its stage names (``generation-small`` -> ``small``), else ``none``.
- ``ragstream_error_responses_total{stage,code}``: the pool that built the typed error
  response (generation, retrieval, rerank), on that pool's own endpoint.
- ``ragstream_llm_*``: the generation pools, one observation per LLM request attempt.

Every label set a dashboard needs is created at 0 when its process starts
(:func:`init_answer_labels`, :func:`init_llm_labels`), so a rate over it exists before the
first error.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Histogram

from topics.responses import ErrorCode, QueryResponse

#: Answer tiers as the responses name them (``cache``: an answer-cache hit).
ANSWER_TIERS = ("evidence", "small", "large", "cache")
LLM_TIERS = ("small", "large")
#: Seconds; the LLM's first token takes 0.1-60 s on CPU here (docs/getting-started.md, Models).
LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)

ANSWERS = Counter(
    "ragstream_answers_total",
    "Final responses by answer tier, status (answered, failed) and error code (none for an "
    "answer), counted once per request_id by the delivery pool.",
    ["tier", "status", "code"],
)
ERROR_RESPONSES = Counter(
    "ragstream_error_responses_total",
    "Typed error responses built, by the stage that failed and error code.",
    ["stage", "code"],
)
LLM_REQUESTS = Counter(
    "ragstream_llm_requests_total",
    "LLM request attempts by tier and outcome: ok, timeout (no first token or a token gap "
    "over its limit), or the error code.",
    ["tier", "outcome"],
)
LLM_TTFT = Histogram(
    "ragstream_llm_time_to_first_token_seconds",
    "Time from sending an LLM request to its first token, in seconds.",
    ["tier"],
    buckets=LLM_BUCKETS,
)
LLM_LATENCY = Histogram(
    "ragstream_llm_request_duration_seconds",
    "Time from sending an LLM request to its last token, in seconds.",
    ["tier"],
    buckets=LLM_BUCKETS,
)
LLM_TOKENS = Counter(
    "ragstream_llm_tokens_total",
    "Tokens as the LLM server counted them, by tier and kind (prompt, completion).",
    ["tier", "kind"],
)


def init_answer_labels() -> None:
    """Create every ``ragstream_answers_total`` label set at 0 (answers of each tier; errors
    of each code, for each LLM tier and ``none``)."""
    for tier in ANSWER_TIERS:
        ANSWERS.labels(tier, "answered", "none")
    for tier in (*LLM_TIERS, "none"):
        for code in ErrorCode:
            ANSWERS.labels(tier, "failed", code.value)


def init_llm_labels(tier: str) -> None:
    """Create the LLM metrics of ``tier`` at 0, with the outcomes ``ok``, ``timeout`` and
    ``BACKEND_UNAVAILABLE``, and the error responses of its generation stage."""
    for outcome in ("ok", "timeout", ErrorCode.BACKEND_UNAVAILABLE.value):
        LLM_REQUESTS.labels(tier, outcome)
    LLM_TTFT.labels(tier)
    LLM_LATENCY.labels(tier)
    for kind in ("prompt", "completion"):
        LLM_TOKENS.labels(tier, kind)
    for code in (ErrorCode.BACKEND_UNAVAILABLE, ErrorCode.PROMPT_TOO_LONG, ErrorCode.INTERNAL):
        ERROR_RESPONSES.labels(f"generation-{tier}", code.value)


def answer_labels(response: QueryResponse) -> tuple[str, str, str]:
    """``(tier, status, code)`` of ``response`` for :data:`ANSWERS` (see the module doc)."""
    if response.error is None:
        return response.tier or "none", response.status, "none"
    tier = response.tier
    if not tier:
        stage = response.error.stage
        tier = stage.removeprefix("generation-") if stage.startswith("generation-") else "none"
    return tier, response.status, response.error.code.value


def count_answers(responses: Iterable[QueryResponse]) -> None:
    """Count final responses (call once per ``request_id``: the delivery pool's written ones)."""
    for r in responses:
        ANSWERS.labels(*answer_labels(r)).inc()
