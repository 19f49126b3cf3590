//! The incremental frame decoder: frames in, whole messages and control frames out. It reassembles
//! fragments (RFC 6455 section 5.4), unmasks (section 5.3) and checks UTF-8 as bytes arrive.

use super::close::{check_close_payload, close_fields};
use super::error::DecodeError;
use super::frame::{
    apply_mask, is_control, parse_header, FrameLimits, Header, MAX_HEADER_LEN, OP_BINARY, OP_CLOSE, OP_CONT, OP_TEXT,
};
use super::utf8::Utf8Stream;

/// The decoder's message buffer keeps at most this much capacity between messages.
const KEEP_CAPACITY: usize = 64 * 1024;

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
    limits: FrameLimits,
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
            limits: FrameLimits {
                max_frame_size,
                max_message_size,
                require_mask,
            },
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

    fn feed_inner<F: FnMut(Event<'_>)>(&mut self, mut input: &[u8], emit: &mut F) -> Result<(), DecodeError> {
        loop {
            let Some(mut f) = self.frame else {
                if input.is_empty() {
                    return Ok(());
                }
                let h = if self.hdr_len == 0 && input.len() >= MAX_HEADER_LEN {
                    let Some(h) = parse_header(input, &self.limits, self.msg_open, self.msg_claimed)? else {
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
                    match parse_header(
                        self.hdr.get(..avail).unwrap_or_default(),
                        &self.limits,
                        self.msg_open,
                        self.msg_claimed,
                    )? {
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
                    check_close_payload(&self.ctrl_buf, f.done == f.len)?;
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
                check_close_payload(&self.ctrl_buf, true)?;
            }
            self.finish_frame(f, emit)?;
        }
        Ok(())
    }

    fn finish_frame<F: FnMut(Event<'_>)>(&mut self, f: FrameState, emit: &mut F) -> Result<(), DecodeError> {
        self.frame = None;
        if is_control(f.opcode) {
            let p = self.ctrl_buf.as_slice();
            let (close_code, close_reason) = if f.opcode == OP_CLOSE {
                close_fields(p)?
            } else {
                (None, "")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws_frame::frame::{encode_frame, OP_PING, OP_PONG};
    use crate::ws_frame::testing::{all, bytewise, code_of, decode_chunks, masked, server, Owned};
    use proptest::prelude::*;

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
