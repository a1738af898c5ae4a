"""mkdocs hook: add the reference pages generated from the code (tools/docs_reference.py) and the
how-to pages' figures made from their studies' results (tools/docs_figures.py) to the site being
built, so that they cannot drift from the code and are never committed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_figures import figures
from docs_reference import pages
from mkdocs.structure.files import File, Files


def on_files(files: Files, config: Any) -> Files:
    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    for path, png in figures().items():
        files.append(File.generated(config, path, content=png))
    return files
