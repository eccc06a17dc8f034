"""Runs for ``?client=<driver>`` targets: the load driven by a small program in another stack.

A driver (``drivers/<stack>/``) is the application's own client — Rails.cache in Ruby, say —
running cachemark's op stream natively. This module owns the Python side of the driver
protocol (docs/drivers.md): it starts one driver process per worker, hands each the first
segment of its pre-generated ops before the clock starts, says ``go`` to all together, feeds
each the next segment ahead while it runs, and folds the per-op outcomes and latencies they
send back a segment at a time (binary arrays) into the same phase records the Python workers
and the engine produce — so a phase of 10⁷ ops takes the memory of one of 10⁵ on both sides.
Every exchange has a deadline: a driver that dies or hangs ends the run as failed, with one
line saying which and why, never as a hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import procs
from ..driver_registry import DRIVERS, DRIVERS_DIR, DriverSpec
from ..errors import BackendMissing, BackendUnavailable, PrefillFailed, UnsupportedOp
from ..measure.histogram import COUNTS_LEN, Histogram, bucket_indexes
from ..measure.recorder import ERROR, Recorder
from ..measure.summary import OpRecord, merge_ops, merge_timeseries
from ..results.phase_record import PhaseRecord
from ..schemes import scheme
from ..spec import Phase, Workload
from ..target import Target
from ..textfile import one_line
from ..workload.ops import OpStream, mix_entries, split_ops, stream_seed
from ..workload.replay import load_share
from ..workload.values import filler_period
from .driver_protocol import SCHEMA_FILE
from .driver_protocol import load as load_protocol
from .error_policy import stopped_reason
from .load_path import PREFILL, ProgressFn
from .messages import death
from .outcome import INTERRUPTED, LoadResult, RunBackend
from .worker import arrival_gaps

FILLER_TEXT = filler_period().decode("ascii")  # setup's filler: one period of the value format's text
PROTOCOL = 3  # drivers/protocol/protocol.json's x-version: every message, both ways, is described there
# A closed-loop phase bounded by time only gets this many pre-generated ops per worker,
# which the driver cycles through until the deadline.
CYCLE_OPS = 100_000
SEGMENT_OPS = 32_768  # a phase goes to a driver in segments of this many ops (x-segments): ~0.6 MB each way
PIPE_BYTES = 1 << 20  # both pipes widened to this (Linux's default limit), so a segment or a part fits whole
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
HELLO_TIMEOUT_S = 30.0
REPLY_TIMEOUT_S = 60.0  # setup, ops upload, bye; plus per-op allowances for prefill and go
# keys per prefill message to each driver, least and most: blocks of about PREFILL_BLOCK_S each, so the
# progress line moves between them at a message's cost (a round trip) per half second
PREFILL_BLOCKS = (1_000, 200_000)
PREFILL_BLOCK_S = 0.5
INTERRUPT_TIMEOUT_S = 10.0  # after Ctrl-C: how long a driver may take to report what it ran
PER_OP_TIMEOUT_S = 0.002  # a generous bound on one op of a count-bounded phase (Ruby: ~50 µs)




def driver_for(target: Target) -> DriverSpec | None:
    """The driver a target's ``client`` parameter names, or None (a Python client or the engine)."""
    return DRIVERS.get(target.param("client") or "")


class DriverFailed(Exception):
    """A driver died, hung or broke the protocol: the run failed (one line)."""


class DriverProcess:
    """One driver process and the framed exchange with it (docs/drivers.md), every step with a deadline."""

    def __init__(self, spec: DriverSpec, worker: int) -> None:
        self.spec, self.worker = spec, worker
        command = spec.command()  # BackendMissing before anything is opened
        try:
            self.protocol = load_protocol(DRIVERS_DIR)
        except OSError:
            raise BackendMissing(f"client={spec.name}: the driver protocol {DRIVERS_DIR / SCHEMA_FILE} is missing "
                                 f"(set CACHEMARK_DRIVERS)") from None
        if not os.access(command[0], os.X_OK):  # said here: setpriv (below) would only fail to exec it
            raise DriverFailed(f"driver {spec.name} (worker {worker}) cannot start {command[0]}: not executable")
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 — kept for the process's life, closed in close()
        try:
            # A driver never outlives cachemark, so never runs ops against the user's server unowned
            # (the thread starting it runs the phases and ends them: it waits for the driver).
            argv = procs.dying_with_us(command, signal.SIGKILL, waited_for=True)
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.stderr, close_fds=True)
        except OSError as exc:  # not executable, not a program
            self.stderr.close()
            raise DriverFailed(f"driver {spec.name} (worker {worker}) cannot start {command[0]}: "
                               f"{exc.strerror or exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.inp, self.out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        for fd in (self.inp, self.out):
            os.set_blocking(fd, False)
            with contextlib.suppress(OSError):  # a segment and a part fit whole (x-segments); the kernel may say no
                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
        self.buf = bytearray()
        self.outbox = bytearray()
        self.stage = "hello"

    # -- framing ------------------------------------------------------------------
    def send(self, msg: dict[str, Any], blob: bytes = b"", timeout: float = REPLY_TIMEOUT_S) -> None:
        """``msg`` (and its blob) written whole, within ``timeout``."""
        self.stage = msg["type"]
        self.post(msg, blob)
        deadline = time.monotonic() + timeout
        while self.outbox:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([], [self.inp], [], remaining)[1]:
                raise self._failed(f"did not take {msg['type']!r} within {timeout:g} s", hung=True)
            self.flush()

    def post(self, msg: dict[str, Any], blob: bytes = b"") -> None:
        """Queue ``msg`` (and its blob) for :meth:`flush`: how a segment goes ahead while the driver runs."""
        header = dict(msg, blob=len(blob)) if blob else msg
        self.outbox += json.dumps(header).encode() + b"\n" + blob

    def flush(self) -> None:
        """Write what the pipe takes now of what is queued."""
        try:
            del self.outbox[:os.write(self.inp, self.outbox)]
        except BlockingIOError:
            pass
        except (BrokenPipeError, ConnectionResetError):
            raise self._failed(f"exited before taking {self.stage!r}") from None

    def recv(self, timeout: float) -> tuple[dict[str, Any], bytes]:
        deadline = time.monotonic() + timeout
        while (message := self.take()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.out], [], [], remaining)[0]:
                raise self._failed(f"did not answer {self.stage!r} within {timeout:g} s", hung=True)
            self.fill()
        return message

    def take(self) -> tuple[dict[str, Any], bytes] | None:
        """The next whole message (and its blob) read so far, checked against the protocol; None: not yet."""
        if (end := self.buf.find(b"\n")) < 0:
            return None
        try:
            msg = json.loads(self.buf[:end])
        except ValueError:
            line = one_line(bytes(self.buf[:end]).decode(errors="replace"), 120)
            raise self._failed(f"sent a line that is not JSON: {line}") from None
        # every message a driver sends, checked against the protocol's schema (a few per segment, none per op)
        if (problem := self.protocol.problem(msg)) is not None:
            what = msg.get("type") if isinstance(msg, dict) else None
            raise self._failed(f"broke the protocol ({SCHEMA_FILE.as_posix()}): "
                               + (f"{what!r}: " if isinstance(what, str) else "") + one_line(problem, 200), hung=True)
        size = int(msg.get("blob") or 0)
        if size != (expected := self.protocol.blob_size(msg)) and "x-blob" in self.protocol.defs[msg["type"]]:
            raise self._failed(f"broke the protocol ({SCHEMA_FILE.as_posix()}): {msg['type']!r} with a blob of "
                               f"{size} bytes, not {expected}", hung=True)
        if len(self.buf) < end + 1 + size:  # the blob is still coming (the header is read again then)
            return None
        blob = bytes(self.buf[end + 1:end + 1 + size])
        del self.buf[:end + 1 + size]
        return msg, blob

    def fill(self) -> None:
        """Read what the driver has written (EOF: it exited)."""
        try:
            chunk = os.read(self.out, PIPE_BYTES)
        except BlockingIOError:
            return
        if not chunk:
            raise self._failed(f"exited during {self.stage!r}")
        self.buf += chunk

    def request(self, msg: dict[str, Any], blob: bytes = b"", timeout: float = REPLY_TIMEOUT_S,
                expect: str = "") -> tuple[dict[str, Any], bytes]:
        self.send(msg, blob, timeout)
        reply, data = self.recv(timeout)
        self.check(reply, expect)
        return reply, data

    def check(self, reply: dict[str, Any], expect: str) -> None:
        if reply.get("type") == "error":
            text = one_line(str(reply.get("message", "")), 300)
            if reply.get("kind") == "missing":
                raise BackendMissing(text)
            if reply.get("kind") == "unsupported":
                raise UnsupportedOp(text)
            if reply.get("kind") == "setup":
                raise BackendUnavailable(f"client={self.spec.name}: {text}")
            raise self._failed(f"answered {self.stage!r} with an error: {text}")
        if expect and reply.get("type") != expect:
            raise self._failed(f"answered {self.stage!r} with {reply.get('type')!r}, not {expect!r}")

    # -- ending -------------------------------------------------------------------
    def _failed(self, what: str, hung: bool = False) -> DriverFailed:
        if hung:
            self.kill()
        code = self._exit_code()
        tail = self._stderr_tail()
        status = "" if code is None else f" ({death(code)})"
        return DriverFailed(f"driver {self.spec.name} (worker {self.worker}) {what}{status}"
                            + (f": {tail}" if tail else ""))

    def _exit_code(self) -> int | None:
        try:
            return self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None

    def _stderr_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self.stderr.seek(0)
            lines = [ln for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()]
            return one_line(lines[-1], 300) if lines else ""
        return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def close(self) -> None:
        """Say bye (bounded), then make sure the process is gone."""
        if self.proc.poll() is None:
            with contextlib.suppress(DriverFailed, OSError, ValueError):
                self.request({"type": "bye"}, timeout=5)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]


# -- what the driver is told ------------------------------------------------------


def setup_message(target: Target, workload: Workload, namespace: str, worker: int) -> dict[str, Any]:
    row = scheme(target.scheme)
    where = target.endpoint()
    resp = row.family == "resp"  # redis-py's parameter names; memcached's are its own
    sizes = workload.sizes
    extra: dict[str, Any] = {}
    if row.embedded == "":  # a directory store (file://): the run's own directory, as the Python client's
        from ..backends.file import PrivateDir, local_path, run_temp_dir

        extra["path"] = PrivateDir(local_path(target) or run_temp_dir(target.scheme, namespace), namespace).path
    return extra | {
        "type": "setup", "protocol": PROTOCOL, "scheme": target.scheme,
        "servers": [[host, port or 0] for host, port in where.hosts],  # none for a store in this process
        "db": where.db_number() if resp and where.db.isdigit() else 0,
        "username": where.username, "password": where.password, "tls": where.tls,
        "namespace": namespace, "worker": worker, "keys": workload.keys, "ttl_s": workload.ttl,
        "sizes": {"kind": "choice" if sizes.kind == "etc" else sizes.kind, "sizes": list(sizes.sizes)},
        "filler": FILLER_TEXT,
        "get_many_count": workload.get_many_count,
        "tags": None if workload.tags is None else {"pool": workload.tags.pool, "min": workload.tags.min_per_key,
                                                    "max": workload.tags.max_per_key},
        # a TLS target's verification, as the URL says it (a private CA, or none): rediss://…?ssl_ca_certs=…
        "ssl_ca_certs": where.tls_options.get("ssl_ca_certs"), "ssl_cert_reqs": where.tls_options.get("ssl_cert_reqs"),
        "ssl_certfile": where.tls_options.get("ssl_certfile"), "ssl_keyfile": where.tls_options.get("ssl_keyfile"),
        "timeout_s": target.float_param("socket_timeout" if resp else "timeout", 5.0),
        "connect_timeout_s": target.float_param("socket_connect_timeout" if resp else "connect_timeout", 2.0),
    }


@dataclass
class OpBatch:
    """One segment of one worker's pre-generated ops for one phase (or its warm-up), x-segments."""

    entries: np.ndarray  # u8: index into the mix entries
    keys: np.ndarray  # u32: key id
    sizes: np.ndarray  # u32: value size
    at: np.ndarray | None  # u64: intended send time, ns after go (open loop)
    cycle: bool  # closed loop bounded by time: the driver repeats the batch until the deadline
    more: bool = False  # another segment follows during go

    def message(self, entries: list[str]) -> dict[str, Any]:
        return {"type": "ops", "entries": [e.split("+") for e in entries], "count": len(self.entries),
                "schedule": self.at is not None, "more": self.more}

    def blob(self) -> bytes:
        parts = [self.entries.astype("u1").tobytes(), self.keys.astype("<u4").tobytes(),
                 self.sizes.astype("<u4").tobytes()]
        if self.at is not None:
            parts.append(self.at.astype("<u8").tobytes())
        return b"".join(parts)


Columns = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]  # entries, keys, sizes, at


class OpFeed:
    """One worker's ops for one phase, a segment of at most SEGMENT_OPS at a time (x-segments): neither
    cachemark nor the driver holds a whole phase, however long its trace share or schedule."""

    def __init__(self, segments: Iterator[Columns], cycle: bool) -> None:
        self._segments, self.cycle = segments, cycle
        self._next: Columns | None = next(segments, None)
        if self._next is None:  # an empty phase is one empty segment: the exchange stays the same
            self._next = (np.zeros(0, "u1"), np.zeros(0, "<u4"), np.zeros(0, "<u4"), None)

    def next(self) -> OpBatch | None:
        """The next segment, saying whether another follows; None after the last."""
        current = self._next
        if current is None:
            return None
        self._next = next(self._segments, None)
        return OpBatch(*current, cycle=self.cycle, more=self._next is not None)

    def due_before(self, deadline_ns: int) -> int:
        """Ops of the segments not handed out yet that are due before ``deadline_ns`` after go: missed
        when the phase ended first (read through, a segment at a time)."""
        due = 0
        while self._next is not None:
            at = self._next[3]
            due += 0 if at is None else int((at < deadline_ns).sum())
            self._next = next(self._segments, None)
        return due


def op_feed(workload: Workload, phase: Phase, worker: int, purpose: str, limit: int | None,
            duration: float | None, rate: float | None) -> OpFeed:
    workers = workload.workers
    if workload.trace is not None and workload.trace.prepared and purpose == "timed":  # a recorded trace
        share = load_share(workload.trace.prepared, worker)
        return OpFeed(_replayed(share, rate is not None), cycle=False)
    if rate is not None and duration and limit is None:
        limit = math.ceil(rate / workers * duration) + 1  # every op due before the deadline
    if limit is None:  # one batch of CYCLE_OPS, repeated until the deadline
        return OpFeed(_generated(workload, phase, worker, purpose, CYCLE_OPS, None, CYCLE_OPS), cycle=True)
    return OpFeed(_generated(workload, phase, worker, purpose, limit, rate), cycle=False)


def op_batch(workload: Workload, phase: Phase, worker: int, purpose: str, limit: int | None,
             duration: float | None, rate: float | None) -> OpBatch:
    """The whole phase in one batch (what the feed hands out, joined): for tests and benchmarks."""
    feed = op_feed(workload, phase, worker, purpose, limit, duration, rate)
    segments = []
    while (segment := feed.next()) is not None:
        segments.append(segment)
    at = [s.at for s in segments]
    return OpBatch(*(np.concatenate([getattr(s, name) for s in segments]) for name in ("entries", "keys", "sizes")),
                   None if at[0] is None else np.concatenate(at), feed.cycle)  # type: ignore[arg-type]


def _replayed(share: Any, schedule: bool) -> Iterator[Columns]:
    names = ("entries", "keys", "sizes", "at_ns") if schedule else ("entries", "keys", "sizes")
    for block in share.columns.blocks(SEGMENT_OPS, names):
        yield block["entries"], block["keys"], block["sizes"], block.get("at_ns")


def _generated(workload: Workload, phase: Phase, worker: int, purpose: str, limit: int, rate: float | None,
               segment: int | None = None) -> Iterator[Columns]:
    """``limit`` ops of the phase's mix, in segments (with their due times in open loop)."""
    segment = segment or SEGMENT_OPS
    gaps = None
    if rate is not None:
        interval = int(1e9 * workload.workers / rate)
        rng = stream_seed(workload.seed, phase.name, worker, purpose + "/arrivals")
        gaps = arrival_gaps(phase.arrival or workload.arrival, interval, rng)
    due = 0  # the next op's due time

    def cut(columns: list[np.ndarray], n: int) -> Columns:
        nonlocal due
        at = None
        if gaps is not None:
            step = np.fromiter((next(gaps) for _ in range(n)), dtype=np.int64, count=n)
            at = (due + np.concatenate([[0], np.cumsum(step[:-1])])).astype(np.uint64)
            due += int(step.sum())
        return columns[0][:n], columns[1][:n], columns[2][:n], at

    held = [np.zeros(0, np.uint8), np.zeros(0, np.uint32), np.zeros(0, np.uint32)]
    for chunk in (OpStream(workload, phase, worker, workload.workers, limit, purpose).batches() if limit else ()):
        held = [np.concatenate([h, np.asarray(c, dtype=h.dtype)]) for h, c in zip(held, chunk, strict=True)]
        while len(held[0]) >= segment:
            yield cut(held, segment)
            held = [h[segment:] for h in held]
    if len(held[0]):
        yield cut(held, len(held[0]))


# -- what it sends back -----------------------------------------------------------


class PhaseTally:
    """One driver's results for one phase, folded a part at a time (x-segments) into its histograms and
    per-second series: what it keeps does not grow with the phase."""

    def __init__(self, entries: list[str], open_loop: bool) -> None:
        self.entries = entries
        self.recorder = Recorder(entries, open_loop=open_loop)
        self.seconds: dict[int, tuple[int, int, np.ndarray]] = {}  # second → ops, errors, successes' counts
        self.closed: dict[int, dict[str, Any]] = {}  # seconds no later op can fall in: their series entry
        self.ran = 0
        self.span: tuple[int, int] | None = None  # first op's start, last op's end (ns from go)

    def fold(self, segment: OpBatch, reply: dict[str, Any], blob: bytes) -> None:
        """A ``part`` or ``done``: op i is the segment's op i (mod its length when it cycles)."""
        count = int(reply["count"])
        n = len(segment.entries)
        if len(blob) != 17 * count or (count > n and not segment.cycle):
            raise DriverFailed(f"results of {len(blob)} bytes for {count} ops of a segment of {n}")
        outcome = np.frombuffer(blob, dtype=np.uint8, count=count).astype(np.int64)
        starts = np.frombuffer(blob[count:9 * count], dtype="<u8").astype(np.int64)
        service = np.frombuffer(blob[9 * count:], dtype="<u8").astype(np.int64)
        index = np.arange(count) % max(n, 1)
        entry = segment.entries[index].astype(np.int64) if count else np.zeros(0, dtype=np.int64)
        if np.any(entry >= len(self.entries)):
            raise DriverFailed("results name an op entry that was not sent")
        codes = entry * 4 + np.minimum(outcome, ERROR)
        recorder = self.recorder
        latency = service
        if segment.at is not None:  # open loop: from the intended start, and from the sent one
            latency = np.maximum(starts + service - segment.at[index].astype(np.int64), service)
            Recorder._add(recorder.counts_uncorrected, codes, service)  # type: ignore[arg-type]
        Recorder._add(recorder.counts, codes, latency)  # type: ignore[arg-type]
        kinds = list(reply.get("error_kinds") or [])
        failed = outcome >= ERROR
        for code in np.unique(outcome[failed]).tolist():
            kind = kinds[code - ERROR] if code - ERROR < len(kinds) else f"kind{code - ERROR}"
            for e, c in enumerate(np.bincount(entry[outcome == code], minlength=len(self.entries)).tolist()):
                if c:
                    recorder.errors[e][kind] += c
        self._fold_seconds((starts + service) // 1_000_000_000, latency, failed)
        self.ran += count
        if count:
            first, last = int(starts.min()), int((starts + service).max())
            self.span = (first, last) if self.span is None else (min(self.span[0], first), max(self.span[1], last))

    def _fold_seconds(self, second: np.ndarray, latency: np.ndarray, failed: np.ndarray) -> None:
        if len(second):  # a driver's ops end in order: a second before this part's first is whole
            for t in [t for t in self.seconds if t < int(second.min())]:
                self.closed[t] = self._entry(t, *self.seconds.pop(t))  # encoded: 216 KiB raw a second
        for t in np.unique(second).tolist():
            mask = second == t
            ok = mask & ~failed
            ops, errors, counts = self.seconds.get(t, (0, 0, np.zeros(COUNTS_LEN, dtype=np.int64)))
            if ok.any():
                counts = counts + np.bincount(bucket_indexes(latency[ok]), minlength=COUNTS_LEN)
            self.seconds[t] = (ops + int(mask.sum()), errors + int((mask & failed).sum()), counts)

    def result(self, done: dict[str, Any]) -> tuple[dict[str, OpRecord], list[dict[str, Any]]]:
        """The phase's op results (docs/contracts.md) and per-second series, once ``done`` is folded."""
        recorder = self.recorder
        for e, kind, c in done.get("extra_errors") or []:
            if 0 <= int(e) < len(self.entries):
                recorder.errors[int(e)][str(kind)] += int(c)
        recorder.bytes_in = [int(b) for b in done.get("bytes_in") or [0] * len(self.entries)]
        recorder.bytes_out = [int(b) for b in done.get("bytes_out") or [0] * len(self.entries)]
        last = max([*self.seconds, *self.closed], default=-1)
        series = [self.closed[t] if t in self.closed else self._entry(t, *self.seconds.get(t, (0, 0, None)))
                  for t in range(last + 1)]  # every second, by completion
        return recorder.result(), series

    @staticmethod
    def _entry(t: int, ops: int, errors: int, counts: np.ndarray | None) -> dict[str, Any]:
        return {"t": t, "ops": ops, "errors": errors, "histogram": Histogram(counts).encode()}


# -- the run ----------------------------------------------------------------------


def check_workload(spec: DriverSpec, target: Target, workload: Workload) -> None:
    """Refuse, before any driver starts, what this driver cannot run."""
    if target.scheme not in spec.schemes:
        raise UnsupportedOp(f"client={spec.name} runs {', '.join(sorted(spec.schemes))} targets, "
                            f"not {target.scheme}://")
    if workload.tags is not None and not spec.tags:
        raise UnsupportedOp(f"client={spec.name} does not run tagged workloads")
    if workload.key_size is not None:  # the drivers name keys prefix + id (docs/drivers.md)
        raise UnsupportedOp(f"client={spec.name} does not pad keys (key_size); a Python client or "
                            f"client=engine does")
    for phase in workload.effective_phases():
        for entry in mix_entries(phase.mix or workload.mix):
            for op in entry.steps:
                if op not in spec.ops:
                    raise UnsupportedOp(f"client={spec.name} does not run {op!r}; it runs "
                                        f"{', '.join(sorted(spec.ops))}")


def run_driver_phases(target: Target, workload: Workload, namespace: str, backend: RunBackend,
                      monitor: Any = None, progress: ProgressFn | None = None) -> LoadResult:
    """Every phase of ``workload`` through the target's driver: the phase records, the driver's
    client info (in place of the preflight's Python client), and ``failed`` with one line when a
    driver dies or hangs."""
    spec = driver_for(target)
    assert spec is not None
    check_workload(spec, target, workload)
    info = dict(backend.info or {})
    for stale in ("hiredis", "client_class", "noreply", "no_delay", "client_version"):  # the Python client's
        info.pop(stale, None)  # (it only checks and cleans up), even when the driver cannot start
    info["client"] = spec.name
    drivers: list[DriverProcess] = []
    phases: list[PhaseRecord] = []
    try:
        for w in range(workload.workers):
            drivers.append(DriverProcess(spec, w))
        hellos = [d.recv(HELLO_TIMEOUT_S) for d in drivers]
        for d, (hello, _) in zip(drivers, hellos, strict=True):
            d.check(hello, "hello")
            if hello.get("protocol") != PROTOCOL:
                raise DriverFailed(f"driver {spec.name} speaks protocol {hello.get('protocol')}, not {PROTOCOL}")
        for w, d in enumerate(drivers):
            d.send(setup_message(target, workload, namespace, w))
        ready = [d.recv(REPLY_TIMEOUT_S) for d in drivers]
        for d, (reply, _) in zip(drivers, ready, strict=True):
            d.check(reply, "ready")
        info = _driver_info(info, spec, hellos[0][0], ready[0][0])
        interrupted = _run_phases(drivers, target, workload, backend.shared, phases, monitor, progress)
    except DriverFailed as exc:
        return LoadResult(phases, "failed", str(exc), info)
    finally:
        for d in drivers:
            d.close()
    return LoadResult(phases, "interrupted" if interrupted else "ok", INTERRUPTED if interrupted else "", info)


def _driver_info(info: dict[str, Any], spec: DriverSpec, hello: dict[str, Any],
                 reply: dict[str, Any]) -> dict[str, Any]:
    libraries = hello.get("libraries") or {}
    framework = libraries.get(spec.framework, "")
    library = "" if reply.get("client_library") == spec.framework else (
        f"{reply.get('client_library')} {reply.get('client_version')}, ")
    return {**info, "client": spec.name, "driver": spec.name, "runtime": hello.get("runtime"),
            "store": reply.get("client"), "client_library": reply.get("client_library"),
            "client_library_version": reply.get("client_version"), "libraries": libraries,
            # as the report prints it: "ruby-activesupport 6.1.7.10 (dalli 3.0.6, ruby 3.1.7)"
            "client_version": f"{framework} ({library}{hello.get('runtime')})".strip()}


def _run_phases(drivers: list[DriverProcess], target: Target, workload: Workload, shared: bool,
                phases: list[PhaseRecord], monitor: Any, progress: ProgressFn | None = None) -> bool:
    """Each phase's record into ``phases`` (the caller's list: a driver that fails mid-run keeps
    the phases before it); True when Ctrl-C stopped them."""
    for index, phase in enumerate(workload.effective_phases()):
        entries = [e.name for e in mix_entries(phase.mix or workload.mix)]
        if index == 0 and workload.prefill and _prefill(drivers, target, workload, shared, progress):
            phases.append(_phase_record(phase, workload, [], interrupted=True))
            return True
        if phase.warmup_ops or (phase.warmup and phase.warmup_ops is None):
            n = len(drivers)
            limits = [split_ops(phase.warmup_ops, w, n) for w in range(n)]
            _go(drivers, [op_feed(workload, phase, w, "warmup", limits[w], phase.warmup, None)
                          for w in range(n)], entries, workload, None if phase.warmup_ops else phase.warmup)
        feeds = [op_feed(workload, phase, w, "timed", split_ops(phase.ops, w, len(drivers)), phase.duration,
                         phase.rate) for w in range(len(drivers))]
        if monitor is not None:
            monitor.phase_coming(index)
            monitor.phase_started(index)
        replies = _go(drivers, feeds, entries, workload, phase.duration)
        parts = [tally.result(done) for done, tally in replies]
        wall_s = phase_wall([tally.span for _, tally in replies], [r for r, _ in replies])
        record = _phase_record(phase, workload, [r for r, _ in replies], ops=merge_ops([p for p, _ in parts], wall_s),
                               series=merge_timeseries([s for _, s in parts]), wall_s=wall_s)
        if monitor is not None:
            monitor.phase_ended(index, record.total_ops)
            record = monitor.attach(index, record)
        phases.append(record)
        if record.interrupted:
            return True
        if record.stopped_on_errors:
            return False
    return False


def _prefill(drivers: list[DriverProcess], target: Target, workload: Workload, shared: bool,
             progress: ProgressFn | None = None) -> bool:
    """Each driver writes its share of the keys (all of them when each has a private cache, as
    Rails' MemoryStore in each process); a refusal is one PrefillFailed line. True: Ctrl-C.

    The shares go in blocks, every driver's block at once, each sized to take about
    :data:`PREFILL_BLOCK_S`: the progress line counts keys between blocks, and memory stays flat
    however many keys."""
    n = len(drivers)
    shares = [range(w if shared else 0, workload.keys, n if shared else 1) for w in range(n)]
    streams = [stream_seed(workload.seed, "prefill", w) for w in range(n)]
    total, written, started = sum(len(ids) for ids in shares), 0, time.monotonic()
    replies: list[dict[str, Any]] = []
    start, size, longest = 0, PREFILL_BLOCKS[0], max(len(ids) for ids in shares)
    while start < longest:
        sent, began = [], time.monotonic()
        for d, ids, rng in zip(drivers, shares, streams, strict=True):
            block = np.asarray(ids[start:start + size], dtype="<u4")
            if len(block):
                sizes = workload.sizes.draw(rng, len(block)).astype("<u4")  # one stream: block by block as whole
                d.send({"type": "prefill", "count": len(block)}, block.tobytes() + sizes.tobytes())
                sent.append((d, len(block)))
        answers = [(d, d.recv(REPLY_TIMEOUT_S + PER_OP_TIMEOUT_S * count)[0]) for d, count in sent]
        for d, reply in answers:
            d.check(reply, "prefilled")
        replies += [reply for _, reply in answers]
        written += sum(count for _, count in sent)
        start += size
        took = max(time.monotonic() - began, 1e-3)
        size = int(min(max(size * PREFILL_BLOCK_S / took, PREFILL_BLOCKS[0]), PREFILL_BLOCKS[1]))
        if progress is not None:
            progress(PREFILL, written, total, time.monotonic() - started, None)
        if any(r.get("refused") or r.get("interrupted") for r in replies):
            break
    refused = sum(int(r.get("refused", 0)) for r in replies)
    if refused:
        sizes = workload.sizes
        shown = f"{sizes.sizes[0]:,}-byte values" if len(set(sizes.sizes)) == 1 else (
            f"values of {sizes.min:,}–{sizes.max:,} bytes")
        sample = next((r.get("error_sample") for r in replies if r.get("error_sample")), "")
        stopped = any(r.get("stopped_at_refusal") for r in replies)  # a driver that stops at the first
        raise PrefillFailed(f"{target.redacted}: {target.scheme} refused {shown} during prefill ({refused:,} of "
                            f"{workload.keys:,} writes refused{', stopped at the first' if stopped else ''}, "
                            f"through {drivers[0].spec.name}): {sample}")
    return any(r.get("interrupted") for r in replies)


class _Going:
    """One driver during ``go``: the segment it runs, the one sent ahead, its deadline, its tally."""

    def __init__(self, driver: DriverProcess, feed: OpFeed, first: OpBatch, tally: PhaseTally) -> None:
        self.driver, self.feed, self.running, self.tally = driver, feed, first, tally
        self.ahead: OpBatch | None = None
        self.deadline = 0.0
        self.done: dict[str, Any] | None = None

    def send_ahead(self, entries: list[str]) -> None:
        if self.running.more and not self.running.cycle:
            self.ahead = self.feed.next()
            if self.ahead is not None:
                self.driver.post(self.ahead.message(entries), self.ahead.blob())


def _go(drivers: list[DriverProcess], feeds: list[OpFeed], entries: list[str], workload: Workload,
        duration: float | None) -> list[tuple[dict[str, Any], PhaseTally]]:
    """Every worker's first segment, then ``go`` to all at once; then, until each ``done``, the next
    segments fed ahead and each ``part`` folded (x-segments). Each driver's ``done`` and its tally."""
    going = []
    for d, feed in zip(drivers, feeds, strict=True):
        first = feed.next()
        assert first is not None
        d.send(first.message(entries), first.blob())
        going.append(_Going(d, feed, first, PhaseTally(entries, first.at is not None)))
    for d in drivers:
        d.check(d.recv(REPLY_TIMEOUT_S)[0], "loaded")
    go = {"type": "go", "duration_s": duration, "verify_reads": workload.verify_reads,
          "verify_writes": workload.verify_writes,
          "stop_after_failing_s": workload.error_grace if workload.on_error == "stop" else None}
    started = time.monotonic()
    for g in going:
        g.driver.send(dict(go, cycle=g.feed.cycle))
        g.send_ahead(entries)
        g.deadline = _deadline(g.running, started, duration)
    interrupted = False
    while running := [g for g in going if g.done is None]:
        try:
            now = time.monotonic()
            for g in running:
                if now > g.deadline:
                    raise g.driver._failed(f"did not answer 'go' within {now - started:.0f} s", hung=True)
            readable, writable, _ = select.select([g.driver.out for g in running],
                                                  [g.driver.inp for g in running if g.driver.outbox], [],
                                                  max(0.0, min(g.deadline for g in running) - now))
            for g in running:
                if g.driver.inp in writable:
                    g.driver.flush()
                if g.driver.out in readable:
                    g.driver.fill()
                    while g.done is None and (message := g.driver.take()) is not None:
                        _received(g, *message, entries, started, duration)
        except KeyboardInterrupt:
            # Ctrl-C: every driver stops its loop (SIGINT) and reports what it ran, as workers do
            if not interrupted:
                interrupted = True
                for g in going:
                    with contextlib.suppress(OSError):
                        g.driver.proc.send_signal(signal.SIGINT)
            for g in going:
                g.deadline = min(g.deadline, time.monotonic() + INTERRUPT_TIMEOUT_S)
    return [(g.done, g.tally) for g in going]  # type: ignore[misc]


def _received(g: _Going, reply: dict[str, Any], blob: bytes, entries: list[str], started: float,
              duration: float | None) -> None:
    if reply.get("type") != "part":
        g.driver.check(reply, "done")
        g.tally.fold(g.running, reply, blob)
        if g.running.at is not None and duration is not None:  # the segments never run: their due ops, missed
            deadline_ns = int(duration * 1e9)
            ahead = 0 if g.ahead is None or g.ahead.at is None else int((g.ahead.at < deadline_ns).sum())
            reply = dict(reply, missed=int(reply.get("missed", 0)) + ahead + g.feed.due_before(deadline_ns))
        g.done = reply
        return
    if not (g.running.more or g.running.cycle):
        raise g.driver._failed("sent a part after its last segment", hung=True)
    g.tally.fold(g.running, reply, blob)
    if not g.running.cycle:
        assert g.ahead is not None
        g.running = g.ahead
        g.send_ahead(entries)
        g.deadline = _deadline(g.running, started, duration)


def _deadline(segment: OpBatch, started: float, duration: float | None) -> float:
    """When a driver that runs ``segment`` must have answered (part or done): its schedule or a generous
    bound per op, and the phase's duration, each with the reply allowance."""
    if segment.cycle:
        return started + (duration or 0.0) + REPLY_TIMEOUT_S
    due = float(segment.at[-1]) / 1e9 if segment.at is not None and len(segment.at) else 0.0
    by_ops = max(time.monotonic(), started + due) + PER_OP_TIMEOUT_S * len(segment.entries) + REPLY_TIMEOUT_S
    return by_ops if duration is None else min(by_ops, started + duration + REPLY_TIMEOUT_S)


def phase_wall(spans: list[tuple[int, int] | None], replies: list[dict[str, Any]]) -> float:
    """A phase's wall time as the application's: from its first op's start to its last op's end, as
    the drivers' per-op times say (each counted from its go, and go goes to all at once), so a
    driver's own set-up between go and its first op is not in it; ``wall_ns`` where no op ran."""
    ran = [s for s in spans if s is not None]
    if not ran:
        return max((r["wall_ns"] for r in replies), default=0) / 1e9
    return (max(s[1] for s in ran) - min(s[0] for s in ran)) / 1e9


def _phase_record(phase: Phase, workload: Workload, replies: list[dict[str, Any]],
                  ops: dict[str, OpRecord] | None = None,
                  series: list[dict[str, Any]] | None = None, interrupted: bool = False,
                  wall_s: float | None = None) -> PhaseRecord:
    record = PhaseRecord(
        name=phase.name,
        mode="open" if phase.rate else "closed",
        rate=phase.rate,
        workers=workload.workers,
        workers_reported=len(replies),
        wall_s=wall_s if wall_s is not None else max((r["wall_ns"] for r in replies), default=0) / 1e9,
        client_cpu_s=sum(float(r.get("cpu_s", 0.0)) for r in replies),
        interrupted=interrupted or any(r.get("interrupted") for r in replies),
        missed=sum(int(r.get("missed", 0)) for r in replies),
        error_samples=[s for r in replies for s in r.get("error_samples") or []][:5],
        ops=ops or {},
        timeseries=series or [],
    )
    if any(r.get("stopped_on_errors") for r in replies):  # the driver applied the on-error policy itself
        return record.stopped(stopped_reason(record, workload.error_grace))
    return record


__all__ = ["DRIVERS", "DriverFailed", "DriverProcess", "driver_for", "run_driver_phases"]
