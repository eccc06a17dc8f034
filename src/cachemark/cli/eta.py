"""How long an experiment's runs will take: said before the first starts, and updated after each.

A run bounded by time is planned to the second (warm-up + duration per phase); what it adds
(a server to spawn, a prefill, connecting) is learned from the runs already done. A run bounded
by an op count takes as long as its backend needs: it is estimated from the finished runs of
the same network profile (an emulated cross-region round trip is what makes such a run long),
else from any finished run of that kind. Below :data:`SHOWN_FROM_S` nothing is said: a short
experiment needs no clock.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..plan import RunSpec
from ..units import fmt_span

SHOWN_FROM_S = 60.0  # an experiment expected to take longer says how long, and how long is left
FIRST_OVERHEAD_S = 1.0  # a run's set-up before any has been timed: spawn, prefill, connect


def planned_seconds(spec: RunSpec) -> float | None:
    """A run's timed phases in seconds (warm-up + duration each), or None where a phase ends on
    an op count (or replays a trace) and so lasts as long as the backend needs."""
    if spec.workload.trace is not None:
        return None
    total = 0.0
    for phase in spec.workload.effective_phases():
        if phase.duration is None:
            return None
        warmup = 0.0 if phase.warmup_ops is not None else phase.warmup or 0.0  # an op count: in the ops' time
        total += warmup + phase.duration
    return total


def _profile(spec: RunSpec) -> str:
    return spec.network.name if spec.network is not None else ""


@dataclass
class Clock:
    """The experiment's runs, which are done and what each took: the estimate of what is left."""

    specs: list[RunSpec]
    done: list[float] = field(default_factory=list)  # wall seconds of each finished run, in order

    def _overhead(self) -> float:
        """What a time-bounded run took beyond its plan, over the finished ones."""
        extra = [took - planned for spec, took in zip(self.specs, self.done, strict=False)
                 if (planned := planned_seconds(spec)) is not None]
        return max(statistics.median(extra), 0.0) if extra else FIRST_OVERHEAD_S

    def _guess(self, spec: RunSpec) -> float | None:
        """A run's expected wall time; None for an op-bounded run before any like it finished."""
        planned = planned_seconds(spec)
        if planned is not None:
            return planned + self._overhead()
        finished = [(s, took) for s, took in zip(self.specs, self.done, strict=False)
                    if planned_seconds(s) is None]
        alike = [took for s, took in finished if _profile(s) == _profile(spec)] or [took for _, took in finished]
        return statistics.median(alike) if alike else None

    def left(self) -> float | None:
        """Seconds left for the runs not yet done, or None while one of them cannot be guessed."""
        total = 0.0
        for spec in self.specs[len(self.done):]:
            guess = self._guess(spec)
            if guess is None:
                return None
            total += guess
        return total

    def finished(self, seconds: float) -> str | None:
        """Records a finished run; the line to print (runs done and time left), or None when the
        experiment looks short (under a minute, and under half of one gone) or is over."""
        self.done.append(seconds)
        left = self.left()
        spent = sum(self.done)
        if len(self.done) >= len(self.specs) or left is None or (spent + left < SHOWN_FROM_S
                                                                   and spent < SHOWN_FROM_S / 2):
            return None  # short, or over; once half a minute is gone the clock is worth its line anyway
        return f"{len(self.done)} of {len(self.specs)} runs done · about {fmt_span(left)} left"

    def opening(self) -> str | None:
        """Before the first run: how long the experiment will take, where the plan says (runs that
        end on an op count are timed by the first of them: the line after it says)."""
        total = self.left()
        if total is None or total < SHOWN_FROM_S:
            return None
        count = len(self.specs)
        return f"{count} run{'s' if count != 1 else ''}, about {fmt_span(total)}"
