"""The spine's rules, checked over the source: every fact about a scheme in its row, every URL parsed by target.py.

Two scans of ``src/cachemark`` (no URL parsing outside target.py, no scheme name compared as a string
outside schemes.py), and the worked example of docs/architecture.md ("adding a scheme"): ``keydb://``,
a RESP server added as one row, accepted by every command that reaches a server.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachemark.errors import SpecError
from cachemark.schemes import find_scheme, lab_kinds, schemes

SRC = Path(__file__).resolve().parent.parent / "src" / "cachemark"
URL_PARSERS = frozenset({"urlsplit", "urlparse", "parse_qs", "parse_qsl"})

# Comparisons the scan cannot tell from a scheme's: a string that is a scheme's name but stands for
# something else (path under src/cachemark, the comparison as ast.unparse prints it)
NOT_SCHEMES = {
    # the framework a backend's client ran in (its info's "framework"), which shares Django's scheme name
    ("report/verdict.py", "info.get('framework') == 'django'"),
}


@functools.cache  # parsed once for the file's scans (~1.2 s of CPU each), which only read the trees
def _modules() -> tuple[tuple[str, ast.Module], ...]:
    return tuple((str(path.relative_to(SRC)), ast.parse(path.read_text(encoding="utf-8"), str(path)))
                 for path in sorted(SRC.rglob("*.py")))


def _identifiers(tree: ast.AST) -> set[str]:
    """Every name a module uses or imports (attributes too: ``urllib.parse.urlsplit``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
    return names


def test_urls_and_query_strings_are_parsed_only_in_target_py() -> None:
    found = {path: sorted(_identifiers(tree) & URL_PARSERS) for path, tree in _modules() if path != "target.py"}
    assert not {path: names for path, names in found.items() if names}, (
        "parse URLs with target.parse_target (Target.endpoint() for a server) and other query strings with "
        "target.split_query")


URL_SEPARATORS = frozenset({"?", "://", "#", "@"})


def url_surgery(tree: ast.AST) -> list[str]:
    """``target.url.split("?")``, ``url.partition("://")``: a URL taken apart by hand (to be put back
    together by hand), where parse_target, with_params and rebuilt keep every rule in one place."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("split", "rsplit", "partition", "rpartition") and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in URL_SEPARATORS
                and "url" in ast.unparse(node.func.value).lower()):
            found.append(ast.unparse(node))
    return found


def test_target_urls_are_taken_apart_and_rebuilt_only_in_target_py() -> None:
    found = {path: url_surgery(tree) for path, tree in _modules() if path != "target.py"}
    assert not {path: calls for path, calls in found.items() if calls}, (
        "take a target URL apart with parse_target and put one together with with_params or rebuilt")
    # the scan sees what it is for
    assert sorted(url_surgery(ast.parse('q = t.url.split("?", 1)[1]\nh, _, p = url.partition("://")'))) == [
        "t.url.split('?', 1)", "url.partition('://')"]
    assert url_surgery(ast.parse('a, _, b = text.partition(":")')) == []


def test_rebuilt_keeps_user_password_and_query_as_given() -> None:
    from cachemark.target import parse_target, rebuilt

    given = parse_target("redis+sentinel://u%40x:p%2Fw@h1:26379,h2:26379/mymaster?db=2&sentinel_password=s%26t")
    primary = rebuilt(given, scheme="redis", hosts=[("10.0.0.7", 6380)], path="/2")
    assert (primary.scheme, primary.username, primary.password, primary.hosts, primary.path) == (
        "redis", "u@x", "p/w", (("10.0.0.7", 6380),), "/2")
    assert primary.params == given.params and primary.url.endswith("?db=2&sentinel_password=s%26t")
    proxied = rebuilt(parse_target("memcached://[::1]:11211,cache:11212"), hosts=[("127.0.0.1", 4001), ("::1", 4002)])
    assert proxied.hosts == (("127.0.0.1", 4001), ("::1", 4002))


SCHEME_NAMES = frozenset(schemes()) | frozenset(lab_kinds())


def _is_scheme_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in SCHEME_NAMES


def scheme_comparisons(tree: ast.AST) -> list[str]:
    """``x == "redis"``, ``x != "spawn"``, ``x in ("redis", "valkey")``: a scheme's name standing for a fact.

    A name on the left of ``in`` is a substring test of the right side (``"mariadb" in version``), not a
    scheme's; a tuple, list or set of names on the right is a hand list of schemes.
    """
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if _names_a_scheme(op, left, right):
                found.append(ast.unparse(node))
                break
            left = right
    return found


def _names_a_scheme(op: ast.cmpop, left: ast.AST, right: ast.AST) -> bool:
    if isinstance(op, ast.Eq | ast.NotEq):
        return _is_scheme_name(left) or _is_scheme_name(right)
    hand_list = isinstance(right, ast.Tuple | ast.List | ast.Set)
    return isinstance(op, ast.In | ast.NotIn) and hand_list and any(_is_scheme_name(e) for e in right.elts)


def test_no_scheme_name_is_compared_as_a_string_outside_schemes_py() -> None:
    found = {(path, text) for path, tree in _modules() if path != "schemes.py"
             for text in scheme_comparisons(tree)}
    assert found <= NOT_SCHEMES, (
        f"ask the scheme's row (schemes.py) instead: {sorted(found - NOT_SCHEMES)}")


def test_the_comparison_scan_finds_what_it_is_for() -> None:
    """The scan itself: hand lists and name tests are found, substring tests and row facts are not."""
    code = ast.parse('a.scheme == "redis"\n"valkey" != b\nc.scheme not in ("memcached", "x")\n'
                     '"mariadb" in version\nrow.family == "resp"\nrow.tags == "native"\n')
    assert scheme_comparisons(code) == ["a.scheme == 'redis'", "'valkey' != b",
                                        "c.scheme not in ('memcached', 'x')"]


def test_every_exception_is_still_in_the_source() -> None:
    found = {(path, text) for path, tree in _modules() for text in scheme_comparisons(tree)}
    gone = NOT_SCHEMES - found
    assert not gone, f"no longer in the source: drop them from NOT_SCHEMES: {sorted(gone)}"


# --- Target.endpoint() and split_query: how every command reaches a server and reads a query -------


@pytest.mark.parametrize(("url", "host", "port", "hosts", "db", "tls", "display"), [
    ("redis://:pw@h:7/3", "h", 7, (("h", 7),), "3", False, "h:7"),
    ("rediss://h", "h", 6379, (("h", 6379),), "", True, "h:6379"),  # the row's default port, TLS from the row
    ("keydb://", "127.0.0.1", 6379, (("127.0.0.1", 6379),), "", False, "127.0.0.1:6379"),
    ("memcached://u:p@h1,[::1]:5?tls=1", "h1", 11211, (("h1", 11211), ("::1", 5)), "", True, "h1:11211,[::1]:5"),
    ("redis+sentinel://a,b:1/mymaster/4", "a", 26379, (("a", 26379), ("b", 1)), "4", False, "a:26379,b:1"),
    ("redis+cluster://a:7000,b", "a", 7000, (("a", 7000), ("b", 6379)), "", False, "a:7000,b:6379"),
    ("mariadb://root@db/app", "db", 3306, (("db", 3306),), "app", False, "db:3306"),
])
def test_an_endpoint_fills_in_what_the_row_knows(url, host, port, hosts, db, tls, display) -> None:
    from cachemark.target import parse_target

    server = parse_target(url).endpoint()
    assert (server.host, server.port, server.hosts, server.db, server.tls, server.display) == (
        host, port, hosts, db, tls, display)


def test_an_endpoint_of_a_unix_socket_and_its_secrets() -> None:
    from cachemark.target import parse_target

    server = parse_target("redis+unix://:sekrit-pw@/run/r.sock?db=2&ssl_x=1").endpoint()
    assert server.socket == "/run/r.sock" and server.address == "/run/r.sock" and server.db_number() == 2
    assert server.password == "sekrit-pw" and server.display == "unix:/run/r.sock"
    assert "sekrit" not in repr(server) and "sekrit" not in server.redacted


def test_split_query_reads_a_query_as_parse_target_does() -> None:
    from cachemark.target import parse_target, split_query

    text = "local:4?agents=2&measure=&x=a%20b+c"
    assert split_query(text) == ("local:4", {"agents": "2", "measure": "", "x": "a b c"})
    assert parse_target("redis://h/0?" + text.split("?", 1)[1]).params == split_query(text)[1]
    with pytest.raises(SpecError, match="parameter 'x' is given twice"):  # never last-wins: refused
        split_query(text + "&x=last")


# --- the worked example: keydb:// is one row (docs/architecture.md, "adding a scheme") -------


def test_a_resp_row_carries_every_fact_its_family_has() -> None:
    """``_redis("keydb")`` and nothing else: the same adapter, engine, stats, tags, stampede, capture as redis://."""
    keydb, redis = find_scheme("keydb"), find_scheme("redis")
    assert keydb is not None and redis is not None
    for fact in ("adapter", "family", "engine", "stats", "default_port", "tags", "stampede", "capture", "network"):
        assert getattr(keydb, fact) == getattr(redis, fact), fact


def test_keydb_through_the_rooms_that_ask_the_row(redis_server) -> None:
    """Tags, a two-level slow tier, the engine's config, server stats: each from the row, not from the name."""
    from cachemark.backends import create_backend
    from cachemark.engine import target_config
    from cachemark.measure.server_stats import open_source
    from cachemark.target import parse_target

    url = f"keydb://127.0.0.1:{redis_server.port}/0"
    tagged = create_backend(parse_target(url + "?tags=native"), "cmt:keydb:")
    tagged.open()
    try:
        tagged.set_tagged("cmt:keydb:a", b"1", ["t"])
        assert tagged.clean_tags(["t"]) == 1
    finally:
        tagged.clear_namespace()
        tagged.close()
    twolevel = create_backend(parse_target(f"twolevel://?fast=memory://&slow={url}"), "cmt:keydb2:")
    assert twolevel.slow_mode == "native"  # a RESP slow tier keeps tags in sets by default, as redis:// does
    assert target_config(parse_target(url))["servers"] == [f"127.0.0.1:{redis_server.port}"]
    source, error = open_source(url)
    assert error is None and source is not None
    try:
        assert source.read()["used_memory_bytes"] > 0
    finally:
        source.close()


@pytest.fixture
def keydb_url(redis_server) -> str:
    """redis-server stands in for KeyDB (the lab has no keydb-server): the same protocol, which is the point."""
    return f"keydb://127.0.0.1:{redis_server.port}/0"


def test_keydb_is_accepted_by_run_and_advise(tmp_path, cachemark, keydb_url) -> None:
    result = cachemark("run", "-t", keydb_url, "--duration", "0.3s", "--warmup", "0", "--no-calibrate",
                       "-o", "out.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "out.json").read_text())
    (run,) = document["runs"]
    assert run["label"] == "keydb" and run["backend"]["scheme"] == "keydb"
    assert run["phases"][-1]["server"]["source"] == "redis"  # server figures from the row's stats source
    (tmp_path / "needs.toml").write_text("[needs]\napp_servers = 4\np99_ms = { get = 1000.0 }\n")
    advice = cachemark("advise", "out.json", "--needs", "needs.toml", cwd=tmp_path)
    assert advice.returncode == 0, advice.stderr
    assert "keydb" in advice.stdout


def test_keydb_is_accepted_by_stampede(tmp_path, cachemark, keydb_url) -> None:
    result = cachemark("stampede", "-t", keydb_url, "--strategy", "lock", "--rate", "100", "--recompute", "10ms",
                       "--ttl", "200ms", "--duration", "0.6s", "--clients", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "keydb://127.0.0.1" in result.stdout


def test_keydb_is_accepted_by_size_measure(tmp_path, cachemark, keydb_url) -> None:
    result = cachemark("size", "--keys", "2000", "--requests", "20000", "--measure", "-t", keydb_url, "--json",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (footprint,) = json.loads(result.stdout)["footprints"]
    assert footprint["server"] == "keydb" and footprint["bytes_per_item"] > 0


def test_keydb_is_accepted_by_capture(tmp_path, keydb_url) -> None:
    import redis

    from cachemark.lab import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cachemark", "capture", "-u", keydb_url, "--listen",
                             f"127.0.0.1:{port}", "-o", "app.cmtrace", "--duration", "3s"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:  # the proxy listens once the command has started
            try:
                client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
                client.set("cmt:keydb:capture", b"1")
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        assert client.get("cmt:keydb:capture") == b"1"
        client.delete("cmt:keydb:capture")
        client.close()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "capturing resp traffic" in out and "wrote 3 requests" in out


def test_a_capability_the_row_lacks_is_one_line(tmp_path, cachemark) -> None:
    """What the row says no to stays refused, in the commands' own words."""
    stampede = cachemark("stampede", "-t", "postgresql://127.0.0.1:1/x", "--duration", "0.2s", cwd=tmp_path)
    assert stampede.returncode == 2 and "stampedes are measured on redis:// or memcached://" in stampede.stderr
    capture = cachemark("capture", "-u", "memcache://127.0.0.1:11211", "-o", "x.cmtrace", cwd=tmp_path)
    assert capture.returncode == 2 and "capture speaks redis:// (RESP) and memcached:// only" in capture.stderr
    assert len(capture.stderr.strip().splitlines()) == 1
