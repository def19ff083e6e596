//! Kafka wire protocol pieces Strand owns itself: framing limits, the table of
//! API versions we serve, error codes, and views over magic-v2 record batches
//! with in-place offset/epoch assignment. Message bodies are encoded and decoded
//! by the `kafka-protocol` crate; record data is never re-encoded, only
//! re-compressed where a topic's `compression.type` asks (`transcode`).
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod api;
pub mod batch;
pub mod extensions;
pub mod frame;
pub mod record_count;
pub mod records;
pub mod request;
pub mod testing;
pub mod transcode;

pub use kafka_protocol;
/// Kafka error codes; `ErrorCode::code()` gives the wire value.
pub use kafka_protocol::error::ResponseError as ErrorCode;

/// The wire value for "no error".
pub const NONE: i16 = 0;

/// Wire code of an optional error (None = success).
pub fn code(err: Option<ErrorCode>) -> i16 {
    err.map(|e| e.code()).unwrap_or(NONE)
}
