"""The network what-if proxy against real servers: a private redis-server and an echo server.

Behaviour, not speed: delays are floors (an op cannot beat the configured round trip),
a bandwidth cap makes a big value take its serialisation time, faults surface as client
errors, configs change mid-run, and nothing outlives the proxy. Profile parsing errors
are one clear line. Every load goes to 127.0.0.1 and is bounded in count and time.

Margins, measured beside a busy loop at load 7-8 (more than the alone pass ever sees): the floors (a 40-ms
delay's fastest op 40.4 ms, 1 MB at 1 MB/s 1.00 s, a 0.1-s connect delay 0.110 s, a 20-ms one 20.4 ms) are
set by the proxy and only rise with load. The ceilings: the slowest delayed op 45 ms against 500 (11x); the
capped MB 1.0-1.4 s against 3 (2.1x); 1 MB over the shared 2 MB/s link 0.50 s in [0.45, 1.5) (3x), four
capped flows 0.127 s against half of that, 0.25 (2x); a second request on a delayed connection 0.09 ms
against half the first's 110 ms (600x); an idle proxy's CPU 0.05 ms in 0.5-0.8 s against 20 % and 50 %
(over 1,000x); a held segment 0.38 s in [0.2, 2) (5x), the next 2.4 ms against half of it (78x); the
proxy's added p50 22 µs in (-1,000, 2,000) µs (90x).
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from cachemark.errors import SpecError
from cachemark.lab.network import PROFILES, NetworkProfile, parse_bandwidth_bps, parse_network
from cachemark.lab.proxy import echo_server, measure_overhead, start_proxy
from cachemark.lab.wakeups import QOS_DEVICE, fast_wakeups

pytestmark = pytest.mark.alone  # timed: runs alone (conftest.py)

redis = pytest.importorskip("redis")
_engine = pytest.importorskip("cachemark._engine")
if not hasattr(_engine, "Proxy"):
    pytest.skip("the native engine was built without the proxy", allow_module_level=True)
Proxy = _engine.Proxy

@pytest.fixture(scope="module")
def redis_port(redis_server):
    return redis_server.port


@pytest.fixture(scope="module")
def echo():
    with echo_server() as addr:
        yield addr


def client(port: int, timeout: float = 5.0) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout)


def config(**fields) -> str:
    import json

    return json.dumps(fields)


# --- forwarding and stats ---------------------------------------------------------------


def test_forwards_redis_commands_and_counts_bytes(redis_port):
    with Proxy(f"127.0.0.1:{redis_port}") as proxy:
        r = client(proxy.port)
        assert r.set("cm:test:proxy", b"v" * 1000)
        assert r.get("cm:test:proxy") == b"v" * 1000
        r.delete("cm:test:proxy")
        stats = proxy.stats()
        r.close()
    assert stats["connections_total"] == 1
    assert stats["bytes_up"] > 1000 and stats["bytes_down"] > 1000
    assert stats["faults_fired"] == {"reset": 0, "blackhole": 0, "stall": 0}


def test_large_stream_arrives_intact_and_in_order_with_jitter(echo):
    # Jitter larger than the gap between segments would reorder them if the proxy let it.
    cfg = config(delay_up_us=200, delay_down_us=200, jitter={"dist": "uniform", "us": 150})
    payload = bytes(range(256)) * 4096  # 1 MiB with a recognisable pattern
    with Proxy(f"{echo[0]}:{echo[1]}", cfg) as proxy, socket.create_connection((proxy.host, proxy.port)) as s:
        s.settimeout(20)
        for i in range(0, len(payload), 1500):  # many small writes, not one big buffer
            s.sendall(payload[i : i + 1500])
        got = bytearray()
        while len(got) < len(payload):
            chunk = s.recv(65536)
            assert chunk, "proxy closed early"
            got += chunk
    assert bytes(got) == payload


# --- delay, bandwidth, connect delay ----------------------------------------------------


def test_20ms_one_way_delay_makes_every_op_at_least_40ms(redis_port):
    cfg = config(delay_up_us=20_000, delay_down_us=20_000)
    with Proxy(f"127.0.0.1:{redis_port}", cfg) as proxy:
        r = client(proxy.port)
        r.ping()  # connection setup out of the way
        times = []
        for i in range(15):
            start = time.perf_counter()
            r.set(f"cm:test:delay:{i}", b"x")
            times.append(time.perf_counter() - start)
        r.delete(*[f"cm:test:delay:{i}" for i in range(15)])
        r.close()
        stats = proxy.stats()
    assert min(times) >= 0.040, f"fastest op {min(times) * 1e3:.3f} ms"
    assert max(times) < 0.5  # the delay is 40 ms, not a stall
    assert stats["segments_delayed"] >= 30


def test_bandwidth_cap_1MBps_makes_1MB_value_take_at_least_0_9s(redis_port):
    cfg = config(bandwidth_bps=8_000_000)  # 1 MB/s each way
    value = b"b" * 1_000_000
    with Proxy(f"127.0.0.1:{redis_port}", cfg) as proxy:
        r = client(proxy.port, timeout=10)
        r.ping()
        start = time.perf_counter()
        r.set("cm:test:bw", value)
        up = time.perf_counter() - start
        start = time.perf_counter()
        assert r.get("cm:test:bw") == value
        down = time.perf_counter() - start
        r.delete("cm:test:bw")
        r.close()
    assert up >= 0.9, f"1 MB upload took {up:.3f}s"
    assert down >= 0.9, f"1 MB download took {down:.3f}s"
    assert up < 3 and down < 3  # a cap, not a stall


def test_a_shared_link_caps_all_connections_together_where_a_flow_cap_does_not(redis_port):
    # Four clients each read 250 KB at once: with a 16 Mbit/s (2 MB/s) link shared by all, the
    # 1 MB together takes about 0.5 s; with the same cap per connection, each flow has its own
    # 2 MB/s and the four finish in about a quarter of that.
    import threading

    value = b"l" * 250_000
    setup = client(redis_port)
    setup.set("cm:test:link", value)

    def read_all(cfg: str) -> float:
        with Proxy(f"127.0.0.1:{redis_port}", cfg, threads=2) as proxy:
            clients = [client(proxy.port, timeout=10) for _ in range(4)]
            for c in clients:
                c.ping()
            start = time.perf_counter()
            threads = [threading.Thread(target=lambda c=c: c.get("cm:test:link")) for c in clients]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.perf_counter() - start
            for c in clients:
                c.close()
        return took

    shared = read_all(config(link_bps=16_000_000))
    per_flow = read_all(config(bandwidth_bps=16_000_000))
    setup.delete("cm:test:link")
    assert 0.45 <= shared < 1.5, f"1 MB over a 2 MB/s link took {shared:.3f}s"
    assert per_flow < shared / 2, f"four 2 MB/s flows took {per_flow:.3f}s, the shared link {shared:.3f}s"


def test_connect_delay_holds_the_first_request(redis_port):
    with Proxy(f"127.0.0.1:{redis_port}", config(connect_delay_us=100_000)) as proxy:
        r = client(proxy.port)
        start = time.perf_counter()
        r.ping()
        first = time.perf_counter() - start
        start = time.perf_counter()
        r.ping()
        second = time.perf_counter() - start
        r.close()
    assert first >= 0.1
    assert second < first / 2  # the delay is per connection, not per request (wide: a busy CI host)


def test_set_config_applies_mid_run(echo):
    with Proxy(f"{echo[0]}:{echo[1]}") as proxy, socket.create_connection((proxy.host, proxy.port)) as s:
        s.settimeout(5)

        def rtt() -> float:
            start = time.perf_counter()
            s.sendall(b"ping")
            assert s.recv(16) == b"ping"
            return time.perf_counter() - start

        assert rtt() < 0.1
        proxy.set_config(config(delay_up_us=100_000, delay_down_us=100_000))
        assert rtt() >= 0.2
        proxy.set_config("{}")
        rtt()  # drain anything released under the old config
        assert rtt() < 0.1


# --- spinning between segments (default: adaptive; opt-in: a fixed busy-poll window) -----


def test_default_mode_gives_its_core_back_when_traffic_stops(echo):
    # The default proxy may stay awake between the segments of back-to-back traffic (when
    # the machine has a core to spare); it forwards the same bytes either way, and once the
    # connection goes quiet it sleeps: an idle proxy costs no CPU.
    with (
        Proxy(f"{echo[0]}:{echo[1]}") as proxy,
        socket.create_connection((proxy.host, proxy.port)) as s,
    ):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(20)
        for i in range(2000):
            msg = i.to_bytes(4, "big") * 4
            s.sendall(msg)
            got = b""
            while len(got) < len(msg):
                chunk = s.recv(64)
                assert chunk, "proxy closed early"
                got += chunk
            assert got == msg
        time.sleep(0.05)
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        time.sleep(0.5)
        idle_cpu = time.process_time() - cpu_before
        idle_wall = time.perf_counter() - wall_before
        stats = proxy.stats()
    assert idle_cpu < 0.2 * idle_wall, f"{idle_cpu:.3f}s CPU in {idle_wall:.3f}s idle"
    assert stats["bytes_up"] == stats["bytes_down"] == 2000 * 16


# --- busy-poll mode (opt-in) ------------------------------------------------------------


def test_busy_poll_forwards_intact_and_stops_spinning_when_idle(echo):
    # Behaviour, not speed: the spinning path forwards the same bytes in the same order
    # and gives its core back once traffic stops.
    payload = bytes(range(256)) * 1024
    with (
        Proxy(f"{echo[0]}:{echo[1]}", config(busy_poll_us=300)) as proxy,
        socket.create_connection((proxy.host, proxy.port)) as s,
    ):
        s.settimeout(20)
        for i in range(0, len(payload), 1500):
            s.sendall(payload[i : i + 1500])
        got = bytearray()
        while len(got) < len(payload):
            chunk = s.recv(65536)
            assert chunk, "proxy closed early"
            got += chunk
        assert bytes(got) == payload
        time.sleep(0.05)
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        time.sleep(0.5)  # idle: a proxy that kept spinning would burn ~0.5 s of CPU here
        idle_cpu = time.process_time() - cpu_before
        idle_wall = time.perf_counter() - wall_before
        stats = proxy.stats()
    assert idle_cpu < 0.5 * idle_wall, f"{idle_cpu:.3f}s CPU in {idle_wall:.3f}s idle"
    assert stats["bytes_up"] == stats["bytes_down"] == len(payload)


def test_busy_poll_with_a_delay_keeps_the_delay_floor(redis_port):
    # busy_poll_us is inert while a delay is configured (it measured worse there), but it
    # must parse and leave the delay intact.
    cfg = config(delay_up_us=10_000, delay_down_us=10_000, busy_poll_us=100)
    with Proxy(f"127.0.0.1:{redis_port}", cfg) as proxy:
        r = client(proxy.port)
        r.ping()
        times = []
        for i in range(5):
            start = time.perf_counter()
            assert r.set(f"cm:test:busy:{i}", b"x")
            times.append(time.perf_counter() - start)
        assert r.get("cm:test:busy:4") == b"x"
        r.delete(*[f"cm:test:busy:{i}" for i in range(5)])
        r.close()
        stats = proxy.stats()
    assert min(times) >= 0.019, f"fastest op {min(times) * 1e3:.3f} ms"
    assert stats["segments_delayed"] >= 10


def test_busy_poll_zero_delay_forwards_redis(redis_port):
    (profile,) = parse_network("same-host,poll=50us")
    assert profile.proxied and profile.busy_poll_us == 50
    with start_proxy("127.0.0.1", redis_port, profile) as ep:
        assert ep.proxied
        r = client(ep.port)
        for i in range(50):
            assert r.set(f"cm:test:bz:{i}", str(i))
        assert [int(v) for v in r.mget([f"cm:test:bz:{i}" for i in range(50)])] == list(range(50))
        r.delete(*[f"cm:test:bz:{i}" for i in range(50)])
        r.close()
        assert ep.stats()["bytes_down"] > 0


# --- faults -------------------------------------------------------------------------------


def test_reset_fault_shows_up_as_errors(redis_port):
    with Proxy(f"127.0.0.1:{redis_port}") as proxy:
        r = client(proxy.port)
        assert r.ping()
        proxy.set_config(config(fault={"kind": "reset", "after_ms": 0}))
        time.sleep(0.05)  # the open connection is reset now; new ones at once
        errors = 0
        for _ in range(5):
            try:
                r.ping()
            except redis.ConnectionError:
                errors += 1
        stats = proxy.stats()
        proxy.set_config("{}")
        recovered = client(proxy.port).ping()
    assert errors == 5
    assert stats["faults_fired"]["reset"] >= 1
    assert recovered


def test_reset_sends_rst_not_fin(echo):
    with Proxy(f"{echo[0]}:{echo[1]}", config(fault={"kind": "reset", "after_ms": 0})) as proxy:
        s = socket.create_connection((proxy.host, proxy.port))
        s.settimeout(5)
        with pytest.raises(ConnectionResetError):
            s.sendall(b"hello")
            s.recv(16)
            s.sendall(b"again")  # a FIN would let this through; an RST does not
            s.recv(16)
        s.close()


def test_blackhole_times_out_and_counts_dropped_bytes(echo):
    with Proxy(f"{echo[0]}:{echo[1]}", config(fault={"kind": "blackhole"})) as proxy:
        s = socket.create_connection((proxy.host, proxy.port))
        s.settimeout(0.3)
        time.sleep(0.05)
        s.sendall(b"into the void")
        with pytest.raises(TimeoutError):
            s.recv(16)
        s.close()
        stats = proxy.stats()
    assert stats["faults_fired"]["blackhole"] == 1
    assert stats["bytes_dropped"] == len(b"into the void")


def test_stall_holds_then_delivers(echo):
    cfg = config(fault={"kind": "stall", "after_ms": 0, "stall_ms": 300})
    with Proxy(f"{echo[0]}:{echo[1]}", cfg) as proxy, socket.create_connection((proxy.host, proxy.port)) as s:
        s.settimeout(5)
        time.sleep(0.02)
        start = time.perf_counter()
        s.sendall(b"later")
        assert s.recv(16) == b"later"
        held = time.perf_counter() - start
        start = time.perf_counter()
        s.sendall(b"now")
        assert s.recv(16) == b"now"
        after = time.perf_counter() - start
    assert 0.2 <= held < 2
    assert after < held / 2


def test_fault_probability_zero_never_fires(echo):
    with Proxy(f"{echo[0]}:{echo[1]}", config(fault={"kind": "reset", "probability": 0})) as proxy:
        for _ in range(3):
            with socket.create_connection((proxy.host, proxy.port)) as s:
                s.settimeout(5)
                s.sendall(b"ok")
                assert s.recv(16) == b"ok"
        assert proxy.stats()["faults_fired"]["reset"] == 0


# --- lifecycle ------------------------------------------------------------------------------


def test_proxy_shuts_down_with_the_run(redis_port):
    with start_proxy("127.0.0.1", redis_port, parse_network("1ms")[0]) as ep:
        port = ep.port
        r = client(port)
        assert r.ping()
        assert ep.stats()["connections_active"] == 1
    # Closed: the listener is gone and the open connection was closed with it.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    with pytest.raises(redis.ConnectionError):
        r.ping()


def test_close_is_idempotent_and_closed_proxy_refuses_calls(echo):
    proxy = Proxy(f"{echo[0]}:{echo[1]}")
    proxy.close()
    proxy.close()
    assert proxy.closed
    with pytest.raises(RuntimeError):
        proxy.stats()


def test_bad_config_is_a_value_error_naming_the_field(echo):
    with pytest.raises(ValueError, match="delay_us"):
        Proxy(f"{echo[0]}:{echo[1]}", '{"delay_us": 5}')
    with pytest.raises(ValueError, match="gamma"):
        Proxy(f"{echo[0]}:{echo[1]}", '{"jitter": {"dist": "gamma", "us": 5}}')


def test_upstream_down_resets_the_client():
    with socket.socket() as held:  # bound, never listening: refuses every connection, and no one else takes it
        held.bind(("127.0.0.1", 0))
        with Proxy(f"127.0.0.1:{held.getsockname()[1]}") as proxy:
            s = socket.create_connection((proxy.host, proxy.port))
            s.settimeout(5)
            with pytest.raises((ConnectionResetError, BrokenPipeError)):
                s.sendall(b"x")
                if s.recv(16) == b"":
                    raise ConnectionResetError
            assert proxy.stats()["upstream_errors"] == 1
            s.close()


def test_overhead_is_measured_and_small():
    result = measure_overhead(samples=300, warmup=50)
    # Behaviour, not speed: the figure exists, is finite and not absurd for loopback.
    assert result["samples"] == 300
    assert -1000 < result["added_p50"] < 2000


# --- profiles ---------------------------------------------------------------------------------


def test_named_profiles_are_ordered_and_documented():
    names = ["same-host", "lan", "same-zone", "cross-zone", "cross-region"]
    assert list(PROFILES) == names
    rtts = [PROFILES[n].rtt_us for n in names]
    assert rtts == sorted(rtts) and rtts[0] == 0
    assert all(PROFILES[n].source for n in names)
    assert not PROFILES["same-host"].proxied


def test_parse_several_profiles_with_options():
    profiles = parse_network("same-host,2ms,jitter=0.2ms,dist=pareto,bandwidth=100mbit,cross-region")
    assert [p.name for p in profiles] == [
        "same-host",
        "2ms,jitter=0.2ms,dist=pareto,bandwidth=100mbit",
        "cross-region",
    ]
    custom = profiles[1]
    assert custom.rtt_us == 2000 and custom.jitter_us == 200 and custom.jitter_dist == "pareto"
    assert custom.bandwidth_bps == 100_000_000
    cfg = custom.to_config()
    assert cfg["delay_up_us"] == cfg["delay_down_us"] == 1000
    assert cfg["jitter"] == {"dist": "pareto", "us": 200}
    assert cfg["connect_delay_us"] == 2000


def test_a_link_option_caps_the_profile_for_every_connection_together():
    (p,) = parse_network("0ms,link=750mbit")
    assert p.link_bps == 750_000_000 and p.bandwidth_bps == 0 and p.proxied
    assert p.to_config()["link_bps"] == 750_000_000


def test_options_on_a_named_profile():
    (p,) = parse_network("cross-zone,bandwidth=10MB/s")
    assert p.rtt_us == PROFILES["cross-zone"].rtt_us
    assert p.bandwidth_bps == 80_000_000


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("moon", "unknown network profile 'moon'"),
        ("2", "use a number with a unit"),
        ("2ms,jitter=fast", "bad jitter"),
        ("2ms,dist=gamma", "uniform, normal, pareto"),
        ("2ms,bandwidth=100", "bad bandwidth"),
        ("jitter=1ms", "must follow a profile"),
        ("2ms,colour=red", "unknown network option"),
        ("lan,,cross-zone", "empty network profile"),
        ("lan,lan", "given twice"),
    ],
)
def test_bad_specs_are_one_clear_line(spec, fragment):
    with pytest.raises(SpecError) as info:
        parse_network(spec)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_poll_option_on_custom_and_named_profiles():
    custom, named = parse_network("2ms,jitter=0.2ms,poll=50us,same-zone,poll=0.2ms")
    assert custom.name == "2ms,jitter=0.2ms,poll=50us"
    assert custom.busy_poll_us == 50 and custom.jitter_us == 200
    assert custom.to_config()["busy_poll_us"] == 50
    assert named.name == "same-zone,poll=0.2ms"
    assert named.rtt_us == PROFILES["same-zone"].rtt_us and named.busy_poll_us == 200
    # Off unless asked for: no profile sends the field by default.
    assert all("busy_poll_us" not in p.to_config() for p in PROFILES.values())


def test_bad_busy_poll_is_rejected():
    with pytest.raises(SpecError, match="at most 100ms"):
        parse_network("lan,poll=1s")
    with pytest.raises(SpecError, match="busy-poll window"):
        parse_network("lan,poll=fast")
    with pytest.raises(ValueError, match="busy_poll_us"):
        Proxy("127.0.0.1:1", '{"busy_poll_us": -5}')


def test_bandwidth_units():
    assert parse_bandwidth_bps("1gbit") == 1_000_000_000
    assert parse_bandwidth_bps("1MB/s") == 8_000_000
    assert parse_bandwidth_bps("500kbit") == 500_000


def test_same_host_uses_no_proxy(redis_port):
    with start_proxy("127.0.0.1", redis_port, PROFILES["same-host"]) as ep:
        assert not ep.proxied
        assert (ep.host, ep.port) == ("127.0.0.1", redis_port)
        assert ep.stats() == {}


def test_endpoint_set_fault_mid_run(redis_port):
    with start_proxy("127.0.0.1", redis_port, NetworkProfile("zero", proxied=True)) as ep:
        r = client(ep.port)
        assert r.ping()
        ep.set_fault("reset")
        time.sleep(0.05)
        with pytest.raises(redis.ConnectionError):
            r.ping()
        assert ep.stats()["faults_fired"]["reset"] >= 1
        with pytest.raises(SpecError):
            ep.set_fault("meteor")


def _cpu_latency_target() -> int:
    fd = os.open(QOS_DEVICE, os.O_RDONLY)
    try:
        return struct.unpack("i", os.read(fd, 4))[0]
    finally:
        os.close(fd)


@pytest.mark.skipif(not os.access(QOS_DEVICE, os.W_OK), reason="no writable /dev/cpu_dma_latency (root only)")
def test_idle_cpus_poll_while_the_proxy_is_measured_and_not_after() -> None:
    """The kernel's own reading of the PM QoS target: 0 (idle CPUs poll) inside the block, back to what
    it was after it; the proxy's overhead is measured so, and says so."""
    before = _cpu_latency_target()
    with fast_wakeups() as held:
        assert held and _cpu_latency_target() == 0
    assert _cpu_latency_target() == before != 0
    assert measure_overhead(samples=200)["fast_wakeups"] is True
    assert _cpu_latency_target() == before


def test_without_the_qos_device_nothing_is_held(tmp_path) -> None:
    with fast_wakeups(str(tmp_path / "missing")) as held:
        assert held is False
