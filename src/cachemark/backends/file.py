"""``file:///path?fanout=1`` — one file per key, the way file-based web caches work.

Owns :class:`FileBackend`, :func:`local_path` (the path rules shared with the diskcache,
sqlite and Django adapters) and the run's private directory (:class:`PrivateDir`).
Layout: ``<root>/<namespace dir>/<fan-out>/<sha1(key)>``; each file is an 8-byte
big-endian expiry time (0.0 = never) followed by the value. Writes go to a temp file in
the same directory and are ``os.replace``-d into place, so readers in other worker
processes never see half a value. The run writes only inside its own namespace
directory, which it creates and removes, so whatever else ``<root>`` holds is never
touched; ``<root>`` itself is removed again only when the run created it. ``file://``
(no path) uses a directory under the system temp dir named after the namespace, so every
worker of a run finds the same one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Iterable
from itertools import count
from typing import Any

from ..errors import BackendUnavailable, SpecError
from ..target import Target
from .base import Backend, Capabilities, CleanupFailed

_HEADER = struct.Struct(">d")
_NEVER = _HEADER.pack(0.0)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# Linux's PATH_MAX and NAME_MAX: longer paths fail in the kernel with a less clear message.
_PATH_MAX = 4096
_NAME_MAX = 255


def local_path(target: Target) -> str:
    """The filesystem path of a ``scheme:///abs/path`` or ``scheme://rel/path`` target ("" if none).

    A path no filesystem accepts (a NUL byte, over 4096 bytes, a name over 255) is a
    SpecError here, before any worker starts, naming the problem rather than echoing it.
    """
    path = target.path
    if target.hosts:  # scheme://relative/dir puts the first segment in the netloc
        path = target.hosts[0][0] + path
    where = f"{target.scheme}:// target"
    if "\x00" in path:
        raise SpecError(f"{where}: the path contains a NUL byte (%00), which no file name may hold")
    size = len(os.fsencode(path))
    if size > _PATH_MAX:
        raise SpecError(f"{where}: the path is {size:,} bytes long; a path may have at most {_PATH_MAX} bytes")
    longest = max((len(os.fsencode(name)) for name in path.split("/")), default=0)
    if longest > _NAME_MAX:
        raise SpecError(
            f"{where}: the path has a {longest:,}-byte name; a file or directory name may have at most "
            f"{_NAME_MAX} bytes"
        )
    return path


def run_temp_dir(kind: str, namespace: str) -> str:
    """A temp directory every worker of one run derives alike from the namespace."""
    digest = hashlib.sha1(namespace.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"cachemark-{kind}-{digest}")


def namespace_dirname(namespace: str) -> str:
    """A filesystem-safe, collision-free directory name for a namespace."""
    readable = _UNSAFE.sub("_", namespace)[:40]
    return f"{readable}-{hashlib.sha1(namespace.encode()).hexdigest()[:10]}"


class PrivateDir:
    """``<root>/<namespace dir>``: the only place a run writes in a directory it is given.

    :meth:`create` also notes which missing ancestors it made (the runner's preflight
    opens first, so its instance is the one that sees them missing), and :meth:`remove`
    takes those away again once empty. Anything else in ``root`` is never listed, read
    or removed: another application's files there are safe by construction.
    """

    def __init__(self, root: str, namespace: str, temp_root: bool = False) -> None:
        self.root = root
        self.path = os.path.join(root, namespace_dirname(namespace))
        # A temp root is derived from the namespace alone: it is the run's, whichever instance made it.
        self._made: list[str] = [root] if temp_root else []

    def create(self) -> None:
        missing = []
        parent = os.path.abspath(self.root)
        while parent and not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent) if os.path.dirname(parent) != parent else ""
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        for made in missing:
            if made not in self._made:
                self._made.append(made)

    def remove(self, what: str) -> None:
        """Remove the run's directory (``what`` names its content for the error); raise CleanupFailed."""
        failures: list[str] = []

        def failed(_func: object, path: str, exc: BaseException | tuple) -> None:
            error = exc[1] if isinstance(exc, tuple) else exc
            failures.append(f"{path}: {getattr(error, 'strerror', None) or error}")

        shutil.rmtree(self.path, onerror=failed)  # type: ignore[arg-type]
        if os.path.exists(self.path):
            reason = failures[0] if failures else "it is still there"
            raise CleanupFailed(f"cleanup failed: cannot remove {reason}; {what} under {self.path} may remain")
        for made in self._made:  # innermost first; stops at the first one holding anything else
            try:
                os.rmdir(made)
            except OSError:
                break


class FileBackend(Backend):
    scheme = "file"

    def __init__(self, target: Target, namespace: str) -> None:
        super().__init__(target, namespace)
        root = local_path(target)
        self._auto_root = not root
        self.root = root or run_temp_dir("file", namespace)
        self.fanout = target.int_param("fanout", 1)
        if self.fanout not in (0, 1, 2):
            raise SpecError(f"{target.redacted}: fanout must be 0, 1 or 2")
        self.private = PrivateDir(self.root, namespace, temp_root=self._auto_root)
        self.dir = self.private.path
        self._tmp_names = count()
        self._tmp_tag = ""

    @classmethod
    def capabilities(cls, target: Target) -> Capabilities:
        return Capabilities(
            native=frozenset({"get", "set", "delete", "exists"}),
            emulated={
                "get_many": "one file read per key",
                "set_many": "one atomic file replace per key",
                "incr": "read, add, atomic replace: not atomic across workers (last writer wins)",
            },
        )

    def info(self) -> dict[str, Any]:
        return {"client": "cachemark.file", "fanout": self.fanout, "temp_root": self._auto_root}

    def open(self) -> None:
        try:
            self.private.create()
        except OSError as exc:
            raise BackendUnavailable(
                f"{self.target.redacted}: cannot create {self.dir}: {exc.strerror}"
            ) from None
        if not os.access(self.dir, os.W_OK):
            raise BackendUnavailable(f"{self.target.redacted}: {self.dir} is not writable")
        # Temp names must differ between worker processes and between instances.
        self._tmp_tag = f"{os.getpid()}-{id(self):x}"

    def _path(self, key: str) -> str:
        name = hashlib.sha1(key.encode()).hexdigest()
        if self.fanout == 1:
            return f"{self.dir}/{name[:2]}/{name}"
        if self.fanout == 2:
            return f"{self.dir}/{name[:2]}/{name[2:4]}/{name}"
        return f"{self.dir}/{name}"

    def _read(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        (expires,) = _HEADER.unpack_from(data)
        if expires and expires <= time.time():
            return None
        return data[8:]

    def get(self, key: str) -> bytes | None:
        return self._read(key)

    def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        header = _HEADER.pack(time.time() + ttl) if ttl is not None else _NEVER
        self._write(self._path(key), header + value)

    def _write(self, path: str, data: bytes) -> None:
        tmp = f"{path}.{self._tmp_tag}-{next(self._tmp_names)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except FileNotFoundError:
            # The fan-out directory does not exist yet: create it on first use only,
            # so the steady state pays no mkdir.
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                written = os.write(fd, data)
                while written < len(data):  # a short write (a nearly full disk): the next one says why
                    written += os.write(fd, data[written:])
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # a full disk must not also keep half a value
            raise

    def delete(self, key: str) -> bool:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            return False
        return True

    def exists(self, key: str) -> bool:
        try:
            with open(self._path(key), "rb") as f:
                header = f.read(8)
        except FileNotFoundError:
            return False
        (expires,) = _HEADER.unpack(header)
        return not expires or expires > time.time()

    def incr(self, key: str, delta: int = 1) -> int:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        header = data[:8] or _NEVER
        (expires,) = _HEADER.unpack(header)
        if expires and expires <= time.time():
            header, data = _NEVER, b""
        number = (int(data[8:]) if data else 0) + delta
        self._write(path, header + str(number).encode())
        return number

    def clear_namespace(self, written_keys: Iterable[str] = ()) -> int:
        removed = 0
        for _, _, files in os.walk(self.dir):
            removed += sum(1 for name in files if not name.endswith(".tmp"))
        self.private.remove(f"up to {removed:,} files of namespace {self.namespace}")
        return removed
