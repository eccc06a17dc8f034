"""The numpy HDR histogram: exact agreement with the reference library, and merging."""

import random

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from cachemark.measure.histogram import COUNTS_LEN, HIGHEST, Histogram, merge


@pytest.fixture(scope="module")
def values() -> list[int]:
    rng = random.Random(7)
    return [int(rng.lognormvariate(11, 1.5)) + 1 for _ in range(50_000)] + [1, 2047, 2048, 4095, HIGHEST]


def test_same_counts_array_as_the_reference_library(values):
    ours = Histogram.of(values)
    ref = HdrHistogram(1, HIGHEST, 3)
    for v in values:
        ref.record_value(v)
    assert ref.counts_len == COUNTS_LEN
    assert np.array_equal(np.array(ref.counts[:COUNTS_LEN], dtype=np.int64), ours.counts)
    for p in (50, 90, 99, 100):  # where rounding conventions agree (we use ceil, as HdrHistogram Java)
        assert ours.percentile(p) == ref.get_value_at_percentile(p)
    assert ours.max == ref.get_max_value()
    assert ours.min == ref.get_min_value()


def test_reference_library_reads_our_encoding_and_we_read_its(values):
    ours = Histogram.of(values)
    encoded = ours.encode()
    assert encoded.startswith("HISTFAAA")  # the V2 compressed cookie
    decoded = HdrHistogram.decode(encoded)
    assert decoded.get_total_count() == len(values)
    assert decoded.get_value_at_percentile(99) == ours.percentile(99)
    ref = HdrHistogram(1, HIGHEST, 3)
    for v in values:
        ref.record_value(v)
    back = Histogram.decode(ref.encode().decode())
    assert np.array_equal(back.counts, ours.counts)


def test_two_halves_merge_to_the_whole(values):
    half = len(values) // 2
    merged = merge([Histogram.of(values[:half]).encode(), Histogram.of(values[half:]).encode()])
    assert np.array_equal(merged.counts, Histogram.of(values).counts)


def test_percentiles_within_three_significant_digits(values):
    hist = Histogram.of(values)
    for p in (50, 90, 99):
        exact = float(np.percentile(values, p, method="higher"))
        assert abs(hist.percentile(p) - exact) <= exact * 1e-3 + 1


def test_out_of_range_values_are_clamped_not_lost():
    hist = Histogram.of([-5, 0, HIGHEST * 10])
    assert hist.total == 3
    assert hist.max >= HIGHEST


def test_decode_refuses_foreign_parameters():
    ref = HdrHistogram(1, 1000, 2)
    ref.record_value(5)
    with pytest.raises(ValueError, match="parameters"):
        Histogram.decode(ref.encode().decode())


def test_decode_matches_the_reference_library_for_huge_counts():
    """Counts of 2**56 and more take HdrHistogram's 9-byte form: the vectorised decoder hands them to the loop."""
    ref = HdrHistogram(1, HIGHEST, 3)
    for value, count in ((1, 3), (5000, 2**57 + 1), (10**9, 2**40), (HIGHEST, 1)):
        ref.record_value(value, count)
    ours = Histogram.decode(ref.encode().decode())
    assert ours.total == ref.get_total_count()
    assert ours.max == ref.get_max_value() and ours.percentile(50) == ref.get_value_at_percentile(50)


@pytest.mark.parametrize("encoded", [
    "", "!!!!", "HISTFAAAAB", "AAAA" * 10, "é", 12,
    Histogram.of([1, 2, 3]).encode()[:-12],  # truncated deflate stream
    HdrHistogram(1, 3_600_000_000_000, 3).encode().decode(),  # another tool's parameters
    HdrHistogram(1, HIGHEST, 2).encode().decode(),
])
def test_decode_refuses_what_is_not_one_of_ours_with_a_one_line_value_error(encoded):
    with pytest.raises(ValueError) as caught:
        Histogram.decode(encoded)
    assert len(str(caught.value).splitlines()) == 1


def test_decode_refuses_counts_past_the_last_slot_and_deflate_bombs():
    import base64
    import struct
    import zlib

    def wrap(payload: bytes) -> str:
        header = struct.pack(">iiiiqqd", 0x1C849313, len(payload), 0, 3, 1, HIGHEST, 1.0)
        deflated = zlib.compress(header + payload)
        return base64.b64encode(struct.pack(">ii", 0x1C849314, len(deflated)) + deflated).decode()

    with pytest.raises(ValueError, match="past the histogram's range"):
        Histogram.decode(wrap(b"\x02" * (COUNTS_LEN + 1)))
    with pytest.raises(ValueError, match="past the histogram's range"):
        Histogram.decode(wrap(b"\xff" * 8 + b"\x7f"))  # a skip of ~2**62 empty slots
    bomb = zlib.compress(b"\x00" * 50_000_000)
    with pytest.raises(ValueError, match="inflates beyond"):
        Histogram.decode(base64.b64encode(struct.pack(">ii", 0x1C849314, len(bomb)) + bomb).decode())
    assert Histogram.decode(wrap(b"")).total == 0
