"""Output of ``ragstream bench query``: a rich table, Markdown, and a PNG of latency against
offered rate (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

MODE_TITLES = {
    "retrieval": "retrieval + rerank + evidence, routed to the small LLM tier (no generation)",
    "full": "full generation (small LLM tier)",
    "evidence": "evidence tier (no LLM)",
}


def _trio(d: dict[str, float]) -> str:
    if not d:
        return "-"
    return "/".join(f"{d[k]:.0f}" for k in ("p50", "p95", "p99"))


def _batches(means: dict[str, float | None]) -> str:
    return " ".join(f"{pool}={m:g}" for pool, m in means.items() if m is not None) or "-"


def rate_rows(mode: dict[str, Any]) -> list[list[str]]:
    """One row of strings per measured rate of a mode's JSON."""
    rows = []
    for r in mode["rates"]:
        parts = [f"{k} {v}" for k, v in r["errors"].items()]
        parts += [f"lost {r['lost']}"] if r["lost"] else []
        errors = f"{100 * r['error_rate']:.1f}%" + (f" ({', '.join(parts)})" if parts else "")
        rows.append([
            f"{r['offered_per_s']:g}", f"{r['ok']}/{r['sent']}", f"{r['achieved_per_s']:g}",
            _trio(r["end_to_end_ms"]), _trio(r["ttft_ms"]), errors, _batches(r["batch_mean"]),
            _cpu(r.get("cpu_busy_cores"), r.get("core_ms_per_request")),
            _num(r.get("process_core_ms_per_request")),
            "yes" if r["met_slo"] else "no",
        ])  # fmt: skip
    return rows


HEADER = ["offered/s", "ok/sent", "achieved/s", "e2e p50/p95/p99 ms", "TTFT p50/p95/p99 ms",
          "errors", "mean batch", "machine: busy cores, core-ms/req",
          "serving processes: core-ms/req", "meets SLO"]  # fmt: skip


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _cpu(cores: float | None, per_request: float | None) -> str:
    return "-" if cores is None else f"{cores:g}, {per_request if per_request is not None else '-'}"


def render_table(mode: dict[str, Any]) -> Table:
    """A rich table of one mode's rates."""
    table = Table(title=f"query: {MODE_TITLES.get(mode['mode'], mode['mode'])}")
    for col in HEADER:
        table.add_column(col)
    for row in rate_rows(mode):
        table.add_row(*row)
    return table


def _stage_lines(mode: dict[str, Any]) -> list[str]:
    lines = ["", "| offered/s | stage | wait p50/p95/p99 ms | service p50/p95/p99 ms |",
             "|---|---|---|---|"]  # fmt: skip
    for r in mode["rates"]:
        for stage, d in r["stages"].items():
            lines.append(
                f"| {r['offered_per_s']:g} | {stage} | {_trio(d['wait_ms'])} "
                f"| {_trio(d['service_ms'])} |"
            )
        lines.append(f"| {r['offered_per_s']:g} | delivery | {_trio(r['delivery_ms'])} | - |")
    return lines


def _floor_lines(mode: dict[str, Any]) -> list[str]:
    floor = mode.get("floor")
    if not floor:
        return []
    lines = ["", f"Floor: each stage alone, in one process, {floor['calls']} calls a stage"
             + (f" ({floor['llm_calls']} of the LLM)" if floor.get("llm_calls") else "")
             + "; core-ms = this process + the services it calls, less their idle background.",
             "", "| stage | wall ms | core-ms | by process | without idle subtraction "
             "| machine core-ms |", "|---|---|---|---|---|---|"]  # fmt: skip
    for st in floor["stages"]:
        by = " ".join(f"{k}={v:g}" for k, v in st["by_process"].items() if v)
        lines.append(
            f"| {st['stage']} | {st['wall_ms']:g} | {st['core_ms']:g} | {by or '-'} "
            f"| {_num(st.get('raw_core_ms'))} | {_num(st['machine_core_ms'])} |"
        )
    lines.append(
        f"| **floor** | | **{floor['core_ms']:g}** | | {_num(floor.get('raw_core_ms'))} "
        f"| {_num(floor['machine_core_ms'])} |"
    )
    return lines


def ratio_to_floor(mode: dict[str, Any]) -> float | None:
    """The serving processes' core-ms per request at the mode's operating point over its floor
    (the stages alone, measured in the same run), to 2 decimals; ``None`` without either
    (issue 26's target for the evidence tier: <= 1.3)."""
    core = (mode.get("operating_point") or {}).get("core_ms_per_request")
    floor = (mode.get("floor") or {}).get("core_ms")
    if core is None or not floor:
        return None
    return round(float(core) / float(floor), 2)


def cost_sentence(mode: dict[str, Any]) -> str:
    """The mode's core-ms per request at its operating point beside its floor and their ratio,
    as a sentence (empty for results without a floor)."""
    op, floor = mode.get("operating_point") or {}, mode.get("floor")
    if not floor:
        return ""
    b = mode["baseline"]
    ratio = ratio_to_floor(mode)
    at = (
        f"**{_num(op.get('core_ms_per_request'))}** core-ms per request at "
        f"{op['at_offered_per_s']:g}/s ({'meets' if op['met_slo'] else 'misses'} the SLO; "
        f"machine-wide {_num(op.get('machine_core_ms_per_request'))})"
        if op
        else "no rate measured"
    )
    return (
        f"Serving processes: {at}, beside a floor of **{floor['core_ms']:g}** core-ms (the "
        f"stages alone)"
        + (f": **{ratio:g}x** the floor" if ratio is not None else "")
        + f"; sequential baseline {_num(b.get('process_core_ms_per_request'))} "
        f"(machine-wide {_num(b.get('core_ms_per_request'))})."
    )


def render_markdown(payload: dict[str, Any]) -> str:
    """The whole run as Markdown: settings, then per mode the baseline, the floor, the rates,
    the maximum sustainable rate (the evidence tier's searched one), the CPU per request
    beside the floor, and the per-stage breakdown."""
    lines = [f"# Query load benchmark ({payload['at']})", "", f"Machine: {payload['machine']}", ""]
    lines += [f"- {k}: {v}" for k, v in payload["setup"].items()]
    for mode in payload["modes"]:
        b = mode["baseline"]
        lines += [
            "",
            f"## {MODE_TITLES.get(mode['mode'], mode['mode'])}",
            "",
            f"SLO: p99 end to end <= {mode['slo']['p99_ms']:g} ms, errors < "
            f"{100 * mode['slo']['max_error_rate']:g}%. Maximum sustainable rate: "
            f"**{mode['max_sustainable_per_s']:g}/s**; sequential baseline "
            f"{b['throughput_per_s']:g}/s (p50 {b['latency_ms'].get('p50', 0):g} ms, "
            f"{b['requests']} requests; machine CPU busy "
            f"{_cpu(b.get('cpu_busy_cores'), b.get('core_ms_per_request'))} core-ms/request); "
            f"ratio {mode['speedup_vs_sequential']}x (reported, no target).",
        ]
        if mode.get("plan", {}).get("search"):
            lines += [
                "",
                f"Sustainable rate at p99 <= {mode['slo']['p99_ms']:g} ms (step then bisect, "
                f"{len(mode['rates'])} rates): **{mode['sustainable_per_s']:g}/s**.",
            ]
        cost = cost_sentence(mode)
        lines += ["", cost] if cost else []
        lines += _floor_lines(mode)
        lines += [
            "",
            "| " + " | ".join(HEADER) + " |",
            "|" + "---|" * len(HEADER),
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rate_rows(mode)]
        lines += _stage_lines(mode)
    api = payload.get("api_exact_cache_hit", {})
    lines += ["", "## Exact-cache hit through the API", "", str(api.get("note", api))]
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], out: Path) -> None:
    """Save a PNG: per mode, p50/p95/p99 end-to-end latency (log scale) against offered
    rate, the SLO line, the maximum sustainable rate and the baseline throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = payload["modes"]
    fig, axes = plt.subplots(1, max(1, len(modes)), figsize=(6.5 * max(1, len(modes)), 4.5))
    axes = [axes] if len(modes) <= 1 else list(axes)
    for ax, mode in zip(axes, modes, strict=False):
        # sorted: a searched mode measures its rates out of order
        rates = sorted(
            (r for r in mode["rates"] if r["end_to_end_ms"]), key=lambda r: r["offered_per_s"]
        )
        x = [r["offered_per_s"] for r in rates]
        for q, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
            ax.plot(x, [r["end_to_end_ms"][q] for r in rates], style, label=q)
        ax.axhline(mode["slo"]["p99_ms"], color="red", lw=0.8, label="p99 target")
        ax.axvline(mode["baseline"]["throughput_per_s"], color="grey", ls="--", lw=0.8,
                   label="sequential baseline max")  # fmt: skip
        if mode["max_sustainable_per_s"]:
            ax.axvline(mode["max_sustainable_per_s"], color="green", lw=0.8,
                       label="max sustainable")  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (requests/s, Poisson)")
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title(MODE_TITLES.get(mode["mode"], mode["mode"]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
