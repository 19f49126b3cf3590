use pyo3::prelude::*;

pub fn init_pymodule(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
