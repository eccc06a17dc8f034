"""Session fixtures for the SQL, S3 and Django tests: PostgreSQL, MariaDB and moto's S3 server.

Loaded by those test modules through ``pytest_plugins = ["tests.fixtures_servers"]`` (so each
server starts once per session however many modules ask for it). Servers come from
:mod:`cachemark.lab` exactly as ``spawn:`` targets do; a missing binary or library skips
the tests that need it, with the reason, instead of failing them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cachemark.errors import BackendMissing
from cachemark.lab import LocalServer, server_class


def _start(kind: str, **options: object) -> LocalServer:
    try:
        return server_class(kind)(**options).start()
    except BackendMissing as exc:
        pytest.skip(f"{kind} not available: {exc}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalServer]:
    # Tests check behaviour, not durability: skip the fsync per commit to keep them quick.
    server = _start("postgresql", settings={"fsync": "off", "synchronous_commit": "off"})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[LocalServer]:
    server = _start("mysql", settings={"innodb-flush-log-at-trx-commit": 0, "sync-binlog": 0})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalServer]:
    server = _start("s3")
    yield server
    server.stop()
