"""The environment fingerprint: what ran where, and the floor the machine imposes.

Besides versions and hardware, it carries a calibration taken at start: the timer's
resolution and the loopback round trip to a tiny echo server, back to back (busy
core) and with idle gaps (a sleeping core). On virtual machines an idle core can add
100 µs or more to every network op; a reader of a result must be able to see that.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import signal
import socket
import time
from importlib import metadata
from typing import Any

import numpy as np

from .. import __version__

# cachemark's own dependencies; the client libraries come from the scheme registry
_OWN_PACKAGES = ("numpy", "pydantic")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def package_versions() -> dict[str, str]:
    versions = {}
    from ..schemes import client_packages

    for name in (*_OWN_PACKAGES, *client_packages()):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def timer_resolution_ns(samples: int = 20000) -> int:
    """The smallest non-zero step perf_counter_ns shows, and so the finest latency we can see."""
    perf = time.perf_counter_ns
    smallest = None
    last = perf()
    for _ in range(samples):
        now = perf()
        if now != last:
            step = now - last
            smallest = step if smallest is None or step < smallest else smallest
            last = now
    return smallest or 0


def _echo_server(sock: socket.socket) -> None:
    # Deaf to the terminal's signals: the parent ends the calibration (and us, by closing).
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    try:
        conn, _ = sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = conn.recv(64)
            if not data:
                return
            conn.sendall(data)
    except OSError:
        return  # the parent went away mid-trip (Ctrl-C): nothing to report


def loopback_rtt(busy_samples: int = 2000, idle_samples: int = 200, idle_gap_s: float = 0.002) -> dict[str, Any]:
    """Round trips of 16 bytes to an echo process on 127.0.0.1: busy and idle, p50/p99 in µs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    proc = mp.get_context("fork").Process(target=_echo_server, args=(listener,), daemon=True)
    proc.start()
    client = None
    try:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = b"0123456789abcdef"
        perf = time.perf_counter_ns

        def trip() -> int:
            t0 = perf()
            client.sendall(payload)
            got = 0
            while got < len(payload):
                got += len(client.recv(64))
            return perf() - t0

        for _ in range(100):
            trip()
        busy = np.array([trip() for _ in range(busy_samples)])
        idle = []
        for _ in range(idle_samples):
            time.sleep(idle_gap_s)
            idle.append(trip())
    finally:
        if client is not None:
            client.close()  # the echo process ends when it sees this
        listener.close()
        proc.join(timeout=2)
        if proc.is_alive():
            proc.kill()

    def stats(values: np.ndarray) -> dict[str, float]:
        return {"p50_us": float(np.percentile(values, 50)) / 1000, "p99_us": float(np.percentile(values, 99)) / 1000}

    return {"busy": stats(busy), "idle": stats(np.array(idle)), "idle_gap_ms": idle_gap_s * 1000,
            "samples": {"busy": busy_samples, "idle": idle_samples}}


def calibrate() -> dict[str, Any]:
    return {"timer_resolution_ns": timer_resolution_ns(), "loopback_rtt": loopback_rtt()}


def fingerprint(calibration: dict[str, Any] | None = None) -> dict[str, Any]:
    uname = platform.uname()
    return {
        "cachemark": __version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": f"{uname.system} {uname.release}",
        "machine": uname.machine,
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "packages": package_versions(),
        "calibration": calibration,
    }
