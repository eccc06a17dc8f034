"""Idle CPUs that poll instead of halting, while an emulated network is measured.

On a virtual machine a halted vCPU takes tens of microseconds to wake (an exit to the host
and back), and a proxied round trip wakes a CPU twice as often as a direct one: on an idle
2-vCPU VM that alone added 45–60 µs to every round trip through the proxy, more than the
proxy's own work (~16 µs) and as much as a quarter of a 200 µs profile. Holding a PM QoS
request of zero on ``/dev/cpu_dma_latency`` (the kernel's interface for a latency-sensitive
process, as ``tuned``'s latency-performance profile uses) keeps idle CPUs in their polling
state, so a wake-up costs what it does on a busy host. The request lasts while the file is
open and ends with it, even if the process is killed; where it cannot be opened (not root,
no such device) nothing changes and the caller is told.

Held for a whole experiment (calibration, the direct baseline and every proxied run alike), so
no profile is measured under other wake-up costs than its baseline. The price is CPU: the
idle CPUs spin for the length of the experiment (docs/network.md).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator

QOS_DEVICE = "/dev/cpu_dma_latency"


@contextlib.contextmanager
def fast_wakeups(device: str = QOS_DEVICE) -> Iterator[bool]:
    """Within the block, idle CPUs poll; yields whether the request is held."""
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        yield False
        return
    try:
        try:
            os.write(fd, struct.pack("i", 0))
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
