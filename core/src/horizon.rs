//! The read horizon: the largest ID `H` such that no transaction of this server that is still in
//! progress holds, or can still obtain, an ID at or below `H`.
//!
//! A reader that polls `WHERE id > last_seen AND id <= H` and then advances `last_seen` to the
//! largest ID it got never misses a row, however the writers' transactions commit: every row at
//! or below `H` that will ever commit has committed already.
//!
//! # Invariant
//!
//! How it is kept exact (the glue's horizon module holds the pieces; this module decides):
//! - every ID is issued under the generator's lock, and future IDs are all greater than the
//!   generator's position ([`crate::generator::State::position`]: its last ID, or the end of
//!   its floor's millisecond);
//! - in the same critical section that issues an ID, the ID is recorded in the *holding slot* of
//!   the transaction it was issued to, if the slot is empty (IDs increase, so the first one is the
//!   transaction's smallest). A parallel worker records into its leader's slot: its IDs belong to
//!   the leader's transaction;
//! - a slot is emptied only after its transaction has ended and is visible to every new snapshot
//!   (PostgreSQL calls the end-of-transaction callback after `ProcArrayEndTransaction`);
//! - a prepared transaction moves its smallest ID into the *prepared table* before it stops being
//!   the backend's (PRE_PREPARE), keyed by its transaction ID; an entry is dropped only once that
//!   transaction ID is no longer in progress (COMMIT or ROLLBACK PREPARED has finished);
//! - after a restart the prepared table is empty, but transactions prepared before it may hold IDs
//!   we know nothing about: each is entered with `UNKNOWN` (below every ID) until it ends.
//!
//! - an idle generator's position would stay at its last ID, holding back readers that combine
//!   the horizons of several servers: so reading the horizon first commits the generator to the
//!   clock, as if it had issued an ID at the previous millisecond (`advance`), within the lease
//!   (which survives a restart; the generator restarts above it). A clock that then steps back
//!   is handled as after any issued ID.
//!
//! So H = min(position, (smallest held ID) − 1), read under the generator's lock.

use super::layout::{assemble, Node, MAX_TIMESTAMP};

/// An empty holding slot: above every ID, so that a plain `min` ignores it.
pub const EMPTY: i64 = i64::MAX;
/// What a prepared transaction from before a restart holds: possibly any ID.
pub const UNKNOWN: i64 = 0;

/// The generator's position: every ID it issues from now on is greater. `last_ms` and
/// `last_seq` are the state's (the last ID issued, or the floor it starts above, where
/// `MAX_SEQUENCE` means that nothing is left in `last_ms`: the next ID is in a later millisecond).
pub fn position(last_ms: u64, last_seq: u32, node: Node) -> i64 {
    assemble(last_ms.min(MAX_TIMESTAMP), node, last_seq)
}

/// How far reading the horizon at clock `now_ms` (ms since the epoch) raises the floor of a
/// generator at `last_ms` with lease `lease_ms`: to the previous millisecond, so that every ID
/// from then on carries `now_ms` or later, but never past the lease. Returns (the floor to raise
/// to, if it rises; whether the lease is short of the clock and should be renewed).
pub fn advance(now_ms: i64, last_ms: u64, lease_ms: u64) -> (Option<u64>, bool) {
    // `now_ms <= 1` would do the same (a mutant no test can tell apart, excluded by name in
    // .cargo/mutants.toml): at clock 1 the target is millisecond 0, which raises no floor (`to >
    // last_ms` is false for any `last_ms`) and is short of no lease (`0 > lease_ms` neither).
    if now_ms < 1 {
        return (None, false);
    }
    let target = (now_ms - 1) as u64;
    let to = target.min(lease_ms);
    ((to > last_ms).then_some(to), target > lease_ms)
}

impl crate::generator::State {
    /// This state's position: the last ID it issued, or the end of its floor's millisecond.
    pub fn position(&self, node: Node) -> i64 {
        position(self.last_ms, self.last_seq, node)
    }

    /// Commits an idle generator to the clock (`advance`): raises its floor, and asks for a
    /// lease when the lease is short of the clock. Returns whether it was short.
    pub fn advance_idle(&mut self, now_ms: i64) -> bool {
        let (to, short) = advance(now_ms, self.last_ms, self.lease_ms);
        if let Some(to) = to {
            self.raise_floor(to);
        }
        if short {
            self.want_lease();
        }
        short
    }
}

/// The horizon, from the generator's position and the smallest ID of every holding slot and
/// prepared entry (empty ones are `EMPTY`). It can be -1 (nothing is settled yet).
pub fn horizon(position: i64, held: impl IntoIterator<Item = i64>) -> i64 {
    let smallest = held.into_iter().min().unwrap_or(EMPTY);
    position.min(smallest.saturating_sub(1))
}

/// Records `id` as held by a transaction whose slot holds `slot`: the slot keeps the smallest.
#[inline(always)]
pub fn hold(slot: i64, id: i64) -> i64 {
    slot.min(id)
}

#[cfg(loom)]
use loom::sync::atomic::{AtomicI64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicI64, Ordering};

/// A holding slot, as it lives in shared memory (one per backend; a parallel worker uses its
/// leader's). Its protocol, model-checked with `loom` over every interleaving of backends and a
/// reader (`tests` below, `make loom`):
///
/// - `hold` runs under the generator's exclusive lock, in the critical section that issued the
///   ID, so a reader under the lock sees the ID either in the slot or not yet issued (above the
///   position);
/// - `clear` runs once the transaction's end is visible to every new snapshot, with no lock: its
///   `Release` pairs with `held`'s `Acquire`, so a reader that finds the slot empty also sees
///   that end;
/// - `held` is read under the generator's shared lock, with the position.
#[repr(transparent)]
#[derive(Debug)]
pub struct Slot(AtomicI64);

impl Slot {
    /// An empty slot.
    pub fn empty() -> Slot {
        Slot(AtomicI64::new(EMPTY))
    }

    /// Under the generator's exclusive lock, right after `id` was issued to this slot's
    /// transaction: the slot keeps the smallest.
    #[inline(always)]
    pub fn hold(&self, id: i64) {
        let held = self.0.load(Ordering::Relaxed);
        let keep = hold(held, id);
        if keep != held {
            self.0.store(keep, Ordering::Relaxed);
        }
    }

    /// What the slot holds, for its own backend (no ordering needed: only it writes the slot).
    pub fn own(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// At the end of its transaction, once the end is visible to every new snapshot.
    pub fn clear(&self) {
        self.0.store(EMPTY, Ordering::Release);
    }

    /// What the slot holds, for a reader of the horizon (under the generator's shared lock).
    pub fn held(&self) -> i64 {
        self.0.load(Ordering::Acquire)
    }
}

/// An entry of the prepared table: a prepared transaction's XID (0: a free entry) and the
/// smallest ID it holds (`UNKNOWN` when it was prepared before the last restart). The glue keeps
/// the table in shared memory, `max_prepared_transactions` entries (as many as PostgreSQL lets be
/// prepared at once), and reads and writes it only under the generator's lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Prepared {
    pub xid: u32,
    pub min_id: i64,
}

/// At PRE_PREPARE, before the transaction stops being its backend's: enters `xid` holding
/// `min_id` (its slot's value) in a free entry. False when every entry is taken: purge the ended
/// ones and try again, and if it is still full the PREPARE must fail rather than hold no entry.
pub fn enter(table: &mut [Prepared], xid: u32, min_id: i64) -> bool {
    match table.iter_mut().find(|e| e.xid == 0) {
        Some(free) => {
            *free = Prepared { xid, min_id };
            true
        }
        None => false,
    }
}

/// Frees the entries of the transactions in `ended`: committed or rolled back, and visible.
/// Ending is final, so the caller may decide which ended outside the lock.
pub fn purge(table: &mut [Prepared], ended: &[u32]) {
    for e in table.iter_mut() {
        if e.xid != 0 && ended.contains(&e.xid) {
            *e = Prepared::default();
        }
    }
}

/// After a restart the table is empty, but transactions prepared before it survive and may hold
/// IDs: enters every one in `prepared` (what `pg_prepared_xacts` lists) that the table does not
/// know as holding `UNKNOWN`. False if one did not fit: the scan must run again, and until one
/// has succeeded the horizon is below every ID (`read`'s `scanned`).
pub fn enter_survivors(table: &mut [Prepared], prepared: &[u32]) -> bool {
    for &xid in prepared {
        if !table.iter().any(|e| e.xid == xid) && !enter(table, xid, UNKNOWN) {
            return false;
        }
    }
    true
}

/// The horizon, read under the generator's lock: from its position, what the holding slots hold
/// and the prepared table. `scanned`: whether `enter_survivors` has succeeded since the last
/// restart; until then nothing is known to have ended, and the horizon is below every ID.
pub fn read(
    position: i64,
    scanned: bool,
    slots: impl IntoIterator<Item = i64>,
    table: &[Prepared],
) -> i64 {
    if !scanned {
        return horizon(position, [UNKNOWN]);
    }
    let prepared = table.iter().filter(|e| e.xid != 0).map(|e| e.min_id);
    horizon(position, slots.into_iter().chain(prepared))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::generator::{State, Step};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_horizon_is_the_position_when_nothing_is_held() {
        let node = Node::new(1, 2).unwrap();
        let p = position(1000, 7, node);
        assert_eq!(horizon(p, [EMPTY, EMPTY]), p);
        assert_eq!(horizon(p, []), p);
        assert_eq!(horizon(p, [p]), p - 1);
        assert_eq!(horizon(p, [UNKNOWN]), -1);
        assert_eq!(hold(EMPTY, 5), 5);
        assert_eq!(hold(5, 9), 5);
    }

    /// The slot's own protocol, one thread (its interleavings are `make loom`'s).
    #[test]
    fn a_slot_keeps_the_smallest_id_until_cleared() {
        let slot = Slot::empty();
        assert_eq!((slot.own(), slot.held()), (EMPTY, EMPTY));
        slot.hold(500);
        slot.hold(700);
        assert_eq!((slot.own(), slot.held()), (500, 500));
        slot.hold(300);
        assert_eq!(slot.held(), 300);
        slot.clear();
        assert_eq!((slot.own(), slot.held()), (EMPTY, EMPTY));
    }

    #[test]
    fn prepared_transactions_hold_the_horizon_across_a_restart() {
        let node = Node::new(1, 2).unwrap();
        let p = position(1000, 7, node);
        let mut table = [Prepared::default(); 2];
        // Before the restart: a transaction prepared holding 500, another holding 300.
        assert!(enter(&mut table, 10, 500));
        assert!(enter(&mut table, 11, 300));
        assert!(!enter(&mut table, 12, 200), "a full table takes no more");
        assert_eq!(read(p, true, [EMPTY, 400], &table), 299);
        purge(&mut table, &[11, 99]);
        assert_eq!(read(p, true, [EMPTY], &table), 499);
        assert!(enter(&mut table, 12, 200), "a purged entry is free again");
        // After a restart the table is empty and nothing is known until the scan has run.
        let mut table = [Prepared::default(); 2];
        assert_eq!(read(p, false, [EMPTY], &table), -1);
        assert!(enter_survivors(&mut table, &[10, 12]));
        assert_eq!(
            read(p, true, [EMPTY], &table),
            -1,
            "a survivor's IDs are unknown"
        );
        assert!(
            enter_survivors(&mut table, &[10, 12]),
            "a second scan enters nothing twice"
        );
        purge(&mut table, &[10]);
        assert_eq!(read(p, true, [], &table), -1);
        purge(&mut table, &[12]);
        assert_eq!(read(p, true, [], &table), p);
        // A survivor that does not fit fails the scan.
        let mut table = [Prepared::default(); 1];
        assert!(!enter_survivors(&mut table, &[10, 12]));
    }

    #[test]
    fn reading_the_horizon_moves_an_idle_generator_to_the_clock_within_the_lease() {
        assert_eq!(advance(1000, 500, u64::MAX), (Some(999), false));
        assert_eq!(advance(1000, 999, u64::MAX), (None, false));
        assert_eq!(advance(1000, 2000, u64::MAX), (None, false), "never lowers");
        assert_eq!(
            advance(1000, 500, 700),
            (Some(700), true),
            "not past the lease"
        );
        assert_eq!(advance(1000, 700, 700), (None, true));
        assert_eq!(
            advance(1000, 999, 999),
            (None, false),
            "a lease at the target suffices"
        );
        assert_eq!(advance(0, 0, 0), (None, false), "a clock before the epoch");
        // The state's own: raised, and a lease asked for when the lease is short.
        let mut s = State::awaiting_lease();
        s.grant_lease(700);
        assert!(s.advance_idle(1000));
        assert_eq!(s.last_ms(), 700);
        assert!(s.lease_wanted());
        s.grant_lease(5000);
        assert!(!s.advance_idle(1000));
        // Afterwards every ID is above the position, even with the clock stepped back.
        let node = Node::new(0, 0).unwrap();
        let mut s = State::new();
        let (to, _) = advance(5000, s.last_ms, s.lease_ms);
        s.raise_floor(to.unwrap());
        let p = s.position(node);
        assert_eq!(p, position(4999, crate::layout::MAX_SEQUENCE, node));
        for now in [5000, 4000, 4999, 5000, 5001] {
            if let Ok(Step::Issued(id)) = s.next(now, node, 10_000) {
                assert!(id > p);
            }
        }
    }

    #[test]
    fn every_future_id_is_above_the_position() {
        let node = Node::new(3, 7).unwrap();
        let mut s = State::new();
        s.raise_floor(500);
        let mut p = position(s.last_ms, s.last_seq, node);
        for now in [400, 501, 501, 501, 502, 900, 900] {
            if let Ok(Step::Issued(id)) = s.next(now, node, 10_000) {
                assert!(id > p, "{id} after position {p}");
                p = position(s.last_ms, s.last_seq, node);
                assert_eq!(p, id, "after an ID the position is that ID");
            }
        }
    }

    /// One operation of the model: which transaction (or the reader) acts.
    #[derive(Clone, Debug)]
    enum Op {
        Begin,
        Take(usize),
        TakeInWorker(usize),
        Commit(usize),
        Abort(usize),
        Prepare(usize),
        FinishPrepared(usize, bool),
        Poll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => Just(Op::Begin),
            6 => (0..8usize).prop_map(Op::Take),
            2 => (0..8usize).prop_map(Op::TakeInWorker),
            3 => (0..8usize).prop_map(Op::Commit),
            1 => (0..8usize).prop_map(Op::Abort),
            1 => (0..8usize).prop_map(Op::Prepare),
            1 => (0..8usize, any::<bool>()).prop_map(|(i, c)| Op::FinishPrepared(i, c)),
            3 => Just(Op::Poll),
        ]
    }

    #[derive(Default)]
    struct Xact {
        ids: Vec<i64>,
        slot: Option<usize>,
        prepared: bool,
    }

    /// A server: a generator, holding slots, a prepared table, transactions that commit in any
    /// order, and two readers, one that stops at the horizon and one that trusts `max(id)`.
    /// Returns (rows committed, rows the horizon reader saw, rows the naive reader saw).
    fn run(ops: &[Op]) -> (BTreeSet<i64>, BTreeSet<i64>, BTreeSet<i64>) {
        let node = Node::new(0, 1).unwrap();
        let mut gen = State::new();
        let mut now = 10i64;
        let mut slots = [EMPTY; 4];
        let mut prepared: Vec<(usize, i64)> = Vec::new();
        let mut xacts: Vec<Xact> = Vec::new();
        let mut committed = BTreeSet::new();
        let (mut seen_h, mut seen_n) = (BTreeSet::new(), BTreeSet::new());
        let (mut last_h, mut last_n) = (-1i64, -1i64);
        let live = |xacts: &Vec<Xact>, i: usize| {
            let n = xacts.len();
            (n > 0).then(|| i % n).filter(|&k| xacts[k].slot.is_some())
        };
        let poll = |committed: &BTreeSet<i64>,
                    h: i64,
                    last_h: &mut i64,
                    last_n: &mut i64,
                    seen_h: &mut BTreeSet<i64>,
                    seen_n: &mut BTreeSet<i64>| {
            if h > *last_h {
                for &id in committed.range(*last_h + 1..=h) {
                    seen_h.insert(id);
                    *last_h = id;
                }
            }
            for &id in committed.range(*last_n + 1..) {
                seen_n.insert(id);
                *last_n = id;
            }
        };
        for op in ops {
            now += 1;
            match *op {
                Op::Begin => {
                    if let Some(free) = (0..slots.len())
                        .find(|s| !xacts.iter().any(|x| x.slot == Some(*s) && !x.prepared))
                    {
                        xacts.push(Xact {
                            slot: Some(free),
                            ..Default::default()
                        });
                    }
                }
                Op::Take(i) | Op::TakeInWorker(i) => {
                    if let Some(k) = live(&xacts, i).filter(|&k| !xacts[k].prepared) {
                        if let Ok(Step::Issued(id)) = gen.next(now / 3, node, 10_000) {
                            let s = xacts[k].slot.unwrap();
                            slots[s] = hold(slots[s], id);
                            xacts[k].ids.push(id);
                        }
                    }
                }
                Op::Commit(i) | Op::Abort(i) => {
                    if let Some(k) = live(&xacts, i).filter(|&k| !xacts[k].prepared) {
                        if matches!(op, Op::Commit(_)) {
                            committed.extend(xacts[k].ids.iter().copied());
                        }
                        slots[xacts[k].slot.unwrap()] = EMPTY;
                        xacts.remove(k);
                    }
                }
                Op::Prepare(i) => {
                    if let Some(k) = live(&xacts, i).filter(|&k| !xacts[k].prepared) {
                        let s = xacts[k].slot.unwrap();
                        if slots[s] != EMPTY {
                            prepared.push((k, slots[s]));
                        }
                        slots[s] = EMPTY;
                        xacts[k].prepared = true;
                    }
                }
                Op::FinishPrepared(i, commit) => {
                    if let Some(k) = live(&xacts, i).filter(|&k| xacts[k].prepared) {
                        if commit {
                            committed.extend(xacts[k].ids.iter().copied());
                        }
                        let gone = xacts[k].ids.first().copied();
                        prepared.retain(|&(_, min)| Some(min) != gone);
                        xacts.remove(k);
                    }
                }
                Op::Poll => {
                    if let (Some(to), _) = advance(now / 3, gen.last_ms, gen.lease_ms) {
                        gen.raise_floor(to);
                    }
                    let p = position(gen.last_ms, gen.last_seq, node);
                    let h = horizon(p, slots.iter().copied().chain(prepared.iter().map(|e| e.1)));
                    poll(
                        &committed,
                        h,
                        &mut last_h,
                        &mut last_n,
                        &mut seen_h,
                        &mut seen_n,
                    );
                }
            }
        }
        // Everything ends; one last poll each.
        for x in xacts.drain(..) {
            committed.extend(x.ids);
        }
        let h = position(gen.last_ms, gen.last_seq, node);
        poll(
            &committed,
            h,
            &mut last_h,
            &mut last_n,
            &mut seen_h,
            &mut seen_n,
        );
        (committed, seen_h, seen_n)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
        #[test]
        fn a_reader_that_stops_at_the_horizon_never_misses_a_row(ops in proptest::collection::vec(op(), 1..300)) {
            let (committed, seen, _) = run(&ops);
            prop_assert_eq!(committed, seen);
        }
    }

    #[test]
    fn a_reader_that_trusts_the_largest_id_misses_rows() {
        // Two transactions take IDs; the later one commits first and the reader polls between.
        use Op::*;
        let ops = [
            Begin,
            Begin,
            Take(0),
            Take(1),
            Commit(1),
            Poll,
            Commit(0),
            Poll,
        ];
        let (committed, seen_h, seen_n) = run(&ops);
        assert_eq!(committed, seen_h);
        assert_eq!(committed.len(), 2);
        assert_eq!(seen_n.len(), 1, "the naive reader skipped the earlier ID");
    }
}

/// The slots' protocol over every interleaving (`make loom`, which builds with `--cfg loom`):
/// backends issue IDs under a lock standing for the generator's LWLock and hold them in their
/// slots, a transaction ends (visible) and clears its slot with no lock, a prepared one moves its
/// ID into the prepared table first; a reader takes the position and the slots under the shared
/// lock. No horizon is ever at or above an ID whose transaction has not ended.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::{Arc, RwLock};

    const IDS: usize = 8;

    struct World {
        /// The generator's lock and what it guards: the last ID issued, the prepared table.
        generator: RwLock<(i64, Vec<i64>)>,
        slots: Vec<Slot>,
        ended: Vec<AtomicBool>,
    }

    impl World {
        fn new(backends: usize) -> Arc<World> {
            Arc::new(World {
                generator: RwLock::new((0, Vec::new())),
                slots: (0..backends).map(|_| Slot::empty()).collect(),
                ended: (0..IDS).map(|_| AtomicBool::new(false)).collect(),
            })
        }

        /// `n` IDs issued to backend `b`'s transaction, each in its own critical section.
        fn issue(&self, b: usize, n: usize) -> Vec<i64> {
            (0..n)
                .map(|_| {
                    let mut g = self.generator.write().unwrap();
                    g.0 += 1;
                    self.slots[b].hold(g.0);
                    g.0
                })
                .collect()
        }

        /// The transaction ends (visible to new snapshots), then its slot is cleared.
        fn end(&self, b: usize, ids: &[i64]) {
            for &id in ids {
                self.ended[id as usize].store(true, Ordering::Relaxed);
            }
            self.slots[b].clear();
        }

        /// PREPARE: the smallest ID moves to the prepared table under the lock, then the slot is
        /// cleared; COMMIT PREPARED ends it; the entry is dropped once it has ended.
        fn prepare_then_commit(&self, b: usize, ids: &[i64]) {
            {
                let mut g = self.generator.write().unwrap();
                let min = self.slots[b].own();
                g.1.push(min);
            }
            self.slots[b].clear();
            for &id in ids {
                self.ended[id as usize].store(true, Ordering::Relaxed);
            }
            let mut g = self.generator.write().unwrap();
            let min = ids[0];
            g.1.retain(|&e| e != min);
        }

        /// `snowflake_horizon()`: every ID at or below what it returns has ended.
        fn read(&self) {
            let h = {
                let g = self.generator.read().unwrap();
                let held = self.slots.iter().map(Slot::held).chain(g.1.iter().copied());
                horizon(g.0, held)
            };
            for id in 1..=h.max(0) {
                assert!(
                    self.ended[id as usize].load(Ordering::Acquire),
                    "horizon {h} passes ID {id}, whose transaction has not ended"
                );
            }
        }
    }

    #[test]
    fn two_backends_and_a_reader() {
        loom::model(|| {
            let w = World::new(2);
            let handles: Vec<_> = (0..2)
                .map(|b| {
                    let w = w.clone();
                    loom::thread::spawn(move || {
                        let ids = w.issue(b, 2);
                        w.end(b, &ids);
                    })
                })
                .collect();
            w.read();
            for h in handles {
                h.join().unwrap();
            }
            w.read();
        });
    }

    #[test]
    fn a_prepared_transaction_a_backend_and_a_reader() {
        loom::model(|| {
            let w = World::new(2);
            let w1 = w.clone();
            let prepared = loom::thread::spawn(move || {
                let ids = w1.issue(0, 1);
                w1.prepare_then_commit(0, &ids);
            });
            let w2 = w.clone();
            let plain = loom::thread::spawn(move || {
                let ids = w2.issue(1, 1);
                w2.end(1, &ids);
            });
            w.read();
            prepared.join().unwrap();
            plain.join().unwrap();
        });
    }

    #[test]
    fn three_backends_and_a_reader() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let w = World::new(3);
            let handles: Vec<_> = (0..3)
                .map(|b| {
                    let w = w.clone();
                    loom::thread::spawn(move || {
                        let ids = w.issue(b, 1);
                        w.end(b, &ids);
                    })
                })
                .collect();
            w.read();
            for h in handles {
                h.join().unwrap();
            }
        });
    }
}
