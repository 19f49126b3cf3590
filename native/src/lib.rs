//! hongbao_native: the hot paths of hongbao, each in its own file with a plain-Rust API and a
//! thin PyO3 layer. This file only registers the Python module.

pub mod admission;
pub mod chacha;
pub mod errors;
pub mod http;
pub mod order_id;
pub mod routing;
pub mod split;
pub mod ws_frame;

use pyo3::prelude::*;
use pyo3::types::PyList;

/// "release" or "debug": benchmarks refuse to run on a debug build.
const BUILD_PROFILE: &str = if cfg!(debug_assertions) { "debug" } else { "release" };

/// The hot paths of hongbao: lucky split, order ids, routing, admission, WebSocket and HTTP framing.
#[pymodule]
fn hongbao_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("build_profile", BUILD_PROFILE)?;
    errors::init_pymodule(m)?;
    split::init_pymodule(m)?;
    order_id::init_pymodule(m)?;
    routing::init_pymodule(m)?;
    admission::init_pymodule(m)?;
    ws_frame::init_pymodule(m)?;
    http::init_pymodule(m)?;
    let mut names: Vec<String> = vec!["__version__".to_owned()];
    for key in m.dict().keys() {
        let name: String = key.extract()?;
        if !name.starts_with('_') {
            names.push(name);
        }
    }
    names.sort();
    m.add("__all__", PyList::new(m.py(), names)?)?;
    Ok(())
}
