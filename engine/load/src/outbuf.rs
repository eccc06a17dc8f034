//! A socket's outgoing requests, with large values referred to rather than copied.
//!
//! Every value the engine writes is the contract value: a 12-byte key-dependent header and
//! then bytes 12.. of the run's filler (docs/contracts.md). Copying a 100 KB value into the
//! send buffer before the kernel copies it again cost ~5 % of the client's CPU per op in a
//! 90/10 GET/SET memcached run; so from `SPLICE_MIN` bytes on, the buffer records where
//! the filler slice goes, and the sender hands the kernel an iovec list that points into
//! the filler itself (`writev`, io_uring `SENDMSG`). The bytes on the wire are the same.

use std::ops::{Deref, DerefMut};

use crate::keyspace::{value_header, write_value};

/// Values at least this long are sent from the filler in place.
pub const SPLICE_MIN: usize = 16 * 1024;

/// Most iovecs handed to one send (Linux's `IOV_MAX`); the rest goes in the next send.
const MAX_IOV: usize = 1024;

/// Inline bytes (reached through `Deref`, so encoders write into it as into a `Vec<u8>`)
/// plus filler slices spliced in at recorded offsets. `len`, `is_empty` and `clear`
/// speak of the whole logical stream.
#[derive(Default)]
pub struct OutBuf {
    bytes: Vec<u8>,
    /// (offset in `bytes` the slice goes before, start in the filler, length), in order.
    splices: Vec<(usize, usize, usize)>,
    spliced: usize,
}

impl OutBuf {
    pub fn with_capacity(n: usize) -> Self {
        OutBuf {
            bytes: Vec::with_capacity(n),
            ..Default::default()
        }
    }

    /// Bytes in the stream, inline and spliced.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.spliced
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.splices.clear();
        self.spliced = 0;
    }

    /// True when every byte is inline, so one contiguous send will do.
    pub fn is_contiguous(&self) -> bool {
        self.splices.is_empty()
    }

    /// The inline bytes; the whole stream when `is_contiguous`.
    pub fn inline(&self) -> &[u8] {
        &self.bytes
    }

    /// Appends the contract value of `n` bytes for `key`.
    pub fn value(&mut self, key: &[u8], n: usize, filler: &[u8]) {
        if n < SPLICE_MIN {
            write_value(&mut self.bytes, key, n, filler);
            return;
        }
        self.bytes.extend_from_slice(&value_header(key));
        self.splices.push((self.bytes.len(), 12, n - 12));
        self.spliced += n - 12;
    }

    /// Moves `other`'s stream to the end of this one (the spliced values stay references).
    pub fn append(&mut self, other: &mut OutBuf) {
        if self.is_empty() {
            std::mem::swap(self, other);
            return;
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.splices.extend(
            other
                .splices
                .iter()
                .map(|&(to, start, len)| (to + at, start, len)),
        );
        self.spliced += other.spliced;
        other.clear();
    }

    /// The stream's pieces in order: inline runs and filler slices (some may be empty).
    fn parts<'b>(&'b self, filler: &'b [u8]) -> impl Iterator<Item = &'b [u8]> + 'b {
        let mut at = 0;
        self.splices
            .iter()
            .flat_map(move |&(to, start, len)| {
                let inline = &self.bytes[at..to];
                at = to;
                [inline, &filler[start..start + len]]
            })
            .chain(std::iter::once_with(move || {
                let last = self.splices.last().map_or(0, |s| s.0);
                &self.bytes[last..]
            }))
    }

    /// Fills `iov` with the stream from byte `from` on (at most `MAX_IOV` entries).
    /// The entries point into `self` and `filler`: both must stay untouched until the
    /// send that uses them has completed.
    pub fn iovecs(&self, from: usize, filler: &[u8], iov: &mut Vec<libc::iovec>) {
        iov.clear();
        let mut skip = from;
        for part in self.parts(filler) {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            let part = &part[skip..];
            skip = 0;
            if iov.len() == MAX_IOV {
                break;
            }
            iov.push(libc::iovec {
                iov_base: part.as_ptr() as *mut libc::c_void,
                iov_len: part.len(),
            });
        }
    }

    /// The stream from byte `from` on, as slices (for TLS, which copies them into records).
    pub fn slices_from<'b>(
        &'b self,
        from: usize,
        filler: &'b [u8],
    ) -> impl Iterator<Item = &'b [u8]> + 'b {
        let mut skip = from;
        self.parts(filler).filter_map(move |part| {
            if skip >= part.len() {
                skip -= part.len();
                return None;
            }
            let rest = &part[skip..];
            skip = 0;
            Some(rest)
        })
    }

    /// The whole stream as one vector (for the few blocking writes outside the load loop).
    pub fn to_bytes(&self, filler: &[u8]) -> Vec<u8> {
        self.parts(filler).collect::<Vec<_>>().concat()
    }
}

impl Deref for OutBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl DerefMut for OutBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::make_filler;

    fn gather(b: &OutBuf, from: usize, filler: &[u8]) -> Vec<u8> {
        let mut iov = Vec::new();
        b.iovecs(from, filler, &mut iov);
        let mut out = Vec::new();
        for v in &iov {
            // SAFETY: the entries point into `b` and `filler`, both alive here.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len)
            });
        }
        out
    }

    #[test]
    fn spliced_stream_equals_the_copied_one_from_every_offset() {
        let filler = make_filler(100_000);
        let (mut spliced, mut copied) = (OutBuf::default(), Vec::new());
        for (key, n) in [
            (&b"a"[..], 5),
            (b"big1", 70_000),
            (b"b", 20),
            (b"big2", SPLICE_MIN),
            (b"c", 0),
        ] {
            spliced.extend_from_slice(b"set ");
            spliced.extend_from_slice(key);
            spliced.value(key, n, &filler);
            spliced.extend_from_slice(b"\r\n");
            copied.extend_from_slice(b"set ");
            copied.extend_from_slice(key);
            write_value(&mut copied, key, n, &filler);
            copied.extend_from_slice(b"\r\n");
        }
        assert!(!spliced.is_contiguous());
        assert_eq!(spliced.len(), copied.len());
        assert_eq!(spliced.to_bytes(&filler), copied);
        assert!(spliced.inline().len() < 1000);
        for from in [0, 1, 13, 40, 69_999, 70_030, copied.len() - 3, copied.len()] {
            assert_eq!(
                gather(&spliced, from, &filler),
                copied[from..],
                "from {from}"
            );
        }
        spliced.clear();
        assert!(spliced.is_empty() && spliced.is_contiguous());
    }

    #[test]
    fn small_values_stay_inline() {
        let filler = make_filler(SPLICE_MIN);
        let mut b = OutBuf::default();
        b.value(b"k", SPLICE_MIN - 1, &filler);
        assert!(b.is_contiguous());
        assert_eq!(b.len(), SPLICE_MIN - 1);
    }

    #[test]
    fn an_appended_stream_equals_the_two_written_in_one() {
        let filler = make_filler(100_000);
        let write = |b: &mut OutBuf, key: &[u8], n: usize| {
            b.extend_from_slice(key);
            b.value(key, n, &filler);
        };
        let (mut first, mut second, mut whole) =
            (OutBuf::default(), OutBuf::default(), OutBuf::default());
        for (key, n) in [(&b"a"[..], 30_000), (b"b", 7)] {
            write(&mut first, key, n);
            write(&mut whole, key, n);
        }
        for (key, n) in [(&b"c"[..], 9), (b"d", 40_000), (b"e", 3)] {
            write(&mut second, key, n);
            write(&mut whole, key, n);
        }
        let mut empty = OutBuf::default();
        empty.append(&mut first); // into an empty buffer: a swap
        empty.append(&mut second);
        assert!(first.is_empty() && second.is_empty());
        assert_eq!(empty.len(), whole.len());
        assert_eq!(empty.to_bytes(&filler), whole.to_bytes(&filler));
        assert_eq!(
            gather(&empty, 31_000, &filler),
            whole.to_bytes(&filler)[31_000..]
        );
    }
}
