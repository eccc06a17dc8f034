//! The `cachemark._engine` Python module: only glue. Each library crate registers
//! its own classes and functions, so the load engine and the proxy evolve apart.
use pyo3::prelude::*;

#[pymodule]
fn _engine(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    cachemark_load::python::register(m)?;
    cachemark_proxy::python::register(m)?;
    cachemark_sim::python::register(m)?;
    Ok(())
}
