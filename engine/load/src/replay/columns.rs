//! The four arrays of a replay directory read side by side, a chunk of requests at a time,
//! so that loading holds a chunk, never the whole stream.
use super::Step;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Requests per chunk: 136 KiB of the arrays' bytes and 192 KiB of steps.
const CHUNK: usize = 8192;

/// One array file: its path (for messages), its width in bytes, and the chunk read last.
struct Array {
    path: PathBuf,
    file: File,
    width: usize,
    bytes: Vec<u8>,
}

impl Array {
    /// Opens `dir/name`, and tells how many values of `width` bytes it holds.
    fn open(dir: &Path, name: &str, width: usize) -> Result<(Array, u64), String> {
        let path = dir.join(name);
        let cannot = |e: std::io::Error| format!("replay: cannot read {}: {e}", path.display());
        let file = File::open(&path).map_err(cannot)?;
        let len = file.metadata().map_err(cannot)?.len();
        if len % width as u64 != 0 {
            return Err(format!(
                "replay: {} is not a whole number of {width}-byte values",
                path.display()
            ));
        }
        let array = Array {
            path,
            file,
            width,
            bytes: Vec::new(),
        };
        Ok((array, len / width as u64))
    }

    /// Reads the next `n` values; a file cut shorter since it was opened is an error.
    fn read(&mut self, n: usize) -> Result<(), String> {
        self.bytes.resize(n * self.width, 0);
        self.file
            .read_exact(&mut self.bytes)
            .map_err(|e| format!("replay: cannot read {}: {e}", self.path.display()))
    }

    fn value(&self, i: usize) -> u64 {
        let mut le = [0u8; 8];
        le[..self.width].copy_from_slice(&self.bytes[i * self.width..(i + 1) * self.width]);
        u64::from_le_bytes(le)
    }
}

/// The request stream as the four arrays hold it, in recorded order.
pub(super) struct Columns {
    ops: Array,
    keys: Array,
    sizes: Array,
    at: Array,
    /// Requests not read yet.
    left: u64,
}

impl Columns {
    /// Opens `ops.u8`, `keys.u32`, `sizes.u32` and `at.u64`, which must hold as many values.
    pub(super) fn open(dir: &Path) -> Result<Columns, String> {
        let (ops, n) = Array::open(dir, "ops.u8", 1)?;
        let (keys, n_keys) = Array::open(dir, "keys.u32", 4)?;
        let (sizes, n_sizes) = Array::open(dir, "sizes.u32", 4)?;
        let (at, n_at) = Array::open(dir, "at.u64", 8)?;
        if n_keys != n || n_sizes != n || n_at != n {
            return Err("replay: the four arrays differ in length".into());
        }
        Ok(Columns {
            ops,
            keys,
            sizes,
            at,
            left: n,
        })
    }

    /// Replaces `out` with the next requests; false once there are none.
    pub(super) fn next_chunk(&mut self, out: &mut Vec<Step>) -> Result<bool, String> {
        out.clear();
        let n = self.left.min(CHUNK as u64) as usize;
        if n == 0 {
            return Ok(false);
        }
        for array in [&mut self.ops, &mut self.keys, &mut self.sizes, &mut self.at] {
            array.read(n)?;
        }
        out.extend((0..n).map(|i| Step {
            op: self.ops.value(i) as u16,
            key: self.keys.value(i),
            size: self.sizes.value(i) as u32,
            at: self.at.value(i),
        }));
        self.left -= n as u64;
        Ok(true)
    }
}
