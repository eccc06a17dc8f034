//! One client's script read back from the spool a block at a time: the worker takes the
//! next step from memory (`peek`, `advance`), and reads the next block only when one is
//! used up, every few hundred steps.
use super::spool::{self, Head, HEADER, RECORD};
use super::Step;
use std::fs::File;
use std::sync::Arc;

/// A client's place in its script: the block read last and the next step in it.
#[derive(Debug)]
pub struct Script {
    spool: Arc<File>,
    /// The current block, header included; empty once the script has ended.
    block: Vec<u8>,
    /// The next step's record in `block`.
    pos: usize,
    /// Where the next block is, and the steps not read yet.
    next: u64,
    unread: u64,
    block_steps: usize,
    steps: u64,
    /// Why the script ended early: the spool could not be read.
    error: Option<String>,
}

impl Script {
    pub(super) fn open(spool: Arc<File>, head: Head, block_steps: usize) -> Script {
        let mut script = Script {
            spool,
            block: Vec::new(),
            pos: 0,
            next: head.first,
            unread: head.steps,
            block_steps,
            steps: head.steps,
            error: None,
        };
        script.refill();
        script
    }

    /// The next step to send; None once all were.
    #[inline]
    pub fn peek(&self) -> Option<Step> {
        self.has_next()
            .then(|| spool::decode(&self.block[self.pos..self.pos + RECORD]))
    }

    /// Whether a step is left to send (`peek` would give one).
    #[inline]
    pub fn has_next(&self) -> bool {
        self.pos < self.block.len()
    }

    /// Moves on to the step after the one `peek` gave.
    #[inline]
    pub fn advance(&mut self) {
        self.pos += RECORD;
        if self.pos >= self.block.len() {
            self.refill();
        }
    }

    /// Reads the next block (or ends the script: none left, or the spool failed).
    #[cold]
    fn refill(&mut self) {
        let n = self.unread.min(self.block_steps as u64) as usize;
        self.pos = HEADER;
        if n == 0 {
            self.block.clear();
            return;
        }
        match spool::read_block(&self.spool, self.next, n, &mut self.block) {
            Ok(next) => {
                self.next = next;
                self.unread -= n as u64;
            }
            Err(e) => self.fail(e),
        }
    }

    #[cold]
    fn fail(&mut self, e: std::io::Error) {
        self.note(e);
        self.block.clear();
        self.unread = 0;
    }

    #[cold]
    fn note(&mut self, e: std::io::Error) {
        self.error
            .get_or_insert_with(|| format!("replay: cannot read the spool file: {e}"));
    }

    /// How many of the steps not sent yet fall due before `deadline` (ns after the phase's
    /// start), counted in order up to the first that does not: the open loop's `missed`.
    /// Reads the rest of the script; the position stays where it is.
    pub fn missed_before(&mut self, deadline: u64) -> u64 {
        let due = |record: &[u8]| spool::decode(record).at < deadline;
        let tail = self.block.get(self.pos..).unwrap_or_default();
        let mut missed = tail.chunks_exact(RECORD).take_while(|r| due(r)).count() as u64;
        if missed < (tail.len() / RECORD) as u64 {
            return missed;
        }
        let (mut next, mut unread) = (self.next, self.unread);
        let mut block = Vec::new();
        while unread > 0 {
            let n = unread.min(self.block_steps as u64) as usize;
            match spool::read_block(&self.spool, next, n, &mut block) {
                Ok(after) => (next, unread) = (after, unread - n as u64),
                Err(e) => {
                    self.note(e);
                    return missed;
                }
            }
            let due_here = block[HEADER..]
                .chunks_exact(RECORD)
                .take_while(|r| due(r))
                .count();
            missed += due_here as u64;
            if due_here < n {
                break;
            }
        }
        missed
    }

    /// The steps in the whole script.
    pub fn total(&self) -> u64 {
        self.steps
    }

    /// Why the script ended before its last step, if it did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}
