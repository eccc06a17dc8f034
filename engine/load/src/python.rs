//! The PyO3 surface of the load engine: `run_load(config_json) -> result_json` and
//! the `Histogram` class (the same HDR histogram the engine records into, offered to
//! the Python workers so both sides produce identical, mergeable histograms).

use crate::config::Config;
use crate::engine::{self, RunError};
use crate::hist::{self, Hist};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyConnectionError, PyOSError, PyValueError};
use pyo3::prelude::*;
use std::time::{Duration, Instant};

/// Runs one load test described by a JSON config; returns the JSON result.
///
/// The GIL is released while the load runs; signals are checked about every 100 ms,
/// and Ctrl-C (or any signal whose Python handler raises) ends the run early with
/// `"interrupted": true` in the result. `progress`, when given, is called as often with the
/// requests answered so far, and ends the run the same way when it returns true (or raises).
/// The on-error policy may end it early too, with its reason in `"stopped_on_errors"`.
/// Raises ValueError for a bad config and ConnectionError when a server cannot be
/// reached, refuses the credentials, or does not speak the protocol.
#[pyfunction]
#[pyo3(signature = (config_json, progress=None))]
fn run_load(py: Python<'_>, config_json: &str, progress: Option<PyObject>) -> PyResult<String> {
    let plan = Config::from_json(config_json)
        .and_then(|c| c.plan())
        .map_err(PyValueError::new_err)?;
    let result = py.allow_threads(|| {
        let mut last = Instant::now();
        let mut stopped = false;
        let mut poll = |done: u64| {
            if !stopped && last.elapsed() >= Duration::from_millis(100) {
                last = Instant::now();
                stopped = Python::with_gil(|py| {
                    py.check_signals().is_err()
                        || progress.as_ref().is_some_and(|told| {
                            told.call1(py, (done,))
                                .and_then(|stop| stop.is_truthy(py))
                                .unwrap_or(true)
                        })
                });
            }
            stopped
        };
        engine::run(&plan, &mut poll)
    });
    match result {
        Ok(result) => {
            Ok(serde_json::to_string(&result).expect("a result serialises: string keys only"))
        }
        Err(RunError::Spec(m)) => Err(PyValueError::new_err(m)),
        Err(RunError::Unavailable(m)) => Err(PyConnectionError::new_err(m)),
        Err(RunError::Host(m)) => Err(PyOSError::new_err(m)),
    }
}

/// An HDR histogram of nanoseconds, 1 ns … 60 s, 3 significant digits (docs/contracts.md).
/// Values outside the range are clamped into it.
#[pyclass(name = "Histogram", module = "cachemark._engine")]
pub struct PyHistogram {
    h: Hist,
}

fn check(v: i64) -> PyResult<u64> {
    if v < 0 {
        return Err(PyValueError::new_err(format!(
            "histogram values are non-negative nanoseconds, got {v}"
        )));
    }
    Ok(v as u64)
}

#[pymethods]
impl PyHistogram {
    #[new]
    fn new() -> Self {
        PyHistogram {
            h: hist::new_hist(),
        }
    }

    /// Records one value (ns).
    fn record(&mut self, value: i64) -> PyResult<()> {
        hist::record(&mut self.h, check(value)?);
        Ok(())
    }

    /// Records many values: any buffer of int64 (e.g. a numpy array) or an iterable of ints.
    fn record_many(&mut self, py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<()> {
        let vals: Vec<i64> = match PyBuffer::<i64>::get(values) {
            Ok(buf) => buf.to_vec(py)?,
            Err(_) => values.extract()?,
        };
        for v in &vals {
            check(*v)?;
        }
        for v in vals {
            hist::record(&mut self.h, v as u64);
        }
        Ok(())
    }

    /// Adds every count of `other` into this histogram.
    fn add(&mut self, other: PyRef<'_, PyHistogram>) -> PyResult<()> {
        self.h
            .add(&other.h)
            .map_err(|e| PyValueError::new_err(format!("{e:?}")))
    }

    /// The standard V2-deflate base64 form.
    fn encode(&self) -> String {
        hist::encode(&self.h)
    }

    /// Reads any V2 / V2-deflate base64 histogram (e.g. from the `hdrh` package).
    #[staticmethod]
    fn decode(text: &str) -> PyResult<PyHistogram> {
        hist::decode(text)
            .map(|h| PyHistogram { h })
            .map_err(PyValueError::new_err)
    }

    #[getter]
    fn count(&self) -> u64 {
        self.h.len()
    }
    #[getter]
    fn max(&self) -> u64 {
        self.h.max()
    }
    #[getter]
    fn min(&self) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.h.min()
        }
    }
    #[getter]
    fn mean(&self) -> f64 {
        self.h.mean()
    }

    /// The value at quantile `q` in [0, 1].
    fn value_at_quantile(&self, q: f64) -> PyResult<u64> {
        if !(0.0..=1.0).contains(&q) {
            return Err(PyValueError::new_err("quantile must be within 0..1"));
        }
        Ok(self.h.value_at_quantile(q))
    }

    fn __len__(&self) -> usize {
        self.h.len() as usize
    }

    fn __repr__(&self) -> String {
        format!(
            "Histogram(count={}, p50={}, max={})",
            self.h.len(),
            self.h.value_at_quantile(0.5),
            self.h.max()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_load, m)?)?;
    m.add_class::<PyHistogram>()?;
    Ok(())
}
