"""``spawn:redis-sentinel`` — a primary, a replica and three Sentinels on free loopback ports.

Owns :class:`SentinelLab`: one redis-server primary, one replica of it (``--replicaof``),
and three ``redis-server sentinel.conf --sentinel`` processes that monitor the primary
as ``mymaster`` with a quorum of 2, a short ``down-after-milliseconds`` (1000, or
``down_after_ms=``) and ``failover-timeout`` (2000), so a failover is over in seconds,
not the minute Sentinel's defaults take. The short failover-timeout matters when all three
Sentinels start an election at once and none wins (rare, but seen beside a busy CPU): the next
try comes after twice that timeout, within the run that is timing the outage. Each process
has its own temp dir (a Sentinel rewrites its config file as it learns). Ready means every
Sentinel names the same primary, sees the two other Sentinels and knows the replica, and the
replica's link to the primary is up: only then can a failover happen at all.

The URL it hands out is ``redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster/0``
(the Sentinels, then the service name and the database). :meth:`SentinelLab.kill_primary`
kills whichever node the Sentinels call the primary now (SIGKILL, as a crash would), for
failover tests.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from ..errors import BackendUnavailable, SpecError
from .base import LocalServer, find_binary
from .redis import RedisServer, _read_replies, _resp

SERVICE = "mymaster"
QUORUM = 2
SENTINELS = 3
FAILOVER_TIMEOUT_MS = 2000


class _Primary(RedisServer):
    """The group's first primary: it sends its replica the first full sync at once, not after the
    5 s redis-server waits by default for more replicas to serve with the same transfer."""

    kind = "redis"

    def command(self) -> list[str]:
        return [*super().command(), "--repl-diskless-sync-delay", "0"]


class _Replica(RedisServer):
    """A redis-server that replicates ``primary`` from its start."""

    kind = "redis"

    def __init__(self, primary_port: int) -> None:
        super().__init__()
        self.primary_port = primary_port

    def command(self) -> list[str]:
        return [*super().command(), "--replicaof", "127.0.0.1", str(self.primary_port)]


class _Sentinel(LocalServer):
    """One Sentinel process watching the primary at ``primary_port``."""

    kind = "sentinel"

    def __init__(self, primary_port: int, down_after_ms: int) -> None:
        super().__init__()
        self.primary_port = primary_port
        self.down_after_ms = down_after_ms

    def prepare(self) -> None:
        # written by us, rewritten by the Sentinel (it records peers, replicas, epochs there)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\nprotected-mode yes\ndir {self.tmpdir}\n"
                    f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} {QUORUM}\n"
                    f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
                    f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                    f"sentinel parallel-syncs {SERVICE} 1\n")

    @property
    def config_path(self) -> str:
        return os.path.join(self.tmpdir, "sentinel.conf")

    def command(self) -> list[str]:
        return [find_binary("redis-server"), self.config_path, "--sentinel"]

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def ask(self, *command: str) -> bytes:
        """One command's raw reply (the lab needs a few fields; no client library here)."""
        with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
            sock.sendall(_resp(*command))
            return _read_reply(sock)


class SentinelLab(LocalServer):
    """The whole group; ``port`` is the first Sentinel's, the URL names all three."""

    kind = "redis-sentinel"
    ready_timeout = 30.0

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        raw = options.get("down_after_ms", 1000)
        try:
            self.down_after_ms = int(str(raw))
        except ValueError:
            raise SpecError(f"spawn:redis-sentinel: down_after_ms={raw!r} must be a whole number of ms") from None
        if not 100 <= self.down_after_ms <= 600_000:
            raise SpecError("spawn:redis-sentinel: down_after_ms must be from 100 to 600000")
        self.nodes: list[RedisServer] = []
        self.sentinels: list[_Sentinel] = []

    # LocalServer's one-process plumbing is replaced: this lab is five processes
    def command(self) -> list[str]:  # pragma: no cover - never launched as one process
        raise NotImplementedError

    def start(self) -> SentinelLab:
        find_binary("redis-server")  # BackendMissing (a skip) before anything starts
        try:
            primary = _Primary().start()
            self.nodes.append(primary)
            self.nodes.append(_Replica(primary.port).start())
            for _ in range(SENTINELS):
                self.sentinels.append(_Sentinel(primary.port, self.down_after_ms).start())
            self.port = self.sentinels[0].port
            self.version = primary.version
            self._wait_agreed(primary.port)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_agreed(self, primary_port: int) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                states = [_fields(s.ask("SENTINEL", "MASTER", SERVICE)) for s in self.sentinels]
                replica = self.nodes[1].proc is not None and _link_up(self.nodes[1])
            except OSError as exc:
                last = str(exc)
                time.sleep(0.1)
                continue
            agreed = all(st.get("port") == str(primary_port) and st.get("num-other-sentinels") == str(SENTINELS - 1)
                         and st.get("num-slaves") == "1" for st in states)
            if agreed and replica:
                return
            last = "; ".join(f"port={st.get('port')} sentinels={st.get('num-other-sentinels')} "
                             f"replicas={st.get('num-slaves')}" for st in states)
            time.sleep(0.1)
        raise BackendUnavailable(f"redis-sentinel: the Sentinels did not agree within {self.ready_timeout:.0f} s "
                                 f"({last or 'no answer'})")

    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def primary_port(self) -> int:
        """The port of the node the Sentinels call the primary now (asked of the first that answers)."""
        for sentinel in self.sentinels:
            try:
                reply = _bulk_strings(sentinel.ask("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE))
            except OSError:
                continue
            if len(reply) == 2:
                return int(reply[1])
        raise BackendUnavailable("redis-sentinel: no Sentinel names a primary")

    def node(self, port: int) -> RedisServer:
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    def kill_primary(self) -> int:
        """SIGKILL the current primary (its port and directory stay); returns its port."""
        port = self.primary_port()
        self.node(port).kill()
        return port

    def kill(self) -> None:
        self.kill_primary()

    def restart(self) -> None:
        raise NotImplementedError("a killed primary of spawn:redis-sentinel stays down")

    def pid(self) -> int | None:
        return self.nodes[0].pid() if self.nodes else None

    def log_tail(self) -> str:
        return next((p.log_tail() for p in [*self.sentinels, *self.nodes] if p.log_tail()), "")

    def stop(self) -> None:
        for process in [*self.sentinels, *self.nodes]:
            process.stop()  # Sentinels first: none starts a failover while the nodes go
        self.sentinels, self.nodes = [], []

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "spawned": True, "version": self.version, "port": None,
                "primary_port": self.nodes[0].port if self.nodes else None,
                "replica_port": self.nodes[1].port if len(self.nodes) > 1 else None,
                "sentinel_ports": [s.port for s in self.sentinels], "service": SERVICE,
                "down_after_ms": self.down_after_ms}


def _link_up(replica: RedisServer) -> bool:
    with socket.create_connection((replica.host, replica.port), timeout=1.0) as sock:
        sock.sendall(_resp("INFO", "replication"))
        return b"master_link_status:up" in _read_reply(sock)


def _read_reply(sock: socket.socket) -> bytes:
    """One whole RESP reply (a bulk string, an array of bulk strings, or a line), raw."""
    data = _read_replies(sock, 1)
    while not _complete(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _complete(data: bytes) -> bool:
    try:
        return _parse(data, 0)[1] == len(data)
    except IndexError:
        return False


def _parse(data: bytes, at: int) -> tuple[Any, int]:
    """A RESP2 value at ``at`` and where the next one starts; IndexError when incomplete."""
    end = data.find(b"\r\n", at)
    if end < 0:
        raise IndexError
    head, line = data[at:at + 1], data[at + 1:end]
    if head == b"$":
        size = int(line)
        if size < 0:
            return None, end + 2
        if len(data) < end + 2 + size + 2:
            raise IndexError
        return data[end + 2:end + 2 + size].decode(), end + 4 + size
    if head == b"*":
        out, pos = [], end + 2
        for _ in range(max(0, int(line))):
            value, pos = _parse(data, pos)
            out.append(value)
        return out, pos
    return line.decode(), end + 2


def _bulk_strings(data: bytes) -> list[Any]:
    value = _parse(data, 0)[0]
    return value if isinstance(value, list) else []


def _fields(data: bytes) -> dict[str, str]:
    flat = _bulk_strings(data)
    return dict(zip(flat[::2], flat[1::2], strict=False))
