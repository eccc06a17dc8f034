//! Tests of the LRU engine: exact curves against a textbook LRU, the near stack and the
//! samples against exact runs, and the helpers (`Distinct`, log buckets) on their own.

use super::*;

/// The textbook LRU: a list, most recent first.
fn naive_miss_ratio(trace: &[u64], capacity: usize) -> f64 {
    let mut stack: Vec<u64> = Vec::new();
    let mut misses = 0;
    for &id in trace {
        match stack.iter().position(|&x| x == id) {
            Some(i) if i < capacity => {
                stack.remove(i);
            }
            Some(i) => {
                stack.remove(i);
                misses += 1;
            }
            None => misses += 1,
        }
        stack.insert(0, id);
    }
    misses as f64 / trace.len() as f64
}

fn trace(n: usize, objects: u64, seed: u64) -> Vec<u64> {
    // a skewed trace from a cheap generator: squaring a uniform draw favours low ids
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = mix(state);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            (u * u * objects as f64) as u64
        })
        .collect()
}

#[test]
fn exact_curve_equals_a_plain_lru_at_every_size() {
    let t = trace(20_000, 700, 1);
    let mut sd = StackDistances::new(1.0);
    for &id in &t {
        sd.access(id, 100);
    }
    let sizes: Vec<f64> = [1, 2, 5, 10, 50, 100, 300, 699, 700, 5000]
        .iter()
        .map(|&c| c as f64)
        .collect();
    let got = sd.miss_ratios_by_objects(&sizes);
    for (c, g) in sizes.iter().zip(got) {
        assert!(
            (g - naive_miss_ratio(&t, *c as usize)).abs() < 1e-12,
            "size {c}"
        );
    }
}

#[test]
fn compaction_keeps_distances_exact() {
    // few objects, many requests: the tree is renumbered hundreds of times
    let t = trace(200_000, 50, 7);
    let mut sd = StackDistances::new(1.0);
    for &id in &t {
        sd.access(id, 1);
    }
    let got = sd.miss_ratios_by_objects(&[10.0, 25.0]);
    assert!((got[0] - naive_miss_ratio(&t, 10)).abs() < 1e-12);
    assert!((got[1] - naive_miss_ratio(&t, 25)).abs() < 1e-12);
}

#[test]
fn bytes_curve_with_equal_sizes_is_the_objects_curve_scaled() {
    let t = trace(30_000, 2_000, 3);
    let mut sd = StackDistances::new(1.0);
    for &id in &t {
        sd.access(id, 1);
    }
    // size 1 per object: byte distance == object distance, buckets exact below 128
    let objects = sd.miss_ratios_by_objects(&[10.0, 100.0]);
    let bytes = sd.miss_ratios_by_bytes(&[10.0, 100.0]);
    assert_eq!(objects, bytes);
}

#[test]
fn shards_is_close_to_exact() {
    let t = trace(2_000_000, 200_000, 11);
    let mut exact = StackDistances::new(1.0);
    let mut sampled = StackDistances::new(0.1);
    for &id in &t {
        exact.access(id, 1);
        sampled.access(id, 1);
    }
    let sizes: Vec<f64> = (1..=40).map(|i| i as f64 * 5_000.0).collect();
    let a = exact.miss_ratios_by_objects(&sizes);
    let b = sampled.miss_ratios_by_objects(&sizes);
    let mae: f64 = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).sum::<f64>() / sizes.len() as f64;
    // 20,000 sampled objects; at 1 % (2,000) the error is ~0.02 here, ~0.004 with 1 M objects
    // and 10 M requests (tests/test_size.py checks that scale against the exact curve)
    assert!(mae < 0.01, "mean absolute error {mae}");
    assert!((sampled.objects() / exact.objects() - 1.0).abs() < 0.1);
    assert!(!sampled.objects_exact() && exact.objects_exact());
}

fn feed(sd: &mut StackDistances, t: &[u64], size: impl Fn(u64) -> u32) {
    for &id in t {
        sd.access(id, size(id));
    }
}

#[test]
fn the_near_stack_is_exact_up_to_its_size_through_evictions_and_renumbering() {
    // 700 objects through a near stack of 64: it forgets and renumbers thousands of times
    let t = trace(30_000, 700, 2);
    let mut sd = StackDistances::with_near(0.3, 0, 64);
    feed(&mut sd, &t, |_| 1);
    let sizes: Vec<f64> = [1, 2, 3, 5, 10, 33, 63, 64]
        .iter()
        .map(|&c| c as f64)
        .collect();
    let got = sd.miss_ratios_by_objects(&sizes);
    for (c, g) in sizes.iter().zip(got) {
        assert!(
            (g - naive_miss_ratio(&t, *c as usize)).abs() < 1e-12,
            "size {c}"
        );
    }
    assert_eq!(sd.std_errors_by_objects(&sizes), vec![0.0; sizes.len()]);
    assert_eq!(sd.exact_up_to(), 64.0);
    // beyond it, the sample's estimate, with a standard error that covers its miss
    for c in [80.0, 150.0, 300.0, 600.0] {
        let (got, err) = (
            sd.miss_ratios_by_objects(&[c])[0],
            sd.std_errors_by_objects(&[c])[0],
        );
        let truth = naive_miss_ratio(&t, c as usize);
        assert!(
            err > 0.0 && (got - truth).abs() < 0.02_f64.max(4.0 * err),
            "size {c}: {got} vs {truth} ± {err}"
        );
    }
}

#[test]
fn a_stream_that_fits_the_near_stack_is_counted_exactly() {
    let t = trace(50_000, 300, 4); // 300 objects, a near stack of 1,000: never forgets
    let mut sd = StackDistances::with_near(0.01, 0, 1_000);
    let mut exact = StackDistances::new(1.0);
    feed(&mut sd, &t, |_| 1);
    feed(&mut exact, &t, |_| 1);
    assert!(sd.objects_exact());
    assert_eq!(sd.objects(), exact.objects());
    assert_eq!(sd.cold(), exact.cold());
    let sizes = [5.0, 50.0, 299.0, 300.0, 5_000.0];
    assert_eq!(
        sd.miss_ratios_by_objects(&sizes),
        exact.miss_ratios_by_objects(&sizes)
    );
    assert_eq!(sd.std_errors_by_objects(&sizes), vec![0.0; 5]);
}

#[test]
fn the_near_stack_counts_bytes_exactly_below_what_it_holds() {
    // sizes 1..=10: the near stack of 50 always holds at least 50 bytes once full, so
    // every cache under 50 bytes is answered from it alone
    let t = trace(40_000, 2_000, 6);
    let size = |id: u64| (mix(id) % 10 + 1) as u32;
    let mut sd = StackDistances::with_near(0.3, 0, 50);
    let mut exact = StackDistances::new(1.0);
    feed(&mut sd, &t, size);
    feed(&mut exact, &t, size);
    let sizes = [1.0, 5.0, 20.0, 49.0];
    assert_eq!(
        sd.miss_ratios_by_bytes(&sizes),
        exact.miss_ratios_by_bytes(&sizes)
    );
    // beyond, the sample's estimate (600 of the 2,000 objects)
    let far = [2_000.0, 5_000.0];
    let errors = sd.std_errors_by_bytes(&far);
    let got = sd.miss_ratios_by_bytes(&far);
    for ((a, b), e) in got.iter().zip(exact.miss_ratios_by_bytes(&far)).zip(errors) {
        assert!(
            e > 0.0 && (a - b).abs() < 0.02_f64.max(4.0 * e),
            "{a} vs {b} ± {e}"
        );
    }
}

#[test]
fn reading_ahead_changes_nothing() {
    let t = trace(300_000, 50_000, 12);
    let size = |id: u64| (mix(id) % 1000) as u32;
    let mut one = StackDistances::with_stacks(0.01, 3, 500, 500);
    let mut all = StackDistances::with_stacks(0.01, 3, 500, 500);
    feed(&mut one, &t, size);
    all.access_all(t.iter().map(|&id| (id, size(id))));
    let sizes = [10.0, 400.0, 600.0, 5_000.0, 40_000.0];
    assert_eq!(
        one.miss_ratios_by_objects(&sizes),
        all.miss_ratios_by_objects(&sizes)
    );
    assert_eq!(
        one.std_errors_by_objects(&sizes),
        all.std_errors_by_objects(&sizes)
    );
    let bytes = [1e3, 1e5, 1e7];
    assert_eq!(
        one.miss_ratios_by_bytes(&bytes),
        all.miss_ratios_by_bytes(&bytes)
    );
    assert_eq!((one.objects(), one.cold()), (all.objects(), all.cold()));
}

#[test]
fn denser_samples_answer_the_sizes_they_reach() {
    // at 1/1000 with a near stack of 200: samples at 1/16 and 1/256 in stacks of 200
    // answer up to ~2,900 and ~46,000 objects, the 1/1000 sample beyond
    let sd = StackDistances::with_stacks(0.001, 0, 200, 200);
    let rates: Vec<f64> = sd.levels.iter().map(|l| l.rate).collect();
    assert_eq!(rates.len(), 3);
    assert!((rates[0] - 1.0 / 16.0).abs() < 1e-9 && (rates[1] - 1.0 / 256.0).abs() < 1e-9);
    assert!((sd.level_for(2_000.0).rate - rates[0]).abs() < 1e-12);
    assert!((sd.level_for(10_000.0).rate - rates[1]).abs() < 1e-12);
    assert!((sd.level_for(1e9).rate - sd.rate()).abs() < 1e-12);
    // the 1/16 sample holds ~5,000 of 80,000 objects: within 0.02 where the 1/1000 one
    // (~80 objects) could not be
    let t = trace(600_000, 80_000, 8);
    let mut sd = StackDistances::with_stacks(0.001, 0, 200, 200);
    feed(&mut sd, &t, |_| 1);
    let mut exact = StackDistances::new(1.0);
    feed(&mut exact, &t, |_| 1);
    let sizes = [400.0, 1_000.0, 2_500.0];
    let got = sd.miss_ratios_by_objects(&sizes);
    for ((c, g), e) in sizes
        .iter()
        .zip(got)
        .zip(exact.miss_ratios_by_objects(&sizes))
    {
        assert!((g - e).abs() < 0.02, "size {c}: {g} vs {e}");
    }
}

#[test]
fn warmup_requests_fill_the_stack_but_are_not_counted() {
    let t = trace(40_000, 1_000, 5);
    let mut warm = StackDistances::new(1.0);
    warm.set_warmup(20_000);
    for &id in &t {
        warm.access(id, 1);
    }
    assert_eq!(warm.requests, 20_000);
    // the counted half sees the same distances as a plain LRU that ran the first half untimed
    let mut stack: Vec<u64> = Vec::new();
    let mut misses = 0;
    for (i, &id) in t.iter().enumerate() {
        let at = stack.iter().position(|&x| x == id);
        if i >= 20_000 && at.is_none_or(|p| p >= 100) {
            misses += 1;
        }
        if let Some(p) = at {
            stack.remove(p);
        }
        stack.insert(0, id);
    }
    let got = warm.miss_ratios_by_objects(&[100.0])[0];
    assert!((got - misses as f64 / 20_000.0).abs() < 1e-12);
}

#[test]
fn distinct_objects_are_estimated_within_two_percent() {
    for objects in [1_000u64, 30_000, 2_000_000] {
        let mut distinct = Distinct::new();
        for id in 0..objects {
            distinct.add(mix(id ^ 99));
            distinct.add(mix(id ^ 99)); // repeats change nothing
        }
        let ratio = distinct.estimate() / objects as f64;
        assert!((ratio - 1.0).abs() < 0.02, "{objects}: {ratio}");
    }
}

#[test]
fn log_buckets_are_monotone_and_tight() {
    let mut last = 0;
    for v in (0..1_000_000u64).step_by(37) {
        let b = log_bucket(v);
        assert!(b >= last);
        last = b;
        assert!(log_bucket_high(b) >= v);
        assert!((log_bucket_high(b) - v) as f64 <= v as f64 / 64.0 + 1.0);
    }
}

#[test]
fn exact_distances_in_objects_and_bytes_equal_a_plain_stack() {
    // sizes equal at first (count × size), then each object's own, changing over time;
    // few objects against the requests: renumbered many times
    let t = trace(40_000, 3_000, 5);
    let size = |k: usize, id: u64| match k < 10_000 {
        true => 100,
        false => (mix(id ^ (k / 7_000) as u64) % 5_000) as u32,
    };
    let mut sd = StackDistances::new(1.0);
    sd.access_all(t.iter().enumerate().map(|(k, &id)| (id, size(k, id))));
    let (mut by_objects, mut by_bytes, mut cold) = (vec![0u64], Vec::new(), 0);
    let mut stack: Vec<(u64, u32)> = Vec::new(); // most recent first
    for (k, &id) in t.iter().enumerate() {
        let s = size(k, id);
        match stack.iter().position(|&(x, _)| x == id) {
            Some(i) => {
                let above: u64 = stack[..i].iter().map(|&(_, b)| b as u64).sum();
                histogram::bump(&mut by_objects, i + 1);
                histogram::bump(&mut by_bytes, log_bucket(above + s as u64));
                stack.remove(i);
            }
            None => cold += 1,
        }
        stack.insert(0, (id, s));
    }
    assert_eq!(sd.by_objects, by_objects);
    assert_eq!(sd.by_bytes, by_bytes);
    assert_eq!(sd.cold, cold);
}

#[test]
fn exact_runs_read_ahead_count_what_one_request_at_a_time_counts() {
    let t = trace(300_000, 40_000, 21);
    let size = |k: usize, id: u64| match k < 100_000 {
        true => 1,
        false => (mix(id) % 3_000) as u32,
    };
    let mut one = StackDistances::new(1.0);
    let mut all = StackDistances::new(1.0);
    for (k, &id) in t.iter().enumerate() {
        one.access(id, size(k, id));
    }
    const FEED: usize = 7_777; // several calls, as Python feeds chunks
    for (c, part) in t.chunks(FEED).enumerate() {
        let at = |k: usize, id: u64| (id, size(c * FEED + k, id));
        all.access_all(part.iter().enumerate().map(|(k, &id)| at(k, id)));
    }
    assert_eq!(one.by_objects, all.by_objects);
    assert_eq!(one.by_bytes, all.by_bytes);
    assert_eq!((one.requests, one.cold), (all.requests, all.cold));
}
