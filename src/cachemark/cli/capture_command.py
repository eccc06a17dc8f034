"""``cachemark capture``: sit between an application and its Redis or memcached and record its op stream.

The recording proxy and the trace writing live in :class:`cachemark.lab.proxy.TraceCapture`; this
module turns the command line into one (the upstream URL, the protocol it implies, where to
listen), shows a live count, stops on Ctrl-C or after ``--duration``, and prints the summary.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import outfile
from ..errors import EXIT_INTERRUPTED, UserError
from .terminal import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from ..lab.proxy import TraceCapture

def upstream_of(url: str, protocol: str | None) -> tuple[str, int, str]:
    """(host, port, protocol) from ``redis://host:port``, ``memcached://host:port`` or ``host:port``."""
    from ..schemes import find_scheme
    from ..target import check_params, parse_target

    if "://" not in url:
        host, _, port = url.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--upstream {url!r}: expected a URL (redis://127.0.0.1:6379, memcached://host:11211) "
                            "or host:port")
        if protocol is None:
            raise UserError(f"--upstream {url!r}: say --protocol resp or --protocol memcached (or use a URL)")
        return host.strip("[]"), int(port), protocol
    target = parse_target(url)
    row = find_scheme(target.scheme)
    if (row is not None and row.capture and row.tls) or target.bool_param("tls"):
        raise UserError(f"--upstream {target.redacted}: TLS traffic cannot be read by the recorder; capture in "
                        "front of a plain-text port (TLS terminated before it)")
    if row is None or not row.capture:  # the row says which protocol the recorder reads in front of it
        raise UserError(f"--upstream {target.redacted}: capture speaks redis:// (RESP) and memcached:// only")
    check_params(target)  # the same URL rules as run's ...
    if target.params:  # ... and the recorder only forwards bytes: no parameter could be honoured
        raise UserError(f"--upstream {target.redacted}: capture forwards bytes to host:port and honours no "
                        f"URL parameter; drop {next(iter(target.params))}=")
    if len(target.hosts) > 1:
        raise UserError(f"--upstream {target.redacted}: one server at a time (run one capture per server)")
    server = target.endpoint()
    return server.host, server.port or 0, protocol or row.capture


def _check_reachable(host: str, port: int) -> None:
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise UserError(f"cannot reach the upstream {host}:{port}: {exc.strerror or exc}") from None


def capture(
    output: Annotated[Path, typer.Option("--output", "-o", help="The trace to write (.cmtrace; .zst compresses).")],
    upstream: Annotated[str, typer.Option("--upstream", "-u", help="The real server: redis://host:port, "
                                          "memcached://host:port (or host:port with --protocol).")],
    listen: Annotated[str, typer.Option(help="Where the application connects instead (host:port; port 0 picks "
                                        "a free one).")] = "127.0.0.1:0",
    raw_keys: Annotated[bool, typer.Option("--raw-keys", help="Keep the raw keys (default: only their hashes).")]
    = False,
    duration: Annotated[str | None, typer.Option(help="Stop after this long (e.g. 60s, 5m); default: Ctrl-C.")]
    = None,
    protocol: Annotated[str | None, typer.Option(help="resp or memcached (default: from the URL's scheme).")]
    = None,
    threads: Annotated[int, typer.Option(help="Proxy threads, 1 to 64 (2 for heavy traffic).")] = 1,
) -> None:
    """Record an application's cache traffic to a trace: point the application at --listen.

    Keys are hashed unless --raw-keys; values are never stored, only their sizes.

    The trace replays with `cachemark run -t URL --trace FILE`.

    Example: cachemark capture -u redis://127.0.0.1:6379 --listen 127.0.0.1:6380 -o app.cmtrace --duration 60s
    """
    from ..lab.proxy import CAPTURE_PROTOCOLS, TraceCapture
    from ..spec import parse_duration

    console = make_console()
    if protocol is not None and protocol not in CAPTURE_PROTOCOLS:
        raise UserError(f"--protocol {protocol!r}: use one of {', '.join(CAPTURE_PROTOCOLS)}")
    seconds = parse_duration(duration, "--duration") if duration is not None else None
    host, port, protocol = upstream_of(upstream, protocol)
    if not outfile.is_stdout(output):
        outfile.check(output, "the trace")  # before anything listens
    _check_reachable(host, port)
    recorder = TraceCapture((host, port), protocol, output, raw_keys=raw_keys, listen=listen, threads=threads)
    console.print(f"capturing {protocol} traffic to {host}:{port}: point the application at {recorder.address} "
                  f"(Ctrl-C stops; writing {output})", markup=False, highlight=False)
    ok, interrupted = True, False
    try:
        _wait(recorder, seconds, console)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: the trace so far is still written
        interrupted = True
    except BaseException:
        ok = False
        raise
    finally:
        summary = recorder.stop(ok=ok)
    _print_summary(summary, console)
    if interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)  # as every command stopped by a signal exits


def _wait(recorder: TraceCapture, seconds: float | None, console: Console) -> None:
    """Until the duration is up (or forever), with a live count on a terminal."""
    end = None if seconds is None else time.monotonic() + seconds

    def line() -> str:
        s = recorder.stats()
        dropped = f", {s['dropped_segments']:,} segments DROPPED" if s["dropped_segments"] else ""
        return f"{recorder.written:,} requests recorded from {s['connections']:,} connections{dropped}"

    with console.status(line()) as status:
        while end is None or time.monotonic() < end:
            time.sleep(min(0.25, max(0.0, end - time.monotonic())) if end is not None else 0.25)
            status.update(line())


def _print_summary(summary: dict[str, Any], console: Console) -> None:
    per_op = ", ".join(f"{op} {n:,}" for op, n in summary["per_op"].items()) or "none"
    print_ = console.print
    conns = summary["connections"]
    print_(f"wrote {summary['written']:,} requests to {summary['path']} ({per_op}) from {conns:,} "
           f"connection{'' if conns == 1 else 's'}", markup=False, highlight=False)
    if summary["other"]:
        print_(f"not recorded: {summary['other']:,} requests that are not cache ops (PING, HELLO, INFO, ...)",
               markup=False, highlight=False)
    if summary["dropped_segments"] or summary["unparsed_connections"]:
        print_(f"INCOMPLETE: {summary['dropped_segments']:,} segments ({summary['dropped_bytes']:,} bytes) dropped "
               f"because the recorder fell behind, {summary['unparsed_connections']:,} connections not parsed "
               "(the trace says so in a comment line)", markup=False, highlight=False)
