"""Every output format of a results document, in one registry: ``cachemark report -f <name>``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UserError
from ..results import ResultsDocument
from .export import to_csv, to_json, to_markdown
from .html import render_html

# name -> (render(document, baseline), takes a --baseline)
_FORMATS: dict[str, tuple[Callable[[dict[str, Any] | ResultsDocument, str | None], str], bool]] = {
    "markdown": (lambda document, baseline: to_markdown(document, baseline), True),
    "csv": (lambda document, baseline: to_csv(document), False),
    "json": (lambda document, baseline: to_json(document), False),
    "html": (lambda document, baseline: render_html(document, baseline=baseline), True),
}
FORMATS = tuple(_FORMATS)


def render(document: dict[str, Any] | ResultsDocument, fmt: str, baseline: str | None = None) -> str:
    """The document in ``fmt`` (markdown, csv, json, html)."""
    if fmt not in _FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    write, takes_baseline = _FORMATS[fmt]
    if baseline is not None and not takes_baseline:
        raise UserError("--baseline applies to the markdown and html formats")
    return write(document, baseline)
