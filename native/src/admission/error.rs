//! The error of every admission-table and rate-limiter operation.

use std::fmt;
use std::io;

use super::shm::MAX_NAME_LEN;

#[derive(Debug)]
pub enum AdmissionError {
    InvalidName(String),
    InvalidArgument(String),
    BadSegment(String),
    TableFull { capacity: u32 },
    NotHeld,
    Io(io::Error),
}

impl fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName(name) => write!(
                f,
                "invalid segment name {name:?}: use 1 to {MAX_NAME_LEN} characters from [A-Za-z0-9_.-]"
            ),
            Self::InvalidArgument(why) => f.write_str(why),
            Self::BadSegment(why) => write!(f, "not a hongbao shared-memory segment: {why}"),
            Self::TableFull { capacity } => {
                write!(f, "admission table full: all {capacity} (key, pid) slots are in use")
            }
            Self::NotHeld => f.write_str("this process holds no admission for this key"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for AdmissionError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, AdmissionError>;
