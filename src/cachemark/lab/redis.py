"""``spawn:redis`` — a private redis-server on a free loopback port.

Owns :class:`RedisServer`: no persistence (``--save "" --appendonly no``), bound to
127.0.0.1 with protected mode on, optional ``password=`` (requirepass) and
``maxmemory=`` (with ``maxmemory_policy=``, default allkeys-lru). ``unix=1`` listens on a
Unix socket in its temp dir instead of TCP (``port 0``), giving a ``redis+unix://`` URL: a
network-free path, to see what the loopback TCP stack costs. ``tls=1`` serves TLS only
(``tls-port``, ``port 0``) with a throw-away CA and certificate made in its temp dir
(``lab/certs.py``), giving ``rediss://127.0.0.1:PORT/0?ssl_ca_certs=…/ca.pem``; ``tls=client``
also requires a client certificate, and the URL carries one (``ssl_certfile``, ``ssl_keyfile``).
Ready means it answers PING over RESP, not merely that the port accepts connections.

The password goes into a config file (mode 0600, in the server's private temp dir)
whose path is the first argument, never onto the command line: any local user can
read a process's argv (``ps``, /proc/<pid>/cmdline) until redis rewrites its title.
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import time
from typing import Any
from urllib.parse import quote

from ..errors import BackendUnavailable, SpecError
from ..textfile import one_line
from .base import LocalServer, find_binary, flag_option, unix_connection, wait_for_port, wait_for_socket
from .certs import Certs, make_certs


def _resp(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class RedisServer(LocalServer):
    kind = "redis"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.binary = ""
        self.unix = flag_option("redis", options, "unix")
        tls = str(options.get("tls") or "").strip().lower()
        self.tls_clients = tls == "client"
        if tls not in ("", "client", "1", "true", "yes", "on", "0", "false", "no", "off"):
            raise SpecError(f"spawn:redis: tls={one_line(repr(options['tls']), 40)} must be 1, 0 or client")
        self.tls = self.tls_clients or flag_option("redis", options, "tls")
        if self.tls and self.unix:
            raise SpecError("spawn:redis: tls and unix do not go together (TLS is served over TCP)")
        self.certs: Certs | None = None

    def prepare(self) -> None:
        if self.tls:
            self.certs = make_certs(self.tmpdir)

    @property
    def password(self) -> str | None:
        password = self.options.get("password")
        return str(password) if password not in (None, "") else None

    def command(self) -> list[str]:
        self.binary = find_binary("redis-server")
        argv = [
            self.binary,
            "--port", "0" if self.unix or self.tls else str(self.port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.tmpdir,
            "--daemonize", "no",
        ]  # fmt: skip
        if self.unix:
            argv += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        if self.certs is not None:
            argv += ["--tls-port", str(self.port), "--tls-cert-file", self.certs.cert, "--tls-key-file", self.certs.key,
                     "--tls-ca-cert-file", self.certs.ca, "--tls-auth-clients", "yes" if self.tls_clients else "no"]
        if self.password:
            argv.insert(1, self._write_secret_config())  # a config file must come first
        if self.options.get("maxmemory"):
            argv += ["--maxmemory", str(self.options["maxmemory"])]
            argv += ["--maxmemory-policy", str(self.options.get("maxmemory_policy", "allkeys-lru"))]
        return argv

    def _write_secret_config(self) -> str:
        """A config file readable by us alone, holding ``requirepass``; returns its path."""
        path = os.path.join(self.tmpdir, "secret.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)  # an existing file keeps its mode through O_CREAT
            f.write(f"requirepass {_config_quote(self.password or '')}\n")
        return path

    @property
    def socket_path(self) -> str:
        return os.path.join(self.tmpdir, "redis.sock")

    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        if self.unix:
            return f"redis+unix://{auth}{quote(self.socket_path)}?db=0"
        if self.certs is not None:
            query = f"ssl_ca_certs={quote(self.certs.ca)}"
            if self.tls_clients:
                query += f"&ssl_certfile={quote(self.certs.client_cert)}&ssl_keyfile={quote(self.certs.client_key)}"
            return f"rediss://{auth}127.0.0.1:{self.port}/0?{query}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def connection(self, timeout: float = 1.0) -> socket.socket:
        """A socket to the server, over TLS (verified against the lab's CA) when it serves TLS."""
        if self.certs is not None:
            context = ssl.create_default_context(cafile=self.certs.ca)
            if self.tls_clients:
                context.load_cert_chain(self.certs.client_cert, self.certs.client_key)
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            return context.wrap_socket(sock, server_hostname=self.host)
        if self.unix:
            return unix_connection(self.socket_path, timeout)
        return socket.create_connection((self.host, self.port), timeout=timeout)

    def wait_ready(self) -> None:
        if self.unix:
            wait_for_socket(self.socket_path, self.ready_timeout, self.proc)
        else:
            wait_for_port(self.host, self.port, self.ready_timeout, self.proc)
        request = (_resp("AUTH", self.password) if self.password else b"") + _resp("PING")
        deadline = time.monotonic() + self.ready_timeout
        last = b""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BackendUnavailable(f"redis-server exited with code {self.proc.returncode}")
            try:
                with self.connection() as sock:
                    sock.sendall(request)
                    last = _read_replies(sock, 2 if self.password else 1)
                if last.rstrip().endswith(b"+PONG"):
                    return
            except OSError:
                pass
            time.sleep(0.02)  # e.g. -LOADING while it starts
        where = self.socket_path if self.unix else f"port {self.port}"
        raise BackendUnavailable(f"redis-server on {where} did not answer PING ({last[:80]!r})")

    def detect_version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"v=(\S+)", out)
        return match.group(1) if match else out.strip()

    def describe(self) -> dict[str, Any]:
        described = {**super().describe(), "maxmemory": self.options.get("maxmemory"), "auth": bool(self.password)}
        if self.unix:
            described.update(port=None, unix_socket=True)
        if self.tls:
            described.update(tls=True, tls_client_certs=self.tls_clients)
        return described


def _config_quote(value: str) -> str:
    """``value`` as a double-quoted redis.conf string (redis decodes ``\\xHH`` escapes there)."""
    out = []
    for byte in value.encode():
        char = chr(byte)
        if char in '\\"' or not 0x20 <= byte < 0x7F:
            out.append(f"\\x{byte:02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _read_replies(sock: socket.socket, lines: int) -> bytes:
    """Read until ``lines`` simple-reply lines (each ends with CRLF) have arrived."""
    data = b""
    while data.count(b"\r\n") < lines:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data
