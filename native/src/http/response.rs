//! HTTP/1.1 response encoding (RFC 9110, RFC 9112 section 4): status line, validated header
//! fields, Content-Length.

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

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
