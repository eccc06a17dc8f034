"""An op's summary (:class:`OpSummary`) and the checked number types of a results file.

One summary type from the moment it is computed to the moment a report reads it back:
``measure.summary.summarize`` builds an ``OpSummary``, the producers hand it on in their
``OpRecord``, and ``results/schema.py``'s ``OpResult`` validates the same class when a file is
read. It is defined here, below ``results/``, because ``measure`` computes it and ``measure``
sits under ``results`` in the import layers (tests/test_imports.py): the schema imports it
from here rather than ``measure`` climbing up to the schema. The number types and the base
record come down with it, so the summary is checked exactly as every other figure of a file.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

FIGURE_MAX = 1e15  # no figure cachemark measures comes near; sums and ratios of these stay finite

Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
# A figure keeps the type the file gave it (4, not 4.0): the reports format it as they did the JSON.
# The int member is tried first (strict: never for a float or a bool); _first_error reads the float one.
Figure = (Annotated[int, Field(ge=-FIGURE_MAX, le=FIGURE_MAX)]
          | Annotated[float, Field(ge=-FIGURE_MAX, le=FIGURE_MAX, allow_inf_nan=False)])
# A rate or a latency: never below 0 (a file saying p99 -5 µs is malformed, refused where it is read).
Positive = (Annotated[int, Field(ge=0, le=FIGURE_MAX)]
            | Annotated[float, Field(ge=0, le=FIGURE_MAX, allow_inf_nan=False)])
Seconds = Annotated[int, Field(ge=0, le=FIGURE_MAX)] | Annotated[float, Field(ge=0, le=FIGURE_MAX, allow_inf_nan=False)]


class Record(BaseModel):
    """A part of a results file. Strict: the reports format and add these values as they are;
    extras allowed: fields a newer cachemark adds pass through."""

    model_config = ConfigDict(strict=True, extra="allow")

    @property
    def is_empty(self) -> bool:
        """The file gave it as ``{}`` (or only defaults): reports read such a record as none."""
        return not (self.model_fields_set or self.model_extra)


class OpSummary(Record):
    """Figures over one op's successful outcomes (errors counted apart), in µs and per s; null when
    not measured (a file may lack one). ``summarize`` sets every field."""

    ops_per_s: Positive | None = None
    hit_ratio: Positive | None = None  # None: the op read nothing (a set)
    error_count: Count | None = None
    p50_us: Positive | None = None
    p90_us: Positive | None = None
    p99_us: Positive | None = None
    p999_us: Positive | None = None
    max_us: Positive | None = None
    mean_us: Positive | None = None
    # count ÷ Σ latency (Mollenhour's cache-benchmark "ops/s"): what one client doing nothing else gets
    ops_per_latency_s: Positive | None = None

    @classmethod
    def computed(cls, **figures: Any) -> OpSummary:
        """A summary cachemark computed (or shipped) itself: taken as it is, checked when its file is written."""
        return cls.model_construct(**figures)

    @property
    def given(self) -> bool:
        """It holds anything (an empty ``{}`` counts as none, as it always has)."""
        return bool(self.__pydantic_fields_set__ or self.__pydantic_extra__)

    def as_json(self) -> dict[str, Any]:
        """As the results file keeps it (an op's ``summary``): the fields it was given, in declaration order."""
        return self.model_dump(exclude_unset=True)
