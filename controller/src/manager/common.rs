//! What every manager shares: the error an item of a request gets, the
//! settings decisions depend on, and the record budget of one operation.

use strand_protocol::ErrorCode;

/// Controller settings that decisions depend on.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_id: i32,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    /// Producer ids handed to a broker per AllocateProducerIds.
    pub producer_id_block_size: i64,
    /// The largest replication factor accepted. The broker sets 1 until
    /// follower replication exists, so no topic claims replicas it lacks.
    pub max_replication_factor: usize,
}

/// Error codes travel between controllers as their wire numbers.
mod error_code_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use strand_protocol::ErrorCode;

    pub fn serialize<S: Serializer>(code: &ErrorCode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i16(code.code())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ErrorCode, D::Error> {
        let code = i16::deserialize(d)?;
        Ok(ErrorCode::try_from_code(code).unwrap_or(ErrorCode::UnknownServerError))
    }
}

/// Kafka's broker.session.timeout.ms default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9000;

/// An error for one item of a request, as Kafka reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApiError {
    #[serde(with = "error_code_serde")]
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

/// The most records one client operation may produce (Kafka's
/// `MAX_RECORDS_PER_USER_OP`): one Raft entry stays far below the RPC frame
/// limit, and a request's claimed partition count never drives an allocation.
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// What Kafka answers an operation past [`MAX_RECORDS_PER_USER_OP`].
pub fn excessive_batch() -> ApiError {
    ApiError::new(
        ErrorCode::PolicyViolation,
        "Unable to perform excessively large batch operation.",
    )
}

/// Checked before anything is built for `count` more records on top of
/// `so_far`.
pub fn check_record_budget(so_far: usize, count: usize) -> Result<(), ApiError> {
    match so_far.checked_add(count) {
        Some(total) if total <= MAX_RECORDS_PER_USER_OP => Ok(()),
        _ => Err(excessive_batch()),
    }
}
