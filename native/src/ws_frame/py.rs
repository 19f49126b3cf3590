//! The PyO3 layer: `accept_key`, `encode_frame`, `encode_close`, `Frame`, `FrameDecoder`, and the
//! errors' Python form.

use std::sync::{Mutex, TryLockError};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use super::close::close_payload;
use super::decoder::FrameDecoder;
use super::error::{DecodeError, EncodeError};
use super::frame::{encode_frame, FrameHead, OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT};
use super::handshake::{accept_key, AcceptKeyError};
use crate::errors::ProtocolError;

impl From<AcceptKeyError> for PyErr {
    fn from(e: AcceptKeyError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

impl From<EncodeError> for PyErr {
    fn from(e: EncodeError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

impl From<DecodeError> for PyErr {
    fn from(e: DecodeError) -> PyErr {
        Python::attach(|py| {
            let err = ProtocolError::new_err(e.to_string());
            match err.value(py).setattr("close_code", e.close_code()) {
                Ok(()) => err,
                Err(set_err) => set_err,
            }
        })
    }
}

fn new_bytes<'py>(py: Python<'py>, s: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    // SAFETY: `s` is a valid slice for the duration of the call (its length fits isize, as every
    // slice's does); PyBytes_FromStringAndSize copies it and returns a new reference or NULL with
    // an exception set, which from_owned_ptr_or_err turns into Err.
    unsafe {
        let ptr = pyo3::ffi::PyBytes_FromStringAndSize(s.as_ptr().cast(), s.len() as pyo3::ffi::Py_ssize_t);
        Ok(Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked())
    }
}

/// Runs `f` over the bytes of a bytes-like object: `bytes` without copying, any other buffer
/// (bytearray, memoryview, ...) through one copy.
fn with_buffer<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    let buf = PyBuffer::<u8>::get(obj)?;
    let v = buf.to_vec(obj.py())?;
    Ok(f(&v))
}

#[pyfunction(name = "accept_key")]
#[pyo3(signature = (sec_websocket_key))]
fn accept_key_py(sec_websocket_key: &str) -> PyResult<String> {
    Ok(accept_key(sec_websocket_key)?)
}

#[pyfunction(name = "encode_frame")]
#[pyo3(signature = (opcode, payload, *, fin = true, mask_key = None, rsv1 = false))]
fn encode_frame_py<'py>(
    py: Python<'py>,
    opcode: i64,
    payload: &Bound<'py, PyAny>,
    fin: bool,
    mask_key: Option<&[u8]>,
    rsv1: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    with_buffer(payload, |p| {
        let head = FrameHead::new(opcode, p.len(), fin, rsv1, mask_key)?;
        PyBytes::new_with(py, head.encoded_len(), |out| {
            if head.write_into(out, p) {
                Ok(())
            } else {
                Err(PyRuntimeError::new_err("frame length mismatch"))
            }
        })
    })?
}

#[pyfunction(name = "encode_close")]
#[pyo3(signature = (code, reason = "", *, mask_key = None))]
fn encode_close_py<'py>(
    py: Python<'py>,
    code: i64,
    reason: &str,
    mask_key: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let payload = close_payload(code, reason)?;
    let bytes = encode_frame(i64::from(OP_CLOSE), &payload, true, false, mask_key)?;
    new_bytes(py, &bytes)
}

/// A decoded message or control frame.
#[pyclass(frozen, module = "hongbao_native", name = "Frame")]
pub struct PyFrame {
    #[pyo3(get)]
    opcode: u8,
    #[pyo3(get)]
    payload: Py<PyBytes>,
    #[pyo3(get)]
    close_code: Option<u16>,
    #[pyo3(get)]
    close_reason: String,
}

#[pymethods]
impl PyFrame {
    #[getter]
    fn text<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        if self.opcode != OP_TEXT {
            return Err(PyValueError::new_err(format!(
                "frame with opcode {} is not a text message",
                self.opcode
            )));
        }
        let s = std::str::from_utf8(self.payload.as_bytes(py))
            .map_err(|_| PyValueError::new_err("text payload is not valid UTF-8"))?;
        Ok(PyString::new(py, s))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let n = self.payload.as_bytes(py).len();
        match self.close_code {
            Some(c) => format!(
                "Frame(opcode={}, close_code={c}, close_reason={:?})",
                self.opcode, self.close_reason
            ),
            None => format!("Frame(opcode={}, payload=<{n} bytes>)", self.opcode),
        }
    }
}

/// Incremental frame decoder; `feed` is not re-entrant (concurrent use raises RuntimeError).
#[pyclass(frozen, module = "hongbao_native", name = "FrameDecoder")]
pub struct PyFrameDecoder {
    inner: Mutex<FrameDecoder>,
    #[pyo3(get)]
    max_frame_size: u64,
    #[pyo3(get)]
    max_message_size: u64,
    #[pyo3(get)]
    require_mask: bool,
}

#[pymethods]
impl PyFrameDecoder {
    #[new]
    #[pyo3(signature = (max_frame_size, max_message_size, require_mask = true))]
    fn new(max_frame_size: u64, max_message_size: u64, require_mask: bool) -> Self {
        Self {
            inner: Mutex::new(FrameDecoder::new(max_frame_size, max_message_size, require_mask)),
            max_frame_size,
            max_message_size,
            require_mask,
        }
    }

    #[pyo3(signature = (data))]
    fn feed<'py>(&self, py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let mut dec = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err("FrameDecoder.feed called concurrently"))
            }
            Err(TryLockError::Poisoned(_)) => {
                return Err(PyRuntimeError::new_err("FrameDecoder is poisoned by an earlier panic"))
            }
        };
        let mut out: Vec<Py<PyFrame>> = Vec::new();
        let mut py_err: Option<PyErr> = None;
        let res = with_buffer(data, |d| {
            dec.feed(d, |ev| {
                if py_err.is_some() {
                    return;
                }
                let made = new_bytes(py, ev.payload).and_then(|payload| {
                    Py::new(
                        py,
                        PyFrame {
                            opcode: ev.opcode,
                            payload: payload.unbind(),
                            close_code: ev.close_code,
                            close_reason: ev.close_reason.to_owned(),
                        },
                    )
                });
                match made {
                    Ok(f) => out.push(f),
                    Err(e) => py_err = Some(e),
                }
            })
        })?;
        drop(dec);
        res?;
        if let Some(e) = py_err {
            return Err(e);
        }
        PyList::new(py, out)
    }

    /// True once a feed has raised ProtocolError.
    #[getter]
    fn failed(&self) -> PyResult<bool> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g.failed().is_some()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err("FrameDecoder is in use")),
            Err(TryLockError::Poisoned(_)) => Ok(true),
        }
    }
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("OP_CONT", OP_CONT)?;
    m.add("OP_TEXT", OP_TEXT)?;
    m.add("OP_BINARY", OP_BINARY)?;
    m.add("OP_CLOSE", OP_CLOSE)?;
    m.add("OP_PING", OP_PING)?;
    m.add("OP_PONG", OP_PONG)?;
    m.add_function(wrap_pyfunction!(accept_key_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_frame_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_close_py, m)?)?;
    m.add_class::<PyFrame>()?;
    m.add_class::<PyFrameDecoder>()?;
    Ok(())
}
