"""Time one llama.cpp server on a short RAG prompt: prefill and decode rates, latency, RSS.

Usage (a server started with ``ragstream infra llm up --model NAME --port PORT``)::

    python bench/llm_models.py --port 8082 --runs 3

The prompt is a question with six short quoted evidence sentences, each cited ``[n]``, asking
for a one-sentence answer (~350 prompt tokens with Qwen's ChatML). Each run sends it with
``cache_prompt: false`` (no KV reuse between runs), ``max_tokens`` 30 and ``ignore_eos`` (so
every run decodes exactly 30 tokens), temperature 0. Rates are llama.cpp's own ``timings``;
latency is the client's wall clock for the whole request. RSS is the server process's
``VmRSS`` after the runs; the model load time is the ``load N s`` line of its log.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

SYSTEM = (
    "You answer questions about software documentation. Use only the numbered evidence. "
    "Answer in one sentence and cite the evidence you used as [n]. If the evidence does not "
    "contain the answer, say so. Do not add facts that are not in the evidence, and keep "
    "setting names, commands and numbers exactly as they are written there."
)
EVIDENCE = (
    "max_connections (integer): Determines the maximum number of concurrent connections to "
    "the database server. The default is typically 100 connections, but might be less if your "
    "kernel settings will not support it (as determined during initdb).",
    "superuser_reserved_connections (integer): Determines the number of connection slots that "
    "are reserved for connections by PostgreSQL superusers; the default value is three "
    "connections, and it must be less than max_connections minus reserved_connections.",
    "This parameter can only be set at server start, and changing it requires a restart of "
    "the server before the new value takes effect for any new session.",
    "When running a standby server, you must set max_connections to the same or higher value "
    "than on the primary server, otherwise queries will not be allowed in the standby server.",
    "Increasing max_connections costs shared memory for each allowed connection, so the kernel "
    "limits on shared memory and semaphores may need to be raised as well (see Section 19.4).",
    "reserved_connections (integer): Determines the number of connection slots reserved for "
    "roles with the privileges of pg_use_reserved_connections, so that they can still connect "
    "when all other slots are in use.",
)
QUESTION = "Which PostgreSQL setting limits the number of concurrent connections to the server?"


def user_message() -> str:
    """The question and the quoted, numbered evidence."""
    lines = [f'[{n}] "{text}"' for n, text in enumerate(EVIDENCE, start=1)]
    return "Evidence:\n" + "\n".join(lines) + f"\n\nQuestion: {QUESTION}\nAnswer in one sentence."


def run_once(client: httpx.Client, url: str, style: str, max_tokens: int) -> dict[str, Any]:
    """Send the prompt once; return tokens, llama.cpp's rates and the wall-clock latency."""
    common = {
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    started = time.perf_counter()
    if style == "chat":
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": user_message()},
        ]
        response = client.post(f"{url}/v1/chat/completions", json={"messages": messages, **common})
    else:
        prompt = f"{SYSTEM}\n\n{user_message()}\nAnswer:"
        response = client.post(f"{url}/v1/completions", json={"prompt": prompt, **common})
    latency_s = time.perf_counter() - started
    response.raise_for_status()
    body = response.json()
    timings = body["timings"]
    choice = body["choices"][0]
    text = choice["message"]["content"] if style == "chat" else choice["text"]
    return {
        "prompt_tokens": timings["prompt_n"],
        "completion_tokens": timings["predicted_n"],
        "prompt_tok_s": round(timings["prompt_per_second"], 1),
        "decode_tok_s": round(timings["predicted_per_second"], 1),
        "latency_s": round(latency_s, 2),
        "text": text,
    }


def rss_mb(pid_file: Path) -> float | None:
    """``VmRSS`` of the process named in ``pid_file``, MB; ``None`` when unknown."""
    try:
        pid = int(pid_file.read_text().strip())
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, ValueError):
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return round(int(match.group(1)) / 1024, 0) if match else None


def load_s(log_file: Path) -> float | None:
    """The last ``load N s`` the server logged."""
    try:
        found = re.findall(r"\(load ([\d.]+)s\)", log_file.read_text(errors="replace"))
    except OSError:
        return None
    return float(found[-1]) if found else None


def main() -> None:
    """Parse arguments, run, print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--style", choices=("chat", "completion"), default="chat")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=30)
    parser.add_argument("--local-dir", type=Path, default=Path(".local"))
    args = parser.parse_args()
    url = f"http://{args.host}:{args.port}"
    home = args.local_dir / f"llm-{args.port}"
    with httpx.Client(timeout=600.0) as client:
        model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
        runs = [run_once(client, url, args.style, args.max_tokens) for _ in range(args.runs)]
    summary = {
        "model_file": Path(model).name,
        "port": args.port,
        "style": args.style,
        "load_s": load_s(home / "logs" / "llm.log"),
        "rss_mb": rss_mb(home / "run" / "llm.pid"),
        "median": {
            key: statistics.median(r[key] for r in runs)
            for key in ("prompt_tokens", "prompt_tok_s", "decode_tok_s", "latency_s")
        },
        "runs": runs,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
