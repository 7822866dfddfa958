//! Why bytes are not a valid frame: the codec's one error, shared by the frame and its extensions
//! (headers, streams, tracestate), re-exported as `frame::FrameError`.

use std::fmt;

/// Why bytes are not a valid frame. The connection that sent them is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix exceeds the limit.
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Unknown frame kind.
    UnknownKind(u8),
    /// The body ends before a field does.
    Truncated(&'static str),
    /// A string field is not UTF-8.
    NotUtf8(&'static str),
    /// A string field is longer than 255 bytes and cannot be encoded.
    FieldTooLong(&'static str),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the limit of {max}")
            }
            FrameError::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            FrameError::Truncated(field) => write!(f, "frame truncated in {field}"),
            FrameError::NotUtf8(field) => write!(f, "{field} is not UTF-8"),
            FrameError::FieldTooLong(field) => write!(f, "{field} is longer than 255 bytes"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<FrameError> for std::io::Error {
    fn from(e: FrameError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}
