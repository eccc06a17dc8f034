//! TLS records sealed into and opened from the engine's own buffers. The epoll backend
//! moves records straight between rustls and the socket (`epoll.rs`); io_uring cannot, as
//! the kernel does the reads and writes: there a SEND writes the records [`seal`] put in
//! `Sock::sending`, and [`open`] takes the records a RECV left in `Sock::tls_in`, so TLS
//! runs on the ring too (one `io_uring_enter` per round instead of a wait, a read and a
//! write per socket). Wire byte counts are plaintext bytes, as on epoll.

use super::conn::{Completion, Sock};
use super::stream::Stream;
use crate::outbuf::OutBuf;
use rustls::ClientConnection;
use std::io::{BufRead, ErrorKind, Write};

/// Most plaintext handed to rustls at once (four full records).
const GATHER: usize = 64 * 1024;
/// Most plaintext sealed for one SEND.
const SEAL_MAX: usize = 4 * GATHER;

/// Hands rustls the plaintext queued in `wbuf` from `wpos` (at most [`GATHER`] bytes);
/// returns how much it took. Full records, not one per piece: a request's pieces (header,
/// value from the filler, trailer) are gathered first, as each record costs a header, a
/// tag and a pass of the cipher; small values go straight from the write buffer.
pub(super) fn feed(
    conn: &mut ClientConnection,
    wbuf: &OutBuf,
    wpos: usize,
    filler: &[u8],
) -> std::io::Result<usize> {
    if wbuf.is_contiguous() {
        let rest = &wbuf.inline()[wpos..];
        return conn.writer().write(&rest[..rest.len().min(GATHER)]);
    }
    let mut plain = Vec::with_capacity(GATHER.min(wbuf.len() - wpos));
    for part in wbuf.slices_from(wpos, filler) {
        let room = GATHER - plain.len();
        plain.extend_from_slice(&part[..part.len().min(room)]);
        if plain.len() == GATHER {
            break;
        }
    }
    conn.writer().write(&plain)
}

/// Why opening records stopped short of the socket's next read.
pub(super) enum End {
    /// The server's `close_notify`, or the connection's end.
    Closed,
    Failed(std::io::Error),
}

/// Moves every byte of plaintext rustls has opened to the end of `rbuf`, copied straight
/// from its buffer (`read` into a slice would need the room zeroed first: 32 KiB of memset
/// per read, 5 % of the thread's CPU at pipeline 16). `Some` once nothing more will come.
pub(super) fn take_plaintext(conn: &mut ClientConnection, rbuf: &mut Vec<u8>) -> Option<End> {
    loop {
        let mut reader = conn.reader();
        match reader.fill_buf() {
            Ok([]) => return Some(End::Closed),
            Ok(chunk) => {
                let n = chunk.len();
                rbuf.extend_from_slice(chunk);
                reader.consume(n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
            Err(e) => return Some(End::Failed(e)),
        }
    }
}

/// rustls's refusal of a record, as the read's error.
pub(super) fn bad_record(e: rustls::Error) -> End {
    End::Failed(std::io::Error::new(
        ErrorKind::InvalidData,
        format!("TLS: {e}"),
    ))
}

/// What a read that opened `got` bytes of plaintext (into the read buffer) and stopped for
/// `end` completed: a failure first, then the bytes (a close after the last reply is seen by
/// the next read), then the close.
pub(super) fn completion(end: Option<End>, got: usize) -> Option<Completion> {
    match (end, got) {
        (Some(End::Failed(e)), _) => Some(Completion::ReadFailed(e)),
        (_, 1..) => Some(Completion::Read(got)),
        (Some(End::Closed), 0) => Some(Completion::Closed),
        (None, 0) => None,
    }
}

/// Seals what `s.wbuf` holds (up to [`SEAL_MAX`] bytes of it), and any record rustls has
/// to send of its own, into `s.sending` for the next SEND; `s.tls_plain` is the plaintext
/// it carries. `s.sending` must be fully sent.
pub(super) fn seal(s: &mut Sock, filler: &[u8]) -> std::io::Result<()> {
    let Some(Stream::Tls(t)) = s.stream.as_mut() else {
        return Ok(());
    };
    s.sending.clear();
    s.spos = 0;
    s.tls_plain = 0;
    loop {
        while t.conn.wants_write() {
            t.conn.write_tls(&mut *s.sending)?;
        }
        if s.wpos >= s.wbuf.len() || s.tls_plain >= SEAL_MAX {
            break;
        }
        let took = feed(&mut t.conn, &s.wbuf, s.wpos, filler)?;
        s.wpos += took;
        s.tls_plain += took;
        if took == 0 && !t.conn.wants_write() {
            break;
        }
    }
    if s.wpos >= s.wbuf.len() {
        s.wbuf.clear();
        s.wpos = 0;
    }
    Ok(())
}

/// Opens the records in `records` (what a RECV read: `s.tls_in`, or a buffer of the ring's
/// pool): their plaintext goes to the end of `rbuf`. `None` while no record is whole yet (the
/// next RECV brings the rest: rustls keeps the part); `Closed` on the server's `close_notify`.
/// Whether rustls has records of its own to send then (a key update's answer) is the caller's
/// to check.
pub(super) fn open(s: &mut Sock, records: &[u8]) -> Option<Completion> {
    s.read_room(); // drops the bytes already parsed
    let start = s.rbuf.len();
    let Some(Stream::Tls(t)) = s.stream.as_mut() else {
        return None;
    };
    let mut input = records;
    let mut end = None;
    while !input.is_empty() {
        if let Err(e) = t.conn.read_tls(&mut input) {
            end = Some(End::Failed(e));
            break;
        }
        if let Err(e) = t.conn.process_new_packets() {
            end = Some(bad_record(e));
            break;
        }
        end = take_plaintext(&mut t.conn, &mut s.rbuf);
        if end.is_some() {
            break;
        }
    }
    completion(end, s.rbuf.len() - start)
}
