"""Plain SVG charts generated in Python for the self-contained HTML report.

Owns the axes (linear, log, category, and the HdrHistogram-style percentile axis where
0 %, 90 %, 99 %, 99.9 % … are evenly spaced), :func:`line_chart` and :func:`bar_chart`.
Every chart is one ``<svg class="chart">`` with a fixed size and viewBox, series tagged
``data-series`` so the report's small script can toggle them from the legend, and
``<title>`` elements as hover tooltips. No JavaScript is needed to draw anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd")
MAX_NINES = 5  # the percentile axis ends at 99.999 %


def color_for(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def percentile_to_x(pct: float) -> float:
    """0 % → 0, 90 % → 1, 99 % → 2, 99.9 % → 3 …: the number of nines."""
    remaining = max(1.0 - pct / 100.0, 10.0 ** -MAX_NINES)
    return -math.log10(remaining)


def percentile_grid(total: int, steps_per_nine: int = 24) -> list[float]:
    """Percentiles evenly spaced on the nines axis, up to what ``total`` samples can resolve."""
    nines = min(MAX_NINES, max(1.0, math.log10(max(total, 10))))
    count = int(nines * steps_per_nine)
    return [100.0 * (1.0 - 10.0 ** -(nines * i / count)) for i in range(count + 1)]


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / max(target, 1)
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * magnitude:
            return mult * magnitude
    return 10 * magnitude


@dataclass
class Axis:
    """Maps data values to pixels between ``start`` and ``end`` and proposes ticks."""

    kind: str  # linear | log | percentile | category
    lo: float
    hi: float
    start: float
    end: float
    fmt: Callable[[float], str] = str
    categories: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.kind == "log":
            self.lo = max(self.lo, 1e-9)
            self.hi = max(self.hi, self.lo)
            self.lo = 10 ** math.floor(math.log10(self.lo))
            self.hi = 10 ** math.ceil(math.log10(self.hi))
            if self.hi <= self.lo:
                self.hi = self.lo * 10
        elif self.kind == "percentile":
            self.lo, self.hi = 0.0, max(1.0, math.ceil(self.hi))
        elif self.kind == "category":
            self.lo, self.hi = -0.5, len(self.categories) - 0.5
        else:
            if self.hi <= self.lo:
                self.hi = self.lo + (abs(self.lo) or 1.0)
            step = _nice_step(self.hi - self.lo)
            self.lo = math.floor(self.lo / step) * step
            self.hi = math.ceil(self.hi / step) * step

    def _t(self, v: float) -> float:
        if self.kind == "log":
            return math.log10(max(v, 1e-12))
        return v

    def map(self, v: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        fraction = (self._t(v) - a) / (b - a) if b != a else 0.5
        return self.start + fraction * (self.end - self.start)

    def ticks(self) -> list[tuple[float, str]]:
        if self.kind == "percentile":
            labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"]
            return [(float(i), labels[i]) for i in range(int(self.hi) + 1)]
        if self.kind == "category":
            return [(float(i), str(c)) for i, c in enumerate(self.categories)]
        if self.kind == "log":
            decades = range(round(math.log10(self.lo)), round(math.log10(self.hi)) + 1)
            ticks = [10.0 ** d for d in decades]
            if len(ticks) <= 2:  # one decade only: 2 and 5 as well, so the axis can be read
                ticks = sorted({t * m for t in ticks for m in (1, 2, 5) if self.lo <= t * m <= self.hi})
            return [(t, self.fmt(t)) for t in ticks]
        step = _nice_step(self.hi - self.lo)
        count = int(round((self.hi - self.lo) / step))
        return [(self.lo + i * step, self.fmt(self.lo + i * step)) for i in range(count + 1)]


@dataclass
class Series:
    name: str
    points: Sequence[tuple[float, float]] | np.ndarray  # (x, y) pairs, or an array of them as rows
    color: str
    markers: bool = False
    dashed: bool = False
    tooltips: list[str] = field(default_factory=list)


@dataclass
class Marker:
    """A vertical line at ``x`` with a text, e.g. the saturation point of a sweep."""

    x: float
    text: str
    color: str = "#444"


WIDTH, HEIGHT = 570, 320
_MARGIN = {"left": 70, "right": 34, "top": 34, "bottom": 52}


def _frame(title: str, width: int, height: int, body: list[str], x_label: str, y_label: str,
           x_axis: Axis | None, y_axis: Axis | None, chart_id: str) -> str:
    m = _MARGIN
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<rect class="bg" x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        f'<text class="title" x="{m["left"]}" y="20" font-size="14" font-weight="600">{escape(title)}</text>',
    ]
    if y_axis is not None:
        for value, label in y_axis.ticks():
            y = y_axis.map(value)
            parts.append(f'<line class="grid" x1="{m["left"]}" x2="{width - m["right"]}" y1="{y:.1f}" '
                         f'y2="{y:.1f}" stroke="#e4e4e4"/>')
            parts.append(f'<text x="{m["left"] - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
                         f'{escape(label)}</text>')
    if x_axis is not None:
        ticks = x_axis.ticks()
        # thin out crowded category labels (a 30-point sweep)
        every = max(1, math.ceil(len(ticks) / 12))
        for i, (value, label) in enumerate(ticks):
            x = x_axis.map(value)
            parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{m["top"]}" '
                         f'y2="{height - m["bottom"]}" stroke="#f0f0f0"/>')
            if i % every == 0:
                parts.append(f'<text x="{x:.1f}" y="{height - m["bottom"] + 16}" font-size="11" '
                             f'text-anchor="middle">{escape(label)}</text>')
    plot_w = width - m["left"] - m["right"]
    parts.append(f'<rect class="plot" x="{m["left"]}" y="{m["top"]}" width="{plot_w}" '
                 f'height="{height - m["top"] - m["bottom"]}" fill="none" stroke="#999"/>')
    parts.append(f'<text x="{(m["left"] + width - m["right"]) / 2:.0f}" y="{height - 10}" font-size="12" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(16 {(m["top"] + height - m["bottom"]) / 2:.0f}) rotate(-90)" '
                 f'font-size="12" text-anchor="middle">{escape(y_label)}</text>')
    parts += body
    parts.append("</svg>")
    return "".join(parts)


def _span(values: Iterable[float], empty: tuple[float, float]) -> tuple[float, float]:
    """The lowest and highest of ``values`` (``empty`` when there are none), read in one pass: a
    chart of a thousand runs' curves never lists all of their points at once."""
    lo = hi = None
    for value in values:
        if lo is None or value < lo:
            lo = value
        if hi is None or value > hi:
            hi = value
    return empty if lo is None or hi is None else (lo, hi)


def line_chart(series: list[Series], *, title: str, x_label: str, y_label: str, x_kind: str = "linear",
               y_kind: str = "linear", x_fmt: Callable[[float], str] = str,
               y_fmt: Callable[[float], str] = str, categories: Sequence[str] = (),
               markers: Sequence[Marker] = (), chart_id: str = "chart", width: int = WIDTH,
               height: int = HEIGHT, y_zero: bool = True) -> str:
    m = _MARGIN
    x_lo, x_hi = _span((x for s in series for x, _ in s.points), (0.0, 1.0))
    y_lo, y_hi = _span((y for s in series for _, y in s.points if y is not None and (y_kind != "log" or y > 0)),
                       (1.0, 1.0))
    if y_kind == "linear" and y_zero:
        y_lo = min(0.0, y_lo)
    x_axis = Axis(x_kind, x_lo, x_hi, m["left"], width - m["right"], x_fmt, categories)
    y_axis = Axis(y_kind, y_lo, y_hi, height - m["bottom"], m["top"], y_fmt)
    body: list[str] = []
    for index, s in enumerate(series):
        points = [(x, y) for x, y in s.points if y is not None and (y_kind != "log" or y > 0)]
        if not points:
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{x_axis.map(x):.1f},{y_axis.map(y):.1f}"
                     for i, (x, y) in enumerate(points))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        body.append(f'<g class="series" data-series="{index}"><path d="{d}" fill="none" stroke="{s.color}" '
                    f'stroke-width="1.8"{dash}><title>{escape(s.name)}</title></path>')
        if s.markers or len(points) == 1:
            for i, (x, y) in enumerate(points):
                tip = s.tooltips[i] if i < len(s.tooltips) else f"{s.name}: {y_fmt(y)}"
                body.append(f'<circle cx="{x_axis.map(x):.1f}" cy="{y_axis.map(y):.1f}" r="3.2" '
                            f'fill="{s.color}"><title>{escape(tip)}</title></circle>')
        body.append("</g>")
    for marker in markers:
        x = x_axis.map(marker.x)
        body.append(f'<g class="marker"><line x1="{x:.1f}" x2="{x:.1f}" y1="{m["top"]}" '
                    f'y2="{height - m["bottom"]}" stroke="{marker.color}" stroke-dasharray="3 3"/>'
                    f'<text x="{x + 4:.1f}" y="{m["top"] + 14}" font-size="11" fill="{marker.color}">'
                    f'{escape(marker.text)}</text></g>')
    return _frame(title, width, height, body, x_label, y_label, x_axis, y_axis, chart_id)


def bar_chart(bars: list[tuple[str, float, str, int]], *, title: str, value_label: str,
              fmt: Callable[[float], str] = str, chart_id: str = "chart", width: int = WIDTH,
              max_value: float | None = None) -> str:
    """Horizontal bars: (row label, value, colour, series index) from top to bottom."""
    row_h = 18
    left = 200
    height = _MARGIN["top"] + _MARGIN["bottom"] + row_h * max(len(bars), 1)
    axis = Axis("linear", 0.0, max_value or max([b[1] for b in bars] + [1e-9]), left, width - 70, fmt)
    body: list[str] = []
    for i, (label, value, color, series) in enumerate(bars):
        y = _MARGIN["top"] + i * row_h
        w = max(axis.map(value) - left, 0.5)
        body.append(
            f'<g class="series" data-series="{series}"><text x="{left - 6}" y="{y + 13}" font-size="11" '
            f'text-anchor="end">{escape(label[:32])}</text><rect x="{left}" y="{y + 3}" width="{w:.1f}" '
            f'height="{row_h - 6}" fill="{color}"><title>{escape(f"{label}: {fmt(value)}")}</title></rect>'
            f'<text x="{left + w + 4:.1f}" y="{y + 13}" font-size="10" fill="#333">'
            f"{escape(fmt(value))}</text></g>")
    m = _MARGIN
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<rect class="bg" x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
        f'<text class="title" x="{m["left"]}" y="20" font-size="14" font-weight="600">{escape(title)}</text>',
    ]
    for value, label in axis.ticks():
        x = axis.map(value)
        parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{m["top"]}" '
                     f'y2="{height - m["bottom"]}" stroke="#e8e8e8"/>'
                     f'<text x="{x:.1f}" y="{height - m["bottom"] + 16}" font-size="11" '
                     f'text-anchor="middle">{escape(label)}</text>')
    parts += body
    parts.append(f'<text x="{(left + width - 70) / 2:.0f}" y="{height - 10}" font-size="12" '
                 f'text-anchor="middle">{escape(value_label)}</text></svg>')
    return "".join(parts)
