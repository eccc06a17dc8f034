"""The plan: every run labelled, two targets never sharing a label, one name everywhere."""

from __future__ import annotations

import pytest

from cachemark.errors import UserError
from cachemark.plan import describe, labels_for, plan_runs
from cachemark.results.names import run_name
from cachemark.spec import build_experiment


def test_default_labels_are_told_apart_by_where_they_point() -> None:
    urls = ["redis://10.0.0.5:6379/0", "redis://10.0.0.6:6379/0", "spawn:memcached", "memory://", "memory://"]
    assert labels_for(urls, None) == ["redis@10.0.0.5:6379", "redis@10.0.0.6:6379", "memcached", "memory#1",
                                      "memory#2"]
    assert labels_for(["redis://a", "spawn:redis?client=engine"], None) == ["redis", "redis(engine)"]


def test_the_users_labels_are_kept_and_counted() -> None:
    assert labels_for(["memory://", "null://"], ["a", "b"]) == ["a", "b"]
    with pytest.raises(UserError, match="2 labels for 1 targets"):
        labels_for(["memory://"], ["a", "b"])


def test_the_progress_line_and_the_results_name_a_run_alike() -> None:
    experiment = build_experiment({"targets": ["memory://"], "sweep": {"value_size": [100, 200]}, "repeat": 2}, "t")
    specs = plan_runs(experiment)
    assert len(specs) == 4
    names = [describe(spec, experiment.repeat) for spec in specs]
    assert names[0] == "memory [value_size=100] #1" and names[3] == "memory [value_size=200] #2"
    saved = {"label": specs[3].label, "sweep": specs[3].sweep, "repeat": specs[3].repeat, "network": None}
    assert run_name(saved) == names[3]
