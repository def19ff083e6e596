//! Size-prefixed framing: every request is an i32 length followed by that many bytes.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("request size {size} exceeds socket.request.max.bytes {max}")]
    TooLarge { size: i64, max: usize },
    #[error("negative or empty request size {0}")]
    Invalid(i32),
}

/// Validates a request's 4-byte length prefix against socket.request.max.bytes.
/// A frame must at least hold api key, version and correlation id (8 bytes).
pub fn check_frame_len(prefix: [u8; 4], max: usize) -> Result<usize, FrameError> {
    let size = i32::from_be_bytes(prefix);
    if size < 8 {
        return Err(FrameError::Invalid(size));
    }
    if size as usize > max {
        return Err(FrameError::TooLarge {
            size: size as i64,
            max,
        });
    }
    Ok(size as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_limits() {
        assert_eq!(check_frame_len(100i32.to_be_bytes(), 100), Ok(100));
        assert_eq!(
            check_frame_len(101i32.to_be_bytes(), 100),
            Err(FrameError::TooLarge {
                size: 101,
                max: 100
            })
        );
        assert_eq!(
            check_frame_len((-5i32).to_be_bytes(), 100),
            Err(FrameError::Invalid(-5))
        );
        assert_eq!(
            check_frame_len(3i32.to_be_bytes(), 100),
            Err(FrameError::Invalid(3))
        );
    }
}
