//! Cluster metadata as brokers and controllers both see it: the records the
//! controller commits to the metadata log ([`records`]), the image every node
//! builds by replaying them ([`image`]), the topic-config table with its
//! validation and resolution ([`configs`]), the features and their levels
//! ([`features`]) and the topic-name rule ([`topic_name`]).
//!
//! Pure data and functions: no I/O, no consensus. The controller (openraft,
//! RocksDB) depends on this crate, never the other way round, so a broker's
//! data path can read metadata without linking the quorum.
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod configs;
pub mod controller_api;
pub mod features;
pub mod image;
pub mod quotas;
pub mod records;
pub mod topic_name;

pub use image::{MetadataImage, TopicImage};
pub use topic_name::{validate_topic_name, TopicNameError, MAX_TOPIC_NAME_LEN, METADATA_TOPIC};
