"""``spawn:redis`` — a private redis-server on a free loopback port.

Owns :class:`RedisServer`: no persistence (``--save "" --appendonly no``), bound to
127.0.0.1 with protected mode on, optional ``password=`` (requirepass) and
``maxmemory=`` (with ``maxmemory_policy=``, default allkeys-lru). Ready means it
answers PING over RESP, not merely that the port accepts connections.

The password goes into a config file (mode 0600, in the server's private temp dir)
whose path is the first argument, never onto the command line: any local user can
read a process's argv (``ps``, /proc/<pid>/cmdline) until redis rewrites its title.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from typing import Any
from urllib.parse import quote

from ..errors import BackendUnavailable
from .base import LocalServer, find_binary, wait_for_port


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

    @property
    def password(self) -> str | None:
        password = self.options.get("password")
        return str(password) if password not in (None, "") else None

    def command(self) -> list[str]:
        self.binary = find_binary("redis-server")
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.tmpdir,
            "--daemonize", "no",
        ]  # fmt: skip
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

    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def wait_ready(self) -> None:
        wait_for_port(self.host, self.port, self.ready_timeout, self.proc)
        request = (_resp("AUTH", self.password) if self.password else b"") + _resp("PING")
        deadline = time.monotonic() + self.ready_timeout
        last = b""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BackendUnavailable(f"redis-server exited with code {self.proc.returncode}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
                    sock.sendall(request)
                    last = _read_replies(sock, 2 if self.password else 1)
                if last.rstrip().endswith(b"+PONG"):
                    return
            except OSError:
                pass
            time.sleep(0.02)  # e.g. -LOADING while it starts
        raise BackendUnavailable(f"redis-server on port {self.port} did not answer PING ({last[:80]!r})")

    def detect_version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"v=(\S+)", out)
        return match.group(1) if match else out.strip()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "maxmemory": self.options.get("maxmemory"), "auth": bool(self.password)}


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
