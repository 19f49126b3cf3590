//! HTTP/1.1 request parsing (RFC 9112) over `httparse`, and response encoding (RFC 9110).
//!
//! Plain-Rust API (`Parser`, `Head`, `ResponseHead`, `encode_response`) in one file per concern,
//! then the PyO3 layer (`py`).

mod chunked;
mod error;
mod head;
mod parser;
mod py;
mod response;
#[cfg(test)]
mod testing;

pub use chunked::MAX_CHUNK_LINE;
pub use error::HttpError;
pub use head::{latin1, Head};
pub use parser::{
    Limits, Parser, ParserState, Request, DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_HEADERS, DEFAULT_MAX_HEADER_SIZE,
};
pub use py::{init_pymodule, PyRequest, PyRequestParser};
pub use response::{encode_response, reason_phrase, EncodeError, ResponseHead};
