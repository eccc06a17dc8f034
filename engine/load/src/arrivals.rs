//! Open-loop schedules: the gaps between one client's intended send times.
//!
//! Each logical client follows its own schedule with mean gap `clients / rate`. Fixed
//! arrivals are evenly spaced (clients interleaved by the caller's start offsets);
//! Poisson arrivals draw exponential gaps from the client's own seeded generator, so a
//! client's schedule does not depend on timing or on the other clients, and the
//! superposition of all clients is a Poisson process of the total `rate`. ETC arrivals draw
//! generalised-Pareto gaps of the same mean (Facebook ETC's shape) the same way.

use crate::keyspace::Rng;

/// Most gaps drawn one by one when counting a Poisson schedule's missed slots; beyond
/// that the rest is estimated from the rate (a run 100× over capacity would otherwise
/// spend seconds drawing).
const MAX_DRAWS: u64 = 1 << 20;

/// Facebook ETC's inter-arrival shape (Atikoglu et al. 2012): a generalised Pareto with this ξ,
/// scaled to the schedule's mean (cachemark/workload/etc.py draws the same for the Python path).
pub const ETC_GAP_SHAPE: f64 = 0.154971;

/// One client's arrival process.
#[derive(Clone, Debug)]
pub struct Arrivals {
    /// Mean gap, ns.
    mean: f64,
    /// The generator of random gaps; `None` for fixed gaps.
    rng: Option<Rng>,
    /// The shape ξ of generalised-Pareto gaps; 0 for exponential ones.
    shape: f64,
    /// Fraction of a nanosecond carried to the next gap, so the long-run rate is exact.
    carry: f64,
}

impl Arrivals {
    pub fn fixed(mean_ns: f64) -> Self {
        Arrivals {
            mean: mean_ns,
            rng: None,
            shape: 0.0,
            carry: 0.0,
        }
    }

    /// Generalised-Pareto gaps of mean `mean_ns` and ETC's shape, seeded like [`Arrivals::poisson`].
    pub fn etc(mean_ns: f64, seed: u64, client: u64) -> Self {
        Arrivals {
            shape: ETC_GAP_SHAPE,
            ..Arrivals::poisson(mean_ns, seed, client)
        }
    }

    /// Exponential gaps of mean `mean_ns`, seeded by the run's seed and the client's index.
    pub fn poisson(mean_ns: f64, seed: u64, client: u64) -> Self {
        let mix =
            Rng::new(seed ^ client.wrapping_add(1).wrapping_mul(0xA24B_AED4_963E_E407)).next_u64();
        Arrivals {
            mean: mean_ns,
            rng: Some(Rng::new(mix)),
            shape: 0.0,
            carry: 0.0,
        }
    }

    /// The gap to the next intended send, ns.
    #[inline]
    pub fn gap(&mut self) -> u64 {
        let g = match &mut self.rng {
            None => self.mean,
            // 1 - U is in (0, 1]: never ln(0).
            Some(r) if self.shape == 0.0 => -(1.0 - r.next_f64()).ln() * self.mean,
            // GP(0, σ, ξ) by its inverse CDF, σ = mean·(1 − ξ) so the mean is kept.
            Some(r) => {
                let xi = self.shape;
                self.mean * (1.0 - xi) * ((1.0 - r.next_f64()).powf(-xi) - 1.0) / xi
            }
        } + self.carry;
        let whole = g.floor();
        self.carry = g - whole;
        whole as u64
    }

    /// How many sends of this schedule fall in `[next, end)`, `next` being the next
    /// intended send: the ops a phase cut at `end` never sent.
    pub fn due_in(&mut self, mut next: u64, end: u64) -> u64 {
        if next >= end {
            return 0;
        }
        if self.rng.is_none() {
            return ((end - next) as f64 / self.mean).ceil() as u64;
        }
        let mut n = 0;
        while next < end && n < MAX_DRAWS {
            n += 1;
            next = next.saturating_add(self.gap());
        }
        if next < end {
            n += ((end - next) as f64 / self.mean).round() as u64;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(a: &mut Arrivals, n: usize) -> (f64, f64) {
        let gaps: Vec<f64> = (0..n).map(|_| a.gap() as f64).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn poisson_gaps_are_exponential() {
        // 1000 ops/s over 10 clients: 10 ms between one client's sends.
        let mean = 1e9 / 1000.0 * 10.0;
        let (m, cv) = stats(&mut Arrivals::poisson(mean, 1, 3), 200_000);
        assert!((m / mean - 1.0).abs() < 0.01, "mean gap {m} vs {mean}");
        assert!((cv - 1.0).abs() < 0.02, "coefficient of variation {cv}");
        // Memoryless: P(gap > mean) = 1/e.
        let mut a = Arrivals::poisson(mean, 1, 4);
        let over = (0..100_000).filter(|_| a.gap() as f64 > mean).count() as f64 / 1e5;
        assert!((over - (-1.0f64).exp()).abs() < 0.01, "{over}");
    }

    #[test]
    fn etc_gaps_have_the_pareto_mean_and_median() {
        // ETC's own mean gap, 18.969 µs: GP(0, 16.0292 µs, 0.154971).
        let mean = 18_968.8;
        let mut a = Arrivals::etc(mean, 1, 0);
        let mut gaps: Vec<f64> = (0..1_000_000).map(|_| a.gap() as f64).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((m / mean - 1.0).abs() < 0.01, "mean gap {m} vs {mean}");
        gaps.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let median = gaps[gaps.len() / 2];
        let want = 16_029.2 * (2f64.powf(ETC_GAP_SHAPE) - 1.0) / ETC_GAP_SHAPE;
        assert!(
            (median / want - 1.0).abs() < 0.01,
            "median {median} vs {want}"
        );
    }

    #[test]
    fn fixed_gaps_are_even_and_exact_on_average() {
        let (m, cv) = stats(&mut Arrivals::fixed(2_000_000.0), 10_000);
        assert_eq!(m, 2_000_000.0);
        assert!(cv < 1e-9);
        // Fractional gaps keep the rate: 40.25 ns apart, 4 million sends.
        let mut a = Arrivals::fixed(40.25);
        let total: u64 = (0..4_000_000).map(|_| a.gap()).sum();
        assert!((total as f64 - 161_000_000.0).abs() <= 1.0, "{total}");
    }

    #[test]
    fn clients_and_seeds_differ_and_repeat() {
        let draw = |seed, client| {
            let mut a = Arrivals::poisson(1e6, seed, client);
            (0..5).map(|_| a.gap()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 0), draw(1, 0));
        assert_ne!(draw(1, 0), draw(1, 1));
        assert_ne!(draw(1, 0), draw(2, 0));
    }

    #[test]
    fn due_in_counts_the_cut_schedule() {
        assert_eq!(Arrivals::fixed(10.0).due_in(100, 100), 0);
        assert_eq!(Arrivals::fixed(10.0).due_in(100, 101), 1);
        assert_eq!(Arrivals::fixed(10.0).due_in(100, 200), 10);
        assert_eq!(Arrivals::fixed(10.0).due_in(100, 201), 11);
        // Poisson: about (end - next) / mean, counted or estimated.
        let n = Arrivals::poisson(100.0, 1, 0).due_in(0, 10_000_000);
        assert!((n as f64 - 100_000.0).abs() < 2_000.0, "{n}");
        let n = Arrivals::poisson(1.0, 1, 0).due_in(0, 100_000_000_000);
        assert!((n as f64 / 1e11 - 1.0).abs() < 0.01, "{n}");
    }
}
