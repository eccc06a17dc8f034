//! Python bindings: `StackDistances` (LRU curves, exact or SHARDS) and `PolicySim` (FIFO,
//! SIEVE at given sizes). Both are fed chunks of a trace as little-endian byte buffers
//! (numpy's `.tobytes()`: u64 object ids, u32 sizes), with the GIL released, so a reader
//! can stream a trace of any length through them in constant memory. `parse_*_csv` parse one
//! block of a CSV trace (the fast path of `workload/traces/fastcsv.py`).
use std::cell::RefCell;
use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use crate::csv::{self, Block, CachelibColumns, Ops};
use crate::lru;
use crate::ops;
use crate::policy::{self, Policy};

fn ids_of(ids: &[u8]) -> PyResult<impl Iterator<Item = u64> + '_> {
    if !ids.len().is_multiple_of(8) {
        return Err(PyValueError::new_err(
            "ids must be little-endian u64s (a multiple of 8 bytes)",
        ));
    }
    Ok(ids
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap())))
}

#[pyclass(name = "StackDistances", module = "cachemark._engine")]
struct PyStackDistances {
    inner: lru::StackDistances,
}

#[pymethods]
impl PyStackDistances {
    /// When sampling, `near`: the exact stack's size (0: plain SHARDS-adj, to compare with);
    /// `level`: each denser sample's stack (see `lru::StackDistances`). Defaults: the engine's.
    #[new]
    #[pyo3(signature = (rate = 1.0, seed = 0, warmup = 0, near = None, level = None))]
    fn new(
        rate: f64,
        seed: u64,
        warmup: u64,
        near: Option<usize>,
        level: Option<usize>,
    ) -> PyResult<Self> {
        if !(rate > 0.0 && rate <= 1.0) {
            return Err(PyValueError::new_err("rate must be in (0, 1]"));
        }
        let mut inner = lru::StackDistances::with_stacks(
            rate,
            seed,
            near.unwrap_or(lru::NEAR),
            level.unwrap_or(lru::LEVEL),
        );
        inner.set_warmup(warmup);
        Ok(PyStackDistances { inner })
    }

    /// Feed requests: `ids` u64 LE, `sizes` u32 LE (one per id) or None (size 1 each).
    #[pyo3(signature = (ids, sizes = None))]
    fn feed(&mut self, py: Python<'_>, ids: &[u8], sizes: Option<&[u8]>) -> PyResult<()> {
        let n = ids.len() / 8;
        if let Some(s) = sizes {
            if s.len() != n * 4 {
                return Err(PyValueError::new_err(
                    "sizes must be one little-endian u32 per id",
                ));
            }
        }
        let ids = ids_of(ids)?;
        let inner = &mut self.inner;
        py.allow_threads(move || match sizes {
            Some(s) => inner.access_all(
                ids.zip(s.chunks_exact(4))
                    .map(|(id, size)| (id, u32::from_le_bytes(size.try_into().unwrap()))),
            ),
            None => inner.access_all(ids.map(|id| (id, 1))),
        });
        Ok(())
    }

    fn miss_ratios_by_objects(&self, sizes: Vec<f64>) -> Vec<f64> {
        self.inner.miss_ratios_by_objects(&sizes)
    }

    fn miss_ratios_by_bytes(&self, sizes: Vec<f64>) -> Vec<f64> {
        self.inner.miss_ratios_by_bytes(&sizes)
    }

    /// The standard error of each miss ratio (0 where exact; inf for plain SHARDS).
    fn std_errors_by_objects(&self, sizes: Vec<f64>) -> Vec<f64> {
        self.inner.std_errors_by_objects(&sizes)
    }

    fn std_errors_by_bytes(&self, sizes: Vec<f64>) -> Vec<f64> {
        self.inner.std_errors_by_bytes(&sizes)
    }

    /// Cache sizes (objects) up to which the curve is exact (inf: every size).
    #[getter]
    fn exact_up_to(&self) -> f64 {
        self.inner.exact_up_to()
    }

    /// Whether `objects` and `cold` are counts, not estimates.
    #[getter]
    fn objects_exact(&self) -> bool {
        self.inner.objects_exact()
    }

    #[getter]
    fn requests(&self) -> u64 {
        self.inner.requests
    }

    #[getter]
    fn sampled(&self) -> u64 {
        self.inner.sampled
    }

    /// First requests of an object (a miss at every size), estimated when sampled.
    #[getter]
    fn cold(&self) -> f64 {
        self.inner.cold()
    }

    #[getter]
    fn rate(&self) -> f64 {
        self.inner.rate()
    }

    /// Distinct objects, estimated from the sample unless `objects_exact`.
    #[getter]
    fn objects(&self) -> f64 {
        self.inner.objects()
    }
}

#[pyclass(name = "PolicySim", module = "cachemark._engine")]
struct PyPolicySim {
    caches: Vec<Box<dyn Policy>>,
    misses: Vec<u64>,
    requests: u64,
    warmup: u64,
    seen: u64,
}

#[pymethods]
impl PyPolicySim {
    /// The first `warmup` requests fill the caches without being counted.
    #[new]
    #[pyo3(signature = (policy, sizes, warmup = 0))]
    fn new(policy: &str, sizes: Vec<usize>, warmup: u64) -> PyResult<Self> {
        let caches = sizes
            .iter()
            .map(|&c| {
                policy::make(policy, c)
                    .ok_or_else(|| PyValueError::new_err(format!("unknown policy {policy:?}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyPolicySim {
            misses: vec![0; caches.len()],
            caches,
            requests: 0,
            warmup,
            seen: 0,
        })
    }

    fn feed(&mut self, py: Python<'_>, ids: &[u8]) -> PyResult<()> {
        let ids: Vec<u64> = ids_of(ids)?.collect();
        let n = ids.len() as u64;
        // requests of this chunk still inside the warm-up: they fill the caches, uncounted
        let uncounted = self.warmup.saturating_sub(self.seen).min(n) as usize;
        let (caches, misses) = (&mut self.caches, &mut self.misses);
        py.allow_threads(move || {
            for (cache, miss) in caches.iter_mut().zip(misses.iter_mut()) {
                for (i, &id) in ids.iter().enumerate() {
                    if !cache.access(id) && i >= uncounted {
                        *miss += 1;
                    }
                }
            }
        });
        self.seen += n;
        self.requests += n - uncounted as u64;
        Ok(())
    }

    fn miss_ratios(&self) -> Vec<f64> {
        self.misses
            .iter()
            .map(|&m| {
                if self.requests > 0 {
                    m as f64 / self.requests as f64
                } else {
                    1.0
                }
            })
            .collect()
    }
}

fn column<T: Copy, const N: usize>(
    buf: &[u8],
    n: usize,
    what: &str,
    read: fn([u8; N]) -> T,
) -> PyResult<Vec<T>> {
    if buf.len() != n * N {
        return Err(PyValueError::new_err(format!(
            "{what}: one little-endian {N}-byte value per request"
        )));
    }
    Ok(buf
        .chunks_exact(N)
        .map(|c| read(c.try_into().unwrap()))
        .collect())
}

/// Caches of one policy at several capacities, fed the trace's own ops (see `ops`).
#[pyclass(name = "OpsSim", module = "cachemark._engine")]
struct PyOpsSim {
    sims: Vec<ops::Sim>,
    warmup: u64,
    seen: u64,
}

#[pymethods]
impl PyOpsSim {
    /// `policy`: lru | fifo | sieve | redis | memcached; `capacities` in the sizes' unit;
    /// `samples`: Redis's maxmemory-samples; `chunks`: memcached's chunk size per slab class.
    /// The first `warmup` requests act on the caches without being counted.
    #[new]
    /// `lazy`: expired objects stay until touched or evicted (no expiry sweep).
    #[pyo3(signature = (policy, capacities, samples = 5, chunks = None, warmup = 0, seed = 0, lazy = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        policy: &str,
        capacities: Vec<u64>,
        samples: usize,
        chunks: Option<Vec<u64>>,
        warmup: u64,
        seed: u64,
        lazy: bool,
    ) -> PyResult<Self> {
        let chunks = chunks.unwrap_or_default();
        let sims = capacities
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                ops::Sim::new(policy, c, samples, &chunks, seed.wrapping_add(k as u64 + 1))
                    .map(|mut sim| {
                        sim.set_lazy(lazy);
                        sim
                    })
                    .ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "policy {policy:?}: one of {} (memcached needs its chunk sizes)",
                            ops::POLICIES.join(", ")
                        ))
                    })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyOpsSim {
            sims,
            warmup,
            seen: 0,
        })
    }

    /// Feed requests as columns: t_us i64, op u8 (cachemark's op codes), id u64, size u32,
    /// ttl_us i64 (0: none); each little-endian.
    fn feed(
        &mut self,
        py: Python<'_>,
        t_us: &[u8],
        ops_: &[u8],
        ids: &[u8],
        sizes: &[u8],
        ttl_us: &[u8],
    ) -> PyResult<()> {
        let n = ops_.len();
        let t = column(t_us, n, "t_us", i64::from_le_bytes)?;
        let id = column(ids, n, "ids", u64::from_le_bytes)?;
        let size = column(sizes, n, "sizes", u32::from_le_bytes)?;
        let ttl = column(ttl_us, n, "ttl_us", i64::from_le_bytes)?;
        let reqs: Vec<ops::Req> = (0..n)
            .map(|i| ops::Req {
                t_us: t[i],
                op: ops_[i],
                id: id[i],
                size: size[i],
                ttl_us: ttl[i],
            })
            .collect();
        let uncounted = self.warmup.saturating_sub(self.seen).min(n as u64) as usize;
        let sims = &mut self.sims;
        // each capacity is its own cache: spread them over the cores (two at most: a shared machine)
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 2);
        let per = sims.len().div_ceil(threads).max(1);
        let reqs = &reqs;
        py.allow_threads(move || {
            std::thread::scope(|scope| {
                for part in sims.chunks_mut(per) {
                    scope.spawn(move || {
                        for sim in part.iter_mut() {
                            for (i, r) in reqs.iter().enumerate() {
                                sim.access(r, i >= uncounted);
                            }
                        }
                    });
                }
            })
        });
        self.seen += n as u64;
        Ok(())
    }

    /// Per capacity: (gets, get hits, get bytes, hit bytes, sets, deletes, expired).
    fn counts(&self) -> Vec<(u64, u64, u64, u64, u64, u64, u64)> {
        self.sims
            .iter()
            .map(|s| {
                let c = s.counts;
                (
                    c.gets,
                    c.hits,
                    c.get_bytes,
                    c.hit_bytes,
                    c.sets,
                    c.deletes,
                    c.expired,
                )
            })
            .collect()
    }
}

/// (records as RECORD_DTYPE bytes — a bytearray, so numpy's view of it is writable —, then the line
/// index of each record and every line's start and end offsets as i64s, or three Nones when every
/// line gave exactly one record: nothing is left for the slow path).
type Parsed<'py> = (
    Bound<'py, PyByteArray>,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
);

thread_local! {
    // one block's buffers, reused: fresh ones would cost page faults on every 4 MiB block
    static SCRATCH: RefCell<Block> = RefCell::new(Block::default());
}

fn i64_bytes<'py>(py: Python<'py>, values: &[i64]) -> Bound<'py, PyBytes> {
    PyBytes::new_with(py, values.len() * 8, |out| {
        for (dst, v) in out.chunks_exact_mut(8).zip(values) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    })
    .expect("a bytes object of the right size")
}

/// Runs `parse` on the scratch block with the GIL released, then hands the block to Python.
fn parse_block<'py>(py: Python<'py>, parse: impl FnOnce(&mut Block) + Send) -> Parsed<'py> {
    SCRATCH.with(|cell| {
        let mut block = cell.borrow_mut();
        let block = &mut *block;
        py.allow_threads(|| parse(block));
        let records = PyByteArray::new(py, &block.records);
        if block.all_handled() {
            return (records, None, None, None);
        }
        (
            records,
            Some(i64_bytes(py, &block.rows)),
            Some(i64_bytes(py, &block.starts)),
            Some(i64_bytes(py, &block.ends)),
        )
    })
}

/// One block of Twitter's CSV (whole lines); `ops`: (name, op code) pairs.
#[pyfunction]
fn parse_twitter_csv<'py>(py: Python<'py>, data: &[u8], ops: Vec<(Vec<u8>, u8)>) -> Parsed<'py> {
    let ops = Ops::new(ops);
    parse_block(py, |out| csv::parse_twitter(data, &ops, out))
}

/// One block of the own format's data lines; `with_keys`: the header has the `key` column.
#[pyfunction]
fn parse_own_csv<'py>(
    py: Python<'py>,
    data: &[u8],
    ops: Vec<(Vec<u8>, u8)>,
    with_keys: bool,
) -> Parsed<'py> {
    let ops = Ops::new(ops);
    parse_block(py, |out| csv::parse_own(data, &ops, with_keys, out))
}

/// One block of CacheLib's KV CSV: `index` maps column names to positions (the header's),
/// `width` is the header's number of fields.
#[pyfunction]
fn parse_cachelib_csv<'py>(
    py: Python<'py>,
    data: &[u8],
    ops: Vec<(Vec<u8>, u8)>,
    index: HashMap<String, usize>,
    width: usize,
) -> PyResult<Parsed<'py>> {
    let required = |name: &str| {
        index
            .get(name)
            .copied()
            .ok_or_else(|| PyValueError::new_err(format!("no {name:?} column")))
    };
    let cols = CachelibColumns {
        width,
        key: required("key")?,
        op: required("op")?,
        size: required("size")?,
        op_time: index.get("op_time").copied(),
        key_size: index.get("key_size").copied(),
        op_count: index.get("op_count").copied(),
        ttl: index.get("ttl").copied(),
    };
    if index.values().any(|&k| k >= width) {
        return Err(PyValueError::new_err(
            "a column index beyond the header's width",
        ));
    }
    let ops = Ops::new(ops);
    Ok(parse_block(py, |out| {
        csv::parse_cachelib(data, &ops, &cols, out)
    }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStackDistances>()?;
    m.add_class::<PyPolicySim>()?;
    m.add_class::<PyOpsSim>()?;
    m.add_function(wrap_pyfunction!(parse_twitter_csv, m)?)?;
    m.add_function(wrap_pyfunction!(parse_own_csv, m)?)?;
    m.add_function(wrap_pyfunction!(parse_cachelib_csv, m)?)?;
    Ok(())
}
