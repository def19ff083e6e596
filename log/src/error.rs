//! The log's error type.

use std::io;

/// Why a log operation failed; the broker maps it to Kafka's error codes
/// at its edge (KAFKA_STORAGE_ERROR, OFFSET_OUT_OF_RANGE, CORRUPT_MESSAGE).
#[derive(thiserror::Error, Debug)]
pub enum LogError {
    #[error("log I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("offset {offset} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("corrupt log data: {0}")]
    Corrupt(String),
    #[error("invalid record set: {0}")]
    InvalidRecords(String),
    /// A follower append whose offsets do not continue the log.
    #[error("unexpected append offset {first_offset}: log end offset is {log_end}")]
    UnexpectedAppendOffset { first_offset: i64, log_end: i64 },
}
