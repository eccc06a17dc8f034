"""What every cachemark HTML page shares: its stylesheet, the few lines of script that toggle a chart's
series from its legend and sort tables, and the legend and figure frames around a chart. The run report
(:mod:`.html`) and the decision page (:mod:`.decision_report`) both use them, so they look and behave
alike."""

from __future__ import annotations

from html import escape

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-variant-numeric:tabular-nums}
th,td{padding:3px 9px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th{background:#f6f6f6;cursor:pointer}td.l,th.l{text-align:left}td.w{white-space:normal}
tr.sep td{border-top:2px solid #ccc}
.charts{display:flex;flex-wrap:wrap;gap:14px}.figure{border:1px solid #e3e3e3;padding:6px;background:#fff}
.legend{display:flex;flex-wrap:wrap;gap:4px 10px;max-width:570px;font-size:12px;margin-top:4px}
.legend button{border:0;background:none;cursor:pointer;font:inherit;padding:0}
.legend button.off{opacity:.35;text-decoration:line-through}
.legend i{display:inline-block;width:12px;height:3px;margin:0 4px 3px 0;vertical-align:middle}
svg .series.off{display:none}
pre{background:#f6f6f6;padding:10px;overflow:auto;font-size:12px}
.note{color:#666;font-size:12px}
.card{border:1px solid #cdd;border-radius:6px;background:#f7fbfb;padding:4px 16px 8px;margin:14px 0}
.card h2{border:0}.card .note{color:#333;font-size:13px}
"""

# Legend toggling and sortable tables: a convenience only — every chart is drawn without it.
JS = """
document.querySelectorAll('.legend button').forEach(function (b) {
  b.addEventListener('click', function () {
    var svg = document.getElementById(b.parentNode.dataset.chart);
    b.classList.toggle('off');
    svg.querySelectorAll('.series[data-series="' + b.dataset.series + '"]').forEach(function (g) {
      g.classList.toggle('off');
    });
  });
});
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var asc = th.dataset.asc !== '1';
    th.dataset.asc = asc ? '1' : '0';
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
      return asc ? c : -c;
    });
    rows.forEach(function (r) { r.classList.remove('sep'); body.appendChild(r); });
  });
});
"""


def legend(chart_id: str, entries: list[tuple[int, str, str]]) -> str:
    buttons = "".join(f'<button type="button" data-series="{i}"><i style="background:{c}"></i>'
                      f"{escape(n)}</button>" for i, n, c in entries)
    return f'<div class="legend" data-chart="{escape(chart_id)}">{buttons}</div>'


def figure(svg: str, legend: str = "") -> str:
    return f'<div class="figure">{svg}{legend}</div>'
