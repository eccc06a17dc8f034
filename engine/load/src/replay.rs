//! A recorded trace as the engine's op stream (`cachemark run --trace`, workload/replay.py).
//!
//! cachemark's Python side reads the trace once and writes the whole request stream, in
//! recorded order, as four little-endian arrays in a directory (`replay.dir`): `ops.u8` (an
//! index into the run's mix entries), `keys.u32` (dense key ids), `sizes.u32` (value sizes)
//! and `at.u64` (due times, ns after the phase's start, already divided by the speed). Here
//! each request goes to one logical client, chosen by its key, so every key's requests are
//! sent by one client in their recorded order (one connection per server keeps them in
//! order on the wire too); a client sends its script in order, at the due times in open
//! loop or as fast as it may in closed loop.
use std::path::Path;

/// One request of a client's script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub op: u16,
    pub key: u64,
    pub size: u32,
    pub at: u64,
}

/// Every client's script: `scripts[g]` for logical client `g`.
#[derive(Debug, Default)]
pub struct Replay {
    pub scripts: Vec<Vec<Step>>,
}

/// The client that sends a key's requests: well mixed, so shares are even for dense ids
/// (the same spread as workload/replay.py uses for its worker shares).
pub fn client_of(key: u64, clients: usize) -> usize {
    ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) % clients as u64) as usize
}

fn read(dir: &Path, name: &str, width: usize) -> Result<Vec<u8>, String> {
    let path = dir.join(name);
    let bytes =
        std::fs::read(&path).map_err(|e| format!("replay: cannot read {}: {e}", path.display()))?;
    if bytes.len() % width != 0 {
        return Err(format!(
            "replay: {} is not a whole number of {width}-byte values",
            path.display()
        ));
    }
    Ok(bytes)
}

impl Replay {
    /// Loads the stream from `dir` and splits it over `clients` scripts.
    pub fn load(dir: &Path, clients: usize, entries: usize) -> Result<Replay, String> {
        let ops = read(dir, "ops.u8", 1)?;
        let keys = read(dir, "keys.u32", 4)?;
        let sizes = read(dir, "sizes.u32", 4)?;
        let at = read(dir, "at.u64", 8)?;
        let n = ops.len();
        if keys.len() != 4 * n || sizes.len() != 4 * n || at.len() != 8 * n {
            return Err("replay: the four arrays differ in length".into());
        }
        let mut scripts = vec![Vec::with_capacity(n / clients.max(1) + 1); clients.max(1)];
        for i in 0..n {
            let op = ops[i] as u16;
            if op as usize >= entries {
                return Err(format!(
                    "replay: request {i} names op entry {op} of {entries}"
                ));
            }
            let key = u32::from_le_bytes(keys[4 * i..4 * i + 4].try_into().unwrap()) as u64;
            let size = u32::from_le_bytes(sizes[4 * i..4 * i + 4].try_into().unwrap());
            let due = u64::from_le_bytes(at[8 * i..8 * i + 8].try_into().unwrap());
            scripts[client_of(key, clients.max(1))].push(Step {
                op,
                key,
                size,
                at: due,
            });
        }
        Ok(Replay { scripts })
    }

    pub fn total(&self) -> u64 {
        self.scripts.iter().map(|s| s.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, steps: &[(u8, u32, u32, u64)]) {
        let mut ops = Vec::new();
        let mut keys = Vec::new();
        let mut sizes = Vec::new();
        let mut at = Vec::new();
        for &(o, k, s, a) in steps {
            ops.push(o);
            keys.extend_from_slice(&k.to_le_bytes());
            sizes.extend_from_slice(&s.to_le_bytes());
            at.extend_from_slice(&a.to_le_bytes());
        }
        std::fs::write(dir.join("ops.u8"), ops).unwrap();
        std::fs::write(dir.join("keys.u32"), keys).unwrap();
        std::fs::write(dir.join("sizes.u32"), sizes).unwrap();
        std::fs::write(dir.join("at.u64"), at).unwrap();
    }

    #[test]
    fn every_key_stays_on_one_client_in_recorded_order() {
        let dir = std::env::temp_dir().join(format!("cm-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let steps: Vec<(u8, u32, u32, u64)> = (0..1000u32)
            .map(|i| ((i % 2) as u8, i % 37, 10 + i, i as u64 * 1000))
            .collect();
        write(&dir, &steps);
        let r = Replay::load(&dir, 4, 2).unwrap();
        assert_eq!(r.total(), 1000);
        for (g, script) in r.scripts.iter().enumerate() {
            assert!(script.windows(2).all(|w| w[0].at <= w[1].at));
            assert!(script.iter().all(|s| client_of(s.key, 4) == g));
        }
        assert!(r.scripts.iter().all(|s| !s.is_empty()));
        assert!(Replay::load(&dir, 4, 1).unwrap_err().contains("op entry 1"));
        std::fs::write(dir.join("at.u64"), [0u8; 12]).unwrap();
        assert!(Replay::load(&dir, 4, 2).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
