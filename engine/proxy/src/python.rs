//! The `cachemark._engine.Proxy` Python class: a thin handle on [`crate::Proxy`].
//!
//! The proxy runs on its own runtime threads and never takes the GIL; every method here
//! releases the GIL around anything that can block (starting, closing).
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::capture::{Capture, Protocol, DEFAULT_TAP_BYTES};
use crate::{Config, Proxy};

/// Proxy(upstream, config_json="{}", listen="127.0.0.1:0", threads=1, capture=None, capture_buffer=64 MiB)
///
/// A latency/bandwidth/fault proxy in front of ``upstream`` ("host:port"), listening on
/// ``listen``. ``config_json`` follows the schema in docs/network.md. Closes on ``close()``,
/// on garbage collection, and when used as a context manager. ``capture="resp"`` or
/// ``"memcached"`` also records the op stream: read it with ``drain_capture()``; the tap holds
/// up to ``capture_buffer`` bytes between drains, and drops (and counts) what would not fit.
#[pyclass(module = "cachemark._engine", name = "Proxy")]
pub struct PyProxy {
    inner: Mutex<Option<Proxy>>,
    host: String,
    port: u16,
    upstream: String,
    capture: Option<Arc<Capture>>,
}

fn parse(config_json: &str) -> PyResult<Config> {
    Config::from_json(config_json).map_err(PyValueError::new_err)
}

impl PyProxy {
    fn with<T>(&self, f: impl FnOnce(&Proxy) -> T) -> PyResult<T> {
        let guard = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("proxy lock poisoned"))?;
        match guard.as_ref() {
            Some(p) => Ok(f(p)),
            None => Err(PyRuntimeError::new_err("proxy is closed")),
        }
    }
}

#[pymethods]
impl PyProxy {
    #[new]
    #[pyo3(signature = (upstream, config_json = "{}", listen = "127.0.0.1:0", threads = 1, capture = None,
                        capture_buffer = DEFAULT_TAP_BYTES))]
    fn new(
        py: Python<'_>,
        upstream: &str,
        config_json: &str,
        listen: &str,
        threads: usize,
        capture: Option<&str>,
        capture_buffer: usize,
    ) -> PyResult<Self> {
        let cfg = parse(config_json)?;
        let capture = match capture {
            Some(name) => Some(Arc::new(Capture::new(
                Protocol::parse(name).map_err(PyValueError::new_err)?,
                capture_buffer,
            ))),
            None => None,
        };
        let tap = capture.as_ref().map(|c| c.tap.clone());
        let proxy = py
            .allow_threads(|| Proxy::start_with_tap(listen, upstream, cfg, threads, tap))
            .map_err(|e| PyOSError::new_err(format!("proxy for {upstream}: {e}")))?;
        let local = proxy.local_addr();
        Ok(PyProxy {
            inner: Mutex::new(Some(proxy)),
            host: local.ip().to_string(),
            port: local.port(),
            upstream: upstream.to_string(),
            capture,
        })
    }

    /// drain_capture(last=False, raw_keys=False) -> (lines, count, per_op)
    ///
    /// The requests recorded since the last drain, in time order, as ``count`` lines of the
    /// ``#cachemark-trace/1`` format (``bytes``; keys hashed, and kept percent-encoded when
    /// ``raw_keys``), and the count per op code. A read whose reply has not arrived is held
    /// back (and everything after it); ``last=True`` (after ``close()``) hands out everything.
    /// Works after ``close()``.
    #[pyo3(signature = (last = false, raw_keys = false))]
    fn drain_capture<'py>(
        &self,
        py: Python<'py>,
        last: bool,
        raw_keys: bool,
    ) -> PyResult<(Bound<'py, PyBytes>, usize, Vec<u64>)> {
        let capture = self
            .capture
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("this proxy does not capture"))?;
        let d = py.allow_threads(move || capture.drain(last, raw_keys));
        Ok((PyBytes::new(py, &d.lines), d.count, d.per_op.to_vec()))
    }

    /// Capture counters: requests parsed, records, other (not cache ops), connections,
    /// unparsed connections, and the segments/bytes dropped because drains fell behind.
    fn capture_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let capture = self
            .capture
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("this proxy does not capture"))?;
        let c = capture.counts();
        let d = PyDict::new(py);
        d.set_item("requests", c.requests)?;
        d.set_item("records", c.records)?;
        d.set_item("other", c.other)?;
        d.set_item("connections", c.connections)?;
        d.set_item("unparsed_connections", c.unparsed_connections)?;
        d.set_item(
            "dropped_segments",
            capture
                .tap
                .dropped_segments
                .load(std::sync::atomic::Ordering::Relaxed),
        )?;
        d.set_item(
            "dropped_bytes",
            capture
                .tap
                .dropped_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
        )?;
        Ok(d)
    }

    /// "host:port" the proxy listens on.
    #[getter]
    fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    #[getter]
    fn host(&self) -> String {
        self.host.clone()
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    #[getter]
    fn upstream(&self) -> String {
        self.upstream.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().map(|g| g.is_none()).unwrap_or(true)
    }

    /// Replace the whole configuration; applies to every segment arriving from now on.
    /// A fault in the new config is (re)scheduled on every open connection.
    fn set_config(&self, config_json: &str) -> PyResult<()> {
        let cfg = parse(config_json)?;
        self.with(|p| p.set_config(cfg))
    }

    /// Counters: connections, bytes each way, faults fired, and the delay accuracy.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(|p| p.stats())?;
        let d = PyDict::new(py);
        d.set_item("connections_total", s.connections_total)?;
        d.set_item("connections_active", s.connections_active)?;
        d.set_item("bytes_up", s.bytes_up)?;
        d.set_item("bytes_down", s.bytes_down)?;
        d.set_item("bytes_dropped", s.bytes_dropped)?;
        d.set_item("upstream_errors", s.upstream_errors)?;
        let faults = PyDict::new(py);
        faults.set_item("reset", s.faults_reset)?;
        faults.set_item("blackhole", s.faults_blackhole)?;
        faults.set_item("stall", s.faults_stall)?;
        d.set_item("faults_fired", faults)?;
        d.set_item("segments_delayed", s.segments_delayed)?;
        d.set_item("release_error_mean_ns", s.release_error_mean_ns)?;
        d.set_item("release_error_max_ns", s.release_error_max_ns)?;
        d.set_item("release_error_min_ns", s.release_error_min_ns)?;
        // {"<=0us": n, "<=10us": n, ..., ">10000us": n}: how late delayed segments left.
        let late = PyDict::new(py);
        for (i, count) in s.release_late.iter().enumerate() {
            let label = match crate::shared::LATE_EDGES_US.get(i) {
                Some(edge) => format!("<={edge}us"),
                None => format!(
                    ">{}us",
                    crate::shared::LATE_EDGES_US[crate::shared::LATE_EDGES_US.len() - 1]
                ),
            };
            late.set_item(label, count)?;
        }
        d.set_item("release_late", late)?;
        d.set_item("timer_wake_lateness_ns", s.wake_lateness_ns)?;
        Ok(d)
    }

    /// Stop listening and close every connection. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self
            .inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("proxy lock poisoned"))?
            .take();
        if let Some(mut p) = taken {
            py.allow_threads(move || p.close());
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!(
            "<Proxy {}:{} -> {} ({state})>",
            self.host, self.port, self.upstream
        )
    }
}

/// Called by the `cachemark._engine` glue.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProxy>()
}
