"""Key distributions pass statistical tests; values verify; op streams are reproducible."""

import numpy as np
import pytest
from scipy import stats

from cachemark.errors import SpecError
from cachemark.spec import Phase, Workload
from cachemark.workload.keys import KeyChooser, KeyDist, length_index
from cachemark.workload.ops import OpStream, split_ops
from cachemark.workload.values import MAX_VALUE_SIZE, ValueSizes, make_value, value_header, value_matches


def test_uniform_keys_pass_chi_square():
    chooser = KeyChooser(KeyDist.parse("uniform"), 100, np.random.default_rng(1))
    counts = np.bincount(chooser.draw(200_000), minlength=100)
    assert stats.chisquare(counts).pvalue > 0.001


@pytest.mark.parametrize("s", [0.7, 0.99, 1.2])
def test_zipf_keys_follow_the_zipf_law(s):
    n = 1000
    chooser = KeyChooser(KeyDist.parse(f"zipf:{s}"), n, np.random.default_rng(2))
    ids = chooser.draw(300_000)
    expected_p = 1.0 / np.arange(1, n + 1) ** s
    expected_p /= expected_p.sum()
    by_rank = np.bincount(ids, minlength=n)[chooser.rank_to_id(np.arange(n))]
    # chi-square over the 50 hottest ranks plus the tail pooled into one bin
    observed = np.append(by_rank[:50], by_rank[50:].sum())
    expected = np.append(expected_p[:50], expected_p[50:].sum()) * len(ids)
    assert stats.chisquare(observed, expected).pvalue > 0.001
    # and it is really skewed: the hottest key is drawn far more than a uniform one
    assert by_rank[0] > 20 * len(ids) / n


def test_zipf_hot_keys_are_scattered_over_the_keyspace():
    chooser = KeyChooser(KeyDist.parse("zipf"), 10_000, np.random.default_rng(3))
    hottest = chooser.rank_to_id(np.arange(10))
    assert len(set(hottest.tolist())) == 10
    assert np.ptp(hottest) > 1000


def test_hotspot_share():
    chooser = KeyChooser(KeyDist.parse("hotspot:0.1,0.9"), 1000, np.random.default_rng(4))
    ids = chooser.draw(100_000)
    assert abs((ids < 100).mean() - 0.9) < 0.01


def test_sequential_workers_cover_disjoint_keys():
    seen = []
    for worker in range(3):
        chooser = KeyChooser(KeyDist.parse("sequential"), 9, np.random.default_rng(0), worker, 3)
        seen.append(chooser.draw(3).tolist())
    assert sorted(sum(seen, [])) == list(range(9))


@pytest.mark.parametrize("bad", ["zipf:0", "hotspot:2,0.5", "gauss", "uniform:3"])
def test_bad_distributions_are_refused(bad):
    with pytest.raises(SpecError, match="key_dist"):
        KeyDist.parse(bad)


def test_values_verify_only_for_their_own_key_and_length():
    header = value_header("cm:x:1")
    value = make_value(header, 500)
    assert len(value) == 500 and value_matches(header, value)
    assert not value_matches(value_header("cm:x:2"), value)
    assert not value_matches(header, value[:-1] + b"#")
    assert value_matches(header, make_value(header, 5))


def test_values_of_any_size_up_to_the_largest_are_whole():
    """The filler values are cut from grows on demand: a value longer than any seen so far verifies
    when read first (another process wrote it), and is made whole."""
    header = value_header("cm:x:1")
    # docs/contracts.md, byte by byte: base-36 digit length_index(i % 65536, 36), i.e. SplitMix64, multiply-shift
    period = bytes(b"0123456789abcdefghijklmnopqrstuvwxyz"[length_index(i, 36)] for i in range(65536))
    filler = period * (MAX_VALUE_SIZE // len(period) + 1)
    for size in (70_000, 3 * 1024 * 1024, MAX_VALUE_SIZE):
        written_elsewhere = header + filler[12:size]
        assert value_matches(header, written_elsewhere)
        assert not value_matches(header, written_elsewhere[:-1] + b" ")
        assert make_value(header, size) == written_elsewhere


@pytest.mark.parametrize(("spec", "sizes", "kind"), [
    (100, (100,), "fixed"), ("4k", (4096,), "fixed"), ("100-1000", (100, 1000), "range"),
    ("100:9,10000:1", (100, 10000), "choice"), ([[10, 1], [20, 3]], (10, 20), "choice"),
])
def test_value_size_forms(spec, sizes, kind):
    parsed = ValueSizes.parse(spec)
    assert parsed.sizes == sizes and parsed.kind == kind
    drawn = parsed.draw(np.random.default_rng(0), 1000)
    assert all(parsed.allows(int(s)) for s in drawn)


@pytest.mark.parametrize("bad", ["-", "big", "1000-100", "100:0"])
def test_bad_value_sizes_are_refused(bad):
    with pytest.raises(SpecError, match="value_size"):
        ValueSizes.parse(bad)


def test_op_streams_replay_and_split():
    workload = Workload(keys=100, mix="get=50,set=50")
    phase = workload.effective_phases()[0]
    first = list(OpStream(workload, phase, 0, 2, 5000).batches())
    again = list(OpStream(workload, phase, 0, 2, 5000).batches())
    other = list(OpStream(workload, phase, 1, 2, 5000).batches())
    assert first == again and first != other
    assert sum(len(b[0]) for b in first) == 5000
    ops = [op for batch in first for op in batch[0]]
    assert 0.45 < ops.count(0) / len(ops) < 0.55
    assert [split_ops(10, w, 3) for w in range(3)] == [4, 3, 3]


def test_phase_inherits_from_workload():
    workload = Workload(keys=10, mix="get=1", duration=3, phases=[Phase(name="a", ops=5), Phase(name="b")])
    a, b = workload.effective_phases()
    assert (a.ops, a.duration, a.mix) == (5, None, {"get": 1.0})
    assert (b.ops, b.duration) == (None, 3.0)
