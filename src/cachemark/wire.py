"""Replies of line-based protocols (RESP, memcached's text protocol) read from a plain socket.

For cachemark's own side channels that need a few commands and no client library: the lab's
Redis Cluster set-up and the stampede experiment's memcached client.
"""

from __future__ import annotations

import socket


class LineReader:
    """Buffered reads of CRLF-ended lines and of data blocks with their trailing CRLF."""

    def __init__(self, sock: socket.socket, closed: str = "connection closed mid-reply") -> None:
        self.sock = sock
        self.closed = closed  # the ConnectionError's text when the peer closes mid-reply
        self.buf = b""

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(self.closed)
        self.buf += chunk

    def line(self) -> bytes:
        """The next line, without its CRLF."""
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n: int) -> bytes:
        """The next ``n`` bytes; the CRLF after them is consumed too."""
        while len(self.buf) < n + 2:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data
