"""One worker process: open the backend, prefill, warm up, then the timed op loop.

The loop is the hot path of every Python-client measurement, so it is written for
speed: ops, keys and sizes come pre-drawn in lists, values are built before the clock
starts, and recording is two list appends. Everything else (histograms, verification
bookkeeping, progress) happens off the clock or every few thousand ops.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from ..backends import create_backend
from ..backends.base import Backend
from ..errors import UserError
from ..measure.recorder import ERROR, FLUSH_AT, HIT, MISS, OK, Recorder
from ..spec import Phase, Workload
from ..target import parse_target
from ..workload.ops import MixEntry, OpStream, mix_entries, split_ops, stream_seed, tags_for_key
from ..workload.values import make_value, value_header, value_matches

READ, WRITE, BOOL, MANY = 0, 1, 2, 3
PRECOMPUTE_KEYS = 2_000_000
PROGRESS_EVERY_NS = 100_000_000


@dataclass
class WorkerTask:
    """Everything a worker needs; picklable, so it crosses into the process."""

    target_url: str
    namespace: str
    workload: dict[str, Any]
    worker: int
    workers: int
    shared: bool = True  # False: each worker has a private cache, so each prefills all keys


class _Keys:
    """Key strings by id: a list for small keyspaces, formatted on demand for huge ones."""

    def __init__(self, prefix: str, count: int) -> None:
        self.prefix, self.count = prefix, count

    def __getitem__(self, i: int) -> str:
        return f"{self.prefix}{i}"


def key_table(prefix: str, count: int) -> list[str] | _Keys:
    if count <= PRECOMPUTE_KEYS:
        return [f"{prefix}{i}" for i in range(count)]
    return _Keys(prefix, count)


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
        self.backend = backend or create_backend(parse_target(task.target_url), task.namespace)
        self.keys = key_table(task.namespace, self.workload.keys)
        self.headers = (
            [value_header(k) for k in self.keys] if isinstance(self.keys, list) else _Headers(self.keys)
        )
        self.sizes = self.workload.sizes
        self.ttl = self.workload.ttl or None
        self.canaries = 0
        self.interrupted = False

    # -- untimed phases ------------------------------------------------------------
    def prefill(self) -> int:
        wl, task = self.workload, self.task
        ids = range(wl.keys) if not task.shared else range(task.worker, wl.keys, task.workers)
        rng = stream_seed(wl.seed, "prefill", task.worker)
        sizes = self.sizes.draw(rng, len(ids)).tolist()
        tagged = wl.tags is not None
        batch: dict[str, bytes] = {}
        written = 0
        for size, k in zip(sizes, ids, strict=True):
            value = make_value(self.headers[k], size)
            if tagged:
                self.backend.set_tagged(self.keys[k], value, self._tags(k), self.ttl)
                written += 1
                continue
            batch[self.keys[k]] = value
            if len(batch) >= 100:
                self.backend.set_many(batch, self.ttl)
                written += len(batch)
                batch = {}
        if batch:
            self.backend.set_many(batch, self.ttl)
            written += len(batch)
        return written

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
            return (lambda key, k, value: delete(key)), WRITE
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

    # -- the timed loop -------------------------------------------------------------
    def run_phase(self, phase: Phase, limit: int | None, deadline_ns: int | None,
                  progress=None, purpose: str = "timed") -> Recorder:
        """Run ops until ``limit`` ops are done or the clock passes ``deadline_ns``."""
        task = self.task
        entries = mix_entries(phase.mix or self.workload.mix)
        open_loop = phase.rate is not None
        recorder = Recorder([e.name for e in entries], open_loop=open_loop)
        stream = OpStream(self.workload, phase, task.worker, task.workers, limit, purpose)
        table = [self._handler(e) for e in entries]
        fns = [fn for fn, _ in table]
        kinds = [kind for _, kind in table]
        writes = [e.writes for e in entries]
        verifiable = [e.steps[-1] == "get" for e in entries]
        keys, headers, sizes_spec = self.keys, self.headers, self.sizes
        lat, codes, lat_u = recorder.latencies, recorder.codes, recorder.uncorrected
        lat_append, code_append, lat_u_append = lat.append, codes.append, lat_u.append
        bytes_in, bytes_out = recorder.bytes_in, recorder.bytes_out
        perf = time.perf_counter_ns
        many_count = self.workload.get_many_count
        verify_reads = self.workload.verify_reads
        read_every = int(1 / verify_reads) if verify_reads > 0 else 0
        verify_writes = self.workload.verify_writes
        write_every = int(1 / verify_writes) if verify_writes > 0 else 0
        read_count = write_count = 0
        interval = int(1e9 * task.workers / phase.rate) if open_loop else 0
        start = perf()
        intended = start
        second = 0
        next_second = start + 1_000_000_000
        checkpoint = min(start + PROGRESS_EVERY_NS, next_second)
        if deadline_ns is not None:
            checkpoint = min(checkpoint, deadline_ns)
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
                        outcome = ERROR
                        recorder.error(op, classify_error(exc), str(exc))
                    else:
                        kind = kinds[op]
                        if kind == READ:
                            if result is None:
                                outcome = MISS
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
                            if value is not None:
                                bytes_out[op] += len(value)
                                if write_every:
                                    write_count += 1
                                    if write_count >= write_every:
                                        write_count = 0
                                        self._check_canary(recorder, op, size)
                        elif kind == BOOL:
                            outcome = HIT if result else MISS
                        else:  # MANY: a hit when every key was found
                            outcome = HIT if len(result) == many_count else MISS
                            bytes_in[op] += sum(len(v) for v in result.values())
                    if open_loop:
                        lat_append(t1 - intended)
                        lat_u_append(t1 - t0)
                        intended += interval
                    else:
                        lat_append(t1 - t0)
                    code_append(op * 4 + outcome)
                    bytes_out[op] += len(key)
                    if t1 >= checkpoint:
                        done = len(codes) + done
                        if t1 >= next_second:  # a (possibly long) op may span several seconds
                            recorder.end_second(second)
                            while next_second <= t1:
                                second += 1
                                next_second += 1_000_000_000
                        else:
                            recorder.flush()
                        if progress is not None:
                            progress[task.worker] = done
                        if deadline_ns is not None and t1 >= deadline_ns:
                            return recorder
                        checkpoint = min(t1 + PROGRESS_EVERY_NS, next_second)
                        if deadline_ns is not None:
                            checkpoint = min(checkpoint, deadline_ns)
                if len(codes) >= FLUSH_AT:
                    done += len(codes)
                    recorder.flush()
        except KeyboardInterrupt:
            # Stop here, and let no second Ctrl-C (the parent forwards one) cut the report short.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self.interrupted = True
        finally:
            if progress is not None:
                progress[task.worker] = done + len(codes)
            if recorder.codes or recorder.second_ops:
                recorder.end_second(second)  # the last, partial second
        return recorder

    def _check_canary(self, recorder: Recorder, op: int, size: int) -> None:
        """Write a private key, read it back at once: a silently dropped write is an error."""
        self.canaries += 1
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


def classify_error(exc: BaseException) -> str:
    """Map a client exception onto the error kinds of docs/contracts.md."""
    name = type(exc).__name__
    text = f"{name} {exc}".lower()
    if isinstance(exc, TimeoutError) or "timeout" in text or "timed out" in text:
        return "timeout"
    if isinstance(exc, ConnectionError | BrokenPipeError | EOFError) or "connection" in text or "connect" in text:
        return "connection"
    if isinstance(exc, OSError):
        return "connection"
    if name == "WriteRejected" or "response" in text or "protocol" in text:
        return "server"
    return name


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker_main(task: WorkerTask, queue, barrier, progress) -> None:
    """Process entry point: report each phase's result, or one fatal message."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = None
    try:
        try:
            worker = Worker(task)
            worker.backend.open()
        except UserError as exc:
            queue.put(("fatal", task.worker, str(exc), type(exc).__name__))
            return
        wl = worker.workload
        if wl.prefill:
            worker.prefill()
        for index, phase in enumerate(wl.effective_phases()):
            if phase.warmup_ops or (phase.warmup and phase.warmup_ops is None):
                warm_limit = split_ops(phase.warmup_ops, task.worker, task.workers)
                warm_deadline = None if warm_limit else time.perf_counter_ns() + int(phase.warmup * 1e9)
                worker.run_phase(phase, warm_limit, warm_deadline, None, purpose="warmup")
                if worker.interrupted:
                    break
            barrier.wait(timeout=600)
            cpu0 = cpu_seconds()
            start = time.perf_counter_ns()
            limit = split_ops(phase.ops, task.worker, task.workers)
            deadline = start + int(phase.duration * 1e9) if phase.duration else None
            recorder = worker.run_phase(phase, limit, deadline, progress)
            end = time.perf_counter_ns()
            queue.put(("phase", task.worker, index, {
                "start_ns": start, "end_ns": end, "cpu_s": cpu_seconds() - cpu0,
                "ops": recorder.result(), "interrupted": worker.interrupted,
                "error_samples": recorder.error_samples, "timeseries": recorder.series(),
            }))
            if worker.interrupted:
                break
    except KeyboardInterrupt:
        pass
    except threading.BrokenBarrierError:
        pass
    except Exception as exc:  # noqa: BLE001 — reported to the parent, which decides
        queue.put(("fatal", task.worker, f"{type(exc).__name__}: {exc}", "crash",
                   traceback.format_exc()))
    finally:
        # Ending anyway: a second Ctrl-C (the terminal's and the parent's forwarded one) must
        # not cut the clean-up short with a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if worker is not None:
            with contextlib.suppress(Exception):
                worker.backend.close()
        queue.put(("done", task.worker, os.getpid()))
