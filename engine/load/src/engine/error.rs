//! Why a run could not happen: what the engine's callers (the Python glue, `topology.rs`'s slot
//! map) return, in a module below both so that neither imports the orchestration for it.

/// Why a run could not happen.
#[derive(Debug)]
pub enum RunError {
    /// The configuration is invalid.
    Spec(String),
    /// A server cannot be reached, refuses our credentials, or speaks another protocol.
    Unavailable(String),
    /// The host refused what the run needs of it: a load thread (its thread or memory limit).
    Host(String),
}
