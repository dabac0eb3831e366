//! The clock + sequence policy: one `State` per server, advanced under the server's lock.
//!
//! # Invariant
//!
//! Every ID issued from a [`State`] is strictly greater than the one before it, and
//! greater than every ID whose timestamp is at or below the floor the state was started from.
//! Because the node bits are the same for every ID of a server, that makes every ID unique, and
//! IDs of different nodes can never collide.
//!
//! The state never reads a clock itself: the caller passes "now" in, so the policy is tested with
//! any clock it likes, and the caller decides how to wait (a process-local condvar in tests, a
//! latch with `CHECK_FOR_INTERRUPTS` in PostgreSQL) without ever holding its lock while it waits.

use super::layout::{assemble, decompose, Node, MAX_SEQUENCE, MAX_TIMESTAMP};
use std::fmt;

/// The first sequence of a new millisecond is drawn from `0..SEQUENCE_SPREAD` instead of always
/// being 0, so that at low load IDs are not all multiples of 4096 (which would skew `id % n`
/// sharding). Each millisecond therefore guarantees at least `MIN_IDS_PER_MS` IDs before the
/// generator borrows the next millisecond.
pub const SEQUENCE_SPREAD: u32 = 1024;
pub const MIN_IDS_PER_MS: u32 = MAX_SEQUENCE + 1 - SEQUENCE_SPREAD;

/// Counters kept beside the state; they cost an add each and die with shared memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Stats {
    pub issued: u64,
    /// Milliseconds entered ahead of the wall clock because the previous one was exhausted.
    pub borrowed_ms: u64,
    /// Times the wall clock was seen to go backwards (one per episode, not per call).
    pub clock_back_events: u64,
    pub largest_clock_back_ms: u64,
    /// How far behind its highest reading the clock was seen in the latest of those episodes
    /// (the largest gap of that episode): at least the size of the step that began it, less the
    /// time until a call first saw it. The lease worker says it ([`crate::worker::Todo::ClockBack`]).
    pub latest_clock_back_ms: u64,
    /// Times the lease worker saw the wall clock jump forward (see [`crate::lease::forward_jump`]), and the
    /// largest such jump: IDs issued after one are dated that far ahead of real time if the clock
    /// was wrong.
    pub clock_forward_jumps: u64,
    pub largest_clock_forward_ms: u64,
    pub waits: u64,
    /// Calls that failed, each once whatever it failed on (counted by the caller that raises,
    /// with [`State::count_failure`]: `next` counts nothing, since a call may attempt twice).
    pub errors: u64,
    /// The clock's reading (ms since the epoch) when the latest of the `clock_back_events` began:
    /// `i64::MIN` while there was none.
    pub latest_clock_back_at_ms: i64,
    /// A monotonic clock's reading (ms, the caller's) at the latest failure, 0 while there was
    /// none: the health check ([`crate::health`]) tells a recent refusal from one long past by
    /// a clock that no step of the wall clock moves.
    pub latest_error_mono_ms: u64,
}

/// The generator's state. Its fields are the core's: the glue reads them through the accessors
/// below and changes them only through named transitions, so every rule about the state is here,
/// where the tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct State {
    /// Timestamp field (ms since the epoch) of the last ID issued, or the floor to start above.
    pub(crate) last_ms: u64,
    /// Sequence of the last ID issued; `MAX_SEQUENCE` means "nothing left in `last_ms`".
    pub(crate) last_seq: u32,
    /// The highest timestamp IDs may carry until the lease is renewed (see [`crate::lease`]);
    /// `u64::MAX` when no lease is required.
    pub(crate) lease_ms: u64,
    /// The highest clock reading seen, to tell a clock that went back from a borrowed lead.
    pub(crate) clock_high: i64,
    pub(crate) behind: bool,
    /// Set when an ID had to wait for the lease: tells the renewer that it is needed now.
    pub(crate) lease_wanted: bool,
    /// Set while another live server claims this server's datacenter and worker ID (see
    /// [`crate::fleet`]): issuing would repeat its IDs, so nothing is issued until it clears.
    pub(crate) refused: bool,
    /// Looks at the claims asked by refused calls (a count that wraps), and the last of them a
    /// finished refresh answered (see [`crate::worker::Worker::poll`]): a call refused because of
    /// a claim waits for a look that started after it asked, so that a claim a DBA retired (or
    /// another change the worker has not read) is seen at once, not at the next refresh.
    pub(crate) looks_asked: u32,
    pub(crate) looks_answered: u32,
    pub(crate) stats: Stats,
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}

/// What one attempt to issue produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Issued(i64),
    /// The millisecond is exhausted and borrowing another would put the ID's timestamp more than
    /// the allowed drift ahead of the clock: retry once the clock reads `until_ms` (ms since the
    /// epoch), which is at most a millisecond away.
    WaitClock {
        until_ms: i64,
    },
    /// The next ID would carry a timestamp beyond the persisted lease: renew it, then retry.
    WaitLease {
        needed_ms: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorError {
    Negative,
    /// The value's timestamp lies so far ahead of the clock that IDs above it would break the
    /// drift limit.
    TooFarAhead {
        ahead_ms: u64,
        max_drift_ms: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenError {
    /// The clock reads more than the allowed drift behind the last issued timestamp.
    ClockBehind { behind_ms: u64, max_drift_ms: u64 },
    /// The clock reads before the epoch, further than the allowed drift: a machine that booted
    /// without a hardware clock, or an epoch set in the future.
    BeforeEpoch { before_ms: u64 },
    /// The 41-bit timestamp is used up (the year 2080 with Twitter's epoch).
    TimestampExhausted,
    /// Another live server claims this server's datacenter and worker ID.
    Refused,
}

impl fmt::Display for GenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GenError::ClockBehind { behind_ms, max_drift_ms } => write!(
                f,
                "clock is {behind_ms} ms behind the last issued snowflake timestamp, more than the allowed {max_drift_ms} ms"
            ),
            GenError::BeforeEpoch { before_ms } => {
                write!(f, "clock reads {before_ms} ms before the snowflake epoch")
            }
            GenError::TimestampExhausted => write!(f, "snowflake timestamp range is exhausted"),
            GenError::Refused => write!(
                f,
                "another server claims this server's datacenter and worker ID"
            ),
        }
    }
}

/// A cheap, fixed scramble of the millisecond (SplitMix64's finaliser): deterministic, so tests
/// can predict it, and well spread, so consecutive milliseconds start far apart.
#[inline]
pub fn first_sequence(ms: u64) -> u32 {
    let mut z = ms.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % u64::from(SEQUENCE_SPREAD)) as u32
}

impl State {
    /// A state that issues nothing until a lease is granted: what a server starts with, before
    /// the lease worker has read the persisted mark and written a lease above it.
    pub const fn awaiting_lease() -> State {
        let mut s = State::new();
        s.lease_ms = 0;
        s
    }

    /// Timestamp field (ms since the epoch) of the last ID issued, or the floor to start above.
    #[inline]
    pub fn last_ms(&self) -> u64 {
        self.last_ms
    }

    /// Sequence of the last ID issued at [`State::last_ms`]; `MAX_SEQUENCE` when that whole
    /// millisecond counts as used (a floor, or a millisecond exhausted).
    #[inline]
    pub fn last_seq(&self) -> u32 {
        self.last_seq
    }

    /// The highest timestamp IDs may carry until the lease is renewed, or `None` when this state
    /// needs no lease.
    pub fn lease(&self) -> Option<u64> {
        (self.lease_ms != u64::MAX).then_some(self.lease_ms)
    }

    /// Whether nothing is issued now because another server claims the pair or an object was
    /// not trusted (see `set_refused`).
    pub fn refused(&self) -> bool {
        self.refused
    }

    /// The highest timestamp this state may have issued IDs under: its lease, or before the first
    /// lease its floor (0 when neither is known).
    pub fn highest_possible_ms(&self) -> u64 {
        let lease = self.lease().unwrap_or(0);
        lease.max(self.last_ms).min(MAX_TIMESTAMP)
    }

    /// Whether an ID waited for the lease since it was last granted: the renewer is needed now.
    pub fn lease_wanted(&self) -> bool {
        self.lease_wanted
    }

    /// Whether anything was issued, or a floor set, since the state was made. (An ID's
    /// timestamp is at least 1: a first call at the epoch's millisecond 0 borrows the next.)
    pub fn issued_any(&self) -> bool {
        self.last_ms > 0
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// A lease up to `lease_ms` is persisted. The lease never goes down: a grant below the one
    /// held changes nothing (a renewal that raced a higher one).
    pub fn grant_lease(&mut self, lease_ms: u64) {
        self.lease_ms = self.lease_ms.max(lease_ms);
        self.lease_wanted = false;
    }

    /// Takes back the lease granted beyond what was issued: no ID from now on until the next
    /// grant, not even one more in the millisecond of the last ID (it counts as used). What the
    /// synchronous standbys confirmed no longer says where a failover lands once their set
    /// changed ([`crate::worker::Worker::standbys_changed`]). A state that needs no lease keeps
    /// none.
    pub fn revoke_lease(&mut self) {
        if self.lease_ms != u64::MAX {
            self.last_seq = MAX_SEQUENCE;
            self.lease_ms = self.lease_ms.min(self.last_ms);
        }
    }

    /// Asks the renewer for a lease now (an idle generator about to be committed ahead).
    pub fn want_lease(&mut self) {
        self.lease_wanted = true;
    }

    /// While `refused`, nothing is issued: another live server claims this server's pair, or the
    /// lease worker does not trust an object it found.
    pub fn set_refused(&mut self, refused: bool) {
        self.refused = refused;
    }

    /// A refused call asks the lease worker to look at the claims again; returns the ticket that
    /// `look_answered` takes.
    pub fn ask_look(&mut self) -> u32 {
        self.looks_asked = self.looks_asked.wrapping_add(1);
        self.looks_asked
    }

    /// The looks asked so far (the worker takes them at the refresh it starts).
    pub fn looks_asked(&self) -> u32 {
        self.looks_asked
    }

    /// Whether a refresh that started after `ticket` was asked has finished.
    pub fn look_answered(&self, ticket: u32) -> bool {
        // Tickets wrap: answered is at or past the ticket within half the range.
        self.looks_answered.wrapping_sub(ticket) < u32::MAX / 2
    }

    /// A refresh that started when `asked` looks had been asked has finished.
    pub fn answer_looks(&mut self, asked: u32) {
        self.looks_answered = asked;
    }

    /// Counts a forward jump of the wall clock of `jump_ms`, seen by the lease worker.
    pub fn record_forward_jump(&mut self, jump_ms: u64) {
        self.stats.clock_forward_jumps += 1;
        self.stats.largest_clock_forward_ms = self.stats.largest_clock_forward_ms.max(jump_ms);
    }

    pub const fn new() -> State {
        State {
            last_ms: 0,
            last_seq: MAX_SEQUENCE,
            lease_ms: u64::MAX,
            clock_high: -(1 << 62),
            behind: false,
            lease_wanted: false,
            refused: false,
            looks_asked: 0,
            looks_answered: 0,
            stats: Stats {
                issued: 0,
                borrowed_ms: 0,
                clock_back_events: 0,
                largest_clock_back_ms: 0,
                latest_clock_back_ms: 0,
                clock_forward_jumps: 0,
                largest_clock_forward_ms: 0,
                waits: 0,
                errors: 0,
                latest_clock_back_at_ms: i64::MIN,
                latest_error_mono_ms: 0,
            },
        }
    }

    /// Makes every future ID carry a timestamp above `ms`: used after a restart (the persisted
    /// lease) and when a table's existing keys must stay below new ones.
    pub fn raise_floor(&mut self, ms: u64) {
        if ms >= self.last_ms {
            self.last_ms = ms;
            self.last_seq = MAX_SEQUENCE;
        }
    }

    /// Makes every future ID greater than `id`, as long as that does not put the generator more
    /// than `max_drift_ms` ahead of the clock `now_ms`: used to switch a table that already has
    /// keys over to snowflake IDs. Returns how far ahead of the clock `id`'s timestamp lies.
    pub fn ensure_above(
        &mut self,
        id: i64,
        now_ms: i64,
        max_drift_ms: u64,
    ) -> Result<u64, FloorError> {
        let ms = decompose(id).map_err(|_| FloorError::Negative)?.ms;
        let ahead = (ms as i128 - now_ms as i128).max(0) as u64;
        if ahead >= max_drift_ms {
            return Err(FloorError::TooFarAhead {
                ahead_ms: ahead,
                max_drift_ms,
            });
        }
        self.raise_floor(ms);
        Ok(ahead)
    }

    /// Whether a clock reading taken before the caller's lock is older than the newest reading
    /// this state has seen: then it may only be stale (the caller waited for the lock while
    /// another caller saw a later time), and the caller reads the clock again under the lock.
    #[inline(always)]
    pub fn is_stale(&self, now_ms: i64) -> bool {
        now_ms < self.clock_high
    }

    /// One attempt to issue an ID at clock reading `now_ms` (ms since the epoch; negative when the
    /// clock reads before the epoch). Constant time: never loops, never waits.
    #[inline(always)]
    pub fn next(&mut self, now_ms: i64, node: Node, max_drift_ms: u64) -> Result<Step, GenError> {
        // Bounding the inputs once lets all arithmetic below be plain i64 without overflow:
        // timestamps are at most 2^41 + 1, a clock reading beyond ±2^62 ms is nonsense anyway.
        let now_ms = now_ms.clamp(-(1 << 62), 1 << 62);
        if self.refused {
            return Err(GenError::Refused);
        }
        let max_drift = max_drift_ms.min(1 << 62) as i64;
        self.observe_clock(now_ms);
        let (ms, seq) = if now_ms > self.last_ms as i64 {
            (now_ms as u64, first_sequence(now_ms as u64))
        } else if self.last_seq < MAX_SEQUENCE {
            (self.last_ms, self.last_seq + 1)
        } else {
            (self.last_ms + 1, first_sequence(self.last_ms + 1))
        };
        // How far the candidate timestamp runs ahead of the clock: 0 in the common case, the size
        // of the backward step when the clock went back, one more when a millisecond is borrowed.
        let lead = (ms as i64 - now_ms).max(0);
        if lead > max_drift {
            let behind = (self.last_ms as i64 - now_ms).max(0);
            if now_ms < 0 {
                let before_ms = now_ms.unsigned_abs();
                return Err(GenError::BeforeEpoch { before_ms });
            }
            if behind > max_drift || ms != self.last_ms + 1 {
                let behind_ms = behind as u64;
                return Err(GenError::ClockBehind {
                    behind_ms,
                    max_drift_ms,
                });
            }
            self.stats.waits += 1;
            return Ok(Step::WaitClock {
                until_ms: ms as i64 - max_drift,
            });
        }
        if ms > MAX_TIMESTAMP {
            return Err(GenError::TimestampExhausted);
        }
        if ms > self.lease_ms {
            self.stats.waits += 1;
            self.lease_wanted = true;
            return Ok(Step::WaitLease { needed_ms: ms });
        }
        if lead > 0 && ms != self.last_ms {
            self.stats.borrowed_ms += 1;
        }
        self.last_ms = ms;
        self.last_seq = seq;
        self.stats.issued += 1;
        Ok(Step::Issued(assemble(ms, node, seq)))
    }

    /// Counts a call that failed, whatever it failed on (a refusal of `next`, a lease that did
    /// not come, a standby), at `mono_ms` of a monotonic clock (never 0).
    pub fn count_failure(&mut self, mono_ms: u64) {
        self.stats.errors += 1;
        self.stats.latest_error_mono_ms = mono_ms.max(1);
    }

    #[inline(always)]
    fn observe_clock(&mut self, now_ms: i64) {
        if now_ms >= self.clock_high {
            self.clock_high = now_ms;
            self.behind = false;
        } else {
            let gap = (self.clock_high - now_ms) as u64;
            if !self.behind {
                self.behind = true;
                self.stats.clock_back_events += 1;
                self.stats.latest_clock_back_ms = 0;
                self.stats.latest_clock_back_at_ms = now_ms;
            }
            self.stats.largest_clock_back_ms = self.stats.largest_clock_back_ms.max(gap);
            self.stats.latest_clock_back_ms = self.stats.latest_clock_back_ms.max(gap);
        }
    }
}

/// Drives `State::next` to an ID: the loop every caller runs, whatever its lock and its way of
/// waiting. `attempt` runs one `next` under the caller's lock; `wait` runs with no lock held.
pub fn issue<E>(
    mut attempt: impl FnMut() -> Result<Step, GenError>,
    mut wait: impl FnMut(Step) -> Result<(), E>,
) -> Result<i64, IssueError<E>> {
    loop {
        match attempt().map_err(IssueError::Gen)? {
            Step::Issued(id) => return Ok(id),
            other => wait(other).map_err(IssueError::Wait)?,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum IssueError<E> {
    Gen(GenError),
    Wait(E),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{decompose, MAX_SEQUENCE, MAX_TIMESTAMP};
    use proptest::prelude::*;

    fn node() -> Node {
        Node::new(3, 7).unwrap()
    }

    fn issued(s: &mut State, now: i64, drift: u64) -> i64 {
        match s.next(now, node(), drift) {
            Ok(Step::Issued(id)) => id,
            other => panic!("expected an ID at {now}, got {other:?}"),
        }
    }

    #[test]
    fn a_refused_generator_issues_nothing_and_resumes_above_its_last_id() {
        let mut s = State::new();
        let before = issued(&mut s, 1000, 10);
        s.refused = true;
        for now in [1000, 1001, 5000] {
            assert_eq!(s.next(now, node(), 10), Err(GenError::Refused));
        }
        assert_eq!(s.stats.errors, 0, "the caller counts, once per call");
        assert_eq!(s.stats.issued, 1);
        s.refused = false;
        assert!(issued(&mut s, 5000, 10) > before);
    }

    #[test]
    fn a_reading_older_than_the_newest_seen_is_stale_and_counts_nothing_once_read_again() {
        let mut s = State::new();
        issued(&mut s, 5000, 10);
        // Another caller saw 5000; ours was read at 4999 before it got the lock.
        assert!(s.is_stale(4999));
        assert!(!s.is_stale(5000) && !s.is_stale(5001));
        // Read again under the lock (5000 or later): no clock-back event.
        issued(&mut s, 5000, 10);
        assert_eq!(s.stats.clock_back_events, 0);
        // Had the stale reading been used, it would have counted one.
        issued(&mut s, 4999, 10);
        assert_eq!(s.stats.clock_back_events, 1);
    }

    #[test]
    fn new_millisecond_starts_at_its_spread_sequence() {
        let mut s = State::new();
        let id = issued(&mut s, 1000, 0);
        let p = decompose(id).unwrap();
        assert_eq!((p.ms, p.datacenter, p.worker), (1000, 3, 7));
        assert_eq!(p.sequence, first_sequence(1000));
        let next = decompose(issued(&mut s, 1000, 0)).unwrap();
        assert_eq!((next.ms, next.sequence), (1000, first_sequence(1000) + 1));
    }

    #[test]
    fn exhausted_millisecond_borrows_the_next_within_drift() {
        let mut s = State::new();
        let mut last = 0;
        let mut count = 0;
        while decompose(last).map(|p| p.ms).unwrap_or(0) <= 1000 {
            last = issued(&mut s, 1000, 10);
            count += 1;
        }
        assert_eq!(
            decompose(last).unwrap().ms,
            1001,
            "borrowed the next millisecond"
        );
        assert!(
            count > MIN_IDS_PER_MS,
            "at least the documented capacity in one ms"
        );
        assert_eq!(s.stats.borrowed_ms, 1);
    }

    #[test]
    fn exhausted_millisecond_with_no_drift_waits_for_the_clock() {
        let mut s = State::new();
        s.raise_floor(999);
        s.next(1000, node(), 0).unwrap();
        s.last_seq = MAX_SEQUENCE;
        assert_eq!(
            s.next(1000, node(), 0),
            Ok(Step::WaitClock { until_ms: 1001 })
        );
        assert!(matches!(s.next(1001, node(), 0), Ok(Step::Issued(_))));
    }

    #[test]
    fn clock_behind_within_drift_keeps_issuing_from_the_last_timestamp() {
        let mut s = State::new();
        let a = issued(&mut s, 5000, 1000);
        let b = issued(&mut s, 4000, 1000);
        assert!(b > a);
        assert_eq!(decompose(b).unwrap().ms, 5000);
        assert_eq!(s.stats.clock_back_events, 1);
        assert_eq!(s.stats.largest_clock_back_ms, 1000);
    }

    #[test]
    fn clock_behind_beyond_drift_is_an_error_that_clears_when_the_clock_catches_up() {
        let mut s = State::new();
        let a = issued(&mut s, 5000, 1000);
        assert_eq!(
            s.next(3999, node(), 1000),
            Err(GenError::ClockBehind {
                behind_ms: 1001,
                max_drift_ms: 1000
            })
        );
        let b = issued(&mut s, 4000, 1000);
        assert!(b > a);
    }

    #[test]
    fn lease_bounds_the_timestamp() {
        let mut s = State::new();
        s.lease_ms = 1000;
        assert!(matches!(s.next(1000, node(), 0), Ok(Step::Issued(_))));
        assert_eq!(
            s.next(1001, node(), 0),
            Ok(Step::WaitLease { needed_ms: 1001 })
        );
        s.lease_ms = 2000;
        assert!(matches!(s.next(1001, node(), 0), Ok(Step::Issued(_))));
    }

    #[test]
    fn raised_floor_puts_every_new_id_above_it() {
        let mut s = State::new();
        s.raise_floor(10_000);
        let id = issued(&mut s, 9_000, 5_000);
        assert_eq!(decompose(id).unwrap().ms, 10_001);
        s.raise_floor(5);
        assert!(
            issued(&mut s, 9_000, 5_000) > id,
            "a lower floor changes nothing"
        );
    }

    #[test]
    fn ensure_above_puts_new_ids_above_existing_keys_or_refuses() {
        let mut s = State::new();
        // A bigserial's keys are tiny: trivially below.
        assert_eq!(s.ensure_above(5_000_000, 1_000_000, 10_000), Ok(0));
        let id = issued(&mut s, 1_000_000, 10_000);
        let above = crate::layout::compose(1_005_000, 31, 31, 4095).unwrap();
        assert_eq!(s.ensure_above(above, 1_000_000, 10_000), Ok(5_000));
        let next = issued(&mut s, 1_000_000, 10_000);
        assert!(next > above && next > id);
        let far = crate::layout::compose(1_020_000, 0, 0, 0).unwrap();
        assert_eq!(
            s.ensure_above(far, 1_000_000, 10_000),
            Err(FloorError::TooFarAhead {
                ahead_ms: 20_000,
                max_drift_ms: 10_000
            })
        );
        assert_eq!(s.ensure_above(-1, 0, 10), Err(FloorError::Negative));
    }

    #[test]
    fn absurd_clock_readings_are_errors_not_overflows() {
        let mut s = State::new();
        issued(&mut s, 1000, u64::MAX);
        assert!(matches!(
            s.next(i64::MIN, node(), 10),
            Err(GenError::BeforeEpoch { .. })
        ));
        assert_eq!(
            s.next(i64::MAX, node(), 10),
            Err(GenError::TimestampExhausted)
        );
        assert!(matches!(
            s.next(-1000, node(), u64::MAX),
            Ok(Step::Issued(_))
        ));
    }

    #[test]
    fn a_clock_before_the_epoch_is_its_own_error_until_it_passes_the_epoch() {
        let mut s = State::new();
        assert_eq!(
            s.next(-5_000, node(), 1000),
            Err(GenError::BeforeEpoch { before_ms: 5_000 })
        );
        // Within the drift of the epoch, the first millisecond is borrowed as usual.
        assert!(matches!(s.next(-500, node(), 1000), Ok(Step::Issued(_))));
        let id = issued(&mut s, 10, 1000);
        assert_eq!(decompose(id).unwrap().ms, 10);
    }

    #[test]
    fn end_of_the_timestamp_range_is_an_error_not_a_wrap() {
        let mut s = State::new();
        let end = MAX_TIMESTAMP as i64;
        let id = issued(&mut s, end, 0);
        assert!(id > 0);
        assert_eq!(
            s.next(end + 1, node(), 0),
            Err(GenError::TimestampExhausted)
        );
    }

    #[test]
    fn low_load_ids_are_spread_over_residues() {
        let mut s = State::new();
        let ids: Vec<i64> = (0..4096)
            .map(|i| issued(&mut s, 1_000_000 + i * 3, 0))
            .collect();
        for n in [2i64, 4, 10, 16] {
            let mut counts = vec![0usize; n as usize];
            for id in &ids {
                counts[(id % n) as usize] += 1;
            }
            let expected = ids.len() / n as usize;
            for c in counts {
                assert!(
                    c > expected * 3 / 4 && c < expected * 5 / 4,
                    "id % {n} skewed"
                );
            }
        }
    }

    #[test]
    fn first_sequence_stays_in_the_spread() {
        assert!((0..100_000u64).all(|ms| first_sequence(ms) < SEQUENCE_SPREAD));
        // SplitMix64's finaliser, as documented (values from an independent implementation),
        // so consecutive milliseconds start far apart.
        let got = [0, 1, 2, 1000, 511_165_026_343].map(first_sequence);
        assert_eq!(got, [431, 193, 718, 328, 586]);
        let distinct: std::collections::HashSet<u32> = (0..4096u64).map(first_sequence).collect();
        assert!(distinct.len() > 900, "{}", distinct.len());
        assert_eq!(MIN_IDS_PER_MS, 4096 - SEQUENCE_SPREAD);
    }

    /// Each outcome of one attempt, with the counter it moves: the drift bound is inclusive, a
    /// borrowed millisecond starts at its own spread sequence, and the waits say until when.
    #[test]
    fn each_outcome_of_an_attempt_is_exact() {
        let at = |s: &mut State, now: i64, drift: u64| s.next(now, node(), drift);
        // A borrowed millisecond: its own first sequence, counted as borrowed.
        let mut s = State::new();
        s.raise_floor(1_000);
        let p = decompose(issued(&mut s, 1_000, 10)).unwrap();
        assert_eq!((p.ms, p.sequence), (1_001, first_sequence(1_001)));
        assert_ne!(first_sequence(1_001), first_sequence(1_000));
        assert_eq!(s.stats().borrowed_ms, 1);
        // Ahead of the clock by exactly the drift: issued; by one more: a wait, until the clock
        // is within the drift again.
        let mut s = State::new();
        s.raise_floor(1_005);
        assert!(matches!(at(&mut s, 1_000, 6), Ok(Step::Issued(_))));
        let mut s = State::new();
        s.raise_floor(1_005);
        assert_eq!(
            at(&mut s, 1_000, 5),
            Ok(Step::WaitClock { until_ms: 1_001 })
        );
        assert_eq!((s.stats().waits, s.stats().errors), (1, 0));
        // Behind by more than the drift: an error (at the epoch's own millisecond too:
        // behind, not before the epoch).
        for (floor, now, behind) in [(1_010, 1_000, 10), (100, 0, 100)] {
            let mut s = State::new();
            s.raise_floor(floor);
            let err = GenError::ClockBehind {
                behind_ms: behind,
                max_drift_ms: 5,
            };
            assert_eq!(at(&mut s, now, 5), Err(err));
            assert_eq!(s.stats().waits, 0);
        }
        // Before the epoch, and past the last timestamp: errors.
        let mut s = State::new();
        assert_eq!(
            at(&mut s, -5, 1),
            Err(GenError::BeforeEpoch { before_ms: 5 })
        );
        let mut s = State::new();
        s.raise_floor(MAX_TIMESTAMP);
        assert_eq!(
            at(&mut s, MAX_TIMESTAMP as i64, 10),
            Err(GenError::TimestampExhausted)
        );
        // Beyond the lease: a wait for it, however far.
        let mut s = State::awaiting_lease();
        s.grant_lease(100);
        assert_eq!(at(&mut s, 150, 10), Ok(Step::WaitLease { needed_ms: 150 }));
        assert!(s.lease_wanted());
        assert_eq!(s.stats().waits, 1);
    }

    /// What the lease worker and the status functions read of a state.
    #[test]
    fn a_state_says_what_it_may_have_issued() {
        let mut s = State::awaiting_lease();
        assert!(!s.issued_any());
        assert_eq!(s.highest_possible_ms(), 0);
        s.raise_floor(5_000);
        assert!(s.issued_any(), "a floor counts");
        assert_eq!(s.highest_possible_ms(), 5_000);
        s.grant_lease(9_000);
        assert_eq!(s.highest_possible_ms(), 9_000);
        let mut s = State::awaiting_lease();
        s.grant_lease(9_000);
        assert!(!s.issued_any());
        issued(&mut s, 10, 0);
        assert!(s.issued_any(), "an ID counts");
    }

    #[derive(Debug, Clone)]
    enum Tick {
        Forward(u16),
        Back(u32),
        Same,
    }

    fn ticks() -> impl Strategy<Value = Vec<Tick>> {
        proptest::collection::vec(
            prop_oneof![
                6 => (0u16..3).prop_map(Tick::Forward),
                3 => Just(Tick::Same),
                1 => (0u32..3000).prop_map(Tick::Back),
            ],
            1..3000,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Whatever the clock does, what is issued is strictly increasing and never leads the
        /// clock by more than the drift; errors happen only when the clock is behind by more.
        #[test]
        fn ids_strictly_increase_under_any_clock(steps in ticks(), drift in 0u64..2000) {
            let mut s = State::new();
            let mut now: i64 = 1_000_000;
            let mut prev = -1i64;
            for t in steps {
                match t {
                    Tick::Forward(d) => now += i64::from(d),
                    Tick::Back(d) => now -= i64::from(d),
                    Tick::Same => {}
                }
                let before = s.last_ms;
                match s.next(now, node(), drift) {
                    Ok(Step::Issued(id)) => {
                        prop_assert!(id > prev, "{} not above {}", id, prev);
                        let ms = decompose(id).unwrap().ms as i64;
                        prop_assert!(ms - now <= drift as i64);
                        prev = id;
                    }
                    Ok(Step::WaitClock { until_ms }) => {
                        prop_assert!(until_ms > now && until_ms <= now + 1);
                    }
                    Ok(Step::WaitLease { .. }) => prop_assert!(false, "no lease was set"),
                    Err(GenError::BeforeEpoch { before_ms }) => {
                        prop_assert!(now < 0 && before_ms == now.unsigned_abs());
                    }
                    Err(GenError::ClockBehind { behind_ms, .. }) => {
                        prop_assert!(now >= 0 && behind_ms > drift);
                        prop_assert_eq!(before as i64 - now, behind_ms as i64);
                    }
                    Err(e) => prop_assert!(false, "unexpected {:?}", e),
                }
            }
        }
    }
    #[test]
    fn a_lease_is_never_lowered_and_a_grant_answers_the_want() {
        let mut s = State::awaiting_lease();
        assert_eq!(s.lease(), Some(0));
        assert!(matches!(
            s.next(1000, node(), 0),
            Ok(Step::WaitLease { .. })
        ));
        assert!(s.lease_wanted());
        s.grant_lease(5000);
        assert_eq!((s.lease(), s.lease_wanted()), (Some(5000), false));
        s.grant_lease(3000);
        assert_eq!(s.lease(), Some(5000));
        s.want_lease();
        assert!(s.lease_wanted());
        assert_eq!(State::new().lease(), None);
    }

    /// A look's ticket is answered by an answer at it or past it by less than `u32::MAX / 2`
    /// (wrapping); one that far past or further is a ticket asked after the answer, wrapped
    /// round. (worker's `look_tickets_wrap` drives the same rule through asks.)
    #[test]
    fn a_look_is_answered_within_half_the_ticket_range() {
        let mut s = State::new();
        for ticket in [0, 7, u32::MAX - 3] {
            s.answer_looks(ticket);
            assert!(s.look_answered(ticket), "the answer at {ticket}");
            s.answer_looks(ticket.wrapping_add(u32::MAX / 2 - 1));
            assert!(s.look_answered(ticket), "the furthest answer past {ticket}");
            s.answer_looks(ticket.wrapping_add(u32::MAX / 2));
            assert!(!s.look_answered(ticket), "past {ticket} by u32::MAX / 2");
            s.answer_looks(ticket.wrapping_sub(1));
            assert!(!s.look_answered(ticket), "the answer before {ticket}");
        }
    }

    #[test]
    fn forward_jumps_count_and_keep_the_largest() {
        let mut s = State::new();
        s.record_forward_jump(2000);
        s.record_forward_jump(500);
        assert_eq!(
            (
                s.stats().clock_forward_jumps,
                s.stats().largest_clock_forward_ms
            ),
            (2, 2000)
        );
    }
}
