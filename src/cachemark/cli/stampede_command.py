"""``cachemark stampede``: what happens when a hot key expires under load, per strategy."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UserError
from ..target import check_params, parse_target
from .terminal import make_console

if TYPE_CHECKING:
    from ..run.stampede import StampedeParams


def stampede(
    target: Annotated[list[str], typer.Option("--target", "-t", help="redis:// or memcached:// (or spawn:).")],
    strategy: Annotated[str, typer.Option(help="none, lock, xfetch, swr, meta (memcached).")] = "none,lock,xfetch,swr",
    rate: Annotated[float, typer.Option(help="Reads of the hot key per second, all clients together.")] = 200.0,
    recompute: Annotated[str, typer.Option(help="The origin's time to recompute the value (Δ).")] = "50ms",
    ttl: Annotated[str, typer.Option(help="The hot key's TTL.")] = "1s",
    duration: Annotated[str, typer.Option(help="How long each strategy runs.")] = "10s",
    clients: Annotated[int, typer.Option(help="Concurrent clients (app server threads).")] = 16,
    beta: Annotated[float, typer.Option(help="XFetch's β (> 1 refreshes earlier).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the read schedule (the same for every strategy).")] = 0,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of tables.")] = False,
) -> None:
    """Measure a cache stampede: origin calls per expiry, the latency spike, per strategy.

    With no protection about λ·Δ clients recompute at each expiry (λ reads/s, Δ recompute
    time); a lock makes it one.

    Example: cachemark stampede -t spawn:redis --rate 200 --recompute 50ms --ttl 1s
    """
    run_stampedes(target, {"strategy": strategy, "rate": rate, "recompute": recompute, "ttl": ttl,
                           "duration": duration, "clients": clients, "beta": beta, "seed": seed}, markdown)


STAMPEDE_KEYS = ("strategy", "rate", "recompute", "ttl", "duration", "clients", "beta", "seed")
DEFAULTS = {"strategy": "none,lock,xfetch,swr", "rate": 200.0, "recompute": "50ms", "ttl": "1s", "duration": "10s",
            "clients": 16, "beta": 1.0, "seed": 0}


def stampede_params(data: dict) -> StampedeParams:
    """An experiment's ``[stampede]`` table (or the command's flags) with defaults, checked: one line if wrong."""
    from ..spec import parse_duration

    unknown = sorted(set(data) - set(STAMPEDE_KEYS))
    if unknown:
        raise UserError(f"[stampede]: unknown field {unknown[0]!r}; fields: {', '.join(STAMPEDE_KEYS)}")
    params = {**DEFAULTS, **data}
    from ..run.stampede import STRATEGIES, StampedeParams

    strategies = [s.strip() for s in str(params["strategy"]).split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if not strategies or unknown:
        raise UserError(f"--strategy {params['strategy']!r}: choose from {', '.join(STRATEGIES)}")
    try:
        rate, clients, beta = float(params["rate"]), int(params["clients"]), float(params["beta"])
    except (TypeError, ValueError):
        raise UserError("rate, clients and beta must be numbers") from None
    if not 0 < rate <= 100_000 or not 1 <= clients <= 512 or not 0 < beta < math.inf:  # nan fails both
        raise UserError("--rate must be in (0, 100000], --clients in [1, 512], --beta a finite number > 0")
    delta_s = parse_duration(params["recompute"], "recompute")
    ttl_s = parse_duration(params["ttl"], "ttl")
    duration_s = parse_duration(params["duration"], "duration")
    if not (0 < delta_s < ttl_s and 0 < duration_s <= 3600):
        raise UserError("--recompute must be shorter than --ttl, and --duration within (0, 1h]")
    return StampedeParams(strategies, rate, delta_s, ttl_s, duration_s, clients, beta, int(params["seed"]))


def run_stampedes(targets: list[str], data: dict, markdown: bool = False) -> None:
    """Every strategy against every target, one block per target. Each target goes through the run
    sequence (run/sequence.py) as a run's does: a spawned server started and stopped, the URL and its
    credentials tried, a write probed, the hot keys removed however it ends."""
    from ..errors import BackendMissing
    from ..report.blocks import to_markdown, to_rich
    from ..report.stampede_report import stampede_block
    from ..run.sequence import run_sequence
    from ..run.stampede import STAMPEDE_WORKLOAD, Stampedes, supported

    p = stampede_params(data)
    console = make_console()
    for url in targets:
        target = parse_target(url)
        shown = target.redacted  # a password never printed
        check_params(target)  # the same URL rules as run's
        if "client" in target.params:
            raise UserError(f"{shown}: stampede drives the target with its own client; drop client="
                            f"{target.params['client']!r} (it could not be honoured)")
        supported(target)  # its row says whether stampedes run on it: one line before a server is spawned
        load = Stampedes(p, lambda name, shown=shown: console.status(f"{shown}: {name} for {p.duration_s:g} s"))
        outcome = run_sequence(target, STAMPEDE_WORKLOAD, load, sample_server=False)
        if outcome.status == "skipped":  # a server to spawn is not installed
            raise BackendMissing(outcome.reason)
        block = stampede_block(shown, outcome.stampedes, p.rate, p.delta_s, p.ttl_s, p.clients)
        if markdown:
            console.print(to_markdown(block), markup=False, highlight=False)
        else:
            to_rich(block, console)
        for note in (outcome.dropped_writes, outcome.backend.cleanup_error):
            if note:
                console.print(f"{shown}: {note}", markup=False, highlight=False)
