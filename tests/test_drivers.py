"""The driver harness (run/driver.py, docs/drivers.md), whatever the driver: a driver that hangs,
dies, cannot start or breaks the protocol fails the run in one line, quickly; ``client=`` on a scheme
without a client choice must name a driver. What every driver must do is in
tests/test_driver_conformance.py; what one stack does alone, in tests/test_driver_<stack>.py.
"""

from __future__ import annotations

import shutil
import time

import pytest

from cachemark.run import driver as driver_mod
from cachemark.run.runner import run_target
from cachemark.target import parse_target
from driver_kit import workload as _workload  # noqa: E402

CLIENT = "client=ruby-activesupport"


def test_client_on_a_scheme_without_a_client_choice_must_name_a_driver():
    from cachemark.errors import SpecError
    from cachemark.target import check_params

    check_params(parse_target(f"memory://?{CLIENT}"))
    with pytest.raises(SpecError, match="only to name a driver: php-symfony, ruby-activesupport"):
        check_params(parse_target("file:///tmp/x?client=redis-py"))


@pytest.mark.serial
def test_a_hung_or_dead_driver_fails_the_run_quickly(monkeypatch, tmp_path, memcached_server):
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    monkeypatch.setattr(driver_mod, "HELLO_TIMEOUT_S", 1.0)
    monkeypatch.setenv("CACHEMARK_RUBY", str(hang))
    started = time.monotonic()
    outcome = run_target(f"{memcached_server.url()}?{CLIENT}", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and "did not answer 'hello' within 1 s" in outcome.reason
    assert time.monotonic() - started < 15  # 6.2 s beside a busy loop at load 9 (2.4x); the fake sleeps 60 s

    monkeypatch.setenv("CACHEMARK_RUBY", shutil.which("false") or "/bin/false")
    outcome = run_target(f"{memcached_server.url()}?{CLIENT}", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and "exited during 'hello'" in outcome.reason, outcome.reason

    plain = tmp_path / "cachemark-driver"  # a built driver that is not executable
    plain.write_text("not a program\n")
    monkeypatch.setenv("CACHEMARK_GO_DRIVER", str(plain))
    outcome = run_target(f"{memcached_server.url()}?client=go-memcache", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and f"cannot start {plain}: not executable" in outcome.reason, outcome.reason


@pytest.mark.parametrize(("says", "error"), [
    ('{"type": "hello", "protocol": 1}', "broke the protocol (protocol/protocol.json): 'hello': lacks 'driver'"),
    ('{"type": "hello", "protocol": 1, "driver": "x", "runtime": "sh", "libraries": {"a": 1}}',
     "'hello': libraries: a: must be string, not an integer"),
    ('{"type": "setup"}', "no message of type 'setup' goes this way"),
    ('[1, 2]', "a message must be a JSON object, not an array"),
])
def test_a_driver_that_breaks_the_protocol_fails_the_run_in_one_line(monkeypatch, tmp_path, memcached_server,
                                                                     says, error):
    """Every message a driver sends is checked against drivers/protocol/protocol.json."""
    fake = tmp_path / "fake"
    fake.write_text(f"#!/bin/sh\necho '{says}'\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CACHEMARK_RUBY", str(fake))
    started = time.monotonic()
    outcome = run_target(f"{memcached_server.url()}?{CLIENT}", _workload(mix={"get": 1}, ops=10))
    assert outcome.status == "failed" and error in outcome.reason and "\n" not in outcome.reason, outcome.reason
    assert outcome.reason.startswith("driver ruby-activesupport (worker 0) ")
    assert time.monotonic() - started < 20  # 0.02-0.17 s beside a busy loop (100x); the fake sleeps 30 s otherwise


def test_a_phase_stopped_early_counts_the_ops_of_segments_never_run_as_missed():
    """x-segments: a driver that stops at the deadline counts what its own segment left unsent; cachemark
    adds the ops due before the deadline of the segment it had sent ahead (which the driver dropped) and
    of those it never sent — not the ones due after it."""
    import numpy as np

    class Stub:  # only what _received asks of a driver process
        def check(self, reply, expect):
            assert reply["type"] == expect

    def segment(i: int):  # ten ops 10 ms apart: segment i is due from 0.1·i s
        at = np.arange(10 * i, 10 * i + 10, dtype=np.uint64) * 10_000_000
        return np.zeros(10, "u1"), np.arange(10, dtype="<u4"), np.full(10, 100, "<u4"), at

    feed = driver_mod.OpFeed(iter([segment(i) for i in range(5)]), cycle=False)
    going = driver_mod._Going(Stub(), feed, feed.next(), driver_mod.PhaseTally(["get"], open_loop=True))
    going.ahead = feed.next()  # segment 1, sent ahead when segment 0 started
    count = 4  # the driver ran four ops of segment 0 and says the other six, due before 0.25 s, are missed
    blob = bytes([1] * count) + np.arange(count, dtype="<u8").tobytes() + np.full(count, 1000, "<u8").tobytes()
    done = {"type": "done", "count": count, "missed": 6, "wall_ns": 250_000_000}
    driver_mod._received(going, done, blob, ["get"], time.monotonic(), duration=0.25)
    # + segment 1 (0.10-0.19 s: all 10) + segment 2 (0.20-0.29 s: 5 before 0.25 s); segments 3 and 4 are later
    assert going.done["missed"] == 6 + 10 + 5
    assert going.tally.ran == count


def test_a_cycling_phase_reports_a_part_per_pass_and_its_seconds_whole(monkeypatch, redis_server):
    """A closed-loop phase bounded by time: the driver cycles its batch, a part per pass (x-segments);
    cachemark folds each as it comes and closes each second once a later part begins after it. The
    per-second series still adds up to the phase's ops, each second with its latencies."""
    from driver_kit import needs_driver, with_client

    monkeypatch.setattr(driver_mod, "CYCLE_OPS", 500)  # many passes in the phase
    url = with_client(redis_server.url(), needs_driver("go-redis"))
    outcome = run_target(url, _workload(mix={"get": 1}, duration=2.2, workers=2, keys=100))
    assert outcome.status == "ok", outcome.reason
    phase = outcome.phases[0]
    get = phase.ops["get"]
    assert get.count > 2 * 500 and get.hits == get.count  # passes beyond the first, every key prefilled
    series = phase.timeseries
    assert [s["t"] for s in series] == list(range(len(series))) and len(series) >= 2
    assert sum(s["ops"] for s in series) == get.count
    assert all(0 < s["p50_us"] <= s["p99_us"] <= s["max_us"] for s in series if s["ops"])  # each second's latencies
