"""Write outages: how long writes failed, from the first failed write to the last one before
writes succeeded again — the figure a failover (a Sentinel promoting a replica) is judged by.

A worker keeps a :class:`WriteOutages`: the loop calls :meth:`~WriteOutages.failed` for a
failed op (a write opens a window; any failure inside one is counted in it) and
:meth:`~WriteOutages.succeeded` for a successful write (it closes the window and notes
where writes go now). In a Redis Cluster a window is about the keys of one node (its
``scope``, the backend's ``outage_scope(key)``: the primary that owned the key's slot at the
start), so the other nodes' writes, which go on through one node's failover, do not split it.
Times are ``perf_counter_ns`` readings, one clock for every process on the host, so the
parent merges the workers' windows by overlap
(:func:`merge_outages`): two workers failing through one failover make one outage.
Per-second series are too coarse for this (a 1.4 s outage spans two or three seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_WINDOWS = 50  # per worker and per phase: a flapping server must not grow the results without end


class WriteOutages:
    """One worker's write-failure windows in one phase."""

    def __init__(self, where: Callable[[str | None], str | None] | None = None) -> None:
        self.where = where  # where writes (of a key) go now: the backend's current_server, asked once a window closes
        self.first = 0  # perf_counter_ns of the first failed write of the open window; 0: none open
        self.last = 0
        self.failed_writes = 0
        self.errors = 0
        self.scope: object = None  # whose keys the open window is about (None: every key)
        self.windows: list[dict[str, Any]] = []
        self.dropped = 0

    def failed(self, t0: int, t1: int, write: bool, scope: object = None) -> None:
        if write:
            if not self.first:
                self.first = t0
                self.scope = scope
            self.last = t1
            self.failed_writes += 1
        if self.first:
            self.errors += 1

    def succeeded(self, t1: int, key: str | None = None) -> None:
        """A write (of ``key``, in the open window's scope) succeeded: the window closes (called only while
        one is open)."""
        self._close(t1, key)

    def _close(self, recovered_ns: int | None, key: str | None = None) -> None:
        if len(self.windows) < MAX_WINDOWS:
            server = None
            if recovered_ns is not None and self.where is not None:
                try:
                    server = self.where(key)
                except Exception:  # noqa: BLE001 — a name for the report, never worth failing an op for
                    server = None
            self.windows.append({"first_ns": self.first, "last_ns": self.last, "recovered_ns": recovered_ns,
                                 "failed_writes": self.failed_writes, "errors": self.errors, "server": server})
        else:
            self.dropped += 1
        self.first = self.last = self.failed_writes = self.errors = 0

    def result(self) -> list[dict[str, Any]]:
        """The windows (an open one ends unrecovered), for the phase report."""
        if self.first:
            self._close(None)
        return self.windows


def merge_outages(parts: list[list[dict[str, Any]]], start_ns: int) -> list[dict[str, Any]]:
    """The workers' windows as one list of outages, overlapping ones joined, in seconds from ``start_ns``.

    An outage is recovered once every worker in it wrote again (``recovered_s``, the latest
    of their first successes); unrecovered when one of them never did before the phase ended.
    """
    windows = sorted((w for part in parts for w in part), key=lambda w: w["first_ns"])
    merged: list[dict[str, Any]] = []
    for w in windows:
        current = merged[-1] if merged else None
        if current is not None and w["first_ns"] <= current["last_ns"]:
            current["last_ns"] = max(current["last_ns"], w["last_ns"])
            current["failed_writes"] += w["failed_writes"]
            current["errors"] += w["errors"]
            current["parts"].append(w)
        else:
            merged.append({**w, "parts": [w]})
    out = []
    for m in merged:
        recoveries = [p["recovered_ns"] for p in m["parts"]]
        recovered = all(r is not None for r in recoveries)
        latest = max(m["parts"], key=lambda p: p["recovered_ns"] or 0)
        out.append({
            "start_s": round((m["first_ns"] - start_ns) / 1e9, 6),
            "end_s": round((m["last_ns"] - start_ns) / 1e9, 6),
            "duration_s": round((m["last_ns"] - m["first_ns"]) / 1e9, 6),
            "failed_writes": m["failed_writes"],
            "errors": m["errors"],
            "recovered": recovered,
            "recovered_s": round((max(recoveries) - start_ns) / 1e9, 6) if recovered else None,  # type: ignore[type-var]
            "server": latest["server"] if recovered else None,
        })
    return out


def longest(outages: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The outage a report names: the longest one."""
    return max(outages, key=lambda o: o["duration_s"]) if outages else None


def outage_text(outage: dict[str, Any], others: int = 0) -> str:
    """``writes failed for 3.2 s (412 errors, 2.1–5.3 s into the phase), then succeeded against 127.0.0.1:6380``."""
    errors = outage["errors"]
    text = (f"writes failed for {outage['duration_s']:.1f} s ({errors:,} error{'s' if errors != 1 else ''}, "
            f"{outage['start_s']:.1f}–{outage['end_s']:.1f} s into the phase)")
    if outage["recovered"]:
        text += ", then succeeded" + (f" against {outage['server']}" if outage.get("server") else " again")
    else:
        text += " and had not succeeded again when the phase ended"
    if others:
        text += f"; {others} shorter outage{'s' if others != 1 else ''} besides"
    return text
