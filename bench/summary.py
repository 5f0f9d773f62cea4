"""The summary ``make bench`` writes: the key numbers of every benchmark in one place.

``build_summary(dir)`` reads what the benchmarks wrote into ``dir`` (``ingest.json`` of
``ragstream bench ingest``, ``bus.json`` of ``ragstream bench bus``, ``query.json`` of
``ragstream bench query`` and ``eval/eval.json`` of ``ragstream eval --out dir/eval``) and
returns a nested dict whose dotted paths are the issue's keys (``ingest.stream_ratio_to_limit``
is ``summary["ingest"]["stream_ratio_to_limit"]``). A missing input leaves its keys ``None``
and says why under ``notes``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

#: Targets: key -> (comparison, value). The speed-ups over the sequential baseline are still
#: reported but no longer targets: on 2 cores the baseline alone keeps 1.7-2.0 cores busy, so no
#: ratio of 4x (or 2x) is there to win (docs/benchmarks/index.md). In their place the query
#: benchmark reports, per mode, the core-ms per request beside the floor of its stages, and the
#: evidence tier's sustainable rate at p99 <= 1 s; they are measured, not judged against a
#: fixed number, as both depend on the machine.
TARGETS: dict[str, tuple[str, float]] = {
    # Issue 14: both write paths >= 0.9 of the model's raw encode rate in the same run, an
    # unchanged re-ingest <= 2% of a first ingest.
    "ingest.stream_ratio_to_limit": (">=", 0.9),
    "ingest.batch_ratio_to_limit": (">=", 0.9),
    "ingest.unchanged_reingest_time_ratio": ("<=", 0.02),
    # Issue 14: the query side's retrieval stage, one query on a quiet stack.
    "query.retrieval_stage_p50_ms": ("<=", 50.0),
    "bus.hop_p50_ms": ("<=", 5.0),
    # Issue 22: answers a person would write, refusals that hold (shared set; the same targets
    # hold for the dev and held-out sets).
    "eval.answer_accuracy": (">=", 0.7),
    "eval.howto_accuracy": (">=", 0.5),
    "eval.answer_first_rate": (">=", 0.6),
    "eval.factual_words_p50": ("<=", 40.0),
    "eval.absent_refusal_rate": (">=", 0.9),
    "eval.off_topic_refusal_rate": (">=", 0.9),
    "eval.false_refusal_rate": ("<=", 0.05),
    # Issue 35: judged on the latest blind set (``eval-blind``, aggregate only).
    "eval.blind.answer_accuracy": (">=", 0.7),
    "eval.blind.howto_accuracy": (">=", 0.5),
    "eval.blind.answer_first_rate": (">=", 0.6),
    "eval.blind.gap_to_shared": ("<=", 0.05),
    "eval.followup_rate": (">=", 5 / 6),
    # Issue 22: fresh evidence-tier answers end to end through the API, one at a time, on a
    # quiet stack (``api-evidence-shared.json``). ``eval.answer_latency_p50_ms`` is reported
    # beside it: the in-process evaluation answers 16 questions a batch, so it is no per-answer
    # latency through the API.
    "query.api_evidence_p50_ms": ("<=", 150.0),
    # Issue 26: fresh evidence-tier answers through the API at p99 <= 1 s, no cache answering.
    "query.api_sustainable_rate_per_s": (">=", 60.0),
    "query.evidence.ratio_to_floor": ("<=", 1.3),
}
EVAL_KEYS = (
    "hit_at_5",
    "mrr_at_10",
    "answer_accuracy",
    "howto_accuracy",
    "answer_first_rate",
    "factual_words_p50",
    "answer_words_p50",
    "answer_words_p90",
    "absent_refusal_rate",
    "off_topic_refusal_rate",
    "false_refusal_rate",
    "answer_latency_p50_ms",
)


def ingest_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """From ``ingest.json``: (b) stream and (c) Celery chunks/s as a fraction of (a), the
    model's raw encode rate in the same run (``ratio_to_a``), and (e) an unchanged re-ingest's
    time as a fraction of (c)'s full ingest time; where the file has them, (g) the stream
    path's unchanged re-ingest over (b)'s time, the embedding backend and the load average.

    Raises:
        KeyError: a path (b), (c) or (e) is missing from the results.
    """
    by = {r["name"][:3]: r for r in data["results"]}
    b, c, e, g = by["(b)"], by["(c)"], by["(e)"], by.get("(g)")
    return {
        "stream_ratio_to_limit": b["ratio_to_a"],
        "batch_ratio_to_limit": c["ratio_to_a"],
        "unchanged_reingest_time_ratio": round(e["seconds"] / c["seconds"], 4),
        "stream_unchanged_reingest_time_ratio": (
            round(g["seconds"] / b["seconds"], 4) if g else None
        ),
        "limit_chunks_per_s": max(
            r["chunks_per_s"] for r in data["results"] if r["name"].startswith(("(a)", "(a')"))
        ),
        "backend": data.get("backend"),
        "load_avg_1m_start": (data.get("load_avg_1m") or {}).get("start"),
    }


def _low_rate_hops(data: dict[str, Any], mode: str) -> tuple[float, float, float] | None:
    runs = [r for r in data["results"] if r["mode"] == mode and r["offered_per_s"] > 0]
    if not runs:
        return None
    low = min(runs, key=lambda r: r["offered_per_s"])
    return low["hop1_ms"]["p50"], low["hop2_ms"]["p50"], low["offered_per_s"]


def bus_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """From ``bus.json``: the bus overhead per hop, p50 (ms), at the lowest offered rate: the
    larger of hop 1 (produce to the first pool's output) and hop 2 (first pool's output to the
    second's), in the ``greedy`` pipeline (no deliberate batching wait; see
    :func:`bench.bus.run_bus_bench`). The ``batched`` pipeline's hop adds the pools' batching
    wait and is reported beside it (older files without a greedy run fall back to it).

    Raises:
        ValueError: no batched or greedy run at a fixed rate.
    """
    greedy = _low_rate_hops(data, "greedy")
    batched = _low_rate_hops(data, "batched")
    chosen = greedy or batched
    if chosen is None:
        raise ValueError("bus.json has no batched or greedy run at a fixed rate")
    hop1, hop2, rate = chosen
    burst = [r for r in data["results"] if r["mode"] == "batched" and r["offered_per_s"] == 0]
    return {
        "hop_p50_ms": max(hop1, hop2),
        "hop1_p50_ms": hop1,
        "hop2_p50_ms": hop2,
        "hop_mode": "greedy" if greedy else "batched",
        "batched_hop_p50_ms": max(batched[0], batched[1]) if batched else None,
        "at_offered_per_s": rate,
        "batched_max_per_s": burst[0]["achieved_per_s"] if burst else None,
    }


#: Per mode of ``bench query``: ``query.<mode>.<key>``.
MODE_KEYS = (
    "core_ms_per_request",
    "floor_core_ms",
    "ratio_to_floor",
    "machine_core_ms_per_request",
    "sequential_core_ms_per_request",
    "at_offered_per_s",
)
QUERY_MODES = ("retrieval", "full", "evidence")


def mode_cost(mode: dict[str, Any] | None) -> dict[str, Any]:
    """``query.<mode>.*`` of one mode's JSON: the serving processes' core-ms per request at
    its operating point (``core_ms_per_request``, at ``at_offered_per_s``) and the machine's
    (``machine_core_ms_per_request``), the floor (the sum of its stages' costs measured
    alone, ``floor_core_ms``), the first over the second (``ratio_to_floor``) and the
    sequential baseline's core-ms per request; ``None`` where a mode or a number is missing
    (results written before the floor existed)."""
    from bench.query.report import ratio_to_floor

    if not mode:
        return dict.fromkeys(MODE_KEYS)
    op = mode.get("operating_point") or {}
    return {
        "core_ms_per_request": op.get("core_ms_per_request"),
        "floor_core_ms": (mode.get("floor") or {}).get("core_ms"),
        "ratio_to_floor": ratio_to_floor(mode),
        "machine_core_ms_per_request": op.get("machine_core_ms_per_request"),
        "sequential_core_ms_per_request": mode["baseline"].get("process_core_ms_per_request"),
        "at_offered_per_s": op.get("at_offered_per_s"),
    }


def query_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """From ``query.json``: per mode the maximum sustainable rate, the baseline throughput and
    their ratio, and the machine's busy cores during the baseline and its CPU per request
    (the ceiling of any speed-up: what the sequential baseline leaves idle); TTFT p50 at the
    maximum sustainable generation rate; the API exact-cache hit p50 when it was measured;
    the evidence tier's sustainable rate (``evidence_sustainable_rate_per_s``: the highest
    rate with p99 within its SLO below the lowest that missed it); and per mode
    (``query.<mode>.*``, :func:`mode_cost`) the core-ms per request beside the floor."""
    modes = {m["mode"]: m for m in data["modes"]}
    out: dict[str, Any] = {}
    evidence = modes.get("evidence")
    out["evidence_sustainable_rate_per_s"] = evidence.get("sustainable_per_s") if evidence else None
    for mode, name in (("retrieval", "retrieval"), ("full", "generation")):
        m = modes.get(mode)
        out[f"{name}_speedup_vs_sequential"] = m["speedup_vs_sequential"] if m else None
        out[f"{name}_max_sustainable_per_s"] = m["max_sustainable_per_s"] if m else None
        out[f"{name}_sequential_per_s"] = m["baseline"]["throughput_per_s"] if m else None
        base = m["baseline"] if m else {}
        out[f"{name}_sequential_busy_cores"] = base.get("cpu_busy_cores")
        out[f"{name}_sequential_core_ms_per_request"] = base.get("core_ms_per_request")
    full = modes.get("full")
    at_best = [r for r in (full or {}).get("rates", [])
               if r["offered_per_s"] == (full or {}).get("max_sustainable_per_s")]  # fmt: skip
    out["generation_ttft_p50_ms"] = at_best[0]["ttft_ms"].get("p50") if at_best else None
    api = data.get("api_exact_cache_hit", {})
    out["api_exact_cache_hit_p50_ms"] = api["latency_ms"]["p50"] if api.get("measured") else None
    for mode in QUERY_MODES:
        out[mode] = mode_cost(modes.get(mode))
    return out


def retrieval_stage_p50(data: dict[str, Any] | None) -> float | None:
    """From ``retrieval_stage.json`` of ``ragstream bench retrieval-stage``: the p50 (ms) of
    the retrieval stage (embed + ``_msearch`` + fusion + the chunks before) for one query at a
    time; ``None`` without the file."""
    if not data:
        return None
    value = data["stages"]["total"].get("p50")
    return None if value is None else float(value)


def eval_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """From ``eval/eval.json`` of ``ragstream eval --out DIR/eval``: its ``headline`` (hit@5
    and MRR@10 of the default retrieval mode; of the default answer configuration the answer
    accuracy, how-to accuracy, answer-first rate, answer words p50 (factual and all) and p90,
    the refusal rates of absent questions, of the off-topic probes and of answerable
    questions, and the answer latency p50). Keys an older report's headline lacks are left
    out (their targets then read as not measured).

    Raises:
        KeyError: the report has no headline.
    """
    headline = data["headline"]
    return {k: headline[k] for k in EVAL_KEYS if k in headline}


#: Headline numbers of the latest blind set kept as ``eval.blind.<key>``.
BLIND_KEYS = ("answer_accuracy", "howto_accuracy", "answer_first_rate", "absent_refusal_rate")
#: Where the eval reports whose follow-up questions ``eval.followup_rate`` counts are.
FOLLOWUP_DIRS = (
    "eval-blind",
    "eval-blind-2026-12-04b",
    "eval-blind-2026-12-04",
    "eval-dev",
    "eval-newuser",
)


def blind_numbers(directory: Path, shared: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``{"blind": {...}, "followup_rate": x}`` for the summary's ``eval`` section.

    ``blind``: from ``eval-blind/eval.json`` (``ragstream eval BLIND_SET --aggregate-only --out
    DIR/eval-blind``), the latest blind set's :data:`BLIND_KEYS` and ``gap_to_shared``, the
    shared set's accuracy (``shared["answer_accuracy"]``) minus the blind set's.
    ``followup_rate``: the follow-up questions answered right over those of the reports in
    :data:`FOLLOWUP_DIRS` that exist (``None`` without any).
    """
    blind: dict[str, Any] = dict.fromkeys((*BLIND_KEYS, "gap_to_shared"))
    data = _load(directory, "eval-blind/eval.json", notes)
    if data is not None:
        blind.update({k: data["headline"].get(k) for k in BLIND_KEYS})
        acc, ref = blind["answer_accuracy"], shared.get("answer_accuracy")
        blind["gap_to_shared"] = None if acc is None or ref is None else round(ref - acc, 4)
    correct = asked = 0
    for name in FOLLOWUP_DIRS:
        path = directory / name / "eval.json"
        if path.exists():
            kinds = (json.loads(path.read_text(encoding="utf-8")).get("answers") or {}).get(
                "by_kind", {}
            )
            followup = kinds.get("followup") or {}
            correct += int(followup.get("correct") or 0)
            asked += int(followup.get("n") or 0)
    return {"blind": blind, "followup_rate": round(correct / asked, 4) if asked else None}


def _load(directory: Path, filename: str, notes: list[str]) -> dict[str, Any] | None:
    path = directory / filename
    if not path.exists():
        notes.append(f"{filename} missing: its benchmark did not run")
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _value(summary: dict[str, Any], dotted: str) -> Any:
    value: Any = summary
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _flat(prefix: str, values: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of a section, nested dicts (``query.<mode>``) flattened."""
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        if isinstance(value, dict):
            out += _flat(f"{prefix}.{key}", value)
        else:
            out.append((f"{prefix}.{key}", value))
    return out


#: Per LLM server, the evaluation of the small tier served by it: ``ragstream eval
#: ../shared/eval/questions.jsonl --modes hybrid+none --tiers small --aggregate-only --out
#: DIR/<folder>`` with ``generation.small`` pointed at that server (docs/benchmarks/llm-servers.md).
QUALITY_DIRS = {"llamacpp": "eval-small-llamacpp", "vllm": "eval-small-vllm"}


def quality_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """From an ``eval.json`` whose first answer configuration is the ``small`` tier: questions
    ``n`` and ``correct``, ``answer_accuracy`` (``correct / n``), ``crag_score`` (accurate rate
    minus hallucination rate, in ``[-1, 1]``; ``None`` in a report without it) and
    ``answer_latency_p50_ms`` (ms per answer, the in-process evaluation's).

    Raises:
        KeyError: the report has no ``answers.tiers.small.overall``.
    """
    overall = data["answers"]["tiers"]["small"]["overall"]
    return {
        "n": overall["n"],
        "correct": overall["correct"],
        "answer_accuracy": overall["answer_accuracy"],
        "crag_score": overall.get("crag_score"),
        "answer_latency_p50_ms": overall["latency_p50_ms"],
    }


def generation_numbers(directory: Path, notes: list[str]) -> dict[str, Any]:
    """From ``llm_servers.json`` of ``make bench-llm`` (:mod:`bench.llm_servers`): per server
    (``llamacpp``, ``vllm``) and concurrency ``c<N>`` (``_nocache``: prefix caching off), TTFT
    p50/p99 (ms), completion tokens/s, requests/s and RSS (MB), from one run; ``{}`` without it.
    Where :data:`QUALITY_DIRS` holds a server's evaluation, its answer quality on the shared set
    as ``<server>.quality`` (:func:`quality_numbers`)."""
    from bench.llm_servers import summary_numbers

    data = _load(directory, "llm_servers.json", notes)
    out = {} if data is None else summary_numbers(data)
    for server, folder in QUALITY_DIRS.items():
        path = directory / folder / "eval.json"
        if path.exists():
            report = json.loads(path.read_text(encoding="utf-8"))
            out.setdefault(server, {})["quality"] = quality_numbers(report)
    return out


def build_summary(directory: Path) -> dict[str, Any]:
    """The summary of the benchmark results in ``directory`` (see the module docstring)."""
    notes: list[str] = []
    summary: dict[str, Any] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    sections = (
        ("ingest", "ingest.json", ingest_numbers,
         ("stream_ratio_to_limit", "batch_ratio_to_limit", "unchanged_reingest_time_ratio")),
        ("bus", "bus.json", bus_numbers, ("hop_p50_ms",)),
        ("query", "query.json", query_numbers,
         ("evidence_sustainable_rate_per_s", "retrieval_speedup_vs_sequential",
          "generation_speedup_vs_sequential")),
        ("eval", "eval/eval.json", eval_numbers, EVAL_KEYS),
    )  # fmt: skip
    for name, filename, extract, keys in sections:
        data = _load(directory, filename, notes)
        summary[name] = extract(data) if data is not None else dict.fromkeys(keys)
        if name == "query" and data is None:
            summary[name].update({mode: mode_cost(None) for mode in QUERY_MODES})
        if name == "query" and data is not None:
            summary["machine"] = data.get("machine")
    summary["eval"].update(blind_numbers(directory, summary["eval"], notes))
    summary["calibration"] = calibration_of(directory, notes)
    summary["ingest"].update(demo_ingest_numbers(directory, notes))
    stage_path = directory / "retrieval_stage.json"
    stage = json.loads(stage_path.read_text(encoding="utf-8")) if stage_path.exists() else None
    summary["query"]["retrieval_stage_p50_ms"] = retrieval_stage_p50(stage)
    if stage is None:
        notes.append("retrieval_stage.json missing: ragstream bench retrieval-stage did not run")
    api_path = directory / "api.json"
    if summary["query"].get("api_exact_cache_hit_p50_ms") is None and api_path.exists():
        api = json.loads(api_path.read_text(encoding="utf-8")).get("api_exact_cache_hit", {})
        if api.get("measured"):  # `ragstream bench api`, run beside the gateway
            summary["query"]["api_exact_cache_hit_p50_ms"] = api["latency_ms"]["p50"]
    summary["query"].update(api_load_numbers(api_path))
    summary["query"]["api_evidence_p50_ms"] = api_tier_p50(directory / API_TIERS_FILE, "evidence")
    if summary["query"]["api_evidence_p50_ms"] is None:
        notes.append(
            f"query.api_evidence_p50_ms: {API_TIERS_FILE} missing (ragstream bench api --tiers "
            "evidence --questions ../shared/eval/questions.jsonl --limit 30 --out DIR/"
            f"{API_TIERS_FILE}, beside a running gateway)"
        )
    if summary["query"].get("api_exact_cache_hit_p50_ms") is None:
        notes.append(
            "query.api_exact_cache_hit_p50_ms: not measured (needs a running gateway: "
            "ragstream bench api, or bench query --api-url/--api-key)"
        )
    add_es_cost(summary, directory / ES_COST_FILE, notes)
    summary["search"] = search_numbers(api_path, notes)
    summary["generation"] = generation_numbers(directory, notes)
    summary["targets"] = {}
    for key, (op, bound) in TARGETS.items():
        value = _value(summary, key)
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        summary["targets"][key] = {"target": f"{op} {bound:g}", "value": value, "met": met}
    summary["notes"] = notes
    return summary


def calibration_of(directory: Path, notes: list[str]) -> dict[str, Any] | None:
    """``calibration.json`` of ``ragstream bench calibrate`` (:mod:`bench.calibration`), measured
    in the same ``make bench`` run as the figures beside it; ``None``, with a note, without."""
    from bench.calibration import read

    found = read(directory / "calibration.json")
    if found is None:
        notes.append(
            "calibration.json missing: ragstream bench calibrate --out DIR/calibration.json"
        )
    return found


def demo_ingest_numbers(directory: Path, notes: list[str]) -> dict[str, Any]:
    """``ingest.minutes_both_manuals``, ``ingest.entries_per_s`` and the rest of
    :func:`bench.demo_ingest.summary_numbers` from ``demo-ingest.json`` (the record of the
    demo's last full ingest of both manuals, with its run's calibration); ``None`` each, with a
    note, without one."""
    from bench.demo_ingest import SUMMARY_FILE, summary_numbers

    path = directory / SUMMARY_FILE
    record = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    if record is None or not record.get("full"):
        notes.append(
            f"ingest.minutes_both_manuals: {SUMMARY_FILE} missing or not a full ingest (make demo "
            "on an empty index writes .local/demo/ingest-full.json; make bench copies it)"
        )
    return summary_numbers(record)


#: ``ragstream bench es-cost --out DIR/es_cost.json`` (bench/query/es_cost.py).
ES_COST_FILE = "es_cost.json"


def es_cost_numbers(path: Path, notes: list[str]) -> tuple[dict[str, Any], dict[str, float | None]]:
    """From ``ragstream bench es-cost``'s JSON: ``query.es_core_ms_per_answer`` (Elasticsearch's
    core-ms for one question's searches as the pool sends them today, one question per
    ``_msearch``), ``query.es_core_ms_by_variant`` (each lever of the same run, the same
    unit) and, per question set, the kNN search's recall@k against the reference search
    (``{set: recall}``, ``eval.<set>.knn_recall_at_30`` with the default ``knn_k`` 30).
    ``None`` and ``{}``, with a note, without the file."""
    if not path.exists():
        notes.append(
            f"query.es_core_ms_per_answer: {ES_COST_FILE} missing (ragstream bench es-cost "
            f"--out DIR/{ES_COST_FILE}, with Elasticsearch on this machine)"
        )
        return {"es_core_ms_per_answer": None, "es_core_ms_by_variant": None}, {}
    data = json.loads(path.read_text(encoding="utf-8"))
    variants = data.get("variants", {})
    by_variant = {name: v.get("es_core_ms") for name, v in variants.items()}
    numbers = {
        "es_core_ms_per_answer": by_variant.get("today"),
        "es_core_ms_by_variant": by_variant,
    }
    return numbers, dict(data.get("knn_recall_by_set", {}))


def add_es_cost(summary: dict[str, Any], path: Path, notes: list[str]) -> None:
    """:func:`es_cost_numbers` into ``summary``: the ``query`` keys, and each set's recall as
    ``summary["eval"][set]["knn_recall_at_30"]``."""
    numbers, recall = es_cost_numbers(path, notes)
    summary["query"].update(numbers)
    for name, value in recall.items():
        summary["eval"].setdefault(name, {})["knn_recall_at_30"] = value


#: ``ragstream bench api --tiers evidence`` over the shared set, written beside the benchmarks.
API_TIERS_FILE = "api-evidence-shared.json"


def api_tier_p50(path: Path, tier: str) -> float | None:
    """From ``ragstream bench api --tiers``'s JSON: the p50 in ms of ``tier``'s fresh answers
    through the API, or ``None`` when the file or the tier is missing."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    p50 = data.get("tier_latency", {}).get(tier, {}).get("p50")
    return float(p50) if p50 is not None else None


def api_load_numbers(api_path: Path) -> dict[str, Any]:
    """From ``ragstream bench api --load``'s JSON: the highest answered rate of fresh answers
    through the API whose p99 was at most 1 s with no error and no 429 of the key's rate limit
    (``api_sustainable_rate_per_s``: a limited run measured the limiter), its p99 and the
    machine's core-ms per answer there (``api_core_ms_per_answer``), and, where the run split
    them (issue 53), the stack's processes' core-ms per answer there
    (``api_stack_core_ms_per_answer``), by process (``api_core_ms_by_process``) and the mean ms
    of each stage of the answers' traces (``api_stage_ms``); the p50 at one client
    (``api_p50_ms_at_1``); ``None`` each when not measured or never met."""
    keys = ("api_sustainable_rate_per_s", "api_sustainable_p99_ms", "api_core_ms_per_answer",
            "api_stack_core_ms_per_answer", "api_core_ms_by_process", "api_stage_ms")  # fmt: skip
    data = json.loads(api_path.read_text(encoding="utf-8")) if api_path.exists() else {}
    runs = data.get("load", [])
    one: dict[str, Any] = next(
        (r for r in runs if r.get("concurrency") == 1 and r.get("p50") is not None), {}
    )
    met = [r for r in runs if r.get("p99") is not None and r["p99"] <= 1000 and not r["errors"]
           and not r.get("rate_limited")]  # fmt: skip
    if not met:
        return {**dict.fromkeys(keys), "api_p50_ms_at_1": one.get("p50")}
    best = max(met, key=lambda r: r["rate_per_s"])
    values = (best["rate_per_s"], best["p99"], best["machine_core_ms_per_answer"],
              best.get("stack_core_ms_per_answer"), best.get("core_ms_by_process"),
              best.get("stage_ms"))  # fmt: skip
    return {**dict(zip(keys, values, strict=True)), "api_p50_ms_at_1": one.get("p50")}


def search_numbers(api_path: Path, notes: list[str]) -> dict[str, float | None]:
    """The ``search`` section: :func:`api_search_numbers`, with a note when not measured."""
    out = api_search_numbers(api_path)
    if out["api_p50_ms_at_1"] is None:
        notes.append(
            "search.api_*: api.json has no search load at 1 client (ragstream bench api --load "
            "1,4,16 --search, beside a running gateway)"
        )
    return out


def api_search_numbers(api_path: Path) -> dict[str, float | None]:
    """From ``ragstream bench api --search``'s JSON (``search_load``, issue 51): the p50 and
    p99 in ms of ``POST /v1/search`` at one client (``api_p50_ms_at_1``, ``api_p99_ms_at_1``),
    the highest searched rate whose p99 was at most 1 s with no error
    (``api_sustainable_rate_per_s``), its clients, p99 and the machine's core-ms per search
    there; ``None`` each when not measured or never met."""
    keys = ("api_sustainable_rate_per_s", "api_sustainable_clients", "api_sustainable_p99_ms",
            "api_machine_core_ms")  # fmt: skip
    data = json.loads(api_path.read_text(encoding="utf-8")) if api_path.exists() else {}
    runs = data.get("search_load", [])
    ones = (r for r in runs if r.get("concurrency") == 1 and r.get("p50") is not None)
    one: dict[str, Any] = next(ones, {})
    out: dict[str, float | None] = {
        "api_p50_ms_at_1": one.get("p50"),
        "api_p99_ms_at_1": one.get("p99"),
        **dict.fromkeys(keys),
    }
    met = [r for r in runs if r.get("p99") is not None and r["p99"] <= 1000 and not r["errors"]
           and not r.get("rate_limited")]  # fmt: skip
    if met:
        best = max(met, key=lambda r: r["rate_per_s"])
        values = (best["rate_per_s"], best["concurrency"], best["p99"],
                  best["machine_core_ms_per_search"])  # fmt: skip
        out.update(zip(keys, values, strict=True))
    return out


def render_markdown(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (key, value, target, met) and its notes."""
    lines = [f"# Benchmark summary ({summary['at']})", "",
             f"Machine: {summary.get('machine') or 'unknown'}", "",
             f"Calibration: {calibration_line(summary.get('calibration'))}", "",
             "| key | value | target | met |", "|---|---|---|---|"]  # fmt: skip
    for section in ("ingest", "bus", "query", "search", "eval"):
        for dotted, value in _flat(section, summary.get(section) or {}):
            target = summary["targets"].get(dotted, {})
            met = {True: "yes", False: "no"}.get(target.get("met"), "")
            lines.append(f"| `{dotted}` | {value} | {target.get('target', '')} | {met} |")
    lines += [""] + [f"- {n}" for n in summary["notes"]]
    return "\n".join(lines) + "\n"


def calibration_line(calibration: dict[str, Any] | None) -> str:
    """The calibration in words (:mod:`bench.calibration`), or ``not measured``."""
    if not calibration:
        return "not measured"
    encoder = calibration.get("encoder_texts_per_s")
    return (
        f"CPU loop {calibration['cpu_loop_per_s']:.3g} iterations/s, encoder "
        f"{calibration.get('encoder')} {'-' if encoder is None else f'{encoder:g}'} texts/s "
        f"(load {calibration.get('load_avg_1m')}, {calibration.get('at')})"
    )


def write_summary(directory: Path, latest: Path | None) -> dict[str, Any]:
    """Write ``summary.json`` and ``summary.md`` into ``directory``; then make ``latest`` a
    copy of ``directory`` (replacing it). Returns the summary."""
    summary = build_summary(directory)
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (directory / "summary.md").write_text(render_markdown(summary))
    if latest is not None and latest.resolve() != directory.resolve():
        if latest.exists():
            shutil.rmtree(latest)
        shutil.copytree(directory, latest)
    return summary
