//! Python exception types shared by the native modules.
//!
//! Each hot-path file keeps its own Rust error enum and converts it to one of these (or a builtin
//! such as ValueError) only at the Python boundary, via `From<...> for PyErr`.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    hongbao_native,
    ProtocolError,
    PyValueError,
    "A WebSocket protocol violation; `.close_code` is the RFC 6455 close code."
);
create_exception!(
    hongbao_native,
    HttpParseError,
    PyValueError,
    "A malformed or oversized HTTP request; `.status` is the HTTP status to answer with."
);
create_exception!(
    hongbao_native,
    AdmissionTableFull,
    PyValueError,
    "The shared admission table has no free slot for a new key."
);

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("HttpParseError", py.get_type::<HttpParseError>())?;
    m.add("AdmissionTableFull", py.get_type::<AdmissionTableFull>())?;
    Ok(())
}
