"""``python -m infra``: the same commands as ``ragstream infra``."""

from infra.cli import app

app()
