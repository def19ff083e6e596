use std::time::Duration;

use strand_replication::watch::wait_until;
use strand_replication::{LogProgress, PartitionWatch};

const LONG: Duration = Duration::from_secs(30);

fn progress(hw: i64, leo: i64) -> LogProgress {
    LogProgress {
        high_watermark: hw,
        log_end_offset: leo,
    }
}

#[tokio::test]
async fn already_satisfied_returns_at_once() {
    let w = PartitionWatch::new(progress(10, 12));
    assert!(w.wait_until(|p| p.high_watermark >= 10, LONG).await);
}

#[tokio::test]
async fn completes_when_hw_reaches_required_offset() {
    let w = PartitionWatch::new(progress(103, 105));
    let rx = w.subscribe();
    let waiter = tokio::spawn(wait_until(rx, |p| p.high_watermark >= 105, LONG));
    // Intermediate progress that does not satisfy the predicate.
    w.update(progress(104, 105));
    w.update(progress(105, 105));
    assert!(waiter.await.unwrap());
    assert_eq!(w.current(), progress(105, 105));
}

#[tokio::test]
async fn many_waiters_each_wake_at_their_offset() {
    let w = PartitionWatch::new(progress(0, 0));
    let waiters: Vec<_> = (1..=5i64)
        .map(|req| {
            tokio::spawn(wait_until(
                w.subscribe(),
                move |p| p.high_watermark >= req * 10,
                LONG,
            ))
        })
        .collect();
    for hw in (0..=50).step_by(5) {
        w.update(progress(hw, hw));
    }
    for wt in waiters {
        assert!(wt.await.unwrap());
    }
}

#[tokio::test]
async fn times_out_when_progress_is_short() {
    let w = PartitionWatch::new(progress(1, 5));
    w.update(progress(2, 5));
    assert!(
        !w.wait_until(|p| p.high_watermark >= 5, Duration::from_millis(20))
            .await
    );
}

#[tokio::test]
async fn dropped_watch_releases_waiters() {
    let w = PartitionWatch::new(progress(0, 0));
    let waiter = tokio::spawn(wait_until(w.subscribe(), |p| p.high_watermark >= 1, LONG));
    drop(w);
    assert!(!waiter.await.unwrap());
}
