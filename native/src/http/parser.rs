//! The incremental request parser: buffering, pipelining, the body phases and the limits.

use super::chunked::Dechunker;
use super::error::HttpError;
use super::head::{parse_head, Framing, Head};

pub const DEFAULT_MAX_HEADER_SIZE: usize = 8192;
pub const DEFAULT_MAX_HEADERS: usize = 64;
pub const DEFAULT_MAX_BODY_SIZE: usize = 1 << 20;
/// An emptied input buffer larger than this is released rather than kept for the connection.
const KEEP_BUFFER: usize = 64 * 1024;

/// A complete request: head and decoded content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub head: Head,
    pub body: Vec<u8>,
}

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

#[derive(Debug)]
enum Phase {
    Head,
    Fixed { head: Head, len: usize },
    Chunked { head: Head, body: Dechunker },
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
                            self.continue_wanted = head.expect_continue();
                            self.phase = Phase::Fixed { head, len };
                        }
                        Framing::Chunked => {
                            self.continue_wanted = head.expect_continue();
                            self.phase = Phase::Chunked {
                                head,
                                body: Dechunker::new(),
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
                Phase::Chunked { head, mut body } => {
                    let (n, done) = body.feed(avail, &self.limits)?;
                    pos += n;
                    if done {
                        self.finish(head, body.body(), emit);
                    } else {
                        if n > 0 {
                            self.continue_wanted = false;
                        }
                        self.phase = Phase::Chunked { head, body };
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
        self.phase = if head.websocket() { Phase::Upgraded } else { Phase::Head };
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
            Phase::Chunked { body, .. } => body.body().len(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::testing::{bytewise, limits, run, split_at_points, status_of, whole};
    use proptest::prelude::*;

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
    }
}
