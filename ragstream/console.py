"""How a command-line failure is reported: one line on stderr and a non-zero exit.

Every expected failure of a ``ragstream`` command (the API down, an empty question, a missing
file, a refused path) goes through :func:`fail`, so a script sees exactly one line on stderr
(never wrapped, whatever the terminal's width) and its exit status; stdout carries only
results. :func:`print_rows` prints tables that stay readable at 80 columns.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

#: Exit status of a usage error (bad argument or option), as click uses it.
USAGE = 2


def one_line(message: str) -> str:
    """``message`` with every run of whitespace (newlines included) as one space."""
    return " ".join(message.split())


def fail(message: str, code: int = 1) -> NoReturn:
    """Write ``error: <message>`` as one line on stderr and exit with ``code``.

    Raises:
        typer.Exit: always, with ``code``.
    """
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()
    raise typer.Exit(code)


def print_rows(
    console: Console,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
) -> None:
    """Print ``rows`` as a table when it fits ``console.width`` with no cell cut, otherwise
    as one block per row: its first cell, then ``header value`` pairs wrapped at spaces.

    Rich squeezes a table wider than the terminal by cutting cells to ``t…`` (off a terminal
    too, where the width is ``$COLUMNS`` or 80), which leaves ids and counts unreadable; the
    block layout never cuts a value.

    Args:
        console: Where to print (its width decides).
        headers: Column headers; the first column holds ids and never wraps.
        rows: Cell strings (Rich markup allowed), one sequence per row, as long as
            ``headers``.
        title: Printed above the table or the blocks.
    """
    table = Table(title=title)
    for n, header in enumerate(headers):
        table.add_column(header, no_wrap=n == 0)
    for row in rows:
        table.add_row(*row)
    unbounded = console.options.update_width(1_000_000)
    if Measurement.get(console, unbounded, table).maximum <= console.width:
        console.print(table)
        return
    if title:
        console.print(title, style="bold")
    for row in rows:
        console.print(Text.from_markup(row[0], style="bold"), overflow="fold")
        pairs = [f"{h} [b]{v}[/b]" for h, v in zip(headers[1:], row[1:], strict=True)]
        console.print(Padding(Text.from_markup(" · ".join(pairs)), (0, 0, 0, 2), expand=False))
