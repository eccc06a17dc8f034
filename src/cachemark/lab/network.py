"""Network what-if profiles: the ``--network`` vocabulary.

The named profiles (``same-host``, ``lan``, ``same-zone``, ``cross-zone``, ``cross-region``;
their numbers and sources are in ``docs/network.md``) and the custom form
``LATENCY[,jitter=…,dist=…,bandwidth=…,link=…,connect=…,poll=…]``. The proxy that plays a profile
is ``lab/proxy.py``.

A profile's latency is the **round trip** it adds (what ``ping`` would show), split
evenly between the two directions; ``same-host`` adds nothing and uses no proxy at all.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import SpecError
from ..limits import MAX_BANDWIDTH_BPS, PROXY_MAX_DELAY_US

JITTER_DISTS = ("uniform", "normal", "pareto")
FAULT_KINDS = ("reset", "blackhole", "stall")


@dataclass(frozen=True)
class NetworkProfile:
    """Where the cache lives, as the proxy should emulate it.

    ``rtt_us`` is the added round-trip time; ``jitter_us`` the spread added to each
    segment in each direction (standard deviation for ``normal``, half-width for
    ``uniform``, mean of the one-sided tail for ``pareto``); ``bandwidth_bps`` a cap in
    bits per second per connection and direction (0 = none); ``link_bps`` one every
    connection shares per direction (a host's NIC: 0 = none); ``connect_delay_us`` the extra time before a
    new connection carries data (``None``: one round trip, like a TCP handshake).
    ``busy_poll_us`` (opt-in, 0 = off) makes the proxy keep polling for that long after
    each I/O instead of sleeping: more accurate small delays on an idle machine, at the
    cost of one proxy core busy while traffic flows (see docs/network.md).
    """

    name: str
    rtt_us: float = 0.0
    jitter_us: float = 0.0
    jitter_dist: str = "normal"
    bandwidth_bps: int = 0
    link_bps: int = 0
    connect_delay_us: float | None = None
    busy_poll_us: float = 0.0
    description: str = ""
    source: str = ""
    proxied: bool = True

    @property
    def delay_up_us(self) -> float:
        return self.rtt_us / 2

    @property
    def delay_down_us(self) -> float:
        return self.rtt_us / 2

    def to_config(self, fault: dict[str, Any] | None = None) -> dict[str, Any]:
        """The proxy's JSON config (schema in docs/network.md) for this profile."""
        config: dict[str, Any] = {
            "delay_up_us": self.delay_up_us,
            "delay_down_us": self.delay_down_us,
            "bandwidth_bps": self.bandwidth_bps,
            "link_bps": self.link_bps,
            "connect_delay_us": self.rtt_us if self.connect_delay_us is None else self.connect_delay_us,
        }
        if self.busy_poll_us > 0:
            config["busy_poll_us"] = self.busy_poll_us
        if self.jitter_us > 0:
            config["jitter"] = {"dist": self.jitter_dist, "us": self.jitter_us}
        if fault:
            config["fault"] = fault
        return config

    def to_json(self, fault: dict[str, Any] | None = None) -> str:
        return json.dumps(self.to_config(fault))

    def describe(self) -> dict[str, Any]:
        """What a RunResult records about the network it ran behind."""
        return asdict(self)


# The numbers and their sources are explained in docs/network.md; keep the two in step.
PROFILES: dict[str, NetworkProfile] = {
    p.name: p
    for p in (
        NetworkProfile(
            "same-host",
            description="cache on the application's own host (loopback, no proxy)",
            source="baseline: nothing is added",
            proxied=False,
        ),
        NetworkProfile(
            "lan",
            rtt_us=150,
            jitter_us=15,
            bandwidth_bps=1_000_000_000,
            description="another machine on the same switched 1 GbE LAN",
            source="typical ping between Linux hosts on one switch (0.1-0.2 ms), see docs/network.md",
        ),
        NetworkProfile(
            "same-zone",
            rtt_us=300,
            jitter_us=30,
            bandwidth_bps=5_000_000_000,
            description="another VM in the same cloud availability zone",
            source="EC2 same-AZ ping 0.39-0.45 ms (2014); AWS 'usually <1 ms'; AWS single-flow cap 5 Gbit/s",
        ),
        NetworkProfile(
            "cross-zone",
            rtt_us=1_000,
            jitter_us=100,
            bandwidth_bps=5_000_000_000,
            description="a VM in another availability zone of the same region",
            source="GCP <1 ms p95 within a region; Azure <2 ms between zones; EC2 inter-AZ 0.25-3.4 ms",
        ),
        NetworkProfile(
            "cross-region",
            rtt_us=70_000,
            jitter_us=1_000,
            bandwidth_bps=5_000_000_000,
            description="a cache in another region on the same continent (US east <-> US west)",
            source="Azure published inter-region RTT East US <-> West US 2 ~ 70 ms",
        ),
    )
}

_TIME_UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}
_RATE_UNITS = {
    "bit": 1,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "bps": 1,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
    "b/s": 8,
    "kb/s": 8e3,
    "mb/s": 8e6,
    "gb/s": 8e9,
}
_OPTIONS = ("jitter", "dist", "bandwidth", "link", "connect", "poll")
MAX_POLL_US = 100_000.0  # the proxy refuses longer busy-poll windows
_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-zµ/]*)\s*$", re.IGNORECASE)


def _allowed() -> str:
    return (
        f"named profiles {', '.join(PROFILES)}, or LATENCY[,jitter=…,dist={'|'.join(JITTER_DISTS)},"
        "bandwidth=…,link=…,connect=…,poll=…] such as 2ms,jitter=0.2ms,bandwidth=100mbit or same-zone,poll=200us"
    )


def parse_duration_us(text: str, what: str = "latency", max_us: float = PROXY_MAX_DELAY_US) -> float:
    """``"0.2ms"`` -> 200.0 (µs). Units: ns, us/µs, ms, s; a bare ``0`` is allowed."""
    m = _NUMBER_UNIT.match(text)
    if m is None or (m.group(2) == "" and float(m.group(1)) != 0):
        raise SpecError(f"bad {what} {text!r}: use a number with a unit (ns, us, ms, s), e.g. 0.5ms")
    unit = m.group(2)
    if unit and unit not in _TIME_UNITS:
        raise SpecError(f"bad {what} unit in {text!r}: use ns, us, ms or s")
    us = float(m.group(1)) * _TIME_UNITS.get(unit, 1.0)
    if not math.isfinite(us) or us > max_us:
        raise SpecError(f"bad {what} {text!r}: at most {max_us / 1e6:g}s (the network proxy's longest delay)")
    return us


def parse_bandwidth_bps(text: str) -> int:
    """``"100mbit"`` -> 100_000_000 bits/s. Bits: bit, kbit, mbit, gbit; bytes: B/s, kB/s, MB/s, GB/s."""
    m = _NUMBER_UNIT.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _RATE_UNITS:
        raise SpecError(
            f"bad bandwidth {text!r}: use kbit, mbit, gbit (bits/s) or kB/s, MB/s, GB/s (bytes/s), e.g. 100mbit"
        )
    raw = float(m.group(1)) * _RATE_UNITS[unit]
    if not math.isfinite(raw) or raw > MAX_BANDWIDTH_BPS:
        raise SpecError(f"bad bandwidth {text!r}: at most 10tbit (10,000 gbit)")
    bps = int(raw)
    if bps <= 0:
        raise SpecError(f"bad bandwidth {text!r}: must be more than 0")
    return bps


def _custom(latency: str) -> NetworkProfile:
    # the round trip is split evenly between the directions, each at most the proxy's 600 s
    rtt = parse_duration_us(latency, "round-trip latency", 2 * PROXY_MAX_DELAY_US)
    return NetworkProfile(name=latency, rtt_us=rtt, description=f"custom: {latency} added round trip")


def _apply(profile: NetworkProfile, key: str, value: str) -> NetworkProfile:
    if key == "jitter":
        return replace(profile, jitter_us=parse_duration_us(value, "jitter"))
    if key == "dist":
        if value not in JITTER_DISTS:
            raise SpecError(f"bad jitter distribution {value!r}: use one of {', '.join(JITTER_DISTS)}")
        return replace(profile, jitter_dist=value)
    if key == "bandwidth":
        return replace(profile, bandwidth_bps=parse_bandwidth_bps(value))
    if key == "link":
        return replace(profile, link_bps=parse_bandwidth_bps(value))
    if key == "connect":
        return replace(profile, connect_delay_us=parse_duration_us(value, "connect delay"))
    if key == "poll":
        poll = parse_duration_us(value, "busy-poll window")
        if poll > MAX_POLL_US:
            raise SpecError(f"bad busy-poll window {value!r}: at most 100ms (use 0 to switch it off)")
        return replace(profile, busy_poll_us=poll)
    raise SpecError(f"unknown network option {key!r}: use {', '.join(_OPTIONS)}")


def one_profile(spec: str | None, why: str) -> NetworkProfile | None:
    """``--network`` where a command measures behind one profile at a time (``capacity``, ``decide``):
    None without one, else the one profile, or one line saying ``why`` only one."""
    if spec is None:
        return None
    profiles = parse_network(spec)
    if len(profiles) != 1:
        raise SpecError(f"--network {spec!r}: give one profile ({why})")
    return profiles[0]


def parse_network(spec: str) -> list[NetworkProfile]:
    """Parse a ``--network`` value into profiles, in the order given.

    Comma-separated; a token with ``=`` modifies the profile before it, any other token
    starts a new profile: ``same-host,2ms,jitter=0.2ms,cross-region`` is three profiles.
    Options also work on named profiles (``cross-zone,bandwidth=1gbit``), including the
    opt-in busy-poll window (``same-zone,poll=200us``).
    """
    tokens = [t.strip() for t in spec.split(",")]
    if not spec.strip() or any(not t for t in tokens):
        raise SpecError(f"empty network profile in {spec!r}; use {_allowed()}")
    profiles: list[NetworkProfile] = []
    for token in tokens:
        if "=" in token:
            key, _, value = token.partition("=")
            key, value = key.strip().lower(), value.strip()
            if not profiles:
                raise SpecError(f"network option {token!r} must follow a profile; use {_allowed()}")
            base = profiles[-1]
            new = _apply(base, key, value)
            suffix = f",{key}={value}"
            profiles[-1] = replace(new, name=base.name + suffix, proxied=True)
            continue
        name = token.lower()
        if name in PROFILES:
            profiles.append(PROFILES[name])
        elif name and (name[0].isdigit() or name[0] == "."):
            try:
                profiles.append(_custom(token))
            except SpecError as exc:
                raise SpecError(f"{exc}; network profiles are {_allowed()}") from None
        else:
            raise SpecError(f"unknown network profile {token!r}; use {_allowed()}")
    names = [p.name for p in profiles]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"network profile {dupes[0]!r} is given twice")
    return profiles


__all__ = [
    "FAULT_KINDS",
    "JITTER_DISTS",
    "PROFILES",
    "NetworkProfile",
    "parse_bandwidth_bps",
    "parse_duration_us",
    "parse_network",
]
