"""What a warning about a results document is: a :class:`Finding` of a :class:`Kind`.

The verdict (report/verdict.py) finds them; ``advise`` and ``cost`` (analysis/) show beside a
pass or FAIL the ones that change how its figures read (:data:`QUALIFY_FIGURES`), without
matching on their text. Both sides meet here, below either, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


class Kind:
    """The kinds of warning (:attr:`Finding.kind`), in the order the verdict gives them."""

    DROPPED, FAILED, ERRORS, OUTAGE, HICCUP, BUDGET = "dropped", "failed", "errors", "outage", "hiccup", "budget"
    EVICTIONS, HIT_RATIO, EMULATOR, PER_PROCESS = "evictions", "hit-ratio", "emulator", "per-process"
    LOCAL_STORE, GENERATOR, HOST, OPEN_LOOP = "local-store", "generator", "host", "open-loop"
    LOAD_FALLS, FEW_SAMPLES, CLIENT, TAIL = "load-falls", "few-samples", "client", "tail"


# The kinds that change how a measured figure reads — a saturated generator or host, a stall, an emulator,
# too few samples — by the short name `advise` and `cost` show beside a pass or FAIL resting on such figures.
QUALIFY_FIGURES = {Kind.GENERATOR: "generator saturated", Kind.HOST: "host saturated", Kind.HICCUP: "a hiccup",
                   Kind.TAIL: "an extreme tail",
                   Kind.EMULATOR: "an emulator", Kind.FEW_SAMPLES: "too few samples"}


@dataclass(frozen=True)
class Finding:
    """One warning line: its kind, the run labels it is about, and the ops it is about (none: the whole run)."""

    kind: str
    text: str
    labels: tuple[str, ...]
    ops: tuple[str, ...] = ()
