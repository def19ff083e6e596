//! The rule both log stores apply to an append: contiguous with what is
//! there, nothing behind the purge point.

use openraft::AnyError;

/// Checks an append of entries with `indexes` (in order) against the log:
/// `last_present` is the index of the last entry present, `last_purged` the
/// last purged index. Returns how many leading entries to skip because they
/// fall at or below the purge point (already covered by the snapshot; storing
/// them would put entries behind the purge marker). The rest must continue the
/// log with no hole and no overlap. A log that never held anything may start
/// anywhere (openraft begins at 0, or after a snapshot).
pub(super) fn check_append(
    last_present: Option<u64>,
    last_purged: Option<u64>,
    indexes: &[u64],
) -> Result<usize, AnyError> {
    let skip = match last_purged {
        Some(p) => indexes.iter().take_while(|&&i| i <= p).count(),
        None => 0,
    };
    let mut expected = last_present.or(last_purged).map(|i| i + 1);
    for &index in &indexes[skip..] {
        if let Some(want) = expected {
            if index != want {
                return Err(AnyError::error(format!(
                    "non-contiguous append: entry index {index}, expected {want}"
                )));
            }
        }
        expected = Some(index + 1);
    }
    Ok(skip)
}

#[cfg(test)]
mod tests {
    use super::check_append;

    #[test]
    fn raft_store_contiguity() {
        assert_eq!(check_append(None, None, &[5, 6, 7]).unwrap(), 0);
        assert_eq!(check_append(Some(4), None, &[5, 6]).unwrap(), 0);
        assert_eq!(check_append(Some(4), Some(2), &[]).unwrap(), 0);
        assert!(check_append(Some(4), None, &[6]).is_err(), "hole");
        assert!(check_append(Some(4), None, &[4]).is_err(), "overlap");
        assert!(check_append(None, None, &[1, 3]).is_err(), "hole inside");
        // After a purge: continue from the purge point.
        assert_eq!(check_append(None, Some(2), &[3]).unwrap(), 0);
        assert!(check_append(None, Some(2), &[4]).is_err());
        // Entries the purge covers are skipped, not stored.
        assert_eq!(check_append(None, Some(2), &[1]).unwrap(), 1);
        assert_eq!(check_append(None, Some(2), &[1, 2, 3]).unwrap(), 2);
        assert!(check_append(Some(5), Some(2), &[2, 3]).is_err());
    }
}
