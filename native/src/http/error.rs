//! What a bad request is answered with: the parser's error and its HTTP status.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// 400: the request violates RFC 9112 syntax or framing rules.
    Malformed(&'static str),
    /// 413: the content is longer than `max_body_size`.
    BodyTooLarge { limit: usize },
    /// 431: the head (or trailer section) is longer than `max_header_size`.
    HeadTooLarge { limit: usize },
    /// 431: more header (or trailer) fields than `max_headers`.
    TooManyHeaders { limit: usize },
    /// 501: a transfer coding other than chunked.
    UnsupportedTransferCoding,
    /// 505: an HTTP version other than 1.0 and 1.1.
    UnsupportedVersion,
}

impl HttpError {
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Malformed(_) => 400,
            HttpError::BodyTooLarge { .. } => 413,
            HttpError::HeadTooLarge { .. } | HttpError::TooManyHeaders { .. } => 431,
            HttpError::UnsupportedTransferCoding => 501,
            HttpError::UnsupportedVersion => 505,
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Malformed(why) => write!(f, "malformed request: {why}"),
            HttpError::BodyTooLarge { limit } => write!(f, "request content larger than {limit} bytes"),
            HttpError::HeadTooLarge { limit } => write!(f, "request header section larger than {limit} bytes"),
            HttpError::TooManyHeaders { limit } => write!(f, "request has more than {limit} header fields"),
            HttpError::UnsupportedTransferCoding => {
                f.write_str("unsupported transfer coding (only chunked is implemented)")
            }
            HttpError::UnsupportedVersion => f.write_str("HTTP version not supported (only HTTP/1.0 and HTTP/1.1)"),
        }
    }
}

impl std::error::Error for HttpError {}
