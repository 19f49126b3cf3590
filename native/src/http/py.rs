//! The PyO3 layer: `Request`, `RequestParser`, `encode_response`, and the errors' Python form.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};

use super::error::HttpError;
use super::head::Head;
use super::parser::{Limits, Parser};
use super::response::{EncodeError, ResponseHead};
use crate::errors::HttpParseError;

impl From<HttpError> for PyErr {
    fn from(e: HttpError) -> PyErr {
        let status = e.status();
        let err = HttpParseError::new_err(e.to_string());
        Python::attach(|py| {
            // A plain exception instance always accepts a new attribute.
            let _ = err.value(py).setattr(intern!(py, "status"), status);
        });
        err
    }
}

impl From<EncodeError> for PyErr {
    fn from(e: EncodeError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

/// A str from latin-1 bytes (ASCII included) in one CPython call, no UTF-8 round trip.
fn latin1_str<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let len = ffi::Py_ssize_t::try_from(bytes.len()).map_err(|_| PyValueError::new_err("string too long"))?;
    // SAFETY: `bytes` is valid for `len` bytes during the call, which copies them; we hold the
    // GIL (`py`); a null `errors` selects "strict", which cannot fail for latin-1.
    let ptr = unsafe { ffi::PyUnicode_DecodeLatin1(bytes.as_ptr().cast(), len, std::ptr::null()) };
    // SAFETY: `ptr` is a new reference, or null with a Python exception set.
    let obj = unsafe { Bound::from_owned_ptr_or_err(py, ptr)? };
    Ok(obj.cast_into::<PyString>()?)
}

fn method_str<'py>(py: Python<'py>, method: &[u8]) -> PyResult<Bound<'py, PyString>> {
    Ok(match method {
        b"GET" => intern!(py, "GET").clone(),
        b"POST" => intern!(py, "POST").clone(),
        b"PUT" => intern!(py, "PUT").clone(),
        b"DELETE" => intern!(py, "DELETE").clone(),
        b"HEAD" => intern!(py, "HEAD").clone(),
        b"OPTIONS" => intern!(py, "OPTIONS").clone(),
        b"PATCH" => intern!(py, "PATCH").clone(),
        other => latin1_str(py, other)?,
    })
}

fn header_name_str<'py>(py: Python<'py>, name: &[u8]) -> PyResult<Bound<'py, PyString>> {
    Ok(match name {
        b"host" => intern!(py, "host").clone(),
        b"user-agent" => intern!(py, "user-agent").clone(),
        b"accept" => intern!(py, "accept").clone(),
        b"accept-encoding" => intern!(py, "accept-encoding").clone(),
        b"authorization" => intern!(py, "authorization").clone(),
        b"connection" => intern!(py, "connection").clone(),
        b"content-length" => intern!(py, "content-length").clone(),
        b"content-type" => intern!(py, "content-type").clone(),
        b"origin" => intern!(py, "origin").clone(),
        b"upgrade" => intern!(py, "upgrade").clone(),
        b"sec-websocket-key" => intern!(py, "sec-websocket-key").clone(),
        b"sec-websocket-version" => intern!(py, "sec-websocket-version").clone(),
        b"sec-websocket-protocol" => intern!(py, "sec-websocket-protocol").clone(),
        b"idempotency-key" => intern!(py, "idempotency-key").clone(),
        other => latin1_str(py, other)?,
    })
}

#[pyclass(frozen, name = "Request", module = "hongbao_native")]
pub struct PyRequest {
    head: Head,
    body: Py<PyBytes>,
}

#[pymethods]
impl PyRequest {
    #[getter]
    fn method<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        method_str(py, self.head.method().as_bytes())
    }

    #[getter]
    fn target<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        latin1_str(py, self.head.target().as_bytes())
    }

    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        latin1_str(py, self.head.path().as_bytes())
    }

    #[getter]
    fn query<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        latin1_str(py, self.head.query().as_bytes())
    }

    #[getter]
    fn version<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        if self.head.minor_version() == 1 {
            intern!(py, "1.1").clone()
        } else {
            intern!(py, "1.0").clone()
        }
    }

    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items: Vec<Bound<'py, PyTuple>> = self
            .head
            .header_bytes()
            .map(|(n, v)| PyTuple::new(py, [header_name_str(py, n)?, latin1_str(py, v)?]))
            .collect::<PyResult<_>>()?;
        PyList::new(py, items)
    }

    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body.clone_ref(py)
    }

    #[getter]
    fn keep_alive(&self) -> bool {
        self.head.keep_alive()
    }

    #[getter]
    fn websocket(&self) -> bool {
        self.head.websocket()
    }

    fn header<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Option<Bound<'py, PyString>>> {
        let mut found = self
            .head
            .header_bytes()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v);
        match (found.next(), found.next()) {
            (None, _) => Ok(None),
            (Some(only), None) => latin1_str(py, only).map(Some),
            (Some(_), Some(_)) => Ok(self.head.header(name).map(|joined| PyString::new(py, &joined))),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<Request {} {} HTTP/1.{} headers={} body={}B>",
            self.head.method(),
            self.head.target(),
            self.head.minor_version(),
            self.head.header_count(),
            self.body.bind(py).as_bytes().len()
        )
    }
}

#[pyclass(name = "RequestParser", module = "hongbao_native")]
pub struct PyRequestParser {
    inner: Parser,
}

#[pymethods]
impl PyRequestParser {
    #[new]
    #[pyo3(signature = (max_header_size = 8192, max_headers = 64, max_body_size = 1048576))]
    fn new(max_header_size: usize, max_headers: usize, max_body_size: usize) -> Self {
        PyRequestParser {
            inner: Parser::new(Limits {
                max_header_size,
                max_headers,
                max_body_size,
            }),
        }
    }

    fn feed<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let mut made: Vec<PyResult<Py<PyRequest>>> = Vec::new();
        let fed = self.inner.feed_with(data, |head, body| {
            made.push(Py::new(
                py,
                PyRequest {
                    head,
                    body: PyBytes::new(py, body).unbind(),
                },
            ));
        });
        if let Err(e) = fed {
            if made.is_empty() {
                return Err(e.into());
            }
            // The requests completed before the error come out first; the parser stays failed,
            // so the next feed raises the error (the outcome does not depend on the split).
        }
        let made: Vec<Py<PyRequest>> = made.into_iter().collect::<PyResult<_>>()?;
        PyList::new(py, made)
    }

    #[getter]
    fn pending_bytes(&self) -> usize {
        self.inner.pending_bytes()
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    #[getter]
    fn max_header_size(&self) -> usize {
        self.inner.limits().max_header_size
    }

    #[getter]
    fn max_headers(&self) -> usize {
        self.inner.limits().max_headers
    }

    #[getter]
    fn max_body_size(&self) -> usize {
        self.inner.limits().max_body_size
    }

    fn take_continue(&mut self) -> bool {
        self.inner.take_continue()
    }

    fn take_buffered<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.take_buffered())
    }
}

fn add_header(head: &mut ResponseHead, item: &Bound<'_, PyAny>) -> PyResult<()> {
    let pair = item.cast::<PyTuple>()?;
    if pair.len() != 2 {
        return Err(PyValueError::new_err("each header must be a (name, value) pair"));
    }
    let name = pair.get_item(0)?;
    let value = pair.get_item(1)?;
    head.header(name.cast::<PyString>()?.to_str()?, value.cast::<PyString>()?.to_str()?)?;
    Ok(())
}

#[pyfunction(name = "encode_response")]
fn py_encode_response<'py>(
    py: Python<'py>,
    status: &Bound<'py, PyInt>,
    headers: &Bound<'py, PyAny>,
    body: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let status: i64 = status.extract().unwrap_or(i64::MIN);
    let mut head = ResponseHead::new(status, body.len())?;
    if let Ok(list) = headers.cast::<PyList>() {
        for item in list.iter() {
            add_header(&mut head, &item)?;
        }
    } else if headers.is_instance_of::<PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "headers must be a sequence of (name, value) pairs",
        ));
    } else {
        for item in headers.try_iter()? {
            add_header(&mut head, &item?)?;
        }
    }
    let head = head.finish()?;
    PyBytes::new_with(py, head.len() + body.len(), |buf| {
        if let Some((h, b)) = buf.split_at_mut_checked(head.len()) {
            if h.len() == head.len() && b.len() == body.len() {
                h.copy_from_slice(&head);
                b.copy_from_slice(body);
            }
        }
        Ok(())
    })
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRequest>()?;
    m.add_class::<PyRequestParser>()?;
    m.add_function(wrap_pyfunction!(py_encode_response, m)?)?;
    Ok(())
}
