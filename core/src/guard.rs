//! The key guard's rule: whether an ID written into a key column by hand (an explicit value, a
//! copy, an import) is one that a generator will issue again later, so that the table's own
//! later inserts would fail with a duplicate key, far from the cause.
//!
//! # Invariant
//!
//! An ID this server's generator issued always passes, whenever it is checked: it is at or below
//! the generator's last ID (every later ID is greater, [the generator's
//! invariant](crate::generator#invariant)), so the check reads the shared state after the ID was
//! issued, never a copy taken before.
//!
//! Two kinds of IDs are refused:
//!
//! * on this server's pair, an ID above the last one its generator issued (or the floor it was
//!   given): the generator passes through every ID above it, and may issue that one;
//! * on any other pair, an ID whose time lies more than `max_clock_drift` ahead of this server's
//!   clock: the server holding that pair issues IDs near its clock, and will reach it. Within the
//!   drift it passes: a peer's own IDs run up to the drift ahead of its clock, and its clock may
//!   be a little ahead of this one, so a tighter rule would refuse the fleet's own IDs.
//!
//! Negative values pass: no generator issues them.
//!
//! In `'always'` mode ([`judge_always`]), as with `GENERATED ALWAYS`, a row's ID passes only if
//! it is the ID that this session's `snowflake_nextval()` returned last: the column's default, or
//! a call in the statement, evaluated for the row just before its BEFORE ROW triggers fire. Any
//! other value is refused, whatever its time: the rule does not ask whether an ID is dangerous,
//! only whether it came from the generator for this row.

use super::generator::State;
use super::layout::{assemble, decompose, Node, MAX_SEQUENCE};

/// Why an explicit ID is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Danger {
    /// On this server's pair, above `last_id`, the last ID its generator issued or the floor it
    /// stands on (`None`: none since it started, before its first lease).
    AboveOwn { last_id: Option<i64> },
    /// On another pair, `ahead_ms` ahead of the clock, more than the drift allows.
    AheadOfClock { ahead_ms: u64 },
}

/// Why a row is refused in `'always'` mode: its ID is not the one this session's generator
/// returned last, `last_returned` (`None`: it returned none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotJustIssued {
    pub last_returned: Option<i64>,
}

/// The last ID `state` issued on `own`, or the floor it stands on: every ID it issues later is
/// greater. `None` before anything was issued or a floor set (a server awaiting its first lease).
pub fn last_issued(state: &State, own: Node) -> Option<i64> {
    state
        .issued_any()
        .then(|| assemble(state.last_ms(), own, state.last_seq().min(MAX_SEQUENCE)))
}

/// Whether `id`, given explicitly, is safe to store beside the IDs of this server, whose
/// generator is `state` on pair `own`, with the clock at `now_ms` (ms since the epoch) and
/// `max_drift_ms` of drift.
pub fn judge(
    id: i64,
    own: Node,
    state: &State,
    now_ms: i64,
    max_drift_ms: u64,
) -> Result<(), Danger> {
    let Ok(parts) = decompose(id) else {
        return Ok(());
    };
    if parts.datacenter == own.datacenter() && parts.worker == own.worker() {
        let last_id = last_issued(state, own);
        return match last_id {
            Some(last) if id <= last => Ok(()),
            _ => Err(Danger::AboveOwn { last_id }),
        };
    }
    let ahead = i128::from(parts.ms) - i128::from(now_ms);
    if ahead > i128::from(max_drift_ms) {
        return Err(Danger::AheadOfClock {
            ahead_ms: u64::try_from(ahead).unwrap_or(u64::MAX),
        });
    }
    Ok(())
}

/// Whether `id` may be written into a column guarded in `'always'` mode, where `last_returned`
/// is the last ID `snowflake_nextval()` returned in this session (`None` before the first).
pub fn judge_always(id: i64, last_returned: Option<i64>) -> Result<(), NotJustIssued> {
    if last_returned == Some(id) {
        Ok(())
    } else {
        Err(NotJustIssued { last_returned })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::Step;

    const DRIFT: u64 = 10_000;

    fn own() -> Node {
        Node::new(1, 2).unwrap()
    }

    /// A generator that issued one ID at `now`, and that ID.
    fn issued_at(now: i64) -> (State, i64) {
        let mut s = State::new();
        match s.next(now, own(), DRIFT).unwrap() {
            Step::Issued(id) => (s, id),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_id_the_generator_issued_passes() {
        let (mut s, first) = issued_at(5_000);
        let mut ids = vec![first];
        // Bursts, borrowing ahead, a clock that goes back within the drift.
        for now in [5_000, 5_000, 5_001, 4_000, 4_000, 9_000, 9_000] {
            for _ in 0..5000 {
                match s.next(now, own(), DRIFT) {
                    Ok(Step::Issued(id)) => ids.push(id),
                    Ok(_) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        for id in ids {
            assert_eq!(judge(id, own(), &s, 0, DRIFT), Ok(()), "{id}");
        }
    }

    #[test]
    fn an_own_id_above_the_last_is_refused_and_the_last_itself_passes() {
        let (s, id) = issued_at(5_000);
        assert_eq!(judge(id, own(), &s, 5_000, DRIFT), Ok(()));
        assert_eq!(
            judge(id + 1, own(), &s, 5_000, DRIFT),
            Err(Danger::AboveOwn { last_id: Some(id) })
        );
        // The case: 4 s ahead of the clock, well within the drift, on this pair.
        let later = assemble(9_000, own(), 0);
        assert_eq!(
            judge(later, own(), &s, 5_000, DRIFT),
            Err(Danger::AboveOwn { last_id: Some(id) })
        );
        // Below the last: the generator never comes back to it, however old.
        assert_eq!(
            judge(assemble(1, own(), 7), own(), &s, 5_000, DRIFT),
            Ok(())
        );
    }

    #[test]
    fn a_floor_makes_its_whole_millisecond_pass() {
        let (mut s, _) = issued_at(5_000);
        let target = assemble(8_000, own(), 4000);
        assert!(judge(target, own(), &s, 5_000, DRIFT).is_err());
        s.ensure_above(target, 5_000, DRIFT).unwrap();
        assert_eq!(judge(target, own(), &s, 5_000, DRIFT), Ok(()));
        assert_eq!(
            judge(
                assemble(8_000, own(), MAX_SEQUENCE),
                own(),
                &s,
                5_000,
                DRIFT
            ),
            Ok(())
        );
        assert!(judge(assemble(8_001, own(), 0), own(), &s, 5_000, DRIFT).is_err());
    }

    #[test]
    fn before_the_first_lease_no_own_id_passes() {
        let s = State::awaiting_lease();
        assert_eq!(
            judge(assemble(1, own(), 0), own(), &s, 5_000, DRIFT),
            Err(Danger::AboveOwn { last_id: None })
        );
        // Another pair's past IDs still pass.
        let other = Node::new(3, 4).unwrap();
        assert_eq!(
            judge(assemble(1, other, 0), own(), &s, 5_000, DRIFT),
            Ok(())
        );
    }

    #[test]
    fn another_pairs_id_is_refused_only_beyond_the_drift() {
        let (s, _) = issued_at(5_000);
        let other = Node::new(1, 3).unwrap();
        let other_dc = Node::new(2, 2).unwrap();
        for node in [other, other_dc] {
            assert_eq!(
                judge(assemble(5_000 + DRIFT, node, 4095), own(), &s, 5_000, DRIFT),
                Ok(())
            );
            assert_eq!(
                judge(assemble(5_001 + DRIFT, node, 0), own(), &s, 5_000, DRIFT),
                Err(Danger::AheadOfClock {
                    ahead_ms: DRIFT + 1
                })
            );
            assert_eq!(judge(assemble(0, node, 0), own(), &s, 5_000, DRIFT), Ok(()));
        }
        // A clock before the epoch: everything of another pair is ahead of it.
        assert_eq!(
            judge(assemble(0, other, 0), own(), &s, -20_000, DRIFT),
            Err(Danger::AheadOfClock { ahead_ms: 20_000 })
        );
    }

    #[test]
    fn negative_values_pass() {
        let s = State::awaiting_lease();
        assert_eq!(judge(-1, own(), &s, 0, DRIFT), Ok(()));
        assert_eq!(judge(i64::MIN, own(), &s, 0, DRIFT), Ok(()));
    }

    #[test]
    fn always_passes_only_the_id_returned_last() {
        let (mut s, first) = issued_at(5_000);
        assert_eq!(judge_always(first, Some(first)), Ok(()));
        let second = match s.next(5_000, own(), DRIFT).unwrap() {
            Step::Issued(id) => id,
            other => panic!("{other:?}"),
        };
        // An earlier ID of the generator, safe as it is, is explicit now; so is one just above.
        for id in [first, second + 1, second - 1, -1, 0] {
            assert_eq!(
                judge_always(id, Some(second)),
                Err(NotJustIssued {
                    last_returned: Some(second)
                }),
                "{id}"
            );
        }
        assert_eq!(judge_always(second, Some(second)), Ok(()));
        // A session that drew no ID passes nothing.
        assert_eq!(
            judge_always(first, None),
            Err(NotJustIssued {
                last_returned: None
            })
        );
    }
}
