"""Experiment specs: what validates, and the one-line errors for what does not."""

import json

import pytest

from cachemark.errors import SpecError
from cachemark.spec import Workload, build_experiment, load_toml, parse_duration, parse_mix
from cachemark.target import parse_target, redact


def test_mix_forms():
    assert parse_mix("get=90, set=9,delete=1") == {"get": 90, "set": 9, "delete": 1}
    assert parse_mix({"exists+get": 1}) == {"exists+get": 1.0}


@pytest.mark.parametrize(("bad", "message"), [
    ("get=0,set=0", "sum to 0"), ("fetchall=1", "unknown"), ("get", "op=weight"), ("get=x", "not a number"),
])
def test_bad_mixes(bad, message):
    with pytest.raises(SpecError, match=message):
        parse_mix(bad)


def test_durations():
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120
    assert parse_duration(3) == 3.0
    with pytest.raises(SpecError, match="duration"):
        parse_duration("soon")


@pytest.mark.parametrize(("data", "field"), [
    ({"workload": {"keys": 0}}, "workload.keys"),
    ({"workload": {"workers": 0}}, "workload.workers"),
    ({"workload": {"bogus": 1}}, "unknown field"),
    ({"targets": []}, "targets"),
    ({"workload": {"duration": None, "ops": None}}, "needs ops or a duration"),
])
def test_invalid_experiments_name_the_field(data, field):
    with pytest.raises(SpecError, match=field) as info:
        build_experiment(data, "x.toml")
    assert "\n" not in str(info.value)


def test_toml_file(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text('name = "t"\ntargets = ["memory://"]\n[workload]\nkeys = 5\nmix = "get=1"\n'
                    '[[workload.phases]]\nname = "fill"\nmix = {set = 1}\nops = 5\nkey_dist = "sequential"\n')
    experiment = build_experiment(load_toml(path))
    assert experiment.workload.phases[0].key_dist == "sequential"
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(SpecError, match="malformed TOML"):
        load_toml(bad)


def test_target_urls_and_redaction():
    target = parse_target("redis://user:pa%40ss@127.0.0.1:6380/2?client=redis-py")
    assert (target.scheme, target.host, target.port(6379), target.password) == ("redis", "127.0.0.1", 6380, "pa@ss")
    assert "pa" not in target.redacted and "pa@ss" not in repr(target)
    multi = parse_target("memcached://h1:1,h2:2")
    assert multi.hosts == (("h1", 1), ("h2", 2))
    assert redact("s3://b?aws_secret_access_key=zz&endpoint_url=x") == "s3://b?aws_secret_access_key=***&endpoint_url=x"
    assert redact("memory://") == "memory://"
    nested = redact("twolevel://?fast=spawn:memcached&slow=redis://:hunter2@h:1/0")
    assert "hunter2" not in nested and nested.startswith("twolevel://?fast=spawn:memcached&slow=redis://")
    with pytest.raises(SpecError):
        parse_target("redis")


def test_every_preset_validates_and_names_its_reference():
    from cachemark.presets import describe_presets, load_preset, preset_names

    names = preset_names()
    assert {"default", "diskcache-django", "django-s3-vs-memcached", "magento-clean-by-tag",
            "rails-local-vs-remote", "redis-bandwidth-sweep"} <= set(names)
    for name in names:
        experiment = build_experiment(load_preset(name), name)
        assert experiment.name == name and experiment.targets
    assert all(description for _, description in describe_presets())


SEQUENCE = [{"op": "set"}, {"op": "exists+get", "times": "ops"}, {"op": "delete"}]


def test_a_sequence_runs_its_steps_in_order_each_worker_the_whole_of_it():
    from cachemark.errors import UnsupportedOp
    from cachemark.run.engine_runner import engine_mix
    from cachemark.spec import Workload
    from cachemark.workload.ops import OpStream, split_ops

    workload = Workload(keys=1, workers=2, prefill=False, warmup=0, ops=100,
                        phases=[{"name": "block", "sequence": SEQUENCE}])
    (phase,) = workload.effective_phases()
    assert phase.steps() == [("set", 1), ("exists+get", 100), ("delete", 1)]
    assert phase.ops == 2 * 102 and phase.duration is None  # each of the 2 workers: the whole sequence
    for worker in (0, 1):
        stream = OpStream(workload, phase, worker, 2, split_ops(phase.ops, worker, 2))
        names = [stream.entries[i].name for batch, _, _ in stream.batches() for i in batch]
        assert names == ["set"] + ["exists+get"] * 100 + ["delete"]
    scaled = Workload.model_validate(workload.model_dump() | {"ops": 1000})  # --ops scales the "ops" step
    assert scaled.effective_phases()[0].steps()[1] == ("exists+get", 1000)
    with pytest.raises(UnsupportedOp, match="does not run a sequence"):
        engine_mix(phase, workload)


@pytest.mark.parametrize(("sequence", "extra", "message"), [
    ([{"op": "sett"}], {}, "mix op 'sett' is unknown"),
    ([{"op": "set", "times": 0}], {}, "at least 1"),
    ([], {}, "an empty sequence"),
    (SEQUENCE, {"duration": 2}, "no duration or rate"),
])
def test_a_bad_sequence_is_one_line(sequence, extra, message):
    with pytest.raises(SpecError, match=message) as info:
        build_experiment({"targets": ["memory://"], "workload": {
            "phases": [{"name": "block", "sequence": sequence} | extra]}}, "x")
    assert "\n" not in str(info.value)


def test_a_phase_inherits_by_one_rule_whether_run_or_read_back():
    """``Workload.effective_phases`` (a run) and a saved file's phase read back by the verdict (plain
    fields, report/planned.py) go through the one rule: a duration of its own drops the workload's op
    budget, an op budget alone drops the workload's duration, anything unset is the workload's."""
    from cachemark.spec import INHERITED, phase_over_workload

    workload = Workload(mix="get=9,set=1", ops=500, duration="3s", warmup="0.5s", phases=[
        {"name": "timed", "duration": "2s"}, {"name": "counted", "ops": 100},
        {"name": "both", "ops": 50, "duration": "1s"}, {"name": "plain", "mix": "get=1"}])
    run = {p.name: p for p in workload.effective_phases()}
    assert (run["timed"].duration, run["timed"].ops) == (2.0, None)
    assert (run["counted"].duration, run["counted"].ops) == (None, 100)
    assert (run["both"].duration, run["both"].ops) == (1.0, 50)
    assert (run["plain"].duration, run["plain"].ops, run["plain"].mix) == (3.0, 500, {"get": 1.0})
    saved = json.loads(workload.model_dump_json())  # as a results file keeps it
    for phase in saved["phases"]:
        read = phase_over_workload(phase, saved)
        assert {k: read[k] for k in INHERITED} == {k: v for k, v in run[phase["name"]].model_dump(mode="json").items()
                                                  if k in INHERITED}, phase["name"]
