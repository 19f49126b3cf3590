//! The UTF-8 state of a text message or close reason that arrives in pieces (RFC 3629 over
//! simdutf8).

/// Streaming UTF-8 check: a code point may be split anywhere; an invalid byte fails at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct Utf8Stream {
    pending: [u8; 4],
    len: usize,
}

impl Utf8Stream {
    pub fn feed(&mut self, mut s: &[u8]) -> bool {
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

    pub fn is_complete(&self) -> bool {
        self.len == 0
    }
}
