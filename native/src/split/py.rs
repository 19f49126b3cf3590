//! The PyO3 layer: `split_lucky`, `split_equal`, `Splitter`, and the errors' Python form.

use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::rng::{atfork_registered, seeded_rng, with_os_rng};
use super::rule::{check_split_all, equal_share, lucky_share, lucky_split_each, SplitError};
use crate::chacha::ChaCha20;

impl From<SplitError> for PyErr {
    fn from(e: SplitError) -> PyErr {
        match e {
            SplitError::Entropy(_) => PyOSError::new_err(e.to_string()),
            SplitError::RngUnavailable => PyRuntimeError::new_err(e.to_string()),
            _ => PyValueError::new_err(e.to_string()),
        }
    }
}

fn int64_arg(obj: &Bound<'_, PyAny>, name: &'static str) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            SplitError::BeyondInt64(name).into()
        } else {
            e
        }
    })
}

#[pyfunction]
#[pyo3(signature = (remaining_fen, remaining_count))]
fn split_lucky(remaining_fen: &Bound<'_, PyAny>, remaining_count: &Bound<'_, PyAny>) -> PyResult<i64> {
    let m = int64_arg(remaining_fen, "remaining_fen")?;
    let n = int64_arg(remaining_count, "remaining_count")?;
    Ok(with_os_rng(|rng| lucky_share(rng, m, n))??)
}

#[pyfunction]
#[pyo3(signature = (total_fen, count))]
fn split_equal(total_fen: &Bound<'_, PyAny>, count: &Bound<'_, PyAny>) -> PyResult<i64> {
    let t = int64_arg(total_fen, "total_fen")?;
    let n = int64_arg(count, "count")?;
    Ok(equal_share(t, n)?)
}

#[pyclass(frozen, module = "hongbao_native")]
pub struct Splitter {
    seeded: Option<Mutex<ChaCha20>>,
}

impl Splitter {
    fn seeded_rng(lock: &Mutex<ChaCha20>) -> std::sync::MutexGuard<'_, ChaCha20> {
        lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl Splitter {
    #[new]
    #[pyo3(signature = (seed=None), text_signature = "(seed=None)")]
    fn new(seed: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let seeded = match seed {
            None => None,
            Some(obj) if obj.is_none() => None,
            Some(obj) => {
                let s = obj.extract::<u64>().map_err(|e| {
                    if e.is_instance_of::<PyOverflowError>(obj.py()) {
                        SplitError::SeedOutOfRange.into()
                    } else {
                        e
                    }
                })?;
                Some(Mutex::new(seeded_rng(s)))
            }
        };
        Ok(Self { seeded })
    }

    #[pyo3(signature = (remaining_fen, remaining_count))]
    fn next(&self, remaining_fen: &Bound<'_, PyAny>, remaining_count: &Bound<'_, PyAny>) -> PyResult<i64> {
        let m = int64_arg(remaining_fen, "remaining_fen")?;
        let n = int64_arg(remaining_count, "remaining_count")?;
        Ok(match &self.seeded {
            None => with_os_rng(|rng| lucky_share(rng, m, n))??,
            Some(lock) => lucky_share(&mut *Self::seeded_rng(lock), m, n)?,
        })
    }

    #[pyo3(signature = (total_fen, count))]
    fn split_all<'py>(&self, total_fen: &Bound<'py, PyAny>, count: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let t = int64_arg(total_fen, "total_fen")?;
        let n = int64_arg(count, "count")?;
        check_split_all(t, n)?;
        let py = total_fen.py();
        let len = pyo3::ffi::Py_ssize_t::try_from(n).map_err(|_| SplitError::TooManyShares(n))?;
        // SAFETY: PyList_New returns a new reference or NULL with an exception set (turned into
        // Err). It is created before any lock or thread-local borrow is taken, so the collection it
        // may trigger cannot re-enter the generator.
        let list = unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyList_New(len))? };
        let fill = |position: usize, share: i64| -> PyResult<()> {
            // SAFETY: PyLong_FromLongLong returns a new reference or NULL with an exception set; it
            // allocates an int, which never runs Python code or a collection.
            let item = unsafe { pyo3::ffi::PyLong_FromLongLong(share) };
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            // SAFETY: position < len (lucky_split_each yields exactly `count` shares), the list is
            // new and not yet shared, and SET_ITEM steals `item`. A list left partly filled by an
            // error holds NULLs, which list deallocation skips.
            unsafe { pyo3::ffi::PyList_SET_ITEM(list.as_ptr(), position as pyo3::ffi::Py_ssize_t, item) };
            Ok(())
        };
        match &self.seeded {
            None => with_os_rng(|rng| lucky_split_each(rng, t, n, fill))??,
            Some(lock) => lucky_split_each(&mut *Self::seeded_rng(lock), t, n, fill)?,
        }
        Ok(list.cast_into::<PyList>()?)
    }
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    atfork_registered();
    m.add_function(wrap_pyfunction!(split_lucky, m)?)?;
    m.add_function(wrap_pyfunction!(split_equal, m)?)?;
    m.add_class::<Splitter>()?;
    Ok(())
}
