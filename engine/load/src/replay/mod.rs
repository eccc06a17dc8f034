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
//!
//! Memory does not grow with the trace: `Replay::load` reads the arrays once, a chunk at a
//! time (`columns.rs`), and writes each client's steps to a spool file on disk
//! (`spool.rs`); each client then reads its own steps back a block at a time (`script.rs`).
//! What is held is a block per client, while loading and while running.
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

mod columns;
mod script;
mod spool;
#[cfg(test)]
mod tests;

pub use script::Script;

/// One request of a client's script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub op: u16,
    pub key: u64,
    pub size: u32,
    pub at: u64,
}

/// Every client's script, spooled: `script(g)` reads logical client `g`'s.
#[derive(Debug)]
pub struct Replay {
    spool: Arc<File>,
    heads: Vec<spool::Head>,
    block: usize,
    /// The largest value size any request records (the run's values must reach it).
    largest: u32,
}

/// The client that sends a key's requests: well mixed, so shares are even for dense ids
/// (the same spread as workload/replay.py uses for its worker shares).
pub fn client_of(key: u64, clients: usize) -> usize {
    ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) % clients as u64) as usize
}

impl Replay {
    /// Loads the stream from `dir` and splits it over `clients` scripts, spooled beside the
    /// arrays (or in the system's temporary directory when `dir` takes no new file).
    pub fn load(dir: &Path, clients: usize, entries: usize) -> Result<Replay, String> {
        let clients = clients.max(1);
        let (file, place) = spool::create(dir)?;
        let writer = spool::Writer::new(file, place, clients, spool::block_steps(clients));
        Replay::load_into(dir, entries, writer)
    }

    /// `load` through a given spool writer (tests pick its file and block size).
    fn load_into(dir: &Path, entries: usize, mut writer: spool::Writer) -> Result<Replay, String> {
        let mut columns = columns::Columns::open(dir)?;
        let clients = writer.clients();
        let mut chunk = Vec::new();
        let mut index = 0u64;
        let mut largest = 0u32;
        while columns.next_chunk(&mut chunk)? {
            for &step in &chunk {
                if step.op as usize >= entries {
                    return Err(format!(
                        "replay: request {index} names op entry {} of {entries}",
                        step.op
                    ));
                }
                largest = largest.max(step.size);
                writer.push(client_of(step.key, clients), step)?;
                index += 1;
            }
        }
        let block = writer.block();
        let (file, heads) = writer.finish()?;
        Ok(Replay {
            spool: Arc::new(file),
            heads,
            block,
            largest,
        })
    }

    /// Logical client `g`'s script, positioned at its first step.
    pub fn script(&self, g: usize) -> Script {
        Script::open(self.spool.clone(), self.heads[g], self.block)
    }

    pub fn total(&self) -> u64 {
        self.heads.iter().map(|h| h.steps).sum()
    }

    /// The largest value size a request records.
    pub fn largest(&self) -> usize {
        self.largest as usize
    }
}
