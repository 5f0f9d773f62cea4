"""vLLM as the small tier's server (issue 40): `vllm serve` on the CPU behind the same
OpenAI-compatible backend as llama.cpp, end to end through the API.

Installs nothing: it runs only where `make vllm` (ragstream infra llm install --server vllm) built
the vLLM venv and converted Gemma 3 270M, and is skipped with the reason otherwise (CI has no
vLLM venv). It starts its own vLLM server on a free port (its PID file and log under the test's
temporary folder, so a server `infra llm up --server vllm` started is never touched), points
only generation-small at it by settings (base URL, served model name, context window), and
stops it at the end. vLLM needs ~1-3 min to start on 2 busy cores: the pools start meanwhile.
Besides vLLM's own `/metrics`, the generation-small pool serves its Prometheus metrics on a free
port, and its LLM request and token counters for the small tier must move.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from entry.client import HttpClient
from infra.service import ServiceStatus
from infra.vllm_install import model_converted, venv_installed
from infra.vllm_service import VllmService
from ragstream.settings import Settings
from tests.integration.stack import Stack, free_port, get_json, make_stack, wait_for

MODEL = "gemma3-270m"
DOCS = {
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "vacuum": "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples.",
}


def _why_not() -> str | None:
    settings = Settings()
    if not venv_installed(settings):
        return "no vLLM venv (run `make vllm` to install it)"
    if not model_converted(settings, MODEL):
        return f"{MODEL} not converted for vLLM (ragstream infra llm install --server vllm)"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def _metric(text: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples whose labels include ``labels`` (0 when absent)."""
    pattern = rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? ([0-9.e+-]+)$"
    wanted = {f'{k}="{v}"' for k, v in labels.items()}
    return sum(
        float(value)
        for found, value in re.findall(pattern, text, flags=re.MULTILINE)
        if wanted <= set(found.split(","))
    )


@pytest.fixture(scope="module")
def vllm_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str, str]]:
    tmp = tmp_path_factory.mktemp("vllm")
    base = Settings()
    vllm = base.vllm.model_copy(update={"port": free_port(), "model": MODEL})
    service = VllmService(base.model_copy(update={"vllm": vllm}), home=tmp / "vllm")
    started: list[ServiceStatus | BaseException] = []

    def start() -> None:
        try:
            started.append(service.ensure_up())
        except BaseException as exc:  # handed to the test thread below
            started.append(exc)

    starter = threading.Thread(target=start, daemon=True)
    starter.start()  # vLLM compiles for minutes; the pools start meanwhile
    pool_metrics_port = free_port()  # generation-small serves its own /metrics here
    stack = make_stack(
        tmp,
        "vllm",
        RAGSTREAM_EVIDENCE__TIER_MODE="llm",
        RAGSTREAM_GENERATION__SMALL__BASE_URL=vllm.base_url,
        RAGSTREAM_GENERATION__SMALL__MODEL=MODEL,
        RAGSTREAM_GENERATION__SMALL__N_CTX_PER_SLOT=str(vllm.max_model_len),
        # The stream asks the sync question again: it must be generated again, not cached.
        RAGSTREAM_CACHE__ENABLED="false",
        RAGSTREAM_POOLS__GENERATION_SMALL__METRICS_PORT=str(pool_metrics_port),
    )
    try:
        stack.start_pools(("ingest", "retrieval", "rerank", "generation-small", "delivery"))
        stack.wait_ready()
        stack.api()
        # No rate limit: Redis counts requests per key id (1 in every fresh store), so another
        # stack's or the demo's key 1 on this machine would count against this test's.
        stack.keys["acme"] = stack.key(stack.name + "-acme", rate_per_minute=0)
        url, key = stack.apis[0].url, stack.keys["acme"]
        for doc_id, text in DOCS.items():
            r = httpx.post(
                f"{url}/v1/documents",
                json={"doc_id": doc_id, "text": text, "content_type": "text/markdown"},
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            assert r.status_code == 202, r.text
        for doc_id in DOCS:
            wait_for(
                lambda d=doc_id: (
                    get_json(f"{url}/v1/documents/{d}", key)[1].get("status") == "indexed"
                ),
                timeout_s=120,
                what=f"document {doc_id} indexed",
            )
        starter.join(timeout=vllm.start_timeout_s)
        assert started, "vLLM did not start in time"
        if isinstance(started[0], BaseException):
            raise started[0]
        assert started[0].healthy, started[0]
        yield stack, vllm.base_url, f"http://127.0.0.1:{pool_metrics_port}/metrics"
    finally:
        stack.close()
        starter.join(timeout=vllm.start_timeout_s)
        service.stop()


def test_route_small_is_answered_by_vllm_and_streams_tokens(
    vllm_stack: tuple[Stack, str, str],
) -> None:
    stack, vllm_url, pool_metrics_url = vllm_stack
    before = httpx.get(f"{vllm_url}/metrics", timeout=10).text
    pool_before = httpx.get(pool_metrics_url, timeout=10).text
    question = "Which TCP port does the server listen on by default?"
    with HttpClient(stack.apis[0].url, stack.keys["acme"], timeout_s=180) as c:
        result = c.query(question, route="small")
        # Temperature 0: the same completion again, now over SSE.
        events = list(c.stream(question, route="small"))
    assert result.status == "answered", result
    assert result.tier == "small" and result.answer, result
    assert result.citations and result.citations[0].doc_id == "ports"
    generation = [t for t in result.trace if t.stage.startswith("generation")]
    assert generation, result.trace
    # The model's own completion was published (not replaced by the evidence answer).
    assert generation[0].detail.get("outcome") == "llm", generation[0].detail
    kinds = [e.kind for e in events]
    final = events[-1].result
    assert kinds[:3] == ["accepted", "queued", "evidence"] and kinds[-1] == "answer", kinds
    assert final is not None and final.status == "answered" and final.tier == "small", final
    stage = next(t for t in final.trace if t.stage.startswith("generation"))
    assert stage.detail.get("outcome") == "llm" and float(stage.detail["ttft_ms"]) > 0, stage
    # The completion reaches the stream as tokens, or (an answer with no sentence end, such as
    # Gemma's "5432": the token sink shows whole sentences) as the `replace` text before the
    # answer, as docs/http-api.md defines it; either way the stream spells the recorded answer.
    streamed = "".join(str(e.data["text"]) for e in events if e.kind == "token")
    replaced = [str(e.data["text"]) for e in events if e.kind == "replace"]
    shown = replaced[-1] if replaced else streamed
    assert final.answer and shown.strip() == final.answer.strip(), (kinds, shown, final.answer)

    # vLLM's own metrics saw both generations, and expose the KV cache and its prefix cache.
    after = httpx.get(f"{vllm_url}/metrics", timeout=10).text
    done = _metric(after, "vllm:request_success_total") - _metric(
        before, "vllm:request_success_total"
    )
    assert done >= 2, done
    assert _metric(after, "vllm:generation_tokens_total") > _metric(
        before, "vllm:generation_tokens_total"
    )
    assert "vllm:kv_cache_usage_perc" in after
    assert _metric(after, "vllm:prefix_cache_queries_total") > 0

    # The generation pool's own metrics count both generations as the small tier's, with the
    # tokens vLLM reported: the pool saw vLLM as just another OpenAI-compatible server.
    pool_after = httpx.get(pool_metrics_url, timeout=10).text
    ok = {"tier": "small", "outcome": "ok"}
    requests = _metric(pool_after, "ragstream_llm_requests_total", **ok) - _metric(
        pool_before, "ragstream_llm_requests_total", **ok
    )
    assert requests >= 2, (requests, pool_after)
    completion = {"tier": "small", "kind": "completion"}
    tokens = _metric(pool_after, "ragstream_llm_tokens_total", **completion) - _metric(
        pool_before, "ragstream_llm_tokens_total", **completion
    )
    assert tokens > 0, (tokens, pool_after)


def test_health_and_models_answer_like_the_gpu_probes_expect(
    vllm_stack: tuple[Stack, str, str],
) -> None:
    _, vllm_url, _ = vllm_stack
    assert httpx.get(f"{vllm_url}/health", timeout=10).status_code == 200
    models = httpx.get(f"{vllm_url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert Path(models["data"][0]["root"]).name == MODEL
