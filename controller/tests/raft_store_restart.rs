//! The RocksDB store survives a restart: vote, log, committed, purge and
//! truncate, the snapshot and the image. Also: corrupt values are errors, not
//! panics, and the state machine publishes its image.

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, LogState, Membership, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageHelper, StoredMembership, Vote,
};
use std::collections::BTreeSet;
use std::io::Cursor;
use strand_controller::raft::store::{open_memory, open_rocks};
use strand_controller::raft::{Applied, MetadataBatch, TypeConfig};
use strand_metadata::records::MetadataRecord;
use strand_types::{BrokerId, ProducerId};
use uuid::Uuid;

fn lid(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: lid(term, index),
        payload: EntryPayload::Blank,
    }
}

fn voters() -> Membership<u64, openraft::BasicNode> {
    Membership::new(vec![BTreeSet::from([1])], None)
}

fn membership(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: lid(term, index),
        payload: EntryPayload::Membership(voters()),
    }
}

fn normal(term: u64, index: u64, records: Vec<MetadataRecord>) -> Entry<TypeConfig> {
    Entry {
        log_id: lid(term, index),
        payload: EntryPayload::Normal(MetadataBatch(records)),
    }
}

fn topic(name: &str) -> MetadataRecord {
    MetadataRecord::Topic {
        name: name.into(),
        topic_id: Uuid::new_v4(),
    }
}

fn applied(n: &[u64]) -> Vec<Applied> {
    n.iter()
        .map(|&applied_records| Applied { applied_records })
        .collect()
}

#[tokio::test]
async fn raft_store_rocks_restart() {
    let dir = tempfile::tempdir().unwrap();
    let vote = Vote::new(3, 1);
    let entries = vec![
        blank(1, 0),
        membership(1, 1),
        normal(
            1,
            2,
            vec![
                MetadataRecord::ClusterFormatted {
                    cluster_id: "c1".into(),
                },
                topic("a"),
            ],
        ),
        normal(1, 3, vec![topic("b")]),
        normal(
            1,
            4,
            vec![MetadataRecord::ProducerIds {
                broker_id: BrokerId::new(1),
                next_producer_id: ProducerId::new(1000),
            }],
        ),
    ];

    // --- first life: write everything, snapshot after entry 3, apply entry 4.
    let snap_meta;
    let snap_data;
    {
        let (mut log, mut sm) = open_rocks(dir.path()).unwrap();
        let mut rx = sm.subscribe();
        log.save_vote(&vote).await.unwrap();
        log.blocking_append(entries.clone()).await.unwrap();
        log.save_committed(Some(lid(1, 4))).await.unwrap();

        let replies = sm.apply(entries[..4].to_vec()).await.unwrap();
        assert_eq!(replies, applied(&[0, 0, 2, 3]));
        assert!(rx.has_changed().unwrap(), "apply publishes the image");
        assert_eq!(rx.borrow_and_update().applied, 3);
        assert!(sm.image().topics.contains_key("b"));

        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(lid(1, 3)));
        assert_eq!(snap.meta.last_membership.log_id(), &Some(lid(1, 1)));
        snap_meta = snap.meta;
        snap_data = snap.snapshot.into_inner();

        let replies = sm.apply(vec![entries[4].clone()]).await.unwrap();
        assert_eq!(replies, applied(&[4]));
        assert_eq!(sm.image().next_producer_id, ProducerId::new(1000));
    }

    // --- second life: everything is back; the image restarts from the snapshot.
    {
        let (mut log, mut sm) = open_rocks(dir.path()).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(vote));
        assert_eq!(
            log.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: None,
                last_log_id: Some(lid(1, 4)),
            }
        );
        assert_eq!(log.read_committed().await.unwrap(), Some(lid(1, 4)));
        assert_eq!(log.try_get_log_entries(0..).await.unwrap(), entries);
        assert_eq!(log.try_get_log_entries(2..4).await.unwrap(), entries[2..4]);

        let current = sm.get_current_snapshot().await.unwrap().expect("snapshot");
        assert_eq!(current.meta, snap_meta);
        assert_eq!(current.snapshot.into_inner(), snap_data);

        assert_eq!(
            sm.applied_state().await.unwrap(),
            (
                Some(lid(1, 3)),
                StoredMembership::new(Some(lid(1, 1)), voters())
            )
        );
        let img = sm.image();
        assert_eq!(img.cluster_id, "c1");
        assert!(img.topics.contains_key("a") && img.topics.contains_key("b"));
        assert_eq!(img.applied, 3);
        assert_eq!(
            img.next_producer_id,
            ProducerId::new(0),
            "entry 4 is not in the snapshot"
        );

        // What openraft does at startup: re-apply committed entries after the snapshot.
        StorageHelper::new(&mut log, &mut sm)
            .get_initial_state()
            .await
            .unwrap();
        assert_eq!(sm.applied_state().await.unwrap().0, Some(lid(1, 4)));
        assert_eq!(sm.image().applied, 4);
        assert_eq!(sm.image().next_producer_id, ProducerId::new(1000));

        log.purge(lid(1, 1)).await.unwrap();
        log.truncate(lid(1, 4)).await.unwrap();
    }

    // --- third life: purge and truncate persisted; contiguity still enforced.
    {
        let (mut log, _sm) = open_rocks(dir.path()).unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(lid(1, 1)),
                last_log_id: Some(lid(1, 3)),
            }
        );
        assert_eq!(log.try_get_log_entries(0..).await.unwrap(), entries[2..4]);
        assert!(
            log.blocking_append(vec![blank(2, 5)]).await.is_err(),
            "a hole is refused"
        );
        assert!(
            log.blocking_append(vec![blank(2, 3)]).await.is_err(),
            "an overlap is refused"
        );
        log.blocking_append(vec![blank(2, 4)]).await.unwrap();

        // Purge past the end: the log is empty and continues after the purge point.
        log.purge(lid(2, 10)).await.unwrap();
    }
    {
        let (mut log, _sm) = open_rocks(dir.path()).unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap(),
            LogState {
                last_purged_log_id: Some(lid(2, 10)),
                last_log_id: Some(lid(2, 10)),
            }
        );
        assert!(log.try_get_log_entries(0..).await.unwrap().is_empty());
        log.blocking_append(vec![blank(2, 11)]).await.unwrap();
    }
}

/// A snapshot installed from the leader persists and is what a restart loads.
#[tokio::test]
async fn raft_store_rocks_installed_snapshot_survives_restart() {
    let (_log, mut leader) = open_memory();
    leader
        .apply(vec![
            membership(1, 1),
            normal(1, 2, vec![topic("x"), topic("y")]),
        ])
        .await
        .unwrap();
    let snap = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    {
        let (_log, mut sm) = open_rocks(dir.path()).unwrap();
        let rx = sm.subscribe();
        let mut buf = sm.begin_receiving_snapshot().await.unwrap();
        buf.get_mut().extend_from_slice(snap.snapshot.get_ref());
        sm.install_snapshot(&snap.meta, buf).await.unwrap();
        assert!(rx.has_changed().unwrap(), "install publishes the image");
        assert!(sm.image().topics.contains_key("y"));
    }
    let (_log, mut sm) = open_rocks(dir.path()).unwrap();
    assert_eq!(
        sm.get_current_snapshot().await.unwrap().unwrap().meta,
        snap.meta
    );
    assert_eq!(sm.applied_state().await.unwrap().0, Some(lid(1, 2)));
    assert_eq!(*sm.image(), *leader.image());
}

/// Snapshot data that does not match its meta is refused, and the state is kept.
#[tokio::test]
async fn raft_store_mismatched_snapshot_is_an_error() {
    let (_log, mut leader) = open_memory();
    leader
        .apply(vec![normal(1, 1, vec![topic("x")])])
        .await
        .unwrap();
    let snap = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let (_log, mut sm) = open_memory();
    let meta = SnapshotMeta {
        last_log_id: Some(lid(1, 9)),
        ..snap.meta.clone()
    };
    let err = sm.install_snapshot(&meta, snap.snapshot.clone()).await;
    assert!(err.is_err());
    let garbage = Box::new(Cursor::new(b"not json".to_vec()));
    assert!(sm.install_snapshot(&snap.meta, garbage).await.is_err());
    assert_eq!(sm.applied_state().await.unwrap().0, None);
    assert!(sm.get_current_snapshot().await.unwrap().is_none());
}

/// Re-applying an applied index would replay records twice: refused.
#[tokio::test]
async fn raft_store_apply_refuses_replays() {
    let (_log, mut sm) = open_memory();
    sm.apply(vec![normal(1, 1, vec![topic("x")])])
        .await
        .unwrap();
    assert!(sm
        .apply(vec![normal(1, 1, vec![topic("x")])])
        .await
        .is_err());
    assert_eq!(sm.image().applied, 1);
}

/// Damaged values on disk become storage errors, never panics.
#[tokio::test]
async fn raft_store_rocks_corrupt_values_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open_rocks(dir.path()).unwrap();
        log.blocking_append(vec![blank(1, 0)]).await.unwrap();
    }
    {
        let db = rocksdb::DB::open_cf(
            &rocksdb::Options::default(),
            dir.path(),
            ["logs", "meta", "sm"],
        )
        .unwrap();
        db.put_cf(db.cf_handle("meta").unwrap(), b"vote", b"{garbage")
            .unwrap();
        db.put_cf(db.cf_handle("meta").unwrap(), b"committed", b"[")
            .unwrap();
        db.put_cf(
            db.cf_handle("logs").unwrap(),
            0u64.to_be_bytes(),
            b"not an entry",
        )
        .unwrap();
    }
    {
        let (mut log, _sm) = open_rocks(dir.path()).unwrap();
        assert!(log.read_vote().await.is_err());
        assert!(log.read_committed().await.is_err());
        assert!(log.get_log_state().await.is_err());
        assert!(log.try_get_log_entries(0..).await.is_err());
        assert!(log.blocking_append(vec![blank(1, 1)]).await.is_err());
    }
    {
        let db = rocksdb::DB::open_cf(
            &rocksdb::Options::default(),
            dir.path(),
            ["logs", "meta", "sm"],
        )
        .unwrap();
        db.put_cf(db.cf_handle("sm").unwrap(), b"snapshot_meta", b"{}")
            .unwrap();
    }
    assert!(open_rocks(dir.path()).is_err(), "corrupt snapshot meta");
}

/// Followers fetch deltas: the records applied after a position, while the
/// recent window holds them; the image is the fallback otherwise.
#[tokio::test]
async fn raft_store_records_since_serves_deltas() {
    let (_log, mut sm) = open_memory();
    let (a, b, c) = (topic("a"), topic("b"), topic("c"));
    sm.apply(vec![
        blank(1, 1),
        normal(1, 2, vec![a.clone(), b.clone()]),
        normal(1, 3, vec![c.clone()]),
    ])
    .await
    .unwrap();
    assert_eq!(sm.image().applied, 3);
    assert_eq!(sm.records_since(0), Some(vec![a, b, c.clone()]));
    assert_eq!(sm.records_since(2), Some(vec![c]));
    assert_eq!(sm.records_since(3), Some(vec![]));
    assert_eq!(
        sm.records_since(1),
        None,
        "position 1 is inside a batch: only the image will do"
    );
    // Replaying the delta on the earlier image gives the same image.
    let mut follower = strand_metadata::image::MetadataImage::default();
    for r in sm.records_since(0).unwrap() {
        follower.apply(&r);
    }
    assert_eq!(follower, *sm.image());
}
