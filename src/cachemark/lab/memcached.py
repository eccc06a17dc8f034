"""``spawn:memcached`` — a private memcached on a free loopback port.

Owns :class:`MemcachedServer`: TCP only (``-U 0``), bound to 127.0.0.1, ``memory_mb``
of cache (default 256), optional ``threads=`` and ``max_connections=``. memcached
refuses to run as root unless told which user to be, so ``-u root`` is added only
then. Ready means it answers ``version``.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from ..errors import BackendUnavailable
from .base import LocalServer, find_binary, wait_for_port


class MemcachedServer(LocalServer):
    kind = "memcached"

    def command(self) -> list[str]:
        argv = [
            find_binary("memcached"),
            "-l", "127.0.0.1",
            "-p", str(self.port),
            "-U", "0",
            "-m", str(int(self.options.get("memory_mb", 256))),
        ]  # fmt: skip
        if self.options.get("threads"):
            argv += ["-t", str(int(self.options["threads"]))]
        if self.options.get("max_connections"):
            argv += ["-c", str(int(self.options["max_connections"]))]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        return argv

    def url(self) -> str:
        return f"memcached://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        wait_for_port(self.host, self.port, self.ready_timeout, self.proc)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BackendUnavailable(f"memcached exited with code {self.proc.returncode}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
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
        raise BackendUnavailable(f"memcached on port {self.port} did not answer version")

    def detect_version(self) -> str:
        return self.version

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "memory_mb": int(self.options.get("memory_mb", 256))}
