//! The lease: a high-water mark persisted *ahead* of issued time ("IDs up to T may be in use").
//!
//! Shared memory dies with the server. Before an ID with timestamp `ms` is issued, a lease
//! `>= ms` must already be durable (WAL-logged and flushed), so that after any restart, crash or
//! failover the generator starts above the lease and so above every ID issued before. Renewing
//! it is a background job: the hot path only compares against the lease held in shared memory.

/// How far ahead of issued time a renewal puts the lease. Half the allowed drift, because after a
/// restart the generator resumes at the lease, up to this far ahead of a correct clock, and that
/// lead must stay within `max_clock_drift`; at most a second, so that one renewal (one WAL flush)
/// covers many thousands of IDs without a restart leaving IDs far in the future.
pub fn lease_length_ms(max_drift_ms: u64) -> u64 {
    (max_drift_ms / 2).clamp(20, 1000)
}

/// Whether the lease should be renewed now, and to what timestamp (ms since the epoch).
///
/// * `now_ms`: the clock; `last_ms`: the last issued timestamp (or the floor after a restart);
/// * `lease_ms`: the current lease, 0 when none has been written since start-up;
/// * `wanted`: IDs were issued since the last renewal, or a backend is waiting for a lease.
///
/// An idle server stops renewing (no WAL traffic when nothing is issued); the first ID after a
/// pause then waits for one renewal.
pub fn renewal(
    now_ms: i64,
    last_ms: u64,
    lease_ms: u64,
    wanted: bool,
    max_drift_ms: u64,
) -> Option<u64> {
    let length = lease_length_ms(max_drift_ms);
    let base = (now_ms.max(0) as u64).max(last_ms);
    let running_low = lease_ms < base + length / 2;
    if lease_ms == 0 || (wanted && running_low) {
        Some((base + length).max(lease_ms))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_lease_is_written_at_once() {
        assert_eq!(renewal(1000, 0, 0, false, 10_000), Some(2000));
    }

    #[test]
    fn lease_starts_above_a_restored_floor() {
        // After a restart with the clock 10 s behind, the floor (old lease) leads the clock.
        assert_eq!(renewal(1000, 11_000, 0, false, 60_000), Some(12_000));
    }

    #[test]
    fn renews_only_when_running_low_and_used() {
        assert_eq!(renewal(1000, 1000, 1900, true, 10_000), None, "plenty left");
        assert_eq!(renewal(1000, 1000, 1400, true, 10_000), Some(2000));
        assert_eq!(
            renewal(1000, 1000, 1400, false, 10_000),
            None,
            "idle: no WAL"
        );
        assert_eq!(
            renewal(5000, 1000, 1400, true, 10_000),
            Some(6000),
            "expired lease"
        );
    }

    #[test]
    fn lease_never_moves_back_and_stays_within_the_drift() {
        for drift in [100u64, 1000, 10_000, 86_400_000] {
            let l = lease_length_ms(drift);
            assert!(l <= drift / 2 || drift / 2 < 20);
            assert!(renewal(0, 0, 5000, true, drift).is_none_or(|x| x >= 5000));
        }
    }
}
