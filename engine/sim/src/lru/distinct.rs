//! `Distinct`: a HyperLogLog counter of the distinct objects of a sampled run. A sampled
//! run cannot count its objects, and the sample itself would estimate them far worse.

/// Distinct objects of a sampled run, estimated from every request (HyperLogLog, Flajolet
/// et al. 2007, with linear counting while registers are empty): 2^14 registers, ~0.8 %
/// standard error — the sample at a low rate would miss by far more.
pub(super) struct Distinct {
    registers: Vec<u8>,
}

impl Distinct {
    const BITS: u32 = 14;

    pub(super) fn new() -> Self {
        Distinct {
            registers: vec![0; 1 << Self::BITS],
        }
    }

    /// `hash`: a well-mixed hash of the object.
    pub(super) fn add(&mut self, hash: u64) {
        let index = (hash >> (64 - Self::BITS)) as usize;
        let rank = ((hash << Self::BITS) | (1 << (Self::BITS - 1))).leading_zeros() as u8 + 1;
        let register = &mut self.registers[index];
        *register = (*register).max(rank);
    }

    pub(super) fn estimate(&self) -> f64 {
        let m = self.registers.len() as f64;
        let sum: f64 = self.registers.iter().map(|&r| (-(r as f64)).exp2()).sum();
        let raw = 0.7213 / (1.0 + 1.079 / m) * m * m / sum;
        let empty = self.registers.iter().filter(|&&r| r == 0).count();
        if raw <= 2.5 * m && empty > 0 {
            m * (m / empty as f64).ln()
        } else {
            raw
        }
    }
}
