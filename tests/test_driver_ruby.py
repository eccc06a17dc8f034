"""The Ruby driver (drivers/ruby, docs/drivers.md): what is Rails.cache's own — its stores, the
per-process MemoryStore and the FileStore in the run's directory. Everything every driver must do —
hits and misses, verification, dropped and refused writes, a dying server, Ctrl-C, open loop,
passwords, the protocol — is in tests/test_driver_conformance.py.
"""

from __future__ import annotations

import pytest

from cachemark.run.runner import run_target
from driver_kit import handshake, needs_driver, with_client  # noqa: E402
from driver_kit import op as _op  # noqa: E402
from driver_kit import workload as _workload  # noqa: E402

CLIENT = "client=ruby-activesupport"


@pytest.fixture(autouse=True)
def _ruby() -> None:
    needs_driver("ruby-activesupport")  # ruby and its gems, or a skip saying what to install


@pytest.mark.parametrize(("kind", "store", "library"), [
    ("redis", "RedisCacheStore", "redis"), ("memcached", "MemCacheStore", "dalli")])
def test_the_stores_are_the_ones_rails_builds(kind, store, library, request):
    name = "ruby-activesupport"
    hello, ready = handshake(name, with_client(request.getfixturevalue(f"{kind}_server").url(), name))
    assert hello["runtime"].startswith("ruby ") and ready["client"] == f"ActiveSupport::Cache::{store}"
    assert ready["client_library"] == library and ready["client_version"] == hello["libraries"][library]
    assert hello["libraries"]["activesupport"]


def test_memory_store_is_per_process_and_file_store_stays_in_the_runs_directory(tmp_path):
    # MemoryStore: each of the 2 drivers has its own cache, so each prefills every key: all hits
    memory = run_target(f"memory://?{CLIENT}", _workload(mix={"get": 1}, ops=400))
    assert memory.status == "ok", memory.reason
    assert memory.backend.info["store"] == "ActiveSupport::Cache::MemoryStore"
    assert (_op(memory, "get").hits, _op(memory, "get").misses) == (400, 0)

    (tmp_path / "foreign.txt").write_text("mine")
    file = run_target(f"file://{tmp_path}?{CLIENT}", _workload(mix={"get": 1, "exists": 1}, ops=400))
    assert file.status == "ok", file.reason
    assert file.backend.info["store"] == "ActiveSupport::Cache::FileStore"
    assert sum(op.hits for op in file.phases[0].ops.values()) == 400
    assert file.backend.cleanup_removed >= 200  # Rails' files, in the run's own directory, removed
    assert [p.name for p in tmp_path.iterdir()] == ["foreign.txt"]
