"""memcached with SASL (``spawn:memcached?sasl=1``): PLAIN over the binary protocol, through
pylibmc and the native engine (``protocol=memcache_binary``), as managed memcached services
require it.

Ground truth is the server's own counters (``stats`` over the binary protocol, after
authenticating): every connection authenticated once (``auth_cmds``), none refused
(``auth_errors``), and the reads the clients counted as hits are the reads memcached
counted (``get_hits``). A wrong password is one line and exit 2 on either path, the password
never shown; pymemcache, which has no SASL, is refused in one line.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from cachemark.backends.memcached import MemcachedBackend
from cachemark.engine import run_load, target_config
from cachemark.errors import BackendUnavailable, SpecError
from cachemark.target import parse_target

pytestmark = pytest.mark.timeout(300)

OPS = 1500
KEYS = 200


@pytest.fixture(scope="module")
def sasl_server(spawn_for_file):
    return spawn_for_file("memcached", sasl="1")


def _counters(server, *names: str) -> dict[str, int]:
    stats = server.stats()
    return {name: int(stats[name]) for name in names}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in before}


def _wrong(server, query: str = "") -> str:
    return f"memcached://cachemark:{quote('not-the-password')}@127.0.0.1:{server.port}{query}"


def _one_line_exit_2(proc, *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_the_lab_hands_out_a_credential_and_memcached_wants_it(sasl_server):
    url = sasl_server.url()
    target = parse_target(url)
    assert target.username == "cachemark" and target.password == sasl_server.password
    assert len(sasl_server.password) >= 16 and target.param("binary") == "1"
    assert sasl_server.password not in target.redacted
    # without credentials, a binary GET is refused: SASL is really on
    backend = MemcachedBackend(parse_target(f"memcached://127.0.0.1:{sasl_server.port}?client=pylibmc&binary=1"),
                               "cmt:")
    with pytest.raises(BackendUnavailable):
        backend.open()


def test_pylibmc_reads_are_the_servers_hits(sasl_server, namespace):
    names = ("auth_cmds", "auth_errors", "get_hits", "get_misses", "cmd_set")
    before = _counters(sasl_server, *names)
    backend = MemcachedBackend(parse_target(sasl_server.url()), namespace)
    assert backend.client_name == "pylibmc" and backend.binary  # credentials choose pylibmc and binary
    backend.open()
    try:
        for i in range(50):
            backend.set(f"{namespace}{i}", b"v%d" % i)
        hits = sum(backend.get(f"{namespace}{i}") == b"v%d" % i for i in range(100))
        assert backend.info()["sasl"] is True
    finally:
        backend.clear_namespace([f"{namespace}{i}" for i in range(50)])
        backend.close()
    delta = _delta(before, _counters(sasl_server, *names))
    assert hits == 50
    # one authenticated connection (+1: the counters' own reading), none refused
    assert delta == {"auth_cmds": 2, "auth_errors": 0, "get_hits": 50, "get_misses": 50, "cmd_set": 50}


def test_engine_binary_sasl_hits_are_the_servers_hits(sasl_server, namespace):
    names = ("auth_cmds", "auth_errors", "get_hits", "get_misses", "cmd_set")
    cfg = target_config(sasl_server.url() + "&client=engine")
    assert cfg["protocol"] == "memcache_binary" and cfg["username"] == "cachemark"
    cfg.update(threads=2, connections=4, pipeline=8, ops=OPS, duration_s=30, prefill=True, verify_fraction=1.0,
               keys={"count": KEYS, "prefix": namespace}, values={"sizes": [[100, 1], [20_000, 1]]},
               mix=[{"op": "get", "weight": 1}])
    before = _counters(sasl_server, *names)
    result = run_load(cfg)
    delta = _delta(before, _counters(sasl_server, *names))
    get = result["ops"]["get"]
    assert (get["count"], get["hits"], get["misses"], get.get("errors", {})) == (OPS, OPS, 0, {}), result
    assert result["prefill_errors"] == 0
    # every read verified against the contract value; memcached counted exactly these hits
    assert delta["get_hits"] == OPS and delta["get_misses"] == 0
    assert delta["cmd_set"] == KEYS  # the prefill: every key once
    # 4 load connections authenticated (the prefill's too, if it has its own), plus our reading; none refused
    assert delta["auth_errors"] == 0 and 5 <= delta["auth_cmds"] <= 9, delta


def test_engine_binary_ops_mirror_the_text_protocol(spawn, namespace):
    """Every op the engine speaks, on a plain (no SASL) memcached over binary, counted as over text."""
    server = spawn("memcached")
    mix = [{"op": op, "weight": 1} for op in ("get", "gets", "set", "delete", "exists", "incr", "touch")]
    mix.append({"op": "mget", "weight": 1, "count": 4})
    outcomes = {}
    for protocol in ("text", "binary"):
        cfg = target_config(f"memcached://127.0.0.1:{server.port}?protocol={protocol}&client=engine")
        cfg.update(threads=1, connections=1, pipeline=4, ops=800, duration_s=30, prefill=True, ttl_s=600,
                   keys={"count": 50, "prefix": f"{namespace}{protocol}:", "dist": "sequential"}, mix=mix, seed=7,
                   verify_fraction=1.0)
        result = run_load(cfg)
        assert result["prefill_errors"] == 0 and not result["errors_sample"], result["errors_sample"]
        outcomes[protocol] = {name: (op["count"], op.get("hits", 0), op.get("misses", 0))
                              for name, op in result["ops"].items()}
    # one connection, sequential keys, the same seed: the same ops in the same order, the same answers
    assert outcomes["binary"] == outcomes["text"]
    assert sum(count for count, _, _ in outcomes["binary"].values()) == 800


def test_cli_pylibmc_and_engine_agree_with_the_server(sasl_server, cachemark, tmp_path):
    out = tmp_path / "r.json"
    url = sasl_server.url()
    before = _counters(sasl_server, "auth_errors")
    proc = cachemark("run", "--no-calibrate", "--mix", "get=80,set=20", "--keys", str(KEYS), "--ops", str(OPS),
                     "--workers", "2", "--warmup", "0", "--prefill", "-o", str(out), "-t", url,
                     "-t", url + "&client=engine", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sasl_server.password not in proc.stdout + proc.stderr + out.read_text()
    runs = json.loads(out.read_text())["runs"]
    assert [r["backend"]["info"]["client"] for r in runs] == ["pylibmc", "cachemark-engine"]
    counts = []
    for run in runs:
        assert run["status"] == "ok" and run["backend"]["info"]["sasl"] is True
        phase = run["phases"][-1]
        get, put = phase["ops"]["get"], phase["ops"]["set"]
        assert get["count"] + put["count"] == OPS and not get.get("errors") and not put.get("errors")
        assert get["hits"] == get["count"]  # every key prefilled: each path reads only hits
        counts.append((get["count"], get["hits"], put["count"]))
        # the sampler authenticated and read memcached's counters in binary
        assert phase["server"]["source"] == "memcached" and not phase["server"]["errors"]
    # the same workload, drawn by each path's own generator (numpy's, the engine's): the mix's
    # share of GETs on both, within 4 standard deviations (their counts matched to the op only
    # by chance: any change to the engine's draws can part them, e.g. to 1,201 and 1,215)
    sd = (OPS * 0.8 * 0.2) ** 0.5
    assert all(abs(gets - 0.8 * OPS) < 4 * sd for gets, _, _ in counts), counts
    pylibmc, engine = (run["phases"][-1]["server"]["server_commands"] for run in runs)
    assert pylibmc == OPS
    # the engine's window also holds its dropped-write canaries and their reads (57 here over text too)
    assert OPS <= engine <= OPS + 60
    assert _counters(sasl_server, "auth_errors") == before


@pytest.mark.parametrize("client", ["", "&client=pylibmc", "&client=engine"])
def test_a_wrong_password_is_one_line(sasl_server, cachemark, tmp_path, client):
    before = _counters(sasl_server, "auth_errors")
    proc = cachemark("run", "--no-calibrate", "--ops", "100", "-t", _wrong(sasl_server, "?binary=1" + client),
                     cwd=tmp_path)
    line = _one_line_exit_2(proc, "refused the credentials", "cachemark")
    assert "not-the-password" not in proc.stdout + proc.stderr, line
    assert _counters(sasl_server, "auth_errors")["auth_errors"] > before["auth_errors"]


def test_the_engine_refuses_a_wrong_password_itself(sasl_server):
    before = _counters(sasl_server, "auth_errors")
    cfg = target_config(_wrong(sasl_server, "?client=engine"))
    cfg.update(threads=1, connections=1, ops=10, keys={"count": 10, "prefix": "cmt:wrong:"})
    with pytest.raises(BackendUnavailable) as caught:
        run_load(cfg)
    message = str(caught.value)
    assert "memcached refused the credentials" in message and "not-the-password" not in message
    assert len(message.splitlines()) == 1
    assert _counters(sasl_server, "auth_errors")["auth_errors"] == before["auth_errors"] + 1


def test_pymemcache_and_text_protocols_are_refused_with_credentials(sasl_server, cachemark, tmp_path):
    proc = cachemark("run", "--no-calibrate", "--ops", "10", "-t", sasl_server.url() + "&client=pymemcache",
                     cwd=tmp_path)
    _one_line_exit_2(proc, "pymemcache does not speak SASL", "client=pylibmc")
    assert sasl_server.password not in proc.stdout + proc.stderr
    with pytest.raises(SpecError, match="binary-only"):
        target_config(sasl_server.url() + "&client=engine&protocol=meta")
    with pytest.raises(SpecError, match="binary-only"):
        MemcachedBackend(parse_target(sasl_server.url().replace("binary=1", "binary=0")), "cmt:")


def test_spawned_sasl_targets_run_on_both_paths(cachemark, tmp_path):
    out = tmp_path / "r.json"
    proc = cachemark("run", "--no-calibrate", "--mix", "get=90,set=10", "--ops", "600", "--warmup", "0", "-o", str(out),
                     "-t", "spawn:memcached?sasl=1", "-t", "spawn:memcached?sasl=1&client=engine", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert [r["backend"]["info"]["client"] for r in runs] == ["pylibmc", "cachemark-engine"]
    for run in runs:
        assert run["status"] == "ok" and run["server"]["sasl"] is True
        assert run["backend"]["info"]["sasl"] is True and not run["phases"][-1]["server"]["errors"]
        assert sum(op["count"] for op in run["phases"][-1]["ops"].values()) == 600
        assert not any(op.get("errors") for op in run["phases"][-1]["ops"].values())


def test_the_engine_without_credentials_fails_at_connect(sasl_server):
    """memcached answers NOOP only once authenticated (VERSION it answers anyway): the connect fails, not every op."""
    cfg = target_config(f"memcached://127.0.0.1:{sasl_server.port}?protocol=binary&client=engine")
    assert "username" not in cfg
    cfg.update(threads=1, connections=1, ops=10, keys={"count": 10, "prefix": "cmt:anon:"})
    with pytest.raises(BackendUnavailable, match="authentication failed at the binary protocol"):
        run_load(cfg)


def test_django_pylibmc_cache_with_sasl_options(sasl_server, cachemark, tmp_path):
    pytest.importorskip("django")
    base = f"django://?BACKEND=pylibmc&LOCATION=127.0.0.1:{sasl_server.port}&OPTIONS.binary=true&OPTIONS.username=cachemark"
    # 300 keys, not the default 10,000: the prefill (through Django, with SASL) is 300 writes instead of 10,000
    ok = cachemark("run", "--no-calibrate", "--ops", "300", "--keys", "300", "--warmup", "0",
                   "-t", f"{base}&OPTIONS.password={sasl_server.password}", cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout[-1500:] + ok.stderr[-1500:]
    assert sasl_server.password not in ok.stdout + ok.stderr
    wrong = cachemark("run", "--no-calibrate", "--ops", "300", "-t", f"{base}&OPTIONS.password=not-the-password",
                      cwd=tmp_path)
    _one_line_exit_2(wrong, "AUTHENTICATION FAILURE")
    assert "not-the-password" not in wrong.stdout + wrong.stderr
