//! The metadata quorum: openraft replicates batches of metadata records among
//! the controllers. The Raft leader is the active controller; its event loop
//! decides each event against its image and proposes the resulting records as
//! one log entry. Every node's state machine replays committed entries into
//! its `MetadataImage`, exactly as the single-node log did.
//!
//! - `store`: the log store and state machine, on RocksDB (the default) or in
//!   memory (tests opt in explicitly); both pass openraft's conformance suite.
//! - `network`: controller-to-controller RPC on the controller listener.

pub mod in_process;
pub mod network;
pub mod store;

use serde::{Deserialize, Serialize};
use std::io::Cursor;
use strand_metadata::records::MetadataRecord;

/// One controller event's records: the unit of a Raft log entry, so an
/// event's records commit (or not) together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataBatch(pub Vec<MetadataRecord>);

impl std::fmt::Display for MetadataBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetadataBatch({} records)", self.0.len())
    }
}

/// What applying an entry returns to the proposer: the image position after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub applied_records: u64,
}

openraft::declare_raft_types!(
    /// openraft types of the metadata quorum.
    pub TypeConfig:
        D = MetadataBatch,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
