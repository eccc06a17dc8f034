"""The answer blocks a report opens and closes with, put together once for every output.

Above the tables: the preset's own figure (:mod:`.headline`) and, for a run driven from a
cluster, its agents' share (:mod:`.agents`). Below them: the verdict (:mod:`.verdict`) and,
when the experiment states its needs, which target meets them (:mod:`.advice_report`). The
terminal table, the Markdown and the HTML all take their blocks from here, so they show the
same answers in the same order; :mod:`.blocks` draws them.
"""

from __future__ import annotations

from ..results import ResultsDocument
from .advice_report import experiment_advice
from .agents import agent_blocks
from .blocks import Block
from .headline import headline_blocks as preset_headline_blocks
from .verdict import verdict_blocks as run_verdict_blocks


def headline_blocks(document: ResultsDocument) -> list[Block]:
    """The preset's own figure(s), when its experiment declares a headline view; and, for a run
    driven from a cluster, its agents' share, throughput and CPU."""
    return [*preset_headline_blocks(document), *agent_blocks(document)]


def verdict_blocks(document: ResultsDocument) -> list[Block]:
    """What the run means: the workload, the ranking per op, the warnings that change the reading;
    and, when the experiment states its needs, which target meets them."""
    return [*run_verdict_blocks(document), *experiment_advice(document)]
