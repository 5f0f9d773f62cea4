"""MkDocs hooks of the documentation site (``hooks:`` in ``mkdocs.yml``).

:func:`on_files` adds the event contracts that ``ragstream topics schemas`` generates from the
topic registry (``topics/schemas/*.json``: one JSON Schema per topic and the AsyncAPI 3.0
document) to the site under ``schemas/``, so the pages link to the files the code writes
rather than to copies that could drift.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

#: Folder of the generated schemas, relative to the repository root (where mkdocs.yml is).
SCHEMAS = Path("topics") / "schemas"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every ``topics/schemas/*.json`` as ``schemas/<name>`` of the site.

    Args:
        files: the site's files so far (the pages and assets of ``docs/``).
        config: the loaded MkDocs configuration; its file's folder is the repository root.

    Returns:
        ``files`` with one generated file per schema.
    """
    root = Path(config.config_file_path).parent
    for path in sorted((root / SCHEMAS).glob("*.json")):
        files.append(File.generated(config, f"schemas/{path.name}", abs_src_path=str(path)))
    return files
