//! HTTP/1.1 request parsing (RFC 9112) over `httparse`, and response encoding (RFC 9110).
//!
//! Plain-Rust API first (`Parser`, `Head`, `ResponseHead`, `encode_response`), then the PyO3 layer.

use std::borrow::Cow;
use std::fmt;
use std::mem::MaybeUninit;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyString, PyTuple};

use crate::errors::HttpParseError;

pub const DEFAULT_MAX_HEADER_SIZE: usize = 8192;
pub const DEFAULT_MAX_HEADERS: usize = 64;
pub const DEFAULT_MAX_BODY_SIZE: usize = 1 << 20;
/// Longest chunk-size line (size, extensions, CRLF) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;
const STACK_HEADERS: usize = 64;
/// An emptied input buffer larger than this is released rather than kept for the connection.
const KEEP_BUFFER: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// Errors

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    Status(i64),
    HeaderName(String),
    HeaderValue(String),
    ContentLength(&'static str),
    BodyNotAllowed(u16),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::Status(s) => write!(f, "status {s} is outside 100..=599"),
            EncodeError::HeaderName(n) => write!(f, "header name {n:?} is not an RFC 9110 token"),
            EncodeError::HeaderValue(n) => {
                write!(
                    f,
                    "value of header {n:?} has a control character (CR, LF, NUL, ...) or a character beyond latin-1"
                )
            }
            EncodeError::ContentLength(why) => write!(f, "Content-Length: {why}"),
            EncodeError::BodyNotAllowed(s) => write!(f, "a {s} response has no content"),
        }
    }
}

impl std::error::Error for EncodeError {}

impl From<EncodeError> for PyErr {
    fn from(e: EncodeError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// Parsed request head

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
}

impl Span {
    /// Where `part` (a sub-slice of `base`) sits in `base`; a foreign slice gives an empty span.
    fn of(base: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
        let end = start.wrapping_add(part.len());
        if start <= end && end <= base.len() {
            Span { start, end }
        } else {
            Span::default()
        }
    }
}

/// The request line and header section of one request, owning a copy of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    raw: Vec<u8>,
    method: Span,
    target: Span,
    minor_version: u8,
    headers: Vec<(Span, Span)>,
    keep_alive: bool,
    websocket: bool,
    expect_continue: bool,
}

fn ascii_str(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// Field values are opaque octets; decode them as ISO-8859-1 (RFC 9110 section 5.5).
pub fn latin1(bytes: &[u8]) -> Cow<'_, str> {
    if bytes.is_ascii() {
        Cow::Borrowed(ascii_str(bytes))
    } else {
        Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect())
    }
}

impl Head {
    fn bytes(&self, span: Span) -> &[u8] {
        self.raw.get(span.start..span.end).unwrap_or_default()
    }

    pub fn method(&self) -> &str {
        ascii_str(self.bytes(self.method))
    }

    /// The raw request-target.
    pub fn target(&self) -> &str {
        ascii_str(self.bytes(self.target))
    }

    /// The path of the target: origin-form before '?', the path of an absolute-form target
    /// ("/" when it has none), authority-form and asterisk-form as given.
    pub fn path(&self) -> &str {
        let target = self.target();
        let before_query = target.split_once('?').map_or(target, |(p, _)| p);
        if before_query.starts_with('/') {
            return before_query;
        }
        match before_query.find("://") {
            Some(i) => {
                let rest = before_query.get(i + 3..).unwrap_or_default();
                rest.find('/').and_then(|j| rest.get(j..)).unwrap_or("/")
            }
            None => before_query,
        }
    }

    /// The query of the target (after the first '?'), "" if none.
    pub fn query(&self) -> &str {
        self.target().split_once('?').map_or("", |(_, q)| q)
    }

    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub fn minor_version(&self) -> u8 {
        self.minor_version
    }

    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    pub fn websocket(&self) -> bool {
        self.websocket
    }

    pub fn expect_continue(&self) -> bool {
        self.expect_continue
    }

    pub fn header_count(&self) -> usize {
        self.headers.len()
    }

    /// Header fields in order: lower-cased name (ASCII), value, both as raw bytes.
    pub fn header_bytes(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.headers.iter().map(|&(n, v)| (self.bytes(n), self.bytes(v)))
    }

    /// Header fields in order: lower-cased name, value as raw bytes.
    pub fn headers_raw(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.header_bytes().map(|(n, v)| (ascii_str(n), v))
    }

    /// Header fields in order: lower-cased name, latin-1 decoded value.
    pub fn headers(&self) -> impl Iterator<Item = (&str, Cow<'_, str>)> + '_ {
        self.headers_raw().map(|(n, v)| (n, latin1(v)))
    }

    /// The field value for `name` (any case); repeated fields are joined with ", "
    /// (RFC 9110 section 5.3).
    pub fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        let mut found: Option<Cow<'_, str>> = None;
        for (n, v) in self.header_bytes() {
            if n.eq_ignore_ascii_case(name.as_bytes()) {
                found = Some(match found {
                    None => latin1(v),
                    Some(prev) => {
                        let mut joined = prev.into_owned();
                        joined.push_str(", ");
                        joined.push_str(&latin1(v));
                        Cow::Owned(joined)
                    }
                });
            }
        }
        found
    }
}

/// A complete request: head and decoded content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub head: Head,
    pub body: Vec<u8>,
}

enum Framing {
    None,
    Length(usize),
    Chunked,
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    s.get(start..end).unwrap_or_default()
}

/// The non-empty elements of a comma-separated list (RFC 9110 section 5.6.1), OWS trimmed.
fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows).filter(|e| !e.is_empty())
}

fn has_token(value: &[u8], token: &str) -> bool {
    list_elements(value).any(|e| e.eq_ignore_ascii_case(token.as_bytes()))
}

/// RFC 9112 section 2.3: HTTP-version = "HTTP/" DIGIT "." DIGIT.
fn is_http_version(token: &[u8]) -> bool {
    matches!(token, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit())
}

/// httparse rejected the version: 505 for a well-formed other version in a well-formed line
/// (`method SP request-target SP HTTP-version`, RFC 9112 section 3: a space inside the target
/// is a malformed line, not a version), 400 for garbage, `None` until the line is complete.
fn version_error(window: &[u8]) -> Option<HttpError> {
    let start = window
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(window.len());
    let rest = window.get(start..).unwrap_or_default();
    let line = rest.get(..rest.iter().position(|&b| b == b'\n')?).unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let token = line.rsplit(|&b| b == b' ').next().unwrap_or(line);
    Some(
        if is_http_version(token) && line.iter().filter(|&&b| b == b' ').count() == 2 {
            HttpError::UnsupportedVersion
        } else {
            HttpError::Malformed("bad request line")
        },
    )
}

fn map_httparse_error(e: httparse::Error, limits: &Limits) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::TooManyHeaders {
            limit: limits.max_headers,
        },
        httparse::Error::HeaderName => HttpError::Malformed("bad header name (or obs-fold)"),
        httparse::Error::HeaderValue => HttpError::Malformed("bad header value"),
        httparse::Error::NewLine => HttpError::Malformed("bad line ending"),
        httparse::Error::Token => HttpError::Malformed("bad request line"),
        httparse::Error::Status | httparse::Error::Version => HttpError::Malformed("bad request line"),
    }
}

/// Header slots for a window: a field line takes at least 3 bytes ("a:\n"), so no window holds
/// more than `len / 2 + 1` fields, whatever `max_headers` says.
fn slot_count(window: &[u8], limits: &Limits) -> usize {
    limits.max_headers.min(window.len() / 2 + 1)
}

/// Parse one head from the start of `window` (already cut at `max_header_size`).
fn parse_head(window: &[u8], limits: &Limits) -> Result<Option<(usize, Head, Framing)>, HttpError> {
    let count = slot_count(window, limits);
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap: Vec<MaybeUninit<httparse::Header<'_>>> = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if count <= STACK_HEADERS {
        stack.get_mut(..count).unwrap_or_default()
    } else {
        heap.resize_with(count, MaybeUninit::uninit);
        &mut heap
    };
    let mut req = httparse::Request::new(&mut []);
    let n = match req.parse_with_uninit_headers(window, slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::Version) => return version_error(window).map_or(Ok(None), Err),
        Err(e) => return Err(map_httparse_error(e, limits)),
    };
    let (Some(method), Some(target), Some(minor_version)) = (req.method, req.path, req.version) else {
        return Err(HttpError::Malformed("bad request line"));
    };
    if !target.is_ascii() {
        return Err(HttpError::Malformed("request-target is not ASCII"));
    }
    let base = window.get(..n).unwrap_or_default();
    let mut head = Head {
        raw: base.to_vec(),
        method: Span::of(base, method.as_bytes()),
        target: Span::of(base, target.as_bytes()),
        minor_version,
        headers: Vec::with_capacity(req.headers.len()),
        keep_alive: false,
        websocket: false,
        expect_continue: false,
    };

    let mut content_length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut chunked_count = 0usize;
    let mut unknown_coding = false;
    let (mut close, mut keep_alive, mut conn_upgrade, mut upgrade_ws) = (false, false, false, false);
    let mut hosts = 0usize;

    for h in req.headers.iter() {
        let name_span = Span::of(base, h.name.as_bytes());
        if let Some(name) = head.raw.get_mut(name_span.start..name_span.end) {
            name.make_ascii_lowercase();
        }
        head.headers.push((name_span, Span::of(base, h.value)));
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            // RFC 9110 section 8.6: 1*DIGIT; a list of identical values may be accepted.
            let mut any = false;
            for element in h.value.split(|&b| b == b',').map(trim_ows) {
                if element.is_empty() || !element.iter().all(u8::is_ascii_digit) {
                    return Err(HttpError::Malformed("invalid Content-Length"));
                }
                let value = element.iter().fold(0u64, |acc, &d| {
                    acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                if content_length.is_some_and(|prev| prev != value) {
                    return Err(HttpError::Malformed("conflicting Content-Length values"));
                }
                content_length = Some(value);
                any = true;
            }
            if !any {
                return Err(HttpError::Malformed("invalid Content-Length"));
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            for coding in list_elements(h.value) {
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked_count += 1;
                } else {
                    unknown_coding = true;
                }
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for option in list_elements(h.value) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                conn_upgrade |= option.eq_ignore_ascii_case(b"upgrade");
            }
        } else if name.eq_ignore_ascii_case("upgrade") {
            upgrade_ws |= has_token(h.value, "websocket");
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("expect") {
            head.expect_continue |= h.value.eq_ignore_ascii_case(b"100-continue");
        }
    }

    // RFC 9112 section 3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0.
    if hosts > 1 || (hosts == 0 && minor_version == 1) {
        return Err(HttpError::Malformed(
            "missing or repeated Host (HTTP/1.1 needs exactly one)",
        ));
    }
    head.keep_alive = !close && (minor_version == 1 || keep_alive);
    // RFC 9110 section 7.8: Upgrade is ignored in HTTP/1.0.
    head.websocket = minor_version == 1 && conn_upgrade && upgrade_ws;
    head.expect_continue &= minor_version == 1;

    // RFC 9112 section 6.3 (message body length) and 6.1 (Transfer-Encoding).
    let framing = if transfer_encoding {
        if content_length.is_some() {
            return Err(HttpError::Malformed("both Transfer-Encoding and Content-Length"));
        }
        if minor_version == 0 {
            return Err(HttpError::Malformed("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if unknown_coding {
            return Err(HttpError::UnsupportedTransferCoding);
        }
        if chunked_count != 1 {
            return Err(HttpError::Malformed("chunked must be the final coding, applied once"));
        }
        Framing::Chunked
    } else if let Some(len) = content_length {
        match usize::try_from(len) {
            Ok(len) if len <= limits.max_body_size => {
                if len == 0 {
                    Framing::None
                } else {
                    Framing::Length(len)
                }
            }
            _ => {
                return Err(HttpError::BodyTooLarge {
                    limit: limits.max_body_size,
                })
            }
        }
    } else {
        Framing::None
    };
    if matches!(framing, Framing::None) {
        head.expect_continue = false;
    }
    Ok(Some((n, head, framing)))
}

/// Parse the trailer section (RFC 9112 section 7.1.2) only to find its end; fields are dropped.
fn parse_trailers(window: &[u8], limits: &Limits) -> Result<Option<usize>, HttpError> {
    let count = slot_count(window, limits);
    let mut stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut heap: Vec<httparse::Header<'_>> = Vec::new();
    let slots: &mut [httparse::Header<'_>] = if count <= STACK_HEADERS {
        stack.get_mut(..count).unwrap_or_default()
    } else {
        heap.resize(count, httparse::EMPTY_HEADER);
        &mut heap
    };
    match httparse::parse_headers(window, slots) {
        Ok(httparse::Status::Complete((n, _))) => Ok(Some(n)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(map_httparse_error(e, limits)),
    }
}

/// The size from one complete chunk-size line, CRLF included (RFC 9112 section 7.1).
fn parse_chunk_line(line: &[u8]) -> Result<u64, HttpError> {
    const BAD: HttpError = HttpError::Malformed("bad chunk size line");
    // httparse accepts an empty size and bare LF inside extensions; refuse both (smuggling).
    let body = line.strip_suffix(b"\r\n").ok_or(BAD)?;
    if !body.first().is_some_and(u8::is_ascii_hexdigit) || body.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(BAD);
    }
    match httparse::parse_chunk_size(line) {
        Ok(httparse::Status::Complete((n, size))) if n == line.len() => Ok(size),
        _ => Err(BAD),
    }
}

// ---------------------------------------------------------------------------------------------
// Incremental parser

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_header_size: usize,
    pub max_headers: usize,
    pub max_body_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_size: DEFAULT_MAX_HEADER_SIZE,
            max_headers: DEFAULT_MAX_HEADERS,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkStep {
    Size,
    Data(usize),
    DataEnd,
    Trailers,
}

#[derive(Debug)]
enum Phase {
    Head,
    Fixed { head: Head, len: usize },
    Chunked { head: Head, body: Vec<u8>, step: ChunkStep },
    Upgraded,
    Failed(HttpError),
}

/// What the parser is waiting for (for the server's read timeouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParserState {
    /// Between requests, nothing buffered.
    Idle,
    /// Part of a request head is buffered.
    Head,
    /// The head is parsed; content is still to come.
    Body,
    /// A WebSocket upgrade request was returned; later bytes are not HTTP.
    Upgraded,
    /// A request was rejected; the parser stays failed.
    Failed,
}

impl ParserState {
    pub fn as_str(self) -> &'static str {
        match self {
            ParserState::Idle => "idle",
            ParserState::Head => "head",
            ParserState::Body => "body",
            ParserState::Upgraded => "upgraded",
            ParserState::Failed => "failed",
        }
    }
}

#[derive(Debug)]
struct Machine {
    limits: Limits,
    phase: Phase,
    /// Bytes of the current chunk-size line already searched for its LF.
    scanned: usize,
    continue_wanted: bool,
}

impl Machine {
    /// Consume complete requests from `input`, calling `emit` for each; returns bytes consumed.
    fn advance<F: FnMut(Head, &[u8])>(&mut self, input: &[u8], emit: &mut F) -> Result<usize, HttpError> {
        let mut pos = 0usize;
        loop {
            let avail = input.get(pos..).unwrap_or_default();
            match std::mem::replace(&mut self.phase, Phase::Head) {
                Phase::Head => {
                    if avail.is_empty() {
                        return Ok(pos);
                    }
                    let Some((n, head, framing)) = self.head_step(avail)? else {
                        return Ok(pos);
                    };
                    pos += n;
                    match framing {
                        Framing::None => self.finish(head, &[], emit),
                        Framing::Length(len) => {
                            self.continue_wanted = head.expect_continue;
                            self.phase = Phase::Fixed { head, len };
                        }
                        Framing::Chunked => {
                            self.continue_wanted = head.expect_continue;
                            self.phase = Phase::Chunked {
                                head,
                                body: Vec::new(),
                                step: ChunkStep::Size,
                            };
                        }
                    }
                }
                Phase::Fixed { head, len } => match avail.get(..len) {
                    Some(body) => {
                        pos += len;
                        self.finish(head, body, emit);
                    }
                    None => {
                        if !avail.is_empty() {
                            self.continue_wanted = false;
                        }
                        self.phase = Phase::Fixed { head, len };
                        return Ok(pos);
                    }
                },
                Phase::Chunked {
                    head,
                    mut body,
                    mut step,
                } => {
                    let (n, done) = self.dechunk(avail, &mut body, &mut step)?;
                    pos += n;
                    if done {
                        self.finish(head, &body, emit);
                    } else {
                        if n > 0 {
                            self.continue_wanted = false;
                        }
                        self.phase = Phase::Chunked { head, body, step };
                        return Ok(pos);
                    }
                }
                Phase::Upgraded => {
                    self.phase = Phase::Upgraded;
                    return Ok(pos);
                }
                Phase::Failed(e) => {
                    self.phase = Phase::Failed(e.clone());
                    return Err(e);
                }
            }
        }
    }

    fn finish<F: FnMut(Head, &[u8])>(&mut self, head: Head, body: &[u8], emit: &mut F) {
        self.continue_wanted = false;
        self.phase = if head.websocket { Phase::Upgraded } else { Phase::Head };
        emit(head, body);
    }

    fn head_step(&mut self, avail: &[u8]) -> Result<Option<(usize, Head, Framing)>, HttpError> {
        // Re-parsed from its start on every feed (bounded by max_header_size), so that an error
        // is found as soon as its bytes arrive, however the input is split.
        let max = self.limits.max_header_size;
        let window = avail.get(..max.min(avail.len())).unwrap_or_default();
        match parse_head(window, &self.limits)? {
            Some(found) => Ok(Some(found)),
            None if avail.len() >= max => Err(HttpError::HeadTooLarge { limit: max }),
            None => Ok(None),
        }
    }

    /// Decode chunked content (RFC 9112 section 7.1); returns (bytes consumed, message complete).
    fn dechunk(&mut self, input: &[u8], body: &mut Vec<u8>, step: &mut ChunkStep) -> Result<(usize, bool), HttpError> {
        let mut pos = 0usize;
        loop {
            let avail = input.get(pos..).unwrap_or_default();
            match *step {
                ChunkStep::Size => {
                    let window = avail.get(..MAX_CHUNK_LINE.min(avail.len())).unwrap_or_default();
                    let from = self.scanned.min(window.len());
                    let lf = window.get(from..).unwrap_or_default().iter().position(|&b| b == b'\n');
                    let Some(lf) = lf.map(|i| i + from) else {
                        if avail.len() >= MAX_CHUNK_LINE {
                            return Err(HttpError::Malformed("chunk size line too long"));
                        }
                        self.scanned = window.len();
                        return Ok((pos, false));
                    };
                    self.scanned = 0;
                    let size = parse_chunk_line(window.get(..=lf).unwrap_or_default())?;
                    pos += lf + 1;
                    if size == 0 {
                        *step = ChunkStep::Trailers;
                    } else {
                        let room = self.limits.max_body_size.saturating_sub(body.len());
                        match usize::try_from(size) {
                            Ok(size) if size <= room => *step = ChunkStep::Data(size),
                            _ => {
                                return Err(HttpError::BodyTooLarge {
                                    limit: self.limits.max_body_size,
                                })
                            }
                        }
                    }
                }
                ChunkStep::Data(remaining) => {
                    if avail.is_empty() {
                        return Ok((pos, false));
                    }
                    let take = remaining.min(avail.len());
                    body.extend_from_slice(avail.get(..take).unwrap_or_default());
                    pos += take;
                    *step = if take == remaining {
                        ChunkStep::DataEnd
                    } else {
                        ChunkStep::Data(remaining - take)
                    };
                }
                ChunkStep::DataEnd => match avail {
                    [b'\r', b'\n', ..] => {
                        pos += 2;
                        *step = ChunkStep::Size;
                    }
                    [] | [b'\r'] => return Ok((pos, false)),
                    _ => return Err(HttpError::Malformed("chunk data not followed by CRLF")),
                },
                ChunkStep::Trailers => {
                    let max = self.limits.max_header_size;
                    let window = avail.get(..max.min(avail.len())).unwrap_or_default();
                    return match parse_trailers(window, &self.limits)? {
                        Some(n) => Ok((pos + n, true)),
                        None if avail.len() >= max => Err(HttpError::HeadTooLarge { limit: max }),
                        None => Ok((pos, false)),
                    };
                }
            }
        }
    }
}

/// Incremental HTTP/1.x request parser: feed bytes as they arrive, get complete requests.
#[derive(Debug)]
pub struct Parser {
    machine: Machine,
    buf: Vec<u8>,
}

impl Parser {
    pub fn new(limits: Limits) -> Parser {
        Parser {
            machine: Machine {
                limits,
                phase: Phase::Head,
                scanned: 0,
                continue_wanted: false,
            },
            buf: Vec::new(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.machine.limits
    }

    /// Feed bytes; `emit(head, body)` is called for each complete request in order. After an
    /// error (returned now and by every later call) the parser stays failed.
    pub fn feed_with<F: FnMut(Head, &[u8])>(&mut self, data: &[u8], mut emit: F) -> Result<(), HttpError> {
        let result = if self.buf.is_empty() {
            let consumed = self.machine.advance(data, &mut emit);
            if let Ok(n) = consumed {
                self.buf.extend_from_slice(data.get(n..).unwrap_or_default());
            }
            consumed
        } else {
            self.buf.extend_from_slice(data);
            let consumed = self.machine.advance(&self.buf, &mut emit);
            if let Ok(n) = consumed {
                self.buf.drain(..n.min(self.buf.len()));
                if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER {
                    self.buf = Vec::new();
                }
            }
            consumed
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                self.machine.phase = Phase::Failed(e.clone());
                self.machine.continue_wanted = false;
                self.buf = Vec::new();
                Err(e)
            }
        }
    }

    /// Feed bytes and collect the complete requests.
    pub fn feed(&mut self, data: &[u8]) -> Result<Vec<Request>, HttpError> {
        let mut out = Vec::new();
        self.feed_with(data, |head, body| {
            out.push(Request {
                head,
                body: body.to_vec(),
            })
        })?;
        Ok(out)
    }

    /// Bytes held that are not part of a returned request (raw input plus decoded chunks).
    pub fn pending_bytes(&self) -> usize {
        let decoded = match &self.machine.phase {
            Phase::Chunked { body, .. } => body.len(),
            _ => 0,
        };
        self.buf.len() + decoded
    }

    pub fn state(&self) -> ParserState {
        match &self.machine.phase {
            Phase::Head if self.buf.is_empty() => ParserState::Idle,
            Phase::Head => ParserState::Head,
            Phase::Fixed { .. } | Phase::Chunked { .. } => ParserState::Body,
            Phase::Upgraded => ParserState::Upgraded,
            Phase::Failed(_) => ParserState::Failed,
        }
    }

    /// The error the parser failed with, if any.
    pub fn error(&self) -> Option<&HttpError> {
        match &self.machine.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// True once per request whose head carried `Expect: 100-continue` and whose content has
    /// not started to arrive (RFC 9110 section 10.1.1).
    pub fn take_continue(&mut self) -> bool {
        std::mem::take(&mut self.machine.continue_wanted)
    }

    /// Hand over the unparsed bytes (after an upgrade: the first bytes of the new protocol).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

// ---------------------------------------------------------------------------------------------
// Response encoding

/// Reason phrases of RFC 9110 section 15, plus 103 (RFC 8297), 425 (RFC 8470), 428/429/431/511
/// (RFC 6585) and 451 (RFC 7725). Unknown codes get an empty reason phrase (RFC 9112 section 4).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        425 => "Too Early",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        451 => "Unavailable For Legal Reasons",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        511 => "Network Authentication Required",
        _ => "",
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Append `value` as latin-1 if it is a valid field value (RFC 9110 section 5.5: VCHAR, obs-text,
/// SP, HTAB); false otherwise.
fn push_field_value(out: &mut Vec<u8>, value: &str) -> bool {
    if value.is_ascii() {
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return false;
        }
        out.extend_from_slice(value.as_bytes());
        return true;
    }
    for c in value.chars() {
        match u8::try_from(u32::from(c)) {
            Ok(b) if b >= 0xa0 || (0x20..0x7f).contains(&b) || b == b'\t' => out.push(b),
            _ => return false,
        }
    }
    true
}

fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        if let Some(d) = digits.get_mut(i) {
            *d = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(i..).unwrap_or_default());
}

/// Writer of a response's status line and header section, one header at a time.
/// Content-Length is added unless given, and never for 1xx, 204 and 304 (RFC 9110 section 8.6).
pub struct ResponseHead {
    out: Vec<u8>,
    code: u16,
    body_len: usize,
    /// `Some(None)`: given, but too large for usize.
    content_length: Option<Option<usize>>,
    transfer_encoding: bool,
}

impl ResponseHead {
    pub fn new(status: i64, body_len: usize) -> Result<ResponseHead, EncodeError> {
        let code = match u16::try_from(status) {
            Ok(code @ 100..=599) => code,
            _ => return Err(EncodeError::Status(status)),
        };
        if (code < 200 || code == 204 || code == 304) && body_len > 0 {
            return Err(EncodeError::BodyNotAllowed(code));
        }
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"HTTP/1.1 ");
        push_decimal(&mut out, usize::from(code));
        out.push(b' ');
        out.extend_from_slice(reason_phrase(code).as_bytes());
        out.extend_from_slice(b"\r\n");
        Ok(ResponseHead {
            out,
            code,
            body_len,
            content_length: None,
            transfer_encoding: false,
        })
    }

    pub fn header(&mut self, name: &str, value: &str) -> Result<(), EncodeError> {
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(EncodeError::HeaderName(name.to_owned()));
        }
        if name.eq_ignore_ascii_case("content-length") {
            if self.content_length.is_some() {
                return Err(EncodeError::ContentLength("given more than once"));
            }
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(EncodeError::ContentLength("not a decimal number"));
            }
            let parsed = value
                .bytes()
                .try_fold(0usize, |acc, d| acc.checked_mul(10)?.checked_add(usize::from(d - b'0')));
            self.content_length = Some(parsed);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            self.transfer_encoding = true;
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        if !push_field_value(&mut self.out, value) {
            return Err(EncodeError::HeaderValue(name.to_owned()));
        }
        self.out.extend_from_slice(b"\r\n");
        Ok(())
    }

    /// The complete head, ending with the empty line.
    pub fn finish(mut self) -> Result<Vec<u8>, EncodeError> {
        let no_content = self.code < 200 || self.code == 204;
        if no_content && (self.content_length.is_some() || self.transfer_encoding) {
            return Err(EncodeError::ContentLength("not allowed in a 1xx or 204 response"));
        }
        match self.content_length {
            Some(_) if self.transfer_encoding => {
                return Err(EncodeError::ContentLength("not allowed with Transfer-Encoding"))
            }
            // An empty body with a Content-Length is a HEAD response (RFC 9110 section 9.3.2).
            Some(given) if self.body_len > 0 && given != Some(self.body_len) => {
                return Err(EncodeError::ContentLength("does not match the body length"));
            }
            Some(_) => {}
            None if no_content || self.code == 304 || self.transfer_encoding => {}
            None => {
                self.out.extend_from_slice(b"Content-Length: ");
                push_decimal(&mut self.out, self.body_len);
                self.out.extend_from_slice(b"\r\n");
            }
        }
        self.out.extend_from_slice(b"\r\n");
        Ok(self.out)
    }
}

/// Encode a whole response: head then `body`.
pub fn encode_response(status: i64, headers: &[(&str, &str)], body: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let mut head = ResponseHead::new(status, body.len())?;
    for &(name, value) in headers {
        head.header(name, value)?;
    }
    let mut out = head.finish()?;
    out.extend_from_slice(body);
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Python layer

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(max_header_size: usize, max_headers: usize, max_body_size: usize) -> Limits {
        Limits {
            max_header_size,
            max_headers,
            max_body_size,
        }
    }

    /// Feed `chunks` in order; every emitted request and the final error status.
    fn run(limits: Limits, chunks: &[&[u8]]) -> (Vec<Request>, Option<u16>) {
        let mut parser = Parser::new(limits);
        let mut out = Vec::new();
        for chunk in chunks {
            let fed = parser.feed_with(chunk, |head, body| {
                out.push(Request {
                    head,
                    body: body.to_vec(),
                })
            });
            if let Err(e) = fed {
                return (out, Some(e.status()));
            }
        }
        (out, None)
    }

    fn whole(data: &[u8]) -> (Vec<Request>, Option<u16>) {
        run(Limits::default(), &[data])
    }

    fn bytewise(data: &[u8]) -> (Vec<Request>, Option<u16>) {
        let chunks: Vec<&[u8]> = data.chunks(1).collect();
        run(Limits::default(), &chunks)
    }

    fn status_of(data: &[u8]) -> Option<u16> {
        let (a, sa) = whole(data);
        let (b, sb) = bytewise(data);
        assert_eq!((&a, sa), (&b, sb), "whole and byte-by-byte disagree");
        sa
    }

    fn headers_of(r: &Request) -> Vec<(String, String)> {
        r.head.headers().map(|(n, v)| (n.to_owned(), v.into_owned())).collect()
    }

    #[test]
    fn get_request_fields() {
        let data = b"GET /v1/balance?x=1&y=2 HTTP/1.1\r\nHost: a.example\r\nX-Custom:  spaced value \r\n\r\n";
        for (reqs, err) in [whole(data), bytewise(data)] {
            assert_eq!(err, None);
            assert_eq!(reqs.len(), 1);
            let r = &reqs[0];
            assert_eq!(r.head.method(), "GET");
            assert_eq!(r.head.target(), "/v1/balance?x=1&y=2");
            assert_eq!(r.head.path(), "/v1/balance");
            assert_eq!(r.head.query(), "x=1&y=2");
            assert_eq!(r.head.minor_version(), 1);
            assert!(r.head.keep_alive());
            assert!(!r.head.websocket());
            assert_eq!(
                headers_of(r),
                vec![
                    ("host".into(), "a.example".into()),
                    ("x-custom".into(), "spaced value".into())
                ]
            );
            assert_eq!(r.head.header("X-CUSTOM").as_deref(), Some("spaced value"));
            assert_eq!(r.head.header("missing"), None);
            assert!(r.body.is_empty());
        }
    }

    #[test]
    fn content_length_body_and_pipelining() {
        let data = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
        let (reqs, err) = whole(data);
        assert_eq!(err, None);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].body, b"hello");
        assert_eq!(reqs[1].head.path(), "/b");
        assert!(!reqs[1].head.keep_alive());
        assert_eq!(bytewise(data), (reqs, None));
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let data = b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n, world!!!\r\n0\r\nX-Trailer: t\r\n\r\n";
        let (reqs, err) = whole(data);
        assert_eq!(err, None);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].body, b"hello, world!!!");
        assert_eq!(bytewise(data), (reqs, None));
    }

    #[test]
    fn keep_alive_rules() {
        let cases: [(&[u8], bool); 5] = [
            (b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", true),
            (b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
            (b"GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", false),
        ];
        for (data, expected) in cases {
            let (reqs, err) = whole(data);
            assert_eq!(err, None);
            assert_eq!(
                reqs[0].head.keep_alive(),
                expected,
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
    }

    #[test]
    fn websocket_upgrade_stops_parsing() {
        let data = b"GET /v1/ws HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\r\n\x81\x85abcd";
        let mut parser = Parser::new(Limits::default());
        let reqs = parser.feed(data).unwrap();
        assert_eq!(reqs.len(), 1);
        assert!(reqs[0].head.websocket());
        assert_eq!(parser.state(), ParserState::Upgraded);
        assert!(parser.feed(b"more").unwrap().is_empty());
        assert_eq!(parser.take_buffered(), b"\x81\x85abcdmore");
    }

    #[test]
    fn error_statuses() {
        let cases: [(&[u8], u16); 22] = [
            (b"GET / HTTP/1.1\r\n\r\n", 400),
            (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                400,
            ),
            (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -3\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3x\r\n\r\n", 400),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;a\nb\r\nx\r\n0\r\n\r\n",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy",
                400,
            ),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                400,
            ),
            (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
            (
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                501,
            ),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505),
            (b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", 400),
            (b"GET /a b HTTP/2.0\r\nHost: h\r\n\r\n", 400),
            (b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505),
            (b"GET / HTTX/1.1\r\nHost: h\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: h\r\nHost: h\r\n\r\n", 400),
        ];
        for (data, status) in cases {
            assert_eq!(status_of(data), Some(status), "{:?}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn failed_parser_stays_failed() {
        let mut parser = Parser::new(Limits::default());
        assert_eq!(parser.feed(b"GET / HTTP/3.0\r\n").map_err(|e| e.status()), Err(505));
        assert_eq!(parser.state(), ParserState::Failed);
        assert_eq!(
            parser
                .feed(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
                .map_err(|e| e.status()),
            Err(505)
        );
        assert_eq!(parser.pending_bytes(), 0);
    }

    #[test]
    fn header_size_limit_boundary() {
        let head = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let at = limits(head.len(), 64, 0);
        assert_eq!(run(at, &[head]).1, None);
        assert_eq!(run(at, &head.chunks(1).collect::<Vec<_>>()).1, None);
        let below = limits(head.len() - 1, 64, 0);
        assert_eq!(run(below, &[head]).1, Some(431));
        assert_eq!(run(below, &head.chunks(1).collect::<Vec<_>>()).1, Some(431));
    }

    #[test]
    fn header_count_limit_boundary() {
        let data = b"GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n";
        assert_eq!(run(limits(8192, 3, 0), &[data]).1, None);
        assert_eq!(run(limits(8192, 2, 0), &[data]).1, Some(431));
        assert_eq!(run(limits(8192, 100, 0), &[data]).1, None);
    }

    #[test]
    fn body_size_limit_boundary() {
        let fixed = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nabcd";
        assert_eq!(run(limits(8192, 64, 4), &[fixed]).1, None);
        assert_eq!(run(limits(8192, 64, 3), &[fixed]).1, Some(413));
        assert_eq!(
            run(limits(8192, 64, 3), &[fixed.split_at(fixed.len() - 4).0]).1,
            Some(413)
        );
        let chunked =
            b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n";
        assert_eq!(run(limits(8192, 64, 4), &[chunked]).1, None);
        assert_eq!(run(limits(8192, 64, 3), &[chunked]).1, Some(413));
        let huge = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert_eq!(status_of(huge), Some(413));
    }

    #[test]
    fn expect_continue_is_reported_once() {
        let mut parser = Parser::new(Limits::default());
        let reqs = parser
            .feed(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
            .unwrap();
        assert!(reqs.is_empty());
        assert_eq!(parser.state(), ParserState::Body);
        assert!(parser.take_continue());
        assert!(!parser.take_continue());
        assert_eq!(parser.feed(b"ok").unwrap()[0].body, b"ok");
        assert_eq!(parser.state(), ParserState::Idle);
    }

    #[test]
    fn absolute_form_path() {
        let (reqs, _) = whole(b"GET http://h.example:80/p/q?z HTTP/1.1\r\nHost: h.example\r\n\r\n");
        assert_eq!(reqs[0].head.path(), "/p/q");
        assert_eq!(reqs[0].head.query(), "z");
        let (reqs, _) = whole(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(reqs[0].head.path(), "*");
    }

    #[test]
    fn latin1_values_and_joined_duplicates() {
        let (reqs, err) = whole(b"GET / HTTP/1.1\r\nHost: h\r\nX: caf\xe9\r\nAccept: a\r\naccept: b\r\n\r\n");
        assert_eq!(err, None);
        assert_eq!(reqs[0].head.header("x").as_deref(), Some("caf\u{e9}"));
        assert_eq!(reqs[0].head.header("Accept").as_deref(), Some("a, b"));
    }

    #[test]
    fn encode_exact_bytes() {
        let out = encode_response(200, &[("Content-Type", "application/json")], b"{}").unwrap();
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        assert_eq!(
            encode_response(204, &[], b"").unwrap(),
            b"HTTP/1.1 204 No Content\r\n\r\n"
        );
        assert_eq!(
            encode_response(299, &[], b"").unwrap(),
            b"HTTP/1.1 299 \r\nContent-Length: 0\r\n\r\n"
        );
        assert_eq!(
            encode_response(200, &[("content-length", "10")], b"").unwrap(),
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"
        );
    }

    #[test]
    fn encode_rejects_injection_and_bad_input() {
        assert!(matches!(encode_response(99, &[], b""), Err(EncodeError::Status(99))));
        assert!(matches!(encode_response(600, &[], b""), Err(EncodeError::Status(600))));
        assert!(matches!(
            encode_response(200, &[("X", "a\r\nSet-Cookie: x")], b""),
            Err(EncodeError::HeaderValue(_))
        ));
        assert!(matches!(
            encode_response(200, &[("X", "a\0")], b""),
            Err(EncodeError::HeaderValue(_))
        ));
        assert!(matches!(
            encode_response(200, &[("X", "\u{100}")], b""),
            Err(EncodeError::HeaderValue(_))
        ));
        assert!(matches!(
            encode_response(200, &[("X Y", "a")], b""),
            Err(EncodeError::HeaderName(_))
        ));
        assert!(matches!(
            encode_response(200, &[("", "a")], b""),
            Err(EncodeError::HeaderName(_))
        ));
        assert!(matches!(
            encode_response(204, &[], b"x"),
            Err(EncodeError::BodyNotAllowed(204))
        ));
        assert!(matches!(
            encode_response(200, &[("Content-Length", "3")], b"ab"),
            Err(EncodeError::ContentLength(_))
        ));
    }

    fn valid_request() -> impl Strategy<Value = Vec<u8>> {
        let body = proptest::collection::vec(any::<u8>(), 0..40);
        (0..3u8, body, proptest::collection::vec(1usize..8, 0..4)).prop_map(|(kind, body, sizes)| {
            let mut out = Vec::new();
            match kind {
                0 => out.extend_from_slice(b"GET /x?q=1 HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n"),
                1 => {
                    out.extend_from_slice(
                        format!("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    out.extend_from_slice(&body);
                }
                _ => {
                    out.extend_from_slice(b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
                    let mut rest = body.as_slice();
                    for size in sizes.iter().cycle().take(64) {
                        if rest.is_empty() {
                            break;
                        }
                        let (chunk, tail) = rest.split_at((*size).min(rest.len()));
                        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                        out.extend_from_slice(chunk);
                        out.extend_from_slice(b"\r\n");
                        rest = tail;
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                }
            }
            out
        })
    }

    fn split_at_points<'a>(data: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = points.iter().map(|p| p % (data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut last = 0;
        for cut in cuts.into_iter().chain([data.len()]) {
            chunks.push(data.get(last..cut).unwrap_or_default());
            last = cut;
        }
        chunks
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic_and_splits_agree(data in proptest::collection::vec(any::<u8>(), 0..300), points in proptest::collection::vec(any::<usize>(), 0..8)) {
            let small = limits(64, 4, 32);
            let expected = run(small, &[&data]);
            prop_assert_eq!(run(small, &split_at_points(&data, &points)), expected);
        }

        #[test]
        fn mutated_requests_never_panic_and_splits_agree(reqs in proptest::collection::vec(valid_request(), 1..4), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3), points in proptest::collection::vec(any::<usize>(), 0..8)) {
            let mut data: Vec<u8> = reqs.concat();
            let clean = run(Limits::default(), &[&data]);
            prop_assert_eq!(clean.0.len(), reqs.len());
            prop_assert_eq!(clean.1, None);
            for (at, byte) in flips {
                let len = data.len();
                if let Some(b) = data.get_mut(at % len) {
                    *b = byte;
                }
            }
            let expected = run(Limits::default(), &[&data]);
            prop_assert_eq!(run(Limits::default(), &split_at_points(&data, &points)), expected);
        }

        #[test]
        fn encoded_responses_parse_back(status in 0i64..700, headers in proptest::collection::vec(("[ -~]{0,6}", "\\PC{0,8}"), 0..4), body in proptest::collection::vec(any::<u8>(), 0..20)) {
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            if let Ok(out) = encode_response(status, &pairs, &body) {
                let mut slots = [httparse::EMPTY_HEADER; 8];
                let mut resp = httparse::Response::new(&mut slots);
                let n = match resp.parse(&out) {
                    Ok(httparse::Status::Complete(n)) => n,
                    other => return Err(TestCaseError::fail(format!("{other:?}"))),
                };
                prop_assert_eq!(i64::from(resp.code.unwrap_or_default()), status);
                prop_assert_eq!(resp.headers.len(), pairs.len() + usize::from(!(status < 200 || status == 204 || status == 304)));
                prop_assert_eq!(out.get(n..).unwrap_or_default(), body.as_slice());
            }
        }
    }
}
