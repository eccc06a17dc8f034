"""``spawn:postgresql``: a private PostgreSQL cluster on a free loopback port.

This module owns the throw-away cluster: ``initdb`` into the server's temp directory,
``postgres`` listening on 127.0.0.1 only (plus a Unix socket inside the temp dir), trust
authentication for the single superuser ``cachemark``, and a fast shutdown on stop.
PostgreSQL refuses to run as root, so when we are root the cluster runs as ``nobody``.
Extra server settings can be passed as ``PostgresServer(settings={"fsync": "off"})``.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from typing import Any

from ..errors import BackendUnavailable
from .base import LocalServer, find_binary, wait_for_port

# Debian/Ubuntu keep the server binaries out of PATH; look in the versioned dirs too.
_PG_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13))
_USER = "cachemark"
_RUN_AS = "nobody"
_ENV_KEPT = ("PATH", "LANG", "TZ", "TMPDIR")


class PostgresServer(LocalServer):
    kind = "postgresql"
    ready_timeout = 30.0

    def _bin(self, name: str) -> str:
        return find_binary(name, extra_dirs=_PG_DIRS)

    def _drop_privileges(self) -> list[str]:
        """The argv prefix that runs a command as an unprivileged user (empty if not root)."""
        if os.geteuid() != 0:
            return []
        pw = pwd.getpwnam(_RUN_AS)
        # setpriv execs in place (unlike runuser), so the pid we hold is the postmaster's own,
        # and the signal we choose for shutdown reaches it directly.
        return [
            find_binary("setpriv"),
            f"--reuid={pw.pw_uid}",
            f"--regid={pw.pw_gid}",
            "--clear-groups",
        ]

    def prepare(self) -> None:
        initdb = self._bin("initdb")
        self._postgres = self._bin("postgres")
        if os.geteuid() == 0:
            pw = pwd.getpwnam(_RUN_AS)
            os.chown(self.tmpdir, pw.pw_uid, pw.pw_gid)
        data = os.path.join(self.tmpdir, "data")
        # --locale=C: byte-order collation, so a namespace prefix is a contiguous key range.
        cmd = self._drop_privileges() + [
            initdb, "-D", data, "-U", _USER, "--auth=trust", "--locale=C", "-E", "UTF8", "--no-sync",
        ]
        result = subprocess.run(cmd, cwd=self.tmpdir, capture_output=True, text=True, env=self._env())
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise BackendUnavailable(f"postgresql: initdb failed: {last[0]}")

    def _env(self) -> dict[str, str]:
        # Only what the server needs: run as nobody, its /proc/<pid>/environ is readable by
        # every other process of nobody, and ours may hold PGPASSWORD or cloud keys.
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEPT or k.startswith("LC_")}
        env["HOME"] = self.tmpdir  # nobody's home may not exist
        return env

    def env(self) -> dict[str, str] | None:
        return self._env()

    def command(self) -> list[str]:
        settings: dict[str, Any] = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": self.tmpdir,
            "max_connections": 200,
        }
        settings.update(self.options.get("settings") or {})
        argv = self._drop_privileges() + [self._postgres, "-D", os.path.join(self.tmpdir, "data"),
                                          "-p", str(self.port)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        return argv

    def wait_ready(self) -> None:
        wait_for_port(self.host, self.port, self.ready_timeout, self.proc)
        # The port opens before recovery ends; pg_isready says when queries are accepted.
        isready = self._bin("pg_isready")
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            probe = [isready, "-q", "-h", self.host, "-p", str(self.port), "-U", _USER, "-d", "postgres"]
            if subprocess.run(probe).returncode == 0:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise BackendUnavailable(f"server exited with code {self.proc.returncode}")
            time.sleep(0.05)
        raise BackendUnavailable(f"postgresql did not accept queries within {self.ready_timeout:.0f}s")

    def detect_version(self) -> str:
        out = subprocess.run([self._postgres, "--version"], capture_output=True, text=True).stdout
        # "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
        parts = out.split()
        return parts[2] if len(parts) > 2 else out.strip()

    def url(self) -> str:
        return f"postgresql://{_USER}@{self.host}:{self.port}/postgres"

    def stop(self) -> None:
        # SIGTERM is PostgreSQL's "smart" shutdown, which waits for every client to leave;
        # SIGINT is "fast" shutdown: abort transactions, disconnect, exit cleanly.
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)
                os.killpg(proc.pid, signal.SIGCONT)  # a SIGSTOPped one too (as in LocalServer.stop)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        super().stop()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "user": _USER, "database": "postgres"}
