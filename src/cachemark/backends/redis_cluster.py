"""``redis+cluster://[:password@]h1:p1,h2:p2?client=redis-py&read_from_replicas=1`` — Redis Cluster
through redis-py's ``RedisCluster``; ``rediss+cluster://…?ssl_ca_certs=…`` over TLS (every node).

Owns :class:`RedisClusterBackend`. The hosts are seeds: the client asks them for the slot
map and routes each key to the primary owning its hash slot, following ``MOVED``/``ASK``
itself. As in :class:`~.redis.RedisBackend`, redis-py's retries after a failure are off,
so a dead node's ops are counted errors; redirects are not failures and stay redis-py's
own business. ``get_many`` is ``mget_nonatomic`` (one MGET per slot, as a cluster
refuses cross-slot MGET), ``set_many`` a non-transactional cluster pipeline (batched per
node). ``read_from_replicas=1`` sends reads to primaries and replicas round-robin.
Cleanup scans every primary for the run's namespace and UNLINKs what it finds, one slot
at a time — never FLUSHALL.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import redis
from redis.cluster import ClusterNode, LoadBalancingStrategy, RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from ..errors import BackendUnavailable, SpecError
from ..target import Target
from .base import Capabilities, cleanup_failed
from .redis import _GLOB_SPECIAL, _UNLINK_BATCH, RedisBackend, _one_line


class RedisClusterBackend(RedisBackend):
    scheme = "redis+cluster"

    def __init__(self, target: Target, namespace: str) -> None:
        if "hiredis" in target.params:  # RedisCluster hands its nodes no parser choice: hiredis when installed
            raise SpecError(f"{target.redacted}: hiredis= is not a choice for a cluster (redis-py's cluster client "
                            "uses hiredis when it is installed)")
        super().__init__(target, namespace)
        if target.path.strip("/") not in ("", "0"):
            raise SpecError(f"{target.redacted}: a Redis Cluster has database 0 only")
        self.seeds = list(target.endpoint().hosts)  # a seed without a port: the row's default
        self.where = "cluster " + ",".join(f"{h}:{p}" for h, p in self.seeds)
        self.read_from_replicas = target.bool_param("read_from_replicas")
        dropped = ("host", "port", "db", "parser_class", "connection_class")  # per node, RedisCluster's own
        kwargs = {k: v for k, v in self._kwargs.items() if k not in dropped}
        if self.tls:  # the ssl_* settings stay; RedisCluster picks its own SSL connection class
            kwargs["ssl"] = True
        if self.read_from_replicas:
            kwargs["load_balancing_strategy"] = LoadBalancingStrategy.ROUND_ROBIN
        self._kwargs = kwargs
        self.client: RedisCluster | None = None  # type: ignore[assignment]
        self._start_owners: list[str] = []  # per hash slot, its primary when the run connected

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(native=frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr"}))

    def info(self) -> dict[str, Any]:
        return {**super().info(), "cluster": True, "seeds": len(self.seeds),
                "read_from_replicas": self.read_from_replicas}

    def open(self) -> None:
        if self.client is not None:
            return
        try:
            client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in self.seeds],
                                  require_full_coverage=True, **self._kwargs)
            self.server_version = str(client.get_primaries()[0].redis_connection.info("server")
                                      .get("redis_version", ""))
        except redis.AuthenticationError as exc:
            raise BackendUnavailable(f"redis {self.where}: authentication failed: {_one_line(exc)}") from None
        except (redis.RedisError, RedisClusterException, IndexError) as exc:
            raise BackendUnavailable(f"redis {self.where}: {_one_line(exc)}") from None
        self._bind(client, client.mget_nonatomic)  # a cluster refuses cross-slot MGET
        owners = client.nodes_manager.slots_cache
        self._start_owners = [owners[slot][0].name if owners.get(slot) else "" for slot in range(16384)]

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def outage_scope(self, key: str) -> str:
        """The primary that owned ``key``'s slot when the run connected: a write-outage window is about one
        node's keys (measure/outage.py), so a failover is one window while the other nodes' writes go on."""
        return self._start_owners[key_slot(key.encode())]

    def current_server(self, key: str | None = None) -> str | None:
        """The node ``key``'s slot is served by now (after a failover: the replica promoted)."""
        if self.client is None or key is None:
            return self.where if self.client is not None else None
        node = self.client.nodes_manager.get_node_from_slot(key_slot(key.encode()))
        return node.name if node is not None else None

    def primaries(self) -> list[redis.Redis]:
        """A plain client per primary, for per-node questions (scans, counters)."""
        if self.client is None:
            self.open()
        assert self.client is not None
        return [self.client.get_redis_connection(node) for node in self.client.get_primaries()]

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        removed = 0
        try:
            pattern = _GLOB_SPECIAL.sub(r"\\\1", self.namespace) + "*"
            for node in self.primaries():
                by_slot: dict[int, list[bytes]] = defaultdict(list)
                for key in node.scan_iter(match=pattern, count=1000):
                    by_slot[key_slot(key)].append(key)
                # a cluster refuses multi-key commands across slots, even on one node
                pipe = node.pipeline(transaction=False)
                for keys in by_slot.values():
                    for start in range(0, len(keys), _UNLINK_BATCH):
                        pipe.unlink(*keys[start:start + _UNLINK_BATCH])
                removed += sum(pipe.execute())
        except Exception as exc:  # noqa: BLE001 - say what is left, in one line
            left = f"keys of namespace {self.namespace} ({removed:,} removed before)"
            raise cleanup_failed(f"redis {self.where}", exc, left) from None
        return removed


__all__ = ["RedisClusterBackend"]
