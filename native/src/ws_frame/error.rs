//! The encoder's and the decoder's errors; a decode error carries the close code (RFC 6455
//! section 7.4.1) to fail the connection with.

use std::fmt;

use super::frame::MAX_CONTROL_PAYLOAD;

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
