"""ServerSampler against real servers: the counters it reports agree with traffic we generated."""

from __future__ import annotations

import os
import time

import pymemcache.client.base
import redis

from cachemark.measure.server_stats import ServerSampler, read_proc, summarize

SIZE = 1000
N = 2000


def _resp_len(*parts: bytes) -> int:
    """Exact RESP bytes of one command, to compare the server's byte counter with."""
    total = len(b"*%d\r\n" % len(parts))
    for part in parts:
        total += len(b"$%d\r\n" % len(part)) + len(part) + 2
    return total


def test_redis_bytes_per_op_match_the_wire(spawn):
    server = spawn("redis")
    client = redis.Redis.from_url(server.url())
    client.ping()  # connect (and redis-py's CLIENT SETINFO) before the baseline sample
    value = b"v" * SIZE
    sampler = ServerSampler(server.url(), server.pid(), interval=0.1).start()
    expected_in = 0
    for i in range(N):
        key = f"k:{i}".encode()
        client.set(key, value)
        expected_in += _resp_len(b"SET", key, value)
    time.sleep(0.25)  # at least one full interval after the traffic
    result = sampler.stop(total_ops=N)

    assert result["source"] == "redis" and not result["errors"]
    assert result["bytes_in"] >= N * SIZE
    assert abs(result["bytes_in_per_op"] - expected_in / N) <= 0.10 * expected_in / N
    assert abs(result["bytes_out_per_op"] - len(b"+OK\r\n")) <= 0.10 * len(b"+OK\r\n")
    assert result["cpu_us_per_op"] > 0
    assert result["clients"] == 1  # our client; the sampler's own connection is excluded
    assert result["rss_bytes"] > 0 and result["used_memory_bytes"] > N * SIZE
    assert result["evictions"] == 0
    rates = [s for s in result["samples"][1:] if "net_in_mbps" in s]
    assert len(rates) >= 2 and result["net_mbps_p90"] >= result["net_mbps_p70"] > 0
    assert result["net_mbps_p90"] <= max(s["net_in_mbps"] + s["net_out_mbps"] for s in rates) + 1e-9


def test_redis_evictions_are_the_counter_delta(spawn):
    server = spawn("redis", maxmemory="4mb")
    client = redis.Redis.from_url(server.url())
    before = client.info("stats")["evicted_keys"]
    sampler = ServerSampler(server.url(), server.pid(), interval=0.1).start()
    pipe = client.pipeline(transaction=False)
    for i in range(8000):
        pipe.set(f"e:{i}", b"x" * SIZE)
    pipe.execute()
    result = sampler.stop(total_ops=8000)
    after = client.info("stats")["evicted_keys"]
    assert after - before > 0
    assert result["evictions"] == after - before


def _until_alone(client) -> None:
    """Wait for memcached to retire the lab's readiness probe: it closes a moment after its socket."""
    deadline = time.monotonic() + 5.0
    while int(client.stats()[b"curr_connections"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)


def test_memcached_counters(spawn):
    server = spawn("memcached")
    client = pymemcache.client.base.Client(("127.0.0.1", server.port), default_noreply=False)
    client.version()
    _until_alone(client)
    sampler = ServerSampler(server.url(), server.pid(), interval=0.1).start()
    for i in range(N):
        client.set(f"m:{i}", b"w" * SIZE)
    time.sleep(0.15)
    result = sampler.stop(total_ops=N)
    assert result["source"] == "memcached" and not result["errors"]
    assert result["bytes_in"] >= N * SIZE
    expected_in = len(f"set m:{N // 2} 0 0 {SIZE}\r\n") + SIZE + 2
    assert abs(result["bytes_in_per_op"] - expected_in) <= 0.10 * expected_in
    assert abs(result["bytes_out_per_op"] - len(b"STORED\r\n")) <= 0.10 * len(b"STORED\r\n")
    assert result["clients"] == 1
    assert result["server_commands"] == N
    assert result["rss_bytes"] > 0


def test_process_only_sampling_reads_proc():
    # a backend without a stats protocol: only /proc of the pid (here: this process)
    sampler = ServerSampler("memory://", os.getpid(), interval=0.05).start()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    result = sampler.stop(total_ops=1000)
    assert result["source"] == "process"
    assert result["proc_cpu_s"] >= 0.2
    assert result["cpu_us_per_op"] >= 200  # 0.2 s over 1000 ops
    assert result["rss_bytes"] == result["samples"][-1]["rss_bytes"] > 0
    assert read_proc(os.getpid())["rss_bytes"] > 0


def test_unreachable_server_does_not_raise():
    sampler = ServerSampler("redis://127.0.0.1:1/0", None, interval=0.05).start()
    result = sampler.stop(total_ops=10)
    assert result["errors"] and "connect" in result["errors"][0]
    assert result["cpu_us_per_op"] is None and result["bytes_in_per_op"] is None


def test_summarize_needs_two_samples():
    assert summarize([{"t": 0.0}], 5)["cpu_us_per_op"] is None
