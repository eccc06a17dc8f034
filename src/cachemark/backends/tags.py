"""Clean-by-tag on every backend: three implementations behind ``with_tags(backend, mode)``.

This module owns tagged writes (``set_tagged``) and clean-by-tag (``clean_tags``, match
any tag) for any backend, in the three designs web applications really use, so their
costs can be compared:

``native``    Redis sets, as Cm_Cache_Backend_Redis lays them out: a hash per record
              ``zc:k:<id>`` {d: data, t: tags, m: mtime, i: infinite}, a set per tag
              ``zc:ti:<tag>`` of ids, the set of all tags ``zc:tags``; save, remove and clean
              are Lua scripts, so each is atomic. Clean is O(entries with the tag).
``versioned`` Symfony TagAwareAdapter's scheme on any key-value backend: an item stores
              the version of each of its tags at write time; a read fetches the current
              versions and misses on any difference; invalidating a tag deletes its version
              key (a fresh random one is made by the next write). Clean is O(tags).
``scan``      Zend_Cache_Backend_File's scheme in its own directory: one data file and one
              metadata file (expiry, mtime, tags) per entry; clean reads every metadata file.
              Clean is O(all entries) in file reads.

Every key used lives under the run's namespace (``<ns>zc:k:…``, ``<ns>tagv:<tag>``, the
namespace's directory), so the inner backend's ``clear_namespace`` still cleans up.
``clean_tags`` returns the entries removed (native, scan) or the tags invalidated
(versioned, which never touches the entries). Tags may not contain ``,``.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Iterable, Mapping
from itertools import count
from typing import Any, ClassVar
from urllib.parse import quote, unquote

from ..errors import BackendUnavailable, SpecError
from ..schemes import scheme
from ..target import Target
from .base import Backend, Capabilities
from .registry import backend_class

MODES = ("native", "versioned", "scan")


def with_tags(backend: Backend, mode: str) -> Backend:
    """``backend`` wrapped so it supports ``set_tagged`` and ``clean_tags`` the ``mode`` way."""
    if mode == "native":
        return RedisTagBackend(backend)
    if mode == "versioned":
        return VersionedTagBackend(backend)
    if mode == "scan":
        return ScanTagBackend(backend)
    raise SpecError(f"{backend.target.redacted}: tags={mode!r}; use one of {', '.join(MODES)}")


def _kept_natively(inner: Backend) -> str | None:
    """The tag mode the inner backend's scheme keeps natively (its row's ``tags``): native or scan."""
    return scheme(inner.target.scheme).tags


def _check_tags(tags: Iterable[str]) -> list[str]:
    tags = list(tags)
    for tag in tags:
        if not tag or "," in tag:
            raise ValueError(f"tag {tag!r} must be non-empty and contain no ','")
    return tags


class _TagWrapper(Backend):
    """Delegates lifecycle to the wrapped backend; subclasses own the data path."""

    mode: ClassVar[str]
    _native: ClassVar[frozenset[str]]
    _emulated: ClassVar[dict[str, str]] = {}

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner.target, inner.namespace)
        self.inner = inner
        self.scheme = inner.scheme  # type: ignore[misc]

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        inner = backend_class(target).capabilities(target)
        return Capabilities(
            native=cls._native, emulated=dict(cls._emulated), ttl=True, tags=cls.mode, shared=inner.shared
        )

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def info(self) -> dict[str, Any]:
        return {**self.inner.info(), "tags": self.mode}

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        self.set_tagged(key, value, [], ttl)

    def ids_matching_any(self, tags: list[str]) -> list[str]:
        """The keys carrying any of ``tags`` (what Zend's TwoLevels asks its slow backend)."""
        raise NotImplementedError(f"tags={self.mode} cannot list the entries of a tag")


# -- native: Redis sets, Cm_Cache_Backend_Redis's layout ---------------------------------

# KEYS: record hash, set of all tags. ARGV: data, tags csv, mtime, infinite, ttl ms (0 = none),
# tag-set prefix, id. Replacing a record drops its id from the tags it no longer carries.
_SAVE = """
local old = redis.call('HGET', KEYS[1], 't')
redis.call('HSET', KEYS[1], 'd', ARGV[1], 't', ARGV[2], 'm', ARGV[3], 'i', ARGV[4])
if tonumber(ARGV[5]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) else redis.call('PERSIST', KEYS[1]) end
local new = {}
for tag in string.gmatch(ARGV[2], '[^,]+') do
  new[tag] = true
  redis.call('SADD', ARGV[6] .. tag, ARGV[7])
  redis.call('SADD', KEYS[2], tag)
end
if old then
  for tag in string.gmatch(old, '[^,]+') do
    if not new[tag] then redis.call('SREM', ARGV[6] .. tag, ARGV[7]) end
  end
end
return 1
"""

# KEYS: record hash. ARGV: tag-set prefix, id. Returns 1 if the record existed.
_REMOVE = """
local old = redis.call('HGET', KEYS[1], 't')
local n = redis.call('DEL', KEYS[1])
if old then
  for tag in string.gmatch(old, '[^,]+') do redis.call('SREM', ARGV[1] .. tag, ARGV[2]) end
end
return n
"""

# KEYS: set of all tags. ARGV: record prefix, tag-set prefix, tags... (match any).
# Deletes in chunks: unpack() of a huge table overflows Lua's stack.
_CLEAN = """
local removed = 0
for i = 3, #ARGV do
  local ids = redis.call('SMEMBERS', ARGV[2] .. ARGV[i])
  local batch = {}
  for _, id in ipairs(ids) do
    batch[#batch + 1] = ARGV[1] .. id
    if #batch == 500 then removed = removed + redis.call('DEL', unpack(batch)); batch = {} end
  end
  if #batch > 0 then removed = removed + redis.call('DEL', unpack(batch)) end
  redis.call('DEL', ARGV[2] .. ARGV[i])
  redis.call('SREM', KEYS[1], ARGV[i])
end
return removed
"""


class RedisTagBackend(_TagWrapper):
    mode = "native"
    _native = frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "incr", "clean"})

    def __init__(self, inner: Backend) -> None:
        if _kept_natively(inner) != self.mode:
            raise SpecError(f"{inner.target.redacted}: tags=native needs a redis:// target (Redis sets)")
        super().__init__(inner)
        ns = inner.namespace
        self._rec = ns + "zc:k:"
        self._tag = ns + "zc:ti:"
        self._all = ns + "zc:tags"
        self.r: Any = None

    def open(self) -> None:
        self.inner.open()
        client = getattr(self.inner, "client", None)
        if client is None:
            raise BackendUnavailable(f"{self.target.redacted}: tags=native needs the redis-py client")
        self.r = client
        # register_script: EVALSHA, falling back to EVAL once when the server lacks the script.
        self._save = client.register_script(_SAVE)
        self._remove = client.register_script(_REMOVE)
        self._clean = client.register_script(_CLEAN)

    def _id(self, key: str) -> str:
        return key[len(self.namespace):] if key.startswith(self.namespace) else key

    def _save_args(self, key: str, value: bytes, tags: list[str], ttl: float | None) -> tuple[list, list]:
        ttl_ms = 0 if ttl is None else max(1, int(ttl * 1000))
        return (
            [self._rec + self._id(key), self._all],
            [value, ",".join(tags), int(time.time()), int(ttl is None), ttl_ms, self._tag, self._id(key)],
        )

    def set_tagged(self, key: str, value: bytes, tags: list[str], ttl: float | None = None) -> None:
        keys, args = self._save_args(key, value, _check_tags(tags), ttl)
        self._save(keys=keys, args=args)

    def get(self, key: str) -> bytes | None:
        return self.r.hget(self._rec + self._id(key), "d")

    def delete(self, key: str) -> bool:
        return bool(self._remove(keys=[self._rec + self._id(key)], args=[self._tag, self._id(key)]))

    def exists(self, key: str) -> bool:
        return bool(self.r.exists(self._rec + self._id(key)))

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            pipe.hget(self._rec + self._id(key), "d")
        return {k: v for k, v in zip(keys, pipe.execute(), strict=True) if v is not None}

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        pipe = self.r.pipeline(transaction=False)
        for key, value in items.items():
            keys, args = self._save_args(key, value, [], ttl)
            self._save(keys=keys, args=args, client=pipe)
        pipe.execute()

    def incr(self, key: str, delta: int = 1) -> int:
        return int(self.r.hincrby(self._rec + self._id(key), "d", delta))

    def clean_tags(self, tags: list[str]) -> int:
        tags = _check_tags(tags)
        if not tags:
            return 0
        return int(self._clean(keys=[self._all], args=[self._rec, self._tag, *tags]))

    def ids_matching_any(self, tags: list[str]) -> list[str]:
        members = self.r.sunion([self._tag + t for t in _check_tags(tags)]) if tags else set()
        return [self.namespace + m.decode() for m in members]

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        return self.inner.clear_namespace(written_keys)


# -- versioned: Symfony TagAwareAdapter's scheme on any key-value backend -------------------

_MAGIC = b"CMTV1"
_U16 = struct.Struct(">H")
_VERSION_LEN = 8


def version_key(namespace: str, tag: str) -> str:
    """The key holding a tag's current version under tags=versioned.

    Backends that cannot list keys (memcached) clean up only what the runner names, so
    the runner names these too (one per tag of the workload's pool).
    """
    return f"{namespace}tagv:{tag}"


def _encode(value: bytes, versions: Mapping[str, bytes]) -> bytes:
    parts = [_MAGIC, _U16.pack(len(versions))]
    for tag, version in versions.items():
        raw = tag.encode()
        parts += [_U16.pack(len(raw)), raw, version]
    parts.append(value)
    return b"".join(parts)


def _decode(blob: bytes) -> tuple[bytes, dict[str, bytes]] | None:
    if not blob.startswith(_MAGIC):
        return None  # not written through this wrapper: treat as a miss, never as data
    pos = len(_MAGIC)
    (n,) = _U16.unpack_from(blob, pos)
    pos += 2
    versions = {}
    for _ in range(n):
        (length,) = _U16.unpack_from(blob, pos)
        pos += 2
        tag = blob[pos:pos + length].decode()
        pos += length
        versions[tag] = blob[pos:pos + _VERSION_LEN]
        pos += _VERSION_LEN
    return blob[pos:], versions


class VersionedTagBackend(_TagWrapper):
    mode = "versioned"
    _native = frozenset({"get", "set", "delete", "exists", "get_many", "set_many", "clean"})
    _emulated: ClassVar[dict[str, str]] = {"incr": "get + set of the versioned item, not atomic"}

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self._tag_prefix = version_key(inner.namespace, "")
        self._seen_tags: set[str] = set()  # tag keys this process used, for cleanup on memcached

    def _tag_key(self, tag: str) -> str:
        return self._tag_prefix + tag

    def _current_versions(self, tags: Iterable[str], create: bool) -> dict[str, bytes | None]:
        tags = list(tags)
        keys = [self._tag_key(t) for t in tags]
        self._seen_tags.update(keys)
        found = self.inner.get_many(keys)
        versions: dict[str, bytes | None] = {t: found.get(k) for t, k in zip(tags, keys, strict=True)}
        if create:
            for tag, version in versions.items():
                if version is None:
                    # A deleted (invalidated) tag gets a fresh random version on its next write.
                    # Two writers racing here can make one of their items miss: a spurious miss,
                    # never a stale hit (Symfony's adapter has the same race).
                    version = os.urandom(_VERSION_LEN)
                    self.inner.set(self._tag_key(tag), version)
                    versions[tag] = version
        return versions

    def set_tagged(self, key: str, value: bytes, tags: list[str], ttl: float | None = None) -> None:
        tags = _check_tags(tags)
        versions = self._current_versions(tags, create=True) if tags else {}
        self.inner.set(key, _encode(value, versions), ttl)  # type: ignore[arg-type]

    def _valid(self, decoded: list[tuple[str, bytes, dict[str, bytes]]]) -> dict[str, bytes]:
        tags = {t for _, _, versions in decoded for t in versions}
        current = self._current_versions(tags, create=False) if tags else {}
        return {
            key: value
            for key, value, versions in decoded
            if all(current.get(t) == v for t, v in versions.items())
        }

    def get(self, key: str) -> bytes | None:
        blob = self.inner.get(key)
        if blob is None:
            return None
        decoded = _decode(blob)
        if decoded is None:
            return None
        value, versions = decoded
        if not versions:
            return value
        return self._valid([(key, value, versions)]).get(key)

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        decoded = []
        for key, blob in self.inner.get_many(keys).items():
            item = _decode(blob)
            if item is not None:
                decoded.append((key, item[0], item[1]))
        return self._valid(decoded)

    def set_many(self, items: Mapping[str, bytes], ttl: float | None = None) -> None:
        self.inner.set_many({k: _encode(v, {}) for k, v in items.items()}, ttl)

    def delete(self, key: str) -> bool:
        return self.inner.delete(key)

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    def incr(self, key: str, delta: int = 1) -> int:
        current = self.get(key)
        number = (int(current) if current is not None else 0) + delta
        self.set(key, str(number).encode())
        return number

    def clean_tags(self, tags: list[str]) -> int:
        # O(tags): the entries stay where they are and fail their version check on read.
        for tag in _check_tags(tags):
            self.inner.delete(self._tag_key(tag))
        return len(tags)

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        return self.inner.clear_namespace([*written_keys, *self._seen_tags])


# -- scan: Zend_Cache_Backend_File's scheme ---------------------------------------------------

_DATA = "zc---"
_META = "zc---internal-metadatas---"


class ScanTagBackend(_TagWrapper):
    """Data and metadata files per entry in ``<root>/<namespace dir>/``; clean reads them all.

    Unlike Zend, metadata is not cached in memory between calls: Zend's cache lives for one
    short PHP request, ours would live for a whole run and serve other workers' stale tags.
    Writes go to a temp file and are renamed into place (Zend locks instead), so a reader
    never sees half a file.
    """

    mode = "scan"
    _native = frozenset({"get", "set", "delete", "exists", "clean"})
    _emulated: ClassVar[dict[str, str]] = {
        "get_many": "one get per key",
        "set_many": "one set per key",
        "incr": "read + write of the data file, not atomic",
    }

    def __init__(self, inner: Backend) -> None:
        from .file import PrivateDir, local_path, run_temp_dir

        if _kept_natively(inner) != self.mode:
            raise SpecError(f"{inner.target.redacted}: tags=scan is a file backend; use a file:// target")
        super().__init__(inner)
        path = local_path(inner.target)
        self.root = path or run_temp_dir("zendfile", inner.namespace)
        self.private = PrivateDir(self.root, inner.namespace, temp_root=not path)
        self.dir = self.private.path
        self._tmp_names = count()

    def open(self) -> None:
        try:
            self.private.create()
        except OSError as exc:
            reason = f"cannot create {self.dir}: {exc.strerror}"
            raise BackendUnavailable(f"{self.target.redacted}: {reason}") from None

    def close(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"client": "cachemark zend-file layout", "tags": self.mode, "dir": self.dir}

    def _id(self, key: str) -> str:
        rest = key[len(self.namespace):] if key.startswith(self.namespace) else key
        return quote(rest, safe="")  # no '/' or NUL in a file name

    def _write(self, path: str, data: bytes) -> None:
        tmp = f"{path}.{os.getpid()}-{next(self._tmp_names)}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def _meta(self, ident: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self.dir, _META + ident), "rb") as f:
                return json.loads(f.read())
        except (FileNotFoundError, ValueError):
            return None

    def _remove(self, ident: str) -> bool:
        removed = False
        for name in (_DATA + ident, _META + ident):
            try:
                os.unlink(os.path.join(self.dir, name))
                removed = True
            except FileNotFoundError:
                pass
        return removed

    def set_tagged(self, key: str, value: bytes, tags: list[str], ttl: float | None = None) -> None:
        ident = self._id(key)
        now = time.time()
        meta = {"expire": 0 if ttl is None else now + ttl, "mtime": now, "tags": _check_tags(tags)}
        # Zend's order: the data, then its metadata.
        self._write(os.path.join(self.dir, _DATA + ident), value)
        self._write(os.path.join(self.dir, _META + ident), json.dumps(meta).encode())

    def _alive(self, meta: dict[str, Any] | None) -> bool:
        return meta is not None and (not meta["expire"] or meta["expire"] > time.time())

    def get(self, key: str) -> bytes | None:
        ident = self._id(key)
        if not self._alive(self._meta(ident)):  # Zend's load(): test() the metadata first
            return None
        try:
            with open(os.path.join(self.dir, _DATA + ident), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> bool:
        return self._remove(self._id(key))

    def exists(self, key: str) -> bool:
        return self._alive(self._meta(self._id(key)))

    def incr(self, key: str, delta: int = 1) -> int:
        current = self.get(key)
        number = (int(current) if current is not None else 0) + delta
        self.set(key, str(number).encode())
        return number

    def _matching(self, tags: set[str]) -> list[str]:
        """Every entry's metadata read, as Zend's clean does: O(entries)."""
        hits = []
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            if not entry.name.startswith(_META) or entry.name.endswith(".tmp"):
                continue
            ident = entry.name[len(_META):]
            meta = self._meta(ident)
            if meta is not None and tags.intersection(meta["tags"]):
                hits.append(ident)
        return hits

    def clean_tags(self, tags: list[str]) -> int:
        return sum(self._remove(ident) for ident in self._matching(set(_check_tags(tags))))

    def ids_matching_any(self, tags: list[str]) -> list[str]:
        return [self.namespace + unquote(i) for i in self._matching(set(_check_tags(tags)))]

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        try:
            removed = sum(1 for name in os.listdir(self.dir) if name.startswith(_META))
        except FileNotFoundError:
            removed = 0
        self.private.remove(f"up to {removed:,} entries of namespace {self.namespace}")
        return removed
