//! The lease: a high-water mark persisted *ahead* of issued time ("IDs up to T may be in use").
//!
//! Shared memory dies with the server. Before an ID with timestamp `ms` is issued, a lease
//! `>= ms` must already be durable (WAL-logged and flushed), so that after any restart, crash or
//! failover the generator starts above the lease and so above every ID issued before. Renewing
//! it is a background job: the hot path only compares against the lease held in shared memory.
//!
//! A lease is written only when IDs need it. A server whose clock is wrong (ahead) at start-up but
//! issues nothing therefore persists nothing wrong, and is unaffected once its clock is corrected.

/// How far ahead of issued time a renewal puts the lease. Half the allowed drift, because after a
/// restart the generator resumes at the lease, up to this far ahead of a correct clock, and that
/// lead must stay within `max_clock_drift`; at most a second, so that one renewal (one WAL flush)
/// covers many thousands of IDs without a restart leaving IDs far in the future.
pub fn lease_length_ms(max_drift_ms: u64) -> u64 {
    (max_drift_ms / 2).clamp(20, LONGEST_LEASE_MS)
}

/// The longest lease length, whatever a server's `max_clock_drift`: the most one renewal puts a
/// lease above the server's previous lease while its clock is behind it.
pub const LONGEST_LEASE_MS: u64 = 1000;

/// Whether the lease should be renewed now, and to what timestamp (ms since the epoch).
///
/// * `now_ms`: the clock; `last_ms`: the last issued timestamp (or the floor after a restart);
/// * `lease_ms`: the current lease, 0 when none has been written since start-up;
/// * `wanted`: IDs were issued since the last renewal, or a backend is waiting for a lease.
///
/// Nothing is written unless IDs want it: not at start-up, and not while the server is idle (no
/// WAL traffic when nothing is issued); the first ID after start-up or a pause waits for one
/// renewal. Nor while the clock is further behind `last_ms` than `max_drift_ms`: no ID can be
/// issued then (`State::next` refuses), and the write would record the mark under the
/// configured epoch, hiding an epoch moved later behind a plain "clock is behind".
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
    let issuable = last_ms as i128 - now_ms as i128 <= max_drift_ms as i128;
    if wanted && running_low && issuable {
        Some((base + length).max(lease_ms))
    } else {
        None
    }
}

/// The generator's floor (a timestamp field, ms since the current epoch) from the persisted mark
/// (Unix ms) and the epoch in force when it was written (`None`: not recorded, as before 1.3.0, so
/// the current one is assumed).
///
/// IDs compare by their timestamp field, not by Unix time: an ID issued under an earlier epoch
/// with field `mark - recorded` is above every ID of the current epoch whose field is below that.
/// So the floor is that field, whatever the epoch is now. If the epoch moved later, the floor is
/// then ahead of the clock by as much as the epoch moved, and the generator refuses (see
/// the glue's `epoch_moved_later_error`) rather than issue IDs below old ones.
pub fn restored_floor(mark_unix_ms: i64, recorded_epoch_ms: Option<i64>, epoch_ms: i64) -> u64 {
    if mark_unix_ms <= 0 {
        return 0;
    }
    (mark_unix_ms - recorded_epoch_ms.unwrap_or(epoch_ms)).max(0) as u64
}

/// What the worker makes of the persisted mark when it reads it again: whether someone other than
/// this server's worker changed it since the worker last wrote (or first read) the value `own`
/// (Unix ms, and the epoch it was written under), and if so the floor it imposes. A mark counts
/// milliseconds from the epoch beside it, so it is compared with ours in those milliseconds: a
/// dump of a server whose epoch is earlier brings a lower Unix time that stands for later IDs.
///
/// # Invariant
///
/// Every value found in the mark that the worker did not write itself is a floor from outside (a
/// restore of a dump, a DBA's `setval`, a copy of another server's mark): every ID from then on
/// goes above it, compared with what the server has issued (`State::raise_floor`), never with its
/// lease, which may run a second ahead of what was issued. A value *below* the worker's own
/// (`lowered`) is such a floor too, and the worker writes its own value back at once: the mark
/// is never lowered for longer than one look.
pub fn outside_mark(
    mark_unix_ms: i64,
    recorded_epoch_ms: Option<i64>,
    epoch_ms: i64,
    own: (i64, i64),
) -> Option<OutsideMark> {
    let (own_unix_ms, own_epoch_ms) = own;
    let epoch = recorded_epoch_ms.unwrap_or(epoch_ms);
    (mark_unix_ms != own_unix_ms || epoch != own_epoch_ms).then(|| OutsideMark {
        floor: restored_floor(mark_unix_ms, recorded_epoch_ms, epoch_ms),
        lowered: stands_above(
            (own_unix_ms, Some(own_epoch_ms)),
            epoch_ms,
            (mark_unix_ms, epoch),
        ),
    })
}

/// Whether the mark `found` (Unix ms, and the epoch beside it: `None` for none, which is read as
/// `epoch_ms`) stands for later IDs than `ours` (Unix ms, and the epoch it was written under): a
/// mark counts milliseconds from its own epoch. A write that must not lower the mark keeps such
/// a value, with its epoch, and writes ours (with ours) otherwise.
pub fn stands_above(found: (i64, Option<i64>), epoch_ms: i64, ours: (i64, i64)) -> bool {
    found.0 - found.1.unwrap_or(epoch_ms) > ours.0 - ours.1
}

/// A value of the persisted mark that this server's worker did not write (see `outside_mark`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutsideMark {
    /// The timestamp field every ID from now on goes above.
    pub floor: u64,
    /// Whether the value is below the one the worker wrote: the worker writes its own back.
    pub lowered: bool,
}

impl crate::generator::State {
    /// The lease to write now for this state, if any (`renewal` with its timestamp and lease).
    pub fn renewal(&self, now_ms: i64, wanted: bool, max_drift_ms: u64) -> Option<u64> {
        renewal(now_ms, self.last_ms, self.lease_ms, wanted, max_drift_ms)
    }

    /// Follows a value of the persisted mark that someone else wrote (`outside_mark`): every ID
    /// from now on goes above it. Returns what was found, `None` when the mark is the worker's own.
    pub fn follow_outside_mark(
        &mut self,
        mark_unix_ms: i64,
        recorded_epoch_ms: Option<i64>,
        epoch_ms: i64,
        own: (i64, i64),
    ) -> Option<OutsideMark> {
        let found = outside_mark(mark_unix_ms, recorded_epoch_ms, epoch_ms, own)?;
        self.raise_floor(found.floor);
        Some(found)
    }
}

/// The smallest forward jump of the wall clock that is reported. NTP slews at most 0.5 ms per
/// second and the lease worker looks at least every 250 ms, so a real clock never gets near it.
pub const FORWARD_JUMP_MS: i64 = 1000;

/// A forward jump of the wall clock between two looks: how much more it advanced than the
/// monotonic clock did (which steps, NTP and a manual `date -s` do not move). `None` below
/// `FORWARD_JUMP_MS`, and for a clock that went back (the generator counts those itself).
pub fn forward_jump(wall_advance_ms: i64, monotonic_advance_ms: i64) -> Option<u64> {
    let jump = wall_advance_ms.saturating_sub(monotonic_advance_ms);
    (jump >= FORWARD_JUMP_MS).then_some(jump as u64)
}

#[cfg(test)]
mod tests {
    /// A lease is renewed once less than half of it is left ahead of what was issued.
    #[test]
    fn a_lease_is_renewed_when_half_of_it_is_left() {
        // Drift 10 s: a lease of 1 s.
        assert_eq!(super::renewal(1_000, 1_000, 1_500, true, 10_000), None);
        assert_eq!(
            super::renewal(1_000, 1_000, 1_499, true, 10_000),
            Some(2_000)
        );
        assert_eq!(super::renewal(1_000, 1_000, 1_499, false, 10_000), None);
    }

    /// A lease is half the allowed drift, within 20 ms and `LONGEST_LEASE_MS`.
    #[test]
    fn a_lease_is_half_the_drift_within_its_bounds() {
        use super::{lease_length_ms, LONGEST_LEASE_MS};
        assert_eq!(lease_length_ms(1_000), 500);
        assert_eq!(lease_length_ms(100), 50);
        assert_eq!(lease_length_ms(10), 20);
        assert_eq!(lease_length_ms(60_000), LONGEST_LEASE_MS);
    }

    /// A mark stands above ours only when it stands for later IDs: one for the same millisecond
    /// of its epoch as ours does not, whatever the epochs and Unix values (a write keeps ours).
    #[test]
    fn a_mark_for_the_same_ids_does_not_stand_above_ours() {
        use super::stands_above;
        let epoch = 1_288_834_974_657;
        let day = 86_400_000;
        assert!(!stands_above(
            (epoch + 5_000, Some(epoch)),
            epoch,
            (epoch + 5_000, epoch)
        ));
        assert!(!stands_above(
            (epoch + 5_000, None),
            epoch,
            (epoch + 5_000, epoch)
        ));
        assert!(!stands_above(
            (epoch - day + 5_000, Some(epoch - day)),
            epoch,
            (epoch + 5_000, epoch)
        ));
        assert!(stands_above(
            (epoch + 5_001, None),
            epoch,
            (epoch + 5_000, epoch)
        ));
        assert!(!stands_above(
            (epoch + 4_999, None),
            epoch,
            (epoch + 5_000, epoch)
        ));
    }

    #[test]
    fn a_mark_someone_else_wrote_is_a_floor_compared_with_what_was_issued() {
        use crate::generator::State;
        let epoch = 1_288_834_974_657;
        // Our own value read back: nothing to do (the floor would jump to the lease's end).
        assert_eq!(
            super::outside_mark(epoch + 5_000, Some(epoch), epoch, (epoch + 5_000, epoch)),
            None
        );
        // Raised by a restore: the floor follows.
        assert_eq!(
            super::outside_mark(epoch + 9_000, Some(epoch), epoch, (epoch + 5_000, epoch)),
            Some(OutsideMark {
                floor: 9_000,
                lowered: false
            })
        );
        // Lowered (a dump's setval): still a floor, and the worker writes its own back.
        assert_eq!(
            super::outside_mark(epoch + 4_000, Some(epoch), epoch, (epoch + 5_000, epoch)),
            Some(OutsideMark {
                floor: 4_000,
                lowered: true
            })
        );
        // A value inside the lease but above what was issued (1.5.0 compared with the lease and
        // ignored it): IDs go above it.
        let mut s = State::awaiting_lease();
        s.grant_lease(5_000);
        s.raise_floor(3_000);
        assert!(s
            .follow_outside_mark(epoch + 4_500, Some(epoch), epoch, (epoch + 5_000, epoch))
            .is_some());
        assert_eq!(s.last_ms(), 4_500);
        // Below what was issued: no change to the state.
        s.follow_outside_mark(epoch + 1_000, Some(epoch), epoch, (epoch + 5_000, epoch));
        assert_eq!(s.last_ms(), 4_500);
        // A dump of a server whose epoch is a day earlier: its lower Unix time stands for IDs a
        // day later than ours, so it is raised, not lowered (writing ours back would lose it).
        let day = 86_400_000;
        assert_eq!(
            super::outside_mark(
                epoch + 4_000,
                Some(epoch - day),
                epoch,
                (epoch + 5_000, epoch)
            ),
            Some(OutsideMark {
                floor: 4_000 + day as u64,
                lowered: false
            })
        );
        // The same Unix time with another epoch beside it is someone else's too.
        assert_eq!(
            super::outside_mark(
                epoch + 5_000,
                Some(epoch - day),
                epoch,
                (epoch + 5_000, epoch)
            ),
            Some(OutsideMark {
                floor: 5_000 + day as u64,
                lowered: false
            })
        );
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_lease_is_written_until_ids_want_one() {
        // At start-up with a clock two days ahead: nothing is persisted at that time.
        assert_eq!(renewal(172_800_000, 0, 0, false, 10_000), None);
        assert_eq!(renewal(1000, 0, 0, true, 10_000), Some(2000));
    }

    #[test]
    fn lease_starts_above_a_restored_floor() {
        // After a restart with the clock 10 s behind, the floor (old lease) leads the clock.
        assert_eq!(renewal(1000, 11_000, 0, true, 60_000), Some(12_000));
    }

    #[test]
    fn no_lease_while_the_clock_is_further_behind_than_the_drift_allows() {
        // An epoch moved later by about four years: nothing can be issued, nothing is written.
        assert_eq!(renewal(1000, 131_235_426_000, 0, true, 10_000), None);
        assert_eq!(renewal(1000, 11_001, 0, true, 10_000), None);
        assert_eq!(renewal(1000, 11_000, 0, true, 10_000), Some(12_000));
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
    fn the_floor_is_the_old_epochs_field_whatever_the_epoch_now() {
        let twitter = 1_288_834_974_657;
        let y2015 = 1_420_070_400_000;
        let mark = 1_800_000_000_000;
        // Same epoch, or none recorded (1.2.0): the mark's field.
        assert_eq!(
            restored_floor(mark, Some(twitter), twitter),
            511_165_025_343
        );
        assert_eq!(restored_floor(mark, None, twitter), 511_165_025_343);
        // Epoch moved later: still the old field, which the new epoch's clock reaches only
        // (y2015 - twitter) ms later.
        assert_eq!(restored_floor(mark, Some(twitter), y2015), 511_165_025_343);
        assert!(restored_floor(mark, Some(twitter), y2015) > (mark - y2015) as u64);
        // Nothing ever written.
        assert_eq!(restored_floor(0, None, twitter), 0);
    }

    #[test]
    fn forward_jumps_are_told_from_elapsed_time() {
        assert_eq!(forward_jump(250, 250), None, "a normal look");
        assert_eq!(forward_jump(900, 10), None, "below the threshold");
        assert_eq!(forward_jump(172_800_250, 250), Some(172_800_000));
        assert_eq!(forward_jump(-5_000, 250), None, "backwards");
        // A server suspended with its VM: both clocks advance alike.
        assert_eq!(forward_jump(3_600_000, 3_600_000), None);
    }

    proptest! {
        /// A renewal never moves the lease back, always covers the last issued timestamp and the
        /// clock with at least half a lease to spare, and leads them by at most one lease.
        #[test]
        fn a_renewal_covers_what_is_issued_and_stays_within_half_the_drift(
            now in -1_000_000i64..10_000_000,
            last in 0u64..10_000_000,
            lease in prop_oneof![Just(0u64), 0u64..12_000_000],
            wanted: bool,
            drift in 100u64..200_000,
        ) {
            let base = (now.max(0) as u64).max(last);
            match renewal(now, last, lease, wanted, drift) {
                Some(new) => {
                    prop_assert!(wanted);
                    prop_assert!(new >= lease, "moved back from {} to {}", lease, new);
                    prop_assert!(new >= base + lease_length_ms(drift));
                    prop_assert!(new - base <= drift / 2 || new == lease);
                }
                None => prop_assert!(
                    !wanted
                        || lease >= base + lease_length_ms(drift) / 2
                        || last as i64 - now > drift as i64
                ),
            }
        }
    }
}
