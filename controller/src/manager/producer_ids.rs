//! AllocateProducerIds (Kafka 3.7's ProducerIdControlManager): each call
//! hands a broker the next block of `producer_id_block_size` ids. Ids never
//! repeat, across replays and controller failovers too, because the record
//! that moves `next_producer_id` past the block is committed before the block
//! is handed out, and replay only ever moves it forward.

use super::common::{ApiError, ControllerConfig};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId, ProducerId};

/// The next block for `broker_id`: `(first id, size)`. With `broker_epoch`
/// given (a broker's AllocateProducerIds request), the broker must be
/// registered under that epoch (STALE_BROKER_EPOCH otherwise); `None` skips
/// the check for in-process callers.
pub fn allocate_producer_ids(
    image: &MetadataImage,
    cfg: &ControllerConfig,
    broker_id: BrokerId,
    broker_epoch: Option<BrokerEpoch>,
) -> Result<(Vec<MetadataRecord>, (ProducerId, i64)), ApiError> {
    if let Some(epoch) = broker_epoch {
        match image.brokers.get(&broker_id) {
            Some(b) if b.broker_epoch == epoch => {}
            Some(b) => {
                return Err(ApiError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!(
                        "Expected broker epoch {}, but got broker epoch {epoch}",
                        b.broker_epoch
                    ),
                ))
            }
            None => {
                return Err(ApiError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!("No broker registration found for broker {broker_id}"),
                ))
            }
        }
    }
    let size = cfg.producer_id_block_size;
    if size <= 0 {
        return Err(ApiError::new(
            ErrorCode::UnknownServerError,
            format!("Invalid producer id block size {size}"),
        ));
    }
    let first = image.next_producer_id;
    let Some(next) = first.get().checked_add(size).map(ProducerId::new) else {
        return Err(ApiError::new(
            ErrorCode::UnknownServerError,
            "Exhausted all producerIds as the next block's end producerId will exceed the int64 type limit",
        ));
    };
    Ok((
        vec![MetadataRecord::ProducerIds {
            broker_id,
            next_producer_id: next,
        }],
        (first, size),
    ))
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::manager::testutil::{apply_all, b, be, cfg, image_with_brokers};

    fn pid(id: i64) -> ProducerId {
        ProducerId::new(id)
    }

    #[test]
    fn blocks_never_overlap_and_survive_replay() {
        let mut img = image_with_brokers(&[1, 2]);
        let mut log = Vec::new();
        let mut last_end = pid(0);
        for i in 0..6 {
            let broker = b(1 + i % 2);
            let (recs, (first, size)) = allocate_producer_ids(&img, &cfg(), broker, None).unwrap();
            assert_eq!(first, last_end, "blocks are contiguous and disjoint");
            last_end = pid(first.get() + size);
            apply_all(&mut img, &recs);
            log.extend(recs);
        }
        assert_eq!(img.next_producer_id, pid(6000));
        // Replaying the log (twice, as after a restart) never moves backwards.
        let mut replayed = image_with_brokers(&[1, 2]);
        apply_all(&mut replayed, &log);
        apply_all(&mut replayed, &log[..2]);
        assert_eq!(replayed.next_producer_id, pid(6000));
        let (_, (first, _)) = allocate_producer_ids(&replayed, &cfg(), b(1), None).unwrap();
        assert_eq!(first, pid(6000));
    }

    /// (broker, epoch, next id) -> first id or error.
    #[test]
    fn allocation_table() {
        let cases: &[(i32, Option<i64>, i64, Result<i64, ErrorCode>)] = &[
            (1, None, 0, Ok(0)),
            (1, Some(101), 0, Ok(0)),
            (9, None, 7, Ok(7)),
            (1, Some(100), 0, Err(ErrorCode::StaleBrokerEpoch)),
            (9, Some(0), 0, Err(ErrorCode::StaleBrokerEpoch)),
            (1, None, i64::MAX - 1000, Ok(i64::MAX - 1000)),
            (1, None, i64::MAX - 999, Err(ErrorCode::UnknownServerError)),
        ];
        for (i, &(broker, epoch, next, want)) in cases.iter().enumerate() {
            let mut img = image_with_brokers(&[1]);
            img.next_producer_id = pid(next);
            let got = allocate_producer_ids(&img, &cfg(), b(broker), epoch.map(be));
            assert_eq!(
                got.map(|(_, (first, _))| first).map_err(|e| e.code),
                want.map(pid),
                "case {i}"
            );
        }
    }
}
