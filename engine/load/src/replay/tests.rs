//! The replay's spool against the stream it was given: each client's steps in recorded order
//! with their due times, the missed count, and one-line errors.
use super::spool::{self, Head};
use super::*;
use std::fs::OpenOptions;
use std::path::PathBuf;

/// A directory of its own for a test, removed after it.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("cm-replay-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type Request = (u8, u32, u32, u64);

fn write(dir: &Path, requests: &[Request]) {
    let mut ops = Vec::new();
    let mut keys = Vec::new();
    let mut sizes = Vec::new();
    let mut at = Vec::new();
    for &(o, k, s, a) in requests {
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

/// `n` requests over 37 keys, every field distinct enough to catch a mix-up; the due times
/// rise, with ties, and go back once in a while.
fn requests(n: u32) -> Vec<Request> {
    (0..n)
        .map(|i| {
            let at = (i / 3) as u64 * 1000 + if i % 11 == 0 { 7 } else { 0 };
            ((i % 3) as u8, (i * 7919) % 37, 10 + i, at)
        })
        .collect()
}

fn step(&(op, key, size, at): &Request) -> Step {
    Step {
        op: op as u16,
        key: key as u64,
        size,
        at,
    }
}

fn load_with_block(
    dir: &Path,
    clients: usize,
    entries: usize,
    block: usize,
) -> Result<Replay, String> {
    let (file, place) = spool::create(dir)?;
    Replay::load_into(
        dir,
        entries,
        spool::Writer::new(file, place, clients, block),
    )
}

fn read_all(script: &mut Script) -> Vec<Step> {
    let mut steps = Vec::new();
    while let Some(s) = script.peek() {
        steps.push(s);
        script.advance();
    }
    steps
}

#[test]
fn every_client_reads_its_keys_steps_in_recorded_order() {
    let dir = Scratch::new("order");
    let given = requests(5000);
    write(&dir.0, &given);
    for clients in [1, 4, 13] {
        let expected = |g: usize| -> Vec<Step> {
            given
                .iter()
                .map(step)
                .filter(|s| client_of(s.key, clients) == g)
                .collect()
        };
        let default = Replay::load(&dir.0, clients, 3).unwrap();
        for block in [1, 2, 7, 16, spool::block_steps(clients)] {
            let replay = load_with_block(&dir.0, clients, 3, block).unwrap();
            assert_eq!(replay.total(), 5000);
            for g in 0..clients {
                let mut script = replay.script(g);
                assert_eq!(
                    read_all(&mut script),
                    expected(g),
                    "{clients} clients, block {block}"
                );
                assert_eq!(script.total(), expected(g).len() as u64);
                assert_eq!(script.peek(), None);
                script.advance(); // past the end stays there
                assert_eq!((script.peek(), script.error()), (None, None));
            }
        }
        for g in 0..clients {
            assert_eq!(read_all(&mut default.script(g)), expected(g));
        }
    }
    // the spool is unlinked at once: only the arrays are left
    let mut names: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["at.u64", "keys.u32", "ops.u8", "sizes.u32"]);
}

#[test]
fn an_empty_stream_and_a_client_without_steps_have_empty_scripts() {
    let dir = Scratch::new("empty");
    write(&dir.0, &[]);
    let replay = Replay::load(&dir.0, 3, 1).unwrap();
    assert_eq!(replay.total(), 0);
    assert_eq!(replay.script(2).peek(), None);
    write(&dir.0, &[(0, 5, 1, 0)]);
    let replay = Replay::load(&dir.0, 64, 1).unwrap();
    let empty = (0..64)
        .filter(|&g| replay.script(g).peek().is_none())
        .count();
    assert_eq!(empty, 63);
}

#[test]
fn missed_counts_the_steps_due_before_the_deadline_up_to_the_first_that_is_not() {
    let dir = Scratch::new("missed");
    let ats = [0u64, 10, 20, 30, 40, 50, 5, 60, 70, 80];
    let given: Vec<Request> = ats.iter().map(|&at| (0, 1, 1, at)).collect();
    write(&dir.0, &given);
    for block in [1, 3, 4, 240] {
        let replay = load_with_block(&dir.0, 1, 1, block).unwrap();
        for sent in 0..=ats.len() {
            let mut script = replay.script(0);
            for _ in 0..sent {
                script.advance();
            }
            for deadline in [0, 1, 15, 45, 55, 65, 1000] {
                let want = ats[sent..].iter().take_while(|&&at| at < deadline).count() as u64;
                assert_eq!(
                    script.missed_before(deadline),
                    want,
                    "block {block}, {sent} sent, {deadline}"
                );
                // counting moves nothing
                assert_eq!(script.peek().map(|s| s.at), ats.get(sent).copied());
            }
        }
    }
}

fn error_of(dir: &Path, entries: usize) -> String {
    let e = Replay::load(dir, 4, entries).unwrap_err();
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn a_bad_stream_is_a_one_line_error() {
    let dir = Scratch::new("bad");
    write(&dir.0, &requests(100));
    assert!(error_of(&dir.0, 2).contains("request 2 names op entry 2 of 2"));
    std::fs::write(dir.0.join("at.u64"), [0u8; 12]).unwrap();
    assert!(error_of(&dir.0, 3).contains("at.u64 is not a whole number of 8-byte values"));
    std::fs::write(dir.0.join("at.u64"), [0u8; 8 * 99]).unwrap();
    assert_eq!(
        error_of(&dir.0, 3),
        "replay: the four arrays differ in length"
    );
    std::fs::remove_file(dir.0.join("keys.u32")).unwrap();
    assert!(error_of(&dir.0, 3).starts_with("replay: cannot read "));
}

#[test]
fn a_full_disk_is_a_one_line_error() {
    let dir = Scratch::new("full");
    write(&dir.0, &requests(1000));
    let full = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/full")
        .unwrap();
    let writer = spool::Writer::new(full, PathBuf::from("/dev"), 4, 16);
    let e = Replay::load_into(&dir.0, 3, writer).unwrap_err();
    assert!(
        e.starts_with("replay: cannot write the spool file in /dev: "),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn a_spool_that_cannot_be_read_ends_the_script_with_the_reason() {
    let dir = Scratch::new("unreadable");
    let path = dir.0.join("spool");
    let write_only = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let head = Head { first: 0, steps: 5 };
    let mut script = Script::open(Arc::new(write_only), head, 16);
    assert_eq!(script.peek(), None);
    assert_eq!(script.missed_before(u64::MAX), 0);
    assert!(script
        .error()
        .unwrap()
        .starts_with("replay: cannot read the spool file: "));
}

#[test]
fn blocks_are_4_kib_until_there_are_many_clients() {
    assert_eq!(spool::block_steps(1), 240);
    const { assert!(spool::HEADER + 240 * spool::RECORD <= 4096) };
    assert_eq!(spool::block_steps(4000), 240);
    assert_eq!(spool::block_steps(100_000), 16);
}
