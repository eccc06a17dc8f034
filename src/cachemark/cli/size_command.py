"""``cachemark size``: how big must the cache be — for a trace, or for a synthetic workload."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UserError
from .terminal import make_console

MAX_SYNTHETIC_REQUESTS = 50_000_000


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"{what} {text!r}: expected numbers separated by commas, e.g. 0.9,0.95,0.99") from None
    if not values or any(not 0 < v < 1 for v in values):
        raise UserError(f"{what} {text!r}: each must be between 0 and 1, e.g. 0.9,0.95,0.99")
    return values


_UNITS = (("gib", 1 << 30), ("mib", 1 << 20), ("kib", 1 << 10), ("gb", 10**9), ("mb", 10**6), ("kb", 10**3),
          ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10), ("b", 1))


def byte_sizes(text: str) -> tuple[float, ...]:
    """``128MiB,1GiB,500000``: cache sizes in bytes (KiB/MiB/GiB and k/m/g are powers of 1024,
    KB/MB/GB of 1000)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, scale = part.lower(), 1
        for suffix, factor in _UNITS:
            if low.endswith(suffix):
                low, scale = low[: -len(suffix)].strip(), factor
                break
        try:
            value = float(low) * scale
        except ValueError:
            value = -1.0
        if not 0 < value < 2**50:
            raise UserError(f"--sizes {text!r}: each a size in bytes, e.g. 128MiB,256MiB,1GiB")
        out.append(float(round(value)))
    if not out:
        raise UserError(f"--sizes {text!r}: each a size in bytes, e.g. 128MiB,256MiB,1GiB")
    return tuple(sorted(set(out)))


def _synthetic(source: str | None, keys: int | None, key_dist: str | None, value_size: str | None,
               requests: int | None) -> tuple[Any, str, dict[str, Any]]:
    """The key stream of an experiment's (or the flags') workload, and how to describe it."""
    from ..analysis.mrc import workload_stream
    from .sources import experiment_from, resolve_source

    data, where = resolve_source(source)
    flags = {k: v for k, v in {"keys": keys, "key_dist": key_dist, "value_size": value_size}.items()
             if v is not None}
    workload = experiment_from(data, where, ["memory://"], flags).workload
    n = requests if requests is not None else min(max(20 * workload.keys, 2_000_000), MAX_SYNTHETIC_REQUESTS)
    if not 0 < n <= MAX_SYNTHETIC_REQUESTS:
        raise UserError(f"--requests {n}: between 1 and {MAX_SYNTHETIC_REQUESTS:,}")
    description = (f"{where}: {workload.keys:,} keys ({workload.key_dist}), values {workload.value_size} B, "
                   f"{n:,} requests drawn (the first {n // 2:,} fill the cache uncounted)")

    def stream() -> Any:
        return workload_stream(workload.keys, workload.key_dist, workload.value_size, n, workload.seed)

    return stream, description, {"keys": workload.keys, "key_dist": workload.key_dist,
                                 "value_size": workload.value_size, "requests": n}


def _trace(path: Path, fmt: str | None) -> tuple[Any, str, Any]:
    """A trace file as a stream of (ids, sizes) chunks: every request but deletes touches the cache.
    Also returns the reader of the last pass, whose ``problems`` say what was skipped."""
    import numpy as np

    from ..workload.traces import OPS, open_trace

    delete = OPS.index("delete")
    last: list[Any] = [None]

    def stream() -> Any:
        reader = open_trace(path, fmt)
        last[0] = reader
        for batch in reader.batches():
            records = batch.records[batch.records["op"] != delete]
            if len(records):
                yield records["key_hash"].astype(np.uint64), records["value_size"].astype(np.uint32)

    return stream, f"trace {path.name}", last


def size(
    source: Annotated[str | None, typer.Argument(help="A trace file, an experiment TOML or a preset name.")] = None,
    trace_format: Annotated[str | None, typer.Option("--format", help="The trace's format (default: detected).")]
    = None,
    keys: Annotated[int | None, typer.Option(help="Synthetic: number of distinct keys.")] = None,
    key_dist: Annotated[str | None, typer.Option(help="Synthetic: uniform | zipf[:S] | hotspot[:F,P]")] = None,
    value_size: Annotated[str | None, typer.Option(help="Synthetic: 100 | 100-1000 | 100:9,10000:1")] = None,
    requests: Annotated[int | None, typer.Option(help="Synthetic: requests to draw (default 20 × keys).")] = None,
    hit_ratio: Annotated[str, typer.Option(help="Target hit ratios.")] = "0.8,0.9,0.95,0.99",
    policy: Annotated[str, typer.Option(help="Policies: lru (exact, one pass), fifo, sieve (simulated).")] = "lru",
    sizes: Annotated[str | None, typer.Option(help="Cache sizes in bytes to simulate every policy at, e.g. "
                                              "128MiB,256MiB,1GiB (shown in the byte curve).")] = None,
    sample_rate: Annotated[float, typer.Option(help="SHARDS sampling rate for LRU (1: exact).")] = 1.0,
    measure: Annotated[
        bool, typer.Option("--measure/--no-measure", help="Size Redis and memcached as they evict: Redis's base "
                           "memory and per-key bytes measured on a spawned server, memcached's slab classes.")
    ] = True,
    redis_policy: Annotated[
        str, typer.Option(help="Redis's maxmemory-policy to size and verify with: allkeys-lru or allkeys-lfu.")
    ] = "allkeys-lru",
    verify: Annotated[
        bool, typer.Option("--verify", help="Configure each server's size for the first target on a spawned "
                           "server, replay the traffic under cache-aside, and print the measured get hit ratio "
                           "beside the predicted one.")
    ] = False,
    target: Annotated[
        list[str] | None, typer.Option("--target", "-t", help="With --measure: measure bytes per item on this "
                                       "server instead (a URL or spawn:; any scheme whose server reports its "
                                       "memory), e.g. -t valkey://10.0.0.5:6379.")
    ] = None,
    latency_from: Annotated[
        Path | None, typer.Option(help="A results file: its get hit/miss latencies give the expected latency.")
    ] = None,
    label: Annotated[str | None, typer.Option(help="With --latency-from: the run to use (default: the first).")]
    = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown instead of tables.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables (a figure the sample "
                                           "does not resolve is null, with its reason).")] = False,
) -> None:
    """How big must the cache be for a hit ratio: Redis maxmemory, memcached -m, bytes and objects.

    What is counted: the hit ratio the application sees, get hits / gets, under the trace's own ops
    — a get that misses fills the cache (cache-aside), a set writes, a delete removes, a TTL expires
    on the trace's clock. Each server is simulated as it accounts and evicts (Redis's sampled LRU, or
    LFU with --redis-policy allkeys-lfu, against used_memory with its base memory; memcached's slab
    classes), and LRU, FIFO and SIEVE by
    bytes at each size. The objects table is the one-pass LRU stack-distance curve (every request
    but deletes an access, no TTLs) — for SHARDS on very long traces.

    Example: cachemark size --keys 100000 --key-dist zipf:0.99 --value-size 100-1000 --sizes 16MiB,64MiB
    \f
    Over 80 lines for its 18 options and this help (typer reads them from the signature and docstring;
    ``\\f`` keeps this out of --help): the body, 40 lines, checks the options and hands over to
    analysis/sizing.py.
    """
    from ..analysis.sizing import answers, expected_latencies

    targets, named, policies = _checked_options(redis_policy, markdown, json_out, verify, measure, target,
                                                hit_ratio, sizes, policy)
    console = make_console()
    stream, description, reader, synthetic, warmup = _requests_stream(source, trace_format, keys, key_dist,
                                                                      value_size, requests, policies)
    curves = _miss_ratio_curves(console, stream, synthetic, policies, sample_rate, warmup)
    che = _che(synthetic)
    footprints = _footprints(console, stream, target) if measure and target else []
    ops_requests = _ops_requests(source, trace_format, synthetic, stream)
    with console.status("simulating each policy by bytes under the trace's ops"):
        ops_curves = ops_byte_curves(ops_requests, policies, named, sample_rate, warmup)
    sized_servers: list[Any] = []
    if measure and not target:
        sized_servers = _size_servers(console, ops_requests, targets, warmup, redis_policy)
    verified: list[Any] = []
    if verify:
        verified = _verify_servers(console, sized_servers, ops_requests)
    latencies, latency_label = None, ""
    if latency_from is not None:
        latencies, latency_label = _latencies(latency_from, label, targets, expected_latencies)
    found = _Sizing(description, curves, che, footprints, answers(curves[0], footprints, targets), ops_curves,
                    named, sized_servers, verified, latencies, latency_label,
                    getattr(reader[0], "problems", None) if reader is not None else None)
    blocks = _blocks(found)
    if json_out:
        import json
        import sys

        sys.stdout.write(json.dumps(_document(found), indent=1) + "\n")
    elif markdown:
        from ..report.blocks import to_markdown

        console.print("\n".join(to_markdown(b) for b in blocks), markup=False, highlight=False)
    else:
        from ..report.blocks import to_rich

        for block in blocks:
            to_rich(block, console)


def _checked_options(redis_policy: str, markdown: bool, json_out: bool, verify: bool, measure: bool,
                     target: list[str] | None, hit_ratio: str, sizes: str | None,
                     policy: str) -> tuple[tuple[float, ...], tuple[float, ...], list[str]]:
    """The options checked, each refusal one line: the target hit ratios, the named cache sizes
    and the policies."""
    from ..analysis.server_model import REDIS_EVICTIONS

    if redis_policy not in REDIS_EVICTIONS:
        raise UserError(f"--redis-policy {redis_policy!r}: one of {', '.join(REDIS_EVICTIONS)}")
    if markdown and json_out:
        raise UserError("--markdown and --json: choose one")
    if verify and (not measure or target):
        raise UserError("--verify sizes spawned Redis and memcached: not with --no-measure or --target")
    targets = _floats(hit_ratio, "--hit-ratio")
    named = byte_sizes(sizes) if sizes is not None else ()
    policies = [p.strip().lower() for p in policy.split(",") if p.strip()]
    if not policies or any(p not in ("lru", "fifo", "sieve") for p in policies):
        raise UserError(f"--policy {policy!r}: choose from lru, fifo, sieve")
    return targets, named, policies


def _requests_stream(source: str | None, trace_format: str | None, keys: int | None, key_dist: str | None,
                     value_size: str | None, requests: int | None,
                     policies: list[str]) -> tuple[Any, str, Any, dict[str, Any] | None, int]:
    """The requests to size for — a trace file's, or a drawn workload's (its memory checked first) —
    as (stream, description, the trace's last reader, the drawn workload, requests to warm up on)."""
    synthetic: dict[str, Any] | None = None
    warmup = 0
    reader: Any = None
    if source is not None and Path(source).is_file() and not source.endswith(".toml"):
        stream, description, reader = _trace(Path(source), trace_format)
    else:
        stream, description, synthetic = _synthetic(source, keys, key_dist, value_size, requests)
        from ..limits import check_memory, size_memory_estimate

        simulated = len([p for p in policies if p != "lru"])
        check_memory(f"size over {synthetic['keys']:,} keys, {synthetic['requests']:,} requests and "
                     f"{', '.join(policies)}",
                     size_memory_estimate(synthetic["keys"], synthetic["requests"], simulated),
                     "use fewer keys or requests, --policy lru alone, or --sample-rate below 1")
        # a drawn stream starts empty only because it was drawn: the first half fills the cache
        # uncounted, so the curve is of a cache that runs on (what Che's approximation predicts)
        warmup = synthetic["requests"] // 2
    return stream, description, reader, synthetic, warmup


def _miss_ratio_curves(console: Any, stream: Any, synthetic: dict[str, Any] | None, policies: list[str],
                       sample_rate: float, warmup: int) -> list[Any]:
    """The objects curves: LRU's by stack distance (first), then each other policy's simulated."""
    from ..analysis.mrc import lru_curves, policy_curve
    from ..report.size_report import CURVE_SHARES

    with console.status("computing the miss-ratio curve"):
        # a drawn stream's objects are its key space, not just the keys the draw touched
        key_space = float(synthetic["keys"]) if synthetic is not None else None
        lru, _ = lru_curves(stream(), sample_rate=sample_rate, warmup=warmup, objects=key_space,
                            shares=CURVE_SHARES)
        curves = [lru]
        for name in policies:
            if name != "lru":
                curves.append(policy_curve(name, stream(), lru.sizes, warmup))
    return curves


def _che(synthetic: dict[str, Any] | None) -> dict[float, float] | None:
    """Che's approximation of LRU's hit ratio at each curve share, for a drawn Zipf workload."""
    from ..analysis.che import lru_hit_ratio, zipf_popularity
    from ..report.size_report import CURVE_SHARES

    if synthetic is None:
        return None
    kind, _, s = str(synthetic["key_dist"]).partition(":")
    if kind != "zipf":
        return None
    popularity = zipf_popularity(synthetic["keys"], float(s or 0.99))
    return {share: lru_hit_ratio(popularity, synthetic["keys"] * share) for share in CURVE_SHARES}


def _footprints(console: Any, stream: Any, target: list[str]) -> list[Any]:
    """Bytes per item measured on each ``--target``'s server, with the requests' value sizes."""
    value_sizes = _value_sample(stream())
    footprints = []
    for url in target:
        with console.status(f"measuring bytes per item on {_shown(url)}"):
            footprints.append(measured_on(url, value_sizes))
    return footprints


@dataclass
class _Sizing:
    """What size found, shown as tables (:func:`_blocks`) or JSON (:func:`_document`)."""

    description: str
    curves: list[Any]  # the objects curves, LRU's first
    che: dict[float, float] | None
    footprints: list[Any]
    sized: Any  # the answers by objects and bytes
    ops_curves: list[Any]  # by bytes, under the trace's ops
    named: tuple[float, ...]
    servers: list[Any]
    verified: list[Any]
    latencies: Any
    latency_label: str
    problems: Any  # what the trace's reader skipped (None: a drawn workload)


def _blocks(found: _Sizing) -> list[Any]:
    """The tables, in their order: the servers, the answer, what was verified, the curves."""
    from ..report.size_report import answer_block, byte_curve_block, curve_block, server_block, verified_block

    blocks = [answer_block(found.curves[0], found.sized, found.footprints, found.description, found.latencies,
                           found.latency_label),
              curve_block(found.curves, found.che), byte_curve_block(found.ops_curves, found.named)]
    blocks[0].notes.insert(0, "Objects: LRU stack distances, every request but deletes an access and no TTLs "
                              "(What to set and By bytes give the get hit ratio under the trace's ops).")
    if found.servers:
        blocks.insert(0, server_block(found.servers))
    if found.verified:
        blocks.insert(1, verified_block(found.verified))
    if found.problems is not None:
        blocks[0].notes += [f"trace {line}" for line in found.problems.lines()]
    return blocks


def _document(found: _Sizing) -> dict[str, Any]:
    """The JSON document (a figure the sample does not resolve is null, with its reason)."""
    from ..report.size_report import COUNTED, byte_curve_document, size_document

    document = size_document(found.curves, found.sized, found.footprints, found.description, found.latencies,
                             found.che)
    document["notes"] += [f"trace {line}" for line in found.problems.lines()] if found.problems is not None else []
    document["counted"] = COUNTED
    document["byte_curve"] = byte_curve_document(found.ops_curves)
    document["sizes"] = list(found.named)
    document["servers"] = [s.as_dict() for s in found.servers]
    document["verified"] = [v.as_dict() for v in found.verified]
    return document


def _ops_requests(source: str | None, trace_format: str | None, synthetic: dict[str, Any] | None,
                  stream: Any) -> Any:
    """The requests with their ops, for the simulations of what the application sees."""
    from ..analysis import requests as rq

    if synthetic is None:
        return rq.from_trace(Path(str(source)), trace_format)
    ids, sizes = [], []
    import numpy as np

    for chunk_ids, chunk_sizes in stream():
        ids.append(chunk_ids)
        sizes.append(chunk_sizes)
    n = int(sum(len(i) for i in ids))
    return rq._columns(np.arange(n) * 100, np.zeros(n), np.concatenate(ids), np.full(n, 16), np.concatenate(sizes),
                       np.zeros(n), "synthetic")


def ops_byte_curves(requests: Any, policies: list[str], named: tuple[float, ...], sample_rate: float,
                    warmup: int) -> list[Any]:
    from ..analysis.server_size import curves

    return curves(requests, policies, points=16, sizes=named, objects=False, sample_rate=sample_rate,
                  warmup=warmup)


def _size_servers(console: Any, requests: Any, targets: tuple[float, ...], warmup: int,
                  redis_policy: str) -> list[Any]:
    """Redis (evicting by ``redis_policy``) and memcached sized for each target by simulating each server
    (Redis measured first)."""
    from ..analysis.server_size import model_for, size_server
    from ..errors import BackendMissing

    out = []
    for server in ("redis", "memcached"):
        try:
            with console.status(f"measuring and simulating {server}"):
                model = model_for(server, requests, eviction=redis_policy)
                curve = None
                for t in targets:
                    out.append(size_server(requests, server, target=t, policies=(), model=model, warmup=warmup,
                                           curve=curve))
                    curve = out[-1].curve
        except BackendMissing as exc:
            console.print(f"{server} not sized: {exc}", markup=False, highlight=False)
    return out


def _verify_servers(console: Any, sized: list[Any], requests: Any) -> list[Any]:
    """Each server's first reached target, configured on a spawned server and replayed."""
    from ..analysis.server_size import replay_speed, verify

    out, done = [], set()
    speed = replay_speed(requests)
    for s in sized:
        if s.setting is None or s.server in done:
            continue
        done.add(s.server)
        seconds = requests.span_s / speed
        with console.status(f"verifying {s.spawn_url}: replaying {len(requests):,} requests (~{seconds:,.0f} s)"):
            out.append(verify(s, requests, speed=speed))
    return out


def _shown(url: str) -> str:
    from ..target import shown

    return shown(url)


def measured_on(url: str, value_sizes: Any, items: int = 20_000, seed: int = 0) -> Any:
    """Bytes per item on a target's server: a sample with the workload's value sizes written through
    the scheme's own adapter, and the server's memory figure (its row's stats source) read before and
    after. The sample lives under a namespace of its own and is removed afterwards."""
    import uuid

    import numpy as np

    from ..analysis.footprint import Footprint
    from ..backends import create_backend
    from ..errors import PrefillFailed, is_bug
    from ..measure.server_stats import open_source
    from ..run.provide import provide
    from ..schemes import find_scheme
    from ..target import check_params, parse_target, redact_text

    given = parse_target(url)
    check_params(given)  # the same URL rules as run's, before a server is spawned
    with provide(given) as (reachable, _servers):
        row = find_scheme(reachable.scheme)
        if row is None or not row.stats:
            raise UserError(f"{given.redacted}: bytes per item are read from the server's own memory figure, "
                            f"which {reachable.scheme}:// does not report (use a RESP or memcached server)")
        source, error = open_source(reachable)
        if source is None:
            raise UserError(f"{given.redacted}: cannot read the server's memory: {redact_text(error or '', 200)}")
        namespace = f"cm:{uuid.uuid4().hex[:8]}:size:"
        rng = np.random.default_rng(seed)
        sizes = [int(s) for s in (rng.choice(value_sizes, size=items) if len(value_sizes) else [100] * items)]
        keys = [f"{namespace}{i:08d}" for i in range(items)]
        backend = create_backend(reachable, namespace)
        try:
            backend.open()
            try:
                before = source.read().get("used_memory_bytes")
                if before is None:
                    raise UserError(f"{given.redacted}: its server reports no memory figure to measure bytes "
                                    "per item by")
                for start in range(0, items, 1000):
                    batch = zip(keys[start:start + 1000], sizes[start:start + 1000], strict=True)
                    try:
                        backend.set_many({key: b"v" * size for key, size in batch})
                    except Exception as exc:  # the server's refusal, said as run's prefill says it
                        if is_bug(exc):
                            raise
                        raise PrefillFailed(
                            f"{given.redacted}: {reachable.scheme} refused values of {min(sizes):,}–{max(sizes):,} "
                            f"bytes while measuring bytes per item ({start:,} of {items:,} written): "
                            f"{type(exc).__name__}: {redact_text(str(exc), 300)}") from None
                after = source.read()["used_memory_bytes"]
                version = str(backend.info().get("server_version") or "?")
            finally:
                backend.clear_namespace(keys)  # only the sample's own keys
        finally:
            backend.close()
            source.close()
    payload = float(np.mean([len(k) + n for k, n in zip(keys, sizes, strict=True)]))
    return Footprint(reachable.scheme, version, items, (after - before) / items, payload)


def _value_sample(chunks: Any, limit: int = 200_000) -> Any:
    """Value sizes of the first requests (what the footprint sample is drawn from)."""
    import numpy as np

    seen = []
    count = 0
    for _, sizes in chunks:
        if sizes is None:
            break
        seen.append(np.asarray(sizes[: limit - count]))
        count += len(seen[-1])
        if count >= limit:
            break
    return np.concatenate(seen) if seen else np.array([100])


def _latencies(path: Path, label: str | None, targets: tuple[float, ...], compute: Any) -> tuple[Any, str]:
    from ..results import read

    runs = [r for r in read(path).runs if label is None or r.label == label]
    if not runs:
        raise UserError(f"{path}: no run labelled {label!r}")
    found = compute(runs[0], targets)
    if found is None:
        raise UserError(f"{path}: {runs[0].label} has no get with both hits and misses to learn latency from")
    return found, runs[0].label
