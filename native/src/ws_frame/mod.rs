//! WebSocket framing, RFC 6455: the handshake accept key, the frame codec, the close-code rules,
//! the incremental decoder with its UTF-8 state, then the PyO3 layer. Docs live in the stub.

mod close;
mod decoder;
mod error;
mod frame;
mod handshake;
mod py;
#[cfg(test)]
mod testing;
mod utf8;

pub use close::{close_payload, is_valid_close_code};
pub use decoder::{Event, FrameDecoder};
pub use error::{DecodeError, EncodeError};
pub use frame::{
    apply_mask, encode_frame, FrameHead, MAX_CONTROL_PAYLOAD, MAX_HEADER_LEN, OP_BINARY, OP_CLOSE, OP_CONT, OP_PING,
    OP_PONG, OP_TEXT,
};
pub use handshake::{accept_key, AcceptKeyError};
pub use py::{init_pymodule, PyFrame, PyFrameDecoder};
