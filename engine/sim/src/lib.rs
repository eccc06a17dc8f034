//! cachemark's cache simulator: miss-ratio curves from a key stream, for `cachemark size`.
//! `lru` (exact stack distances and SHARDS sampling, one pass for every size), `policy`
//! (FIFO, SIEVE simulated per size), `ops` (byte-capacity caches under the trace's own ops —
//! cache-aside gets, sets, deletes, TTLs — for LRU, FIFO, SIEVE, Redis and memcached; Redis's
//! eviction in `redis_evict`, what they share in `store`), `csv` (trace CSV blocks parsed in one
//! pass, for the trace reader), `python` (the bindings), `mem` (prefetching and huge pages for
//! the large tables).

pub mod csv;
pub mod fenwick;
pub mod lru;
pub mod mem;
pub mod ops;
pub mod policy;
pub mod python;
mod redis_evict;
mod store;
