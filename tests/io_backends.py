"""The engine's I/O backends (``io=epoll``, ``io=uring``) as the tests see them: ``need_io(io)``
skips a test of io_uring where the kernel or a sandbox forbids it."""

from __future__ import annotations

import os

import pytest


def need_io(io: str) -> None:
    """Skips a test of the io_uring backend where the kernel or a sandbox forbids it."""
    if io != "uring":
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        params = ctypes.create_string_buffer(120)
        fd = libc.syscall(425, 4, params)  # io_uring_setup
        if fd < 0:
            pytest.skip("io_uring is not available here")
        os.close(fd)
    except OSError:
        pytest.skip("io_uring is not available here")
