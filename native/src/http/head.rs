//! The request line and header section (RFC 9112 sections 3 and 5) over `httparse`, and the
//! framing they select (RFC 9112 section 6.3).

use std::borrow::Cow;
use std::mem::MaybeUninit;

use super::error::HttpError;
use super::parser::Limits;

pub(super) const STACK_HEADERS: usize = 64;

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

pub(super) enum Framing {
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

pub(super) fn map_httparse_error(e: httparse::Error, limits: &Limits) -> HttpError {
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
pub(super) fn slot_count(window: &[u8], limits: &Limits) -> usize {
    limits.max_headers.min(window.len() / 2 + 1)
}

/// Parse one head from the start of `window` (already cut at `max_header_size`).
pub(super) fn parse_head(window: &[u8], limits: &Limits) -> Result<Option<(usize, Head, Framing)>, HttpError> {
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

#[cfg(test)]
mod tests {
    use crate::http::testing::{bytewise, headers_of, whole};

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
}
