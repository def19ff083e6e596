//! The transaction coordinator's runtime: which `__transaction_state`
//! partitions this broker leads (and has loaded), one
//! [`TxnShard`](strand_txn::shard::TxnShard) for each (the decisions: the
//! pure rules of `strand_txn::coordinator` with persist-before-act), and
//! the effects it asks for carried out here: records appended to the
//! partition with acks=all and reported once the HW covers them,
//! WriteTxnMarkers sent to every participant partition's leader until each
//! is written. Request handlers wait for their write's answer; the timers
//! (timeouts, expiry) are shard calls too.

use crate::broker_client::BrokerConnPool;
use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use crate::coordinator_runtime::{
    self, append_records, coordinator_partition, for_each_record, wait_committed, Coordinator,
    Loads,
};
use crate::replica_manager::{PartitionListener, ReplicaManager};
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
use strand_partition::Partition;
use strand_protocol::ErrorCode;
use strand_txn::coordinator::{ProducerIdAndEpoch, TopicPartition};
use strand_txn::shard::{
    Answer, Effect, Markers, MarkersOutcome, Reply, ShardConfig, TxnShard, WriteId,
};
use strand_types::{BrokerId, Clock, ProducerEpoch};
use tokio::sync::oneshot;

/// The internal topic holding transaction states.
pub const TXN_TOPIC: &str = "__transaction_state";

/// WriteTxnMarkers v2 (Kafka 4.1): it carries the transaction version, by
/// which partitions refuse a late marker of an earlier transaction.
const WRITE_TXN_MARKERS_VERSION: i16 = 2;

/// Kafka's transaction coordinator writes with request.timeout.ms (30 s).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// What is re-asked after a failed write (the Complete record again) waits
/// this long, so a partition that keeps refusing is not hammered.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// One loaded `__transaction_state` partition: its shard, the partition
/// its writes go to, and the requests waiting for a write's answer.
pub struct ShardHost {
    pub index: i32,
    /// The coordinator epoch (the partition's leader epoch at the load).
    pub epoch: i32,
    log: Arc<Partition>,
    state: Mutex<HostState>,
}

struct HostState {
    shard: TxnShard,
    waiting: HashMap<WriteId, oneshot::Sender<Reply>>,
}

impl ShardHost {
    /// Reads the shard (for Describe/List).
    pub fn read<R>(&self, f: impl FnOnce(&TxnShard) -> R) -> R {
        f(&self.state.lock().shard)
    }
}

pub struct TxnCoordinator {
    controller: ControllerLink,
    /// Transaction start times, timeouts and expiry read this clock.
    clock: Arc<dyn Clock>,
    config: ShardConfig,
    add_retry: AddRetry,
    /// The `__transaction_state` partitions led here; a loaded one keeps
    /// its shard host.
    partitions: Loads<Arc<ShardHost>>,
    /// Connections to partition leaders for markers.
    pub peers: BrokerConnPool,
}

/// `add.partitions.to.txn.retry.backoff.ms` and `.max.ms`.
#[derive(Debug, Clone, Copy)]
struct AddRetry {
    backoff: Duration,
    max: Duration,
}

impl TxnCoordinator {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: ControllerLink,
        clock: Arc<dyn Clock>,
        transport: Arc<dyn crate::transport::Transport>,
    ) -> Self {
        TxnCoordinator {
            controller,
            clock,
            config: ShardConfig {
                max_timeout_ms: config.transaction_max_timeout_ms,
            },
            add_retry: AddRetry {
                backoff: Duration::from_millis(config.add_partitions_to_txn_retry_backoff_ms),
                max: Duration::from_millis(config.add_partitions_to_txn_retry_backoff_max_ms),
            },
            partitions: Loads::default(),
            peers: BrokerConnPool::new(
                transport,
                format!("strand-txn-coordinator-{}", config.node_id),
            ),
        }
    }

    pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
        coordinator_partition(transactional_id, partitions)
    }

    /// The shard host coordinating `id`, or why this broker cannot answer
    /// for it (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
    pub fn host(&self, id: &str, partitions: i32) -> Result<Arc<ShardHost>, ErrorCode> {
        let index = Self::partition_for(id, partitions);
        self.partitions.loaded(index).map(|(_, host)| host)
    }

    /// Every loaded shard host.
    pub fn hosts(&self) -> Vec<Arc<ShardHost>> {
        self.partitions.all()
    }

    /// Whether `host` is still the one loaded for its partition.
    fn is_current(&self, host: &Arc<ShardHost>) -> bool {
        self.partitions
            .loaded(host.index)
            .is_ok_and(|(_, h)| Arc::ptr_eq(&h, host))
    }

    /// Asks the shard (under its lock) and, for an answer that waits on a
    /// write, registers the waiter before any effect runs.
    fn ask<T>(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        f: impl FnOnce(&mut TxnShard) -> Answer<T>,
    ) -> Asked<T> {
        let (answer, rx) = {
            let mut st = host.state.lock();
            let answer = f(&mut st.shard);
            let rx = match &answer {
                Answer::Later { write, .. } => {
                    let (tx, rx) = oneshot::channel();
                    st.waiting.insert(*write, tx);
                    Some(rx)
                }
                _ => None,
            };
            (answer, rx)
        };
        match (answer, rx) {
            (Answer::Now(r), _) => Asked::Now(r),
            (Answer::NeedProducerId, _) => Asked::NeedProducerId,
            (Answer::Later { effects, .. }, Some(rx)) => {
                self.carry_out(host, effects);
                Asked::Later(rx)
            }
            (Answer::Later { .. }, None) => unreachable!("a waiter is registered for every write"),
        }
    }

    /// A request's answer, allocating producer ids from the controller
    /// while the shard asks for one; `unpack` takes the answer out of the
    /// write's reply.
    async fn decide<T>(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        ids: &ReplicaManager,
        mut f: impl FnMut(&mut TxnShard, Option<strand_types::ProducerId>) -> Answer<T>,
        unpack: fn(Reply) -> Option<Result<T, ErrorCode>>,
    ) -> Result<T, ErrorCode> {
        let mut fresh = None;
        loop {
            match self.ask(host, |shard| f(shard, fresh)) {
                Asked::Now(r) => return r,
                Asked::NeedProducerId => fresh = Some(ids.next_producer_id().await?),
                Asked::Later(rx) => {
                    return match rx.await {
                        Ok(reply) => unpack(reply).unwrap_or(Err(ErrorCode::UnknownServerError)),
                        // The shard was dropped with the write unanswered.
                        Err(_) => Err(ErrorCode::NotCoordinator),
                    };
                }
            }
        }
    }

    /// The finalized `transaction.version` is 2 or above: the level the
    /// coordinator's own aborts run at (`strand_txn::coordinator::fence`).
    fn server_tv2(&self) -> bool {
        self.controller
            .image()
            .feature_level(strand_metadata::features::TRANSACTION_VERSION)
            >= 2
    }

    /// InitProducerId with a transactional id.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        ids: &ReplicaManager,
    ) -> Result<(strand_types::ProducerId, ProducerEpoch), ErrorCode> {
        self.decide(
            host,
            ids,
            |shard, fresh| {
                shard.init_producer_id(
                    id,
                    timeout_ms,
                    expected,
                    fresh,
                    self.server_tv2(),
                    self.clock.now_ms(),
                )
            },
            |r| match r {
                Reply::InitProducerId(r) => Some(r),
                _ => None,
            },
        )
        .await
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (existence checked by the caller).
    pub async fn add_partitions(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        id: &str,
        (producer_id, producer_epoch): (Option<strand_types::ProducerId>, Option<ProducerEpoch>),
        partitions: &[TopicPartition],
        transaction_version: i16,
    ) -> Result<(), ErrorCode> {
        match self.ask(host, |shard| {
            shard.add_partitions(
                id,
                producer_id,
                producer_epoch,
                partitions,
                transaction_version,
                self.clock.now_ms(),
            )
        }) {
            Asked::Now(r) => r,
            Asked::NeedProducerId => Err(ErrorCode::UnknownServerError),
            Asked::Later(rx) => match rx.await {
                Ok(Reply::AddPartitions(r)) => r,
                Ok(_) => Err(ErrorCode::UnknownServerError),
                Err(_) => Err(ErrorCode::NotCoordinator),
            },
        }
    }

    /// EndTxn: the producer id and epoch the client continues with.
    #[allow(clippy::too_many_arguments)]
    pub async fn end_txn(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        id: &str,
        (producer_id, producer_epoch): (Option<strand_types::ProducerId>, Option<ProducerEpoch>),
        commit: bool,
        tv2: bool,
        ids: &ReplicaManager,
    ) -> Result<(Option<strand_types::ProducerId>, Option<ProducerEpoch>), ErrorCode> {
        self.decide(
            host,
            ids,
            |shard, fresh| {
                shard.end_txn(
                    id,
                    producer_id,
                    producer_epoch,
                    commit,
                    tv2,
                    fresh,
                    self.clock.now_ms(),
                )
            },
            |r| match r {
                Reply::EndTxn(r) => Some(r),
                _ => None,
            },
        )
        .await
    }

    /// Carries out what a shard asked for: appends (reported to the shard
    /// once committed or failed) and marker writes.
    fn carry_out(self: &Arc<Self>, host: &Arc<ShardHost>, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Append { write, key, value } => self.append(host, write, key, value),
                Effect::WriteMarkers(markers) => {
                    let (me, host) = (self.clone(), host.clone());
                    tokio::spawn(async move { me.complete_transaction(host, markers).await });
                }
            }
        }
    }

    /// Appends one record of `host`'s shard and reports the outcome once the
    /// HW covers it (or it fails). A host no longer loaded writes nothing:
    /// a coordinator that lost its partition must not write over what a
    /// newer one decided.
    fn append(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        write: WriteId,
        key: Bytes,
        value: Option<Bytes>,
    ) {
        let appended = if self.is_current(host) {
            append_records(&host.log, &[(key, value)])
        } else {
            Err(ErrorCode::NotCoordinator)
        };
        let (me, host) = (self.clone(), host.clone());
        tokio::spawn(async move {
            let result = match appended {
                Ok(outcome) => wait_committed(&host.log, &outcome, WRITE_TIMEOUT).await,
                Err(code) => Err(code),
            };
            if let Err(code) = result {
                tracing::warn!(
                    partition = host.index,
                    ?code,
                    "transaction state write failed"
                );
            }
            me.write_done(&host, write, result).await;
        });
    }

    async fn write_done(
        self: &Arc<Self>,
        host: &Arc<ShardHost>,
        write: WriteId,
        result: Result<(), ErrorCode>,
    ) {
        let failed = result.is_err();
        let effects = {
            let mut st = host.state.lock();
            let (reply, effects) = st.shard.write_done(write, result, self.clock.now_ms());
            if let (Some(reply), Some(tx)) = (reply, st.waiting.remove(&write)) {
                let _ = tx.send(reply);
            }
            // An answer nobody asked for (a timer's write) has no waiter.
            st.waiting.remove(&write);
            effects
        };
        if effects.is_empty() {
            return;
        }
        if failed {
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
        if self.is_current(host) {
            self.carry_out(host, effects);
        }
    }

    /// Writes a transaction's markers to every participant partition
    /// (retrying each until written), then tells the shard, which persists
    /// CompleteCommit / CompleteAbort. Stops if this broker stops
    /// coordinating the partition.
    async fn complete_transaction(self: Arc<Self>, host: Arc<ShardHost>, markers: Markers) {
        let mut remaining: BTreeSet<TopicPartition> = markers.partitions.clone();
        let mut backoff = Duration::from_millis(20);
        let started = std::time::Instant::now();
        let mut rounds = 0u32;
        let mut outcome = MarkersOutcome::Written;
        while !remaining.is_empty() {
            rounds += 1;
            if !self.is_current(&host) {
                tracing::info!(transactional_id = %markers.transactional_id, "stopped writing markers: no longer coordinator");
                return;
            }
            match self.write_markers(&markers, &remaining).await {
                MarkerRound::Progress(done) => {
                    for tp in done {
                        remaining.remove(&tp);
                    }
                }
                MarkerRound::Fenced(code) => {
                    tracing::warn!(transactional_id = %markers.transactional_id, ?code, "markers fenced; leaving the transaction to the newer coordinator or producer");
                    outcome = MarkersOutcome::Fenced;
                    break;
                }
            }
            if !remaining.is_empty() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
        tracing::debug!(transactional_id = %markers.transactional_id, commit = markers.commit, rounds, elapsed_ms = started.elapsed().as_millis() as u64, "transaction markers written");
        let effects = host
            .state
            .lock()
            .shard
            .markers_done(&markers, outcome, self.clock.now_ms());
        if self.is_current(&host) {
            self.carry_out(&host, effects);
        }
    }

    /// One round of WriteTxnMarkers to the current leaders of `partitions`.
    async fn write_markers(
        &self,
        markers: &Markers,
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
                    .with_producer_id(ProducerId(strand_types::ProducerId::to_wire(
                        markers.producer_id,
                    )))
                    .with_producer_epoch(ProducerEpoch::to_wire(markers.producer_epoch))
                    .with_transaction_result(markers.commit)
                    .with_coordinator_epoch(markers.coordinator_epoch)
                    .with_transaction_version(
                        i8::try_from(markers.transaction_version).unwrap_or(i8::MAX),
                    )
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
    pub fn abort_timed_out(self: &Arc<Self>) {
        let now = self.clock.now_ms();
        for host in self.hosts() {
            let effects = host
                .state
                .lock()
                .shard
                .abort_timed_out(now, self.server_tv2());
            if !effects.is_empty() {
                tracing::info!(
                    partition = host.index,
                    transactions = effects.len(),
                    "aborting transactions past their timeout"
                );
                self.carry_out(&host, effects);
            }
        }
    }

    /// Removes transactional ids idle for transactional.id.expiration.ms
    /// (a tombstone is written first, acks=all).
    pub fn remove_expired(self: &Arc<Self>, expiration_ms: i64) {
        let now = self.clock.now_ms();
        for host in self.hosts() {
            let effects = host.state.lock().shard.remove_expired(now, expiration_ms);
            if !effects.is_empty() {
                tracing::info!(
                    partition = host.index,
                    transactional_ids = effects.len(),
                    "removing expired transactional ids"
                );
                self.carry_out(&host, effects);
            }
        }
    }

    async fn load_txn_partition(self: Arc<Self>, partition: Arc<Partition>, epoch: i32) {
        let index = partition.index;
        let started = std::time::Instant::now();
        let p = partition.clone();
        let config = self.config;
        let loaded = tokio::task::spawn_blocking(move || {
            read_txn_records(&p).map(|(records, end)| {
                let loaded = TxnShard::load(
                    index,
                    epoch,
                    config,
                    records.iter().map(|(k, v)| (&k[..], v.as_deref())),
                );
                (loaded, end)
            })
        })
        .await;
        let ((shard, effects, report), end) = match loaded {
            Ok(Ok(loaded)) => loaded,
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
        // Answer only from committed records (COORDINATOR_LOAD_IN_PROGRESS
        // until the HW covers what was read).
        if !coordinator_runtime::wait_load_committed(&partition, epoch, end).await {
            self.partitions.failed(index, epoch);
            return;
        }
        for skipped in &report.skipped {
            tracing::warn!(partition = index, record = %skipped, "undecodable transaction log record skipped");
        }
        let host = Arc::new(ShardHost {
            index,
            epoch,
            log: partition,
            state: Mutex::new(HostState {
                shard,
                waiting: HashMap::new(),
            }),
        });
        if !self.partitions.finish(index, epoch, host.clone(), || {}) {
            return; // Leadership moved on while loading.
        }
        tracing::info!(
            partition = index,
            epoch,
            transactional_ids = report.transactional_ids,
            completing = report.completing,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "transaction state loaded; coordinating its transactional ids"
        );
        // Transactions left in PrepareCommit/PrepareAbort: finish them.
        self.carry_out(&host, effects);
    }
}

/// What a shard said to a request, with the waiter of a write.
enum Asked<T> {
    Now(Result<T, ErrorCode>),
    NeedProducerId,
    Later(oneshot::Receiver<Reply>),
}

enum MarkerRound {
    /// These partitions have their marker now.
    Progress(Vec<TopicPartition>),
    /// A partition refused the marker for good (newer producer epoch or coordinator).
    Fenced(ErrorCode),
}

/// Every record of a `__transaction_state` partition, oldest first: (key,
/// value or `None` for a tombstone); the shard replays them.
/// With the LEO the records were read up to.
#[allow(clippy::type_complexity)]
fn read_txn_records(
    partition: &Partition,
) -> Result<(Vec<(Bytes, Option<Bytes>)>, strand_types::Offset), String> {
    let mut records = Vec::new();
    let end = for_each_record(partition, |rec| {
        if rec.control {
            return;
        }
        if let Some(key) = rec.key.as_ref() {
            records.push((key.clone(), rec.value.clone()));
        }
    })?;
    Ok((records, end))
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
    /// NOT_ENOUGH_REPLICAS, which producers retry (as Kafka does). An add
    /// the coordinator answers CONCURRENT_TRANSACTIONS (the producer's
    /// previous transaction still writing its markers: a version 2 client
    /// starts the next one as soon as EndTxn returns) is retried here every
    /// `add.partitions.to.txn.retry.backoff.ms` for up to `.max.ms`, as
    /// Kafka's leader does, rather than costing the client a round trip and
    /// its own backoff.
    pub async fn verify_in_transaction(
        &self,
        image: &MetadataImage,
        transactional_id: &str,
        ids: (strand_types::ProducerId, ProducerEpoch),
        topic: &str,
        partition: i32,
        add: bool,
    ) -> Result<(), ErrorCode> {
        let started = tokio::time::Instant::now();
        loop {
            match self
                .ask_coordinator(image, transactional_id, ids, topic, partition, add)
                .await
            {
                Err(ErrorCode::ConcurrentTransactions) => {
                    if started.elapsed() + self.add_retry.backoff > self.add_retry.max {
                        return Err(ErrorCode::NotEnoughReplicas);
                    }
                    tokio::time::sleep(self.add_retry.backoff).await;
                }
                other => return other,
            }
        }
    }

    /// One AddPartitionsToTxn to the coordinator; CONCURRENT_TRANSACTIONS
    /// comes back as itself for an add (the caller retries it), as
    /// NOT_ENOUGH_REPLICAS for a verification.
    async fn ask_coordinator(
        &self,
        image: &MetadataImage,
        transactional_id: &str,
        (producer_id, producer_epoch): (strand_types::ProducerId, ProducerEpoch),
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
                .with_producer_id(ProducerId(producer_id.get()))
                .with_producer_epoch(producer_epoch.get())
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
            Some(Some(ErrorCode::ConcurrentTransactions)) if add => {
                Err(ErrorCode::ConcurrentTransactions)
            }
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
    type State = Arc<ShardHost>;
    const WHAT: &'static str = "transactional ids";

    fn loads(&self) -> &Loads<Arc<ShardHost>> {
        &self.partitions
    }

    /// The shard went with the load state ([`Loads`]): requests of its ids
    /// answer NOT_COORDINATOR, and its in-flight work finds it no longer
    /// current.
    fn unload(&self, _index: i32) {}

    fn load(
        self: Arc<Self>,
        partition: Arc<Partition>,
        epoch: i32,
    ) -> impl std::future::Future<Output = ()> + Send {
        self.load_txn_partition(partition, epoch)
    }
}
