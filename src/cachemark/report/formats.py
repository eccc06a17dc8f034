"""Every output format of a results document, in one registry: ``cachemark report -f <name>``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..errors import UserError
from ..results import ResultsDocument
from .export import to_csv, to_json, to_markdown
from .html import html_parts

# name -> (its parts(document, baseline), takes a --baseline)
_FORMATS: dict[str, tuple[Callable[[ResultsDocument, str | None], Iterable[str]], bool]] = {
    "markdown": (lambda document, baseline: [to_markdown(document, baseline)], True),
    "csv": (lambda document, baseline: [to_csv(document)], False),
    "json": (lambda document, baseline: [to_json(document)], False),
    "html": (lambda document, baseline: html_parts(document, baseline=baseline), True),
}
FORMATS = tuple(_FORMATS)
# ``-o x.md`` writes Markdown, for every command that writes a report (a .json is the summary JSON for
# ``report``, the results themselves for ``run``); ``report`` without -o writes beside the results
FORMAT_BY_SUFFIX = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".csv": "csv",
                    ".json": "json"}
BESIDE_RESULTS = {"html": ".html", "markdown": ".md", "csv": ".csv", "json": ".summary.json"}


def render_parts(document: ResultsDocument, fmt: str, baseline: str | None = None) -> Iterable[str]:
    """The document in ``fmt`` (markdown, csv, json, html) as texts to write one after another: an
    HTML page is made part by part, so a large one is never whole in memory."""
    if fmt not in _FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    write, takes_baseline = _FORMATS[fmt]
    if baseline is not None and not takes_baseline:
        raise UserError("--baseline applies to the markdown and html formats")
    return write(document, baseline)


def render(document: ResultsDocument, fmt: str, baseline: str | None = None) -> str:
    """The document in ``fmt`` (markdown, csv, json, html), whole."""
    return "".join(render_parts(document, fmt, baseline))
