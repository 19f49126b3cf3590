//! The chunked transfer coding (RFC 9112 section 7.1): a state machine that de-chunks content
//! as it arrives, in any split.

use super::error::HttpError;
use super::head::{map_httparse_error, slot_count, STACK_HEADERS};
use super::parser::Limits;

/// Longest chunk-size line (size, extensions, CRLF) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkStep {
    Size,
    Data(usize),
    DataEnd,
    Trailers,
}

/// The de-chunking state of one request's content: the content decoded so far and where the
/// machine stands in the chunk syntax.
#[derive(Debug)]
pub struct Dechunker {
    body: Vec<u8>,
    step: ChunkStep,
    /// Bytes of the current chunk-size line already searched for its LF.
    scanned: usize,
}

impl Dechunker {
    pub fn new() -> Dechunker {
        Dechunker {
            body: Vec::new(),
            step: ChunkStep::Size,
            scanned: 0,
        }
    }

    /// The content decoded so far.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Decode chunked content (RFC 9112 section 7.1); returns (bytes consumed, message complete).
    pub fn feed(&mut self, input: &[u8], limits: &Limits) -> Result<(usize, bool), HttpError> {
        let mut pos = 0usize;
        loop {
            let avail = input.get(pos..).unwrap_or_default();
            match self.step {
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
                        self.step = ChunkStep::Trailers;
                    } else {
                        let room = limits.max_body_size.saturating_sub(self.body.len());
                        match usize::try_from(size) {
                            Ok(size) if size <= room => self.step = ChunkStep::Data(size),
                            _ => {
                                return Err(HttpError::BodyTooLarge {
                                    limit: limits.max_body_size,
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
                    self.body.extend_from_slice(avail.get(..take).unwrap_or_default());
                    pos += take;
                    self.step = if take == remaining {
                        ChunkStep::DataEnd
                    } else {
                        ChunkStep::Data(remaining - take)
                    };
                }
                ChunkStep::DataEnd => match avail {
                    [b'\r', b'\n', ..] => {
                        pos += 2;
                        self.step = ChunkStep::Size;
                    }
                    [] | [b'\r'] => return Ok((pos, false)),
                    _ => return Err(HttpError::Malformed("chunk data not followed by CRLF")),
                },
                ChunkStep::Trailers => {
                    let max = limits.max_header_size;
                    let window = avail.get(..max.min(avail.len())).unwrap_or_default();
                    return match parse_trailers(window, limits)? {
                        Some(n) => Ok((pos + n, true)),
                        None if avail.len() >= max => Err(HttpError::HeadTooLarge { limit: max }),
                        None => Ok((pos, false)),
                    };
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use crate::http::testing::{bytewise, whole};

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let data = b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n, world!!!\r\n0\r\nX-Trailer: t\r\n\r\n";
        let (reqs, err) = whole(data);
        assert_eq!(err, None);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].body, b"hello, world!!!");
        assert_eq!(bytewise(data), (reqs, None));
    }
}
