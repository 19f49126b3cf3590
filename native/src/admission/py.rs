//! The PyO3 layer: `AdmissionTable`, `RateLimiter`, and the errors' Python form.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;

use super::error::{AdmissionError, Result};
use super::rate::{RateLimiter, MAX_BURST};
use super::table::{AdmissionTable, MAX_CAPACITY};
use crate::errors::AdmissionTableFull;

impl From<AdmissionError> for PyErr {
    fn from(e: AdmissionError) -> PyErr {
        match e {
            AdmissionError::Io(io) => io.into(),
            AdmissionError::TableFull { .. } => AdmissionTableFull::new_err(e.to_string()),
            other => PyValueError::new_err(other.to_string()),
        }
    }
}

/// A Python int of any size, saturated to i64: out-of-range values get this module's ValueError,
/// never OverflowError; non-ints still raise TypeError.
#[derive(Clone, Copy)]
struct AnyInt {
    value: i64,
    exact: bool,
}

impl AnyInt {
    const ONE: AnyInt = AnyInt { value: 1, exact: true };

    fn in_range(self, what: &str, lo: i64, hi: i64) -> Result<i64> {
        if self.exact && (lo..=hi).contains(&self.value) {
            return Ok(self.value);
        }
        let got = if self.exact {
            self.value.to_string()
        } else {
            "an int beyond 64 bits".to_owned()
        };
        Err(AdmissionError::InvalidArgument(format!(
            "{what} must be in [{lo}, {hi}], got {got}"
        )))
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for AnyInt {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        match obj.extract::<i64>() {
            Ok(value) => Ok(AnyInt { value, exact: true }),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                let value = if obj.lt(0)? { i64::MIN } else { i64::MAX };
                Ok(AnyInt { value, exact: false })
            }
            Err(e) => Err(e),
        }
    }
}

const PID_MAX: i64 = libc::pid_t::MAX as i64;

#[pyclass(frozen, name = "AdmissionTable", module = "hongbao_native")]
pub struct PyAdmissionTable {
    inner: AdmissionTable,
}

#[pymethods]
impl PyAdmissionTable {
    #[staticmethod]
    fn create(name: &str, capacity: AnyInt) -> PyResult<Self> {
        let capacity = capacity.in_range("capacity", 1, i64::from(MAX_CAPACITY))?;
        Ok(Self {
            inner: AdmissionTable::create(name, capacity as u32)?,
        })
    }

    #[staticmethod]
    fn attach(name: &str) -> PyResult<Self> {
        Ok(Self {
            inner: AdmissionTable::attach(name)?,
        })
    }

    fn unlink(&self) -> PyResult<()> {
        Ok(self.inner.unlink()?)
    }

    fn try_enter(&self, key: &str, limit: AnyInt) -> PyResult<bool> {
        let limit = limit.in_range("limit", 0, i64::from(u32::MAX))?;
        Ok(self.inner.try_enter(key, limit as u32)?)
    }

    fn leave(&self, key: &str) -> PyResult<()> {
        Ok(self.inner.leave(key)?)
    }

    fn in_flight(&self, key: &str) -> u64 {
        self.inner.in_flight(key)
    }

    fn reclaim(&self, pid: AnyInt) -> PyResult<u64> {
        let pid = pid.in_range("pid", 1, PID_MAX)?;
        Ok(self.inner.reclaim(pid as u32))
    }

    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    #[getter]
    fn capacity(&self) -> u32 {
        self.inner.capacity()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "AdmissionTable(name='{}', capacity={})",
            self.inner.name(),
            self.inner.capacity()
        )
    }
}

#[pyclass(frozen, name = "RateLimiter", module = "hongbao_native")]
pub struct PyRateLimiter {
    inner: RateLimiter,
}

#[pymethods]
impl PyRateLimiter {
    #[staticmethod]
    fn create(name: &str, rate_per_second: f64, burst: AnyInt) -> PyResult<Self> {
        let burst = burst.in_range("burst", 1, MAX_BURST as i64)?;
        Ok(Self {
            inner: RateLimiter::create(name, rate_per_second, burst as u64)?,
        })
    }

    #[staticmethod]
    fn attach(name: &str) -> PyResult<Self> {
        Ok(Self {
            inner: RateLimiter::attach(name)?,
        })
    }

    fn unlink(&self) -> PyResult<()> {
        Ok(self.inner.unlink()?)
    }

    #[pyo3(signature = (n = AnyInt::ONE), text_signature = "($self, n=1)")]
    fn try_acquire(&self, n: AnyInt) -> PyResult<bool> {
        Ok(self.inner.try_acquire(n.in_range("n", 0, i64::MAX)? as u64))
    }

    #[pyo3(signature = (n = AnyInt::ONE), text_signature = "($self, n=1)")]
    fn retry_after(&self, n: AnyInt) -> PyResult<f64> {
        Ok(self.inner.retry_after(n.in_range("n", 0, i64::MAX)? as u64))
    }

    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    #[getter]
    fn rate_per_second(&self) -> f64 {
        self.inner.rate_per_second()
    }

    #[getter]
    fn burst(&self) -> u64 {
        self.inner.burst()
    }

    fn __repr__(&self) -> String {
        format!(
            "RateLimiter(name='{}', rate_per_second={:?}, burst={})",
            self.inner.name(),
            self.inner.rate_per_second(),
            self.inner.burst()
        )
    }
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmissionTable>()?;
    m.add_class::<PyRateLimiter>()?;
    Ok(())
}
