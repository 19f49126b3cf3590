//! The close-code rules, RFC 6455 sections 5.5.1 and 7.4: which codes may be sent or received,
//! the close payload, and its check as it arrives.

use super::error::{DecodeError, EncodeError};
use super::frame::{array_at, MAX_CONTROL_PAYLOAD};

/// RFC 6455 section 7.4.1 and the IANA registry: the codes an endpoint may put on the wire.
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
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

/// The checks on a close payload received so far (`complete`: all of it): a valid code, then a
/// reason that is UTF-8 (a code point may still be cut off while incomplete).
pub fn check_close_payload(p: &[u8], complete: bool) -> Result<(), DecodeError> {
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

/// The code and reason of a complete close payload; `(None, "")` when it is empty.
pub fn close_fields(p: &[u8]) -> Result<(Option<u16>, &str), DecodeError> {
    match array_at::<2>(p, 0) {
        Some(c) => {
            let reason = simdutf8::basic::from_utf8(p.get(2..).unwrap_or_default())
                .map_err(|_| DecodeError::InvalidUtf8CloseReason)?;
            Ok((Some(u16::from_be_bytes(c)), reason))
        }
        None => Ok((None, "")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws_frame::frame::OP_CLOSE;
    use crate::ws_frame::testing::{all, code_of, masked};

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
    fn close_payload_rules() {
        assert_eq!(close_payload(1005, ""), Err(EncodeError::BadCloseCode(1005)));
        assert_eq!(
            close_payload(1000, &"a".repeat(124)),
            Err(EncodeError::CloseReasonTooLong(124))
        );
        assert_eq!(close_payload(1000, &"a".repeat(123)).unwrap().len(), 125);
        assert_eq!(close_payload(4999, "ok").unwrap(), [0x13, 0x87, b'o', b'k']);
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
}
