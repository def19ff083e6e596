//! One broker node's services: the replica manager and the two coordinators
//! that run on its internal-topic partitions. The node wires them together
//! (the coordinators listen to the replica manager's reconciliations), so
//! the replica manager never names a coordinator; request handlers reach all
//! three through it.

use crate::group_coordinator::GroupCoordinator;
use crate::replica_manager::ReplicaManager;
use crate::txn_coordinator::TxnCoordinator;
use std::sync::Arc;

pub struct Node {
    pub broker: Arc<ReplicaManager>,
    /// Group coordination for the `__consumer_offsets` partitions led here.
    pub groups: Arc<GroupCoordinator>,
    /// Transaction coordination for the `__transaction_state` partitions led here.
    pub txns: Arc<TxnCoordinator>,
    /// The log cleaner's threads (compacted topics, internal ones included).
    pub cleaner: crate::log_cleaner::LogCleaner,
}

impl Node {
    /// Creates the coordinators and registers them with the replica
    /// manager; call before its first reconciliation.
    pub fn new(broker: Arc<ReplicaManager>) -> Arc<Node> {
        let groups = Arc::new(GroupCoordinator::new(
            broker.config.clone(),
            broker.clock.clone(),
        ));
        let txns = Arc::new(TxnCoordinator::new(
            broker.config.clone(),
            broker.controller.clone(),
            broker.clock.clone(),
            broker.transport.clone(),
        ));
        broker.add_listener(groups.clone());
        broker.add_listener(txns.clone());
        let cleaner = crate::log_cleaner::LogCleaner::start(&broker, &broker.config.log_cleaner);
        Arc::new(Node {
            broker,
            groups,
            txns,
            cleaner,
        })
    }

    /// The cleaner's settings under the image's dynamic broker configs
    /// (`log.cleaner.threads`, buffers, rates, backoff), taken up when
    /// they change.
    pub fn reconfigure_cleaner(&self) {
        let image = self.broker.image();
        let me = self.broker.node_id().to_string();
        let layers = strand_metadata::configs::BrokerLayers::of(
            &image,
            &me,
            &self.broker.config.static_props,
        );
        self.cleaner
            .reconfigure(&self.broker.config.log_cleaner.with_layers(&layers));
    }
}
