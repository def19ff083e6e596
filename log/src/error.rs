//! The log's error type.

use std::io;

use strand_types::Offset;

/// Why a log operation failed; the broker maps it to Kafka's error codes
/// at its edge (KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE, CORRUPT_MESSAGE).
#[derive(thiserror::Error, Debug)]
pub enum LogError {
    #[error("log I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("offset {offset} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: Offset,
        log_start: Offset,
        log_end: Offset,
    },
    #[error("corrupt log data: {0}")]
    Corrupt(String),
    #[error("invalid record set: {0}")]
    InvalidRecords(String),
    /// A follower append whose offsets do not continue the log.
    #[error("unexpected append offset {first_offset}: log end offset is {log_end}")]
    UnexpectedAppendOffset {
        first_offset: Offset,
        log_end: Offset,
    },
}
