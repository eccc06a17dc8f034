//! Where each client's steps wait on disk between loading and sending: one file, unlinked as
//! soon as it is created (nothing is left behind however the process ends; the space is
//! freed when the last handle closes), holding each client's steps as a chain of blocks.
//!
//! A block is a header, the file offset of the client's next block (`NO_NEXT` for its
//! last), then up to `block` records of `RECORD` bytes: op (u8), key (u32), size (u32) and
//! due time (u64), little-endian. Every block of a client is full but its last. The writer
//! reserves a client's next block when it writes one, so a header is written once, never
//! patched, and only the client's block being filled is held in memory.
use super::Step;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub(super) const HEADER: usize = 8;
pub(super) const RECORD: usize = 17;
pub(super) const NO_NEXT: u64 = u64::MAX;

/// At most this many steps a block: a block of 4 KiB.
const BLOCK_MAX: usize = (4096 - HEADER) / RECORD;
/// At least this many, so a refill is rare however many clients there are.
const BLOCK_MIN: usize = 16;
/// The blocks' bytes over all clients, on each side (loading, and sending), short of
/// `BLOCK_MIN` steps each.
const BLOCKS_BUDGET: usize = 16 << 20;

/// Steps a block for `clients` clients: 4 KiB blocks up to 4,112 clients, smaller beyond.
pub(super) fn block_steps(clients: usize) -> usize {
    (BLOCKS_BUDGET / (clients.max(1) * RECORD)).clamp(BLOCK_MIN, BLOCK_MAX)
}

/// Where a client's script starts in the spool, and how many steps it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) first: u64,
    pub(super) steps: u64,
}

/// A new spool file, already unlinked: in `dir` (beside the arrays), else in the system's
/// temporary directory; with the directory it is in, for messages.
pub(super) fn create(dir: &Path) -> Result<(File, PathBuf), String> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        ".engine-spool-{}-{}",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    );
    let mut refusals = Vec::new();
    for place in [dir.to_path_buf(), std::env::temp_dir()] {
        let path = place.join(&name);
        let created = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|file| std::fs::remove_file(&path).map(|()| file));
        match created {
            Ok(file) => return Ok((file, place)),
            Err(e) => refusals.push(format!("{}: {e}", place.display())),
        }
    }
    Err(format!(
        "replay: cannot create a spool file ({})",
        refusals.join("; ")
    ))
}

pub(super) fn encode(step: &Step, out: &mut Vec<u8>) {
    out.push(step.op as u8);
    out.extend_from_slice(&(step.key as u32).to_le_bytes());
    out.extend_from_slice(&step.size.to_le_bytes());
    out.extend_from_slice(&step.at.to_le_bytes());
}

/// The step of a record (`record` is `RECORD` bytes).
#[inline]
pub(super) fn decode(record: &[u8]) -> Step {
    let u32_at = |i: usize| u32::from_le_bytes(record[i..i + 4].try_into().unwrap());
    Step {
        op: record[0] as u16,
        key: u32_at(1) as u64,
        size: u32_at(5),
        at: u64::from_le_bytes(record[9..17].try_into().unwrap()),
    }
}

/// Reads the block at `offset` holding `steps` records into `into` (header included), and
/// tells where the client's next block is.
pub(super) fn read_block(
    file: &File,
    offset: u64,
    steps: usize,
    into: &mut Vec<u8>,
) -> std::io::Result<u64> {
    into.resize(HEADER + steps * RECORD, 0);
    file.read_exact_at(into, offset)?;
    Ok(u64::from_le_bytes(into[..HEADER].try_into().unwrap()))
}

/// A client's block being filled, where it goes, and the client's script so far.
#[derive(Default)]
struct Filling {
    bytes: Vec<u8>,
    offset: u64,
    head: Head,
}

/// Splits the stream into the clients' chains of blocks.
pub(super) struct Writer {
    file: File,
    /// The directory the file was created in, for messages.
    place: PathBuf,
    block: usize,
    /// The end of the blocks written or reserved so far.
    end: u64,
    clients: Vec<Filling>,
}

impl Writer {
    pub(super) fn new(file: File, place: PathBuf, clients: usize, block: usize) -> Writer {
        Writer {
            file,
            place,
            block,
            end: 0,
            clients: (0..clients).map(|_| Filling::default()).collect(),
        }
    }

    pub(super) fn clients(&self) -> usize {
        self.clients.len()
    }

    pub(super) fn block(&self) -> usize {
        self.block
    }

    fn reserve(end: &mut u64, block: usize) -> u64 {
        let offset = *end;
        *end += (HEADER + block * RECORD) as u64;
        offset
    }

    /// Appends `step` to client `client`'s script, writing its block out when full.
    pub(super) fn push(&mut self, client: usize, step: Step) -> Result<(), String> {
        let full = HEADER + self.block * RECORD;
        let c = &mut self.clients[client];
        if c.head.steps == 0 {
            c.offset = Self::reserve(&mut self.end, self.block);
            c.head.first = c.offset;
            c.bytes.reserve_exact(full);
            c.bytes.extend_from_slice(&NO_NEXT.to_le_bytes());
        } else if c.bytes.len() == full {
            let next = Self::reserve(&mut self.end, self.block);
            c.bytes[..HEADER].copy_from_slice(&next.to_le_bytes());
            write(&self.file, &self.place, &c.bytes, c.offset)?;
            c.offset = next;
            c.bytes.truncate(HEADER);
            c.bytes[..HEADER].copy_from_slice(&NO_NEXT.to_le_bytes());
        }
        encode(&step, &mut c.bytes);
        c.head.steps += 1;
        Ok(())
    }

    /// Writes every client's last block, and hands back the file and where each script starts.
    pub(super) fn finish(self) -> Result<(File, Vec<Head>), String> {
        let mut heads = Vec::with_capacity(self.clients.len());
        for c in &self.clients {
            if c.bytes.len() > HEADER {
                write(&self.file, &self.place, &c.bytes, c.offset)?;
            }
            heads.push(c.head);
        }
        Ok((self.file, heads))
    }
}

fn write(file: &File, place: &Path, bytes: &[u8], offset: u64) -> Result<(), String> {
    file.write_all_at(bytes, offset).map_err(|e| {
        format!(
            "replay: cannot write the spool file in {}: {e}",
            place.display()
        )
    })
}
