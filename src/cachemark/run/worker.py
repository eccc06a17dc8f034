"""One worker process: open the backend, prefill, warm up, then the timed op loop.

The loop is the hot path of every Python-client measurement, so it is written for
speed: ops, keys and sizes come pre-drawn in lists, values are built before the clock
starts, and recording is two list appends. Everything else (histograms, verification
bookkeeping, progress) happens off the clock or every few thousand ops.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import itertools
import multiprocessing
import os
import resource
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import create_backend
from ..backends.base import Backend
from ..errors import BackendUnavailable, PrefillFailed, UserError, is_bug
from ..interrupts import redeliver_interrupts
from ..measure.outage import WriteOutages
from ..measure.recorder import ERROR, FLUSH_AT, HIT, MISS, OK, Recorder
from ..schemes import scheme
from ..spec import Phase, Workload
from ..target import Target
from ..textfile import one_line
from ..workload.etc import gaps_ns
from ..workload.keys import key_lengths, key_name
from ..workload.ops import MixEntry, OpStream, mix_entries, split_ops, stream_seed, tags_for_key
from ..workload.origin import Origin, parse_origin
from ..workload.replay import load_share
from ..workload.values import make_value, value_header, value_matches
from .messages import Done, Fatal, PhaseReport

# how an op's result is classified: READ (None is a miss), WRITE (ok), BOOL (exists: False is a
# miss, and ends a sequence), MANY (a hit when every key came back), DELETE (the backend's
# ``delete`` says whether the key existed: False is a miss, as reference 003 counts them)
READ, WRITE, BOOL, MANY, DELETE = 0, 1, 2, 3, 4
PRECOMPUTE_KEYS = 2_000_000
PREFILL_BATCH = 100  # keys per set_many: one round trip each
SIZE_BLOCK = 65_536  # prefill value sizes drawn at a time
PROGRESS_EVERY_NS = 100_000_000


@dataclass
class WorkerTask:
    """Everything a worker needs; picklable, so it crosses into the process."""

    target: Target  # parsed once, by the plan; pickled whole into the worker
    namespace: str
    workload: dict[str, Any]
    worker: int
    workers: int
    shared: bool = True  # False: each worker has a private cache, so each prefills all keys


@dataclass
class Board:
    """What workers and the parent share while a phase runs (RawArrays, one slot per worker).

    ``done`` and ``failed`` are op counts a worker publishes at its checkpoints (about
    every 100 ms); ``prefilled`` the keys it has written before the first phase (after each
    batch: the prefill's progress line); ``halt`` is set by the parent to end the run early
    (the on-error policy, Ctrl-C, another worker's fatal error), which workers notice at
    their next checkpoint or prefill batch.
    """

    done: Any
    failed: Any
    halt: Any
    prefilled: Any

    def reset(self) -> None:
        for i in range(len(self.done)):
            self.done[i] = self.failed[i] = 0


def arrival_gaps(arrival: str, interval_ns: int, rng: np.random.Generator) -> Iterator[int]:
    """Nanoseconds between one worker's intended starts: even, exponential (Poisson), or with
    Facebook ETC's generalised-Pareto shape (workload/etc.py), each with the mean ``interval_ns``."""
    if arrival == "etc":
        def etc_gaps() -> Iterator[int]:
            while True:
                yield from gaps_ns(rng, 65_536, interval_ns).tolist()

        return etc_gaps()
    if arrival != "poisson":
        return itertools.repeat(interval_ns)

    def exponential() -> Iterator[int]:
        while True:
            yield from rng.exponential(interval_ns, 65_536).astype(np.int64).tolist()

    return exponential()


class _Keys:
    """Key strings by id: a list for small keyspaces, formatted on demand for huge ones."""

    def __init__(self, prefix: str, count: int, lengths: tuple[int, ...] = ()) -> None:
        self.prefix, self.count, self.lengths = prefix, count, lengths

    def __getitem__(self, i: int) -> str:
        return key_name(self.prefix, i, self.lengths)


def key_table(prefix: str, count: int, lengths: tuple[int, ...] = ()) -> list[str] | _Keys:
    if count > PRECOMPUTE_KEYS:
        return _Keys(prefix, count, lengths)
    if lengths:
        return [key_name(prefix, i, lengths) for i in range(count)]
    return [f"{prefix}{i}" for i in range(count)]


class _Headers:
    def __init__(self, keys: _Keys) -> None:
        self.keys = keys

    def __getitem__(self, i: int) -> bytes:
        return value_header(self.keys[i])


class Worker:
    """The per-process state of one worker across the phases of one run."""

    def __init__(self, task: WorkerTask, backend: Backend | None = None) -> None:
        self.task = task
        self.workload = Workload.model_validate(task.workload)
        self.backend = backend or create_backend(task.target, task.namespace)
        self.keys = key_table(task.namespace, self.workload.keys, key_lengths(self.workload.key_size))
        self.headers = (
            [value_header(k) for k in self.keys] if isinstance(self.keys, list) else _Headers(self.keys)
        )
        self.sizes = self.workload.sizes
        self.ttl = self.workload.ttl or None
        self.canaries = 0
        self.interrupted = False
        self.prefilled = self.prefill_total = 0
        self.missed = 0  # open loop: ops due before the deadline but never sent
        self.span: tuple[int, int] | None = None  # the last phase's first op's start, last op's end (ns)
        self.canary_ns = 0  # the last phase's time in write canaries (cachemark's, not the application's)
        self.outages = WriteOutages()  # the last phase's windows of failing writes (measure/outage.py)
        # cache-aside (`fetch`): the origin a miss calls, and where its latencies go (set per phase)
        fetches = any("fetch" in name.split("+") for p in self.workload.effective_phases() for name in p.mix or {})
        self.origin = (Origin(parse_origin(self.workload.origin), stream_seed(self.workload.seed, "origin",
                                                                              task.worker), task.namespace)
                       if fetches and self.workload.origin else None)
        self._origin_sink: tuple[Recorder, int, bool] | None = None

    # -- untimed phases ------------------------------------------------------------
    def prefill(self, halt=None, published=None) -> int:
        """Write this worker's share of the keys; a refusal becomes one PrefillFailed line.
        ``halt`` (the parent's stop flag) is checked between batches, and the keys written so far
        go to ``published[worker]`` (the board's prefill counts) after each."""
        try:
            return self._prefill(halt, published)
        except Exception as exc:
            if is_bug(exc):
                raise
            raise PrefillFailed(self._refusal(exc)) from exc

    def _refusal(self, exc: Exception) -> str:
        sizes = self.sizes
        values = f"{sizes.sizes[0]:,}-byte values" if len(set(sizes.sizes)) == 1 else (
            f"values of {min(sizes.sizes):,}–{max(sizes.sizes):,} bytes")
        text = str(exc)
        if text.startswith(("b'", 'b"')) and text.endswith(text[1]):
            text = text[2:-1]  # pymemcache's messages are bytes reprs
        server = self.task.target.scheme
        full = getattr(exc, "errno", None) == errno.ENOSPC or "disk is full" in text or "No space left" in text
        what = f"ran out of space storing {values}" if full else f"refused {values}"
        return (f"{server} {what} during prefill ({self.prefilled:,} of {self.prefill_total:,} keys "
                f"written by worker {self.task.worker}): {type(exc).__name__}: {one_line(text, 300)}")

    def _prefill(self, halt, published) -> int:
        wl, task = self.workload, self.task
        ids = range(wl.keys) if not task.shared else range(task.worker, wl.keys, task.workers)
        tagged = wl.tags is not None
        batch: dict[str, bytes] = {}
        written = self.prefilled = 0
        self.prefill_total = len(ids)

        def wrote(count: int) -> int:
            self.prefilled = written + count
            if published is not None:
                published[task.worker] = self.prefilled
            if halt is not None and halt[0]:
                raise KeyboardInterrupt
            return self.prefilled

        for size, k in zip(self._prefill_sizes(len(ids)), ids, strict=True):
            value = make_value(self.headers[k], size)
            if tagged:
                self.backend.set_tagged(self.keys[k], value, self._tags(k), self.ttl)
                written = wrote(1)
                continue
            batch[self.keys[k]] = value
            if len(batch) >= PREFILL_BATCH:
                self._write_batch(batch, halt)
                written = wrote(len(batch))
                batch = {}
        if batch:
            self._write_batch(batch, halt)
            written = wrote(len(batch))
        return written

    def _prefill_sizes(self, count: int) -> Iterator[int]:
        """The prefill's value sizes, drawn a block at a time: memory stays flat however many keys
        (one draw of 10⁸ sizes as Python ints would take gigabytes). One stream, so the sizes are
        the ones a single draw gives."""
        rng = stream_seed(self.workload.seed, "prefill", self.task.worker)
        for start in range(0, count, SIZE_BLOCK):
            yield from self.sizes.draw(rng, min(SIZE_BLOCK, count - start)).tolist()

    def _write_batch(self, batch: dict[str, bytes], halt) -> None:
        """One prefill batch; a target that fails over (Sentinel) has its connection errors waited
        out for its failover grace (the prefill is untimed, and a batch of SETs may be sent twice)."""
        grace = scheme(self.task.target.scheme).failover_grace
        deadline = time.monotonic() + (grace or 0)
        while True:
            try:
                self.backend.set_many(batch, self.ttl)
                return
            except Exception as exc:
                if grace is None or classify_error(exc) != "connection" or time.monotonic() > deadline:
                    raise
                if halt is not None and halt[0]:
                    raise KeyboardInterrupt from None
                time.sleep(0.1)

    def _tags(self, k: int) -> list[str]:
        tags = self.workload.tags
        assert tags is not None
        return tags_for_key(k, tags.pool, tags.min_per_key, tags.max_per_key)

    # -- the op table --------------------------------------------------------------
    def _handler(self, entry: MixEntry):
        """A callable (key, key id, value) -> result, and how to classify its result."""
        b, ttl, wl = self.backend, self.ttl, self.workload
        steps = entry.steps
        if len(steps) > 1:
            parts = [self._handler(MixEntry(s, (s,), 1.0)) for s in steps]

            def sequence(key, k, value, parts=parts):
                result = None
                for fn, kind in parts:
                    result = fn(key, k, value)
                    if kind == BOOL and not result:
                        return None  # exists said no: the sequence ends as a miss
                return result

            return sequence, READ
        op = steps[0]
        if op == "get":
            get = b.get
            return (lambda key, k, value: get(key)), READ
        if op == "set":
            if wl.tags is not None:
                set_tagged, tags_of = b.set_tagged, self._tags
                return (lambda key, k, value: set_tagged(key, value, tags_of(k), ttl)), WRITE
            set_ = b.set
            return (lambda key, k, value: set_(key, value, ttl)), WRITE
        if op == "delete":
            delete = b.delete
            return (lambda key, k, value: delete(key)), DELETE
        if op == "exists":
            exists = b.exists
            return (lambda key, k, value: exists(key)), BOOL
        if op == "incr":
            incr, prefix = b.incr, self.task.namespace + "n:"
            return (lambda key, k, value: incr(f"{prefix}{k}")), WRITE
        if op == "clean":
            clean, pool = b.clean_tags, (wl.tags.pool if wl.tags else 1)
            return (lambda key, k, value: clean([f"t{k % pool}"])), WRITE
        count, keys, n = wl.get_many_count, self.keys, wl.keys
        if op == "fetch":
            return self._fetch_handler(), READ
        if op == "get_many":
            get_many = b.get_many

            def many(key, k, value):
                return get_many([keys[(k + i) % n] for i in range(count)])

            return many, MANY
        if op == "set_many":
            set_many, headers, sizes = b.set_many, self.headers, self.sizes

            def set_many_fn(key, k, value):
                ids = [(k + i) % n for i in range(count)]
                return set_many({keys[i]: make_value(headers[i], sizes.max if value is None else len(value))
                                 for i in ids}, ttl)

            return set_many_fn, WRITE
        raise UserError(f"op {op!r} is not supported by the worker")

    def _fetch_handler(self):
        """Cache-aside as applications do it: get; on a miss the origin, then set with the TTL.

        The whole is timed by the loop (a hit or a miss); the origin's own latency is recorded
        apart, as the pseudo-op ``origin`` (and, with ``?pool=N``, the wait for a slot as
        ``origin_wait``), into the same lists as the loop's, so they merge like any op."""
        if self.origin is None or self._origin_sink is None:
            raise UserError('the fetch op needs an origin: set origin = "fixed:10ms" (or --origin fixed:10ms)')
        origin, (recorder, index, open_loop) = self.origin, self._origin_sink
        origin.open()
        get, set_, ttl, call, perf = self.backend.get, self.backend.set, self.ttl, origin.call, time.perf_counter_ns
        lat, codes, lat_u = recorder.latencies.append, recorder.codes.append, recorder.uncorrected.append
        ok, failed, waited = index * 4 + OK, index * 4 + ERROR, (index + 1) * 4 + OK
        pool = origin.pool

        def record(code: int, ns: int) -> None:
            lat(ns)
            codes(code)
            recorder.pseudo_records += 1
            if open_loop:
                lat_u(ns)

        def fetch(key, k, value):
            found = get(key)
            if found is not None:
                return found
            if pool is not None:
                t0 = perf()
                pool.acquire()
                record(waited, perf() - t0)
            t1 = perf()
            try:
                call()
            except Exception as exc:
                record(failed, perf() - t1)
                recorder.error(index, classify_error(exc), str(exc))
                raise
            else:
                record(ok, perf() - t1)
            finally:
                if pool is not None:
                    pool.release()
            set_(key, value, ttl)
            return None

        return fetch

    # -- the timed loop -------------------------------------------------------------
    def run_phase(self, phase: Phase, limit: int | None, deadline_ns: int | None,
                  board: Board | None = None, purpose: str = "timed") -> Recorder:
        """Run ops until ``limit`` ops are done, the clock passes ``deadline_ns`` or the
        parent raises ``board.halt``. In open loop, ``self.missed`` is then the number of
        ops that fell due before the deadline but were never sent (the load fell behind).

        Long on purpose: the per-op loop is the load path's hot loop, and it reads locals bound
        once above it; split into helpers, every op would pay their calls and attribute lookups."""
        task = self.task
        entries = mix_entries(phase.mix or self.workload.mix)
        open_loop = phase.rate is not None
        names = [e.name for e in entries]
        fetching = any("fetch" in e.steps for e in entries)
        pseudo = (["origin"] + (["origin_wait"] if self.origin and self.origin.spec.pool else [])
                  if fetching and self.origin is not None else [])
        recorder = Recorder(names + pseudo, open_loop=open_loop, pseudo=len(pseudo))
        self._origin_sink = (recorder, len(names), open_loop) if pseudo else None
        replay = None
        if self.workload.trace is not None and self.workload.trace.prepared:  # a recorded trace, in its order
            replay = stream = load_share(self.workload.trace.prepared, task.worker)
        else:
            stream = OpStream(self.workload, phase, task.worker, task.workers, limit, purpose)
        table = [self._handler(e) for e in entries]
        fns = [fn for fn, _ in table]
        kinds = [kind for _, kind in table]
        is_write = [kind == WRITE for kind in kinds]
        outages = self.outages = WriteOutages(getattr(self.backend, "current_server", None))
        scope_of = getattr(self.backend, "outage_scope", None)  # a cluster's: whose keys a window is about
        writes = [e.writes or "fetch" in e.steps for e in entries]  # a fetch writes on a miss
        verifiable = [e.steps[-1] in ("get", "fetch") for e in entries]
        keys, headers, sizes_spec = self.keys, self.headers, self.sizes
        lat, codes, lat_u = recorder.latencies, recorder.codes, recorder.uncorrected
        lat_append, code_append, lat_u_append = lat.append, codes.append, lat_u.append
        bytes_in, bytes_out = recorder.bytes_in, recorder.bytes_out
        perf = time.perf_counter_ns
        many_count = self.workload.get_many_count
        verify_reads = self.workload.verify_reads
        read_every = int(1 / verify_reads) if verify_reads > 0 else 0
        # null:// keeps nothing by design: its writes are not checked (they would all be "dropped")
        verify_writes = self.workload.verify_writes if scheme(task.target.scheme).stores else 0
        write_every = int(1 / verify_writes) if verify_writes > 0 else 0
        read_count = write_count = 0
        interval = int(1e9 * task.workers / phase.rate) if open_loop else 0
        arrivals_rng = stream_seed(self.workload.seed, phase.name, task.worker, purpose + "/arrivals")
        next_gap = (replay.gaps() if replay is not None else
                    arrival_gaps(phase.arrival or "fixed", interval, arrivals_rng)).__next__
        timed = board is not None and purpose == "timed"  # only the timed phase publishes its counts
        progress, failures = (board.done, board.failed) if timed else (None, None)
        halt = board.halt if board is not None else None
        failed = 0
        self.missed = 0
        start = perf()
        intended = start + (replay.first_due() if replay is not None and open_loop else 0)
        second = 0
        next_second = start + 1_000_000_000
        checkpoint = start  # the first op passes it: its start is the phase's (self.span)
        first = t1 = 0
        self.span = None
        self.canary_ns = 0
        done = 0
        try:
            for ops, ks, szs in stream.batches():
                for op, k, size in zip(ops, ks, szs):
                    key = keys[k]
                    value = make_value(headers[k], size) if writes[op] else None
                    if open_loop:
                        now = perf()
                        if now < intended:
                            time.sleep((intended - now) / 1e9)
                    t0 = perf()
                    try:
                        result = fns[op](key, k, value)
                        t1 = perf()
                    except Exception as exc:  # noqa: BLE001 — every failure is a measured error
                        t1 = perf()
                        failed += 1
                        outcome = ERROR
                        recorder.error(op, classify_error(exc), str(exc))
                        outages.failed(t0, t1, is_write[op], scope_of(key) if scope_of and is_write[op] else None)
                    else:
                        kind = kinds[op]
                        if kind == READ:
                            if result is None:
                                outcome = MISS
                                if value is not None:  # a fetch: the origin's value was written
                                    bytes_out[op] += len(value)
                            else:
                                outcome = HIT
                                bytes_in[op] += len(result)
                                if read_every:
                                    read_count += 1
                                    if read_count >= read_every and verifiable[op]:
                                        read_count = 0
                                        if not (value_matches(headers[k], result) and sizes_spec.allows(len(result))):
                                            outcome = ERROR
                                            recorder.error(op, "verify", f"{key}: unexpected value of {len(result)} B")
                        elif kind == WRITE:
                            outcome = OK
                            # writes (to the keys that failed) work again: the outage window closes
                            if outages.first and (scope_of is None or outages.scope == scope_of(key)):
                                outages.succeeded(t1, key)
                            if value is not None:
                                bytes_out[op] += len(value)
                                if write_every:
                                    write_count += 1
                                    if write_count >= write_every:
                                        write_count = 0
                                        self._check_canary(recorder, op, size)
                        elif kind in (BOOL, DELETE):
                            outcome = HIT if result else MISS
                        else:  # MANY: a hit when every key was found
                            outcome = HIT if len(result) == many_count else MISS
                            bytes_in[op] += sum(len(v) for v in result.values())
                    if open_loop:
                        lat_append(t1 - intended)
                        lat_u_append(t1 - t0)
                        intended += next_gap()
                    else:
                        lat_append(t1 - t0)
                    code_append(op * 4 + outcome)
                    bytes_out[op] += len(key)
                    if t1 >= checkpoint:
                        starting = not first
                        if starting:
                            first = t0
                        if t1 >= next_second:  # a (possibly long) op may span several seconds
                            done = len(codes) + done
                            recorder.end_second(second)
                            while next_second <= t1:
                                second += 1
                                next_second += 1_000_000_000
                        elif not starting:  # the first op's record waits: a first flush (~1 ms) is no op's time
                            done = len(codes) + done
                            recorder.flush()
                        if progress is not None:  # the load's ops: an origin call is part of a fetch
                            progress[task.worker] = done - recorder.pseudo_records
                            failures[task.worker] = failed
                        if halt is not None and halt[0]:
                            return recorder
                        if deadline_ns is not None and t1 >= deadline_ns:
                            if open_loop and intended < deadline_ns:
                                self.missed = (replay.due_between(intended - start, deadline_ns - start)
                                               if replay is not None else _due_before(intended, deadline_ns, interval))
                            return recorder
                        checkpoint = min(t1 + PROGRESS_EVERY_NS, next_second)
                        if deadline_ns is not None:
                            checkpoint = min(checkpoint, deadline_ns)
                if len(codes) >= FLUSH_AT:
                    done += len(codes)
                    recorder.flush()
        except KeyboardInterrupt:
            # Stop here, and let no second Ctrl-C (the parent forwards one) cut the report short.
            self.interrupted = True
            _deaf()  # the one interrupt is spent: no other can come
        finally:
            if first:  # the phase as the application saw it: first op's start to last op's end, less canaries
                self.span = (first, t1 - self.canary_ns)
            if progress is not None:
                progress[task.worker] = done + len(codes) - recorder.pseudo_records
                failures[task.worker] = failed
            if recorder.codes or recorder.second_ops:
                recorder.end_second(second)  # the last, partial second
        return recorder

    def _check_canary(self, recorder: Recorder, op: int, size: int) -> None:
        """Write a private key, read it back at once: a silently dropped write is an error."""
        self.canaries += 1
        began = time.perf_counter_ns()
        try:
            self._canary(recorder, op, size)
        finally:  # cachemark's own round trips: not the application's time (run_phase's span leaves them out)
            self.canary_ns += time.perf_counter_ns() - began

    def _canary(self, recorder: Recorder, op: int, size: int) -> None:
        key = f"{self.task.namespace}verify:{self.task.worker}:{self.canaries}"
        value = make_value(value_header(key), size)
        try:
            self.backend.set(key, value, self.ttl)
            back = self.backend.get(key)
            self.backend.delete(key)
        except Exception as exc:  # noqa: BLE001
            recorder.error(op, classify_error(exc), str(exc))
            return
        if back is None:
            recorder.error(op, "dropped_write", f"{key}: a value just written read back as a miss")
        elif back != value:
            recorder.error(op, "dropped_write", f"{key}: a value just written read back different")


def _due_before(intended: int, deadline: int, interval: int) -> int:
    """Ops of the schedule that fell due in [intended, deadline): never sent, so missed."""
    return (deadline - intended + interval - 1) // interval if interval > 0 else 0


def classify_error(exc: BaseException) -> str:
    """Map a client exception onto the error kinds of docs/contracts.md."""
    name = type(exc).__name__
    text = f"{name} {exc}".lower()
    # client libraries' own families count too (redis-py's MasterNotFoundError is its ConnectionError)
    ancestors = {cls.__name__ for cls in type(exc).__mro__}
    if is_bug(exc):  # the client library's own bug (redis-py: 'NoneType' … 'redis_connection'), named as such
        return name
    if isinstance(exc, TimeoutError) or "TimeoutError" in ancestors or "timeout" in text or "timed out" in text:
        return "timeout"
    if (isinstance(exc, ConnectionError | BrokenPipeError | EOFError) or "ConnectionError" in ancestors
            or "connection" in text or "connect" in text):
        return "connection"
    if isinstance(exc, OSError):
        return "connection"
    if name == "WriteRejected" or "response" in text or "protocol" in text:
        return "server"
    return name


def _die_with_the_run() -> None:
    """When the run's process goes (killed outright: ``kill -9``, the OOM killer), so do we:
    workers ignore SIGTERM and must not outlive it, running ops against the user's server.

    A thread waits on a pidfd of the process that started us and ends this one when it
    exits. The fork server's exit alone is no signal: every worker holds its "alive" pipe
    open, so it outlives the run as long as we do (a parent-death signal on it, kept for a
    fork server that dies on its own, never fired). Once the workers are gone the fork
    server ends too, and the resource tracker unlinks the run's semaphores."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: the fork server
        if os.getppid() == 1:  # the fork server was already gone
            os._exit(1)
    run = multiprocessing.parent_process()
    if run is None or run.pid is None:
        return
    try:
        watched = os.pidfd_open(run.pid)
    except ProcessLookupError:
        os._exit(1)  # the run was already gone
    except (OSError, AttributeError):
        return  # a kernel before 5.3: the fork server's death is all we follow

    def watch() -> None:
        readable = select.poll()  # (not select(): no limit on the descriptor's number)
        readable.register(watched, select.POLLIN)
        readable.poll()
        os._exit(1)

    threading.Thread(target=watch, name="run-watch", daemon=True).start()


_stopping = False


def _interrupt_once(signum, frame) -> None:
    """SIGINT handler: the first Ctrl-C stops the work (KeyboardInterrupt), any later one is
    ignored. The terminal's Ctrl-C and the parent's forwarded one arrive back to back; the
    second must never cut the clean-up or the last report short."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt


def _rearm() -> None:
    """The interrupt `_interrupt_once` raised was swallowed (a destructor or an import's weakref
    callback ran it): the next one, redelivered (`interrupts`), counts as the first."""
    global _stopping
    _stopping = False


def _listen_for_interrupts() -> None:
    """SIGINT stops the work once (`_interrupt_once`), also when it lands in a destructor."""
    signal.signal(signal.SIGINT, _interrupt_once)
    sys.unraisablehook = redeliver_interrupts(sys.__unraisablehook__, rearm=_rearm)


def _deaf() -> None:
    """Ignore Ctrl-C from here on (we are ending anyway)."""
    global _stopping
    _stopping = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Failed(Exception):
    """A fatal report the work raises instead of sending it: sent once we are deaf to Ctrl-C,
    so an interrupt can never cut it short."""

    def __init__(self, fatal: Fatal):
        super().__init__(fatal.message)
        self.fatal = fatal


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_main(task: WorkerTask, queue, barrier, board: Board) -> None:
    """Process entry point: report each phase's result, or one fatal message, then Done.

    The handler raises at most one KeyboardInterrupt (the terminal's Ctrl-C and the parent's
    forwarded one come back to back), and it may land anywhere: in the work, while a crash is
    being caught, or on the way to turning deaf. The nesting below catches it in each place;
    what went wrong is reported only after that, deaf, so no interrupt cuts the report short."""
    _die_with_the_run()
    held = _Held()
    try:
        try:
            _work(task, queue, barrier, board, held)
        except (KeyboardInterrupt, threading.BrokenBarrierError):
            pass
        except Exception as exc:  # noqa: BLE001 — reported to the parent, which decides
            held.failure = exc
        _deaf()
    except KeyboardInterrupt as late:
        _deaf()
        caught = late.__context__  # what was being caught when the interrupt landed, if anything
        quiet_end = isinstance(caught, threading.BrokenBarrierError)
        if held.failure is None and isinstance(caught, Exception) and not quiet_end:
            held.failure = caught
    _end(task, queue, held)


@dataclass
class _Held:
    """What worker_main must still close and report when the work ends."""

    worker: Worker | None = None
    failure: Exception | None = None


def _work(task: WorkerTask, queue, barrier, board: Board, held: _Held) -> None:
    _listen_for_interrupts()
    # The fork server was started with the terminal's signals blocked (runner): a Ctrl-C that
    # came meanwhile arrives here, as KeyboardInterrupt. SIGTERM and SIGHUP stay ignored
    # (preload); SIGINT is how the parent stops us.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        worker = held.worker = Worker(task)
        _open(worker.backend, task.target, board.halt)
        if worker.origin is not None:  # before the first barrier: every worker holds the shared pool
            worker.origin.open()
    except UserError as exc:
        raise _Failed(Fatal(task.worker, str(exc), "user")) from None
    wl = worker.workload
    if board.halt[0]:
        return  # stopped before we started (our SIGINT may have come before our handler)
    if wl.prefill:
        try:
            worker.prefill(board.halt, board.prefilled)
        except PrefillFailed as exc:
            raise _Failed(Fatal(task.worker, str(exc), "user")) from None
    for index, phase in enumerate(wl.effective_phases()):
        if phase.warmup_ops or (phase.warmup and phase.warmup_ops is None):
            warm_limit = split_ops(phase.warmup_ops, task.worker, task.workers)
            warm_deadline = None if warm_limit else time.perf_counter_ns() + int(phase.warmup * 1e9)
            worker.run_phase(phase, warm_limit, warm_deadline, board, purpose="warmup")
            if worker.interrupted:
                break
        _collect_own_garbage()
        barrier.wait(timeout=600)
        cpu0 = cpu_seconds()
        start = time.perf_counter_ns()
        limit = split_ops(phase.ops, task.worker, task.workers)
        deadline = start + int(phase.duration * 1e9) if phase.duration else None
        recorder = worker.run_phase(phase, limit, deadline, board)
        end = time.perf_counter_ns()
        if worker.span is not None:  # cachemark's own set-up before the first op is not the phase's
            start, end = worker.span
        queue.put(PhaseReport(
            task.worker, index, start_ns=start, end_ns=end, cpu_s=cpu_seconds() - cpu0, ops=recorder.result(),
            interrupted=worker.interrupted, missed=worker.missed, error_samples=recorder.error_samples,
            timeseries=recorder.series(), write_outages=worker.outages.result(),
        ))
        if worker.interrupted or board.halt[0]:
            break


def _collect_own_garbage() -> None:
    """Collect before the phase: the garbage of cachemark's set-up and last phase is not the
    application's, so no collection inside the phase is spent on it."""
    gc.collect()


def _open(backend: Backend, target: Target, halt) -> None:
    """Connect; a target that fails over (Sentinel) is given its failover grace to name a primary
    that answers: the parent's preflight reached one, so a refusal now is a failover under way
    (a worker started late, after the primary died), not a wrong URL."""
    grace = scheme(target.scheme).failover_grace
    deadline = time.monotonic() + (grace or 0)
    while True:
        try:
            backend.open()
            return
        except BackendUnavailable:
            if grace is None or time.monotonic() > deadline:
                raise
            if halt[0]:
                raise KeyboardInterrupt from None
            time.sleep(0.1)


def _end(task: WorkerTask, queue, held: _Held) -> None:
    """Deaf to Ctrl-C by now: report the failure (the parent answers a fatal report with SIGINT
    to every worker), close what we opened, say Done."""
    failure = held.failure
    if isinstance(failure, _Failed):
        queue.put(failure.fatal)
    elif failure is not None:
        trace = "".join(traceback.format_exception(failure))
        queue.put(Fatal(task.worker, f"{type(failure).__name__}: {failure}", "crash", trace))
    worker = held.worker
    if worker is not None:
        with contextlib.suppress(Exception):
            worker.backend.close()
        if worker.origin is not None:
            with contextlib.suppress(Exception):
                worker.origin.close()
    queue.put(Done(task.worker, os.getpid()))
