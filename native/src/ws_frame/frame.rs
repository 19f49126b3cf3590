//! The frame codec, RFC 6455 section 5.2: opcodes, masking, the frame encoder, and the header
//! parser with every check a header alone allows.

use super::error::{DecodeError, EncodeError};

pub const OP_CONT: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// RFC 6455 section 5.5: control frames carry at most 125 payload bytes.
pub const MAX_CONTROL_PAYLOAD: usize = 125;
/// 2 fixed bytes + 8 extended length bytes + 4 mask bytes.
pub const MAX_HEADER_LEN: usize = 14;

fn is_known_opcode(op: u8) -> bool {
    matches!(op, OP_CONT | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG)
}

pub(super) fn is_control(op: u8) -> bool {
    op & 0x8 != 0
}

/// Copies `src` into `dst` from `at` (as much as fits); returns the position after it.
fn put(dst: &mut [u8], at: usize, src: &[u8]) -> usize {
    for (d, s) in dst.iter_mut().skip(at).zip(src) {
        *d = *s;
    }
    at + src.len()
}

pub(super) fn array_at<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// XOR `buf` with `key`, `buf[0]` being payload byte number `offset`; 8 bytes at a time.
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: u64) {
    let mut k = key;
    k.rotate_left((offset % 4) as usize);
    let k8 = u64::from_ne_bytes([k[0], k[1], k[2], k[3], k[0], k[1], k[2], k[3]]);
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        if let Ok(arr) = <[u8; 8]>::try_from(&*c) {
            c.copy_from_slice(&(u64::from_ne_bytes(arr) ^ k8).to_ne_bytes());
        }
    }
    for (b, m) in chunks.into_remainder().iter_mut().zip(k.iter().cycle()) {
        *b ^= m;
    }
}

/// Validated frame parameters; `header` and `write_into` cannot fail afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    opcode: u8,
    fin: bool,
    rsv1: bool,
    mask_key: Option<[u8; 4]>,
    len: usize,
}

impl FrameHead {
    pub fn new(opcode: i64, len: usize, fin: bool, rsv1: bool, mask_key: Option<&[u8]>) -> Result<Self, EncodeError> {
        let op = u8::try_from(opcode)
            .ok()
            .filter(|&o| is_known_opcode(o))
            .ok_or(EncodeError::BadOpcode(opcode))?;
        if is_control(op) {
            if !fin {
                return Err(EncodeError::FragmentedControl(op));
            }
            if len > MAX_CONTROL_PAYLOAD {
                return Err(EncodeError::ControlTooLong { opcode: op, len });
            }
        }
        if rsv1 && !matches!(op, OP_TEXT | OP_BINARY) {
            return Err(EncodeError::Rsv1NotAllowed(op));
        }
        let mask_key = match mask_key {
            None => None,
            Some(k) => Some(<[u8; 4]>::try_from(k).map_err(|_| EncodeError::BadMaskKey(k.len()))?),
        };
        Ok(Self {
            opcode: op,
            fin,
            rsv1,
            mask_key,
            len,
        })
    }

    /// The header bytes (minimal length encoding, section 5.2) and how many of the 14 are used.
    pub fn header(&self) -> ([u8; MAX_HEADER_LEN], usize) {
        let b0 = (u8::from(self.fin) << 7) | (u8::from(self.rsv1) << 6) | self.opcode;
        let mask_bit = if self.mask_key.is_some() { 0x80 } else { 0 };
        let (l16, l64);
        let (len7, ext): (u8, &[u8]) = if self.len < 126 {
            (self.len as u8, &[])
        } else if let Ok(v) = u16::try_from(self.len) {
            l16 = v.to_be_bytes();
            (126, &l16)
        } else {
            l64 = (self.len as u64).to_be_bytes();
            (127, &l64)
        };
        let mut h = [0u8; MAX_HEADER_LEN];
        let mut n = put(&mut h, 0, &[b0, mask_bit | len7]);
        n = put(&mut h, n, ext);
        if let Some(k) = self.mask_key {
            n = put(&mut h, n, &k);
        }
        (h, n)
    }

    pub fn encoded_len(&self) -> usize {
        self.header().1.saturating_add(self.len)
    }

    /// Writes header and (masked) payload into `out`, which must be `encoded_len()` bytes long.
    pub fn write_into(&self, out: &mut [u8], payload: &[u8]) -> bool {
        let (h, n) = self.header();
        let (Some(src), true) = (h.get(..n), payload.len() == self.len) else {
            return false;
        };
        let Some((head, body)) = out.split_at_mut_checked(n) else {
            return false;
        };
        if body.len() != payload.len() {
            return false;
        }
        head.copy_from_slice(src);
        body.copy_from_slice(payload);
        if let Some(k) = self.mask_key {
            apply_mask(body, k, 0);
        }
        true
    }
}

/// One complete frame, RFC 6455 section 5.2.
pub fn encode_frame(
    opcode: i64,
    payload: &[u8],
    fin: bool,
    rsv1: bool,
    mask_key: Option<&[u8]>,
) -> Result<Vec<u8>, EncodeError> {
    let head = FrameHead::new(opcode, payload.len(), fin, rsv1, mask_key)?;
    let mut out = vec![0u8; head.encoded_len()];
    head.write_into(&mut out, payload);
    Ok(out)
}

/// The decoder's limits, as the header checks need them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    pub max_frame_size: u64,
    pub max_message_size: u64,
    pub require_mask: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub fin: bool,
    pub opcode: u8,
    pub mask: Option<[u8; 4]>,
    pub len: u64,
    pub header_len: usize,
}

/// Runs every check the available header bytes allow, in byte order (so the first violation
/// does not depend on how the stream was chunked). `Ok(None)`: more bytes needed.
pub(super) fn parse_header(
    buf: &[u8],
    limits: &FrameLimits,
    msg_open: Option<u8>,
    msg_claimed: u64,
) -> Result<Option<Header>, DecodeError> {
    let Some(&b0) = buf.first() else {
        return Ok(None);
    };
    let fin = b0 & 0x80 != 0;
    let rsv = (b0 >> 4) & 0x7;
    let opcode = b0 & 0x0F;
    if rsv != 0 {
        return Err(DecodeError::ReservedBits(rsv));
    }
    if !is_known_opcode(opcode) {
        return Err(DecodeError::UnknownOpcode(opcode));
    }
    let control = is_control(opcode);
    if control && !fin {
        return Err(DecodeError::FragmentedControl(opcode));
    }
    match (opcode, msg_open) {
        (OP_CONT, None) => return Err(DecodeError::UnexpectedContinuation),
        (OP_TEXT | OP_BINARY, Some(_)) => return Err(DecodeError::MessageInterrupted(opcode)),
        _ => {}
    }
    let Some(&b1) = buf.get(1) else {
        return Ok(None);
    };
    let masked = b1 & 0x80 != 0;
    if limits.require_mask && !masked {
        return Err(DecodeError::Unmasked);
    }
    let len7 = b1 & 0x7F;
    if control && usize::from(len7) > MAX_CONTROL_PAYLOAD {
        return Err(DecodeError::ControlTooLong(opcode));
    }
    if opcode == OP_CLOSE && len7 == 1 {
        return Err(DecodeError::CloseLengthOne);
    }
    let (len, mut pos) = match len7 {
        126 => {
            let Some(b) = array_at::<2>(buf, 2) else {
                return Ok(None);
            };
            let v = u64::from(u16::from_be_bytes(b));
            if v < 126 {
                return Err(DecodeError::NonMinimalLength(v));
            }
            (v, 4)
        }
        127 => {
            let Some(b) = array_at::<8>(buf, 2) else {
                return Ok(None);
            };
            let v = u64::from_be_bytes(b);
            if v >> 63 != 0 {
                return Err(DecodeError::LengthTopBit);
            }
            if v <= 0xFFFF {
                return Err(DecodeError::NonMinimalLength(v));
            }
            (v, 10)
        }
        n => (u64::from(n), 2),
    };
    if len > limits.max_frame_size {
        return Err(DecodeError::FrameTooBig {
            len,
            max: limits.max_frame_size,
        });
    }
    if !control {
        let before = if opcode == OP_CONT { msg_claimed } else { 0 };
        let total = before.saturating_add(len);
        if total > limits.max_message_size {
            return Err(DecodeError::MessageTooBig {
                total,
                max: limits.max_message_size,
            });
        }
    }
    let mask = if masked {
        let Some(k) = array_at::<4>(buf, pos) else {
            return Ok(None);
        };
        pos += 4;
        Some(k)
    } else {
        None
    };
    Ok(Some(Header {
        fin,
        opcode,
        mask,
        len,
        header_len: pos,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws_frame::testing::{all, code_of, masked, server};

    #[test]
    fn mask_matches_bytewise_xor_at_every_offset() {
        let key = [1u8, 2, 3, 250];
        for len in 0..40 {
            for off in 0..8u64 {
                let src: Vec<u8> = (0..len as u8).collect();
                let mut fast = src.clone();
                apply_mask(&mut fast, key, off);
                let slow: Vec<u8> = src
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ key[(i + off as usize) % 4])
                    .collect();
                assert_eq!(fast, slow, "len {len} offset {off}");
            }
        }
    }

    #[test]
    fn header_uses_minimal_length_encoding() {
        for (len, hlen, b1) in [
            (0usize, 2, 0u8),
            (125, 2, 125),
            (126, 4, 126),
            (65535, 4, 126),
            (65536, 10, 127),
        ] {
            let f = encode_frame(2, &vec![7u8; len], true, false, None).unwrap();
            assert_eq!(f.len(), hlen + len);
            assert_eq!(f[0], 0x82);
            assert_eq!(f[1], b1);
            let m = encode_frame(2, &vec![7u8; len], true, false, Some(&[1, 2, 3, 4])).unwrap();
            assert_eq!(m.len(), hlen + 4 + len);
            assert_eq!(m[1], 0x80 | b1);
        }
        assert_eq!(
            encode_frame(1, b"Hello", true, false, Some(&[0x37, 0xfa, 0x21, 0x3d])).unwrap(),
            [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        );
        assert_eq!(
            encode_frame(1, b"Hel", false, false, None).unwrap(),
            [0x01, 0x03, 0x48, 0x65, 0x6c]
        );
        assert_eq!(encode_frame(1, b"x", true, true, None).unwrap(), [0xc1, 0x01, b'x']);
    }

    #[test]
    fn encoder_rejects_invalid_frames() {
        assert_eq!(encode_frame(3, b"", true, false, None), Err(EncodeError::BadOpcode(3)));
        assert_eq!(
            encode_frame(-1, b"", true, false, None),
            Err(EncodeError::BadOpcode(-1))
        );
        assert_eq!(
            encode_frame(256 + 1, b"", true, false, None),
            Err(EncodeError::BadOpcode(257))
        );
        assert_eq!(
            encode_frame(9, &[0; 126], true, false, None),
            Err(EncodeError::ControlTooLong { opcode: 9, len: 126 })
        );
        assert!(encode_frame(9, &[0; 125], true, false, None).is_ok());
        assert_eq!(
            encode_frame(8, b"", false, false, None),
            Err(EncodeError::FragmentedControl(8))
        );
        assert_eq!(
            encode_frame(0, b"", true, true, None),
            Err(EncodeError::Rsv1NotAllowed(0))
        );
        assert_eq!(
            encode_frame(1, b"", true, false, Some(&[1, 2, 3])),
            Err(EncodeError::BadMaskKey(3))
        );
    }

    #[test]
    fn p22_unmasked_client_frame() {
        let (ev, err) = all(&[0x81, 0x02, 0x48, 0x69]);
        assert!(ev.is_empty());
        assert_eq!(err, Some(DecodeError::Unmasked));
        assert_eq!(code_of(&[0x81, 0x02, 0x48, 0x69]), Some(1002));
    }

    #[test]
    fn header_checks() {
        assert_eq!(all(&[0xC1]).1, Some(DecodeError::ReservedBits(4)));
        assert_eq!(all(&[0x93]).1, Some(DecodeError::ReservedBits(1)));
        assert_eq!(all(&[0x83]).1, Some(DecodeError::UnknownOpcode(3)));
        assert_eq!(all(&[0x8B]).1, Some(DecodeError::UnknownOpcode(0xB)));
        assert_eq!(all(&[0x88, 0x81]).1, Some(DecodeError::CloseLengthOne));
        // Errors that depend only on the first byte fire before the second arrives.
        assert_eq!(all(&[0x00]).1, Some(DecodeError::UnexpectedContinuation));
        let mut dec = server();
        assert_eq!(dec.feed(&[0xC1], |_| {}).map_err(|e| e.close_code()), Err(1002));
        assert!(dec.failed().is_some());
        assert_eq!(
            dec.feed(&masked(OP_TEXT, b"ok", true), |_| {})
                .map_err(|e| e.close_code()),
            Err(1002)
        );
    }
}
