//! The proxy's tokio runtime, built so that a host that refuses its threads is an error.
//!
//! tokio panics when the OS refuses a runtime's first worker thread (a thread or memory
//! limit, or a thread count far beyond the host's). Here that is caught, its message kept
//! off stderr, and returned as one error line for the caller to print.

use std::any::Any;
use std::cell::Cell;
use std::io;
use std::panic;
use std::sync::Once;

use tokio::runtime::{Builder, Runtime};

/// More proxy threads than this is a typo, not a load: each direction of a connection is one
/// task, and a few threads move more than a NIC carries.
pub const MAX_THREADS: usize = 64;

thread_local! {
    /// Set while this thread builds a runtime: its panics are caught and said by the caller.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// A multi-threaded runtime of `threads` workers, or why the host would not start it.
pub fn build(threads: usize) -> io::Result<Runtime> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("proxy threads must be 1 to {MAX_THREADS}, not {threads}"),
        ));
    }
    let make = || {
        Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("cachemark-proxy")
            .enable_io()
            .enable_time()
            .build()
    };
    match quietly(|| panic::catch_unwind(make)) {
        Ok(built) => built,
        Err(payload) => Err(io::Error::other(format!(
            "the host refused the proxy's threads ({}): its thread or memory limit",
            text(&*payload)
        ))),
    }
}

/// Runs `f` with this thread's panics kept off stderr (the default hook still speaks for
/// every other thread and every other time).
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                default(info);
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let out = f();
    QUIET.with(|q| q.set(false));
    out
}

fn text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_count_out_of_range_is_an_error() {
        for threads in [0, MAX_THREADS + 1, 100_000] {
            let err = build(threads).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(err.to_string().contains("1 to 64"), "{err}");
        }
        assert!(build(2).is_ok());
    }

    #[test]
    fn a_panic_while_quiet_is_caught_and_said_once() {
        let caught = quietly(|| panic::catch_unwind(|| panic!("no threads for you")));
        assert_eq!(text(&*caught.unwrap_err()), "no threads for you");
        assert!(!QUIET.with(Cell::get));
    }
}
