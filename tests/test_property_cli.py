"""Generated command lines for every command: whatever the values, the exit code is 0, 1, 2 or 130
and no output holds a traceback (a crash is exit 70; a traceback is a bug's text reaching the user).

Hypothesis draws a value for any subset of every option of every command (numbers at and beyond
every limit — nan, inf, 1e400, 1e-309, negative, huge — units, junk, empty text), positional files
from real results, traces and TOML files, and target URLs of every scheme with every parameter it
takes. Work is bounded so a case is quick: targets are a port nothing listens on, durations short,
``size`` draws few keys and measures nothing, no Dask cluster. Each case runs in-process through
the console script's own ``main`` (its exit-code mapping, its one-line errors).

``CACHEMARK_PROPERTY_EXAMPLES=10000`` raises the number of cases (default 150, well under a minute);
``CACHEMARK_PROPERTY_TALLY=path`` appends each case's exit code to that file.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
import typer  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cachemark import cli  # noqa: E402
from cachemark.schemes import scheme, schemes  # noqa: E402

EXAMPLES = int(os.environ.get("CACHEMARK_PROPERTY_EXAMPLES", "150"))
TALLY = os.environ.get("CACHEMARK_PROPERTY_TALLY")
DATA = Path(__file__).parent / "data"
WORK = Path(os.environ.get("CACHEMARK_PROPERTY_DIR", "/tmp")) / f"cachemark-property-{os.getpid()}"
NO_SERVER = "127.0.0.1:1"  # nothing listens: a run ends at its first connect

EDGES = ["0", "-1", "1", "2", "nan", "-nan", "inf", "-inf", "1e400", "-1e400", "1e-309", "1e-320", "1e308",
         "99999999999999999999", "-99999999999999999999", "4294967296", "18446744073709551616", "0.5", "",
         " ", "1e", "0x10", "1_000", "3.", ".3", "1,2", "1;2", "=", "a=b", "get=1;set=1", "get=90,set=10",
         "zipf:0.99", "zipf:nan", "zipf:1e400", "hotspot:0.2,0.8", "100-1000", "100:9,10000:1", "1000000s",
         "1201s", "1e400ms", "0.2s", "10ms", "1ms,connect=1000s", "lan", "lan,1000000s", "1ms,link=1kB/s",
         "1ms,bandwidth=1e400gbit", "same-host", "json", "markdown", "table", "html", "csv", "lru,fifo,sieve",
         "mix=get=1;set=1", "value_size=1,2", "workers=0", "rate=1e-309", "p99>10%", "ops/s<-5%", "errors>5%",
         "p99>nan%", "redis=cache.m7g.large", "\x00", "é", "-", "--", "?bogus=1"]


SOURCES = sorted(s for s in DATA.glob("*.json") if s.stat().st_size < 2_000_000)
MADE = {"t.csv": "timestamp,key,op,size\n1,a,get,10\n2,b,set,20\n",
        "empty.toml": "",
        "needs.toml": "[needs]\np99_ms = { get = 1.0 }\nops_per_s = 1000\n",
        "prices.toml": '[offerings.x]\nkind = "instance"\nhourly = 1e308\nmemory_gb = 1e-320\n'}
PATHS = [*(str(WORK / s.name) for s in SOURCES), *(str(WORK / name) for name in MADE),
         str(WORK / "missing.json"), str(WORK), "/dev/null",
         *(str(WORK / f"out{s}") for s in (".json", ".md", ".txt", ".html", ".csv", ".zst", ".yaml"))]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(scope="module", autouse=True)
def _scratch():
    """The scratch directory is made when the module's tests run and goes with them (collection
    alone, in every xdist worker and every pass, makes nothing): a suite run leaves nothing in /tmp."""
    WORK.mkdir(parents=True, exist_ok=True)
    for source in SOURCES:  # copies: a report is written beside its results file
        shutil.copyfile(source, WORK / source.name)
    for name, text in MADE.items():
        (WORK / name).write_text(text)
    yield
    shutil.rmtree(WORK, ignore_errors=True)


VALUES = st.one_of(st.sampled_from(EDGES), st.sampled_from(PATHS),
                   st.integers(-(10**20), 10**20).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.tuples(st.floats(0, 1e6), st.sampled_from(["ns", "us", "ms", "s", "m", "h", ""]))
                   .map(lambda t: f"{t[0]:g}{t[1]}"),
                   st.text(max_size=16))


def _target_urls() -> st.SearchStrategy[str]:
    """A URL of every scheme, with any of the parameters it takes (and a few it does not)."""
    rows = {name: scheme(name) for name in schemes()}

    def url(name: str, params: list[tuple[str, str]]) -> str:
        query = "&".join(f"{k}={v}" for k, v in params)
        return f"{name}://{NO_SERVER}/0" + (f"?{query}" if query else "")

    return st.sampled_from(sorted(rows)).flatmap(
        lambda name: st.lists(st.tuples(st.sampled_from([*rows[name].allowed(), "bogus", "client"]),
                                        st.sampled_from(EDGES[:30] + ["1", "go-redis", "yes"])),
                              max_size=3).map(lambda params, name=name: url(name, params)))


def _commands() -> list[tuple[list[str], object]]:
    top = typer.main.get_command(cli.app)
    out = []
    for name, command in top.commands.items():
        subs = getattr(command, "commands", None)
        for sub, leaf in (subs.items() if subs else [(None, command)]):
            out.append(([name, sub] if sub else [name], leaf))
    return out


COMMANDS = _commands()
# Options a case sets itself, to keep its work bounded (and no Dask cluster started).
BOUNDED = {
    "run": {"--target", "--cluster", "--duration", "--ops", "--repeat", "--warmup", "--warmup-ops", "--calibrate",
            "--workers", "--keys", "--trace-limit", "--amplify"},
    "stampede": {"--target", "--duration", "--clients"},
    "capture": {"--upstream", "--duration", "--listen", "--output"},
    "size": {"--measure", "--target", "--keys", "--requests"},
}


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    words, command = draw(st.sampled_from(COMMANDS))
    name = words[0]
    argv = list(words)
    skip = BOUNDED.get(name, set()) | {"--debug"}  # --debug asks for tracebacks
    for param in command.params:  # type: ignore[attr-defined]
        if param.name == "help" or param.opts[0] in skip or not draw(st.booleans()):
            continue
        if param.param_type_name == "argument":
            count = 1 if param.nargs == 1 else draw(st.integers(1, 2))
            argv += [draw(st.sampled_from(PATHS)) if draw(st.integers(0, 3)) else draw(VALUES) for _ in range(count)]
        elif getattr(param, "is_flag", False):
            argv.append(draw(st.sampled_from(param.opts + list(param.secondary_opts or []))))
        else:
            argv += [param.opts[0], draw(VALUES)]
    if name == "run":
        argv += ["-t", draw(_target_urls()), "--duration", "0.2s", "--warmup", "0", "--no-calibrate",
                 "--keys", draw(st.sampled_from(["0", "1", "100", "-5", "nan", "1000"]))]
    elif name == "stampede":
        argv += ["-t", draw(_target_urls()), "--duration", draw(st.sampled_from(["0.2s", "0", "nan", "-1s"]))]
    elif name == "capture":
        argv += ["--upstream", draw(_target_urls()), "--duration", "0.1s", "--listen", "127.0.0.1:0",
                 "--output", str(WORK / "cap.cmtrace")]
    elif name == "size":
        argv += ["--no-measure", "--keys", str(draw(st.integers(-2, 2000))),
                 "--requests", str(draw(st.integers(-2, 20000)))]
    return argv


def run_main(argv: list[str]) -> tuple[int, str]:
    """``cachemark ARGV`` in this process, through the console script's main: (exit code, all output)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv, sys.stdin
    handlers = {n: signal.getsignal(n) for n in SIGNALS}  # main() installs its own: the suite keeps pytest's
    sys.argv, sys.stdin = ["cachemark", *argv], io.StringIO("")
    code: int = 0
    here = os.getcwd()
    os.chdir(WORK)  # a relative output path lands in the scratch directory, never in the tree
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.stdin = saved
        os.chdir(here)
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return code, out.getvalue() + err.getvalue()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 150,
          suppress_health_check=list(HealthCheck))
@given(command_lines())
def test_every_command_line_ends_in_a_known_exit_code_without_a_traceback(argv):
    code, output = run_main(argv)
    if TALLY:
        with open(TALLY, "a", encoding="utf-8") as tally:
            tally.write(f"{code}\t{argv!r}\n")
    assert code in (0, 1, 2, 130), (argv, code, output[-2000:])
    assert "Traceback (most recent call last)" not in output, (argv, output[-2000:])
