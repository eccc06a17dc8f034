"""``cachemark stampede``: what happens when a hot key expires under load, per strategy."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import UserError
from .terminal import make_console


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
    from ..report.blocks import to_markdown, to_rich
    from ..report.stampede_report import stampede_block
    from ..run.provide import provide
    from ..run.stampede import STRATEGIES, run_stampede
    from ..spec import parse_duration
    from ..target import parse_target

    strategies = [s.strip() for s in strategy.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if not strategies or unknown:
        raise UserError(f"--strategy {strategy!r}: choose from {', '.join(STRATEGIES)}")
    if not 0 < rate <= 100_000 or not 1 <= clients <= 512 or beta <= 0:
        raise UserError("--rate must be in (0, 100000], --clients in [1, 512], --beta > 0")
    delta_s, ttl_s = parse_duration(recompute, "recompute"), parse_duration(ttl, "ttl")
    duration_s = parse_duration(duration, "duration")
    if not (0 < delta_s < ttl_s and 0 < duration_s <= 3600):
        raise UserError("--recompute must be shorter than --ttl, and --duration within (0, 1h]")
    console = make_console()
    blocks = []
    for url in target:
        with provide(parse_target(url)) as (reachable, _servers):
            results = []
            for name in strategies:
                with console.status(f"{url}: {name} for {duration_s:g} s"):
                    results.append(run_stampede(reachable.url, name, rate, delta_s, ttl_s, duration_s, clients,
                                                beta, seed))
        blocks.append(stampede_block(url, results, rate, delta_s, ttl_s, clients))
    for block in blocks:
        if markdown:
            console.print(to_markdown(block), markup=False, highlight=False)
        else:
            to_rich(block, console)
