//! One direction of a tapped connection as the recorder sees it: the bytes not parsed yet,
//! and when each segment of them arrived (a request's time is its first byte's).
use std::collections::VecDeque;

/// One direction's unparsed bytes, with the arrival time of each segment in it.
#[derive(Default)]
pub struct Stream {
    buf: Vec<u8>,
    /// Where the unparsed bytes start: consumed bytes are dropped in bulk, not per request,
    /// so a segment of many pipelined requests is not shifted once per request.
    start: usize,
    /// (end offset in `buf`, arrival ns) per segment still (partly) unparsed.
    times: VecDeque<(usize, u64)>,
}

impl Stream {
    pub fn push(&mut self, t_ns: u64, data: &[u8]) {
        self.buf.extend_from_slice(data);
        self.times.push_back((self.buf.len(), t_ns));
    }

    /// The unparsed bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Arrival of the first unparsed byte.
    pub fn first_time(&self) -> u64 {
        self.times.front().map_or(0, |(_, t)| *t)
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        while self
            .times
            .front()
            .is_some_and(|(end, _)| *end <= self.start)
        {
            self.times.pop_front();
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.times.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            for seg in self.times.iter_mut() {
                seg.0 -= self.start;
            }
            self.start = 0;
        }
    }
}
