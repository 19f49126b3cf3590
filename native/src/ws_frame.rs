//! WebSocket framing, RFC 6455: handshake accept key, frame encoder, incremental frame decoder.
//! Docs live in the stub (ws_frame.pyi).

use std::fmt;
use std::sync::{Mutex, TryLockError};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use sha1::{Digest, Sha1};

use crate::errors::ProtocolError;

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
/// RFC 6455 section 1.3.
const WS_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The decoder's message buffer keeps at most this much capacity between messages.
const KEEP_CAPACITY: usize = 64 * 1024;

fn is_known_opcode(op: u8) -> bool {
    matches!(op, OP_CONT | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG)
}

fn is_control(op: u8) -> bool {
    op & 0x8 != 0
}

/// RFC 6455 section 7.4.1 and the IANA registry: the codes an endpoint may put on the wire.
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Copies `src` into `dst` from `at` (as much as fits); returns the position after it.
fn put(dst: &mut [u8], at: usize, src: &[u8]) -> usize {
    for (d, s) in dst.iter_mut().skip(at).zip(src) {
        *d = *s;
    }
    at + src.len()
}

fn array_at<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at.checked_add(N)?)?.try_into().ok()
}

// ---------------------------------------------------------------------------------------------
// Handshake

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcceptKeyError {
    NotBase64,
    WrongLength(usize),
}

impl fmt::Display for AcceptKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotBase64 => write!(f, "Sec-WebSocket-Key is not canonical padded base64"),
            Self::WrongLength(n) => {
                write!(f, "Sec-WebSocket-Key must decode to 16 bytes, got {n}")
            }
        }
    }
}

impl std::error::Error for AcceptKeyError {}

impl From<AcceptKeyError> for PyErr {
    fn from(e: AcceptKeyError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

/// Sec-WebSocket-Accept for a Sec-WebSocket-Key, RFC 6455 section 4.2.2 step 5.4.
pub fn accept_key(key: &str) -> Result<String, AcceptKeyError> {
    let raw = STANDARD.decode(key).map_err(|_| AcceptKeyError::NotBase64)?;
    if raw.len() != 16 {
        return Err(AcceptKeyError::WrongLength(raw.len()));
    }
    let mut h = Sha1::new();
    h.update(key.as_bytes());
    h.update(WS_GUID);
    Ok(STANDARD.encode(h.finalize()))
}

// ---------------------------------------------------------------------------------------------
// Encoder

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    BadOpcode(i64),
    ControlTooLong { opcode: u8, len: usize },
    FragmentedControl(u8),
    Rsv1NotAllowed(u8),
    BadMaskKey(usize),
    BadCloseCode(i64),
    CloseReasonTooLong(usize),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadOpcode(op) => write!(f, "opcode {op} is not one of 0, 1, 2, 8, 9, 10"),
            Self::ControlTooLong { opcode, len } => write!(
                f,
                "control frame (opcode {opcode}) payload is {len} bytes, above the limit of {MAX_CONTROL_PAYLOAD}"
            ),
            Self::FragmentedControl(op) => {
                write!(f, "control frame (opcode {op}) must have fin=True")
            }
            Self::Rsv1NotAllowed(op) => write!(
                f,
                "rsv1 may only be set on the first frame of a text or binary message, not opcode {op}"
            ),
            Self::BadMaskKey(n) => write!(f, "mask_key must be 4 bytes, got {n}"),
            Self::BadCloseCode(c) => {
                write!(
                    f,
                    "close code {c} may not be sent (allowed: 1000-1003, 1007-1014, 3000-4999)"
                )
            }
            Self::CloseReasonTooLong(n) => {
                write!(f, "close reason is {n} UTF-8 bytes, above the limit of 123")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

impl From<EncodeError> for PyErr {
    fn from(e: EncodeError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
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

/// The payload of a close frame, section 5.5.1: 2-byte code then a UTF-8 reason, 125 bytes at most.
pub fn close_payload(code: i64, reason: &str) -> Result<Vec<u8>, EncodeError> {
    let c = u16::try_from(code)
        .ok()
        .filter(|&c| is_valid_close_code(c))
        .ok_or(EncodeError::BadCloseCode(code))?;
    if reason.len() > MAX_CONTROL_PAYLOAD - 2 {
        return Err(EncodeError::CloseReasonTooLong(reason.len()));
    }
    let mut p = Vec::with_capacity(2 + reason.len());
    p.extend_from_slice(&c.to_be_bytes());
    p.extend_from_slice(reason.as_bytes());
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// Decoder

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    ReservedBits(u8),
    UnknownOpcode(u8),
    FragmentedControl(u8),
    ControlTooLong(u8),
    Unmasked,
    UnexpectedContinuation,
    MessageInterrupted(u8),
    NonMinimalLength(u64),
    LengthTopBit,
    CloseLengthOne,
    InvalidCloseCode(u16),
    FrameTooBig { len: u64, max: u64 },
    MessageTooBig { total: u64, max: u64 },
    InvalidUtf8Text,
    InvalidUtf8CloseReason,
}

impl DecodeError {
    /// The close code to fail the connection with, RFC 6455 section 7.4.1.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::FrameTooBig { .. } | Self::MessageTooBig { .. } => 1009,
            Self::InvalidUtf8Text | Self::InvalidUtf8CloseReason => 1007,
            _ => 1002,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReservedBits(b) => write!(
                f,
                "reserved bits RSV1-3 = {b:03b} set without a negotiated extension (RFC 6455 5.2)"
            ),
            Self::UnknownOpcode(op) => write!(f, "reserved opcode {op:#x} (RFC 6455 5.2)"),
            Self::FragmentedControl(op) => write!(f, "control frame (opcode {op:#x}) with FIN=0 (RFC 6455 5.5)"),
            Self::ControlTooLong(op) => write!(
                f,
                "control frame (opcode {op:#x}) payload above 125 bytes (RFC 6455 5.5)"
            ),
            Self::Unmasked => write!(f, "unmasked client frame (RFC 6455 5.1)"),
            Self::UnexpectedContinuation => write!(f, "continuation frame with no message open (RFC 6455 5.4)"),
            Self::MessageInterrupted(op) => write!(
                f,
                "new data frame (opcode {op:#x}) while a fragmented message is open (RFC 6455 5.4)"
            ),
            Self::NonMinimalLength(n) => write!(f, "payload length {n} not in its minimal encoding (RFC 6455 5.2)"),
            Self::LengthTopBit => write!(
                f,
                "64-bit payload length with the most significant bit set (RFC 6455 5.2)"
            ),
            Self::CloseLengthOne => write!(f, "close frame with a 1-byte payload (RFC 6455 5.5.1)"),
            Self::InvalidCloseCode(c) => write!(f, "close code {c} is not allowed on the wire (RFC 6455 7.4)"),
            Self::FrameTooBig { len, max } => write!(f, "frame of {len} bytes exceeds max_frame_size {max}"),
            Self::MessageTooBig { total, max } => {
                write!(f, "message of at least {total} bytes exceeds max_message_size {max}")
            }
            Self::InvalidUtf8Text => write!(f, "text message is not valid UTF-8 (RFC 6455 8.1)"),
            Self::InvalidUtf8CloseReason => write!(f, "close reason is not valid UTF-8 (RFC 6455 5.5.1)"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for PyErr {
    fn from(e: DecodeError) -> PyErr {
        Python::attach(|py| {
            let err = ProtocolError::new_err(e.to_string());
            match err.value(py).setattr("close_code", e.close_code()) {
                Ok(()) => err,
                Err(set_err) => set_err,
            }
        })
    }
}

/// Streaming UTF-8 check: a code point may be split anywhere; an invalid byte fails at once.
#[derive(Debug, Default, Clone, Copy)]
struct Utf8Stream {
    pending: [u8; 4],
    len: usize,
}

impl Utf8Stream {
    fn feed(&mut self, mut s: &[u8]) -> bool {
        while self.len > 0 {
            let Some((&b, rest)) = s.split_first() else {
                return true;
            };
            s = rest;
            let Some(slot) = self.pending.get_mut(self.len) else {
                return false;
            };
            *slot = b;
            self.len += 1;
            match simdutf8::compat::from_utf8(self.pending.get(..self.len).unwrap_or_default()) {
                Ok(_) => self.len = 0,
                Err(e) if e.error_len().is_none() => {}
                Err(_) => return false,
            }
        }
        match simdutf8::compat::from_utf8(s) {
            Ok(_) => true,
            Err(e) if e.error_len().is_none() => {
                let tail = s.get(e.valid_up_to()..).unwrap_or_default();
                match self.pending.get_mut(..tail.len()) {
                    Some(dst) if tail.len() < 4 => {
                        dst.copy_from_slice(tail);
                        self.len = tail.len();
                        true
                    }
                    _ => false,
                }
            }
            Err(_) => false,
        }
    }

    fn is_complete(&self) -> bool {
        self.len == 0
    }
}

/// A delivered frame: a whole data message (opcode of its first fragment) or a control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    pub opcode: u8,
    pub payload: &'a [u8],
    /// CLOSE only: the status code, None for an empty close payload.
    pub close_code: Option<u16>,
    /// CLOSE only: the reason (validated UTF-8).
    pub close_reason: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    fin: bool,
    opcode: u8,
    mask: Option<[u8; 4]>,
    len: u64,
    header_len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FrameState {
    opcode: u8,
    /// The message's opcode (the first fragment's) for data frames, the frame's own for control.
    msg_opcode: u8,
    fin: bool,
    mask: Option<[u8; 4]>,
    len: u64,
    done: u64,
}

/// Incremental RFC 6455 frame decoder (server side when `require_mask`).
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_size: u64,
    max_message_size: u64,
    require_mask: bool,
    hdr: [u8; MAX_HEADER_LEN],
    hdr_len: usize,
    frame: Option<FrameState>,
    /// Opcode of the open fragmented message, if any.
    msg_open: Option<u8>,
    /// Sum of the frame lengths of the current message, as claimed by their headers.
    msg_claimed: u64,
    msg_buf: Vec<u8>,
    utf8: Utf8Stream,
    ctrl_buf: Vec<u8>,
    failed: Option<DecodeError>,
}

impl FrameDecoder {
    pub fn new(max_frame_size: u64, max_message_size: u64, require_mask: bool) -> Self {
        Self {
            max_frame_size,
            max_message_size,
            require_mask,
            hdr: [0; MAX_HEADER_LEN],
            hdr_len: 0,
            frame: None,
            msg_open: None,
            msg_claimed: 0,
            msg_buf: Vec::new(),
            utf8: Utf8Stream::default(),
            ctrl_buf: Vec::new(),
            failed: None,
        }
    }

    pub fn failed(&self) -> Option<&DecodeError> {
        self.failed.as_ref()
    }

    /// Consumes `data`, calling `emit` for each complete message or control frame in order.
    /// After an error every later call returns the same error.
    pub fn feed<F: FnMut(Event<'_>)>(&mut self, data: &[u8], mut emit: F) -> Result<(), DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.feed_inner(data, &mut emit);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
            self.msg_buf = Vec::new();
            self.ctrl_buf = Vec::new();
            self.frame = None;
        }
        r
    }

    /// Runs every check the available header bytes allow, in byte order (so the first violation
    /// does not depend on how the stream was chunked). `Ok(None)`: more bytes needed.
    fn parse_header(&self, buf: &[u8]) -> Result<Option<Header>, DecodeError> {
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
        match (opcode, self.msg_open) {
            (OP_CONT, None) => return Err(DecodeError::UnexpectedContinuation),
            (OP_TEXT | OP_BINARY, Some(_)) => return Err(DecodeError::MessageInterrupted(opcode)),
            _ => {}
        }
        let Some(&b1) = buf.get(1) else {
            return Ok(None);
        };
        let masked = b1 & 0x80 != 0;
        if self.require_mask && !masked {
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
        if len > self.max_frame_size {
            return Err(DecodeError::FrameTooBig {
                len,
                max: self.max_frame_size,
            });
        }
        if !control {
            let before = if opcode == OP_CONT { self.msg_claimed } else { 0 };
            let total = before.saturating_add(len);
            if total > self.max_message_size {
                return Err(DecodeError::MessageTooBig {
                    total,
                    max: self.max_message_size,
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

    fn feed_inner<F: FnMut(Event<'_>)>(&mut self, mut input: &[u8], emit: &mut F) -> Result<(), DecodeError> {
        loop {
            let Some(mut f) = self.frame else {
                if input.is_empty() {
                    return Ok(());
                }
                let h = if self.hdr_len == 0 && input.len() >= MAX_HEADER_LEN {
                    let Some(h) = self.parse_header(input)? else {
                        return Ok(());
                    };
                    input = input.get(h.header_len..).unwrap_or_default();
                    h
                } else {
                    let old = self.hdr_len;
                    let take = (MAX_HEADER_LEN - old).min(input.len());
                    let (Some(dst), Some(src)) = (self.hdr.get_mut(old..old + take), input.get(..take)) else {
                        return Ok(());
                    };
                    dst.copy_from_slice(src);
                    let avail = old + take;
                    match self.parse_header(self.hdr.get(..avail).unwrap_or_default())? {
                        Some(h) => {
                            input = input.get(h.header_len.saturating_sub(old)..).unwrap_or_default();
                            self.hdr_len = 0;
                            h
                        }
                        None => {
                            self.hdr_len = avail;
                            return Ok(());
                        }
                    }
                };
                self.start_frame(h, emit)?;
                continue;
            };
            if input.is_empty() {
                return Ok(());
            }
            let want = f.len - f.done;
            let n = usize::try_from(want).map_or(input.len(), |w| w.min(input.len()));
            let Some((chunk, rest)) = input.split_at_checked(n) else {
                return Ok(());
            };
            input = rest;
            if is_control(f.opcode) {
                self.ctrl_append(&mut f, chunk);
                if f.opcode == OP_CLOSE {
                    self.check_close(f.done == f.len)?;
                }
            } else if f.done == 0 && n as u64 == f.len && f.mask.is_none() && f.fin && self.msg_buf.is_empty() {
                // Whole unfragmented unmasked message in this chunk: deliver it without copying.
                if f.msg_opcode == OP_TEXT {
                    let mut u = Utf8Stream::default();
                    if !(u.feed(chunk) && u.is_complete()) {
                        return Err(DecodeError::InvalidUtf8Text);
                    }
                }
                self.frame = None;
                self.msg_open = None;
                self.msg_claimed = 0;
                emit(Event {
                    opcode: f.msg_opcode,
                    payload: chunk,
                    close_code: None,
                    close_reason: "",
                });
                continue;
            } else {
                let start = self.msg_buf.len();
                self.msg_buf.extend_from_slice(chunk);
                let fresh = self.msg_buf.get_mut(start..).unwrap_or_default();
                if let Some(k) = f.mask {
                    apply_mask(fresh, k, f.done);
                }
                if f.msg_opcode == OP_TEXT && !self.utf8.feed(fresh) {
                    return Err(DecodeError::InvalidUtf8Text);
                }
                f.done += n as u64;
            }
            self.frame = Some(f);
            if f.done == f.len {
                self.finish_frame(f, emit)?;
            }
        }
    }

    fn ctrl_append(&mut self, f: &mut FrameState, chunk: &[u8]) {
        let start = self.ctrl_buf.len();
        self.ctrl_buf.extend_from_slice(chunk);
        if let (Some(k), Some(fresh)) = (f.mask, self.ctrl_buf.get_mut(start..)) {
            apply_mask(fresh, k, f.done);
        }
        f.done += chunk.len() as u64;
    }

    fn start_frame<F: FnMut(Event<'_>)>(&mut self, h: Header, emit: &mut F) -> Result<(), DecodeError> {
        let msg_opcode = match h.opcode {
            OP_CONT => {
                self.msg_claimed = self.msg_claimed.saturating_add(h.len);
                self.msg_open.unwrap_or(OP_BINARY)
            }
            OP_TEXT | OP_BINARY => {
                self.msg_claimed = h.len;
                self.utf8 = Utf8Stream::default();
                if !h.fin {
                    self.msg_open = Some(h.opcode);
                }
                h.opcode
            }
            op => {
                self.ctrl_buf.clear();
                op
            }
        };
        let f = FrameState {
            opcode: h.opcode,
            msg_opcode,
            fin: h.fin,
            mask: h.mask,
            len: h.len,
            done: 0,
        };
        self.frame = Some(f);
        if f.len == 0 {
            if f.opcode == OP_CLOSE {
                self.check_close(true)?;
            }
            self.finish_frame(f, emit)?;
        }
        Ok(())
    }

    fn check_close(&self, complete: bool) -> Result<(), DecodeError> {
        let p = self.ctrl_buf.as_slice();
        if let Some(code) = array_at::<2>(p, 0) {
            let code = u16::from_be_bytes(code);
            if !is_valid_close_code(code) {
                return Err(DecodeError::InvalidCloseCode(code));
            }
            match simdutf8::compat::from_utf8(p.get(2..).unwrap_or_default()) {
                Ok(_) => {}
                Err(e) if e.error_len().is_none() && !complete => {}
                Err(_) => return Err(DecodeError::InvalidUtf8CloseReason),
            }
        } else if complete && p.len() == 1 {
            return Err(DecodeError::CloseLengthOne);
        }
        Ok(())
    }

    fn finish_frame<F: FnMut(Event<'_>)>(&mut self, f: FrameState, emit: &mut F) -> Result<(), DecodeError> {
        self.frame = None;
        if is_control(f.opcode) {
            let p = self.ctrl_buf.as_slice();
            let (close_code, close_reason) = match (f.opcode, array_at::<2>(p, 0)) {
                (OP_CLOSE, Some(c)) => {
                    let reason = simdutf8::basic::from_utf8(p.get(2..).unwrap_or_default())
                        .map_err(|_| DecodeError::InvalidUtf8CloseReason)?;
                    (Some(u16::from_be_bytes(c)), reason)
                }
                _ => (None, ""),
            };
            emit(Event {
                opcode: f.opcode,
                payload: p,
                close_code,
                close_reason,
            });
            self.ctrl_buf.clear();
            return Ok(());
        }
        if !f.fin {
            return Ok(());
        }
        if f.msg_opcode == OP_TEXT && !self.utf8.is_complete() {
            return Err(DecodeError::InvalidUtf8Text);
        }
        self.msg_open = None;
        self.msg_claimed = 0;
        emit(Event {
            opcode: f.msg_opcode,
            payload: &self.msg_buf,
            close_code: None,
            close_reason: "",
        });
        self.msg_buf.clear();
        if self.msg_buf.capacity() > KEEP_CAPACITY {
            self.msg_buf = Vec::new();
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Python layer

fn new_bytes<'py>(py: Python<'py>, s: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    // SAFETY: `s` is a valid slice for the duration of the call (its length fits isize, as every
    // slice's does); PyBytes_FromStringAndSize copies it and returns a new reference or NULL with
    // an exception set, which from_owned_ptr_or_err turns into Err.
    unsafe {
        let ptr = pyo3::ffi::PyBytes_FromStringAndSize(s.as_ptr().cast(), s.len() as pyo3::ffi::Py_ssize_t);
        Ok(Bound::from_owned_ptr_or_err(py, ptr)?.cast_into_unchecked())
    }
}

/// Runs `f` over the bytes of a bytes-like object: `bytes` without copying, any other buffer
/// (bytearray, memoryview, ...) through one copy.
fn with_buffer<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    let buf = PyBuffer::<u8>::get(obj)?;
    let v = buf.to_vec(obj.py())?;
    Ok(f(&v))
}

#[pyfunction(name = "accept_key")]
#[pyo3(signature = (sec_websocket_key))]
fn accept_key_py(sec_websocket_key: &str) -> PyResult<String> {
    Ok(accept_key(sec_websocket_key)?)
}

#[pyfunction(name = "encode_frame")]
#[pyo3(signature = (opcode, payload, *, fin = true, mask_key = None, rsv1 = false))]
fn encode_frame_py<'py>(
    py: Python<'py>,
    opcode: i64,
    payload: &Bound<'py, PyAny>,
    fin: bool,
    mask_key: Option<&[u8]>,
    rsv1: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    with_buffer(payload, |p| {
        let head = FrameHead::new(opcode, p.len(), fin, rsv1, mask_key)?;
        PyBytes::new_with(py, head.encoded_len(), |out| {
            if head.write_into(out, p) {
                Ok(())
            } else {
                Err(PyRuntimeError::new_err("frame length mismatch"))
            }
        })
    })?
}

#[pyfunction(name = "encode_close")]
#[pyo3(signature = (code, reason = "", *, mask_key = None))]
fn encode_close_py<'py>(
    py: Python<'py>,
    code: i64,
    reason: &str,
    mask_key: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    let payload = close_payload(code, reason)?;
    let bytes = encode_frame(i64::from(OP_CLOSE), &payload, true, false, mask_key)?;
    new_bytes(py, &bytes)
}

/// A decoded message or control frame.
#[pyclass(frozen, module = "hongbao_native", name = "Frame")]
pub struct PyFrame {
    #[pyo3(get)]
    opcode: u8,
    #[pyo3(get)]
    payload: Py<PyBytes>,
    #[pyo3(get)]
    close_code: Option<u16>,
    #[pyo3(get)]
    close_reason: String,
}

#[pymethods]
impl PyFrame {
    #[getter]
    fn text<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyString>> {
        if self.opcode != OP_TEXT {
            return Err(PyValueError::new_err(format!(
                "frame with opcode {} is not a text message",
                self.opcode
            )));
        }
        let s = std::str::from_utf8(self.payload.as_bytes(py))
            .map_err(|_| PyValueError::new_err("text payload is not valid UTF-8"))?;
        Ok(PyString::new(py, s))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let n = self.payload.as_bytes(py).len();
        match self.close_code {
            Some(c) => format!(
                "Frame(opcode={}, close_code={c}, close_reason={:?})",
                self.opcode, self.close_reason
            ),
            None => format!("Frame(opcode={}, payload=<{n} bytes>)", self.opcode),
        }
    }
}

/// Incremental frame decoder; `feed` is not re-entrant (concurrent use raises RuntimeError).
#[pyclass(frozen, module = "hongbao_native", name = "FrameDecoder")]
pub struct PyFrameDecoder {
    inner: Mutex<FrameDecoder>,
    #[pyo3(get)]
    max_frame_size: u64,
    #[pyo3(get)]
    max_message_size: u64,
    #[pyo3(get)]
    require_mask: bool,
}

#[pymethods]
impl PyFrameDecoder {
    #[new]
    #[pyo3(signature = (max_frame_size, max_message_size, require_mask = true))]
    fn new(max_frame_size: u64, max_message_size: u64, require_mask: bool) -> Self {
        Self {
            inner: Mutex::new(FrameDecoder::new(max_frame_size, max_message_size, require_mask)),
            max_frame_size,
            max_message_size,
            require_mask,
        }
    }

    #[pyo3(signature = (data))]
    fn feed<'py>(&self, py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let mut dec = match self.inner.try_lock() {
            Ok(g) => g,
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err("FrameDecoder.feed called concurrently"))
            }
            Err(TryLockError::Poisoned(_)) => {
                return Err(PyRuntimeError::new_err("FrameDecoder is poisoned by an earlier panic"))
            }
        };
        let mut out: Vec<Py<PyFrame>> = Vec::new();
        let mut py_err: Option<PyErr> = None;
        let res = with_buffer(data, |d| {
            dec.feed(d, |ev| {
                if py_err.is_some() {
                    return;
                }
                let made = new_bytes(py, ev.payload).and_then(|payload| {
                    Py::new(
                        py,
                        PyFrame {
                            opcode: ev.opcode,
                            payload: payload.unbind(),
                            close_code: ev.close_code,
                            close_reason: ev.close_reason.to_owned(),
                        },
                    )
                });
                match made {
                    Ok(f) => out.push(f),
                    Err(e) => py_err = Some(e),
                }
            })
        })?;
        drop(dec);
        res?;
        if let Some(e) = py_err {
            return Err(e);
        }
        PyList::new(py, out)
    }

    /// True once a feed has raised ProtocolError.
    #[getter]
    fn failed(&self) -> PyResult<bool> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g.failed().is_some()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err("FrameDecoder is in use")),
            Err(TryLockError::Poisoned(_)) => Ok(true),
        }
    }
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("OP_CONT", OP_CONT)?;
    m.add("OP_TEXT", OP_TEXT)?;
    m.add("OP_BINARY", OP_BINARY)?;
    m.add("OP_CLOSE", OP_CLOSE)?;
    m.add("OP_PING", OP_PING)?;
    m.add("OP_PONG", OP_PONG)?;
    m.add_function(wrap_pyfunction!(accept_key_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_frame_py, m)?)?;
    m.add_function(wrap_pyfunction!(encode_close_py, m)?)?;
    m.add_class::<PyFrame>()?;
    m.add_class::<PyFrameDecoder>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Owned {
        opcode: u8,
        payload: Vec<u8>,
        close_code: Option<u16>,
        close_reason: String,
    }

    fn decode_chunks(dec: &mut FrameDecoder, chunks: &[&[u8]]) -> (Vec<Owned>, Option<DecodeError>) {
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

    fn server() -> FrameDecoder {
        FrameDecoder::new(1 << 20, 1 << 20, true)
    }

    fn all(data: &[u8]) -> (Vec<Owned>, Option<DecodeError>) {
        decode_chunks(&mut server(), &[data])
    }

    fn bytewise(data: &[u8]) -> (Vec<Owned>, Option<DecodeError>) {
        let chunks: Vec<&[u8]> = data.chunks(1).collect();
        decode_chunks(&mut server(), &chunks)
    }

    fn masked(opcode: u8, payload: &[u8], fin: bool) -> Vec<u8> {
        encode_frame(i64::from(opcode), payload, fin, false, Some(&[0x37, 0xfa, 0x21, 0x3d])).unwrap()
    }

    fn code_of(data: &[u8]) -> Option<u16> {
        let a = all(data).1.map(|e| e.close_code());
        assert_eq!(
            a,
            bytewise(data).1.map(|e| e.close_code()),
            "chunking changed the outcome"
        );
        a
    }

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ==").unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ"), Err(AcceptKeyError::NotBase64));
        assert_eq!(accept_key("aGVsbG8="), Err(AcceptKeyError::WrongLength(5)));
        assert_eq!(accept_key(""), Err(AcceptKeyError::WrongLength(0)));
        assert_eq!(accept_key(" dGhlIHNhbXBsZSBub25jZQ=="), Err(AcceptKeyError::NotBase64));
    }

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
        assert_eq!(close_payload(1005, ""), Err(EncodeError::BadCloseCode(1005)));
        assert_eq!(
            close_payload(1000, &"a".repeat(124)),
            Err(EncodeError::CloseReasonTooLong(124))
        );
        assert_eq!(close_payload(1000, &"a".repeat(123)).unwrap().len(), 125);
        assert_eq!(close_payload(4999, "ok").unwrap(), [0x13, 0x87, b'o', b'k']);
    }

    #[test]
    fn close_code_table() {
        for c in [1000u16, 1001, 1002, 1003, 1007, 1010, 1011, 1014, 3000, 4999] {
            assert!(is_valid_close_code(c), "{c}");
        }
        for c in [0u16, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
            assert!(!is_valid_close_code(c), "{c}");
        }
    }

    #[test]
    fn round_trip_across_length_boundaries() {
        for len in [0usize, 1, 125, 126, 127, 65535, 65536, 70000] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let frame = masked(OP_BINARY, &payload, true);
            let (ev, err) = all(&frame);
            assert_eq!(err, None);
            assert_eq!(
                ev,
                vec![Owned {
                    opcode: OP_BINARY,
                    payload: payload.clone(),
                    close_code: None,
                    close_reason: String::new()
                }]
            );
            if len <= 1000 {
                assert_eq!(bytewise(&frame).0, ev);
            }
            let plain = encode_frame(2, &payload, true, false, None).unwrap();
            let (ev2, err2) = decode_chunks(&mut FrameDecoder::new(1 << 20, 1 << 20, false), &[&plain]);
            assert_eq!((ev2, err2), (ev, None));
        }
    }

    #[test]
    fn p20_control_frames_inside_fragments() {
        let mut s = masked(OP_TEXT, b"hel", false);
        s.extend(masked(OP_PING, b"x", true));
        s.extend(masked(OP_CONT, b"lo", true));
        for (ev, err) in [all(&s), bytewise(&s)] {
            assert_eq!(err, None);
            assert_eq!(
                ev.iter().map(|e| (e.opcode, e.payload.clone())).collect::<Vec<_>>(),
                vec![(OP_PING, b"x".to_vec()), (OP_TEXT, b"hello".to_vec())]
            );
        }
        let mut s = masked(OP_TEXT, b"hel", false);
        s.extend(masked(OP_TEXT, b"lo", true));
        assert_eq!(all(&s).1, Some(DecodeError::MessageInterrupted(OP_TEXT)));
        assert_eq!(code_of(&masked(OP_CONT, b"lo", true)), Some(1002));
        assert_eq!(code_of(&[0x09, 0x80, 1, 2, 3, 4]), Some(1002));
    }

    #[test]
    fn p21_utf8_is_checked_incrementally() {
        assert_eq!(code_of(&masked(OP_TEXT, &[0xED, 0xA0, 0x80], true)), Some(1007));
        let mut s = masked(OP_TEXT, &[0xE2], false);
        s.extend(masked(OP_CONT, &[0x82], false));
        s.extend(masked(OP_CONT, &[0xAC], true));
        assert_eq!(all(&s).0[0].payload, "€".as_bytes());
        assert_eq!(bytewise(&s).0[0].payload, "€".as_bytes());
        assert_eq!(code_of(&masked(OP_CLOSE, &[0x03, 0xE8, 0xFF], true)), Some(1007));
        // Fails on the offending byte even though the frame claims 100 more bytes.
        let mut dec = server();
        let f = masked(OP_TEXT, &[b'a'; 100], true);
        assert!(dec.feed(&f[..10], |_| {}).is_ok());
        let mut bad = f[10..11].to_vec();
        bad[0] ^= 0xFF ^ b'a';
        assert_eq!(dec.feed(&bad, |_| {}).map_err(|e| e.close_code()), Err(1007));
        // A truncated code point at the end of the message is invalid.
        assert_eq!(code_of(&masked(OP_TEXT, &[0xE2, 0x82], true)), Some(1007));
    }

    #[test]
    fn p22_unmasked_client_frame() {
        let (ev, err) = all(&[0x81, 0x02, 0x48, 0x69]);
        assert!(ev.is_empty());
        assert_eq!(err, Some(DecodeError::Unmasked));
        assert_eq!(code_of(&[0x81, 0x02, 0x48, 0x69]), Some(1002));
    }

    #[test]
    fn p23_lengths() {
        let tib = 1u64 << 40;
        let mut h = vec![0x82, 0xFF];
        h.extend(tib.to_be_bytes());
        let mut dec = server();
        assert_eq!(
            dec.feed(&h, |_| {}),
            Err(DecodeError::FrameTooBig { len: tib, max: 1 << 20 })
        );
        assert_eq!(dec.msg_buf.capacity(), 0);
        let mut h = vec![0x82, 0xFF];
        h.extend((1u64 << 63).to_be_bytes());
        assert_eq!(all(&h).1, Some(DecodeError::LengthTopBit));
        assert_eq!(
            all(&[0x82, 0xFE, 0x00, 0x7D]).1,
            Some(DecodeError::NonMinimalLength(125))
        );
        let mut h = vec![0x82, 0xFF];
        h.extend(65535u64.to_be_bytes());
        assert_eq!(all(&h).1, Some(DecodeError::NonMinimalLength(65535)));
        let mut dec = FrameDecoder::new(100, 250, true);
        let mut s = masked(OP_BINARY, &[0; 100], false);
        s.extend(masked(OP_CONT, &[0; 100], false));
        let third = masked(OP_CONT, &[0; 51], true);
        assert!(dec.feed(&s, |_| {}).is_ok());
        assert_eq!(
            dec.feed(&third[..2], |_| {}),
            Err(DecodeError::MessageTooBig { total: 251, max: 250 })
        );
        assert_eq!(dec.feed(b"", |_| {}).map_err(|e| e.close_code()), Err(1009));
    }

    #[test]
    fn p25_ping_edge_cases() {
        let mut h = vec![0x89, 0xFE, 0x00, 0x7E];
        h.extend([0u8; 4 + 126]);
        assert_eq!(code_of(&h), Some(1002));
        let mut s = Vec::new();
        for i in 0..10u8 {
            s.extend(masked(OP_PING, &[i], true));
        }
        s.extend(masked(OP_PONG, b"unsolicited", true));
        let (ev, err) = all(&s);
        assert_eq!(err, None);
        assert_eq!(ev.len(), 11);
        assert!(ev[..10]
            .iter()
            .enumerate()
            .all(|(i, e)| e.opcode == OP_PING && e.payload == [i as u8]));
        assert_eq!(ev[10].opcode, OP_PONG);
    }

    #[test]
    fn close_frames() {
        let (ev, _) = all(&masked(OP_CLOSE, &[0x03, 0xE8, b'b', b'y', b'e'], true));
        assert_eq!((ev[0].close_code, ev[0].close_reason.as_str()), (Some(1000), "bye"));
        let (ev, _) = all(&masked(OP_CLOSE, b"", true));
        assert_eq!((ev[0].close_code, ev[0].close_reason.as_str()), (None, ""));
        assert_eq!(code_of(&masked(OP_CLOSE, &[0x03], true)), Some(1002));
        assert_eq!(code_of(&masked(OP_CLOSE, &1005u16.to_be_bytes(), true)), Some(1002));
        assert_eq!(code_of(&masked(OP_CLOSE, &[0x03, 0xE8, 0xE2, 0x82], true)), Some(1007));
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

    fn chunked<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut pts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        pts.sort_unstable();
        let mut out = Vec::new();
        let mut prev = 0;
        for p in pts.into_iter().chain([data.len()]) {
            out.push(&data[prev..p]);
            prev = p;
        }
        out
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_chunking_does_not_matter(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            require_mask: bool,
        ) {
            let mut a = FrameDecoder::new(200, 300, require_mask);
            let (ev_a, err_a) = decode_chunks(&mut a, &[&data]);
            let mut b = FrameDecoder::new(200, 300, require_mask);
            let (ev_b, err_b) = decode_chunks(&mut b, &chunked(&data, &cuts));
            prop_assert_eq!(err_a.clone().map(|e| e.close_code()), err_b.clone().map(|e| e.close_code()));
            prop_assert_eq!(&err_a, &err_b);
            prop_assert_eq!(ev_a, ev_b);
        }

        #[test]
        fn structured_streams_never_panic_and_chunking_does_not_matter(
            frames in proptest::collection::vec(
                (0u8..16, 0u8..8, any::<bool>(), any::<bool>(), 0u8..4,
                 proptest::collection::vec(any::<u8>(), 0..140)),
                1..6),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
        ) {
            let mut stream = Vec::new();
            for (op, b0_extra, fin, mask, len_form, payload) in &frames {
                let b0 = (u8::from(*fin) << 7) | (if *b0_extra == 7 { 0x40 } else { 0 }) | (op & 0xF);
                let op = if *b0_extra < 4 { [OP_TEXT, OP_BINARY, OP_CONT, OP_PING][*b0_extra as usize] } else { *op };
                let b0 = (b0 & 0xF0) | op;
                stream.push(b0);
                let mb = if *mask { 0x80 } else { 0 };
                let n = payload.len();
                match len_form {
                    0 | 1 if n < 126 => stream.push(mb | n as u8),
                    0 | 1 => { stream.push(mb | 126); stream.extend((n as u16).to_be_bytes()); }
                    2 => { stream.push(mb | 126); stream.extend((n as u16).to_be_bytes()); }
                    _ => { stream.push(mb | 127); stream.extend((n as u64).to_be_bytes()); }
                }
                if *mask {
                    stream.extend([9, 8, 7, 6]);
                }
                stream.extend(payload);
            }
            for require_mask in [true, false] {
                let (ev_a, err_a) = decode_chunks(&mut FrameDecoder::new(130, 300, require_mask), &[&stream]);
                let (ev_b, err_b) = decode_chunks(&mut FrameDecoder::new(130, 300, require_mask), &chunked(&stream, &cuts));
                prop_assert_eq!(&err_a, &err_b);
                prop_assert_eq!(ev_a, ev_b);
            }
        }

        #[test]
        fn encode_then_decode_is_identity(
            msgs in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..4)),
                1..5),
            ping in proptest::collection::vec(any::<u8>(), 0..=125),
            key: [u8; 4],
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
        ) {
            let mut stream = Vec::new();
            let mut want = Vec::new();
            for (text, frags) in &msgs {
                let op = if *text { OP_TEXT } else { OP_BINARY };
                let frags: Vec<Vec<u8>> = if *text {
                    frags.iter().map(|f| String::from_utf8_lossy(f).into_owned().into_bytes()).collect()
                } else {
                    frags.clone()
                };
                for (i, f) in frags.iter().enumerate() {
                    let fop = if i == 0 { op } else { OP_CONT };
                    stream.extend(encode_frame(i64::from(fop), f, i + 1 == frags.len(), false, Some(&key)).unwrap());
                    if i == 0 {
                        stream.extend(encode_frame(i64::from(OP_PING), &ping, true, false, Some(&key)).unwrap());
                        want.push(Owned { opcode: OP_PING, payload: ping.clone(), close_code: None, close_reason: String::new() });
                    }
                }
                let msg = Owned { opcode: op, payload: frags.concat(), close_code: None, close_reason: String::new() };
                if frags.len() == 1 {
                    let at = want.len() - 1;
                    want.insert(at, msg);
                } else {
                    want.push(msg);
                }
            }
            let mut dec = FrameDecoder::new(1 << 16, 1 << 16, true);
            let (ev, err) = decode_chunks(&mut dec, &chunked(&stream, &cuts));
            prop_assert_eq!(err, None);
            prop_assert_eq!(ev, want);
        }
    }
}
