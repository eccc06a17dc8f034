"""The op stream of one worker in one phase: batches of (op index, key id, value size).

Mix entries are op names or short sequences (``exists+get`` is timed as one unit, as
reference 004 does). Batches are drawn with numpy and handed over as Python lists,
because list iteration is what the timed loop does fastest.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .keys import KeyChooser, KeyDist

if TYPE_CHECKING:
    from ..spec import Phase, Workload

BATCH = 4096


@dataclass(frozen=True)
class MixEntry:
    name: str  # "get", or "exists+get" for a sequence
    steps: tuple[str, ...]
    weight: float

    @property
    def writes(self) -> bool:
        return "set" in self.steps or "set_many" in self.steps


def mix_entries(mix: dict[str, float]) -> list[MixEntry]:
    return [MixEntry(name, tuple(name.split("+")), weight) for name, weight in mix.items()]


def stream_seed(seed: int, phase_name: str, worker: int, purpose: str = "timed") -> np.random.Generator:
    """Independent, reproducible generator per (run seed, phase, worker, purpose)."""
    salt = zlib.crc32(f"{phase_name}/{purpose}".encode())
    return np.random.default_rng([seed & 0xFFFFFFFF, salt, worker])


class OpStream:
    """Yields batches for one worker; ``limit`` ops in all, or forever when None."""

    def __init__(self, workload: Workload, phase: Phase, worker: int, workers: int,
                 limit: int | None, purpose: str = "timed") -> None:
        self.entries = mix_entries(phase.mix or workload.mix)
        # a sequence's timed ops in its order, every worker the whole of it (spec.Phase); a warm-up draws from the mix
        names = [e.name for e in self.entries]
        self._steps = ([(names.index(op), times) for op, times in phase.steps()]
                       if phase.sequence and purpose == "timed" else None)
        self._handed = 0  # a sequence's ops handed out so far
        weights = np.array([e.weight for e in self.entries], dtype=np.float64)
        self._cdf = np.cumsum(weights) / weights.sum()
        self.rng = stream_seed(workload.seed, phase.name, worker, purpose)
        self.keys = KeyChooser(KeyDist.parse(phase.key_dist or workload.key_dist), workload.keys,
                               self.rng, worker, workers)
        self.sizes = workload.sizes
        self.limit = limit

    def batches(self) -> Iterator[tuple[list[int], list[int], list[int]]]:
        remaining = self.limit
        while remaining is None or remaining > 0:
            n = BATCH if remaining is None else min(BATCH, remaining)
            if self._steps is not None:
                ops = self._sequence(n)
            elif len(self.entries) == 1:
                ops = [0] * n
            else:
                ops = np.searchsorted(self._cdf, self.rng.random(n), side="right").clip(0, len(self.entries) - 1)
                ops = ops.tolist()
            keys = self.keys.draw(n).tolist()
            sizes = self.sizes.draw(self.rng, n).tolist()
            if remaining is not None:
                remaining -= n
            yield ops, keys, sizes

    def _sequence(self, n: int) -> list[int]:
        """The next ``n`` ops of the sequence, from where the last batch ended (from its start again after its end)."""
        assert self._steps is not None
        total = sum(times for _, times in self._steps)
        ops: list[int] = []
        while len(ops) < n:
            at = self._handed % total
            for entry, times in self._steps:
                if at < times:
                    take = min(times - at, n - len(ops))
                    ops += [entry] * take
                    self._handed += take
                    break
                at -= times
        return ops


def split_ops(total: int | None, worker: int, workers: int) -> int | None:
    """This worker's share of ``total`` ops (the first workers take the remainder)."""
    if total is None:
        return None
    return total // workers + (1 if worker < total % workers else 0)


def tags_for_key(key_id: int, pool: int, low: int, high: int) -> list[str]:
    """The tags of a key: a deterministic function of its id, so every worker agrees."""
    h = (key_id * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    count = low + h % (high - low + 1)
    return [f"t{(h + j * 0x5BD1E995) % pool}" for j in range(count)]
