//! The PyO3 layer: `split_lucky`, `split_equal`, `Splitter`, and the errors' Python form.

use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList};

use super::rng::{atfork_registered, seeded_rng, with_os_rng};
use super::rule::{check_split_all, equal_share, lucky_share, lucky_split_into, Shares, SplitError, SMALL_SHARE};
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
        let len = ffi::Py_ssize_t::try_from(n).map_err(|_| SplitError::TooManyShares(n))?;
        let count = usize::try_from(n).map_err(|_| SplitError::TooManyShares(n))?;
        // SAFETY: PyList_New returns a new reference or NULL with an exception set (turned into
        // Err). It is created before any lock or thread-local borrow is taken, so the collection it
        // may trigger cannot re-enter the generator.
        let list = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyList_New(len))? };
        let mut fill = ListFill {
            py,
            list: list.as_ptr(),
            len: count,
            ints: small_ints(py)?,
        };
        match &self.seeded {
            None => with_os_rng(|rng| lucky_split_into(rng, t, n, &mut fill))??,
            Some(lock) => lucky_split_into(&mut *Self::seeded_rng(lock), t, n, &mut fill)?,
        }
        Ok(list.cast_into::<PyList>()?)
    }
}

/// Fills a new list of `len` items with the shares, as `lucky_split_into` makes them (each
/// position once, below `len`).
struct ListFill<'py> {
    py: Python<'py>,
    list: *mut ffi::PyObject,
    len: usize,
    ints: &'static [Py<PyInt>; SMALL_SHARE as usize],
}

impl ListFill<'_> {
    /// Puts the new reference `item` at `position` (dropped if the position is not the list's).
    #[inline(always)]
    fn set(&mut self, position: usize, item: *mut ffi::PyObject) -> PyResult<()> {
        if position >= self.len {
            // SAFETY: `item` is a new reference this call owns.
            unsafe { ffi::Py_DECREF(item) };
            return Err(PyRuntimeError::new_err("split_all made a share past the packet"));
        }
        // SAFETY: position < len, the list's length; the list is new and not yet shared, and
        // SET_ITEM steals `item`. A list left partly filled by an error holds NULLs, which list
        // deallocation skips.
        unsafe { ffi::PyList_SET_ITEM(self.list, position as ffi::Py_ssize_t, item) };
        Ok(())
    }
}

impl Shares for ListFill<'_> {
    type Error = PyErr;

    fn put(&mut self, position: usize, share: i64) -> PyResult<()> {
        // SAFETY: PyLong_FromLongLong returns a new reference or NULL with an exception set; it
        // allocates an int, which never runs Python code or a collection.
        let item = unsafe { ffi::PyLong_FromLongLong(share) };
        if item.is_null() {
            return Err(PyErr::fetch(self.py));
        }
        self.set(position, item)
    }

    #[inline(always)]
    fn put_run(&mut self, position: usize, run: &[u16]) -> PyResult<()> {
        for (offset, &share) in run.iter().enumerate() {
            let int = self.ints[usize::from(share) % self.ints.len()].as_ptr();
            // SAFETY: `int` is alive (held by the cache); the new reference goes to the list.
            unsafe { ffi::Py_INCREF(int) };
            self.set(position + offset, int)?;
        }
        Ok(())
    }
}

/// The ints below SMALL_SHARE, made once: `split_all` hands out new references to them instead
/// of calling into Python for every share.
fn small_ints(py: Python<'_>) -> PyResult<&'static [Py<PyInt>; SMALL_SHARE as usize]> {
    static INTS: PyOnceLock<[Py<PyInt>; SMALL_SHARE as usize]> = PyOnceLock::new();
    INTS.get_or_try_init(py, || {
        let ints: Vec<Py<PyInt>> = (0..SMALL_SHARE).map(|i| PyInt::new(py, i).unbind()).collect();
        ints.try_into().map_err(|_| PyRuntimeError::new_err("small int cache"))
    })
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    atfork_registered();
    m.add_function(wrap_pyfunction!(split_lucky, m)?)?;
    m.add_function(wrap_pyfunction!(split_equal, m)?)?;
    m.add_class::<Splitter>()?;
    Ok(())
}
