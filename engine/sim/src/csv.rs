//! Trace CSV blocks (Twitter's cache trace, cachemark's own format, CacheLib's KV replay) parsed
//! in one pass over the bytes: the fast path of `workload/traces/fastcsv.py`.
//!
//! A block is whole lines, each ending in `\n`. Every line with exactly the expected number of
//! commas is decoded; a line is *handled* only if it passes exactly the checks of the numpy path
//! (`fastcsv.py`), and every other line is left to the per-line Python parser, which accepts it
//! or says why not. The two paths must agree line for line (tests/test_fast_csv.py checks it), so
//! the rules here copy numpy's, quirks included: integers are 1…N plain ASCII digits, an op name
//! is compared as one zero-padded 8-byte word (so `get\0` is `get`, as numpy's lookup sees it).

/// Bytes of one record in numpy's `RECORD_DTYPE` (packed, little-endian):
/// t_us i64, op u8, key_hash u64, key_size u32, value_size u32, ttl_s u32, client u32.
pub const RECORD_SIZE: usize = 33;

const SECOND: u64 = 1_000_000;
const U32_LIMIT: u64 = 1 << 32;
const MAX_OP_COUNT: u64 = 0xFFFF;

pub use cachemark_trace::key_hash;

/// Up to 8 bytes as a little-endian word (a short one zero-padded): op names compared as numbers.
fn word(bytes: &[u8]) -> u64 {
    match bytes.get(..8) {
        Some(w) => u64::from_le_bytes(w.try_into().unwrap()),
        None => bytes.iter().rev().fold(0, |w, &b| (w << 8) | b as u64), // no memcpy call
    }
}

/// An unsigned 64-bit decimal of 1…20 digits (numpy's `_u64`: no overflow).
fn u64_field(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 20 {
        return None;
    }
    field.iter().try_fold(0u64, |v, &b| {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v.checked_mul(10)?.checked_add(d as u64)
    })
}

/// Op names → codes, as passed from Python (formats.py owns the mapping).
pub struct Ops {
    entries: Vec<(Vec<u8>, u64, u8)>, // name, its first 8 bytes as a word, code
}

impl Ops {
    pub fn new(names: Vec<(Vec<u8>, u8)>) -> Ops {
        Ops {
            entries: names
                .into_iter()
                .map(|(name, code)| {
                    let w = word(&name);
                    (name, w, code)
                })
                .collect(),
        }
    }

    /// numpy's `_op_lookup`: a field of 1…`max_len` bytes (≤ 8) compared as one zero-padded word.
    #[inline]
    fn by_word(&self, field: &[u8], max_len: usize) -> Option<u8> {
        if field.is_empty() || field.len() > max_len {
            return None;
        }
        let w = word(field);
        self.entries
            .iter()
            .find(|(name, ew, _)| name.len() <= 8 && *ew == w)
            .map(|e| e.2)
    }

    /// An exact name (CacheLib's, where numpy also compares the length).
    fn exact(&self, field: &[u8]) -> Option<u8> {
        self.entries
            .iter()
            .find(|(name, _, _)| name.as_slice() == field)
            .map(|e| e.2)
    }
}

/// A parsed block: the records (RECORD_DTYPE bytes), the line index of each record (a CacheLib
/// line repeated `op_count` times appears that many times), and every line's start and end
/// offsets (the end before `\r\n` or `\n`), for the slow path to pick up the lines not handled.
/// Reused from block to block (`clear` keeps the memory).
#[derive(Default)]
pub struct Block {
    pub records: Vec<u8>,
    pub rows: Vec<i64>,
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    handled: usize, // lines that gave records
}

struct Record {
    t_us: u64,
    op: u8,
    key_hash: u64,
    key_size: u32,
    value_size: u32,
    ttl_s: u32,
    client: u32,
}

impl Record {
    /// Its RECORD_DTYPE bytes, written at the end of `out`.
    #[inline]
    fn write(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + RECORD_SIZE, 0);
        let b = &mut out[at..at + RECORD_SIZE];
        b[0..8].copy_from_slice(&self.t_us.to_le_bytes());
        b[8] = self.op;
        b[9..17].copy_from_slice(&self.key_hash.to_le_bytes());
        b[17..21].copy_from_slice(&self.key_size.to_le_bytes());
        b[21..25].copy_from_slice(&self.value_size.to_le_bytes());
        b[25..29].copy_from_slice(&self.ttl_s.to_le_bytes());
        b[29..33].copy_from_slice(&self.client.to_le_bytes());
    }
}

impl Block {
    pub fn clear(&mut self) {
        self.records.clear();
        self.rows.clear();
        self.starts.clear();
        self.ends.clear();
        self.handled = 0;
    }

    /// Every line gave exactly one record (so `rows` is 0, 1, 2, …): nothing for the slow path.
    pub fn all_handled(&self) -> bool {
        self.handled == self.starts.len() && self.rows.len() == self.starts.len()
    }

    /// `count` copies of one line's record.
    #[inline]
    fn push(&mut self, line: usize, r: &Record, count: u64) {
        for _ in 0..count {
            r.write(&mut self.records);
            self.rows.push(line as i64);
        }
        self.handled += 1;
    }
}

/// The high bit of every zero byte of `x`, exactly (no false hits from borrows).
#[inline]
fn zero_bytes(x: u64) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Where `byte` first occurs in `hay`, looked for 8 bytes at a time.
#[inline]
fn find(hay: &[u8], byte: u8) -> Option<usize> {
    let pattern = u64::from_ne_bytes([byte; 8]);
    let mut words = hay.chunks_exact(8);
    let mut pos = 0;
    for w in &mut words {
        let hits = zero_bytes(u64::from_le_bytes(w.try_into().unwrap()) ^ pattern);
        if hits != 0 {
            return Some(pos + hits.trailing_zeros() as usize / 8);
        }
        pos += 8;
    }
    let tail = words.remainder().iter().position(|&b| b == byte)?;
    Some(pos + tail)
}

/// Calls `each(out, line index, line)` for every line of `data` (`\r\n` or `\n` dropped), after
/// recording its start and end offsets in `out`. Bytes after the last `\n` are no line (the
/// reader never passes any), as in numpy's `_lines`.
fn lines(data: &[u8], out: &mut Block, mut each: impl FnMut(&mut Block, usize, &[u8])) {
    out.clear();
    let mut start = 0;
    while let Some(n) = find(&data[start..], b'\n') {
        let nl = start + n;
        let end = if nl > start && data[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let index = out.starts.len();
        out.starts.push(start as i64);
        out.ends.push(end as i64);
        each(out, index, &data[start..end]);
        start = nl + 1;
    }
}

/// A line's comma-separated fields, read left to right. numpy's path takes only lines with exactly
/// the expected number of commas; reading the expected fields and then a last one that must hold
/// no comma accepts exactly those lines.
struct Fields<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn new(line: &'a [u8]) -> Self {
        Fields { line, at: 0 }
    }

    /// The next field, up to a comma (which must be there).
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = &self.line[self.at..];
        let n = find(rest, b',')?;
        self.at += n + 1;
        Some(&rest[..n])
    }

    /// The last field: the rest of the line, which must hold no comma.
    #[inline]
    fn last(&mut self) -> Option<&'a [u8]> {
        let rest = &self.line[self.at..];
        self.at = self.line.len();
        match find(rest, b',') {
            Some(_) => None,
            None => Some(rest),
        }
    }

    /// Whether the next field is empty (then it is skipped).
    #[inline]
    fn empty(&mut self, last: bool) -> bool {
        match self.line.get(self.at) {
            None => last,
            Some(b',') if !last => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    /// The next field as 1…`max_digits` plain digits (numpy's `_uint`), read as it is scanned;
    /// it must end at a comma, or at the line's end when `last`.
    #[inline]
    fn uint(&mut self, max_digits: usize, last: bool) -> Option<u64> {
        let rest = &self.line[self.at..];
        let mut v = 0u64;
        let mut i = 0;
        while let Some(&b) = rest.get(i) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            if i == max_digits {
                return None;
            }
            v = v * 10 + d as u64;
            i += 1;
        }
        let ended = if last {
            i == rest.len()
        } else {
            rest.get(i) == Some(&b',')
        };
        if i == 0 || !ended {
            return None;
        }
        self.at += i + 1;
        Some(v)
    }

    /// A u32 field: 1…10 digits, below 2³².
    #[inline]
    fn u32(&mut self, last: bool) -> Option<u32> {
        self.uint(10, last)
            .filter(|&v| v < U32_LIMIT)
            .map(|v| v as u32)
    }
}

/// Twitter: `timestamp,key,key size,value size,client,op,ttl` — keys with commas are left to the
/// slow path (which splits from both ends), as are fractional times and upper-case ops.
pub fn parse_twitter(data: &[u8], ops: &Ops, out: &mut Block) {
    lines(data, out, |block, index, line| {
        let mut f = Fields::new(line);
        let parsed = (|| {
            Some(Record {
                t_us: f.uint(12, false)? * SECOND, // 12 digits of seconds fit i64 in µs
                key_hash: key_hash(f.next()?),
                key_size: f.u32(false)?,
                value_size: f.u32(false)?,
                client: f.u32(false)?,
                op: ops.by_word(f.next()?, 7)?, // every Twitter op is 3 to 7 letters
                ttl_s: f.u32(true)?,
            })
        })();
        if let Some(r) = parsed {
            block.push(index, &r, 1);
        }
    })
}

/// cachemark's own format: `t_us,op,key_hash,key_size,value_size,ttl_s,client[,key]` (the key, when
/// present, is not read: the line's hash is the record's; an empty hash goes to the slow path).
pub fn parse_own(data: &[u8], ops: &Ops, with_keys: bool, out: &mut Block) {
    lines(data, out, |block, index, line| {
        let mut f = Fields::new(line);
        let parsed = (|| {
            let r = Record {
                t_us: f.uint(18, false)?,
                op: ops.by_word(f.next()?, 8)?,
                key_hash: u64_field(f.next()?)?,
                key_size: f.u32(false)?,
                value_size: f.u32(false)?,
                ttl_s: f.u32(false)?,
                client: f.u32(!with_keys)?,
            };
            if with_keys {
                f.last()?; // percent-encoded: any comma in it is a field too many
            }
            Some(r)
        })();
        if let Some(r) = parsed {
            block.push(index, &r, 1);
        }
    })
}

/// Where CacheLib's columns are (from its header): required key, op, size; optional others.
pub struct CachelibColumns {
    pub width: usize,
    pub key: usize,
    pub op: usize,
    pub size: usize,
    pub op_time: Option<usize>,
    pub key_size: Option<usize>,
    pub op_count: Option<usize>,
    pub ttl: Option<usize>,
}

#[derive(Clone, Copy, PartialEq)]
enum Column {
    Ignored,
    Key,
    Op,
    Size,
    OpTime,
    KeySize,
    OpCount,
    Ttl,
}

/// CacheLib's KV replay CSV: lines with exactly the header's number of fields (others, which
/// cachebench may accept, go to the slow path); `op_count` repeats the record.
pub fn parse_cachelib(data: &[u8], ops: &Ops, cols: &CachelibColumns, out: &mut Block) {
    let mut roles = vec![Column::Ignored; cols.width];
    for (k, role) in [
        (Some(cols.key), Column::Key),
        (Some(cols.op), Column::Op),
        (Some(cols.size), Column::Size),
        (cols.op_time, Column::OpTime),
        (cols.key_size, Column::KeySize),
        (cols.op_count, Column::OpCount),
        (cols.ttl, Column::Ttl),
    ] {
        if let Some(k) = k {
            roles[k] = role;
        }
    }
    lines(data, out, |block, index, line| {
        let mut f = Fields::new(line);
        let parsed = (|| {
            let mut key: &[u8] = b"";
            let (mut op, mut size, mut t, mut ks, mut count, mut ttl) = (0, 0, 0, None, 1, 0);
            for (k, &role) in roles.iter().enumerate() {
                let last = k + 1 == roles.len();
                // numbers are read as they are scanned; the other fields are cut at their comma
                match role {
                    Column::Size => size = f.u32(last)?,
                    Column::OpTime => t = f.uint(12, last)? * SECOND,
                    Column::KeySize => ks = Some(f.u32(last)?),
                    Column::OpCount => {
                        count = f.uint(5, last).filter(|n| (1..=MAX_OP_COUNT).contains(n))?
                    }
                    Column::Ttl if f.empty(last) => {} // no TTL
                    Column::Ttl => ttl = f.u32(last)?,
                    _ => {
                        let field = if last { f.last()? } else { f.next()? };
                        match role {
                            Column::Key => key = field,
                            Column::Op => op = ops.exact(field)?,
                            _ => {}
                        }
                    }
                }
            }
            let r = Record {
                t_us: t,
                op,
                key_hash: key_hash(key),
                key_size: ks.unwrap_or(key.len() as u32), // a line is under 1 MiB
                value_size: size,
                ttl_s: ttl,
                client: 0,
            };
            Some((r, count))
        })();
        if let Some((r, count)) = parsed {
            block.push(index, &r, count);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(b: &Block) -> Vec<(u64, u8, u64, u32, u32, u32, u32)> {
        b.records
            .chunks_exact(RECORD_SIZE)
            .map(|r| {
                let u32_at = |i: usize| u32::from_le_bytes(r[i..i + 4].try_into().unwrap());
                (
                    u64::from_le_bytes(r[0..8].try_into().unwrap()),
                    r[8],
                    u64::from_le_bytes(r[9..17].try_into().unwrap()),
                    u32_at(17),
                    u32_at(21),
                    u32_at(25),
                    u32_at(29),
                )
            })
            .collect()
    }

    fn twitter_ops() -> Ops {
        Ops::new(vec![
            (b"get".to_vec(), 0),
            (b"set".to_vec(), 1),
            (b"delete".to_vec(), 2),
        ])
    }

    #[test]
    fn integers_are_plain_digits() {
        let u32_of = |text: &[u8]| Fields::new(text).u32(true);
        assert_eq!(Fields::new(b"007,").uint(10, false), Some(7));
        assert_eq!(Fields::new(b"007").uint(10, false), None); // no comma after it
        assert_eq!(Fields::new(b"7,").uint(10, true), None); // not the last field
        assert_eq!(u32_of(b""), None);
        assert_eq!(u32_of(b"+5"), None);
        assert_eq!(u32_of(b" 5"), None);
        assert_eq!(u32_of(b"12345678901"), None);
        assert_eq!(u32_of(b"4294967295"), Some(u32::MAX));
        assert_eq!(u32_of(b"4294967296"), None);
        assert_eq!(u64_field(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(u64_field(b"18446744073709551616"), None);
        assert_eq!(u64_field(b"000000000000000000001"), None); // 21 digits
    }

    #[test]
    fn twitter_lines_handled_and_left() {
        let data = b"1,k,3,4,5,get,6\r\n\n2,a,b,3,4,5,set,0\n3,k,3,4,5,GET,0\n4,k,3,4,5,get\0,0\n";
        let mut b = Block::default();
        parse_twitter(data, &twitter_ops(), &mut b);
        assert_eq!(b.rows, vec![0, 4]);
        assert_eq!(b.starts.len(), 5);
        assert_eq!((b.starts[0], b.ends[0]), (0, 15));
        assert_eq!((b.starts[1], b.ends[1]), (17, 17));
        let r = records(&b);
        assert_eq!(r[0], (SECOND, 0, key_hash(b"k"), 3, 4, 6, 5));
        assert_eq!(r[1].1, 0); // "get\0" is "get" as one zero-padded word
    }

    #[test]
    fn no_final_newline_is_no_line() {
        let mut b = Block::default();
        parse_twitter(b"1,k,3,4,5,get,6\n2,k,3,4,5,get,6", &twitter_ops(), &mut b);
        assert_eq!((b.rows.len(), b.starts.len()), (1, 1));
    }

    #[test]
    fn own_format_with_keys() {
        let ops = Ops::new(vec![(b"get".to_vec(), 0), (b"get_many".to_vec(), 4)]);
        let data = b"5,get_many,18446744073709551615,1,2,3,4,x%2C\n6,get,,1,2,3,4,x\n";
        let mut b = Block::default();
        parse_own(data, &ops, true, &mut b);
        assert_eq!(b.rows, vec![0]);
        assert_eq!(records(&b)[0], (5, 4, u64::MAX, 1, 2, 3, 4));
    }

    #[test]
    fn cachelib_repeats_and_empty_ttl() {
        let ops = Ops::new(vec![(b"GET".to_vec(), 0), (b"GET_LEASE".to_vec(), 0)]);
        let cols = CachelibColumns {
            width: 5,
            key: 0,
            op: 1,
            size: 2,
            op_time: None,
            key_size: None,
            op_count: Some(3),
            ttl: Some(4),
        };
        let data = b"ab,GET_LEASE,10,2,\nab,GET_LEASX,10,1,\nab,GET,10,0,5\nab,GET,1,1,5\n";
        let mut b = Block::default();
        parse_cachelib(data, &ops, &cols, &mut b);
        assert_eq!(b.rows, vec![0, 0, 3]);
        assert_eq!(records(&b)[0], (0, 0, key_hash(b"ab"), 2, 10, 0, 0));
        assert_eq!(records(&b)[2].5, 5);
    }
}
