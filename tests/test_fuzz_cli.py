"""A bounded fuzz of what users hand the command line: zero tracebacks, zero hangs.

Over 10,000 generated cases run in-process, through the functions the commands call:

- ``target``: ``cachemark run`` flags and target URLs (odd schemes, hosts, ports, userinfo,
  paths with NUL bytes or of absurd length, every known URL parameter with good and bad
  values, nested targets) → ``merge_overrides`` → ``build_experiment`` → ``plan_runs`` →
  for each run what the runner does before its first op: parse the target, provide it
  (``LocalServer.start`` is replaced, so no server starts and nothing connects), check its
  ops, construct its backend, build the engine config, draw the first ops of each stream;
- ``toml``: the preset files and a few small experiments, mutated byte- and line-wise
  (invalid UTF-8, truncation, wrong types, unknown fields, deep nesting, empty files) →
  ``resolve_source`` (``load_toml``) → the same checks;
- ``results``: three results files from real runs (``tests/data/results-*.json``: closed
  loop with server figures and a failed and a skipped run; open loop over a sweep; three
  phases under network profiles), mutated (retyped, removed and added fields, corrupt
  histograms, lone surrogates, rich markup in labels, NaN) or broken as bytes (truncated,
  not UTF-8, nested 100,000 deep) → ``show``'s table, ``report`` in every format,
  ``compare`` and ``thresholds``, called as the CLI calls them.

Each case is seeded by its kind and number, so a failure names the case that reproduces
it: ``python tests/test_fuzz_cli.py results 1234`` runs that one case and prints the
traceback. ``python tests/test_fuzz_cli.py`` runs them all and prints the tally (how the
"before" figures were taken, on a copy of the old tree). A case may end normally or in a
:class:`~cachemark.errors.UserError` whose message is one line; anything else, or a case
running over 2 s, fails the test. A few subprocess checks at the end confirm that the real
command prints one line and exits 2 for representative bad inputs.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from conftest import run_cli

SEED = 20261123
CASES = {"target": 5000, "toml": 2600, "results": 2400}
CASE_LIMIT_S = 2.0  # a case slower than this is a hang (the slowest legitimate ones take ~0.1 s)
# A case that has used this much CPU is interrupted, so a real hang cannot stall the suite. CPU time
# (ITIMER_PROF) rather than wall time: SIGALRM belongs to pytest-timeout, and nothing here waits on I/O.
STOP_AFTER_S = 10.0
DATA = Path(__file__).parent / "data"
NAMESPACE = "cm:f0220000:"

# --- target URLs and run flags ---------------------------------------------------------------

SCHEMES = ["memory", "null", "file", "diskcache", "sqlite", "redis", "rediss", "memcached", "postgresql",
           "postgres", "mysql", "mariadb", "s3", "django", "twolevel", "REDIS", "nosuch", "", "re dis", "redis+x"]
SPAWN_KINDS = ["redis", "memcached", "postgresql", "postgres", "mysql", "mariadb", "s3", "", "nosuch",
               "redis/../x", "REDIS", "memcached "]
HOSTS = ["", "127.0.0.1", "localhost", "127.0.0.1:6379", "127.0.0.1:11211", "[::1]:11211", "[::1", "[::1]x",
         "h1:11211,h2:11212", "127.0.0.1:abc", ":", "127.0.0.1:-1", "127.0.0.1:99999999999999999999",
         "127.0.0.1:6379:1", "a,,b", "exa mple", "%zz", "127.0.0.1:²", "127.0.0.1:0", "bucket"]
USERINFO = ["", "", "", "user@", ":secret@", "user:secret@", ":p/w?x@", ":p%40ss@", "@", "::@", "u:@",
            ":pass\nword@"]
PATHS = ["", "", "/", "/0", "/15", "/²", "/abc", "/tmp/cachemark-fuzz-nonexistent/x",
         "/tmp/cachemark-fuzz-nonexistent/c.db", "//", "/../..", "/%00", "/a\x00b", "/ü", "/0/1",
         "/" + "d" * 300 + "/" + "e" * 5000, "/tmp/cachemark-fuzz-nonexistent/" + "n" * 300]
PARAMS = ["client", "connections", "pipeline", "threads", "protocol", "tags", "hiredis", "noreply",
          "max_entries", "cull_frequency", "size_limit", "shards", "timeout", "eviction_policy", "table",
          "BACKEND", "LOCATION", "DATABASE", "OPTIONS", "TIMEOUT", "KEY_PREFIX", "fast", "slow", "endpoint_url",
          "region", "bucket", "prefix", "password", "db", "memory_mb", "max_connections", "max_item_size",
          "maxmemory", "maxmemory_policy", "settings", "socket_timeout", "ssl", "user", "x", ""]
NESTED = ("fast", "slow", "LOCATION", "DATABASE")
VALUES = ["", "0", "1", "-1", "2", "8", "64", "1000", "1e3", "1.5", "nan", "inf", "-inf", "1e309", "abc",
          "true", "false", "yes", "0x10", " 1", "²", "１", "\n", "a\nb", "\x00", "\t", "é", "%", "%zz", "%0a",
          "[", "]", "'", '"', "redis-py", "engine", "pymemcache", "pylibmc", "hiredis", "resp2", "resp3", "meta",
          "text", "versioned", "native", "none", "django.core.cache.backends.locmem.LocMemCache",
          "django.core.cache.backends.filebased.FileBasedCache", "django.core.cache.backends.db.DatabaseCache",
          "django.core.cache.backends.redis.RedisCache", "django.core.cache.backends.memcached.PyMemcacheCache",
          "django_redis.cache.RedisCache", "diskcache.DjangoCache", "os.system", "nosuch.Backend", "Backend",
          "spawn:redis", "spawn:memcached", "memory://", "file://", "sqlite://", "redis://127.0.0.1:1/0",
          '{"a": 1}', "[1, 2]", "{", "lru", "least-recently-used", "allkeys-lru", "1k", "4m", "100mb",
          "9" * 30, "9" * 5000, "x" * 3000]
ALPHABET = "az09 :/?#[]@!$&'()*+,;=%-._~\x00\x01\n\r\t\x7f\x85\u2028éü²١\ud800\U0001f600"

FLAGS: dict[str, list[Any]] = {
    "keys": [-1, 0, 1, 10, 1000, 10**6, 10**9, 10**12, 2**63],
    "key_dist": ["uniform", "zipf", "zipf:0.5", "zipf:0", "zipf:-1", "zipf:abc", "zipf:1e308", "zipf:nan",
                 "zipf:5", "hotspot", "hotspot:0.1,0.9", "hotspot:2,3", "hotspot:abc", "hotspot:0.1",
                 "hotspot:nan,nan", "sequential", "sequential:1", "x", "", "ZIPF:1", "zipf:\n"],
    "value_size": ["100", "0", "1", "-1", "100-1000", "1000-100", "100:9,10000:1", "100:0", "100:-1", "abc",
                   "1e20", "5000000000", ":", "1-", "-", "1k", "1kb", "100:nan", "1,2,3", "100-", "0-0",
                   "100:inf", "1:1e308,2:1e308", "９"],
    "mix": ["get=90,set=10", "get=abc", "nosuch=1", "get=1e400", "get=nan", "get=inf", "exists+get=100",
            "get=-1,set=2", "=", ",,,", "get", "get=0", "clean=1", "get_many=1", "incr=1", "get=1,get=2",
            "get+=1", "+=1", "get=1e308,set=1e308", "get=\n1"],
    "ttl": [0.0, -1.0, 1.0, 1e308, math.nan, math.inf],
    "prefill": [True, False],
    "warmup": ["0", "1s", "500ms", "-1", "abc", "1e400s", "nan", "inf", "2m", "1h", "0.001us", "1 s", ""],
    "warmup_ops": [-1, 0, 10, 10**12],
    "duration": ["0", "0.05s", "1s", "500ms", "-1", "abc", "1e400s", "nan", "inf", "1e308h", "5", ""],
    "ops": [-1, 0, 1, 100, 10**12],
    "workers": [-1, 0, 1, 2, 512, 513, 10**6],
    "rate": [-1.0, 0.0, 1.0, 1e3, 1e8, 1e308, math.nan, math.inf],
    "seed": [-1, 0, 1, 2**64, -(2**70)],
    "arrival": ["fixed", "poisson", "Poisson", "", "exp\n"],
    "on_error": ["stop", "continue", "halt", ""],
    "error_grace": ["2s", "0", "-1s", "1e9", "abc", "0.001s"],
}
SWEEPS = ["value_size=1024,10000", "workers=1,2", "workers=", "nosuch=1", "=", "mix=get=1;set=2", "connections=1,2",
          "pipeline=1,4", "keys=0,1", "rate=1,abc", "duration=1s", "value_size", "workers=1,2,3,4,5,6,7,8",
          "key_dist=zipf,uniform", "ttl=nan", "connections=abc"]
NETWORKS = ["same-host", "lan", "nosuch", "2ms", "-1ms", "1e400ms", "lan:bandwidth=abc", "", ",",
            "same-host,cross-zone", "0ms", "nanms", "lan:jitter=1ms", "cross-region:loss=0.5", "2ms:bandwidth=1gbit"]


GOOD_URLS = [
    "memory://", "memory://?max_entries=100", "null://", "file://", "file:///tmp/cachemark-fuzz-nonexistent/f",
    "diskcache://", "diskcache:///tmp/cachemark-fuzz-nonexistent/d?shards=4&size_limit=1000000", "sqlite://",
    "sqlite:///tmp/cachemark-fuzz-nonexistent/c.db?max_entries=100&cull_frequency=3", "redis://127.0.0.1:6379/0",
    "redis://:pw@127.0.0.1:6379/1?client=engine&pipeline=4&connections=2", "rediss://127.0.0.1:6380/0",
    "redis://127.0.0.1:6379/0?client=engine&protocol=resp3&threads=2", "redis://127.0.0.1:6379/0?tags=versioned",
    "memcached://127.0.0.1:11211", "memcached://h1:11211,h2:11212?client=pylibmc",
    "memcached://127.0.0.1:11211?client=engine&protocol=meta", "memcached://127.0.0.1:11211?client=pymemcache",
    "postgresql://u:p@127.0.0.1:5432/db", "mysql://u:p@127.0.0.1:3306/db", "mariadb://127.0.0.1:3306/db",
    "s3://bucket?endpoint_url=http://127.0.0.1:9000", "s3://bucket/prefix?region=eu-west-1",
    "django://?BACKEND=django.core.cache.backends.locmem.LocMemCache",
    "django://?BACKEND=django.core.cache.backends.filebased.FileBasedCache&LOCATION=file://",
    "django://?BACKEND=django.core.cache.backends.redis.RedisCache&LOCATION=spawn:redis",
    "django://?BACKEND=django.core.cache.backends.memcached.PyMemcacheCache&LOCATION=spawn:memcached",
    "django://?BACKEND=django.core.cache.backends.db.DatabaseCache&DATABASE=sqlite://",
    "twolevel://?fast=memory://&slow=spawn:redis", "twolevel://?fast=spawn:memcached&slow=file://",
    "spawn:redis", "spawn:redis?password=secret&maxmemory=10mb", "spawn:memcached?memory_mb=64&threads=2",
    "spawn:memcached?client=pylibmc&max_item_size=1m", "spawn:postgresql", "spawn:mysql", "spawn:s3",
    "memory://?tags=versioned", "spawn:redis?client=engine&threads=2", "spawn:memcached?client=engine",
]
GOOD_FLAGS: dict[str, list[Any]] = {
    "keys": [1, 10, 1000, 100_000], "key_dist": ["uniform", "zipf", "zipf:0.5", "hotspot", "hotspot:0.1,0.9",
                                                 "sequential"],
    "value_size": ["100", "100-1000", "100:9,10000:1", "1k", "0", "4kb"],
    "mix": ["get=90,set=10", "exists+get=100", "get_many=1,set=1", "incr=1", "delete=1,set=1", "get=1",
            "set_many=1,get_many=1", "clean=1,set=9"],
    "ttl": [0.0, 1.0, 60.0], "prefill": [True, False], "warmup": ["0", "1s", "500ms"], "warmup_ops": [0, 10],
    "duration": ["0.05s", "1s", "5"], "ops": [1, 100], "workers": [1, 2, 4], "rate": [1.0, 1e3, 1e5],
    "seed": [0, 1, 2**64], "arrival": ["fixed", "poisson"], "on_error": ["stop", "continue"], "error_grace": ["2s"],
}


def _text(rng: random.Random, longest: int = 12) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))


def _value(rng: random.Random) -> str:
    return rng.choice(VALUES) if rng.random() < 0.85 else _text(rng)


def _url(rng: random.Random, depth: int = 0) -> str:
    if rng.random() < 0.5:  # a target that should work, perhaps with one odd parameter
        url = rng.choice(GOOD_URLS)
        if rng.random() < 0.3:
            url += ("&" if "?" in url else "?") + f"{rng.choice(PARAMS)}={quote(_value(rng), errors='surrogatepass')}"
        return url
    roll = rng.random()
    if roll < 0.05:
        return rng.choice(["", "  ", "redis:/x", "spawn", "://", "memory:", _text(rng, 30), "x" * 10000])
    params = []
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3, 5])):
        name = rng.choice(PARAMS) if rng.random() < 0.95 else _text(rng, 6)
        value = _url(rng, depth + 1) if name in NESTED and depth < 2 and rng.random() < 0.6 else _value(rng)
        value = rng.choice([value, value, quote(value, safe="", errors="surrogatepass"),
                            quote(value, safe=":/?=&", errors="surrogatepass")])
        params.append(f"{name}={value}" if rng.random() < 0.95 else name)
    query = ("?" + "&".join(params)) if params or rng.random() < 0.05 else ""
    if roll < 0.2:
        url = f"spawn:{rng.choice(SPAWN_KINDS)}{query}"
    else:
        url = (f"{rng.choice(SCHEMES)}://{rng.choice(USERINFO)}{rng.choice(HOSTS)}{rng.choice(PATHS)}"
               f"{query}")
    if rng.random() < 0.05:
        at = rng.randint(0, len(url))
        url = url[:at] + _text(rng, 3) + url[at:]
    return url


def _flags(rng: random.Random) -> dict[str, Any]:
    table = GOOD_FLAGS if rng.random() < 0.6 else FLAGS
    return {name: rng.choice(values) for name, values in table.items() if rng.random() < 0.2}


# --- what `cachemark run` does with an experiment before the first op ----------------------------


def _check_experiment(experiment: Any) -> None:
    from cachemark.plan import describe, experiment_record, plan_runs

    specs = plan_runs(experiment)
    json.dumps(experiment_record(experiment))
    for spec in specs[:4]:
        describe(spec)
        _check_run(spec.target.url, spec.workload)


def _check_run(url: str, workload: Any) -> None:
    """The runner's steps up to its first op, with nothing started and nothing connected."""
    from cachemark.backends import create_backend
    from cachemark.plan import default_label
    from cachemark.run.engine_runner import phase_config
    from cachemark.run.preflight import check_ops
    from cachemark.run.preflight import preflight_target as _preflight_target
    from cachemark.run.preflight import uses_engine as _uses_engine
    from cachemark.run.provide import provide
    from cachemark.target import parse_target
    from cachemark.workload.ops import OpStream

    target = parse_target(url)
    default_label(target)
    with provide(target) as (reachable, servers):
        for server in servers:
            server.describe()
        preflight = _preflight_target(reachable)
        check_ops(preflight, workload)
        create_backend(preflight, NAMESPACE)  # constructors only: nothing connects before open()
        phases = workload.effective_phases()
        if _uses_engine(reachable):
            for index, phase in enumerate(phases):
                phase_config(reachable, workload, phase, NAMESPACE, index == 0)
        if workload.keys <= 100_000:
            for phase in phases:
                next(iter(OpStream(workload, phase, 0, workload.workers, 16).batches()), None)


def target_case(rng: random.Random, tmp: Path) -> Callable[[], None]:
    targets = [_url(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    flags = _flags(rng)
    labels = [_text(rng) for _ in targets] if rng.random() < 0.1 else None
    sweep = [rng.choice(SWEEPS) for _ in range(rng.choice([1, 2]))] if rng.random() < 0.1 else None
    repeat = rng.choice([0, 1, 2, 101, -1]) if rng.random() < 0.05 else None
    network = rng.choice(NETWORKS) if rng.random() < 0.1 else None

    def run() -> None:  # what cli.run builds, minus the run itself
        from cachemark.cli.sources import experiment_from

        _check_experiment(experiment_from({}, "command line", targets, flags, labels, sweep, repeat, network))

    return run


# --- experiment TOML files ---------------------------------------------------------------------

SMALL_TOML = [
    b'targets = ["memory://"]\n[workload]\nkeys = 10\nduration = "1s"\n',
    b'[[targets]]\nBACKEND = "django.core.cache.backends.locmem.LocMemCache"\nLOCATION = "x"\n',
    b'targets = ["spawn:redis", "memory://?max_entries=100"]\n[sweep]\nvalue_size = [100, 1000]\nworkers = [1, 2]\n',
    b'name = "phases"\n[workload]\nrate = 100.0\narrival = "poisson"\n[[workload.phases]]\nname = "a"\nops = 10\n'
    b'[[workload.phases]]\nname = "b"\nmix = { get = 1 }\nduration = "1s"\n',
    b'targets = ["memory://?tags=versioned"]\n[workload]\nmix = { clean = 1, set = 10 }\n[workload.tags]\n'
    b"pool = 10\nmax_per_key = 3\n",
    b'targets = ["spawn:memcached?memory_mb=64&threads=2", "redis://127.0.0.1:6379/0?client=engine&pipeline=4"]\n'
    b'network = "same-host,lan"\nrepeat = 2\n',
]
TOML_LINES = [
    'keys = "abc"', "keys = -5", "keys = 1e400", "keys = 99999999999999999999999", "workload = 3", "workload = []",
    "[workload]", "[[workload.phases]]", "[workload.tags]", "tags = 5", "targets = []", "targets = 5",
    "targets = [5]", "targets = [{}]", "targets = [{BACKEND = 5}]", 'targets = "spawn:memcached?memory_mb=abc"',
    'targets = ["spawn:memcached?settings=x"]', 'targets = ["redis://:pa/ss@127.0.0.1:6379"]', "x = 1",
    'sweep = {workers = [1, "a"]}', "sweep = 5", 'sweep = {mix = ["get=1", "set=1"]}', "sweep = {workers = []}",
    'mix = {get = "x"}', 'mix = "get=1"', "mix = 5", "mix = {}", 'network = "nosuch"', "network = 5",
    "repeat = 0", "repeat = true", "value_size = 1e400", "value_size = [1, 2]", 'duration = "1s"', "duration = -1",
    "duration = nan", "duration = inf", "rate = inf", "rate = nan", "rate = -1", 'labels = ["a"]', 'labels = "a"',
    "name = 5", 'description = ["x"]', "phases = 5", "phases = [1]", "phases = [{name = 5}]",
    'key_dist = "zipf:abc"', "seed = -1", '"" = 1', '"a\\nb" = 1', "a.b.c = 1", "workload.keys = 5",
    'arrival = "poisson"', 'on_error = "x"', "error_grace = 0", "date = 1979-05-27T07:32:00Z", "keys = 1979-05-27",
    "value_size = 00:32:00", 'name = "\\u0000"', 'name = "\\uD800"', "workers = 0", "ops = 0",
    'get_many_count = 0', "verify_reads = 2", "[workload.mix]", "get = 1e308", 'targets = ["spawn:redis?' + "x" * 50,
]
TOML_SNIPPETS = [b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"\r", b"\n", b"[", b"]", b"{", b"}", b'"', b"'",
                 b"=", b"#", b"\\u0000", b"\\uD800", b",", b".", b"\t", b"\xef\xbb\xbf"]


def _deep_toml(rng: random.Random) -> str:
    n = rng.choice([40, 70, 400, 3000, 30_000])
    return rng.choice([
        "a = " + "[" * n + "]" * n,
        "a = " + "{ b = " * n + "1" + " }" * n,
        "[" + ".".join(["a"] * n) + "]",
        "workload.keys" + ".k" * n + " = 1",
        'x = "' + "a" * 200_000 + '"',
    ])


def _mutate_lines(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    at = rng.randrange(len(lines))
    roll = rng.random()
    if roll < 0.3:
        line = _deep_toml(rng) if rng.random() < 0.08 else rng.choice(TOML_LINES)
        lines.insert(at, line.encode("utf-8", "surrogatepass"))
    elif roll < 0.5:
        del lines[at]
    elif roll < 0.65:
        lines.insert(at, lines[at])
    elif roll < 0.8:
        other = rng.randrange(len(lines))
        lines[at], lines[other] = lines[other], lines[at]
    else:  # keep the key, give it another value
        key = lines[at].split(b"=", 1)[0]
        value = rng.choice(TOML_LINES).split("=", 1)[-1]
        lines[at] = key + b"=" + value.encode("utf-8", "surrogatepass")
    return b"\n".join(lines)


def _mutate_bytes(rng: random.Random, data: bytes, snippets: list[bytes]) -> bytes:
    if not data:
        return rng.choice(snippets)
    roll = rng.random()
    at = rng.randrange(len(data))
    if roll < 0.35:
        return data[:at]
    if roll < 0.65:
        return data[:at] + bytes([data[at] ^ rng.randint(1, 255)]) + data[at + 1:]
    return data[:at] + rng.choice(snippets) + data[at:]


def _mutate_toml(rng: random.Random, data: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.04:
        return rng.choice([b"", b"   \n", b"# only a comment\n", b"\xef\xbb\xbf", data.decode().encode("utf-16"),
                           data.replace(b"\n", b"\r\n"), b"\xef\xbb\xbf" + data, b"[]", b"{}", b"null"])
    for _ in range(rng.choice([1, 1, 2, 3])):
        data = _mutate_lines(rng, data) if rng.random() < 0.7 else _mutate_bytes(rng, data, TOML_SNIPPETS)
    return data


def _toml_seeds() -> list[bytes]:
    from importlib import resources

    presets = resources.files("cachemark.presets")
    return [p.read_bytes() for p in sorted(presets.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".toml")] + SMALL_TOML


def toml_case(rng: random.Random, tmp: Path) -> Callable[[], None]:
    from cachemark.cli.sources import resolve_source
    from cachemark.spec import build_experiment, merge_overrides

    path = tmp / rng.choice(["experiment.toml", "x.toml", "dir/exp.toml"])
    data = _mutate_toml(rng, rng.choice(_TOML_SEEDS))
    flags = _flags(rng) if rng.random() < 0.3 else {}
    targets = [_url(rng)] if rng.random() < 0.1 else None

    def run() -> None:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        fields, where = resolve_source(str(path))
        _check_experiment(build_experiment(merge_overrides(fields, targets, flags), where))

    return run


# --- results files -----------------------------------------------------------------------------


def _histogram(digits: int = 3, lowest: int = 1, highest: int = 60_000_000_000, payload: bytes = b"\x02",
               length_field: int | None = None, cookie: int = 0x1C849313) -> str:
    header = struct.pack(">iiiiqqd", cookie, len(payload) if length_field is None else length_field, 0, digits,
                         lowest, highest, 1.0)
    deflated = zlib.compress(header + payload)
    return base64.b64encode(struct.pack(">ii", 0x1C849314, len(deflated)) + deflated).decode()


BAD_HISTOGRAMS = [
    _histogram(digits=2), _histogram(highest=3_600_000_000_000), _histogram(lowest=1000), _histogram(cookie=7),
    _histogram(payload=b"\x01" * 40_000),  # counts past the last slot
    _histogram(payload=b"\xff" * 9 + b"\x01"),  # a 9-byte count (the slow path)
    _histogram(payload=b"\x80\x80"),  # a count cut off
    _histogram(payload=b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"),  # a run of empty slots past the range
    _histogram(payload=b"\xfe\xff\xff\xff\xff\xff\xff\x7f" * 3),  # counts whose total overflows int64
    _histogram(length_field=10**6), _histogram(length_field=-5),
    base64.b64encode(struct.pack(">ii", 0x1C849314, 20) + zlib.compress(b"\x00" * 10_000_000)).decode(),
    base64.b64encode(struct.pack(">ii", 0x1C849314, 5) + b"notzlib").decode(),
    "HISTFAAAAB", "HIST", "", "!!!!", "é", "\ud800", "AAAA" * 10,
    _histogram(payload=b""),  # valid: an empty histogram
]
ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 7, 2**63, 2**64, 10**30, 1.5, -1e300, 1e300, 1e16, math.nan, math.inf, -math.inf,
    "", "5", "1.5", "abc", "\n", "a\nb", "\x00", "\ud800", "[bold]x[/]", "[/]", "[link=x]", "<script>", "x" * 5000,
    [], {}, [1], {"a": 1}, ["x"], {"": None}, "ok", "failed", "skipped", "interrupted", "open", "closed", "main",
]


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _nodes(document: Any) -> list[tuple[Any, Any]]:
    """(container, key) for every value in the document."""
    out, stack = [], [document]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            out.append((node, key))
            if isinstance(value, dict | list):
                stack.append(value)
    return out


_SEED_PATHS: dict[str, list[tuple[Any, ...]]] = {}


def _seed_paths(text: str) -> list[tuple[Any, ...]]:
    """The path of every value in a seed document (computed once per seed)."""
    if text not in _SEED_PATHS:
        paths, stack = [], [(json.loads(text), ())]
        while stack:
            node, where = stack.pop()
            for key, value in node.items() if isinstance(node, dict) else enumerate(node):
                paths.append((*where, key))
                if isinstance(value, dict | list):
                    stack.append((value, (*where, key)))
        _SEED_PATHS[text] = paths
    return _SEED_PATHS[text]


def _pick(rng: random.Random, document: Any, text: str) -> tuple[Any, Any]:
    """A random (container, key) of ``document``: a seed path while it still leads somewhere."""
    path = rng.choice(_seed_paths(text))
    node = document
    try:
        for key in path[:-1]:
            node = node[key]
        node[path[-1]]
    except (KeyError, IndexError, TypeError):
        return rng.choice(_nodes(document))
    return node, path[-1]


def _mutate_node(rng: random.Random, document: dict[str, Any], text: str) -> None:
    container, key = _pick(rng, document, text)
    value = container[key]
    roll = rng.random()
    if isinstance(value, str) and value.startswith("HIST") and roll < 0.7:
        at = rng.randrange(len(value))
        container[key] = rng.choice([
            value[:at], value[:at] + rng.choice("A/+=!é") + value[at + 1:], rng.choice(BAD_HISTOGRAMS),
            value[::-1], value + value])
    elif roll < 0.45:
        container[key] = rng.choice(ODD_VALUES) if rng.random() < 0.95 else _nest(rng.choice([30, 70, 400]))
    elif roll < 0.55 and isinstance(container, dict):
        del container[key]
    elif roll < 0.62 and isinstance(container, dict):
        container[rng.choice([_text(rng), "summary", "timeseries", "server", "histograms", "extra"])] = (
            rng.choice(ODD_VALUES))
    elif roll < 0.7 and isinstance(container, dict):
        container[rng.choice(["", "[/]", "a\nb", "\ud800", "get", "x" * 300, _text(rng)])] = container.pop(key)
    elif roll < 0.8 and isinstance(value, list) and value:
        rng.choice([value.clear, lambda: value.append(value[0]), lambda: value.pop(rng.randrange(len(value))),
                    lambda: value.insert(0, rng.choice(ODD_VALUES))])()
    elif isinstance(value, bool):
        container[key] = not value
    elif isinstance(value, int | float):
        container[key] = rng.choice([-value, value * 1e20, float(value), int(value) if math.isfinite(value) else 0,
                                     value + 0.5, str(value), 10**18 + 1])
    elif isinstance(value, str):
        container[key] = rng.choice([value + _text(rng), _text(rng), value * 50, value.upper(), ""])
    else:
        container[key] = rng.choice(ODD_VALUES)


ODD_NAMES = ["[/]", "[bold]x[/bold]", "[link=file:///etc/passwd]x", "a\nb", "a\rb", "\x1b[31mred", "|", "a|b\nc",
             "", " ", "é", "\u2028", "<b>x</b>", '"', "'", "\\", "x" * 400, "main", "memory", "redis", "1e309",
             "-1e300", "1e-300", "nan", "0", "-5", "m4.xlarge", "{{ $value }}", "${x}", "%s", "\ud800"]


def _rename(rng: random.Random, document: dict[str, Any]) -> None:
    """Give a name a reader sees (label, phase, op, sweep value, profile, experiment) an odd value."""
    runs = document.get("runs") or [{}]
    run = rng.choice(runs)
    phases = run.get("phases") or [{}]
    phase = rng.choice(phases)
    odd = rng.choice(ODD_NAMES)
    where = rng.choice(["label", "display", "target", "reason", "phase", "op", "sweep", "profile", "experiment",
                        "description", "environment", "created", "server_kind", "scheme", "error_kind", "outcome"])
    if where in ("label", "display", "target", "reason"):
        run[where] = odd
    elif where == "phase":
        phase["name"] = odd
    elif where == "op" and phase.get("ops"):
        phase["ops"][odd] = phase["ops"].pop(rng.choice(list(phase["ops"])))
    elif where == "sweep":
        for other in runs:
            other["sweep"] = {rng.choice(["value_size", "workers", odd]): rng.choice([odd, 1e300, -1e300, 1e-300, 7])}
    elif where == "profile":
        run["network"] = {**(run.get("network") or {}), "profile": odd}
    elif where in ("experiment", "description"):
        document.setdefault("experiment", {})["name" if where == "experiment" else "description"] = odd
    elif where == "environment":
        document.setdefault("environment", {})[rng.choice(["cpu", "os", odd])] = odd
    elif where == "created":
        document["created"] = odd
    elif where == "server_kind":
        run["server"] = {**(run.get("server") or {}), "kind": odd}
    elif where == "scheme":
        run["backend"] = {**(run.get("backend") or {}), "scheme": odd}
    elif phase.get("ops"):
        op = phase["ops"][rng.choice(list(phase["ops"]))]
        if where == "error_kind":
            op["errors"] = {odd: 3}
        elif op.get("histograms"):
            op["histograms"][odd] = op["histograms"].pop(rng.choice(list(op["histograms"])))


def _mutate_results(rng: random.Random, text: str) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        data = text.encode()
        for _ in range(rng.choice([1, 1, 2])):
            data = _mutate_bytes(rng, data, [b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"[", b"{", b'"', b",",
                                             b"NaN", b"-Infinity", b"1e999", b"9" * 5000, b"\\ud800", b"\\u0000"])
        return data
    if roll < 0.14:
        n = rng.choice([65, 1000, 100_000])
        return rng.choice([
            b"", b"null", b"[]", b"{}", b"1", b'"x"', b'{"schema": "cachemark.results/1"}',
            b'{"schema": "cachemark.results/1", "runs": ' + b"[" * n + b"]" * n + b"}",
            b'{"schema": "cachemark.results/1", "x": ' + b'{"a":' * n + b"1" + b"}" * n + b"}",
            b'{"schema": "cachemark.results/2", "runs": []}', text.encode("utf-16"), b"\xef\xbb\xbf" + text.encode(),
            b"[" * n])
    document = json.loads(text)
    if rng.random() < 0.3:
        _rename(rng, document)
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        _mutate_node(rng, document, text)
    out = json.dumps(document, ensure_ascii=rng.random() < 0.5, allow_nan=True)
    return out.encode("utf-8", "surrogatepass")


@functools.cache
def _labels(text: str) -> list[str]:
    return sorted({run.get("label", "") for run in json.loads(text).get("runs", [])})


def results_case(rng: random.Random, tmp: Path) -> Callable[[], None]:
    from rich.console import Console

    from cachemark.cli import report_commands as commands
    from cachemark.report.table import render
    from cachemark.results import read

    seed_path = rng.choice(_RESULT_SEEDS)
    seed_text = seed_path.read_text()
    data = _mutate_results(rng, seed_text)
    path = tmp / rng.choice(["results.json", "run.json"])
    roll = rng.random()
    baseline = rng.choice([None, None, *_labels(seed_text), "nosuch", "[/]"])

    def run() -> None:
        path.write_bytes(data)
        if roll < 0.03:  # show (rich is slow: ~25 ms a table, so seldom)
            render(read(path), Console(file=io.StringIO(), width=rng.choice([20, 80, 160, 400])))
        elif roll < 0.45:  # report
            fmt = rng.choices(["markdown", "csv", "json", "html"], weights=[4, 3, 3, 1])[0]
            out = tmp / rng.choice(["out.md", "out.csv", "out.json", "out.html", "-"])
            commands.report(results=path, out=out, format=fmt, baseline=baseline if fmt in ("markdown", "html")
                            else None)
        elif roll < 0.68:  # compare
            fmt = rng.choices(["table", "markdown", "json"], weights=[1, 6, 6])[0]
            pair = rng.choices([(seed_path, [path]), (path, [seed_path]), (path, [path, seed_path])],
                               weights=[4, 4, 1])[0]
            out = rng.choice([None, tmp / "compare.out"])
            commands.compare(base=pair[0], new=pair[1], format=fmt, out=out)
        else:  # thresholds
            commands.thresholds(
                results=[path], levels=rng.choice(["100,90,80", "100", "abc", "0", "1001", "50,50"]),
                metric=rng.choice(["bandwidth", "ops", "cpu"]),
                format=rng.choice(["json", "cloudformation", "prometheus"]),
                label=rng.choice([None, None, ["m4.xlarge"], ["[/]"], ["a", "b"]]),
                out=rng.choice([None, tmp / "map.yaml", tmp / "map.json"]))

    return run


# --- the runner --------------------------------------------------------------------------------

KINDS: dict[str, Callable[[random.Random, Path], Callable[[], None]]] = {
    "target": target_case, "toml": toml_case, "results": results_case}
_TOML_SEEDS: list[bytes] = []
_RESULT_SEEDS: list[Path] = sorted(DATA.glob("results-*.json"))


class _Stopped(BaseException):
    """Raised into a case that ran past STOP_AFTER_S."""


@dataclass
class Tally:
    kind: str
    cases: int = 0
    clean: int = 0  # ended normally
    user_errors: int = 0  # ended in a one-line UserError
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (case, group, detail)
    slow: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0
    slowest: tuple[float, int] = (0.0, -1)

    def groups(self) -> Counter[str]:
        return Counter(group for _, group, _ in self.failures)

    def summary(self) -> str:
        return (f"{self.kind}: {self.cases} cases in {self.seconds:.1f} s: {self.clean} clean, "
                f"{self.user_errors} one-line errors, {len(self.failures)} failures, {len(self.slow)} over "
                f"{CASE_LIMIT_S:.0f} s (slowest {self.slowest[0] * 1000:.0f} ms, case {self.slowest[1]})")


def _group(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "cachemark" in f.filename and "test_fuzz_cli" not in f.filename] or frames[-1:]
    where = f"{Path(ours[-1].filename).name}:{ours[-1].name}" if ours else "?"
    return f"{type(exc).__name__} in {where}"


def _alarm(signum: int, frame: Any) -> None:
    raise _Stopped


@contextlib.contextmanager
def _as_one_command() -> Iterator[None]:
    """Each case stands for one command, i.e. a fresh process: the secrets ``target`` remembers
    from the URLs it parsed start empty and are dropped afterwards, so ten thousand fuzzed
    "passwords" (``1000``, ``engine``) are neither masked in later cases nor in later tests."""
    from cachemark import target

    remembered = getattr(target, "_REMEMBERED", None)  # a set or a dict: emptied and refilled in place
    saved = remembered.copy() if remembered is not None else None
    if remembered is not None:
        remembered.clear()
    try:
        yield
    finally:
        if remembered is not None:
            remembered.clear()
            remembered.update(saved)


def run_case(kind: str, index: int, tmp: Path, tally: Tally, verbose: bool = False) -> None:
    from cachemark.errors import UserError

    rng = random.Random(f"{SEED}/{kind}/{index}")
    start = time.perf_counter()
    signal.setitimer(signal.ITIMER_PROF, STOP_AFTER_S)
    try:
        # A RuntimeWarning (numpy: overflow, NaN in a division) means a figure silently became garbage.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings(), _as_one_command():
            warnings.simplefilter("error", RuntimeWarning)
            KINDS[kind](rng, tmp)()
        tally.clean += 1
    except UserError as exc:
        message = str(exc)
        if len(message.splitlines()) != 1 or not message.strip():
            tally.failures.append((index, "UserError not on one line", repr(message)[:300]))
        else:
            tally.user_errors += 1
    except _Stopped:
        tally.failures.append((index, "hang", f"stopped after {STOP_AFTER_S:.0f} s"))
    except Exception as exc:  # noqa: BLE001 — every other exception is a traceback a user would see
        tally.failures.append((index, _group(exc), f"{type(exc).__name__}: {str(exc)[:200]}"))
        if verbose:
            traceback.print_exc()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    elapsed = time.perf_counter() - start
    tally.cases += 1
    if elapsed > CASE_LIMIT_S:
        tally.slow.append((index, elapsed))
    tally.slowest = max(tally.slowest, (elapsed, index))


def run_kind(kind: str, tmp: Path, count: int | None = None) -> Tally:
    if not _TOML_SEEDS:
        _TOML_SEEDS.extend(_toml_seeds())
    tally = Tally(kind)
    previous = signal.signal(signal.SIGPROF, _alarm)
    cwd = os.getcwd()
    os.chdir(tmp)  # anything a backend might create by a relative path lands in the temp dir
    start = time.perf_counter()
    try:
        for index in range(CASES[kind] if count is None else count):
            run_case(kind, index, tmp, tally)
    finally:
        os.chdir(cwd)
        signal.signal(signal.SIGPROF, previous)
    tally.seconds = time.perf_counter() - start
    return tally


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spawn:`` targets are provided as objects only: their servers never start."""
    from cachemark.lab.base import LocalServer

    monkeypatch.setattr(LocalServer, "start", lambda self: self)


def test_the_fuzz_has_at_least_ten_thousand_cases():
    assert sum(CASES.values()) >= 10_000
    assert len(_RESULT_SEEDS) == 3


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory in memory when there is one: the fuzz writes ~10,000 small files."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="cachemark-fuzz-", dir="/dev/shm"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("kind", list(KINDS))
def test_fuzz_ends_in_one_line_or_success(kind, scratch, nothing_starts):
    tally = run_kind(kind, scratch)
    print(tally.summary())
    details = "\n".join(f"  {kind} case {i}: {group}: {detail}" for i, group, detail in tally.failures[:15])
    assert not tally.failures, f"{tally.summary()}\n{tally.groups().most_common()}\n{details}"
    assert not tally.slow, tally.summary()
    assert tally.user_errors > tally.cases // 10 and tally.clean > tally.cases // 20  # both paths exercised


# --- classes the fuzz found, one test each ------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("workload.keys" + ".k" * 100_000 + " = 1", "line 1: a dotted key of more than 64 parts"),  # was minutes
    ("[a" + ".b" * 100_000 + "]", "line 1: a dotted key of more than 64 parts"),
    ("a = " + "[" * 5000 + "]" * 5000, "malformed TOML: nested too deeply to read"),  # was RecursionError
    ("workload = {a = " + "[" * 70 + "]" * 70 + "}", "nested deeper than 64 levels"),
    ("", "empty experiment file"),
    ("# nothing but a comment\n", "empty experiment file"),
    ("runs = []", "runs: unknown field at the top level of an experiment; known: name, description, targets"),
    ("targets = 5", "targets: expected a target URL or a list of them"),  # was TypeError
    ('"a\\nb" = 1', "['a\\nb']: unknown field"),
    ("[workload]\nduration = inf", "duration must be a finite number of seconds"),  # was a run without end
    ("[workload]\nrate = inf", "workload.rate: Input should be a finite number"),
    ('[workload]\nmix = "get=1e400"', "must be a finite number"),
    ('[workload]\nvalue_size = "1:1e308,2:1e308"', "value_size weights must be finite"),  # was NaN shares
    ('[workload]\nvalue_size = "1e400k"', "value_size '1e400k': expected a size"),  # was OverflowError
])
@pytest.mark.serial
def test_experiment_files_that_broke_now_end_in_one_line(tmp_path, text, message):
    from cachemark.errors import SpecError
    from cachemark.spec import build_experiment, load_toml

    path = tmp_path / "x.toml"
    path.write_text(text)
    start = time.perf_counter()
    with pytest.raises(SpecError) as caught:
        build_experiment(load_toml(path), str(path))
    assert time.perf_counter() - start < 1.0
    assert message in str(caught.value) and len(str(caught.value).splitlines()) == 1, str(caught.value)


@pytest.mark.parametrize(("options", "message"), [
    ({"memory_mb": "abc"}, "memory_mb='abc' must be a whole number from 1 to 1048576"),
    ({"memory_mb": "9" * 40}, "must be a whole number"),
    ({"threads": "0"}, "threads='0' must be a whole number from 1 to 256"),
    ({"max_item_size": "1g"}, "max_item_size='1g' must be a whole number from 1024"),
    ({"settings": "-X"}, "unknown option 'settings'"),
])
def test_memcached_options_are_checked_before_anything_starts(options, message):
    from cachemark.errors import SpecError
    from cachemark.lab.memcached import MemcachedServer

    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        MemcachedServer(**options)
    assert MemcachedServer(memory_mb="64", max_item_size="4m").options == {"memory_mb": 64,
                                                                           "max_item_size": 4 << 20}


def test_a_preset_name_is_never_a_path():
    from cachemark.errors import SpecError
    from cachemark.presets import load_preset

    with pytest.raises(SpecError, match="no preset named"):
        load_preset("../spec")


# --- the real command: one line, exit 2 --------------------------------------------------------


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("setup", "args", "message"), [
    (lambda d: (d / "x.toml").write_bytes(b'name = "\xff"\n'), ["run", "x.toml", "--no-calibrate"],
     "x.toml: not UTF-8 text (byte 0xff at offset 8)"),
    (lambda d: (d / "empty.toml").write_bytes(b""), ["run", "empty.toml", "--no-calibrate"],
     "empty.toml: empty experiment file"),
    (lambda d: (d / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000), ["run", "deep.toml"],
     "deep.toml: malformed TOML: nested too deeply"),
    (lambda d: (d / "r.json").write_text(
        (DATA / "results-closed-server.json").read_text().replace('"count":200104', '"count":"200104"')),
     ["show", "r.json"], "r.json: runs[0].phases[0].ops.get.count: expected an integer, not a string"),
    (lambda d: (d / "r.json").write_bytes(b"[" * 100_000), ["report", "r.json"], "r.json: not a results file"),
    (lambda d: None, ["run", "-t", "spawn:memcached?memory_mb=lots", "--no-calibrate"],
     "spawn:memcached: memory_mb='lots' must be a whole number"),
    (lambda d: None, ["run", "-t", "spawn:memcached?settings=-X", "--no-calibrate"],
     "spawn:memcached: unknown parameter 'settings'"),
])
def test_the_command_prints_one_line_and_exits_2(tmp_path, setup, args, message):
    setup(tmp_path)
    result = _cli(*args, cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize(("columns", "command"), [
    ("abc", "show"), ("-5", "show"), ("0", "show"), ("99999999999999999999", "show"), ("12.5", "show"),
    ("abc", "presets"), ("abc", "compare"), ("", "targets"),
])
def test_a_bad_columns_breaks_no_command(tmp_path, columns, command):
    (tmp_path / "r.json").write_text((DATA / "results-closed-server.json").read_text())
    args = {"show": ["show", "r.json"], "compare": ["compare", "r.json", "r.json"]}.get(command, [command])
    result = _cli(*args, cwd=tmp_path, env={"COLUMNS": columns})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 160  # the pipe width: not 0, not 10**20 columns


if __name__ == "__main__":  # python tests/test_fuzz_cli.py [kind [case]]: tally, or one case with its traceback
    from cachemark.lab.base import LocalServer

    LocalServer.start = lambda self: self  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None) as scratch:
        if len(sys.argv) == 3:
            _TOML_SEEDS.extend(_toml_seeds())
            signal.signal(signal.SIGPROF, _alarm)
            one = Tally(sys.argv[1])
            run_case(sys.argv[1], int(sys.argv[2]), Path(scratch), one, verbose=True)
            print(one.summary(), one.failures)
        else:
            for name in sys.argv[1:2] or list(KINDS):
                result = run_kind(name, Path(scratch))
                print(result.summary())
                for group, n in result.groups().most_common():
                    print(f"  {n:5d}  {group}")
