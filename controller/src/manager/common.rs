//! What every manager shares: the error an item of a request gets, the
//! settings decisions depend on, and the record budget of one operation.

pub use strand_metadata::controller_api::ApiError;
use strand_protocol::ErrorCode;
use strand_types::BrokerId;

/// Controller settings that decisions depend on.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// This node's `node.id`: on a combined node, its broker's id too.
    pub node_id: BrokerId,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    /// Producer ids handed to a broker per AllocateProducerIds.
    pub producer_id_block_size: i64,
    /// The largest replication factor accepted. The broker sets 1 until
    /// follower replication exists, so no topic claims replicas it lacks.
    pub max_replication_factor: usize,
    /// How often the active controller moves leaderships back to each
    /// partition's preferred replica (`auto.leader.rebalance.enable`,
    /// `leader.imbalance.check.interval.seconds`); None: never.
    pub leader_balance_interval_ms: Option<u64>,
    /// This controller's `unclean.leader.election.enable` from its
    /// server.properties: a topic with no override and no cluster-wide
    /// dynamic setting takes it (Kafka's static config layer).
    pub unclean_leader_election_enable: bool,
    /// How often the active controller elects unclean leaders for the
    /// leaderless partitions whose topic allows it
    /// (`unclean.leader.election.interval.ms`); None: never.
    pub unclean_election_interval_ms: Option<u64>,
    /// The ranges this node's `group.*.min/max.*` settings put on groups'
    /// own settings (GROUP config resources).
    pub group_bounds: strand_metadata::configs::GroupBounds,
}

/// Kafka's broker.session.timeout.ms default.
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9000;

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
