"""How big a run's prefill is and how long it will take, known before it starts.

A prefill writes every key before the phases, untimed, and can dwarf them: 10⁹ keys for a
0.2 s phase, or a few MB through an emulated 1 kB/s link. So each run's prefill is estimated
from what the plan already says — keys, value and key sizes, workers, the network profile's
caps — before anything connects: one that must take longer than :data:`MAX_PREFILL_S`, or
that cannot fit in this host's memory when the store lives in this process, is refused in one
line; one likely to take over :data:`ANNOUNCED_FROM_S` is said before its run starts (its
progress line then counts the keys and the time left).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from ..limits import available_memory
from ..plan import RunSpec
from ..schemes import find_scheme
from ..spec import Workload
from ..units import fmt_bytes, fmt_span
from ..workload.keys import key_lengths

# Keys per second a prefill reached on loopback on this project's 2-core machine: the engine
# (one SET in flight per connection) about 100,000/s, the Python workers about 70,000/s
# (`cachemark run -t spawn:redis?client=engine --keys 1000000 --value-size 10 --ops 10`).
TYPICAL_KEYS_PER_S = 100_000
# No prefill here went faster than a tenth of this: the floor that refuses, so a fast server
# or client is never refused by our guess of its speed.
FASTEST_KEYS_PER_S = 1_000_000
ANNOUNCED_FROM_S = 60.0
MAX_PREFILL_S = 3600.0  # a prefill that must take longer than an hour is not a benchmark's set-up
NAMESPACE_CHARS = 12  # ``cm:1a2b3c4d:`` before each key's id
WIRE_BYTES_PER_SET = 40  # a SET's framing beyond its key and value (RESP, memcached text)
MEMORY_SHARE = 0.8  # of the host's available memory, an in-process store may fill


@dataclass(frozen=True)
class PrefillPlan:
    """A run's prefill as the plan says it: keys written (every worker's, when each has a private
    cache), bytes on the wire, the least time the network profile allows, and a likely time."""

    keys: int
    wire_bytes: float
    value_bytes: float
    floor_s: float  # at the fastest prefill seen, or the profile's bandwidth, whichever is slower
    likely_s: float  # at a typical prefill's speed, or the profile's bandwidth, whichever is slower
    link: str  # "" or what caps it: "the 1kB/s link"

    def took(self) -> str:
        """``at least 10 min through the 1 kB/s link``, or ``about 2 h 46 min at 100,000 keys/s``."""
        if self.link:
            return f"at least {fmt_span(self.floor_s)} through {self.link}"
        return f"about {fmt_span(self.likely_s)} at {TYPICAL_KEYS_PER_S:,} keys/s"

    def line(self) -> str:
        """``prefill of 1,000 keys (590.8 KiB): at least 10 min through the 1 kB/s link``."""
        return f"prefill of {self.keys:,} keys ({fmt_bytes(self.wire_bytes)}): {self.took()}"


def plan_prefill(spec: RunSpec) -> PrefillPlan | None:
    """The prefill of ``spec``'s run, or None when it writes nothing."""
    wl = spec.workload
    if not wl.prefill or wl.trace is not None or not wl.keys:
        return None
    keys = wl.keys * (wl.workers if _in_process(spec) else 1)
    value = wl.sizes.mean() if wl.sizes is not None else 0.0
    wire = keys * (value + _key_chars(wl) + WIRE_BYTES_PER_SET)
    link, bps = _cap(spec)
    floor = max(keys / FASTEST_KEYS_PER_S, wire * 8 / bps if bps else 0.0)
    likely = max(keys / TYPICAL_KEYS_PER_S, floor)
    return PrefillPlan(keys, wire, keys * value, floor, likely, link)


def check_prefills(specs: list[RunSpec]) -> None:
    """One line (exit 2), before any run starts, for a prefill that cannot finish: one that must take
    over an hour, or whose values would not fit in this host's memory where the store is this process."""
    for spec in specs:
        plan = plan_prefill(spec)
        if plan is None:
            continue
        fix = "ask for fewer --keys or smaller --value-size values, or --no-prefill"
        if plan.floor_s > MAX_PREFILL_S:
            raise SpecError(f"{spec.label}: a {plan.line()}, over the {fmt_span(MAX_PREFILL_S)} a prefill may take: "
                            f"{fix}")
        if _in_process(spec) and (free := available_memory()) is not None and plan.value_bytes > MEMORY_SHARE * free:
            raise SpecError(f"{spec.label}: the prefill's values ({fmt_bytes(plan.value_bytes)}) would be held in the "
                            f"workers' own memory (each holds every key), and this host has {fmt_bytes(free)} "
                            f"available: {fix}")


def announced(spec: RunSpec) -> str | None:
    """The prefill's estimate, where it is long enough to be worth saying before the run."""
    plan = plan_prefill(spec)
    return plan.line() if plan is not None and plan.likely_s >= ANNOUNCED_FROM_S else None


def _in_process(spec: RunSpec) -> bool:
    """The store is this process's memory (``memory://``): each worker holds every key."""
    row = find_scheme(spec.target.scheme)
    return row is not None and row.stores and row.family is None and row.embedded is None and not row.spawner \
        and not row.nested and not row.open_params


def _key_chars(wl: Workload) -> float:
    lengths = key_lengths(wl.key_size)
    return sum(lengths) / len(lengths) if lengths else NAMESPACE_CHARS + len(str(max(wl.keys - 1, 0)))


def _cap(spec: RunSpec) -> tuple[str, float]:
    """What the network profile caps the prefill's bytes at (bits/s, every worker's connection
    together), and how to name it; ("", 0) when nothing does."""
    profile = spec.network
    if profile is None:
        return "", 0.0
    caps = []
    if profile.bandwidth_bps:
        caps.append((profile.bandwidth_bps * spec.workload.workers, f"the {_rate(profile.bandwidth_bps)} per "
                                                                    "connection bandwidth"))
    if profile.link_bps:
        caps.append((profile.link_bps, f"the {_rate(profile.link_bps)} link"))
    if not caps:
        return "", 0.0
    bps, name = min(caps)
    return name, float(bps)


def _rate(bps: float) -> str:
    """``1 kB/s``, ``125 kB/s``, ``1.2 GB/s``: bytes per second, in the decimal units a profile is given in."""
    per_s = bps / 8
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if per_s >= size:
            return f"{per_s / size:g} {unit}/s" if per_s % size == 0 else f"{per_s / size:.1f} {unit}/s"
    return f"{per_s:.0f} B/s"
