//! A Fenwick (binary indexed) tree of u64 weights: prefix sums and point updates in O(log n).

pub struct Fenwick {
    tree: Vec<u64>,
}

impl Fenwick {
    pub fn new(len: usize) -> Self {
        Fenwick {
            tree: vec![0; len + 1],
        }
    }

    /// How many positions it holds.
    pub fn capacity(&self) -> usize {
        self.tree.len() - 1
    }

    /// Adds `delta` (two's complement for a decrease) at position `i` (0-based).
    pub fn add(&mut self, i: usize, delta: u64) {
        let mut j = i + 1;
        while j < self.tree.len() {
            self.tree[j] = self.tree[j].wrapping_add(delta);
            j += j & j.wrapping_neg();
        }
    }

    /// The sum of positions `0..i` (exclusive).
    pub fn prefix(&self, i: usize) -> u64 {
        let mut j = i;
        let mut sum = 0u64;
        while j > 0 {
            sum = sum.wrapping_add(self.tree[j]);
            j -= j & j.wrapping_neg();
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_sums_match_a_plain_array() {
        let mut f = Fenwick::new(100);
        let mut plain = vec![0u64; 100];
        for k in 0..500u64 {
            let i = ((k * 7919) % 100) as usize;
            f.add(i, k);
            plain[i] += k;
            if k % 3 == 0 {
                f.add(i, 0u64.wrapping_sub(k / 2));
                plain[i] -= k / 2;
            }
        }
        for i in 0..=100 {
            assert_eq!(f.prefix(i), plain[..i].iter().sum::<u64>());
        }
    }
}
