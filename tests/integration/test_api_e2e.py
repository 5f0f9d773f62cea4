"""The API end to end: real pool processes, real Kafka/ES/Redis/SQL, the real embedding model and
the real small LLM. HTTP (sync, async + poll, SSE, OpenAI client) and Kafka (the Python client).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from entry.client import ApiRequestError, HttpClient, KafkaClient
from tests.integration.stack import Stack, get_json, make_stack, wait_for

DOCS = {
    "vacuum": "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum "
    "launcher starts workers every autovacuum_naptime, which defaults to one minute.",
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "zebra": "# Zebras\n\nThe Grevy's zebra is the largest living wild equid.",
}
SECRET = "# Launch\n\nThe Globex launch code is 9931. Keep it secret."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # These tests follow questions through an LLM tier (tokens, usage, the generation stage):
    # the router sends every question with usable evidence there. The evidence tier, the
    # default, has its own test below (route "evidence").
    # A stream left before its answer is cancelled at once here (no resume grace): the grace,
    # and a resume within it, are tested in test_stream_resume.py.
    s = make_stack(
        tmp_path_factory.mktemp("api"),
        "api",
        RAGSTREAM_EVIDENCE__TIER_MODE="llm",
        RAGSTREAM_API__RESUME_GRACE_S="0",
    )
    s.start_pools()
    try:
        s.wait_ready()
        s.api()
        s.keys["acme"] = s.key(s.name + "-acme")
        s.keys["globex"] = s.key(s.name + "-globex")
        url = s.apis[0].url
        for doc_id, text in DOCS.items():
            _upsert(url, s.keys["acme"], doc_id, text)
        _upsert(url, s.keys["globex"], "launch", SECRET)
        for key, doc in [(s.keys["acme"], d) for d in DOCS] + [(s.keys["globex"], "launch")]:
            wait_for(
                lambda k=key, d=doc: (
                    get_json(f"{url}/v1/documents/{d}", k)[1].get("status") == "indexed"
                ),
                timeout_s=120,
                what=f"document {doc} indexed",
            )
        yield s
    finally:
        s.close()


def _upsert(url: str, key: str, doc_id: str, text: str) -> None:
    r = httpx.post(
        f"{url}/v1/documents",
        json={"doc_id": doc_id, "text": text, "content_type": "text/markdown"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 202, r.text


def _client(stack: Stack, key: str, i: int = 0) -> HttpClient:
    return HttpClient(stack.apis[i].url, key, timeout_s=120)


def test_sync_query_over_http_answers_with_citations_and_trace(stack: Stack) -> None:
    with _client(stack, stack.keys["acme"]) as c:
        result = c.query("Which TCP port does the server listen on by default?", top_k=2)
    assert result.status == "answered", result
    assert result.citations and result.citations[0].doc_id == "ports"
    assert "5432" in (result.answer or "")
    stages = [t.stage for t in result.trace]
    assert stages[:2] == ["retrieval", "rerank"] and stages[2] == "evidence"
    assert stages[3].startswith("generation")
    assert result.latency_ms and result.latency_ms > 0
    # Each pool's first stage says how long the query waited for it (hop, queue, batching).
    waits = [t.wait_ms for t in result.trace]
    assert all(w is not None and w >= 0 for w in (waits[0], waits[1], waits[3])), waits
    assert waits[2] is None  # evidence runs right after rerank, in the same process
    # The delivery pool writes the query log concurrently with the API's answer.
    url = f"{stack.apis[0].url}/v1/queries/{result.request_id}"
    logged = wait_for(
        lambda: (b := get_json(url, stack.keys["acme"])[1]).get("status") == "answered" and b,
        what="the answer in the query log",
    )
    assert logged["citations"][0]["doc_id"] == "ports"
    assert [t["wait_ms"] for t in logged["trace"]] == waits


def test_evidence_tier_answers_with_quoted_evidence_through_the_api(stack: Stack) -> None:
    with _client(stack, stack.keys["acme"]) as c:
        result = c.query(
            "Which TCP port does the server listen on by default?", top_k=2, route="evidence"
        )
    assert result.status == "answered" and result.tier == "evidence", result
    assert "5432" in (result.answer or "") and "[1]" in (result.answer or "")
    assert result.citations and result.citations[0].doc_id == "ports"
    best = result.evidence[0]
    assert best.doc_id == "ports" and best.end > best.start and "5432" in best.text
    stages = [t.stage for t in result.trace]
    assert stages[:3] == ["retrieval", "rerank", "evidence"] and len(stages) == 3  # no LLM
    with _client(stack, stack.keys["acme"]) as c:
        refused = c.query("Which columns does the pg_stat_io view have?", route="auto")
    assert refused.status == "answered" and refused.tier == "evidence"
    assert refused.answer == "The documents do not contain the answer."


def test_query_over_kafka_with_the_python_client(stack: Stack) -> None:
    tokens: list[str] = []
    with KafkaClient(stack.settings) as c:
        result = c.query(
            "How often does the autovacuum launcher start workers?",
            tenant=stack.name + "-acme",
            on_token=tokens.append,
        )
    assert result.status == "answered"
    assert result.citations[0].doc_id == "vacuum"
    assert tokens, "tokens were streamed"
    assert "".join(tokens).strip() == (result.answer or "").strip()


def test_async_query_then_poll_and_other_tenants_cannot_read_it(stack: Stack) -> None:
    url = stack.apis[0].url
    with _client(stack, stack.keys["acme"]) as c:
        pending = c.submit("What is the largest living wild equid?")
        assert pending.status == "pending" and pending.links["self"].endswith(pending.request_id)
        done = c.wait(pending.request_id, timeout_s=120)
    assert done.status == "answered" and done.citations[0].doc_id == "zebra"
    status, body = get_json(f"{url}/v1/queries/{pending.request_id}", stack.keys["globex"])
    assert status == 404 and body["error"]["code"] == "NOT_FOUND"


def test_sse_stream_sends_tokens_then_the_answer(stack: Stack) -> None:
    with _client(stack, stack.keys["acme"]) as c:
        events = list(c.stream("What does VACUUM reclaim?"))
    kinds = [e.kind for e in events]
    assert kinds[0] == "accepted" and kinds[-1] == "answer", kinds
    assert "token" in kinds
    # The evidence comes first, as its own event, before any token of the LLM.
    assert "evidence" in kinds and kinds.index("evidence") < kinds.index("token"), kinds
    final = events[-1].result
    assert final is not None and final.status == "answered"
    streamed = "".join(str(e.data["text"]) for e in events if e.kind == "token")
    assert final.answer and final.answer.strip().startswith(streamed.strip()[:20])


def test_openai_client_works_unchanged(stack: Stack) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=stack.apis[0].url + "/v1", api_key=stack.keys["acme"])
    question = "Which TCP port does the server listen on by default? Answer briefly."
    completion = client.chat.completions.create(
        model="ragstream", messages=[{"role": "user", "content": question}]
    )
    content = completion.choices[0].message.content or ""
    assert "5432" in content
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model="ragstream",
        messages=[{"role": "user", "content": "What does VACUUM reclaim? Be brief."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    parts = [ch.choices[0].delta.content or "" for ch in chunks if ch.choices]
    assert "".join(parts).strip(), parts
    # citations and evidence ride in the finish chunk; usage on the chunk after it (OpenAI's)
    final, usage = chunks[-2:]
    assert usage.choices == [] and usage.usage is not None and usage.usage.completion_tokens > 0
    extra = final.model_extra or {}
    assert "vacuum" in [c["doc_id"] for c in extra["citations"]], extra
    assert extra["evidence"], extra


def test_max_tokens_bounds_the_real_llms_answer_and_completions_are_served(
    stack: Stack,
) -> None:
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=stack.apis[0].url + "/v1", api_key=stack.keys["acme"])
    question = "What does VACUUM reclaim, and when does the autovacuum launcher start workers?"
    short = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": question}], max_tokens=3
    )
    assert short.usage is not None and 0 < short.usage.completion_tokens <= 3, short.usage
    assert short.choices[0].message.content  # cut at a sentence or the evidence answer
    text = client.completions.create(model="small", prompt="What does VACUUM reclaim?")
    assert text.object == "text_completion" and "storage" in text.choices[0].text.lower()
    assert text.usage is not None and text.usage.completion_tokens > 0
    try:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    except NotFoundError as exc:
        assert exc.code == "model_not_found"
    else:
        raise AssertionError("an unknown model was answered")


def test_langchain_and_llamaindex_with_their_defaults_and_the_sources_block(
    stack: Stack,
) -> None:
    from langchain_openai import ChatOpenAI
    from llama_index.llms.openai_like import OpenAILike

    base, key = stack.apis[0].url + "/v1", stack.keys["acme"]
    question = "Which TCP port does the server listen on by default?"
    # LlamaIndex's OpenAILike with its defaults: model gpt-3.5-turbo on /v1/completions.
    text = OpenAILike(api_base=base, api_key=key, timeout=120).complete(question).text
    assert "5432" in text, text
    message = ChatOpenAI(base_url=base, api_key=key, model="auto+sources", timeout=120).invoke(
        question
    )
    content = str(message.content)
    assert "5432" in content and "\n\nSources:\n[1] " in content, content


def test_open_webuis_request_sequence_replays_against_the_real_stack(stack: Stack) -> None:
    from tests.frontends import load, replay

    with httpx.Client(base_url=stack.apis[0].url, timeout=120) as http:
        models, chat, title = replay(http, load("open-webui"), stack.keys["acme"])
    assert "auto" in models.ids
    assert chat.text.strip(), chat
    assert "vacuum" in [c["doc_id"] for c in chat.final["citations"]], chat.final
    assert title.completion["choices"][0]["message"]["content"]


def test_the_async_client_against_the_real_app(stack: Stack) -> None:
    import asyncio

    from entry.client import AsyncHttpClient

    async def go() -> tuple[Any, ...]:
        async with AsyncHttpClient(stack.apis[0].url, stack.keys["acme"], timeout_s=120) as c:
            accepted = await c.upsert_document("async-notes", "# Notes\n\nBloat is measured.")
            events = [e async for e in c.stream("What does VACUUM reclaim?", route="evidence")]
            result = events[-1].result
            assert result is not None
            logged = await c.wait(result.request_id, timeout_s=30, poll_s=0.25)
            endpoint = await c.register_webhook("http://127.0.0.1:9/hook", ["query.completed"])
            listed = await c.list_webhooks()
            await c.delete_webhook(endpoint.id)
            deleted = await c.delete_document("async-notes")
            return accepted, events, logged, endpoint, listed, deleted

    accepted, events, logged, endpoint, listed, deleted = asyncio.run(go())
    assert accepted.op == "upsert" and deleted.op == "delete"
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["accepted", "queued"] and kinds[-1] == "answer", kinds
    assert logged.status == "answered" and logged.citations
    assert endpoint.secret.startswith("whsec_") and endpoint.id in [e.id for e in listed]


def test_a_stream_left_before_its_answer_cancels_the_generation(stack: Stack) -> None:
    import asyncio

    from entry.client import AsyncHttpClient

    async def go() -> tuple[str, list[str]]:
        async with AsyncHttpClient(stack.apis[0].url, stack.keys["acme"], timeout_s=120) as c:
            kinds: list[str] = []
            rid = ""
            question = "Explain in detail everything VACUUM and autovacuum do. Be thorough."
            async for event in c.stream(question, route="small"):
                kinds.append(event.kind)
                rid = rid or str(event.data.get("request_id", ""))
                if event.kind == "evidence":
                    break  # the client leaves before the LLM answers: the connection closes
            return rid, kinds

    rid, kinds = asyncio.run(go())
    assert kinds[-1] == "evidence", kinds
    with _client(stack, stack.keys["acme"]) as c:
        result = c.wait(rid, timeout_s=60, poll_s=0.25)
    assert result.status == "failed" and result.error is not None, result
    assert result.error.code == "CANCELLED", result.error


def test_a_sync_query_whose_client_left_is_cancelled(stack: Stack) -> None:
    """A sync ``POST /v1/query`` whose client gives up before the answer: the API notices the
    disconnect and cancels the request, so the generation pool stops (its LLM slot is freed)
    and the query log records ``CANCELLED``."""
    question = "Explain in detail everything VACUUM and autovacuum do, step by step (sync, left)."
    body = {"query": question, "route": "small", "mode": "sync", "timeout_s": 60}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{stack.apis[0].url}/v1/query",
            json=body,
            headers={"Authorization": f"Bearer {stack.keys['acme']}"},
            timeout=httpx.Timeout(30, read=1.0),
        )

    def logged() -> Any:
        _, page = get_json(f"{stack.apis[0].url}/v1/queries?limit=50", stack.keys["acme"])
        return next((q for q in page["items"] if q["query"] == question), None)

    rid = wait_for(logged, timeout_s=30, what="the query logged")["request_id"]
    left = wait_for(
        lambda: next(
            (
                float(line.split()[-1])
                for line in httpx.get(f"{stack.apis[0].url}/metrics").text.splitlines()
                if line.startswith("ragstream_api_sync_queries_left_total")
                and float(line.split()[-1]) > 0
            ),
            None,
        ),
        timeout_s=10,
        what="the API counted the client that left",
    )
    assert left >= 1
    with _client(stack, stack.keys["acme"]) as c:
        result = c.wait(rid, timeout_s=120, poll_s=0.25)
    assert result.status == "failed" and result.error is not None, result
    assert result.error.code == "CANCELLED", result.error


def test_tenants_are_isolated(stack: Stack) -> None:
    with _client(stack, stack.keys["acme"]) as c:
        result = c.query("What is the Globex launch code?")
    assert all(cit.doc_id != "launch" for cit in result.citations)
    assert "9931" not in (result.answer or "")
    with _client(stack, stack.keys["globex"]) as c:
        own = c.query("What is the Globex launch code?")
    assert own.citations and own.citations[0].doc_id == "launch"


def test_exact_cache_hit_is_answered_by_the_api_and_still_logged(stack: Stack) -> None:
    question = "Which parameter sets the port the server listens on?"
    with _client(stack, stack.keys["acme"]) as c:
        first = c.query(question)
        assert first.status == "answered" and not first.cached
        # The delivery pool (the cache's one writer) caches an answer as it logs it.
        wait_for(
            lambda: c.get(first.request_id).status == "answered",
            what="first answer logged (and cached) by the delivery pool",
        )
        second = c.query(question)
        assert second.status == "answered" and second.cached
        assert second.answer == first.answer
        assert any(t.stage == "cache" and t.detail.get("at") == "api" for t in second.trace)
        logged = wait_for(
            lambda: (r := c.get(second.request_id)).status == "answered" and r,
            what="cache hit logged by the delivery pool",
        )
    assert logged.cached


def test_two_api_processes_each_get_their_own_answers_and_leak_no_waiter(stack: Stack) -> None:
    import concurrent.futures as cf

    if len(stack.apis) < 2:
        stack.api()
    questions = [f"Which TCP port does the server use by default? (asked {i})" for i in range(6)]

    def ask(i: int) -> tuple[int, str, str]:
        with _client(stack, stack.keys["acme"], i % 2) as c:
            r = c.query(questions[i])
        return i, r.status, r.request_id

    with cf.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(ask, range(6)))
    assert all(status == "answered" for _, status, _ in results), results
    assert len({rid for _, _, rid in results}) == 6
    # A waiter that times out answers 202 pending and leaves nothing registered.
    with _client(stack, stack.keys["acme"], 1) as c:
        late = c.query("What does the autovacuum launcher do? (timeout)", timeout_s=0.05)
    assert late.status == "pending"
    assert stack.apis[0].waiting == 0 and stack.apis[1].waiting == 0
    with _client(stack, stack.keys["acme"]) as c:
        assert c.wait(late.request_id, timeout_s=120).status == "answered"


def test_document_delete_removes_it_from_answers(stack: Stack) -> None:
    url = stack.apis[0].url
    key = stack.keys["acme"]
    _upsert(url, key, "okapi", "# Okapi\n\nThe okapi is the only living relative of the giraffe.")
    wait_for(
        lambda: get_json(f"{url}/v1/documents/okapi", key)[1].get("status") == "indexed",
        timeout_s=120,
        what="okapi indexed",
    )
    with _client(stack, key) as c:
        assert (
            c.query("What is the only living relative of the giraffe?").citations[0].doc_id
            == "okapi"
        )
    r = httpx.delete(f"{url}/v1/documents/okapi", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 202 and r.json()["op"] == "delete"
    gone = wait_for(  # a deleted document is a 404 whose details hold its tombstone
        lambda: (g := get_json(f"{url}/v1/documents/okapi", key))[0] == 404 and g[1],
        timeout_s=120,
        what="okapi deleted",
    )
    assert gone["error"]["details"][0]["status"] == "deleted", gone
    with _client(stack, key) as c:
        after = c.query("What is the only living relative of the giraffe, the okapi?")
    assert all(cit.doc_id != "okapi" for cit in after.citations)


def test_errors_are_typed_json_and_never_5xx(stack: Stack) -> None:
    url = stack.apis[0].url
    key = stack.keys["acme"]
    auth = {"Authorization": f"Bearer {key}"}
    cases = [
        (httpx.post(f"{url}/v1/query", json={"query": "x"}), 401, "UNAUTHENTICATED"),
        (
            httpx.post(
                f"{url}/v1/query", json={"query": "x"}, headers={"Authorization": "Bearer rsk_no"}
            ),
            401,
            "UNAUTHENTICATED",
        ),
        (httpx.post(f"{url}/v1/query", json={"query": ""}, headers=auth), 422, "INVALID_REQUEST"),
        (
            httpx.post(f"{url}/v1/query", json={"query": "x" * 5000}, headers=auth),
            422,
            "INVALID_REQUEST",
        ),
        (
            httpx.post(f"{url}/v1/query", json={"query": "x", "bogus": 1}, headers=auth),
            422,
            "INVALID_REQUEST",
        ),
        (
            httpx.post(
                f"{url}/v1/query",
                content=b"{not json",
                headers={**auth, "content-type": "application/json"},
            ),
            422,
            "INVALID_REQUEST",
        ),
        (
            httpx.post(
                f"{url}/v1/documents",
                content=json.dumps({"doc_id": "big", "text": "x" * 2_000_000}),
                headers={**auth, "content-type": "application/json"},
            ),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            httpx.post(
                f"{url}/v1/query",
                json={"query": "x", "callback_url": "http://169.254.169.254/latest"},
                headers=auth,
            ),
            422,
            "INVALID_REQUEST",
        ),
        (
            httpx.post(f"{url}/v1/ingest/jobs", json={"paths": ["/etc"]}, headers=auth),
            422,
            "INVALID_REQUEST",
        ),
        (httpx.get(f"{url}/v1/ingest/jobs/nope", headers=auth), 404, "NOT_FOUND"),
    ]
    for response, status, code in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert response.json()["error"]["code"] == code, response.text


def test_rate_limit_per_key_answers_429_with_retry_after(stack: Stack) -> None:
    key = stack.key(stack.name + "-acme", rate_per_minute=2)
    url = stack.apis[0].url
    if time.time() % 60 > 55:  # a fixed one-minute window: keep the 3 requests inside one
        time.sleep(60 - time.time() % 60 + 0.1)
    codes = []
    for _ in range(3):
        r = httpx.get(f"{url}/v1/queries/none", headers={"Authorization": f"Bearer {key}"})
        codes.append(r.status_code)
    assert codes[:2] == [404, 404] and codes[2] == 429
    assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["code"] == "RATE_LIMITED"


def test_lagging_pools_get_429_with_retry_after(stack: Stack) -> None:
    client = redis.Redis.from_url(stack.settings.redis.url)
    key = f"ragstream:pressure:{stack.settings.kafka.topic_prefix}rerank"  # this stack's only
    member = f"{stack.name}-fake-member"
    lag = stack.settings.api.max_lag * 4
    client.hset(
        key,
        member,
        json.dumps({"lag": lag, "in_flight": 0, "at": time.time()}),
    )
    try:
        time.sleep(0.6)  # the API caches the pressure reading for 0.5 s
        with _client(stack, stack.keys["acme"]) as c, pytest.raises(ApiRequestError) as err:
            c.query("Anything at all?")
        assert err.value.status == 429 and err.value.code == "OVERLOADED"
    finally:
        client.hdel(key, member)
    time.sleep(0.6)
    r = httpx.post(
        f"{stack.apis[0].url}/v1/query",
        json={"query": "What does VACUUM reclaim?", "mode": "async"},
        headers={"Authorization": f"Bearer {stack.keys['acme']}"},
    )
    assert r.status_code == 202


def test_readyz_checks_the_services(stack: Stack) -> None:
    r = httpx.get(f"{stack.apis[0].url}/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    assert Path(stack.settings.database_url.removeprefix("sqlite:///")).exists()


def test_query_cli_prints_answer_citations_and_timings(stack: Stack) -> None:
    import subprocess

    from tests.integration.stack import RAGSTREAM

    run = subprocess.run(
        [RAGSTREAM, "query", "Which TCP port does the server listen on by default?",
         "--tenant", stack.name + "-acme", "--stream"],
        env=stack.env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "5432" in run.stdout
    assert "[1]" in run.stdout and "ports" in run.stdout  # a numbered citation
    assert "retrieval" in run.stdout and "rerank" in run.stdout  # the stage timings
    over_http = subprocess.run(
        [RAGSTREAM, "query", "What does VACUUM reclaim?", "--api", stack.apis[0].url,
         "--api-key", stack.keys["acme"]],
        env=stack.env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert over_http.returncode == 0, over_http.stdout + over_http.stderr
    assert "vacuum" in over_http.stdout
