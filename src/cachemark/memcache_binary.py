"""memcached's binary protocol, just enough for the side channels: SASL PLAIN, ``version``, ``stats``.

The load itself goes through pylibmc or the native engine; this module serves the lab's
readiness check, the server-stats sampler and the tests, which must speak binary to a
memcached started with ``-S`` (SASL on makes it binary-only: a text ``stats`` is
refused). Every frame is the 24-byte header (magic, opcode, key length, extras
length, data type, vbucket/status, body length, opaque, CAS) and its body; replies are
read whole or not at all, so a closed connection is a ``ConnectionError``, never a
half-read frame. A refused credential is :class:`AuthRefused`, whose message names no
password.
"""

from __future__ import annotations

import socket
import struct

HEADER = struct.Struct(">BBHBBHIIQ")
REQUEST, RESPONSE = 0x80, 0x81
OP_VERSION, OP_STAT = 0x0B, 0x10
OP_SASL_LIST_MECHS, OP_SASL_AUTH = 0x20, 0x21
STATUS_OK, STATUS_AUTH_ERROR = 0x00, 0x20
_MAX_BODY = 1 << 20  # a stats or version reply is a few kB; anything larger is not memcached


class AuthRefused(ConnectionError):
    """memcached answered SASL_AUTH with "auth error" (0x20): the wrong user or password."""


def frame(opcode: int, key: bytes = b"", value: bytes = b"", extras: bytes = b"") -> bytes:
    body = len(extras) + len(key) + len(value)
    return HEADER.pack(REQUEST, opcode, len(key), len(extras), 0, 0, body, 0, 0) + extras + key + value


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("memcached closed the connection in the middle of a binary reply")
        data += chunk
    return data


def read_reply(sock: socket.socket) -> tuple[int, int, bytes, bytes]:
    """One reply: (opcode, status, key, value)."""
    magic, opcode, key_len, extras_len, _, status, body_len, _, _ = HEADER.unpack(_read_exactly(sock, HEADER.size))
    if magic != RESPONSE or body_len > _MAX_BODY or key_len + extras_len > body_len:
        raise ConnectionError(f"memcached sent no binary reply (magic 0x{magic:02x}, body {body_len})")
    body = _read_exactly(sock, body_len)
    return opcode, status, body[extras_len:extras_len + key_len], body[extras_len + key_len:]


def authenticate(sock: socket.socket, username: str, password: str) -> tuple[int, int]:
    """SASL PLAIN (``\\0user\\0password``); :class:`AuthRefused` when memcached says no.
    Returns the bytes sent and received (the stats sampler keeps its own traffic apart)."""
    request = frame(OP_SASL_AUTH, b"PLAIN", b"\0" + username.encode() + b"\0" + password.encode())
    sock.sendall(request)
    _, status, key, value = read_reply(sock)
    if status == STATUS_AUTH_ERROR:
        raise AuthRefused(f"memcached refused the credentials of user {username!r}")
    if status != STATUS_OK:
        raise ConnectionError(f"memcached SASL authentication failed: status 0x{status:02x} "
                              f"{value[:80].decode(errors='replace')}")
    return len(request), HEADER.size + len(key) + len(value)


def version(sock: socket.socket) -> str:
    sock.sendall(frame(OP_VERSION))
    _, status, _, value = read_reply(sock)
    if status != STATUS_OK:
        raise ConnectionError(f"memcached refused version: status 0x{status:02x}")
    return value.decode(errors="replace")


def stats(sock: socket.socket) -> tuple[dict[str, str], int]:
    """The general ``stats`` (one reply per counter, ended by one with an empty key), and the bytes read."""
    sock.sendall(frame(OP_STAT))
    counters: dict[str, str] = {}
    size = 0
    while True:
        _, status, key, value = read_reply(sock)
        size += HEADER.size + len(key) + len(value)
        if status != STATUS_OK:
            raise ConnectionError(f"memcached refused stats: status 0x{status:02x}")
        if not key:
            return counters, size
        counters[key.decode(errors="replace")] = value.decode(errors="replace")
