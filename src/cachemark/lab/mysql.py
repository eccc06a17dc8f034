"""``spawn:mysql``: a private MariaDB (or MySQL) server on a free loopback port.

This module owns the throw-away server: ``mariadb-install-db`` into the temp directory,
``mariadbd`` listening on 127.0.0.1 only with its socket, pid file and logs inside the temp
dir, a ``cachemark`` database created by an init file, and root without a password (the
server is reachable from loopback only and lives as long as the run). ``--no-defaults``
keeps the host's /etc/mysql configuration out of the measurement.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from ..errors import BackendUnavailable
from .base import LocalServer, find_binary

_DATABASE = "cachemark"


class MysqlServer(LocalServer):
    kind = "mysql"
    ready_timeout = 30.0

    def prepare(self) -> None:
        self._server = find_binary("mariadbd", "mysqld", extra_dirs=("/usr/sbin", "/usr/libexec"))
        install = find_binary("mariadb-install-db", "mysql_install_db")
        data = os.path.join(self.tmpdir, "data")
        cmd = [install, "--no-defaults", f"--datadir={data}", "--auth-root-authentication-method=normal",
               "--skip-test-db"]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        result = subprocess.run(cmd, cwd=self.tmpdir, capture_output=True, text=True)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise BackendUnavailable(f"mysql: {os.path.basename(install)} failed: {last[0]}")
        with open(os.path.join(self.tmpdir, "init.sql"), "w") as f:
            f.write(f"CREATE DATABASE IF NOT EXISTS {_DATABASE};\n")

    def command(self) -> list[str]:
        settings: dict[str, Any] = {
            "bind-address": "127.0.0.1",
            "innodb-buffer-pool-size": "128M",
            "max-connections": 200,
        }
        settings.update(self.options.get("settings") or {})
        argv = [
            self._server,
            "--no-defaults",
            f"--datadir={os.path.join(self.tmpdir, 'data')}",
            f"--port={self.port}",
            f"--socket={os.path.join(self.tmpdir, 'mysqld.sock')}",
            f"--pid-file={os.path.join(self.tmpdir, 'mysqld.pid')}",
            f"--init-file={os.path.join(self.tmpdir, 'init.sql')}",
            "--skip-name-resolve",  # 127.0.0.1 must not wait on a DNS lookup
            "--skip-log-bin",
        ]
        if os.geteuid() == 0:
            argv.append("--user=root")
        argv += [f"--{name}={value}" for name, value in settings.items()]
        return argv

    def detect_version(self) -> str:
        out = subprocess.run([self._server, "--version"], capture_output=True, text=True).stdout
        # "mariadbd  Ver 10.11.6-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)"
        parts = out.split()
        return parts[parts.index("Ver") + 1] if "Ver" in parts else out.strip()

    def url(self) -> str:
        return f"mysql://root@{self.host}:{self.port}/{_DATABASE}"

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "user": "root", "database": _DATABASE}
