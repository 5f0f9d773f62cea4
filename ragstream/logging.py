"""structlog configuration: key/value events, console or JSON rendering, UTC ISO timestamps."""

from __future__ import annotations

import logging
import sys

import structlog

from ragstream.settings import LoggingSettings


def configure_logging(settings: LoggingSettings) -> None:
    """Configure structlog and the standard library root logger once per process.

    Args:
        settings: level (``DEBUG``..``ERROR``) and format (``console`` or ``json``).
    """
    level = logging.getLevelNamesMapping().get(settings.level.upper(), logging.INFO)
    renderer: structlog.typing.Processor
    if settings.format == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    # Client libraries log every connection at INFO; keep their warnings and errors only.
    for noisy in ("kafka", "elastic_transport", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at write time, not at configure time: a stream
    swapped and closed later (test capture, a CLI runner) must not break every logger."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()
