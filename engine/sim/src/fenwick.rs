//! A Fenwick (binary indexed) tree of pairs of u64 weights — an object count and its bytes —
//! with prefix sums and point updates in O(log n). The two weights share one array so a walk
//! touches one cache line per level, not two: on a tree larger than the CPU caches the walk's
//! cache misses are the whole cost. `SumTree` is the one-weight kind, for trees kept small
//! enough to stay in cache (over blocks of positions, not positions).

use std::ops::{AddAssign, SubAssign};

pub struct Fenwick {
    tree: Vec<[u64; 2]>,
}

impl Fenwick {
    pub fn new(len: usize) -> Self {
        Fenwick {
            tree: vec![[0, 0]; len + 1],
        }
    }

    /// How many positions it holds.
    pub fn capacity(&self) -> usize {
        self.tree.len() - 1
    }

    /// Adds `delta` (two's complement for a decrease) at position `i` (0-based).
    pub fn add(&mut self, i: usize, delta: [u64; 2]) {
        let mut j = i + 1;
        while j < self.tree.len() {
            let node = &mut self.tree[j];
            node[0] = node[0].wrapping_add(delta[0]);
            node[1] = node[1].wrapping_add(delta[1]);
            j += j & j.wrapping_neg();
        }
    }

    /// Every weight back to zero.
    pub fn clear(&mut self) {
        self.tree.fill([0, 0]);
    }

    /// Replaces the contents with `leaves` at positions `0..leaves.len()` (zero beyond), in
    /// O(n): renumbering a stack rebuilds its tree far more often than it grows.
    pub fn rebuild(&mut self, leaves: impl Iterator<Item = [u64; 2]>) {
        self.tree.fill([0, 0]);
        for (i, leaf) in leaves.enumerate() {
            self.tree[i + 1] = leaf;
        }
        let n = self.tree.len();
        for j in 1..n {
            let parent = j + (j & j.wrapping_neg());
            if parent < n {
                let [a, b] = self.tree[j];
                let node = &mut self.tree[parent];
                node[0] = node[0].wrapping_add(a);
                node[1] = node[1].wrapping_add(b);
            }
        }
    }

    /// The sums of positions `0..i` (exclusive).
    pub fn prefix(&self, i: usize) -> [u64; 2] {
        let mut j = i;
        let mut sum = [0u64, 0u64];
        while j > 0 {
            let node = &self.tree[j];
            sum[0] = sum[0].wrapping_add(node[0]);
            sum[1] = sum[1].wrapping_add(node[1]);
            j -= j & j.wrapping_neg();
        }
        sum
    }
}

/// A Fenwick tree of one weight (u32 counts, u64 bytes). A decrease is `sub`, so a count
/// can be half the width of `Fenwick`'s: half the cache lines for the same tree.
pub struct SumTree<T> {
    tree: Vec<T>,
}

impl<T: Copy + Default + AddAssign + SubAssign> SumTree<T> {
    /// A tree over `leaves` (positions `0..leaves.len()`), built in O(n).
    pub fn from_leaves(leaves: &[T]) -> Self {
        let mut tree = Vec::with_capacity(leaves.len() + 1);
        tree.push(T::default());
        tree.extend_from_slice(leaves);
        let n = tree.len();
        for j in 1..n {
            let parent = j + (j & j.wrapping_neg());
            if parent < n {
                let v = tree[j];
                tree[parent] += v;
            }
        }
        SumTree { tree }
    }

    pub fn add(&mut self, i: usize, v: T) {
        let mut j = i + 1;
        while j < self.tree.len() {
            self.tree[j] += v;
            j += j & j.wrapping_neg();
        }
    }

    /// Takes `v` back from position `i` (it must have been added there).
    pub fn sub(&mut self, i: usize, v: T) {
        let mut j = i + 1;
        while j < self.tree.len() {
            self.tree[j] -= v;
            j += j & j.wrapping_neg();
        }
    }

    /// The sum of positions `0..i` (exclusive).
    pub fn prefix(&self, i: usize) -> T {
        let mut j = i;
        let mut sum = T::default();
        while j > 0 {
            sum += self.tree[j];
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
            f.add(i, [k, 2 * k]);
            plain[i] += k;
            if k % 3 == 0 {
                f.add(i, [0u64.wrapping_sub(k / 2), 0u64.wrapping_sub(k)]);
                plain[i] -= k / 2;
            }
        }
        for i in 0..=100 {
            let [count, _] = f.prefix(i);
            assert_eq!(count, plain[..i].iter().sum::<u64>());
        }
        let mut rebuilt = Fenwick::new(100);
        rebuilt.add(3, [9, 9]); // overwritten by the rebuild
        rebuilt.rebuild(plain.iter().map(|&v| [v, 2 * v]));
        for i in 0..=100 {
            assert_eq!(rebuilt.prefix(i)[0], plain[..i].iter().sum::<u64>());
        }
    }

    #[test]
    fn a_sum_tree_matches_a_plain_array() {
        let mut plain: Vec<u32> = (0..300u32).map(|i| i % 7).collect();
        let mut tree = SumTree::from_leaves(&plain);
        for k in 0..2_000usize {
            let i = (k * 7919) % plain.len();
            if k % 3 == 0 && plain[i] > 0 {
                tree.sub(i, 1);
                plain[i] -= 1;
            } else {
                tree.add(i, 2);
                plain[i] += 2;
            }
            let at = (k * 31) % (plain.len() + 1);
            assert_eq!(tree.prefix(at), plain[..at].iter().sum::<u32>());
        }
    }
}
