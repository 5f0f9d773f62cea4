"""``ragstream bench ...``: the benchmarks (numbers, never timed tests).

``bus`` (:mod:`bench.bus`), ``ingest`` (:mod:`bench.ingest`), ``query`` (:mod:`bench.query.run`),
``api`` (an exact-cache hit through a running gateway) and ``summary`` (:mod:`bench.summary`,
the summary ``make bench`` writes). ``ragstream eval`` is :mod:`bench.evaluation.cli`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from bench.query.plans import DEFAULT_PLANS, EVIDENCE, FULL, MODES, RETRIEVAL, parse_rates

RATES_HELP = (
    "Offered rates of {mode} mode: requests/s (5,10,20) or multiples of the measured "
    "sequential baseline (x0.5,x1,x2)."
)


bench_app = typer.Typer(help="Benchmarks that print numbers (never timed tests).")
console = Console(width=160)


@bench_app.command("bus")
def bus(
    rates: str = typer.Option("50,200,500,1000", help="Comma-separated offered rates, events/s."),
    seconds: float = typer.Option(5.0, help="Seconds per offered rate."),
    burst: int = typer.Option(5000, help="Events in the max-throughput burst."),
    max_batch: int = typer.Option(64, help="max_batch of the batched mode."),
    out: Path = typer.Option(Path(".local/bench/bus.json"), help="Where to write the JSON."),
) -> None:
    """Benchmark the event bus runtime; print a table and write JSON."""
    from bench.bus import render_table as render_bus_table
    from bench.bus import run_bus_bench
    from ragstream.settings import get_settings

    settings = get_settings()
    results = run_bus_bench(
        settings, [float(r) for r in rates.split(",") if r], seconds, burst, max_batch
    )
    console.print(render_bus_table(results))
    out.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "bench": "bus",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": [asdict(r) for r in results],
    }
    out.write_text(json.dumps(payload, indent=2))
    console.print(f"wrote {out}")


@bench_app.command("ingest")
def ingest(
    docs: int = typer.Option(
        120, min=0, help="Pages in the sample, spread evenly over both manuals (0: every page)."
    ),
    naive: bool = typer.Option(False, help="Also time (d), one document at a time."),
    out: Path = typer.Option(Path(".local/bench/ingest.json"), help="Where to write the JSON."),
) -> None:
    """Benchmark the write path in one run: (a) the configured model's raw encode rate on the
    sample's chunks vs (b) the Kafka stream path and (c) a Celery bulk job, each on a private
    index with an empty embedding cache; unchanged and edited re-ingests."""
    from bench.ingest import render, run_ingest_bench, write_json
    from ragstream.settings import get_settings

    results, facts = run_ingest_bench(get_settings(), docs, naive=naive)
    console.print(render(results, facts))
    write_json(results, out, facts)
    console.print(f"wrote {out}")


@bench_app.command("encoder")
def encoder(
    docs: int = typer.Option(60, min=1, help="Pages in the sample, spread over both manuals."),
    texts: int = typer.Option(128, min=1, help="Texts per token-length bucket."),
    repeat: int = typer.Option(2, min=1, help="Runs of each batch order; the best counts."),
    out: Path | None = typer.Option(None, help="JSON path (default .local/bench/encoder.json)."),
) -> None:
    """The embedding model's rate per token-length bucket, and the write path's chunk + entry
    mix batched by characters against by tokens (bench/encoder.py)."""
    from bench.encoder import encoder_command

    encoder_command(docs, texts, repeat, out)


@bench_app.command("es-cost")
def es_cost(
    questions: list[Path] = typer.Argument(
        None, help="Question sets (JSONL with 'question'); default: the evaluation's dev sets."
    ),
    limit: int = typer.Option(200, min=1, help="Questions at most."),
    copies: str = typer.Option(
        "",
        help="Also copies of the index with these vector index types, comma-separated "
        "(hnsw,int8_hnsw,bbq_hnsw; hnsw: today's type, the control), each copied by scroll and "
        "bulk, merged to one segment, measured, then deleted.",
    ),
    repeat: int = typer.Option(
        3, min=1, help="Passes over the variants, in turn; each figure is the passes' median."
    ),
    out: Path = typer.Option(Path(".local/bench/es_cost.json"), help="JSON result."),
) -> None:
    """Where Elasticsearch's share of an answer goes: the profile API's phases of the pool's
    two searches per question, and each search's cost (Elasticsearch's CPU, the client's,
    wall) today and with one thing changed (bench/query/es_cost.py)."""
    from bench.query.es_cost import es_cost_command, render

    files = questions or sorted(Path("bench/evaluation").glob("questions.*.jsonl"))
    kinds = [c.strip() for c in copies.split(",") if c.strip()]
    payload = es_cost_command(files, limit, out, kinds, repeat)
    for table in render(payload):
        console.print(table)
    console.print(f"wrote {out}")


@bench_app.command("query-embed")
def query_embed(
    questions: list[Path] = typer.Argument(
        None, help="Question sets (JSONL with 'question'); default: the evaluation's sets."
    ),
    limit: int = typer.Option(300, min=1, help="Questions at most."),
    seconds: float = typer.Option(10.0, min=1.0, help="Seconds of the two-pools run."),
    out: Path = typer.Option(Path(".local/bench/query_embed.json"), help="JSON result."),
) -> None:
    """A question's embedding: per batch size and thread count, two pools at once, and a
    repeated question through the Redis cache (bench/query/query_embed.py)."""
    from bench.query.query_embed import query_embed_command, render

    files = questions or sorted(Path("bench/evaluation").glob("questions.*.jsonl"))
    payload = query_embed_command(files, limit, seconds, out)
    for table in render(payload):
        console.print(table)
    console.print(f"wrote {out}")


@bench_app.command("retrieval-stage")
def retrieval_stage(  # noqa: PLR0917 - typer options
    queries: int = typer.Option(200, min=1, help="Queries timed, one at a time."),
    warmup: int = typer.Option(10, min=0, help="Untimed queries first."),
    tenant: str = typer.Option("default", help="Tenant whose chunks are searched."),
    index_alias: str | None = typer.Option(None, help="Chunk index alias; default: settings."),
    questions: Path | None = typer.Option(None, help="JSONL with a 'question' per line."),
    out: Path = typer.Option(
        Path(".local/bench/retrieval_stage.json"), help="Where to write the JSON."
    ),
) -> None:
    """Time the retrieval stage (query embedding + BM25/kNN _msearch + RRF fusion + the chunks
    before the candidates) for one query at a time on the retrieval pool's components,
    read-only; p50/p95 per stage."""
    from bench.query.questions import load_questions
    from bench.query.run import machine
    from bench.query.stage_latency import measure_retrieval_stage
    from bench.query.stage_latency import render as render_stages
    from ragstream.settings import get_settings

    settings = get_settings()
    if index_alias:
        es = settings.elasticsearch.model_copy(update={"index_alias": index_alias})
        settings = settings.model_copy(update={"elasticsearch": es})
    texts, source = load_questions(questions)
    load_start = round(os.getloadavg()[0], 2)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = measure_retrieval_stage(settings, texts, n=queries, warmup=warmup, tenant=tenant)
    payload: dict[str, Any] = {
        "bench": "retrieval_stage",
        "at": started,
        "machine": machine(),
        "questions": source,
        "load_avg_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        **result,
    }
    console.print(render_stages(payload))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    console.print(f"wrote {out}")


@bench_app.command("rerank")
def rerank(  # noqa: PLR0917 - typer options
    model: Path | None = typer.Option(
        None, help="ONNX rerank model directory; default: rerank.model or rerank.onnx_model."
    ),
    ns: str = typer.Option("10,20,30,50", help="Top-N candidates scored, comma-separated."),
    batch: int = typer.Option(4, min=1, help="Questions a rerank call (the pool's batch)."),
    repeats: int = typer.Option(1, min=1, help="Passes over the questions per N."),
    tenant: str = typer.Option("default", help="Tenant whose chunks are searched."),
    questions: Path | None = typer.Option(None, help="JSONL with a 'question' per line."),
    out: Path = typer.Option(Path(".local/bench/rerank.json"), help="Where to write the JSON."),
) -> None:
    """Core-ms a question of the ONNX cross-encoder over the top N fused candidates of real
    questions, scored in pool-sized batches (bench/query/rerank_cost.py)."""
    from bench.query.questions import load_questions
    from bench.query.rerank_cost import render as render_rerank
    from bench.query.rerank_cost import run as run_rerank
    from bench.query.run import machine
    from ragstream.settings import get_settings
    from workers.rerank.factory import onnx_model_dir, rerank_models_dir

    settings = get_settings()
    model_dir = model or onnx_model_dir(settings.rerank, rerank_models_dir(settings))
    texts, source = load_questions(questions)
    load_start = round(os.getloadavg()[0], 2)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = run_rerank(
        settings,
        model_dir,
        texts,
        ns=[int(n) for n in ns.split(",") if n.strip()],
        batch=batch,
        tenant=tenant,
        repeats=repeats,
    )
    payload: dict[str, Any] = {
        **result,
        "at": started,
        "machine": machine(),
        "questions_file": source,
        "load_avg_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
    }
    console.print(render_rerank(payload))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    console.print(f"wrote {out}")


def parse_replicas(text: str) -> dict[str, int]:
    """``"retrieval=2,rerank=1"`` as ``{"retrieval": 2, "rerank": 1}``.

    Raises:
        typer.BadParameter: an item is not ``POOL=N`` with ``N >= 1``.
    """
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        pool, _, count = item.partition("=")
        if not pool or not count.isdigit() or int(count) < 1:
            raise typer.BadParameter(
                f"expected POOL=N with N >= 1, got {item!r}", param_hint="--replicas"
            )
        out[pool.strip()] = int(count)
    return out


@bench_app.command("query")
def query(
    *,
    modes: str = typer.Option(
        ",".join(MODES), help="Modes to run: retrieval, full (both small LLM tier), evidence."
    ),
    retrieval_rates: str = typer.Option(
        DEFAULT_PLANS[RETRIEVAL].rates_text(), help=RATES_HELP.format(mode="retrieval")
    ),
    full_rates: str = typer.Option(
        DEFAULT_PLANS[FULL].rates_text(), help=RATES_HELP.format(mode="full")
    ),
    retrieval_seconds: float = typer.Option(DEFAULT_PLANS[RETRIEVAL].seconds, help="Per rate."),
    full_seconds: float = typer.Option(DEFAULT_PLANS[FULL].seconds, help="Per rate."),
    retrieval_p99_ms: float = typer.Option(DEFAULT_PLANS[RETRIEVAL].p99_ms, help="SLO p99."),
    full_p99_ms: float = typer.Option(DEFAULT_PLANS[FULL].p99_ms, help="SLO p99."),
    retrieval_baseline_s: float = typer.Option(DEFAULT_PLANS[RETRIEVAL].baseline_s),
    full_baseline_s: float = typer.Option(DEFAULT_PLANS[FULL].baseline_s),
    retrieval_deadline_s: float = typer.Option(
        DEFAULT_PLANS[RETRIEVAL].deadline_s, help="Each request's deadline, s."
    ),
    full_deadline_s: float = typer.Option(
        DEFAULT_PLANS[FULL].deadline_s, help="Each request's deadline, s."
    ),
    evidence_start: str = typer.Option(
        DEFAULT_PLANS[EVIDENCE].rates_text(),
        help="First rate of the evidence tier's search: requests/s (5) or xN of its baseline.",
    ),
    evidence_seconds: float = typer.Option(DEFAULT_PLANS[EVIDENCE].seconds, help="Per rate."),
    evidence_p99_ms: float = typer.Option(DEFAULT_PLANS[EVIDENCE].p99_ms, help="SLO p99."),
    evidence_baseline_s: float = typer.Option(DEFAULT_PLANS[EVIDENCE].baseline_s),
    evidence_deadline_s: float = typer.Option(
        DEFAULT_PLANS[EVIDENCE].deadline_s, help="Each request's deadline, s."
    ),
    evidence_max_steps: int = typer.Option(6, help="Rising steps before the bisection."),
    evidence_bisections: int = typer.Option(3, help="Bisections of the evidence rate search."),
    floor_calls: int = typer.Option(20, help="Calls per stage when the floor is measured."),
    floor_llm_calls: int = typer.Option(3, help="Calls of the LLM stage for the floor."),
    tenant: str = typer.Option("default", help="Tenant whose chunks are searched."),
    index_alias: str | None = typer.Option(None, help="Chunk index alias; default: settings."),
    questions: Path | None = typer.Option(None, help="JSONL with a 'question' per line."),
    redis_db: int = typer.Option(13, help="Redis database the run owns (it is flushed)."),
    stop_after_failures: int = typer.Option(2, help="Stop a mode after N SLO misses in a row."),
    api_url: str | None = typer.Option(None, help="Gateway for the exact-cache probe."),
    api_key: str | None = typer.Option(None, help="API key for the exact-cache probe."),
    replicas: str = typer.Option(
        "", help="Processes per pool, e.g. retrieval=2 (they share its consumer group)."
    ),
    baseline_embed_threads: int = typer.Option(
        0, help="Intra-op threads of the baseline's embedder (0: one per core)."
    ),
    llm_prompt_cache: bool = typer.Option(
        False, help="Let the LLM server reuse cached prompts (repeated questions hit it)."
    ),
    out: Path = typer.Option(Path(".local/bench/query.json"), help="JSON; .md and .png beside."),
) -> None:
    """Open-loop load through the query pools; core-ms per request beside the floor of the
    stages; the evidence tier's sustainable rate; a sequential baseline. JSON, Markdown, PNG."""
    from dataclasses import replace

    from bench.query.report import cost_sentence, plot, render_markdown, render_table
    from bench.query.run import QueryBenchConfig, run_query_bench
    from bench.stats import RateSearch
    from ragstream.settings import get_settings

    def rates(text: str, option: str) -> dict[str, Any]:
        try:
            values, relative = parse_rates(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=option) from exc
        return {"rates": values, "relative": relative}

    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    if not chosen or not set(chosen) <= set(MODES):
        raise typer.BadParameter(f"modes are {', '.join(MODES)}", param_hint="--modes")
    start = rates(evidence_start, "--evidence-start")
    if len(start["rates"]) != 1:
        raise typer.BadParameter("one rate to start from", param_hint="--evidence-start")
    try:
        search = RateSearch(1.0, max_steps=evidence_max_steps, bisections=evidence_bisections)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--evidence-max-steps") from exc

    plans = {
        RETRIEVAL: replace(DEFAULT_PLANS[RETRIEVAL], **rates(retrieval_rates, "--retrieval-rates"),
                           seconds=retrieval_seconds, p99_ms=retrieval_p99_ms,
                           baseline_s=retrieval_baseline_s, deadline_s=retrieval_deadline_s),
        FULL: replace(DEFAULT_PLANS[FULL], **rates(full_rates, "--full-rates"),
                      seconds=full_seconds, p99_ms=full_p99_ms, baseline_s=full_baseline_s,
                      deadline_s=full_deadline_s),
        EVIDENCE: replace(DEFAULT_PLANS[EVIDENCE], **start, seconds=evidence_seconds,
                          p99_ms=evidence_p99_ms, baseline_s=evidence_baseline_s,
                          deadline_s=evidence_deadline_s, search=search),
    }  # fmt: skip
    config = QueryBenchConfig(
        plans=tuple(plans[m] for m in chosen),
        tenant=tenant,
        index_alias=index_alias,
        questions=questions,
        redis_db=redis_db,
        stop_after_failures=stop_after_failures,
        api_url=api_url,
        api_key=api_key,
        replicas=parse_replicas(replicas),
        baseline_embed_threads=baseline_embed_threads,
        llm_prompt_cache=llm_prompt_cache,
        floor_calls=floor_calls,
        floor_llm_calls=floor_llm_calls,
    )
    from ragstream.errors import ConfigurationError

    try:
        payload = run_query_bench(get_settings(), config, echo=console.print)
    except (ConfigurationError, RuntimeError) as exc:
        console.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(1) from exc
    for mode in payload["modes"]:
        console.print(render_table(mode))
        console.print(
            f"{mode['mode']}: max sustainable {mode['max_sustainable_per_s']:g}/s "
            f"(below the first miss: {mode['sustainable_per_s']:g}/s), sequential "
            f"baseline {mode['baseline']['throughput_per_s']:g}/s, "
            f"ratio {mode['speedup_vs_sequential']}. {cost_sentence(mode)}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    out.with_suffix(".md").write_text(render_markdown(payload))
    plot(payload, out.with_suffix(".png"))
    console.print(f"wrote {out}, {out.with_suffix('.md')}, {out.with_suffix('.png')}")


@bench_app.command("api")
def api_probe(  # noqa: PLR0917 - typer options
    api_url: str = typer.Option("http://127.0.0.1:8000", help="A running gateway."),
    api_key: str | None = typer.Option(
        None,
        help="An API key to ask with (its rate limit applies; 429s are counted as "
        "rate_limited). Default: a key of --tenant with no rate limit, made in the SQL key "
        "registry of these settings (the gateway's) and revoked when the run ends.",
    ),
    tenant: str = typer.Option("default", help="Tenant of the key made without --api-key."),
    question: str | None = typer.Option(None, help="Default: the first sample question."),
    tiers: str = typer.Option(
        "",
        help="Also time fresh answers of these forced tiers, comma-separated (evidence,small,"
        "large): each question of --questions once, one after the other.",
    ),
    questions: Path | None = typer.Option(
        None, help="Questions (JSONL with 'question') for --tiers; default: the sample set."
    ),
    limit: int = typer.Option(10, help="Questions per tier for --tiers."),
    load: str = typer.Option(
        "",
        help="Also a closed-loop load of fresh evidence-tier answers (no cache can answer) at "
        "these client concurrencies, comma-separated (1,4,8,16): answered/s, p50/p99 and the "
        "machine's core-ms per answer at each.",
    ),
    load_seconds: float = typer.Option(
        20.0, help="Seconds of each --load and --search concurrency."
    ),
    search: bool = typer.Option(
        False,
        "--search",
        help="Also a closed-loop load of POST /v1/search (the same questions and unique "
        "filters as --load) at --search-clients: searches/s, p50/p95/p99 at each.",
    ),
    search_clients: str = typer.Option(
        "1,4,16", help="Client concurrencies of --search, comma-separated."
    ),
    out: Path = typer.Option(Path(".local/bench/api.json"), help="JSON result."),
) -> None:
    """Time an exact answer-cache hit through POST /v1/query of a running gateway (p50 of 50
    repeats after one answered query) and, with ``--tiers``, the end-to-end latency of fresh
    answers per answer tier on a quiet stack; with ``--load`` and ``--search`` closed-loop loads
    of fresh answers and of searches; ``bench summary`` reads DIR/api.json. A 429 of the key's
    rate limit is counted (``rate_limited``) and never stops the run."""
    from bench.query.api_key import bench_key
    from ragstream.settings import get_settings

    with bench_key(get_settings(), tenant, api_key) as key:
        if key.key_id is not None:
            console.print(f"API key {key.key_id} of {tenant}: no rate limit, revoked at the end")
        payload = api_runs(
            api_url, key.key, question=question, tiers=tiers, questions=questions, limit=limit,
            load=load, load_seconds=load_seconds, search=search, search_clients=search_clients,
        )  # fmt: skip
        payload["api_key"] = key.source
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    console.print(f"-> {out}")


def api_runs(
    api_url: str,
    api_key: str,
    *,
    question: str | None,
    tiers: str,
    questions: Path | None,
    limit: int,
    load: str,
    load_seconds: float,
    search: bool,
    search_clients: str,
) -> dict[str, Any]:
    """The measurements of ``bench api`` with ``api_key``, printed as they come; returns the
    JSON payload.

    Raises:
        typer.Exit: the exact-cache probe failed for another reason than the key's rate limit
            (the gateway is down: nothing else could be measured).
    """
    from bench.evaluation.questions import SAMPLE_QUESTIONS
    from bench.query.api_probe import measure_api_load, measure_api_tier_latency
    from bench.query.cpu import stack_processes
    from bench.query.questions import load_questions
    from bench.query.run import machine, probe_exact_cache_hit
    from ragstream.settings import get_settings

    text = question or load_questions(None)[0][0]
    result = probe_exact_cache_hit(api_url, api_key, text)
    if not result["measured"] and "(429)" not in result["note"]:
        console.print(f"[red]error[/red]: {result['note']}")
        raise typer.Exit(1)
    payload: dict[str, Any] = {
        "bench": "api",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "question": text,
        "api_exact_cache_hit": result,
    }
    console.print(f"exact-cache hit through {api_url}: {result.get('latency_ms', result['note'])}")
    if tiers:
        path = questions or SAMPLE_QUESTIONS
        asked = [
            json.loads(line)["question"] for line in path.read_text().splitlines() if line.strip()
        ][:limit]
        payload["tier_latency"] = {}
        for route in [t.strip() for t in tiers.split(",") if t.strip()]:
            found = measure_api_tier_latency(api_url, api_key, asked, route)
            payload["tier_latency"][route] = found
            console.print(f"tier {route}: {found}")
    if load:
        path = questions or SAMPLE_QUESTIONS
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        pool = [json.loads(line)["question"] for line in lines]
        payload["load"] = []
        processes = stack_processes(get_settings())
        for n in [int(c) for c in load.split(",") if c.strip()]:
            found = measure_api_load(
                api_url, api_key, pool, n, seconds=load_seconds, processes=processes
            )
            payload["load"].append(found)
            console.print(
                f"load {n} clients: {found['rate_per_s']}/s answered, p50 {found.get('p50')} "
                f"p99 {found.get('p99')} ms, {found['errors']} errors, {found['rate_limited']} "
                f"rate-limited, {found['cached']} cached, "
                f"{found['machine_core_ms_per_answer']} core-ms an answer (machine), "
                f"{found['stack_core_ms_per_answer']} (the stack's processes)"
            )
            console.print(f"  core-ms an answer by process: {found['core_ms_by_process']}")
            console.print(f"  ms an answer by stage: {found['stage_ms']}")
    if search:
        path = questions or SAMPLE_QUESTIONS
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        concurrencies = [int(c) for c in search_clients.split(",") if c.strip()]
        payload["search_load"] = search_load(
            api_url, api_key, [json.loads(line)["question"] for line in lines], concurrencies,
            load_seconds,
        )  # fmt: skip
    return payload


def search_load(
    api_url: str, api_key: str, pool: list[str], concurrencies: list[int], seconds: float
) -> list[dict[str, Any]]:
    """``bench api --search``: :func:`bench.query.search_load.measure_api_search_load` at each
    concurrency, one after the other, each printed; returns the results in that order."""
    from bench.query.search_load import measure_api_search_load

    found = []
    for n in concurrencies:
        one = measure_api_search_load(api_url, api_key, pool, n, seconds=seconds)
        found.append(one)
        console.print(
            f"search {n} clients: {one['rate_per_s']}/s searched, p50 {one.get('p50')} "
            f"p95 {one.get('p95')} p99 {one.get('p99')} ms, {one['errors']} errors, "
            f"{one['rate_limited']} rate-limited, "
            f"{one['empty']} empty, {one['machine_core_ms_per_search']} core-ms a search "
            "(machine)"
        )
    return found


@bench_app.command("calibrate")
def calibrate(
    no_encoder: bool = typer.Option(False, "--no-encoder", help="Only the CPU loop."),
    out: Path = typer.Option(
        Path(".local/bench/calibration.json"), help="Where to write the JSON."
    ),
) -> None:
    """Measure this machine's calibration (:mod:`bench.calibration`): a fixed pure-Python loop's
    iterations/s and the configured encoder's chunk-size texts/s, each the best of 3."""
    from bench.calibration import measure
    from ragstream.settings import get_settings

    found = measure(get_settings(), encoder=not no_encoder)
    console.print(
        f"cpu loop {found['cpu_loop_per_s']:g} iterations/s; encoder {found['encoder']} "
        f"{found['encoder_texts_per_s']} texts/s ({found['texts']} x {found['words_per_text']} "
        "words)"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=2))
    console.print(f"wrote {out}")


@bench_app.command("summary")
def summary(
    directory: Path = typer.Argument(..., help="Folder the benchmarks wrote their JSON into."),
    latest: Path | None = typer.Option(
        Path("bench/results/latest"), help="Folder to replace with a copy of DIRECTORY."
    ),
) -> None:
    """Write DIRECTORY/summary.json and summary.md from the benchmarks' JSON (make bench)."""
    from bench.summary import render_markdown, write_summary

    console.print(render_markdown(write_summary(directory, latest)))


@bench_app.command("rss")
def rss(
    label: str | None = typer.Option(
        None, help="What the stack just did (after-ingest, after-eval), kept in the JSON."
    ),
    out: Path | None = typer.Option(None, help="Also write the measurement as JSON here."),
) -> None:
    """Print the RSS and PSS of every process of the running stack (each service under
    .local and each Procfile process of the demo's supervisor, with its children) and the
    total; nothing is started or stopped."""
    from bench.rss import measure_stack, payload, render
    from ragstream.settings import get_settings

    document = payload(measure_stack(get_settings().infra.local_dir.resolve()), label)
    if not document["rows"]:
        console.print("no running service or Procfile process found", style="red")
        raise typer.Exit(1)
    Console().print(render(document))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=2))
        Console(stderr=True).print(f"wrote {out}")
