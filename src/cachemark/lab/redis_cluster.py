"""``spawn:redis-cluster?nodes=3&replicas=0`` — a private Redis Cluster on loopback ports.

Owns :class:`RedisClusterServer`: ``nodes`` primaries (1–16, default 3), each with
``replicas`` replicas (0–2), every one a :class:`ClusterNode` — a lab redis-server in its
own temp dir with ``cluster-enabled yes`` and its cluster bus on a second free port
(``cluster-port``, so a busy ``port + 10000`` never matters). The cluster is formed the
way an operator would by hand: each primary takes an even share of the 16384 hash slots
(``CLUSTER ADDSLOTSRANGE``), every node is introduced with ``CLUSTER MEET``, replicas
``CLUSTER REPLICATE`` their primary; it is ready when every node says ``cluster_state:ok``
and knows every node. The URL lists every primary as a seed:
``redis+cluster://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3``. ``tls=1`` makes it a TLS-only
cluster, as managed ones are: one throw-away CA (``lab/certs.py``) signs a certificate every
node serves on its client port, its cluster bus (``tls-cluster``) and to its replicas
(``tls-replication``); the URL is ``rediss+cluster://…?ssl_ca_certs=…/ca.pem``. ``stop`` ends
every node and removes their directories; tests reach single nodes through ``nodes`` (to
kill one, or move a slot with :func:`command`).
"""

from __future__ import annotations

import shutil
import socket
import time
from typing import Any
from urllib.parse import quote

from .. import scratch
from ..errors import BackendUnavailable, SpecError
from ..textfile import one_line
from ..wire import LineReader
from .base import LocalServer, flag_option, free_port
from .certs import Certs, make_certs
from .redis import RedisServer

SLOTS = 16384
_MAX_NODES = 16
_MAX_REPLICAS = 2


class ClusterNode(RedisServer):
    """One redis-server with cluster mode on, its bus on a port of its own."""

    kind = "redis-cluster-node"

    def __init__(self, certs: Certs | None = None) -> None:
        super().__init__()
        self.bus_port = 0
        self.node_id = ""
        self.certs = certs  # the cluster's, shared by every node (one CA for clients to trust)
        self.tls = certs is not None

    def prepare(self) -> None:
        self.bus_port = free_port()

    def command(self) -> list[str]:
        # nodes.conf lives in the node's own dir; a short node timeout lets a killed node be noticed in tests
        return [*super().command(), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(self.bus_port), "--cluster-node-timeout", "2000",
                "--cluster-require-full-coverage", "no",
                # CLUSTER SLOTS leaves out a replica whose offset is still 0: a ping a second moves it on
                "--repl-ping-replica-period", "1",
                # a replica's first full sync at once, not after a 5 s wait for more replicas to share it
                "--repl-diskless-sync-delay", "0",
                *self._tls_links()]

    def _tls_links(self) -> list[str]:
        """The cluster bus and replication over TLS too: a node dials the others with the client certificate
        (the bus asks for one, and the server certificate is for serving only)."""
        if self.certs is None:
            return []
        return ["--tls-cluster", "yes", "--tls-replication", "yes", "--tls-client-cert-file", self.certs.client_cert,
                "--tls-client-key-file", self.certs.client_key]


def command(node: LocalServer, *args: str | int, timeout: float = 5.0) -> Any:
    """Send one command to a lab node and return its decoded reply (an error reply raises)."""
    connection = getattr(node, "connection", None)  # a lab redis-server: over TLS when it serves TLS
    with (connection(timeout) if connection else socket.create_connection((node.host, node.port), timeout=timeout)) \
            as sock:
        parts = [str(a).encode() for a in args]
        sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        reader = _Reader(sock)
        return reader.reply()


class RespError(Exception):
    """An error reply (``-ERR …``) from a node."""


class _Reader(LineReader):
    """RESP replies, as much of them as the cluster's set-up reads."""

    def reply(self) -> Any:
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exactly(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RespError(f"unexpected reply {one_line(repr(line), 60)}")


def _count(options: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    raw = options.get(name, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = low - 1
    if not low <= value <= high:
        raise SpecError(f"spawn:redis-cluster: {name}={one_line(repr(raw), 40)} must be a number from {low} to {high}")
    return value


def slot_ranges(primaries: int) -> list[tuple[int, int]]:
    """Even shares of the 16384 slots, first to last (inclusive ranges)."""
    edges = [i * SLOTS // primaries for i in range(primaries + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(primaries)]


class RedisClusterServer(LocalServer):
    kind = "redis-cluster"
    ready_timeout = 30.0

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.primaries_count = _count(options, "nodes", 3, 1, _MAX_NODES)
        self.replicas = _count(options, "replicas", 0, 0, _MAX_REPLICAS)
        self.tls = flag_option("redis-cluster", options, "tls")
        self.certs: Certs | None = None
        self.primaries: list[ClusterNode] = []
        self.nodes: list[ClusterNode] = []

    def command(self) -> list[str]:  # pragma: no cover - the nodes have commands, the cluster has none
        raise NotImplementedError

    def start(self) -> RedisClusterServer:
        if self.nodes:
            raise RuntimeError("redis cluster already started")
        try:
            if self.tls:
                self.tmpdir = scratch.make(f"cachemark-{self.kind}-")
                self.certs = make_certs(self.tmpdir)
            for _ in range(self.primaries_count * (1 + self.replicas)):
                self.nodes.append(ClusterNode(self.certs).start())
            self.primaries = self.nodes[: self.primaries_count]
            self.port = self.primaries[0].port
            self.version = self.primaries[0].version
            self._form()
        except BaseException:
            self.stop()
            raise
        return self

    def _form(self) -> None:
        for node in self.nodes:
            node.node_id = command(node, "CLUSTER", "MYID")
        for node, (first, last) in zip(self.primaries, slot_ranges(self.primaries_count), strict=True):
            command(node, "CLUSTER", "ADDSLOTSRANGE", first, last)
        seed = self.nodes[0]
        for node in self.nodes[1:]:
            command(seed, "CLUSTER", "MEET", node.host, node.port, node.bus_port)
        self._wait(lambda node: self._knows_all(node, with_roles=False), "every node to meet the others")
        for i, replica in enumerate(self.nodes[self.primaries_count:]):
            primary = self.primaries[i % self.primaries_count]
            command(replica, "CLUSTER", "REPLICATE", primary.node_id)
        self._wait(lambda node: "cluster_state:ok" in command(node, "CLUSTER", "INFO")
                   and self._knows_all(node), "cluster_state:ok on every node")
        replicas = self.nodes[self.primaries_count:]
        self._wait(lambda node: node not in replicas or "master_link_status:up" in command(node, "INFO", "replication"),
                   "every replica to sync with its primary")
        # clients learn of replicas from CLUSTER SLOTS: ready once every node lists them all there
        self._wait(lambda node: all(len(entry) - 3 == self.replicas for entry in command(node, "CLUSTER", "SLOTS")),
                   "every node to list the replicas in CLUSTER SLOTS")

    def _knows_all(self, node: ClusterNode, with_roles: bool = True) -> bool:
        """``node`` sees every node connected (and, ``with_roles``, every replica as a replica)."""
        lines = [line.split() for line in command(node, "CLUSTER", "NODES").splitlines() if line.strip()]
        connected = [f for f in lines if len(f) > 7 and f[7] == "connected" and "handshake" not in f[2]]
        replicas = [f for f in connected if "slave" in f[2].split(",")]
        roles_known = not with_roles or len(replicas) == len(self.nodes) - self.primaries_count
        return len(connected) == len(self.nodes) and roles_known

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                if all(ready(node) for node in self.nodes):
                    return
            except (OSError, RespError):
                pass
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"redis cluster: timed out after {self.ready_timeout:.0f}s waiting for {what}")
            time.sleep(0.05)

    def url(self) -> str:
        seeds = ",".join(f"{n.host}:{n.port}" for n in self.primaries)
        if self.certs is not None:
            return f"rediss+cluster://{seeds}?ssl_ca_certs={quote(self.certs.ca)}"
        return "redis+cluster://" + seeds

    def pid(self) -> int | None:
        return None  # many processes: no single server CPU to sample

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def restart(self) -> None:
        raise NotImplementedError("restart single nodes (cluster.nodes[i].restart())")

    def stop(self) -> None:
        nodes, self.nodes, self.primaries = self.nodes, [], []
        for node in nodes:
            node.stop()
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = ""

    def log_tail(self) -> str:
        return next((node.log_tail() for node in self.nodes if node.log_tail()), "")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "primaries": self.primaries_count, "replicas": self.replicas,
                "ports": [n.port for n in self.nodes], **({"tls": True} if self.tls else {})}
