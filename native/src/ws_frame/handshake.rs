//! The opening handshake's accept key, RFC 6455 section 4.2.2.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha1::{Digest, Sha1};

/// RFC 6455 section 1.3.
const WS_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
