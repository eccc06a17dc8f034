"""``spawn:s3``: moto's standalone S3-compatible server on a free loopback port.

This module owns the emulated object store: ``python -m moto.server`` bound to
127.0.0.1, one bucket (``cachemark``) created once the server answers, and static dummy
credentials in the URL it hands out. moto is an emulator written in Python: its absolute
latency says nothing about AWS S3, so :meth:`S3Server.describe` and the target URL both
mark it (``emulator: True`` / ``emulator=moto``) and reports must carry that mark.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from ..errors import BackendMissing, BackendUnavailable
from .base import LocalServer, wait_for_port

BUCKET = "cachemark"
# moto checks no signature; a value no other text contains, since redaction hides it wherever it appears
DUMMY_SECRET = "moto-lab-dummy-secret"
EMULATOR_NOTE = "moto emulator on loopback: absolute latency is not a statement about AWS S3"


class S3Server(LocalServer):
    kind = "s3"
    ready_timeout = 30.0

    def prepare(self) -> None:
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise BackendMissing("moto's server is not installed (pip install 'moto[server]')")

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]

    def wait_ready(self) -> None:
        wait_for_port(self.host, self.port, self.ready_timeout, self.proc)
        # moto routes on the Host header and, by default, does not check signatures, so a
        # plain unsigned PUT creates the bucket without needing boto3 in the lab.
        request = urllib.request.Request(f"http://{self.host}:{self.port}/{BUCKET}", method="PUT")
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    response.read()
                return
            except (urllib.error.URLError, ConnectionError) as exc:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(f"moto server did not create bucket {BUCKET!r}: {exc}") from None
                time.sleep(0.1)

    def detect_version(self) -> str:
        from importlib.metadata import version

        return f"moto {version('moto')}"

    def url(self) -> str:
        return (
            f"s3://{BUCKET}/?endpoint_url=http://{self.host}:{self.port}&region=us-east-1"
            f"&aws_access_key_id=cachemark&aws_secret_access_key={DUMMY_SECRET}&emulator=moto"
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "emulator": True, "bucket": BUCKET, "note": EMULATOR_NOTE}
