"""The experiment a command line names: a file, a preset or the default comparison, with its flags over it.

Shared by ``cachemark run`` and ``cachemark size`` (a synthetic workload as ``run`` would build it).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SpecError

if TYPE_CHECKING:
    from ..spec import Experiment


def experiment_from(data: dict[str, Any], where: str, targets: list[str] | None, flags: dict[str, Any],
                    labels: list[str] | None = None, sweep: list[str] | None = None, repeat: int | None = None,
                    network: str | None = None) -> Experiment:
    """The experiment ``cachemark run`` runs: a file or preset's data with the command line's flags over it."""
    from ..spec import build_experiment, merge_overrides

    if data and "targets" not in data and not targets:  # a file or preset, not the default comparison
        raise SpecError(f"{where}: no targets: add e.g. targets = [\"spawn:redis\"] to it or give -t URL "
                        "(cachemark run with no file runs the default comparison)")
    flags = dict(flags)
    if flags.get("ops") is not None and flags.get("duration") is None:
        flags["duration"] = None  # --ops alone: the phase ends by count, not by the default duration
    data = merge_overrides(data, targets, flags)
    if labels:
        data["labels"] = labels
    if sweep:
        from ..sweep import parse_sweep

        data["sweep"] = parse_sweep(sweep)
    if repeat is not None:
        data["repeat"] = repeat
    if network is not None:
        data["network"] = network
    experiment = build_experiment(data, where)
    if flags.get("ops") is not None:
        phases = experiment.workload.phases
        fixed = [p.name for p in phases if p.ops is not None]
        if phases and len(fixed) == len(phases):  # their own counts win: --ops would change nothing
            raise SpecError(f"--ops {flags['ops']}: the phases {', '.join(fixed)} of {where} set their own op "
                            "counts; edit them in the file (or move the count to [workload] ops)")
    return experiment


def split_sources(sources: list[str]) -> tuple[str | None, list[str]]:
    """``cachemark run spawn:redis spawn:memcached`` means what ``-t`` means; at most one file or preset."""
    from ..target import names_a_target

    targets = [s for s in sources if names_a_target(s)]
    rest = [s for s in sources if s not in targets]
    if len(rest) > 1:
        raise SpecError(f"one experiment file or preset at a time, not {len(rest)}: {', '.join(map(repr, rest[:3]))}"
                        "; targets are URLs (spawn:redis, redis://host:6379) or -t URL")
    return (rest[0] if rest else None), targets


def resolve_source(source: str | None) -> tuple[dict[str, Any], str]:
    """An experiment file path or a preset name -> (data, where it came from)."""
    from ..presets import load_preset, preset_names
    from ..spec import load_toml

    if source is None:
        return {}, "defaults"
    if source.endswith(".toml") or os.path.sep in source or Path(source).exists():
        return load_toml(source), source
    if source in preset_names():
        return load_preset(source), f"preset {source}"
    close = difflib.get_close_matches(source, preset_names(), n=1)
    if close:
        raise SpecError(f"no preset {source!r} (did you mean {close[0]}?)")
    if "." in Path(source).name:  # a file name (``missing.trace``), not a misspelled preset
        raise SpecError(f"{source}: no such file")
    raise SpecError(f"{source!r} is neither an experiment file nor a preset; presets: {', '.join(preset_names())}")
