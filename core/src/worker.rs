//! The lease worker's protocol, as a state machine that does no I/O (as `quinn-proto` keeps QUIC
//! apart from its runtime): the order of its steps is decided here, where the simulator (`sim/`)
//! drives the very same machine against a simulated world.
//!
//! The glue (the extension's `lease` and `fleet` modules) runs a loop: it asks [`Worker::poll`]
//! what to do, performs it (a transaction with its SQL, a log line, a nap on its latch), and feeds
//! what it read back to the method that [`Todo`] names. Each method changes the generator's
//! [`State`] only through its named transitions, with the caller holding the generator's lock for
//! the call (which does no I/O).
//!
//! # Invariant
//!
//! The order that keeps the other modules' rules:
//!
//! 1. **At start** ([`Worker::start`]), before any lease: the floor is the persisted mark
//!    ([`crate::lease::restored_floor`]) and the last lease recorded in this server's own claim,
//!    whichever is higher (a restore may have lowered the mark, not the claim).
//! 2. **No lease at a server's start before the claims are fresh** ([`crate::fleet::CatchUp`]): a
//!    start with no lease yet is *gated* until every claims path has caught up (applied as far
//!    as its publisher's end of WAL, asked after the start), or no path waited for moved towards
//!    it for `CATCH_UP_LIMIT_MS`; the refresh right after reads the claims before any lease.
//! 3. **Every look at the mark follows a value someone else wrote**
//!    ([`crate::lease::outside_mark`]), in the transaction that read it, and writes back one that
//!    was lowered, in that same transaction.
//! 4. **A lease is written above everything known**: in one transaction the hand-over floor of
//!    the pair ([`crate::fleet::handover_floor`]) and the mark are read and followed first, and the
//!    mark is written as the greatest of the lease, the worker's own value and what is there.
//!    A value the write finds that is not the one the look read was set by someone else in
//!    between (a sequence is not transactional): it is followed as a floor too, before the grant.
//! 5. **A lease is granted only once its transaction has committed** (flushed, and received by the
//!    synchronous standbys where the commit waits for them): [`Worker::renew_committed`] grants
//!    it, or holds it for the next refresh (rule 7). A commit that returned without the standbys'
//!    confirmation (its wait was cancelled: PostgreSQL says it committed locally and may not have
//!    been replicated) grants nothing until they have confirmed it ([`Worker::replicated`]): a
//!    failover to such a standby would continue below the lease.
//! 6. **The fleet check's cycle** ([`Worker::claim_row`], then [`Worker::refreshed`]): the claim
//!    written carries the highest ID that may have been issued and the pairs left (those this
//!    worker knows merged in: a restored older row must not erase one); then the claims and
//!    paths read in the same transaction decide, by this server's monotonic clock, a copy, a
//!    conflict or neither, which sets or clears the refusal, and the hand-over floor they carry
//!    is followed at once (a refusal that ends must not resume below the IDs of the server that
//!    left the pair).
//! 7. **No lease is granted on a claim a peer may have taken for gone.** A peer expires a claim it
//!    has watched unchanged for `claim_expiry`; a renewal whose commit waited that long (a
//!    synchronous standby unreachable) left this server's claim unwritten as long, and a peer on
//!    its pair may be issuing by now. Such a lease is held until the refresh after it has looked
//!    at the claims, and granted only if they show no conflict.
//! 8. **A pair taken over continues above the furthest its holder could have reached**
//!    ([`crate::fleet::reach_ms`]). The holder's claim as seen here may lag what it did: its
//!    claims path stalled while it renewed at full rate, or its floor was raised (a renewal
//!    moves the lease by the whole raise), and then it was lost. So when a refresh finds no
//!    conflict and a claim of another server holds this server's pair (its row, or its lease)
//!    in a version not taken over yet in this life of the worker (one that expired, one
//!    retired), the floor goes to this server's clock plus its `max_clock_drift`, before any
//!    ID: no server issues further ahead of its clock than that. It holds with clocks in sync
//!    and one `max_clock_drift` across the fleet.
//! 9. **A lease is used only while the synchronous standbys of now have it**
//!    ([`Worker::standbys_changed`]). When the set of synchronous standbys changes, the lease
//!    granted beyond what was issued is taken back, and a lease held or awaiting the former
//!    standbys is dropped: the next ID waits for a renewal whose commit the new set confirmed
//!    (and with it, in WAL order, every lease before it). So once an ID was issued after the
//!    switch, a failover to the new standby continues above every ID issued.

use crate::fleet::{
    conflict, handover_floor, holders_of_our_pair, left_pairs_after, merge_left_pairs, reach_ms,
    CatchUp, Claim, CopyWatch, LeftPair, Liveness, PathEvent, PathReading, PathWatch, REFRESH_MS,
};
use crate::generator::State;
use crate::layout::{assemble, decompose, Node, MAX_SEQUENCE, MAX_TIMESTAMP};
use crate::lease::{forward_jump, lease_length_ms, restored_floor, OutsideMark};

/// How often, at most, the gate at start reads the paths (waiting backends wake the worker more
/// often than that).
pub const GATE_LOOK_MS: u64 = 250;

/// How soon after a refresh, at the earliest, the worker looks at the claims again for a call
/// that was refused because of one (`State::ask_look`): a DBA's retire is then seen within
/// about this long, and calls refused while a conflict lasts make the worker write its claim at
/// most this often.
pub const LOOK_AGAIN_MS: u64 = 250;

/// What the worker reads at its start, in the transaction that makes what is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtStart {
    /// The persisted mark, Unix ms (0: never written).
    pub mark_unix_ms: i64,
    /// The epoch it was written under (`None`: not recorded).
    pub recorded_epoch_ms: Option<i64>,
    /// This server's own claim, if any: the last lease it recorded there (`lease_id`) and its
    /// pair then.
    pub own_claim: Option<Claim>,
    /// The pairs its own claim says it left (`left_pairs`).
    pub left_pairs: Vec<i64>,
}

/// The mark was below the last lease this server recorded in its claim: someone lowered it (a
/// restore). IDs go above the claim's lease, and the worker writes that value back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkBelowClaim {
    pub mark_unix_ms: i64,
    pub claimed_ms: u64,
}

/// The settings a step reads, as they are at that step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub system_identifier: i64,
    pub node: Node,
    pub max_drift_ms: u64,
    pub claim_expiry_ms: u64,
}

/// What the worker does next (`Worker::poll`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Todo {
    /// Read the claims paths and give them to `paths_read` (only while gated at start).
    ReadPaths,
    /// Look at the mark (`mark_read`), then refresh the claim (`claim_row`, `refreshed`).
    Refresh,
    /// The wall clock jumped forward by this many ms since the last look: record it
    /// (`State::record_forward_jump`) and say so.
    ForwardJump(u64),
    /// The generator saw the wall clock go back `steps` times since the worker last said so
    /// (`Stats::clock_back_events`), the latest by at least `ms` (`Stats::latest_clock_back_ms`):
    /// say so. Once per episode, and at most once every [`CLOCK_BACK_TELL_MS`] (the steps between
    /// are counted in the next).
    ClockBack { steps: u64, ms: u64 },
    /// Renew the lease (`renew_read`, then `renew_committed` once committed).
    Renew,
    /// Nothing more for now: sleep this long, or until a backend wakes the worker.
    Nap(u64),
}

/// The shortest time between two `Todo::ClockBack`: a clock that keeps stepping back (a broken
/// time source, two NTP servers that disagree) is said once a minute, with its count, not at each
/// step.
pub const CLOCK_BACK_TELL_MS: u64 = 60_000;

/// Where the worker is in its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Gate,
    Refresh,
    Clock,
    Renew,
    Nap,
}

/// What the gate at start has to say (`paths_read`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GateEnd {
    /// Every path waited for caught up: the refresh that follows reads fresh claims. `unproven`
    /// names the paths not waited for (disabled, or their copy not ready, at the start): to be
    /// said as a WARNING when there are any.
    CaughtUp { unproven: Vec<String> },
    /// No path waited for (`waiting`) has moved towards its publisher's end for
    /// `CATCH_UP_LIMIT_MS`: the gate stays closed (no ID without the proof), and this is said
    /// once, until one moves again.
    Stalled { waiting: Vec<String> },
}

/// What a look at the mark found (`mark_read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkCheck {
    /// A value someone else wrote, now a floor.
    pub found: Option<OutsideMark>,
    /// The value to write back in the same transaction (the mark was lowered), with the epoch it
    /// was written under: a restore that lowered the mark may have put another epoch beside it,
    /// and the mark means nothing without its own.
    pub write_back: Option<(i64, i64)>,
}

/// The lease to write, in the transaction that read the floors (`renew_read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseWrite {
    /// The lease's timestamp field.
    pub lease_ms: u64,
    /// The mark to write: the greatest of `mark_unix_ms`, `own_unix_ms` and the mark's current
    /// value, under `epoch_ms`.
    pub mark_unix_ms: i64,
    /// The worker's own value of the mark, counted in `epoch_ms`'s milliseconds (it was written
    /// under the epoch recorded then, which an epoch moved, or a mark followed, makes another).
    pub own_unix_ms: i64,
    pub epoch_ms: i64,
    /// The mark as the look before the write read it, and the epoch recorded beside it.
    pub looked_unix_ms: i64,
    pub looked_epoch_ms: Option<i64>,
    /// The last ID of the lease, for this server's own claim (`lease_id` never goes down there).
    pub claim_lease_id: i64,
}

impl LeaseWrite {
    /// Whether the write, finding `found` in the mark (its value and the epoch beside it, `None`
    /// for none), leaves both as they are: the value found counts more milliseconds from its
    /// epoch than ours do from ours (a mark means nothing without its epoch: a dump of a server
    /// whose epoch is earlier brings a lower Unix time that stands for later IDs). Otherwise the
    /// write sets the greater of ours (`mark_unix_ms`, `own_unix_ms`) and `epoch_ms` beside it.
    pub fn keeps_found(&self, found: (i64, Option<i64>)) -> bool {
        let ours = self.mark_unix_ms.max(self.own_unix_ms);
        crate::lease::stands_above(found, self.epoch_ms, (ours, self.epoch_ms))
    }

    /// The mark the write leaves, finding `found` there (see `keeps_found`).
    pub fn written(&self, found: (i64, Option<i64>)) -> i64 {
        if self.keeps_found(found) {
            found.0
        } else {
            self.mark_unix_ms.max(self.own_unix_ms)
        }
    }
}

/// What `renew_read` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenewPlan {
    /// The mark as read, and what it held that the worker did not write.
    pub mark_unix_ms: i64,
    pub found: Option<OutsideMark>,
    /// The lease to write, if one is still needed.
    pub write: Option<LeaseWrite>,
}

/// What the refresh's transaction read, after writing this server's claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refreshed {
    /// This server's own row as it was before the write.
    pub own_before: Option<Claim>,
    /// The stamp of the row written.
    pub written: Claim,
    /// Every claim, ours included.
    pub claims: Vec<Claim>,
    /// The pairs the claims' servers left.
    pub left_pairs: Vec<LeftPair>,
    /// The claims paths.
    pub paths: Vec<PathReading>,
}

/// What a refresh concluded (`refreshed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetView {
    /// The paths' changes, to be said.
    pub events: Vec<PathEvent>,
    /// A physical copy's claim, the first time it is seen in a sighting, to be said.
    pub copy_announced: Option<Claim>,
    /// The conflict before this refresh and now (the refusal is set while it is `Some`).
    pub before: Option<Claim>,
    pub conflict: Option<Claim>,
    /// Whether the conflict is one only because claims may be stale here.
    pub claims_stale: bool,
    /// Whether claims may be stale here, conflict or not: a claims path is not applying, or
    /// relays (see [`crate::fleet::PathWatch::claims_may_be_stale`]).
    pub paths_stale: bool,
}

/// The lease worker's protocol: one per life of the worker. Times are the worker's monotonic
/// clock, in ms since it started; wall-clock readings are Unix ms.
#[derive(Clone, Debug)]
pub struct Worker {
    epoch_ms: i64,
    recorded_epoch_ms: i64,
    /// The mark as this worker last wrote or read it: any other value found later was written by
    /// someone else.
    own_mark: i64,
    gated: bool,
    gate_looked: Option<u64>,
    catch_up: CatchUp,
    /// Whether the gate's stall was said (`GateEnd::Stalled`) since a path last moved.
    stall_said: bool,
    claimed_at: Option<u64>,
    /// The looks asked (`State::looks_asked`) when the last refresh started: its end answers them.
    answering: u32,
    looked: Option<(i64, u64)>,
    /// The generator's clock-back episodes this worker has said (or found at its start), and when
    /// it last said one.
    backs_told: u64,
    back_told_at: Option<u64>,
    issued_at_renewal: u64,
    phase: Phase,
    conflict: Option<Claim>,
    paths: PathWatch,
    liveness: Liveness,
    copies: CopyWatch,
    /// The pairs this server left, as this worker last wrote them into its claim.
    left_pairs: Vec<i64>,
    /// The floor at start (the mark's and the claim's): at least the last ID on a pair left.
    start_floor_ms: u64,
    /// When this server's claim was last written (a refresh or a lease), by this worker.
    claim_written_at: Option<u64>,
    /// A lease committed while the claim was silent, granted once a refresh finds no conflict.
    held: Option<LeaseWrite>,
    /// A lease committed here but not yet confirmed by the synchronous standbys (rule 5), and
    /// whether the claim was silent at its commit: granted by [`Worker::replicated`].
    unreplicated: Option<(LeaseWrite, bool)>,
    /// The claims of other servers on this server's pair taken over in this life (rule 8), by
    /// system identifier and version.
    taken: Vec<(i64, i64)>,
    /// The synchronous standbys at the last look (rule 9); `None` before the first in this life.
    standbys: Option<Standbys>,
}

/// Who confirms a commit here (rule 9), as the lease worker reads it: its
/// `synchronous_standby_names`, and the walsenders the server counts as synchronous (`sync` or
/// `quorum` in `pg_stat_replication`) by process ID, so that a standby that reconnected is a new
/// one (it may have come back from older WAL).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Standbys {
    pub names: String,
    pub pids: Vec<i32>,
}

impl Worker {
    /// The worker starts (rule 1): raises the floor above the mark and the claim's last lease.
    /// A start with no lease (shared memory new: a server's start, a promotion) is gated (rule
    /// 2); a worker restarted while the server runs is not (IDs are already flowing).
    pub fn start(
        epoch_ms: i64,
        read: &AtStart,
        node: Node,
        state: &mut State,
    ) -> (Worker, Option<MarkBelowClaim>) {
        let floor = restored_floor(read.mark_unix_ms, read.recorded_epoch_ms, epoch_ms);
        let claimed_ms = read
            .own_claim
            .and_then(|c| decompose(c.lease_id).ok())
            .map_or(0, |p| p.ms);
        state.raise_floor(floor);
        state.raise_floor(claimed_ms);
        let recorded = read.recorded_epoch_ms.unwrap_or(epoch_ms);
        let mut own_mark = read.mark_unix_ms;
        let mut below = None;
        if claimed_ms > floor {
            // Taking the claim's value as ours makes the next look write it back.
            own_mark = recorded + claimed_ms as i64;
            below = Some(MarkBelowClaim {
                mark_unix_ms: read.mark_unix_ms,
                claimed_ms,
            });
        }
        let worker = Worker {
            epoch_ms,
            recorded_epoch_ms: recorded,
            own_mark,
            gated: state.lease() == Some(0),
            gate_looked: None,
            catch_up: CatchUp::default(),
            stall_said: false,
            claimed_at: None,
            answering: state.looks_asked(),
            looked: None,
            backs_told: state.stats().clock_back_events,
            back_told_at: None,
            issued_at_renewal: 0,
            phase: Phase::Gate,
            conflict: None,
            paths: PathWatch::default(),
            liveness: Liveness::default(),
            copies: CopyWatch::default(),
            // A move to another pair at this start is known from now on, whatever happens to the
            // row before the first refresh writes it (a restore).
            left_pairs: left_pairs_after(
                &read.left_pairs,
                read.own_claim.as_ref(),
                node,
                floor.max(claimed_ms),
            ),
            start_floor_ms: floor.max(claimed_ms),
            claim_written_at: None,
            held: None,
            unreplicated: None,
            taken: Vec::new(),
            standbys: None,
        };
        (worker, below)
    }

    /// Whether no lease is granted yet because the claims paths have not caught up (rule 2).
    pub fn gated(&self) -> bool {
        self.gated
    }

    /// The epoch the persisted mark was last written under (Unix ms).
    pub fn recorded_epoch_ms(&self) -> i64 {
        self.recorded_epoch_ms
    }

    /// The conflict as the last refresh found it.
    pub fn conflict(&self) -> Option<Claim> {
        self.conflict
    }

    /// The next thing to do, at monotonic `now_ms` and wall clock `wall_unix_ms`, with the
    /// generator's state as it is now. The loop: the gate's look at the paths (while gated), the
    /// refresh (every `REFRESH_MS`), the clock's look, a renewal when IDs want one, a nap.
    pub fn poll(&mut self, now_ms: u64, wall_unix_ms: i64, state: &State, drift: u64) -> Todo {
        loop {
            match self.phase {
                Phase::Gate => {
                    self.phase = Phase::Refresh;
                    let due = self
                        .gate_looked
                        .is_none_or(|t| now_ms.saturating_sub(t) >= GATE_LOOK_MS);
                    if self.gated && due {
                        self.gate_looked = Some(now_ms);
                        return Todo::ReadPaths;
                    }
                }
                Phase::Refresh => {
                    self.phase = Phase::Clock;
                    let since = |ms| {
                        self.claimed_at
                            .is_none_or(|t| now_ms.saturating_sub(t) >= ms)
                    };
                    // A refused call asked for a look at the claims (a DBA may have retired the
                    // claim it names): sooner than the refresh's period, not more often than
                    // LOOK_AGAIN_MS.
                    let asked = state.looks_asked() != self.answering;
                    if since(REFRESH_MS) || (asked && since(LOOK_AGAIN_MS)) {
                        self.claimed_at = Some(now_ms);
                        self.answering = state.looks_asked();
                        return Todo::Refresh;
                    }
                }
                Phase::Clock => {
                    self.phase = Phase::Renew;
                    let before = self.looked.replace((wall_unix_ms, now_ms));
                    if let Some((wall, mono)) = before {
                        let elapsed = now_ms.saturating_sub(mono) as i64;
                        if let Some(jump) = forward_jump(wall_unix_ms - wall, elapsed) {
                            return Todo::ForwardJump(jump);
                        }
                    }
                    let stats = state.stats();
                    let quiet = self
                        .back_told_at
                        .is_none_or(|t| now_ms.saturating_sub(t) >= CLOCK_BACK_TELL_MS);
                    if stats.clock_back_events > self.backs_told && quiet {
                        let steps = stats.clock_back_events - self.backs_told;
                        self.backs_told = stats.clock_back_events;
                        self.back_told_at = Some(now_ms);
                        return Todo::ClockBack {
                            steps,
                            ms: stats.latest_clock_back_ms,
                        };
                    }
                }
                Phase::Renew => {
                    self.phase = Phase::Nap;
                    let wanted =
                        state.lease_wanted() || state.stats().issued != self.issued_at_renewal;
                    let now = wall_unix_ms - self.epoch_ms;
                    if !self.gated && state.renewal(now, wanted, drift).is_some() {
                        return Todo::Renew;
                    }
                }
                Phase::Nap => {
                    self.phase = Phase::Gate;
                    let mut nap = lease_length_ms(drift) / 4;
                    // Until the look asked is allowed, not the whole nap.
                    if let (true, Some(t)) =
                        (state.looks_asked() != self.answering, self.claimed_at)
                    {
                        nap = nap.min((t + LOOK_AGAIN_MS).saturating_sub(now_ms));
                    }
                    return Todo::Nap(nap.max(5));
                }
            }
        }
    }

    /// The paths as read while gated, at monotonic `now_ms` (rule 2). Returns how the gate
    /// ended, if it did.
    pub fn paths_read(&mut self, now_ms: u64, readings: &[PathReading]) -> Option<GateEnd> {
        if !self.gated {
            return None;
        }
        let names = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
        if self.catch_up.observe(now_ms, readings) {
            // The claims are fresh now: the refresh next reads them before any lease.
            if !readings.is_empty() {
                self.claimed_at = None;
            }
            self.gated = false;
            Some(GateEnd::CaughtUp {
                unproven: names(self.catch_up.unproven()),
            })
        } else if self.catch_up.stalled(now_ms) {
            (!std::mem::replace(&mut self.stall_said, true)).then(|| GateEnd::Stalled {
                waiting: names(self.catch_up.waiting()),
            })
        } else {
            self.stall_said = false;
            None
        }
    }

    /// The mark as read between renewals (rule 3), in the transaction that writes back
    /// `write_back`, if any.
    pub fn mark_read(
        &mut self,
        mark_unix_ms: i64,
        recorded_epoch_ms: Option<i64>,
        state: &mut State,
    ) -> MarkCheck {
        let own = self.own_mark;
        let own_epoch = self.recorded_epoch_ms;
        let found = state.follow_outside_mark(
            mark_unix_ms,
            recorded_epoch_ms,
            self.epoch_ms,
            (own, own_epoch),
        );
        let write_back = match found {
            Some(f) if f.lowered => Some(own),
            // Raised: followed, and the worker's own from now on, with its epoch.
            Some(_) => {
                self.take_as_own(mark_unix_ms, recorded_epoch_ms);
                None
            }
            None => None,
        };
        MarkCheck {
            found,
            write_back: write_back.map(|m| (m, self.recorded_epoch_ms)),
        }
    }

    /// What to write into this server's own claim at a refresh (rule 6), from its row as it is
    /// (`own`) and the pairs that row says it left: the highest ID this server may have issued,
    /// and the pairs it left, the old pair joining them if it moved. The pairs are merged with
    /// those this worker read at its start and wrote since: a restore that put back an older
    /// row of ours (a dump that includes `_snowflake`) must not erase a floor the next holder of
    /// a pair needs.
    pub fn claim_row(
        &mut self,
        own: Option<&Claim>,
        own_left_pairs: &[i64],
        node: Node,
        state: &State,
    ) -> (i64, Vec<i64>) {
        let known = merge_left_pairs(own_left_pairs, &self.left_pairs);
        self.left_pairs = left_pairs_after(&known, own, node, self.start_floor_ms);
        (claim_lease_id(node, state), self.left_pairs.clone())
    }

    /// What the refresh's transaction read (rule 6), at monotonic `now_ms`: sets or clears the
    /// refusal.
    ///
    /// A copy's claim that a Citus node answered with (`copies`) counts as sighted at `now_ms`
    /// ([`CopyWatch::sighted`]) before the claims are judged.
    pub fn refreshed_with_copies(
        &mut self,
        now_ms: u64,
        read: Refreshed,
        copies: &[Claim],
        settings: &Settings,
        state: &mut State,
    ) -> FleetView {
        // One sighting is kept: a copy on this server's pair last, so that it is the one.
        let ours = |c: &&Claim| {
            (c.datacenter, c.worker) == (settings.node.datacenter(), settings.node.worker())
        };
        for c in copies
            .iter()
            .filter(|c| !ours(c))
            .chain(copies.iter().filter(ours))
        {
            self.copies.sighted(now_ms, *c);
        }
        self.refreshed(now_ms, read, settings, state)
    }

    /// As [`Worker::refreshed_with_copies`] with no copy answered: see there.
    pub fn refreshed(
        &mut self,
        now_ms: u64,
        read: Refreshed,
        settings: &Settings,
        state: &mut State,
    ) -> FleetView {
        let (me, node, expiry) = (
            settings.system_identifier,
            settings.node,
            settings.claim_expiry_ms,
        );
        let (dc, w) = (node.datacenter(), node.worker());
        self.copies.observe(now_ms, read.own_before);
        self.copies.wrote(&read.written);
        let events = self.paths.observe(now_ms, read.paths);
        self.liveness.observe(now_ms, &read.claims);
        // While claims may be stale here (a path failing or relaying), a copy's sighting outlives
        // its expiry as any claim does: a copy cannot be retired, so only a restart of this
        // server (or the end of the relaying path) ends that refusal.
        let stale = self.paths.claims_may_be_stale(now_ms);
        let copy_announced = self.copies.announce(now_ms, expiry, stale);
        let liveness = &self.liveness;
        let live = |c: &Claim| liveness.live(c, now_ms, expiry);
        // A copy of this server on its own pair first: it issues exactly our IDs.
        let copy_here = self
            .copies
            .copy(now_ms, expiry, stale)
            .filter(|c| c.datacenter == dc && c.worker == w);
        let found = copy_here.or_else(|| conflict(me, dc, w, &read.claims, |c| stale || live(c)));
        let claims_stale = copy_here.is_none()
            && found.is_some()
            && conflict(me, dc, w, &read.claims, live).is_none();
        // Every ID from now on goes above what another server may have issued on our pair: a
        // refusal that ends here (the other server left the pair) must not resume under a lease
        // granted before its last IDs were known.
        if let Some(id) = handover_floor(me, dc, w, &read.claims, &read.left_pairs) {
            state.raise_floor(decompose(id).map(|p| p.ms).unwrap_or(0));
        }
        // A pair taken over (rule 8): its holder may have issued beyond the claim seen here.
        if found.is_none() {
            let holders: Vec<(i64, i64)> = holders_of_our_pair(me, dc, w, &read.claims)
                .map(|c| (c.system_identifier, c.version))
                .collect();
            if holders.iter().any(|h| !self.taken.contains(h)) {
                let clock = read.written.last_seen_unix_ms - self.epoch_ms;
                state.raise_floor(reach_ms(clock, settings.max_drift_ms));
            }
            self.taken = holders;
        }
        state.set_refused(found.is_some());
        // The calls that asked for a look before this refresh started have it now.
        state.answer_looks(self.answering);
        self.claim_written_at = Some(now_ms);
        // A lease held back (rule 7) is granted now that the claims were looked at, unless they
        // show a conflict (the next renewal then starts over).
        if let Some(write) = self.held.take() {
            if found.is_none() {
                self.grant(&write, state);
            }
        }
        let before = std::mem::replace(&mut self.conflict, found);
        FleetView {
            events,
            copy_announced,
            before,
            conflict: found,
            claims_stale,
            paths_stale: stale,
        }
    }

    /// The floors read in the renewal's transaction (rule 4), at wall clock `wall_unix_ms`: the
    /// hand-over floor of this server's pair (an ID) and the mark. Returns the lease to write in
    /// the same transaction, if one is still needed.
    pub fn renew_read(
        &mut self,
        wall_unix_ms: i64,
        handover_id: Option<i64>,
        mark_unix_ms: i64,
        recorded_epoch_ms: Option<i64>,
        settings: &Settings,
        state: &mut State,
    ) -> RenewPlan {
        // A lease still awaiting the standbys is superseded: this renewal writes above it.
        self.unreplicated = None;
        if let Some(id) = handover_id {
            state.raise_floor(decompose(id).map(|p| p.ms).unwrap_or(0));
        }
        let own = self.own_mark;
        let own_here = own - self.recorded_epoch_ms + self.epoch_ms;
        let found = state.follow_outside_mark(
            mark_unix_ms,
            recorded_epoch_ms,
            self.epoch_ms,
            (own, self.recorded_epoch_ms),
        );
        let now = wall_unix_ms - self.epoch_ms;
        let write = state
            .renewal(now, true, settings.max_drift_ms)
            .map(|lease_ms| LeaseWrite {
                lease_ms,
                mark_unix_ms: self.epoch_ms + lease_ms as i64,
                own_unix_ms: own_here,
                epoch_ms: self.epoch_ms,
                looked_unix_ms: mark_unix_ms,
                looked_epoch_ms: recorded_epoch_ms,
                claim_lease_id: assemble(lease_ms.min(MAX_TIMESTAMP), settings.node, MAX_SEQUENCE),
            });
        if write.is_none() && found.is_some_and(|f| !f.lowered) {
            // Raised: followed, and the worker's own from now on. (A lowered mark is written
            // back by the next look.)
            self.take_as_own(mark_unix_ms, recorded_epoch_ms);
        }
        RenewPlan {
            mark_unix_ms,
            found,
            write,
        }
    }

    /// The renewal's transaction committed (rule 5) at monotonic `now_ms`: the mark now holds
    /// `written_unix_ms` (where the write found `found`: the mark and the epoch recorded beside
    /// it), and this server's own claim
    /// was `claim_before` and is now
    /// `claim_written` (its stamp); `replicated` says whether the commit is where the docs say a
    /// lease is: received by the synchronous standbys where the commit waits for them (or no
    /// such wait). Grants the lease, unless this server's claim had not been
    /// written for so long that a peer may have taken it for gone (rule 7): then the lease is
    /// held until the next refresh has looked at the claims. A commit not replicated grants
    /// nothing: [`Worker::replicated`] does once the standbys have confirmed it. Returns whether
    /// it was granted.
    #[allow(clippy::too_many_arguments)]
    pub fn renew_committed(
        &mut self,
        now_ms: u64,
        write: &LeaseWrite,
        written_unix_ms: i64,
        found: (i64, Option<i64>),
        claim_before: Option<Claim>,
        claim_written: Option<Claim>,
        replicated: bool,
        settings: &Settings,
        state: &mut State,
    ) -> bool {
        if found != (write.looked_unix_ms, write.looked_epoch_ms) {
            // Set by someone else after the look (rule 4): a floor, as at any look, in the
            // milliseconds of the epoch it was written under (a dump of a server with another
            // epoch brings both). (A lowered value is below the worker's own, which the write put
            // back.)
            state.raise_floor(restored_floor(found.0, found.1, self.epoch_ms));
        }
        let epoch = if write.keeps_found(found) {
            found.1
        } else {
            Some(write.epoch_ms)
        };
        self.take_as_own(written_unix_ms, epoch);
        let silent = self.claim_silent(now_ms, settings.claim_expiry_ms);
        if let Some(stamp) = claim_written {
            self.copies.observe(now_ms, claim_before);
            self.copies.wrote(&stamp);
            self.claim_written_at = Some(now_ms);
        }
        if !replicated {
            // Committed here only (a cancelled wait for the synchronous standbys): the mark and
            // the claim are the worker's own now (above), but no ID may use the lease before a
            // failover would find it.
            self.unreplicated = Some((*write, silent));
            return false;
        }
        self.settle(write, silent, state)
    }

    /// The synchronous standbys have confirmed the commit of the lease that
    /// [`Worker::renew_committed`] left unreplicated (rule 5), and the mark now reads `mark`
    /// (its value and the epoch recorded beside it, read after the confirmation): granted now,
    /// or held as rule 7 says if the claim was silent at its commit. Not granted if the mark was
    /// lowered below the lease while the commit waited (a restore of `_snowflake`): the lease is
    /// in WAL that the standbys have, but so is the lower mark after it, and a failover to one
    /// of them would issue its IDs again. The lease is dropped then, and the next renewal writes
    /// the worker's own mark back above it (and waits for the standbys again). Returns whether
    /// it was granted (false too when no lease awaits them).
    pub fn replicated(&mut self, mark: (i64, Option<i64>), state: &mut State) -> bool {
        match self.unreplicated.take() {
            Some((write, _)) if restored_floor(mark.0, mark.1, self.epoch_ms) < write.lease_ms => {
                false
            }
            Some((write, silent)) => self.settle(&write, silent, state),
            None => false,
        }
    }

    /// The set of synchronous standbys changed (rule 9: `synchronous_standby_names` reloaded,
    /// one that lagged made synchronous): the leases they confirmed may be missing on the new
    /// ones. The lease granted beyond what was issued is taken back, and one held (rule 7) or
    /// awaiting the former standbys (rule 5) is dropped: no ID until a renewal whose commit the
    /// new standbys confirmed is granted.
    pub fn standbys_changed(&mut self, state: &mut State) {
        state.revoke_lease();
        self.held = None;
        self.unreplicated = None;
    }

    /// The synchronous standbys as the glue reads them now (rule 9), at every nap and after
    /// every lease commit, before the lease is used further: when they differ from the last
    /// look, [`Worker::standbys_changed`]. The first look of a life counts as a change (a worker
    /// restarted while the server runs keeps the lease its predecessor was granted, under
    /// standbys it cannot know): one more renewal. Returns whether the lease was taken back.
    pub fn standbys_seen(&mut self, mut seen: Standbys, state: &mut State) -> bool {
        seen.pids.sort_unstable();
        let changed = self.standbys.as_ref() != Some(&seen);
        if changed {
            self.standbys_changed(state);
            self.standbys = Some(seen);
        }
        changed
    }

    /// The synchronous standbys at the last look, if there was one in this life.
    pub fn standbys(&self) -> Option<&Standbys> {
        self.standbys.as_ref()
    }

    /// Whether a committed lease awaits the synchronous standbys' confirmation.
    pub fn awaits_standbys(&self) -> bool {
        self.unreplicated.is_some()
    }

    /// Grants a lease whose commit is where the docs say, or holds it (rule 7).
    fn settle(&mut self, write: &LeaseWrite, silent: bool, state: &mut State) -> bool {
        if silent {
            self.held = Some(*write);
            self.claimed_at = None;
            return false;
        }
        self.grant(write, state);
        true
    }

    /// The mark now holds `mark_unix_ms` under `epoch_ms` (`None`: none recorded, read as the
    /// configured one), and the worker takes both as its own: any other value found later was
    /// written by someone else.
    fn take_as_own(&mut self, mark_unix_ms: i64, epoch_ms: Option<i64>) {
        self.own_mark = mark_unix_ms;
        self.recorded_epoch_ms = epoch_ms.unwrap_or(self.epoch_ms);
    }

    /// Whether this server's claim was last written so long before `now_ms` that a peer watching
    /// it may have seen it unchanged for the expiry, less a refresh (or never written since the
    /// worker started).
    fn claim_silent(&self, now_ms: u64, expiry_ms: u64) -> bool {
        self.claim_written_at
            .is_none_or(|t| now_ms.saturating_sub(t) >= expiry_ms.saturating_sub(REFRESH_MS))
    }

    fn grant(&mut self, write: &LeaseWrite, state: &mut State) {
        state.grant_lease(write.lease_ms);
        self.issued_at_renewal = state.stats().issued;
    }
}

/// The highest ID this server may have issued, for its claim: the last ID of its lease, or before
/// the first lease since start-up of its floor (a floor raised above the lease by
/// `snowflake_set_floor()` is not issued under yet, and is the lease's business: the claim must
/// not run ahead of the persisted mark). 0 when nothing is known.
pub fn claim_lease_id(node: Node, state: &State) -> i64 {
    let ms = match state.lease() {
        Some(lease) if lease > 0 => lease.min(MAX_TIMESTAMP),
        _ => state.highest_possible_ms(),
    };
    if ms == 0 {
        0
    } else {
        assemble(ms, node, MAX_SEQUENCE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::PathReading;
    use crate::fleet::CATCH_UP_LIMIT_MS;
    use crate::generator::Step;

    const EPOCH: i64 = 1_288_834_974_657;
    const ME: i64 = 42;

    fn node(w: i64) -> Node {
        Node::new(1, w).unwrap()
    }

    fn settings() -> Settings {
        Settings {
            system_identifier: ME,
            node: node(2),
            max_drift_ms: 10_000,
            claim_expiry_ms: 15_000,
        }
    }

    fn at(mark_ms: i64, claimed_ms: u64) -> AtStart {
        AtStart {
            mark_unix_ms: if mark_ms == 0 { 0 } else { EPOCH + mark_ms },
            recorded_epoch_ms: Some(EPOCH),
            own_claim: (claimed_ms > 0).then(|| Claim {
                lease_id: assemble(claimed_ms, node(2), MAX_SEQUENCE),
                ..claim(ME, 2, 1)
            }),
            left_pairs: Vec::new(),
        }
    }

    fn path(end: i64) -> PathReading {
        PathReading {
            subscription: "s".into(),
            enabled: true,
            apply_pid: Some(7),
            silent_ms: Some(0),
            errors: Some(0),
            table_state: 'r',
            end_lsn: Some(end),
            publisher_end: Some(6),
            limited: false,
            relays: false,
        }
    }

    fn claim(sysid: i64, w: i64, version: i64) -> Claim {
        Claim {
            system_identifier: sysid,
            datacenter: 1,
            worker: w as u32,
            last_seen_unix_ms: 0,
            version,
            lease_id: 0,
            retired: false,
        }
    }

    fn refreshed(claims: Vec<Claim>) -> Refreshed {
        Refreshed {
            own_before: None,
            written: claim(ME, 2, 1),
            claims,
            left_pairs: Vec::new(),
            paths: Vec::new(),
        }
    }

    /// The renewal's commit with no claim row written (`Worker::renew_committed`): the mark
    /// written, and the value the write found there.
    fn committed(
        w: &mut Worker,
        s: &mut State,
        now: u64,
        write: &LeaseWrite,
        written: i64,
        found: i64,
    ) -> bool {
        w.renew_committed(
            now,
            write,
            written,
            (found, write.looked_epoch_ms),
            None,
            None,
            true,
            &settings(),
            s,
        )
    }

    /// `renew_committed` of `write` as written, its commit not confirmed by the synchronous
    /// standbys (a cancelled or terminated wait).
    fn unconfirmed(w: &mut Worker, s: &mut State, now: u64, write: &LeaseWrite) -> bool {
        w.renew_committed(
            now,
            write,
            write.mark_unix_ms,
            (write.looked_unix_ms, write.looked_epoch_ms),
            None,
            None,
            false,
            &settings(),
            s,
        )
    }

    /// Drives `poll` to the first thing that is not a nap or a refresh.
    fn todos(w: &mut Worker, now: u64, wall: i64, s: &State) -> Vec<Todo> {
        let mut out = Vec::new();
        loop {
            let t = w.poll(now, wall, s, 10_000);
            out.push(t);
            if matches!(t, Todo::Nap(_)) {
                return out;
            }
        }
    }

    #[test]
    fn the_start_takes_the_higher_of_the_mark_and_the_claims_lease() {
        let mut s = State::awaiting_lease();
        let (w, below) = Worker::start(EPOCH, &at(5_000, 0), node(2), &mut s);
        assert_eq!((s.last_ms(), below), (5_000, None));
        assert!(w.gated());
        // A claim at the mark: nothing below it.
        let mut s = State::awaiting_lease();
        assert_eq!(
            Worker::start(EPOCH, &at(5_000, 5_000), node(2), &mut s).1,
            None
        );
        let mut s = State::awaiting_lease();
        let (w, below) = Worker::start(EPOCH, &at(5_000, 9_000), node(2), &mut s);
        assert_eq!(s.last_ms(), 9_000);
        assert_eq!(
            below,
            Some(MarkBelowClaim {
                mark_unix_ms: EPOCH + 5_000,
                claimed_ms: 9_000
            })
        );
        // The claim's value is the worker's own: the first look writes it back.
        let mut w = w;
        let check = w.mark_read(EPOCH + 5_000, Some(EPOCH), &mut s);
        assert_eq!(check.write_back, Some((EPOCH + 9_000, EPOCH)));
        // A worker restarted while the server runs (a lease held) is not gated.
        let mut s = State::awaiting_lease();
        s.grant_lease(100);
        assert!(!Worker::start(EPOCH, &at(5_000, 0), node(2), &mut s)
            .0
            .gated());
    }

    /// A copy of this server (its own row with a stamp it did not write) refuses IDs here only
    /// when it is on this server's pair: on another it issues other IDs than ours.
    #[test]
    fn a_copy_refuses_here_only_on_our_pair() {
        for (copy_worker, refused) in [(3, false), (2, true)] {
            let mut s = State::awaiting_lease();
            let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
            w.paths_read(0, &[]);
            let row = |w: i64, seen: i64, version: i64| Claim {
                last_seen_unix_ms: seen,
                ..claim(ME, w, version)
            };
            let look = |own: Claim, written: Claim| Refreshed {
                own_before: Some(own),
                written,
                ..refreshed(vec![])
            };
            // The row as found at start (an earlier life's), then ours written over it.
            w.refreshed(0, look(row(2, 100, 1), row(2, 200, 2)), &settings(), &mut s);
            assert!(!s.refused());
            // Next look: a version we did not write, stamped later.
            let view = w.refreshed(
                REFRESH_MS,
                look(row(copy_worker, 300, 3), row(2, 400, 4)),
                &settings(),
                &mut s,
            );
            assert!(view.copy_announced.is_some());
            assert_eq!(s.refused(), refused, "a copy on worker {copy_worker}");
        }
    }

    /// Copies a Citus node answered with are sighted whatever their pair, and when several are,
    /// the one kept is one on this server's pair, whatever their order: it refuses here.
    #[test]
    fn a_copy_answered_on_our_pair_is_the_one_kept() {
        let on = |w: i64| Claim {
            lease_id: 1,
            ..claim(ME, w, 3)
        };
        for (copies, kept, refused) in [
            (vec![on(3)], on(3), false),
            (vec![on(2), on(3)], on(2), true),
            (vec![on(3), on(2)], on(2), true),
        ] {
            let mut s = State::awaiting_lease();
            let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
            w.paths_read(0, &[]);
            let view = w.refreshed_with_copies(0, refreshed(vec![]), &copies, &settings(), &mut s);
            assert_eq!(view.copy_announced, Some(kept), "of {copies:?}");
            assert_eq!(s.refused(), refused, "of {copies:?}");
        }
    }

    /// The claim carries the lease's last ID, or before any lease the floor's; never a floor
    /// raised above the lease (not issued under yet, and the mark is not there yet).
    #[test]
    fn the_claim_carries_the_lease_or_before_it_the_floor() {
        let mut s = State::awaiting_lease();
        assert_eq!(claim_lease_id(node(2), &s), 0);
        s.raise_floor(5_000);
        assert_eq!(
            claim_lease_id(node(2), &s),
            assemble(5_000, node(2), MAX_SEQUENCE)
        );
        s.grant_lease(9_000);
        s.raise_floor(12_000);
        assert_eq!(
            claim_lease_id(node(2), &s),
            assemble(9_000, node(2), MAX_SEQUENCE)
        );
    }

    /// When `poll` asks for each step: the gate's look every `GATE_LOOK_MS`, the refresh every
    /// `REFRESH_MS`, a renewal only when a lease is wanted (an ID waited, or IDs were issued since
    /// the last one) and running low, and a nap of a quarter lease between.
    #[test]
    fn poll_asks_for_each_step_when_it_is_due() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let wall = EPOCH + 1_000_000;
        assert_eq!(
            todos(&mut w, 0, wall, &s)[..2],
            [Todo::ReadPaths, Todo::Refresh]
        );
        let view = w.refreshed(0, refreshed(vec![]), &settings(), &mut s);
        assert!(!view.claims_stale && view.conflict.is_none() && !s.refused());
        assert!(!todos(&mut w, GATE_LOOK_MS - 1, wall, &s).contains(&Todo::ReadPaths));
        assert!(todos(&mut w, GATE_LOOK_MS, wall, &s).contains(&Todo::ReadPaths));
        w.paths_read(GATE_LOOK_MS, &[]);
        let t = 0;
        assert!(!todos(&mut w, t + REFRESH_MS - 1, wall, &s).contains(&Todo::Refresh));
        assert!(todos(&mut w, t + REFRESH_MS, wall, &s).contains(&Todo::Refresh));
        // A lease far ahead and nothing issued since: no renewal; the nap is a quarter lease.
        s.grant_lease(2_000_000);
        let next = todos(&mut w, t + REFRESH_MS + 1, wall, &s);
        assert!(!next.contains(&Todo::Renew), "{next:?}");
        assert_eq!(next.last(), Some(&Todo::Nap(250)));
        // An ID issued, the lease still far ahead: none either.
        assert!(matches!(
            s.next(1_000_000, node(2), 10_000),
            Ok(Step::Issued(_))
        ));
        assert!(!todos(&mut w, t + REFRESH_MS + 2, wall, &s).contains(&Todo::Renew));
        // The clock then nears the lease's end: renewed, by the clock, not by what was issued.
        let late = EPOCH + 1_999_800;
        assert!(todos(&mut w, t + REFRESH_MS + 2, late, &s).contains(&Todo::Renew));
        // Running low, with an ID issued since the last renewal: renewed.
        let mut s = State::awaiting_lease();
        s.grant_lease(1_000_100);
        assert!(!todos(&mut w, t + REFRESH_MS + 3, wall, &s).contains(&Todo::Renew));
        assert!(matches!(
            s.next(1_000_000, node(2), 10_000),
            Ok(Step::Issued(_))
        ));
        assert!(todos(&mut w, t + REFRESH_MS + 4, wall, &s).contains(&Todo::Renew));
    }

    /// A call refused because of a claim asks for a look (a DBA may have just retired it): the
    /// worker refreshes within `LOOK_AGAIN_MS` of its last refresh rather than at the next period,
    /// naps no longer than that while one is asked, and the refresh's end answers every look
    /// asked before it started, not one asked while it ran. Asked looks never come closer
    /// together than `LOOK_AGAIN_MS`.
    #[test]
    fn a_refused_call_gets_a_look_at_the_claims_within_look_again_ms() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let wall = EPOCH + 1_000_000;
        w.paths_read(0, &[]);
        assert!(todos(&mut w, 0, wall, &s).contains(&Todo::Refresh));
        let other = claim(7, 2, 1);
        w.refreshed(0, refreshed(vec![other]), &settings(), &mut s);
        assert!(
            s.refused(),
            "another server's claim on the pair, never watched: live"
        );
        s.grant_lease(2_000_000);
        // Nothing asked: a quarter lease's nap, and no refresh before REFRESH_MS.
        assert_eq!(todos(&mut w, 10, wall, &s).last(), Some(&Todo::Nap(250)));
        // The DBA retires the claim; a call is refused and asks for a look.
        let ticket = s.ask_look();
        assert!(!s.look_answered(ticket));
        let early = todos(&mut w, LOOK_AGAIN_MS - 100, wall, &s);
        assert!(!early.contains(&Todo::Refresh), "{early:?}");
        assert_eq!(
            early.last(),
            Some(&Todo::Nap(100)),
            "the nap ends when the look is allowed"
        );
        assert_eq!(todos(&mut w, LOOK_AGAIN_MS, wall, &s)[0], Todo::Refresh);
        // A call asks again while that refresh runs: its read may predate the ask.
        let during = s.ask_look();
        let retired = Claim {
            retired: true,
            ..other
        };
        w.refreshed(LOOK_AGAIN_MS, refreshed(vec![retired]), &settings(), &mut s);
        assert!(!s.refused(), "the retired claim ends the refusal at once");
        assert!(s.look_answered(ticket) && !s.look_answered(during));
        // The second ask is taken, again no sooner than LOOK_AGAIN_MS after the last refresh.
        assert!(!todos(&mut w, 2 * LOOK_AGAIN_MS - 1, wall, &s).contains(&Todo::Refresh));
        assert_eq!(todos(&mut w, 2 * LOOK_AGAIN_MS, wall, &s)[0], Todo::Refresh);
        w.refreshed(
            2 * LOOK_AGAIN_MS,
            refreshed(vec![retired]),
            &settings(),
            &mut s,
        );
        assert!(s.look_answered(during));
        // Nothing asked any more: back to the refresh's period.
        assert!(!todos(&mut w, 3 * LOOK_AGAIN_MS, wall, &s).contains(&Todo::Refresh));
        assert!(todos(&mut w, 2 * LOOK_AGAIN_MS + REFRESH_MS, wall, &s).contains(&Todo::Refresh));
    }

    /// Tickets wrap: an answer at or past the ticket (within half the range) answers it.
    #[test]
    fn look_tickets_wrap() {
        let mut s = State::new();
        s.looks_asked = u32::MAX - 1;
        s.answer_looks(u32::MAX - 1);
        let a = s.ask_look();
        let b = s.ask_look();
        assert_eq!((a, b), (u32::MAX, 0));
        assert!(!s.look_answered(a) && !s.look_answered(b));
        s.answer_looks(a);
        assert!(s.look_answered(a) && !s.look_answered(b));
        s.answer_looks(b);
        assert!(s.look_answered(a) && s.look_answered(b));
    }

    #[test]
    fn no_lease_while_gated_and_the_refresh_comes_right_after_the_gate() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let wall = EPOCH + 1_000_000;
        assert!(matches!(
            s.next(1_000_000, node(2), 10_000),
            Ok(Step::WaitLease { .. })
        ));
        assert_eq!(
            todos(&mut w, 0, wall, &s)[..2],
            [Todo::ReadPaths, Todo::Refresh]
        );
        assert_eq!(w.paths_read(0, &[path(5)]), None);
        // Still gated: no renewal however much it is wanted.
        assert!(!todos(&mut w, 300, wall + 300, &s).contains(&Todo::Renew));
        assert_eq!(
            w.paths_read(600, &[path(6)]),
            Some(GateEnd::CaughtUp { unproven: vec![] })
        );
        assert!(!w.gated());
        // The claims arrived: the refresh comes before the lease.
        let next = todos(&mut w, 601, wall + 601, &s);
        assert_eq!(next[..2], [Todo::Refresh, Todo::Renew]);
    }

    #[test]
    fn the_gate_stays_closed_without_proof_and_says_so_once() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        assert_eq!(w.paths_read(0, &[path(5)]), None);
        // No move for the limit: said once, and the gate stays closed.
        assert_eq!(
            w.paths_read(CATCH_UP_LIMIT_MS, &[path(5)]),
            Some(GateEnd::Stalled {
                waiting: vec!["s".into()],
            })
        );
        assert_eq!(w.paths_read(2 * CATCH_UP_LIMIT_MS, &[path(5)]), None);
        assert!(w.gated());
        assert_eq!(
            w.paths_read(2 * CATCH_UP_LIMIT_MS + 1, &[path(6)]),
            Some(GateEnd::CaughtUp { unproven: vec![] })
        );
        // A path that moves towards its target holds the gate past the limit, until it is there.
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let far = |end: i64| PathReading {
            publisher_end: Some(1_000_000),
            ..path(end)
        };
        assert_eq!(w.paths_read(0, &[far(5)]), None);
        let mut t = 0;
        for end in (10..1_000_000).step_by(100_000) {
            t += CATCH_UP_LIMIT_MS - 1;
            assert_eq!(w.paths_read(t, &[far(end)]), None, "at {t} ms, end {end}");
        }
        assert_eq!(
            w.paths_read(t + 1, &[far(1_000_000)]),
            Some(GateEnd::CaughtUp { unproven: vec![] })
        );
        // Without paths, the first look opens it.
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        assert_eq!(
            w.paths_read(0, &[]),
            Some(GateEnd::CaughtUp { unproven: vec![] })
        );
    }

    #[test]
    fn a_lease_is_granted_only_once_committed_and_above_every_floor_read() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(1_000, 0), node(2), &mut s);
        w.paths_read(0, &[]);
        let handover = assemble(50_000, node(2), 7);
        let plan = w.renew_read(
            EPOCH + 45_000,
            Some(handover),
            EPOCH + 30_000,
            Some(EPOCH),
            &settings(),
            &mut s,
        );
        let write = plan.write.expect("a lease is needed");
        // Above the hand-over floor and the raised mark; nothing granted yet.
        assert_eq!(s.last_ms(), 50_000);
        assert_eq!(write.lease_ms, 51_000);
        assert_eq!(write.mark_unix_ms, EPOCH + 51_000);
        assert_eq!(
            write.claim_lease_id,
            assemble(51_000, node(2), MAX_SEQUENCE)
        );
        assert_eq!(s.lease(), Some(0));
        assert!(plan.found.is_some_and(|f| !f.lowered));
        // No refresh has written the claim yet: the lease is held until one has looked.
        assert!(!committed(
            &mut w,
            &mut s,
            0,
            &write,
            EPOCH + 51_000,
            write.looked_unix_ms
        ));
        assert_eq!(s.lease(), Some(0));
        w.refreshed(1, refreshed(vec![]), &settings(), &mut s);
        assert_eq!(s.lease(), Some(51_000));
        // Written within the expiry (less a refresh): granted at once.
        assert!(committed(
            &mut w,
            &mut s,
            9_999,
            &write,
            EPOCH + 51_000,
            write.looked_unix_ms
        ));
        // A commit that waited longer: held, and dropped if the refresh finds a conflict.
        let later = LeaseWrite {
            lease_ms: 60_000,
            ..write
        };
        assert!(!committed(
            &mut w,
            &mut s,
            20_000,
            &later,
            EPOCH + 60_000,
            later.looked_unix_ms
        ));
        w.refreshed(20_001, refreshed(vec![claim(7, 2, 1)]), &settings(), &mut s);
        assert_eq!(s.lease(), Some(51_000));
        assert_eq!(w.conflict().map(|c| c.system_identifier), Some(7));
        assert_eq!(w.recorded_epoch_ms(), EPOCH);
        // The mark written is the worker's own now.
        assert_eq!(w.mark_read(EPOCH + 60_000, Some(EPOCH), &mut s).found, None);
    }

    /// Rule 9 (issue 59): `synchronous_standby_names` reloaded to a standby that lagged. The
    /// lease the former standbys confirmed is taken back: no ID, not even one more in the last
    /// millisecond, until a renewal the new ones confirmed; a lease awaiting the former ones is
    /// not granted by their confirmation.
    #[test]
    fn a_switch_of_the_synchronous_standbys_takes_the_lease_back() {
        let (mut s, mut w, write) = first_lease_at_20s();
        assert!(committed(
            &mut w,
            &mut s,
            1,
            &write,
            write.mark_unix_ms,
            write.looked_unix_ms
        ));
        let now = write.lease_ms as i64 - 1_000;
        assert!(matches!(s.next(now, node(2), 10_000), Ok(Step::Issued(_))));
        let last = s.last_ms();
        w.standbys_changed(&mut s);
        assert_eq!(
            s.next(now, node(2), 10_000),
            Ok(Step::WaitLease {
                needed_ms: last + 1
            })
        );
        assert!(s.lease_wanted());
        assert_eq!(s.last_ms(), last, "nothing issued or raised");
        // A lease whose commit awaited the former standbys (a cancelled wait) is dropped.
        let (mut s, mut w, write) = first_lease_at_20s();
        assert!(!unconfirmed(&mut w, &mut s, 1, &write));
        w.standbys_changed(&mut s);
        assert!(!w.awaits_standbys());
        assert!(!w.replicated((write.mark_unix_ms, Some(EPOCH)), &mut s));
        assert_eq!(s.lease(), Some(0));
    }

    /// Rule 9 as the glue looks (issue 59): the first look of a life and every look that
    /// differs take the lease back, in names or in walsenders (whatever their order); the same
    /// standbys again keep it.
    #[test]
    fn a_look_at_other_standbys_takes_the_lease_back() {
        let (mut s, mut w, write) = first_lease_at_20s();
        let looks = |names: &str, pids: &[i32]| Standbys {
            names: names.into(),
            pids: pids.to_vec(),
        };
        assert!(w.standbys_seen(looks("s1", &[7, 3]), &mut s), "first look");
        assert!(committed(
            &mut w,
            &mut s,
            1,
            &write,
            write.mark_unix_ms,
            write.looked_unix_ms
        ));
        let now = write.lease_ms as i64 - 1_000;
        assert!(!w.standbys_seen(looks("s1", &[3, 7]), &mut s));
        assert!(matches!(s.next(now, node(2), 10_000), Ok(Step::Issued(_))));
        for (names, pids) in [("s2", &[3, 7][..]), ("s2", &[3, 8][..]), ("s2", &[3][..])] {
            assert!(w.standbys_seen(looks(names, pids), &mut s));
            assert!(
                matches!(s.next(now, node(2), 10_000), Ok(Step::WaitLease { .. })),
                "{names} {pids:?}"
            );
            s.grant_lease(write.lease_ms);
        }
    }

    /// Rule 8 (issue 59): server 7 held our pair; its claims path stalled, a DBA raised its
    /// floor (one renewal moves the lease by the whole raise), it was lost and retired here from
    /// the last claim of it that arrived. Taking the pair over continues above the furthest it
    /// could have reached: our clock plus our drift, once per version of its claim.
    #[test]
    fn a_pair_taken_over_continues_above_the_furthest_its_holder_could_have_reached() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let mut seen = claim(7, 2, 1);
        seen.lease_id = assemble(5_000, node(2), MAX_SEQUENCE);
        let at_clock = |claims: Vec<Claim>, clock: i64| {
            let mut read = refreshed(claims);
            read.written.last_seen_unix_ms = EPOCH + clock;
            read
        };
        w.refreshed(0, at_clock(vec![seen], 6_000), &settings(), &mut s);
        assert!(s.refused(), "live: a conflict");
        let retired = Claim {
            retired: true,
            version: 2,
            ..seen
        };
        w.refreshed(1_000, at_clock(vec![retired], 7_000), &settings(), &mut s);
        assert!(!s.refused());
        assert_eq!(s.last_ms(), 7_000 + settings().max_drift_ms);
        // Once: the next refresh, its clock on, does not move it again.
        w.refreshed(6_000, at_clock(vec![retired], 12_000), &settings(), &mut s);
        assert_eq!(s.last_ms(), 17_000);
        // Within the drift: the next ID one millisecond of the clock later.
        s.grant_lease(20_000);
        assert!(matches!(
            s.next(7_001, node(2), 10_000),
            Ok(Step::Issued(_))
        ));
        // Another server's claim on another pair, or a pair it left (its last ID there is
        // exact), takes nothing over.
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let mut elsewhere = claim(8, 3, 1);
        elsewhere.lease_id = assemble(5_000, node(3), MAX_SEQUENCE);
        let mut read = at_clock(vec![elsewhere], 6_000);
        read.left_pairs = vec![LeftPair {
            system_identifier: 8,
            last_id: assemble(4_000, node(2), MAX_SEQUENCE),
        }];
        w.refreshed(0, read, &settings(), &mut s);
        assert_eq!(s.last_ms(), 4_000);
    }

    #[test]
    fn a_lease_the_synchronous_standbys_have_not_confirmed_is_not_granted() {
        // Its commit returned after a cancel of its wait: committed here, the mark the worker's
        // own, but no ID under it until the standbys confirm it.
        let (mut s, mut w, write) = first_lease_at_20s();
        let written = write.mark_unix_ms;
        assert!(!unconfirmed(&mut w, &mut s, 1, &write));
        assert!(w.awaits_standbys());
        assert_eq!(s.lease(), Some(0));
        assert_eq!(w.mark_read(written, Some(EPOCH), &mut s).found, None);
        // Confirmed: granted.
        let mark = (written, Some(EPOCH));
        assert!(w.replicated(mark, &mut s));
        assert_eq!(s.lease(), Some(write.lease_ms));
        assert!(!w.replicated(mark, &mut s));
        // A later renewal supersedes one still waiting: its confirmation grants nothing.
        let (mut s, mut w, write) = first_lease_at_20s();
        unconfirmed(&mut w, &mut s, 1, &write);
        w.renew_read(
            EPOCH + 20_000,
            None,
            write.mark_unix_ms,
            Some(EPOCH),
            &settings(),
            &mut s,
        );
        assert!(!w.awaits_standbys());
        assert!(!w.replicated(mark, &mut s));
        assert_eq!(s.lease(), Some(0));
        // A commit that waited past the claim's expiry (less a refresh): confirmed, the lease is
        // still held for the refresh.
        let (mut s, mut w, write) = first_lease_at_20s();
        unconfirmed(&mut w, &mut s, 20_000, &write);
        assert!(!w.replicated(mark, &mut s));
        assert_eq!(s.lease(), Some(0));
        w.refreshed(20_001, refreshed(vec![]), &settings(), &mut s);
        assert_eq!(s.lease(), Some(write.lease_ms));
    }

    #[test]
    fn a_lease_whose_mark_was_lowered_while_it_waited_for_the_standbys_is_not_granted() {
        // A restore of `_snowflake` lowered the mark while the commit waited: the standbys that
        // confirmed the lease have the lower mark after it, and a failover to one of them would
        // start there. No grant; the next renewal writes the worker's own mark back.
        let (mut s, mut w, write) = first_lease_at_20s();
        unconfirmed(&mut w, &mut s, 1, &write);
        let restored = (EPOCH + 1_000, Some(EPOCH));
        assert!(!w.replicated(restored, &mut s));
        assert_eq!(s.lease(), Some(0));
        assert!(!w.awaits_standbys());
        let plan = w.renew_read(
            EPOCH + 20_000,
            None,
            restored.0,
            restored.1,
            &settings(),
            &mut s,
        );
        let again = plan.write.expect("a renewal");
        assert!(plan.found.is_some_and(|f| f.lowered));
        assert!(again.mark_unix_ms.max(again.own_unix_ms) >= write.mark_unix_ms);
        // A mark raised from outside meanwhile (a floor set, another epoch's dump) grants it.
        let (mut s, mut w, write) = first_lease_at_20s();
        unconfirmed(&mut w, &mut s, 1, &write);
        assert!(w.replicated((write.mark_unix_ms + 5, Some(EPOCH)), &mut s));
        assert_eq!(s.lease(), Some(write.lease_ms));
    }

    /// A worker started on a mark at 1 s, its claims looked at, planning its first lease at 20 s.
    fn first_lease_at_20s() -> (State, Worker, LeaseWrite) {
        first_lease_at_20s_from(&at(1_000, 0))
    }

    /// The same, started on `read`, the mark read again unchanged.
    fn first_lease_at_20s_from(read: &AtStart) -> (State, Worker, LeaseWrite) {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, read, node(2), &mut s);
        w.paths_read(0, &[]);
        w.refreshed(0, refreshed(vec![]), &settings(), &mut s);
        let plan = w.renew_read(
            EPOCH + 20_000,
            None,
            read.mark_unix_ms,
            read.recorded_epoch_ms,
            &settings(),
            &mut s,
        );
        (s, w, plan.write.expect("a lease is needed"))
    }

    #[test]
    fn a_mark_raised_between_the_look_and_the_write_is_a_floor() {
        let (mut s, mut w, write) = first_lease_at_20s();
        assert_eq!(write.lease_ms, 21_000);
        // A DBA's setval landed after the look: the write kept the greater value, 25 s.
        assert!(committed(
            &mut w,
            &mut s,
            1,
            &write,
            EPOCH + 25_000,
            EPOCH + 25_000
        ));
        assert_eq!(s.last_ms(), 25_000, "every ID from now on is above it");
        assert!(matches!(
            s.next(20_001, node(2), 10_000),
            Ok(Step::WaitLease { .. })
        ));
        // Lowered in between, yet above what was issued: a floor as well.
        let (mut s, mut w, write) = first_lease_at_20s();
        assert!(committed(
            &mut w,
            &mut s,
            1,
            &write,
            EPOCH + 21_000,
            EPOCH + 1_000
        ));
        assert!(matches!(
            s.next(20_100, node(2), 10_000),
            Ok(Step::Issued(_))
        ));
        s.want_lease();
        let plan = w.renew_read(
            EPOCH + 20_900,
            None,
            EPOCH + 21_000,
            Some(EPOCH),
            &settings(),
            &mut s,
        );
        let write = plan.write.expect("a lease is wanted");
        assert!(committed(
            &mut w,
            &mut s,
            2,
            &write,
            EPOCH + 21_900,
            EPOCH + 20_500
        ));
        assert_eq!(s.last_ms(), 20_500);
        // Our own values written back are no floor.
        let (mut s, mut w, write) = first_lease_at_20s_from(&at(30_000, 0));
        assert!(committed(
            &mut w,
            &mut s,
            1,
            &write,
            EPOCH + 31_000,
            write.looked_unix_ms
        ));
        assert_eq!(s.last_ms(), 30_000);
    }

    #[test]
    fn the_workers_own_mark_is_written_in_the_milliseconds_of_the_epoch_written_beside_it() {
        // The mark was written under an epoch an hour later (snowflake.epoch moved an hour
        // earlier since, which is allowed): its Unix value stands for ms 30 s of that epoch.
        let hour = 3_600_000;
        let read = AtStart {
            mark_unix_ms: EPOCH + hour + 30_000,
            recorded_epoch_ms: Some(EPOCH + hour),
            ..at(0, 0)
        };
        let (s, _, write) = first_lease_at_20s_from(&read);
        assert_eq!(s.last_ms(), 30_000);
        // Ours is ms 30 s under our epoch too, not an hour later: the lease (ms 31 s) is what
        // the write leaves, under our epoch.
        assert_eq!(write.own_unix_ms, EPOCH + 30_000);
        assert_eq!(
            write.written((read.mark_unix_ms, read.recorded_epoch_ms)),
            EPOCH + 31_000
        );
        assert!(!write.keeps_found((read.mark_unix_ms, read.recorded_epoch_ms)));
    }

    #[test]
    fn a_mark_set_between_the_look_and_the_write_is_a_floor_under_the_epoch_it_brought() {
        // A dump of a server whose epoch is a day earlier, restored after the look: its mark (Unix
        // ms) counts from that epoch, so the floor is a day further on in our milliseconds than
        // the same Unix ms under our epoch would be.
        let (mut s, mut w, write) = first_lease_at_20s();
        let day = 86_400_000;
        let granted = w.renew_committed(
            1,
            &write,
            EPOCH + 25_000,
            (EPOCH + 25_000, Some(EPOCH - day)),
            None,
            None,
            true,
            &settings(),
            &mut s,
        );
        assert!(granted);
        assert_eq!(s.last_ms(), 25_000 + day as u64);
        // The write kept that value (above ours), and its epoch with it.
        assert_eq!(w.recorded_epoch_ms(), EPOCH - day);
        // The same mark with the epoch of the look changed alone is someone else's too.
        let (mut s, mut w, write) = first_lease_at_20s();
        let found = (write.looked_unix_ms, Some(EPOCH - day));
        w.renew_committed(
            1,
            &write,
            EPOCH + 21_000,
            found,
            None,
            None,
            true,
            &settings(),
            &mut s,
        );
        assert_eq!(s.last_ms(), 1_000 + day as u64);
    }

    #[test]
    fn a_look_follows_a_raised_mark_and_writes_back_a_lowered_one() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(10_000, 0), node(2), &mut s);
        let raised = w.mark_read(EPOCH + 20_000, Some(EPOCH), &mut s);
        assert_eq!(raised.write_back, None);
        assert_eq!(s.last_ms(), 20_000);
        // Raised is ours now: the same value again is nothing.
        assert_eq!(w.mark_read(EPOCH + 20_000, Some(EPOCH), &mut s).found, None);
        let lowered = w.mark_read(EPOCH + 5_000, Some(EPOCH), &mut s);
        assert_eq!(lowered.write_back, Some((EPOCH + 20_000, EPOCH)));
        assert_eq!(s.last_ms(), 20_000);
        // A renewal that finds it raised but needs no lease takes it as its own too.
        s.grant_lease(u64::MAX - 1);
        let plan = w.renew_read(
            EPOCH + 1,
            None,
            EPOCH + 30_000,
            Some(EPOCH),
            &settings(),
            &mut s,
        );
        assert_eq!(plan.write, None);
        assert_eq!(w.mark_read(EPOCH + 30_000, Some(EPOCH), &mut s).found, None);
        // One that finds it lowered and needs no lease does not: the next look writes ours back.
        let plan = w.renew_read(
            EPOCH + 2,
            None,
            EPOCH + 5_000,
            Some(EPOCH),
            &settings(),
            &mut s,
        );
        assert_eq!(plan.write, None);
        assert!(plan.found.is_some_and(|f| f.lowered));
        let lowered = w.mark_read(EPOCH + 5_000, Some(EPOCH), &mut s);
        assert_eq!(lowered.write_back, Some((EPOCH + 30_000, EPOCH)));
    }

    #[test]
    fn a_refresh_refuses_on_a_live_claim_and_clears_when_it_moves() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        let view = w.refreshed(
            0,
            refreshed(vec![claim(ME, 2, 1), claim(7, 2, 1)]),
            &settings(),
            &mut s,
        );
        assert_eq!(view.conflict.map(|c| c.system_identifier), Some(7));
        assert!(s.refused() && view.before.is_none());
        let view = w.refreshed(
            5_000,
            refreshed(vec![claim(ME, 2, 2), claim(7, 3, 2)]),
            &settings(),
            &mut s,
        );
        assert_eq!(view.conflict, None);
        assert!(view.before.is_some() && !s.refused());
        // A claim that stopped changing expires by this server's clock.
        w.refreshed(10_000, refreshed(vec![claim(7, 2, 3)]), &settings(), &mut s);
        assert!(s.refused());
        for t in [15_000, 20_000] {
            w.refreshed(t, refreshed(vec![claim(7, 2, 3)]), &settings(), &mut s);
            assert!(s.refused());
        }
        w.refreshed(25_000, refreshed(vec![claim(7, 2, 3)]), &settings(), &mut s);
        assert!(!s.refused());
    }

    #[test]
    fn a_refusal_that_ends_resumes_above_what_the_other_server_left_on_the_pair() {
        let mut s = State::awaiting_lease();
        s.grant_lease(5_000);
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        w.refreshed(0, refreshed(vec![claim(7, 2, 1)]), &settings(), &mut s);
        assert!(s.refused());
        // Server 7 moved to worker 3; its claim keeps its last ID on ours, ahead of our lease.
        let mut moved = refreshed(vec![claim(7, 3, 2)]);
        moved.left_pairs = vec![LeftPair {
            system_identifier: 7,
            last_id: assemble(9_000, node(2), MAX_SEQUENCE),
        }];
        w.refreshed(REFRESH_MS, moved, &settings(), &mut s);
        // Free again, and above its IDs before any next lease.
        assert!(!s.refused());
        assert_eq!(s.last_ms(), 9_000);
    }

    #[test]
    fn a_claim_put_back_by_a_restore_does_not_forget_a_pair_left() {
        let mut s = State::awaiting_lease();
        s.grant_lease(9_000);
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        // Our row was on worker 1 with a lease: we are on worker 2 now.
        let mut old = claim(ME, 1, 1);
        old.lease_id = assemble(8_000, node(1), MAX_SEQUENCE);
        let (lease_id, left) = w.claim_row(Some(&old), &[], node(2), &s);
        assert_eq!(lease_id, assemble(9_000, node(2), MAX_SEQUENCE));
        assert_eq!(left, vec![old.lease_id]);
        // A restore puts back a row from before the move: the pair left stays.
        let before_move = claim(ME, 2, 2);
        let (_, left) = w.claim_row(Some(&before_move), &[], node(2), &s);
        assert_eq!(left, vec![old.lease_id]);
        // And a worker that starts reads the pairs left from its claim, and the pair its claim
        // was on when that is another one.
        let mut start = at(0, 0);
        start.left_pairs = vec![old.lease_id];
        let (w2, _) = Worker::start(EPOCH, &start, node(2), &mut s);
        assert_eq!(w2.left_pairs, vec![old.lease_id]);
        start.left_pairs.clear();
        start.own_claim = Some(old);
        let (w3, _) = Worker::start(EPOCH, &start, node(2), &mut s);
        assert_eq!(w3.left_pairs, vec![old.lease_id]);
        start.own_claim = None;
        start.left_pairs = vec![old.lease_id];
        let (mut w, _) = Worker::start(EPOCH, &start, node(2), &mut s);
        assert_eq!(
            w.claim_row(Some(&before_move), &[], node(2), &s).1,
            vec![old.lease_id]
        );
    }

    #[test]
    fn a_forward_jump_is_told_from_elapsed_time() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        w.paths_read(0, &[]);
        todos(&mut w, 0, EPOCH, &s);
        assert!(!todos(&mut w, 250, EPOCH + 250, &s)
            .iter()
            .any(|t| matches!(t, Todo::ForwardJump(_))));
        assert!(todos(&mut w, 500, EPOCH + 5_250, &s).contains(&Todo::ForwardJump(4_750)));
    }

    #[test]
    fn a_clock_step_back_is_told_once_and_steps_close_together_once_a_minute() {
        let mut s = State::awaiting_lease();
        let (mut w, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        w.paths_read(0, &[]);
        s.grant_lease(100_000);
        let told = |t: &[Todo]| {
            t.iter()
                .filter_map(|t| match t {
                    Todo::ClockBack { steps, ms } => Some((*steps, *ms)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let _ = s.next(10_000, node(2), 10_000);
        assert_eq!(told(&todos(&mut w, 0, EPOCH + 10_000, &s)), vec![]);
        // Stepped back 3 s: the calls that see it, however many, are one step, told once.
        for now in [7_000, 7_001, 7_002] {
            let _ = s.next(now, node(2), 10_000);
        }
        assert_eq!(
            told(&todos(&mut w, 250, EPOCH + 7_002, &s)),
            vec![(1, 3_000)]
        );
        assert_eq!(told(&todos(&mut w, 500, EPOCH + 7_250, &s)), vec![]);
        // Two more steps within the minute: told together, with the latest's size, a minute
        // after the first.
        let _ = s.next(11_000, node(2), 10_000);
        let _ = s.next(10_500, node(2), 10_000);
        let _ = s.next(12_000, node(2), 10_000);
        let _ = s.next(10_000, node(2), 10_000);
        assert_eq!(told(&todos(&mut w, 30_000, EPOCH + 10_000, &s)), vec![]);
        assert_eq!(
            told(&todos(&mut w, 60_250, EPOCH + 10_000, &s)),
            vec![(2, 2_000)]
        );
        // A worker started again does not tell what its predecessor found.
        let (mut w2, _) = Worker::start(EPOCH, &at(0, 0), node(2), &mut s);
        w2.paths_read(0, &[]);
        assert_eq!(told(&todos(&mut w2, 0, EPOCH + 10_000, &s)), vec![]);
    }
}
