"""What every driver of one server must agree on, whatever its stack: a dropped write is caught.

memcached reads an expiry over 30 days (2,592,000 s) as a Unix timestamp, so a TTL of 2,592,001 s
is 31 January 1970: the server answers STORED and the item is gone at once — a real dropped write
(the classic memcached TTL mistake). A client that passes the TTL as it is has every write dropped,
and the driver's canary (write, read back) must say so; Rails' Dalli and Symfony's adapter turn a
long TTL into a timestamp themselves, so through them nothing is lost.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cachemark.run.runner import run_target

sys.path.insert(0, str(Path(__file__).parent))
from driver_kit import needs_driver, op, with_client, workload  # noqa: E402

THIRTY_DAYS_AND_A_SECOND = 2_592_001


@pytest.mark.parametrize(("client", "dropped"), [
    ("go-memcache", 20), ("node-memjs", 20), ("java-spymemcached", 20),
    ("php-symfony", 0), ("ruby-activesupport", 0),
])
def test_a_write_memcached_expires_at_once_is_a_dropped_write(memcached_server, client, dropped):
    needs_driver(client)
    outcome = run_target(with_client(memcached_server.url(), client),
                         workload(keys=5, value_size=100, mix={"set": 1}, ops=20, workers=1, prefill=False,
                                  verify_writes=1, on_error="continue", ttl=THIRTY_DAYS_AND_A_SECOND))
    assert outcome.status == "ok", outcome.reason
    set_ = op(outcome, "set")
    assert set_["count"] == 20 and set_["errors"].get("dropped_write", 0) == dropped, set_["errors"]
