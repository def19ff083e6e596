//! The transaction coordinator's I/O: which `__transaction_state` partitions
//! this broker leads (and has loaded), the transactional ids kept for them,
//! persisting each transition (acks=all) before acting on it, sending
//! WriteTxnMarkers to every participant partition's leader, and aborting
//! transactions that outlive their timeout. The rules are the pure
//! `strand_txn::coordinator` functions.

use crate::broker_client::BrokerConnPool;
use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use crate::coordinator_runtime::{
    self, append_records, coordinator_partition, for_each_record, wait_committed, Coordinator,
    Loads,
};
use crate::replica_manager::PartitionListener;
use bytes::Bytes;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use strand_metadata::image::MetadataImage;
use strand_partition::{now_ms, Partition};
use strand_protocol::ErrorCode;
use strand_txn::coordinator::{self as rules, TopicPartition, TxnMetadata, TxnRecord};
use strand_txn::txn_log;
use strand_types::{BrokerId, ProducerEpoch};

/// The internal topic holding transaction states.
pub const TXN_TOPIC: &str = "__transaction_state";

/// WriteTxnMarkers v1 (v0 is gone from Kafka 4 and from the codec).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// One transactional id on this coordinator.
pub struct TxnEntry {
    pub id: String,
    pub partition: i32,
    pub meta: Mutex<TxnMetadata>,
}

/// What a request needs to act on a transactional id: its entry, the
/// `__transaction_state` partition it is persisted to, and the coordinator
/// epoch (that partition's leader epoch) markers carry.
pub struct Coordinated {
    pub entry: Arc<TxnEntry>,
    pub log: Arc<Partition>,
    pub coordinator_epoch: i32,
}

pub struct TxnCoordinator {
    controller: ControllerLink,
    /// The `__transaction_state` partitions led here; a loaded one keeps
    /// its partition (the transaction log its ids are written to).
    partitions: Loads<Arc<Partition>>,
    txns: Mutex<HashMap<String, Arc<TxnEntry>>>,
    /// Connections to partition leaders for markers.
    pub peers: BrokerConnPool,
}

impl TxnCoordinator {
    pub fn new(config: Arc<BrokerConfig>, controller: ControllerLink) -> Self {
        TxnCoordinator {
            controller,
            partitions: Loads::default(),
            txns: Mutex::new(HashMap::new()),
            peers: BrokerConnPool::new(format!("strand-txn-coordinator-{}", config.node_id)),
        }
    }

    pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
        coordinator_partition(transactional_id, partitions)
    }

    pub fn write_timeout(&self) -> Duration {
        // Kafka's transaction coordinator writes with request.timeout.ms (30 s).
        Duration::from_secs(30)
    }

    /// Drops an entry created for an InitProducerId that persisted nothing.
    pub fn drop_placeholder(&self, entry: &Arc<TxnEntry>) {
        let mut txns = self.txns.lock();
        let placeholder = {
            let meta = entry.meta.lock();
            meta.current.producer_id.is_none() && meta.pending.is_none()
        };
        if placeholder && txns.get(&entry.id).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            txns.remove(&entry.id);
        }
    }

    async fn load_txn_partition(self: Arc<Self>, partition: Arc<Partition>, epoch: i32) {
        let index = partition.index;
        let p = partition.clone();
        let loaded = tokio::task::spawn_blocking(move || read_txn_partition(&p)).await;
        let state = match loaded {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::error!(partition = index, error = %e, "cannot load transaction state partition; retried at the next reconcile");
                self.partitions.failed(index, epoch);
                return;
            }
            Err(e) => {
                tracing::error!(partition = index, error = %e, "transaction state load failed; retried at the next reconcile");
                self.partitions.failed(index, epoch);
                return;
            }
        };
        let mut to_complete = Vec::new();
        let count = state.len();
        let installed = self.partitions.finish(index, epoch, partition.clone(), || {
            let mut txns = self.txns.lock();
            for (id, record) in state {
                let prepare = record.state.is_prepare();
                let entry = Arc::new(TxnEntry {
                    id: id.clone(),
                    partition: index,
                    meta: Mutex::new(TxnMetadata {
                        transactional_id: id.clone(),
                        current: record,
                        pending: None,
                    }),
                });
                if prepare {
                    to_complete.push(entry.clone());
                }
                txns.insert(id, entry);
            }
        });
        if !installed {
            return; // Leadership moved on while loading.
        }
        tracing::info!(
            partition = index,
            epoch,
            transactional_ids = count,
            completing = to_complete.len(),
            "transaction state loaded; coordinating its transactional ids"
        );
        // Transactions left in PrepareCommit/PrepareAbort: finish them.
        for entry in to_complete {
            let me = self.clone();
            let log = partition.clone();
            tokio::spawn(async move { me.complete_transaction(entry, log, epoch).await });
        }
    }

    /// The entry for `id` if this broker coordinates it now (created empty
    /// when `create`, for InitProducerId).
    pub fn coordinated(
        &self,
        id: &str,
        partitions: i32,
        create: bool,
    ) -> Result<Option<Coordinated>, ErrorCode> {
        let index = Self::partition_for(id, partitions);
        let (epoch, log) = self.partitions.loaded(index)?;
        let entry = {
            let txns = self.txns.lock();
            txns.get(id).cloned()
        };
        let entry = match entry {
            Some(e) => e,
            None if create => {
                let e = Arc::new(TxnEntry {
                    id: id.to_string(),
                    partition: index,
                    // A placeholder until InitProducerId persists its first record.
                    meta: Mutex::new(rules::new_metadata(id, None, 0, now_ms())),
                });
                self.txns.lock().entry(id.to_string()).or_insert(e).clone()
            }
            None => return Ok(None),
        };
        Ok(Some(Coordinated {
            entry,
            log,
            coordinator_epoch: epoch,
        }))
    }

    /// Every transactional id coordinated here.
    pub fn all(&self) -> Vec<Arc<TxnEntry>> {
        self.txns.lock().values().cloned().collect()
    }

    /// Whether this broker still coordinates `entry` at `epoch`.
    fn still_coordinating(&self, entry: &TxnEntry, epoch: i32) -> bool {
        self.partitions
            .loaded(entry.partition)
            .is_ok_and(|(e, _)| e == epoch)
            && self
                .txns
                .lock()
                .get(&entry.id)
                .is_some_and(|e| std::ptr::eq(e.as_ref(), entry))
    }

    /// Persists `record` for `entry` (already marked pending by the caller
    /// under the entry's lock) and waits until it is committed; then makes it
    /// current, or drops it on failure.
    /// Refused (NOT_COORDINATOR) unless this broker still coordinates the
    /// entry at `coordinator_epoch`: an entry from before an unload and
    /// reload must not write over what another coordinator wrote meanwhile.
    pub async fn persist(
        &self,
        entry: &TxnEntry,
        log: &Partition,
        coordinator_epoch: i32,
    ) -> Result<(), ErrorCode> {
        if !self.still_coordinating(entry, coordinator_epoch) {
            entry.meta.lock().abort_write();
            return Err(ErrorCode::NotCoordinator);
        }
        let kvs = {
            let meta = entry.meta.lock();
            let Some(p) = meta.pending.as_ref() else {
                return Ok(());
            };
            vec![(
                txn_log::encode_key(&entry.id),
                Some(txn_log::encode_value(&p.target)),
            )]
        };
        let result = match append_records(log, &kvs) {
            Ok(outcome) => wait_committed(log, &outcome, self.write_timeout()).await,
            Err(code) => Err(code),
        };
        let mut meta = entry.meta.lock();
        match result {
            Ok(()) => meta.complete_write(),
            Err(code) => {
                tracing::warn!(transactional_id = %entry.id, ?code, "transaction state write failed");
                meta.abort_write();
            }
        }
        result
    }

    /// After a Prepare state is persisted: writes the markers to every
    /// participant partition (retrying until each is written), then persists
    /// CompleteCommit/CompleteAbort. Stops if this broker stops coordinating.
    pub async fn complete_transaction(
        self: Arc<Self>,
        entry: Arc<TxnEntry>,
        log: Arc<Partition>,
        coordinator_epoch: i32,
    ) {
        let (producer_id, producer_epoch, commit, partitions) = {
            let meta = entry.meta.lock();
            let cur = &meta.current;
            if !cur.state.is_prepare() {
                return;
            }
            (
                cur.producer_id,
                cur.producer_epoch,
                cur.state == strand_txn::coordinator::TxnState::PrepareCommit,
                cur.partitions.clone(),
            )
        };
        let mut remaining: BTreeSet<TopicPartition> = partitions;
        let mut backoff = Duration::from_millis(20);
        let started = std::time::Instant::now();
        let mut rounds = 0u32;
        while !remaining.is_empty() {
            rounds += 1;
            if !self.still_coordinating(&entry, coordinator_epoch) {
                tracing::info!(transactional_id = %entry.id, "stopped writing markers: no longer coordinator");
                return;
            }
            match self
                .write_markers(
                    producer_id,
                    producer_epoch,
                    commit,
                    coordinator_epoch,
                    &remaining,
                )
                .await
            {
                MarkerRound::Progress(done) => {
                    for tp in done {
                        remaining.remove(&tp);
                    }
                }
                MarkerRound::Fenced(code) => {
                    tracing::warn!(transactional_id = %entry.id, ?code, "markers fenced; leaving the transaction to the newer coordinator or producer");
                    return;
                }
            }
            if !remaining.is_empty() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
        tracing::debug!(transactional_id = %entry.id, commit, rounds, elapsed_ms = started.elapsed().as_millis() as u64, "transaction markers written");
        // Every marker written: CompleteCommit / CompleteAbort.
        loop {
            if !self.still_coordinating(&entry, coordinator_epoch) {
                return;
            }
            let began = {
                let mut meta = entry.meta.lock();
                if meta.pending.is_some() {
                    None
                } else {
                    match rules::complete(&meta.current, now_ms()) {
                        Some(record) => {
                            meta.begin_write(record, false);
                            Some(true)
                        }
                        None => Some(false),
                    }
                }
            };
            match began {
                // Another write is in flight (e.g. a concurrent request's): wait for it.
                None => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Some(false) => return,
                Some(true) => {}
            }
            match self.persist(&entry, &log, coordinator_epoch).await {
                Ok(()) => return,
                Err(code) => {
                    tracing::warn!(transactional_id = %entry.id, ?code, "cannot persist transaction completion; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// One round of WriteTxnMarkers to the current leaders of `partitions`.
    async fn write_markers(
        &self,
        producer_id: Option<strand_types::ProducerId>,
        producer_epoch: Option<ProducerEpoch>,
        commit: bool,
        coordinator_epoch: i32,
        partitions: &BTreeSet<TopicPartition>,
    ) -> MarkerRound {
        let image = self.controller.image();
        let mut done = Vec::new();
        let mut by_leader: HashMap<BrokerId, Vec<&TopicPartition>> = HashMap::new();
        for tp in partitions {
            match image.partition(&tp.0, tp.1) {
                // A deleted topic (or partition) needs no marker.
                None => done.push(tp.clone()),
                Some(p) => {
                    // Leaderless for now: retried in a later round.
                    if let Some(leader) = p.leader {
                        by_leader.entry(leader).or_default().push(tp);
                    }
                }
            }
        }
        for (leader, tps) in by_leader {
            let Some(addr) = image
                .brokers
                .get(&leader)
                .map(|b| format!("{}:{}", b.host, b.port))
            else {
                continue;
            };
            let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
            for tp in &tps {
                match topics.iter_mut().find(|t| t.name.0.as_str() == tp.0) {
                    Some(t) => t.partition_indexes.push(tp.1),
                    None => topics.push(
                        WritableTxnMarkerTopic::default()
                            .with_name(TopicName(StrBytes::from_string(tp.0.clone())))
                            .with_partition_indexes(vec![tp.1]),
                    ),
                }
            }
            let req =
                WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                    .with_producer_id(ProducerId(strand_types::ProducerId::to_wire(producer_id)))
                    .with_producer_epoch(ProducerEpoch::to_wire(producer_epoch))
                    .with_transaction_result(commit)
                    .with_coordinator_epoch(coordinator_epoch)
                    .with_topics(topics)]);
            let resp = match self.send(leader, &addr, &req).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(leader = leader.get(), error = %e, "WriteTxnMarkers failed; retrying");
                    continue;
                }
            };
            for m in resp.markers {
                for t in m.topics {
                    for p in t.partitions {
                        let tp = (t.name.0.to_string(), p.partition_index);
                        match ErrorCode::try_from_code(p.error_code) {
                            None if p.error_code == 0 => done.push(tp),
                            Some(
                                code @ (ErrorCode::InvalidProducerEpoch
                                | ErrorCode::TransactionCoordinatorFenced),
                            ) => {
                                return MarkerRound::Fenced(code);
                            }
                            code => {
                                tracing::debug!(topic = %tp.0, partition = tp.1, ?code, "marker not written yet; retrying");
                            }
                        }
                    }
                }
            }
        }
        MarkerRound::Progress(done)
    }

    async fn send(
        &self,
        broker: BrokerId,
        addr: &str,
        req: &WriteTxnMarkersRequest,
    ) -> std::io::Result<WriteTxnMarkersResponse> {
        // Markers wait for acks=all on the partition side (up to 30 s).
        self.peers
            .call(
                broker,
                addr,
                ApiKey::WriteTxnMarkers,
                WRITE_TXN_MARKERS_VERSION,
                req,
                Duration::from_secs(40),
            )
            .await
    }

    /// Aborts (with an epoch bump) every transaction that outlived its
    /// timeout (Kafka `abortTimedOutTransactions`).
    pub async fn abort_timed_out(self: &Arc<Self>) {
        let now = now_ms();
        for entry in self.all() {
            let Some((log, epoch)) = self.loaded(entry.partition) else {
                continue;
            };
            {
                let mut meta = entry.meta.lock();
                if !meta.is_timed_out(now) {
                    continue;
                }
                tracing::info!(transactional_id = %entry.id, producer_id = strand_types::ProducerId::to_wire(meta.current.producer_id), epoch = ProducerEpoch::to_wire(meta.current.producer_epoch), "aborting a transaction past its timeout");
                let record = rules::fence(&meta.current, now);
                meta.begin_write(record, true);
            }
            if self.persist(&entry, &log, epoch).await.is_ok() {
                let me = self.clone();
                tokio::spawn(async move { me.complete_transaction(entry, log, epoch).await });
            }
        }
    }

    /// Removes transactional ids idle for transactional.id.expiration.ms
    /// (a tombstone is written first, acks=all).
    pub async fn remove_expired(&self, expiration_ms: i64) {
        let now = now_ms();
        for entry in self.all() {
            let Some((log, epoch)) = self.loaded(entry.partition) else {
                continue;
            };
            if !self.still_coordinating(&entry, epoch) {
                continue;
            }
            {
                let mut meta = entry.meta.lock();
                if meta.current.producer_id.is_none() || !meta.is_expired(now, expiration_ms) {
                    continue;
                }
                // Dead while the tombstone is written: every request for the
                // id waits (CONCURRENT_TRANSACTIONS) until it is gone.
                let mut dead = meta.current.clone();
                dead.state = strand_txn::coordinator::TxnState::Dead;
                meta.begin_write(dead, false);
            }
            let kvs = vec![(txn_log::encode_key(&entry.id), None)];
            let written = match append_records(&log, &kvs) {
                Ok(outcome) => wait_committed(&log, &outcome, self.write_timeout()).await,
                Err(code) => Err(code),
            };
            match written {
                Ok(()) => {
                    let mut txns = self.txns.lock();
                    if txns.get(&entry.id).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
                        txns.remove(&entry.id);
                    }
                    entry.meta.lock().complete_write();
                    tracing::info!(transactional_id = %entry.id, "transactional id expired");
                }
                Err(_) => entry.meta.lock().abort_write(),
            }
        }
    }

    fn loaded(&self, index: i32) -> Option<(Arc<Partition>, i32)> {
        self.partitions
            .loaded(index)
            .ok()
            .map(|(epoch, partition)| (partition, epoch))
    }
}

enum MarkerRound {
    /// These partitions have their marker now.
    Progress(Vec<TopicPartition>),
    /// A partition refused the marker for good (newer producer epoch or coordinator).
    Fenced(ErrorCode),
}

/// The last record of each transactional id in a `__transaction_state`
/// partition (tombstones remove the id).
fn read_txn_partition(partition: &Partition) -> Result<HashMap<String, TxnRecord>, String> {
    let mut state = HashMap::new();
    for_each_record(partition, |rec| {
        if rec.control {
            return;
        }
        let Some(key) = rec.key.as_ref() else {
            return;
        };
        let id = match txn_log::decode_key(key) {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(error = %e, "undecodable transaction log key skipped");
                return;
            }
        };
        match rec.value.as_ref().map(|v: &Bytes| txn_log::decode_value(v)) {
            None => {
                state.remove(&id);
            }
            Some(Ok(r)) => {
                state.insert(id, r);
            }
            Some(Err(e)) => {
                tracing::warn!(transactional_id = %id, error = %e, "undecodable transaction log value skipped")
            }
        }
    })?;
    Ok(state)
}

impl TxnCoordinator {
    /// KIP-890 part 1: before a transactional batch opens a transaction on a
    /// partition, the partition leader asks the producer's transaction
    /// coordinator (AddPartitionsToTxn v4, verify only) whether the partition is
    /// in the producer's ongoing transaction. A produce that arrives after its
    /// transaction ended (or before it was added) is refused instead of opening
    /// a transaction no marker will ever close. With `add` (part 2: a
    /// transaction.version 2 client, which never sends AddPartitionsToTxn) the
    /// leader adds the partition instead (v5, not verify-only); the producer's
    /// epoch still has to be the current one. Coordinator trouble is answered
    /// NOT_ENOUGH_REPLICAS, which producers retry (as Kafka does).
    pub async fn verify_in_transaction(
        &self,
        image: &MetadataImage,
        transactional_id: &str,
        (producer_id, producer_epoch): (i64, i16),
        topic: &str,
        partition: i32,
        add: bool,
    ) -> Result<(), ErrorCode> {
        use kafka_protocol::messages::add_partitions_to_txn_request::{
            AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
        };
        use kafka_protocol::messages::{
            AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TransactionalId,
        };
        let retriable = ErrorCode::NotEnoughReplicas;
        let partitions = image
            .topics
            .get(TXN_TOPIC)
            .map(|t| t.partitions.len() as i32)
            .ok_or(retriable)?;
        let index = TxnCoordinator::partition_for(transactional_id, partitions);
        let leader = image
            .partition(TXN_TOPIC, index)
            .and_then(|p| p.leader)
            .ok_or(retriable)?;
        let addr = image
            .brokers
            .get(&leader)
            .map(|b| format!("{}:{}", b.host, b.port))
            .ok_or(retriable)?;
        let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    transactional_id.to_string(),
                )))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch)
                .with_verify_only(!add)
                .with_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(vec![partition])]),
        ]);
        let resp: AddPartitionsToTxnResponse = self
            .peers
            .call(
                leader,
                &addr,
                ApiKey::AddPartitionsToTxn,
                4,
                &req,
                Duration::from_secs(10),
            )
            .await
            .map_err(|e| {
                tracing::debug!(transactional_id, error = %e, "transaction verification failed");
                retriable
            })?;
        if resp.error_code != 0 {
            return Err(retriable);
        }
        let code = resp
            .results_by_transaction
            .iter()
            .flat_map(|t| t.topic_results.iter())
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|c| *c != 0);
        match code.map(ErrorCode::try_from_code) {
            None => Ok(()),
            Some(Some(
                code @ (ErrorCode::InvalidTxnState
                | ErrorCode::InvalidProducerIdMapping
                | ErrorCode::ProducerFenced
                | ErrorCode::InvalidProducerEpoch),
            )) => Err(match code {
                // Produce answers a fenced epoch with INVALID_PRODUCER_EPOCH (Kafka >= 2.7).
                ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
                other => other,
            }),
            Some(_) => Err(retriable),
        }
    }
}

impl PartitionListener for TxnCoordinator {
    fn topic(&self) -> &'static str {
        TXN_TOPIC
    }

    /// Called after every reconcile for each `__transaction_state` partition
    /// hosted here: loads one newly led (at a new epoch), unloads one no longer led.
    fn on_partition(self: Arc<Self>, partition: &Arc<Partition>) {
        coordinator_runtime::on_partition(&self, partition);
    }

    /// A partition no longer hosted here.
    fn forget_partition(&self, index: i32) {
        coordinator_runtime::forget_partition(self, index);
    }
}

impl Coordinator for TxnCoordinator {
    type State = Arc<Partition>;
    const WHAT: &'static str = "transactional ids";

    fn loads(&self) -> &Loads<Arc<Partition>> {
        &self.partitions
    }

    fn unload(&self, index: i32) {
        self.txns.lock().retain(|_, e| e.partition != index);
    }

    fn load(
        self: Arc<Self>,
        partition: Arc<Partition>,
        epoch: i32,
    ) -> impl std::future::Future<Output = ()> + Send {
        self.load_txn_partition(partition, epoch)
    }
}
