//! Test helpers shared by the framing unit tests: decode a stream whole, byte by byte or in given
//! chunks, and build masked client frames.

use super::decoder::FrameDecoder;
use super::error::DecodeError;
use super::frame::encode_frame;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub opcode: u8,
    pub payload: Vec<u8>,
    pub close_code: Option<u16>,
    pub close_reason: String,
}

pub fn decode_chunks(dec: &mut FrameDecoder, chunks: &[&[u8]]) -> (Vec<Owned>, Option<DecodeError>) {
    let mut out = Vec::new();
    for c in chunks {
        let r = dec.feed(c, |e| {
            out.push(Owned {
                opcode: e.opcode,
                payload: e.payload.to_vec(),
                close_code: e.close_code,
                close_reason: e.close_reason.to_owned(),
            })
        });
        if let Err(e) = r {
            return (out, Some(e));
        }
    }
    (out, None)
}

pub fn server() -> FrameDecoder {
    FrameDecoder::new(1 << 20, 1 << 20, true)
}

pub fn all(data: &[u8]) -> (Vec<Owned>, Option<DecodeError>) {
    decode_chunks(&mut server(), &[data])
}

pub fn bytewise(data: &[u8]) -> (Vec<Owned>, Option<DecodeError>) {
    let chunks: Vec<&[u8]> = data.chunks(1).collect();
    decode_chunks(&mut server(), &chunks)
}

pub fn masked(opcode: u8, payload: &[u8], fin: bool) -> Vec<u8> {
    encode_frame(i64::from(opcode), payload, fin, false, Some(&[0x37, 0xfa, 0x21, 0x3d])).unwrap()
}

pub fn code_of(data: &[u8]) -> Option<u16> {
    let a = all(data).1.map(|e| e.close_code());
    assert_eq!(
        a,
        bytewise(data).1.map(|e| e.close_code()),
        "chunking changed the outcome"
    );
    a
}
