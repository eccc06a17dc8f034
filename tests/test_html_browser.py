"""The HTML report in a real browser: headless Chromium renders it with no errors and every chart drawn.

A small checker script is injected at the top of a copy of the report: it records
uncaught errors, ``console.error`` calls and failed resource loads, then after load
measures every ``<svg class="chart">`` (size, drawn elements), clicks a legend entry to
check the toggling script works, and writes its findings as JSON into the DOM, which
``chromium --dump-dom`` prints. Chromium's own console log (``--enable-logging``) is
checked as well. No DevTools client library is needed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cachemark.report.html import render_html
from cachemark.results import as_model

pytest_plugins = ["report_fixtures"]

_BROWSERS = ("chromium", "chromium-browser", "google-chrome")

_CHECKER = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || 'resource'));
}, true);
(function () {
  var original = console.error;
  console.error = function () { window.__errors.push('console.error: ' + Array.from(arguments).join(' '));
                                return original.apply(console, arguments); };
})();
window.addEventListener('load', function () {
  var charts = Array.from(document.querySelectorAll('svg.chart')).map(function (svg) {
    var box = svg.getBoundingClientRect();
    var drawn = svg.querySelectorAll('.series path, .series rect, .series circle');
    var visible = Array.from(drawn).filter(function (el) { var b = el.getBoundingClientRect();
                                                           return b.width > 0 || b.height > 0; });
    return {id: svg.id, width: box.width, height: box.height, drawn: drawn.length, visible: visible.length};
  });
  var toggled = null;
  var button = document.querySelector('.legend button');
  if (button) {
    var svg = document.getElementById(button.parentNode.dataset.chart);
    var group = svg.querySelector('.series[data-series="' + button.dataset.series + '"]');
    button.click();
    toggled = getComputedStyle(group).display === 'none';
    button.click();
  }
  var out = document.createElement('pre');
  out.id = '__check';
  out.textContent = JSON.stringify({errors: window.__errors, charts: charts, toggled: toggled,
                                    tables: document.querySelectorAll('table').length});
  document.body.appendChild(out);
});
</script>"""


def _browser() -> str:
    for name in _BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium installed (apt-get install -y chromium)")


def _chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=90,
    )


def render_in_browser(html: str, tmp_path: Path) -> tuple[dict, str]:
    browser = _browser()
    checked = html.replace("<head>", "<head>" + _CHECKER, 1)
    page = tmp_path / "report.html"
    page.write_text(checked, encoding="utf-8")
    done = _chromium(browser, tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    match = re.search(r'<pre id="__check">(.*?)</pre>', done.stdout, re.S)
    assert match, f"the checker did not run; chromium said: {done.stderr[-2000:]}"
    text = match.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return json.loads(text), done.stderr


def test_report_renders_in_chromium_without_errors(report_doc, tmp_path):
    html = render_html(as_model(report_doc), baseline="memory")
    result, log = render_in_browser(html, tmp_path)
    assert result["errors"] == []
    assert not [line for line in log.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "rror" in line)]
    expected = html.count('<svg class="chart"')
    assert expected >= 10 and len(result["charts"]) == expected
    for chart in result["charts"]:
        assert chart["width"] > 100 and chart["height"] > 100, chart
        assert chart["drawn"] > 0 and chart["visible"] > 0, chart
    assert result["toggled"] is True
    assert result["tables"] >= 3


def test_screenshot(report_doc, tmp_path):
    browser = _browser()
    page = tmp_path / "report.html"
    page.write_text(render_html(as_model(report_doc)), encoding="utf-8")
    shot = tmp_path / "report.png"
    done = _chromium(browser, tmp_path / "profile", "--window-size=1280,1600", f"--screenshot={shot}",
                     page.as_uri())
    assert shot.exists(), done.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_the_decision_page_renders_in_chromium(tmp_path):
    """decide's page: the answer, the byte curves with the chosen size and the verified point, p99 against
    the offered rate with the budget and the knee, the candidates' table with nodes and cost."""
    from cachemark.analysis.decision import Assessment, Capacity, Decision, NodePlan, Setting, Sizing, Traffic
    from cachemark.report.decision_report import decision_html

    def candidate(label: str, scale: float, measured: float) -> Assessment:
        curve = {"bytes": [2**20 * m * scale for m in (1, 2, 4, 8, 16, 32)],
                 "hit_ratio": [0.31, 0.45, 0.6, 0.74, 0.83, 0.88]}
        setting = Setting("maxmemory", int(16 * 2**20 * scale), "bytes", {"maxmemory": "1"}, 16 * 2**20 * scale)
        points = [{"rate": r, "achieved": r, "within": p99 <= 2.0, "why": "", "p99_ms": {"get": p99}}
                  for r, p99 in ((20_000, 0.4), (40_000, 0.7), (80_000, 1.6), (90_000, 2.4), (160_000, 9.0))]
        return Assessment(label, f"spawn:{label}", label, "engine", Sizing(setting, 0.83, measured, curve=curve),
                          Capacity(84_000.0, 80_000.0, 90_000.0, points, "engine", {"get": 0.5}, 14_000.0, True),
                          NodePlan("cache.t4g.micro", 1, 1, 1, 12.0, "USD"))

    traffic = Traffic("trace app.cmtrace", 113_188, {"get": 90_250, "set": 18_188, "delete": 4_750}, 15_176,
                      45 * 2**20, 14_080.0, 11_300.0, 9.0, 1.0)
    d = Decision(traffic, 0.8, {"get": 2.0}, [candidate("redis", 1.1, 0.82), candidate("memcached", 1.0, 0.835)])
    html = decision_html(d)
    result, log = render_in_browser(html, tmp_path)
    assert result["errors"] == []
    assert not [line for line in log.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "rror" in line)]
    assert [c["id"] for c in result["charts"]] == ["decide-curves", "decide-latency"]
    for chart in result["charts"]:
        assert chart["width"] > 100 and chart["height"] > 100, chart
        assert chart["drawn"] > 0 and chart["visible"] > 0, chart
    assert result["toggled"] is True
    assert result["tables"] >= 1
    assert "Deploy redis" in html and "verified" in html and "budget" in html and "12 USD" in html
