//! The transaction coordinator shard, one story at a time: what it asks the
//! runtime to do and what it answers, for the paths the random histories of
//! `eos_history.rs` reach rarely (a first write that fails, a write answered
//! after the shard was reloaded, expiry, a load that finds Prepare states and
//! tombstones, markers of an older transaction).

use bytes::Bytes;
use strand_protocol::ErrorCode;
use strand_txn::coordinator::TxnState;
use strand_txn::shard::{
    Answer, Effect, Markers, MarkersOutcome, Reply, ShardConfig, TxnShard, WriteId,
};
use strand_types::{ProducerEpoch, ProducerId};

const CONFIG: ShardConfig = ShardConfig {
    max_timeout_ms: 60_000,
};
const ID: &str = "app";

fn pid(n: i64) -> ProducerId {
    ProducerId::new(n)
}

fn epoch(n: i16) -> ProducerEpoch {
    ProducerEpoch::new(n)
}

/// The runtime's part, kept in memory: the log and the markers asked for.
#[derive(Default)]
struct Runtime {
    log: Vec<(Bytes, Option<Bytes>)>,
    markers: Vec<Markers>,
}

impl Runtime {
    /// Carries out `effects`, every append succeeding; returns the replies.
    fn run(&mut self, shard: &mut TxnShard, effects: Vec<Effect>) -> Vec<(WriteId, Reply)> {
        let mut replies = Vec::new();
        let mut todo = effects;
        while let Some(e) = todo.pop() {
            match e {
                Effect::Append { write, key, value } => {
                    self.log.push((key, value));
                    let (reply, more) = shard.write_done(write, Ok(()), 0);
                    replies.extend(reply.map(|r| (write, r)));
                    todo.extend(more);
                }
                Effect::WriteMarkers(m) => self.markers.push(m),
            }
        }
        replies
    }

    fn load(&self, epoch: i32) -> (TxnShard, Vec<Effect>) {
        let (shard, effects, report) = TxnShard::load(
            0,
            epoch,
            CONFIG,
            self.log.iter().map(|(k, v)| (&k[..], v.as_deref())),
        );
        assert!(report.skipped.is_empty(), "{report:?}");
        (shard, effects)
    }
}

fn later<T: std::fmt::Debug>(a: Answer<T>) -> (WriteId, Vec<Effect>) {
    match a {
        Answer::Later { write, effects } => (write, effects),
        other => panic!("expected a write, got {other:?}"),
    }
}

/// InitProducerId of a new id with a fresh producer id, written.
fn init(shard: &mut TxnShard, rt: &mut Runtime, fresh: i64) -> (ProducerId, ProducerEpoch) {
    assert_eq!(
        shard.init_producer_id(ID, 10_000, None, None, true, 0),
        Answer::NeedProducerId
    );
    let (write, effects) =
        later(shard.init_producer_id(ID, 10_000, None, Some(pid(fresh)), true, 0));
    match &rt.run(shard, effects)[..] {
        [(w, Reply::InitProducerId(Ok(granted)))] if *w == write => *granted,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_transaction_is_persisted_before_each_answer_and_completed_after_its_markers() {
    let mut shard = TxnShard::new(0, 7, CONFIG);
    let mut rt = Runtime::default();
    assert_eq!(init(&mut shard, &mut rt, 100), (pid(100), epoch(0)));
    let tps = [("out".to_string(), 0), ("out".to_string(), 1)];
    let (write, effects) =
        later(shard.add_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps, 0, 1));
    // While the write is pending every other request waits.
    assert_eq!(
        shard.end_txn(ID, Some(pid(100)), Some(epoch(0)), true, false, None, 2),
        Answer::Now(Err(ErrorCode::ConcurrentTransactions))
    );
    assert_eq!(
        rt.run(&mut shard, effects),
        vec![(write, Reply::AddPartitions(Ok(())))]
    );
    assert_eq!(
        shard.verify_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps),
        vec![None, None]
    );
    let (write, effects) =
        later(shard.end_txn(ID, Some(pid(100)), Some(epoch(0)), true, false, None, 3));
    assert_eq!(
        rt.run(&mut shard, effects),
        vec![(write, Reply::EndTxn(Ok((Some(pid(100)), Some(epoch(0))))))]
    );
    let m = rt.markers.pop().expect("markers asked for");
    assert_eq!(
        (m.commit, m.coordinator_epoch, m.partitions.len()),
        (true, 7, 2)
    );
    assert_eq!(
        shard.get(ID).unwrap().current.state,
        TxnState::PrepareCommit
    );
    let effects = shard.markers_done(&m, MarkersOutcome::Written, 4);
    assert!(rt.run(&mut shard, effects).is_empty());
    let cur = &shard.get(ID).unwrap().current;
    assert_eq!(cur.state, TxnState::CompleteCommit);
    assert!(cur.partitions.is_empty());
    // Four records: init, add, prepare, complete.
    assert_eq!(rt.log.len(), 4);
}

#[test]
fn a_first_write_that_fails_leaves_nothing_behind() {
    let mut shard = TxnShard::new(0, 0, CONFIG);
    let (write, _) = later(shard.init_producer_id(ID, 10_000, None, Some(pid(5)), true, 0));
    // Another instance's InitProducerId waits for the first write.
    assert_eq!(
        shard.init_producer_id(ID, 10_000, None, Some(pid(6)), true, 0),
        Answer::Now(Err(ErrorCode::ConcurrentTransactions))
    );
    let (reply, effects) = shard.write_done(write, Err(ErrorCode::NotCoordinator), 1);
    assert_eq!(
        reply,
        Some(Reply::InitProducerId(Err(ErrorCode::NotCoordinator)))
    );
    assert!(effects.is_empty());
    assert!(shard.get(ID).is_none() && shard.all().next().is_none());
    // The same write answered again (a duplicate report) changes nothing.
    assert_eq!(shard.write_done(write, Ok(()), 1), (None, vec![]));
    assert!(shard.get(ID).is_none());
    let mut rt = Runtime::default();
    assert_eq!(init(&mut shard, &mut rt, 7), (pid(7), epoch(0)));
}

#[test]
fn a_write_of_an_earlier_load_means_nothing_to_a_later_one() {
    let mut rt = Runtime::default();
    let mut first = TxnShard::new(0, 1, CONFIG);
    init(&mut first, &mut rt, 100);
    let tps = [("out".to_string(), 0)];
    let (stale, _) = later(first.add_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps, 0, 1));
    // Leadership moved and came back: a new load at epoch 2.
    let (mut second, effects) = rt.load(2);
    assert!(effects.is_empty());
    let (write, _) = later(second.add_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps, 0, 2));
    assert_ne!(stale, write);
    assert_eq!(second.write_done(stale, Ok(()), 3), (None, vec![]));
    assert_eq!(second.get(ID).unwrap().current.state, TxnState::Empty);
}

#[test]
fn a_load_finishes_prepared_transactions_and_honours_tombstones() {
    let mut rt = Runtime::default();
    let mut shard = TxnShard::new(0, 1, CONFIG);
    init(&mut shard, &mut rt, 100);
    let tps = [("out".to_string(), 3)];
    let (_, e) = later(shard.add_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps, 0, 1));
    rt.run(&mut shard, e);
    let (_, e) = later(shard.end_txn(ID, Some(pid(100)), Some(epoch(0)), false, false, None, 2));
    rt.run(&mut shard, e);
    // The coordinator dies before any marker: the next one aborts it.
    let m = rt.markers.pop().expect("markers");
    let (mut next, effects) = rt.load(2);
    match &effects[..] {
        [Effect::WriteMarkers(again)] => {
            assert_eq!((again.commit, again.coordinator_epoch), (false, 2));
            assert_eq!(again.partitions, m.partitions);
            // Written by this load's runtime, they complete the abort.
            let effects = next.markers_done(again, MarkersOutcome::Written, 3);
            rt.run(&mut next, effects);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(next.get(ID).unwrap().current.state, TxnState::CompleteAbort);
    // Expiry: Dead while the tombstone is written, then gone, also after a load.
    let effects = next.remove_expired(1_000_000, 1_000);
    match &effects[..] {
        [Effect::Append { value: None, .. }] => {}
        other => panic!("a tombstone, not {other:?}"),
    }
    assert_eq!(
        next.init_producer_id(ID, 10_000, None, None, true, 1_000_001),
        Answer::Now(Err(ErrorCode::ConcurrentTransactions))
    );
    rt.run(&mut next, effects);
    assert!(next.get(ID).is_none());
    let (reloaded, effects) = rt.load(3);
    assert!(effects.is_empty() && reloaded.get(ID).is_none());
}

#[test]
fn markers_of_another_transaction_complete_nothing() {
    let mut rt = Runtime::default();
    let mut shard = TxnShard::new(0, 1, CONFIG);
    init(&mut shard, &mut rt, 100);
    let tps = [("out".to_string(), 0)];
    let (_, e) = later(shard.add_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps, 0, 1));
    rt.run(&mut shard, e);
    let (_, e) = later(shard.end_txn(ID, Some(pid(100)), Some(epoch(0)), true, false, None, 2));
    rt.run(&mut shard, e);
    let m = rt.markers.pop().expect("markers");
    let older = Markers {
        producer_epoch: None,
        ..m.clone()
    };
    assert!(shard
        .markers_done(&older, MarkersOutcome::Written, 3)
        .is_empty());
    let aborting = Markers {
        commit: false,
        ..m.clone()
    };
    assert!(shard
        .markers_done(&aborting, MarkersOutcome::Written, 3)
        .is_empty());
    // Fenced markers leave the transaction to whoever is newer.
    assert!(shard.markers_done(&m, MarkersOutcome::Fenced, 3).is_empty());
    assert_eq!(
        shard.get(ID).unwrap().current.state,
        TxnState::PrepareCommit
    );
    // A failed Complete write is asked for again.
    let effects = shard.markers_done(&m, MarkersOutcome::Written, 4);
    let write = match &effects[..] {
        [Effect::Append { write, .. }] => *write,
        other => panic!("{other:?}"),
    };
    let (reply, again) = shard.write_done(write, Err(ErrorCode::NotEnoughReplicas), 5);
    assert_eq!(reply, None);
    assert!(matches!(
        &again[..],
        [Effect::Append { value: Some(_), .. }]
    ));
    rt.run(&mut shard, again);
    assert_eq!(
        shard.get(ID).unwrap().current.state,
        TxnState::CompleteCommit
    );
}

#[test]
fn a_timed_out_transaction_is_fenced_then_aborted() {
    let mut rt = Runtime::default();
    let mut shard = TxnShard::new(0, 1, CONFIG);
    init(&mut shard, &mut rt, 100);
    let tps = [("out".to_string(), 0)];
    let (_, e) = later(shard.add_partitions(ID, Some(pid(100)), Some(epoch(0)), &tps, 0, 1_000));
    rt.run(&mut shard, e);
    assert!(shard.abort_timed_out(11_000, true).is_empty(), "not yet");
    let effects = shard.abort_timed_out(11_001, true);
    assert_eq!(
        shard.get(ID).unwrap().reported_state(),
        TxnState::PrepareEpochFence
    );
    rt.run(&mut shard, effects);
    let m = rt.markers.pop().expect("abort markers");
    assert_eq!((m.commit, m.producer_epoch), (false, Some(epoch(1))));
    // The fenced producer's commit is refused.
    assert_eq!(
        shard.end_txn(
            ID,
            Some(pid(100)),
            Some(epoch(0)),
            true,
            false,
            None,
            11_002
        ),
        Answer::Now(Err(ErrorCode::ProducerFenced))
    );
}
