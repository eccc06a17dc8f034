"""A trace replayed on a real server under cache-aside, to measure the get hit ratio a size gives.

Each get is sent; a get that misses is followed by a set of the object (its recorded size and
TTL); a set writes; a delete deletes. Requests go out paced on the trace's clock divided by
``speed`` (2: twice as fast), in pipelined batches of consecutive requests to distinct keys (a
key's requests keep their order: a batch ends where a key comes back; and at 16 KB of values, as
the replies a server holds for a pipeline count in its memory), gets first, then the batch's
writes. TTLs are divided by ``speed`` too — the trace's clock compressed, expiry with it
(Redis: milliseconds, ``PX``; memcached: whole seconds, at least 1, as its clock ticks) — and
each batch's send time is recorded, so the prediction it is compared with is simulated on the
clock the replay actually kept (a replay that falls behind shifts both alike).

The hit ratio is read from the server's own counters (Redis ``keyspace_hits``/``misses``,
memcached ``get_hits``/``get_misses``) and from the replay's own count; the two must agree.
``memory://`` (cachemark's in-process LRU) is replayed in this process through its backend, and
its hits are the replay's count.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from ..workload.traces.record import DELETE, GET, SET
from .requests import FETCH, Requests
from .server_model import ENTRIES, MAXMEMORY, ServerModel, replay_key

BATCH = 64
BATCH_BYTES = 16 << 10


@dataclass
class Replayed:
    gets: int
    hits: int  # counted by the replay
    server_gets: int  # the server's own counters
    server_hits: int
    evictions: int
    sent_us: np.ndarray  # per request: when its batch was sent, µs after the start (the replay's clock)
    seconds: float
    speed: float
    behind_s: float  # the most any batch was sent after its due time

    @property
    def hit_ratio(self) -> float:
        return self.server_hits / self.server_gets if self.server_gets else 0.0


def _batches(ids: np.ndarray, sizes: np.ndarray, limit: int = BATCH, limit_bytes: int = BATCH_BYTES,
             ) -> list[tuple[int, int]]:
    """Consecutive runs of requests to distinct keys, at most ``limit`` long and ``limit_bytes`` of
    values: a server counts the replies it holds for a pipeline in its memory (Redis's
    ``used_memory``: a 64-get batch of 4 KB values would evict 256 KB of keys to make room)."""
    out, start, seen, held = [], 0, set(), 0
    for i, (key, size) in enumerate(zip(ids.tolist(), sizes.tolist(), strict=True)):
        if key in seen or i - start >= limit or (held + size > limit_bytes and i > start):
            out.append((start, i))
            start, seen, held = i, set(), 0
        seen.add(key)
        held += size
    if start < len(ids):
        out.append((start, len(ids)))
    return out


class RefusedWrites(Exception):
    """Redis refused a write: over ``maxmemory`` with nothing left to evict (its ``-OOM`` reply)."""


class _Redis:
    """RESP over one socket (hiredis packs and parses): a batch's writes go out at once and their
    replies are read with the next batch's gets, so a batch costs one round trip, not two (redis-py's
    pipeline object took ~20 µs of Python a command; at ~4 requests a batch the round trips ruled)."""

    def __init__(self, port: int) -> None:
        import hiredis

        self.pack, self.error = hiredis.pack_command, hiredis.ReplyError
        self.reader = hiredis.Reader()
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.unread = 0  # replies to writes sent and not yet read

    def gets(self, keys: list[bytes]) -> list[bool]:
        self._send(b"".join(self.pack(("GET", key)) for key in keys))
        return [v is not None for v in self._replies(len(keys))]

    def writes(self, items: list[tuple[bytes, int, float]], deletes: list[bytes]) -> None:
        commands = [("SET", key, b"v" * size, "PX", max(1, int(ttl_s * 1000))) if ttl_s > 0
                    else ("SET", key, b"v" * size) for key, size, ttl_s in items]
        commands += [("DEL", key) for key in deletes]
        self._send(b"".join(self.pack(c) for c in commands))
        self.unread += len(commands)

    def counters(self) -> tuple[int, int, int]:
        self._send(self.pack(("INFO", "stats")))
        (info,) = self._replies(1)
        stats = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
        hits, misses = int(stats["keyspace_hits"]), int(stats["keyspace_misses"])
        return hits + misses, hits, int(stats["evicted_keys"])

    def _replies(self, n: int) -> list[object]:
        """The next ``n`` replies, after the writes' still unread (an error among them is raised)."""
        want, out = self.unread + n, []
        while len(out) < want:
            reply = self.reader.gets()
            if reply is False:
                try:
                    data = self.sock.recv(1 << 16)
                except OSError as exc:
                    raise _gone(exc) from None
                if not data:
                    raise _gone(None)
                self.reader.feed(data)
                continue
            if isinstance(reply, self.error):
                if str(reply).startswith("OOM"):
                    raise RefusedWrites(str(reply))
                raise UserError(f"the server refused the replay: {reply}")
            out.append(reply)
        self.unread = 0
        return out[want - n:]

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise _gone(exc) from None

    def close(self) -> None:
        self.sock.close()


def _gone(exc: OSError | None) -> UserError:
    """A server that stopped during the replay: the user's one line, not a crash of ours."""
    why = f" ({exc.strerror or exc})" if exc is not None else ""
    return UserError(f"the server closed its connection during the replay{why}: it stopped or was stopped")


class _Memcached:
    def __init__(self, port: int) -> None:
        from pymemcache.client.base import Client

        self.client = Client(("127.0.0.1", port), default_noreply=False, no_delay=True)

    def gets(self, keys: list[bytes]) -> list[bool]:
        found = self.client.get_many(keys)
        return [key in found for key in keys]

    def writes(self, items: list[tuple[bytes, int, float]], deletes: list[bytes]) -> None:
        by_expiry: dict[int, dict[bytes, bytes]] = {}
        for key, size, ttl_s in items:
            # memcached's expiry is whole seconds on a clock that ticks once a second
            expire = max(1, round(ttl_s)) if ttl_s > 0 else 0
            by_expiry.setdefault(expire, {})[key] = b"v" * size
        for expire, values in by_expiry.items():  # one write per expiry, no replies to wait for
            self.client.set_many(values, expire=expire, noreply=True)
        if deletes:
            self.client.delete_many(deletes, noreply=True)

    def counters(self) -> tuple[int, int, int]:
        stats = self.client.stats()
        hits, misses = int(stats[b"get_hits"]), int(stats[b"get_misses"])
        expired = int(stats.get(b"get_expired", 0))  # already among the misses
        del expired
        return hits + misses, hits, int(stats[b"evictions"])

    def close(self) -> None:
        self.client.close()


class _Memory:
    """cachemark's in-process LRU, through its own backend; the replay's count is the counter."""

    def __init__(self, url: str) -> None:
        from ..backends import create_backend
        from ..target import parse_target

        self.backend = create_backend(parse_target(url), "")
        self.backend.open()
        self.gets_seen = self.hits_seen = 0

    def gets(self, keys: list[bytes]) -> list[bool]:
        found = [self.backend.get(key.decode()) is not None for key in keys]
        self.gets_seen += len(found)
        self.hits_seen += sum(found)
        return found

    def writes(self, items: list[tuple[bytes, int, float]], deletes: list[bytes]) -> None:
        for key, size, ttl_s in items:
            self.backend.set(key.decode(), b"v" * size, ttl_s if ttl_s > 0 else None)
        for key in deletes:
            self.backend.delete(key.decode())

    def counters(self) -> tuple[int, int, int]:
        return self.gets_seen, self.hits_seen, 0

    def close(self) -> None:
        self.backend.close()


def replay(model: ServerModel, setting: int, requests: Requests, speed: float = 1.0) -> Replayed:
    """Spawn the server at ``setting``, replay ``requests`` on it, and read its counters."""
    from ..lab import spawn_server

    if model.param == ENTRIES:
        client = _Memory(model.spawn_url(setting))
        try:
            return _run(client, requests, speed)
        finally:
            client.close()

    with spawn_server(model.server, **model.spawn_params(setting)) as server:
        client = _Redis(server.port) if model.param == MAXMEMORY else _Memcached(server.port)
        try:
            return _run(client, requests, speed)
        finally:
            client.close()


def _run(client: _Redis | _Memcached | _Memory, r: Requests, speed: float) -> Replayed:
    base_gets, base_hits, base_evictions = client.counters()
    t0 = int(r.t_us[0]) if len(r) else 0
    due_us = (r.t_us - t0) / speed
    sent = np.zeros(len(r), dtype=np.int64)
    ops, ids, ks, vs, ttl = r.op.tolist(), r.ids.tolist(), r.key_size.tolist(), r.value_size.tolist(), r.ttl_s.tolist()
    gets = hits = 0
    behind = 0.0
    start = time.perf_counter()
    for a, b in _batches(r.ids, r.value_size):
        now = (time.perf_counter() - start) * 1e6
        wait = due_us[a] - now
        if wait > 0:
            time.sleep(wait / 1e6)
        else:
            behind = max(behind, -wait / 1e6)
        sent[a:b] = int((time.perf_counter() - start) * 1e6)
        read = [i for i in range(a, b) if ops[i] in (GET, FETCH)]
        found = client.gets([replay_key(ids[i], ks[i]) for i in read]) if read else []
        items, deletes = [], []
        for i, hit in zip(read, found, strict=True):
            gets += 1
            hits += hit
            if not hit:
                items.append((replay_key(ids[i], ks[i]), max(1, vs[i]), ttl[i] / speed))
        for i in range(a, b):
            if ops[i] == SET:
                items.append((replay_key(ids[i], ks[i]), max(1, vs[i]), ttl[i] / speed))
            elif ops[i] == DELETE:
                deletes.append(replay_key(ids[i], ks[i]))
        if items or deletes:
            client.writes(items, deletes)
    seconds = time.perf_counter() - start
    all_gets, all_hits, evictions = client.counters()
    return Replayed(gets, hits, all_gets - base_gets, all_hits - base_hits, evictions - base_evictions, sent,
                    seconds, speed, behind)
