//! The broker: everything the `strand` binary runs besides the controller.
//!
//! - [`server`] accepts connections (quotas, idle timeout, request pool),
//!   frames and decodes requests, and hands them to [`handlers`], one
//!   module per API group, which answer from the [`node::Node`]'s services;
//! - [`replica_manager`] keeps the partitions this node hosts in line with
//!   the metadata image (open, delete, lead or follow), runs the ISR shrink
//!   timer and AlterPartition, and tells its listeners (the coordinators)
//!   about internal-topic partitions; [`replica_fetcher`] is the follower's
//!   fetch loop; each partition itself is `strand_partition::Partition`;
//! - [`group_coordinator`] and [`txn_coordinator`] run on
//!   [`coordinator_runtime`] (internal-topic partition hash, appends that
//!   wait for the HW, record scans for loading) and never import each
//!   other;
//! - [`background`] starts the node's timers and its reconciliation with
//!   each new image;
//! - [`config`] reads `server.properties` with Kafka's names; [`lifecycle`]
//!   and [`meta`] cover registration, heartbeats, shutdown and
//!   `meta.properties`.

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod authentication;
pub mod authorizer;
pub mod background;
pub mod broker_client;
pub mod broker_loggers;
pub mod client_quotas;
pub mod config;
pub mod connection_quotas;
pub mod controller_channel;
pub mod controller_link;
pub mod coordinator_runtime;
pub mod disk;
pub mod group_coordinator;
pub mod handlers;
pub mod inter_broker;
pub mod lifecycle;
pub mod listener_security;
pub mod log_cleaner;
pub mod log_dirs;
pub mod meta;
pub mod metrics;
pub mod node;
pub mod replica_fetcher;
pub mod replica_manager;
pub mod replica_plan;
pub mod replication_quota;
pub mod server;
pub mod status_http;
pub mod transport;
pub mod txn_coordinator;
pub mod zero_copy;
