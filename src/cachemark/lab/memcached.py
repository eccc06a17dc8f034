"""``spawn:memcached`` — a private memcached on a free loopback port.

Owns :class:`MemcachedServer`: TCP only (``-U 0``), bound to 127.0.0.1, ``memory_mb``
of cache (default 256), optional ``threads=``, ``max_connections=`` and
``max_item_size=`` (``-I``: bytes, or ``1k``/``4m``). Options come from a
``spawn:memcached?…`` URL as text: each is checked when the server object is made, so a
bad value is one line (exit 2) before anything starts, and an unknown option is refused
rather than ignored. memcached refuses to run as root unless told which user to be, so
``-u root`` is added only then. ``unix=1`` listens on a Unix socket in its temp dir
instead (``-s``; memcached then opens no TCP port), giving a ``memcached+unix://`` URL.
``tls=1`` serves TLS (``-Z``) with a throw-away CA and certificate made in its temp dir
(``lab/certs.py``), giving ``memcached://127.0.0.1:PORT?tls=1&ssl_ca_certs=…/ca.pem``.
``sasl=1`` turns SASL on (``-S``, which makes memcached binary-only) with a throw-away
user and password: Debian's memcached has no password file of its own (no
``--enable-sasl-pwdb``), so Cyrus SASL's ``saslpasswd2`` (package sasl2-bin) writes a
sasldb in the temp dir, and a ``memcached.conf`` there (found through ``SASL_CONF_PATH``)
says ``mech_list: plain`` and where that sasldb is. The URL carries the credential:
``memcached://cachemark:PASSWORD@127.0.0.1:PORT?binary=1``. Ready means it answers
``version`` (after SASL PLAIN when SASL is on).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import ssl
import subprocess
import time
from typing import Any
from urllib.parse import quote

from .. import memcache_binary
from ..errors import BackendUnavailable, SpecError
from ..textfile import one_line
from .base import LocalServer, find_binary, flag_option, unix_connection, wait_for_port, wait_for_socket
from .certs import Certs, make_certs

# option -> (smallest, largest) accepted; memcached itself refuses -I above 1 GiB or below 1 KiB
_LIMITS = {
    "memory_mb": (1, 1 << 20),
    "threads": (1, 256),
    "max_connections": (1, 1 << 20),
    "max_item_size": (1024, 1 << 30),
}
_SUFFIX = {"k": 1 << 10, "m": 1 << 20}
_SLAB_CHUNK_MAX = 512 << 10
SASL_USER = "cachemark"


def _whole(name: str, value: object) -> int:
    low, high = _LIMITS[name]
    text = str(value).strip().lower()
    scale = 1
    if name == "max_item_size" and text[-1:] in _SUFFIX:
        text, scale = text[:-1], _SUFFIX[text[-1]]
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or len(text) > 12:
        number = None
    else:
        number = int(text) * scale
    if number is None or not low <= number <= high:
        unit = " (bytes, or with k or m)" if name == "max_item_size" else ""
        raise SpecError(f"spawn:memcached: {name}={one_line(repr(value), 40)} must be a whole number "
                        f"from {low} to {high}{unit}")
    return number


class MemcachedServer(LocalServer):
    kind = "memcached"
    # memcached acts on SIGTERM only at its once-a-second clock tick (every stop took ~1 s); it
    # keeps nothing on disk, so it is ended outright
    stop_signal = signal.SIGKILL

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(_LIMITS) - {"unix", "tls", "sasl"})
        if unknown:
            raise SpecError(f"spawn:memcached: unknown option {one_line(repr(unknown[0]), 40)}; "
                            f"known: {', '.join(_LIMITS)}, unix, tls, sasl")
        checked = {name: _whole(name, value) for name, value in options.items()
                   if value not in (None, "") and name in _LIMITS}
        super().__init__(**checked)
        self.unix = flag_option("memcached", options, "unix")
        self.tls = flag_option("memcached", options, "tls")
        if self.tls and self.unix:
            raise SpecError("spawn:memcached: tls and unix do not go together (TLS is served over TCP)")
        self.sasl = flag_option("memcached", options, "sasl")
        self.certs: Certs | None = None
        self.username = SASL_USER
        self.password = ""

    def prepare(self) -> None:
        if self.tls:
            self.certs = make_certs(self.tmpdir)
        if self.sasl:
            self.password = secrets.token_urlsafe(18)
            self._write_sasldb()

    def _write_sasldb(self) -> None:
        sasldb = os.path.join(self.tmpdir, "sasldb")
        # -a memcached: the application name memcached registers with, so the entry is found; -p: the
        # password on stdin (never on a command line other users can read)
        saslpasswd2 = find_binary("saslpasswd2", extra_dirs=("/usr/sbin",))
        made = subprocess.run(
            [saslpasswd2, "-f", sasldb, "-a", "memcached", "-p", "-c", self.username],
            input=self.password.encode(), capture_output=True, timeout=30, check=False)
        if made.returncode != 0:
            said = made.stderr.decode(errors="replace").strip().splitlines()
            reason = said[-1] if said else f"exit {made.returncode}"
            raise BackendUnavailable(f"spawn:memcached?sasl=1: saslpasswd2 failed: {reason}")
        with open(os.path.join(self.tmpdir, "memcached.conf"), "w") as conf:
            conf.write(f"mech_list: plain\nsasldb_path: {sasldb}\n")

    def env(self) -> dict[str, str] | None:
        return {**os.environ, "SASL_CONF_PATH": self.tmpdir} if self.sasl else None

    @property
    def socket_path(self) -> str:
        return os.path.join(self.tmpdir, "memcached.sock")

    def command(self) -> list[str]:
        listen = ["-s", self.socket_path, "-a", "0700"] if self.unix else ["-l", "127.0.0.1", "-p", str(self.port)]
        argv = [
            find_binary("memcached"),
            *listen,
            "-U", "0",
            "-m", str(int(self.options.get("memory_mb", 256))),
        ]  # fmt: skip
        if self.options.get("threads"):
            argv += ["-t", str(self.options["threads"])]
        if self.options.get("max_connections"):
            argv += ["-c", str(self.options["max_connections"])]
        size = self.options.get("max_item_size")
        if size:
            argv += ["-I", str(size)]
            if size < _SLAB_CHUNK_MAX:  # memcached refuses an -I below its slab chunk size (512 KiB)
                argv += ["-o", f"slab_chunk_max={size}"]
        if self.sasl:
            argv += ["-S"]
        if self.certs is not None:
            argv += ["-Z", "-o", f"ssl_chain_cert={self.certs.cert},ssl_key={self.certs.key}"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        return argv

    def url(self) -> str:
        query = "?binary=1" if self.sasl else ""
        if self.unix:
            return f"memcached+unix://{self._userinfo()}{quote(self.socket_path)}{query}"
        if self.certs is not None:
            query = (query + "&" if query else "?") + f"tls=1&ssl_ca_certs={quote(self.certs.ca)}"
        return f"memcached://{self._userinfo()}127.0.0.1:{self.port}{query}"

    def _userinfo(self) -> str:
        return f"{quote(self.username, safe='')}:{quote(self.password, safe='')}@" if self.sasl else ""

    def _connect(self) -> socket.socket:
        if self.certs is not None:
            context = ssl.create_default_context(cafile=self.certs.ca)
            sock = socket.create_connection((self.host, self.port), timeout=1.0)
            return context.wrap_socket(sock, server_hostname=self.host)
        if self.unix:
            return unix_connection(self.socket_path, 1.0)
        return socket.create_connection((self.host, self.port), timeout=1.0)

    def wait_ready(self) -> None:
        if self.unix:
            wait_for_socket(self.socket_path, self.ready_timeout, self.proc)
        else:
            wait_for_port(self.host, self.port, self.ready_timeout, self.proc)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BackendUnavailable(f"memcached exited with code {self.proc.returncode}")
            try:
                if self.sasl:
                    with self._connect() as sock:
                        memcache_binary.authenticate(sock, self.username, self.password)
                        self.version = memcache_binary.version(sock)
                    return
                with self._connect() as sock:
                    sock.sendall(b"version\r\n")
                    reply = b""
                    while not reply.endswith(b"\r\n"):
                        chunk = sock.recv(256)
                        if not chunk:
                            break
                        reply += chunk
                if reply.startswith(b"VERSION "):
                    self.version = reply[8:].strip().decode()
                    return
            except OSError:
                pass
            time.sleep(0.02)
        where = self.socket_path if self.unix else f"port {self.port}"
        raise BackendUnavailable(f"memcached on {where} did not answer version")

    def detect_version(self) -> str:
        return self.version

    def describe(self) -> dict[str, Any]:
        described = {**super().describe(), "memory_mb": int(self.options.get("memory_mb", 256))}
        if self.unix:
            described.update(port=None, unix_socket=True)
        if self.tls:
            described["tls"] = True
        if self.sasl:
            described["sasl"] = True
        return described

    def stats(self) -> dict[str, str]:
        """The server's own counters (``stats``), over the binary protocol when SASL is on (tests' ground truth)."""
        with self._connect() as sock:
            if self.sasl:
                memcache_binary.authenticate(sock, self.username, self.password)
                return memcache_binary.stats(sock)[0]
            sock.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("memcached closed the stats connection")
                data += chunk
        return {parts[1]: parts[2] for parts in (line.split(" ", 2) for line in data.decode().splitlines())
                if len(parts) == 3 and parts[0] == "STAT"}
