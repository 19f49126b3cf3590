//! Test helpers shared by the parser's unit tests: feed a request whole, byte by byte, or in
//! given chunks, and collect what comes out.

use super::parser::{Limits, Parser, Request};

pub fn limits(max_header_size: usize, max_headers: usize, max_body_size: usize) -> Limits {
    Limits {
        max_header_size,
        max_headers,
        max_body_size,
    }
}

/// Feed `chunks` in order; every emitted request and the final error status.
pub fn run(limits: Limits, chunks: &[&[u8]]) -> (Vec<Request>, Option<u16>) {
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

pub fn whole(data: &[u8]) -> (Vec<Request>, Option<u16>) {
    run(Limits::default(), &[data])
}

pub fn bytewise(data: &[u8]) -> (Vec<Request>, Option<u16>) {
    let chunks: Vec<&[u8]> = data.chunks(1).collect();
    run(Limits::default(), &chunks)
}

pub fn status_of(data: &[u8]) -> Option<u16> {
    let (a, sa) = whole(data);
    let (b, sb) = bytewise(data);
    assert_eq!((&a, sa), (&b, sb), "whole and byte-by-byte disagree");
    sa
}

pub fn headers_of(r: &Request) -> Vec<(String, String)> {
    r.head.headers().map(|(n, v)| (n.to_owned(), v.into_owned())).collect()
}

pub fn split_at_points<'a>(data: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
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
