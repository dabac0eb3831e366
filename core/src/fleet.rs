//! The fleet check: two servers that generate with the same datacenter and worker ID issue the
//! same IDs. Every server states a claim, `(datacenter_id, worker_id)` under its PostgreSQL system
//! identifier, in a table that logical replication carries to its peers and that it refreshes
//! while it runs. A server that sees a live claim on its own pair from another system identifier
//! stops issuing until that claim is gone.
//!
//! **Identity** is the system identifier, and nothing else: it is made by initdb, survives
//! restarts and crashes, and a promoted physical standby inherits it from its primary, so a
//! server never conflicts with its own past. Nothing that copies a server's files or objects (a
//! dump, a restore, a schema copy) copies it into another running system. pg_upgrade makes a new
//! one: the upgraded server sees its former claim as another server's, which is no longer
//! refreshed and expires (or which the pg_upgrade recipe retires at once).
//!
//! **Liveness** is judged on this server's own observations (`Liveness`): a claim is live while
//! it has changed here within the expiry, by this server's monotonic clock. A peer rewrites its
//! claim every `REFRESH_MS`, so a live peer's claim keeps changing whatever its clock says; a
//! timestamp another server wrote is never compared with ours. A claim this server has not yet
//! watched for the expiry (after its start) counts as live. While a path that carries the claims
//! is not applying (`PathWatch`), a claim that stopped changing cannot be told from a server that
//! left, and none expires.
//!
//! Each claim also carries the highest ID its server may have issued (`lease_id`, its lease), and
//! a retired server's claim stays as a tombstone (`retired`); a server that moves to another pair
//! keeps the last ID it may have issued on each pair it left (`LeftPair`, the claim's
//! `left_pairs`). A server never issues below the
//! `lease_id` of another server's claim on its own pair, live, expired or retired: a pair handed
//! from one server to another continues above every ID the previous holder issued, however far
//! ahead of the new holder's clock those ran.

use crate::layout::{assemble, decompose, Node, MAX_SEQUENCE, MAX_TIMESTAMP};
use crate::lease::LONGEST_LEASE_MS;

/// How often a running server refreshes its claim.
pub const REFRESH_MS: u64 = 5_000;
/// The smallest expiry that still spans three refreshes, so that a peer's claim does not expire
/// between two of its refreshes.
pub const MIN_EXPIRY_MS: u64 = 3 * REFRESH_MS;

/// One row of the claims table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub system_identifier: i64,
    pub datacenter: u32,
    pub worker: u32,
    /// When its server last refreshed it, in Unix ms by that server's clock: shown to people,
    /// never compared with this server's clock.
    pub last_seen_unix_ms: i64,
    /// Which version of the row this server holds (the row's `xmin` here): a new one at every
    /// refresh of its server that reaches this one.
    pub version: i64,
    /// The highest ID its server may have issued (from its lease), 0 if unknown.
    pub lease_id: i64,
    /// Retired by a DBA (the retire recipe): never a conflict, but still a floor.
    pub retired: bool,
}

impl Claim {
    /// No claim: what the generator's conflict holds while there is none.
    pub const NONE: Claim = Claim {
        system_identifier: 0,
        version: 0,
        datacenter: 0,
        worker: 0,
        last_seen_unix_ms: 0,
        lease_id: 0,
        retired: false,
    };
}

/// Another server's claim on our pair.
fn others_on_our_pair(
    me: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
) -> impl Iterator<Item = &Claim> {
    claims
        .iter()
        .filter(move |c| c.system_identifier != me)
        .filter(move |c| c.datacenter == datacenter && c.worker == worker)
}

/// Another server's live claim on our pair, if any (the most recently refreshed one, by its
/// server's word, for the message). `live` says which claims are live (`Liveness::live`, or
/// every one while claims may be stale).
pub fn conflict(
    me: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
    live: impl Fn(&Claim) -> bool,
) -> Option<Claim> {
    others_on_our_pair(me, datacenter, worker, claims)
        .filter(|c| !c.retired)
        .filter(|c| live(c))
        .max_by_key(|c| c.last_seen_unix_ms)
        .copied()
}

/// How long each claim has been watched unchanged here, by this server's monotonic clock (ms since
/// the lease worker started).
///
/// Only time this server spent watching counts: a gap between two of its own looks longer than
/// `MAX_LOOK_GAP_MS` (its own worker stalled: a lock wait, a machine that froze) counts as that
/// much. A peer whose worker stalled as long as ours would otherwise expire at our first look
/// after the stall, and both would issue on their pair at once.
#[derive(Clone, Debug, Default)]
pub struct Liveness {
    /// (system identifier, version, when this server last looked, how long it watched that
    /// version unchanged)
    seen: Vec<(i64, i64, u64, u64)>,
}

/// The most one gap between two looks of this server counts for (see `Liveness`): two refreshes.
pub const MAX_LOOK_GAP_MS: u64 = 2 * REFRESH_MS;

impl Liveness {
    /// Takes the claims as read at `now_ms`.
    pub fn observe(&mut self, now_ms: u64, claims: &[Claim]) {
        self.seen = claims
            .iter()
            .map(|c| {
                let watched = self
                    .seen
                    .iter()
                    .find(|s| s.0 == c.system_identifier && s.1 == c.version)
                    .map_or(0, |s| s.3 + now_ms.saturating_sub(s.2).min(MAX_LOOK_GAP_MS));
                (c.system_identifier, c.version, now_ms, watched)
            })
            .collect();
    }

    /// Whether `c` has not been watched unchanged here for `expiry_ms` (a claim first seen counts
    /// as changed when it was first seen; one never observed is live). `now_ms` is when the
    /// claims were last observed.
    pub fn live(&self, c: &Claim, now_ms: u64, expiry_ms: u64) -> bool {
        self.seen
            .iter()
            .find(|s| s.0 == c.system_identifier)
            .is_none_or(|s| {
                s.1 != c.version
                    || s.3 + now_ms.saturating_sub(s.2).min(MAX_LOOK_GAP_MS) < expiry_ms
            })
    }
}

/// A pair a server held and left: the last ID it may have issued there (an ID *of that pair*,
/// so its datacenter and worker bits say which), kept in its claim's `left_pairs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeftPair {
    pub system_identifier: i64,
    pub last_id: i64,
}

/// The highest ID that another server, live, expired or retired, may have issued on our pair,
/// whether it holds the pair still or left it (`left`): ours must all be above it. A claim's
/// lease counts one renewal past it ([`one_renewal_past`]). `None` when no such claim knows of
/// one.
pub fn handover_floor(
    me: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
    left: &[LeftPair],
) -> Option<i64> {
    let left_here = left
        .iter()
        .filter(|l| l.system_identifier != me)
        .filter(|l| {
            decompose(l.last_id).is_ok_and(|p| p.datacenter == datacenter && p.worker == worker)
        })
        .map(|l| l.last_id);
    // A claim's lease is an ID of the pair it was issued on, whatever pair its row names: a row
    // that reached this server before its server moved (a path dropped meanwhile), then had its
    // lease raised by the retire recipe's UPDATE here, names its old pair and holds an ID of
    // the new one.
    let leased_here = claims
        .iter()
        .filter(|c| c.system_identifier != me)
        .map(|c| c.lease_id)
        .filter(|&id| {
            decompose(id).is_ok_and(|p| p.datacenter == datacenter && p.worker == worker)
        });
    let leased = others_on_our_pair(me, datacenter, worker, claims)
        .map(|c| c.lease_id)
        .chain(leased_here)
        .filter(|&id| id > 0)
        .map(one_renewal_past);
    left_here.filter(|&id| id > 0).chain(leased).max()
}

/// The claims of other servers that hold our pair, by their row or by their lease (an ID of our
/// pair: see `handover_floor`). A row with no lease yet counts too: its server may have issued
/// since it was written. Whoever issues on our pair after one of them stopped being a conflict
/// (it expired, it was retired) takes the pair over from it: see [`reach_ms`].
pub fn holders_of_our_pair(
    me: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
) -> impl Iterator<Item = &Claim> {
    claims
        .iter()
        .filter(move |c| c.system_identifier != me)
        .filter(move |c| {
            (c.datacenter, c.worker) == (datacenter, worker)
                || (c.lease_id > 0
                    && decompose(c.lease_id)
                        .is_ok_and(|p| (p.datacenter, p.worker) == (datacenter, worker)))
        })
}

/// The furthest timestamp any server of the fleet may have issued by the time this server's
/// clock reads `clock_ms` (ms since the epoch), whatever it did after the last claim of it seen
/// here: no server issues an ID more than its `max_clock_drift` ahead of its own clock
/// (borrowing, a floor raised, a mark followed: `State::next` refuses beyond it). So a server
/// gone by now, whose clock was in sync with this one and whose `max_clock_drift` was at most
/// `max_drift_ms`, issued nothing above it, however far its floor was raised or its borrowing
/// ran after the last claim of it that arrived here (a claims path that stalled first). The
/// floor of a pair taken over (`crate::worker::Worker::refreshed`): the price is IDs up to
/// `max_drift_ms` ahead of the clock after a hand-over, until the clock catches up.
pub fn reach_ms(clock_ms: i64, max_drift_ms: u64) -> u64 {
    (clock_ms.max(0) as u64)
        .saturating_add(max_drift_ms)
        .min(MAX_TIMESTAMP)
}

/// The highest ID a server may have issued whose claim, as seen here, carries the lease `id`:
/// one lease length above it. A lease's row and its claim leave in one commit, so a server lost
/// before its next renewal reached this server (its machine gone, its WAL with it) may have
/// issued under that renewal, which puts the lease at most `LONGEST_LEASE_MS` above the one seen
/// while its clock is behind it (its IDs ahead of its clock, on a floor); with its clock ahead,
/// its IDs are at its clock, which the claim's expiry leaves behind. A pair a server left
/// (`LeftPair`) needs no margin: it was written after the server stopped issuing there.
fn one_renewal_past(id: i64) -> i64 {
    decompose(id).map_or(id, |p| {
        let node = Node::new(p.datacenter.into(), p.worker.into()).expect("a decomposed pair");
        assemble(
            (p.ms + LONGEST_LEASE_MS).min(MAX_TIMESTAMP),
            node,
            MAX_SEQUENCE,
        )
    })
}

/// The pairs a server has left, as its claim carries them (`previous`), after a refresh that
/// finds its row (`old`) on another pair than `now`: that pair joins them with the last ID the
/// server may have issued there (one entry per pair, the highest). A server that moves keeps its
/// floor on the pair it left, for whoever takes it next.
///
/// That last ID is the row's lease, or `floor_ms` (the worker's floor at its start: the mark's)
/// if higher: a restore of an older dump of `_snowflake` lowers the row and the mark together,
/// the worker writes its mark back at once but the row only at the next renewal, and IDs issued
/// between lie above the lowered row.
pub fn left_pairs_after(
    previous: &[i64],
    old: Option<&Claim>,
    now: Node,
    floor_ms: u64,
) -> Vec<i64> {
    let mut left = previous.to_vec();
    let moved = old.filter(|c| (c.datacenter, c.worker) != (now.datacenter(), now.worker()));
    if let Some(c) = moved {
        let ms = decompose(c.lease_id).map_or(0, |p| p.ms).max(floor_ms);
        if let (true, Ok(node)) = (ms > 0, Node::new(c.datacenter.into(), c.worker.into())) {
            let id = assemble(ms.min(MAX_TIMESTAMP), node, MAX_SEQUENCE);
            let same_pair = |&x: &i64| {
                decompose(x).is_ok_and(|p| (p.datacenter, p.worker) == (c.datacenter, c.worker))
            };
            let best = left.iter().copied().filter(same_pair).chain([id]).max();
            left.retain(|x| !same_pair(x));
            left.extend(best);
        }
    }
    left.sort_unstable();
    left
}

/// The pairs left that two lists name, the highest last ID of each pair (sorted): what this
/// server's worker remembers it wrote, merged with what its claim says now, so that a restore
/// that put back an older claim cannot make it forget a pair it left.
pub fn merge_left_pairs(a: &[i64], b: &[i64]) -> Vec<i64> {
    let pair = |id: i64| decompose(id).map(|p| (p.datacenter, p.worker)).ok();
    let mut out: Vec<i64> = Vec::with_capacity(a.len() + b.len());
    for &id in a.iter().chain(b) {
        match out.iter_mut().find(|x| pair(**x) == pair(id)) {
            Some(x) => *x = (*x).max(id),
            None => out.push(id),
        }
    }
    out.sort_unstable();
    out
}

/// Watches this server's own claim for contents it did not write: the proof of a physical copy.
///
/// Only this server writes the row of its own system identifier (its refresh, and the lease
/// that records its last ID there), stamping it with its own `now()` and lease. So a version of
/// that row whose stamp (`last_seen`, `lease_id`) is none this server wrote, found when it looks
/// again, was written by another running server with the same system identifier: a
/// pg_basebackup or snapshot started beside its original, or a standby promoted while its
/// primary still runs. A new version with a stamp of ours is no copy: one of our writes relayed
/// back to us (`origin = any`), a DBA's `retired = true`, a table rewrite. Nor is one whose
/// `last_seen` is at or before that of the row as this worker first found it: a write of an
/// earlier life of this server's (its last one, or an older one) that a peer sends back retired
/// while the server was down, or a restore of a dump puts back. A copy writes after it was made,
/// stamped with its own `now()`: after this worker's start unless the copy's clock is behind by
/// more than the time since (a copy made from a server that started moments before it, with
/// its clock behind, may go unseen until that time has passed). A restore of a dump made in this
/// worker's life more than `STAMPS` writes ago (about 20 minutes) is taken for a copy, refused
/// for `claim_expiry`: a safe mistake. Such a sighting stays a conflict (when the copy's claim
/// is on our pair) for `claim_expiry` after the last one, as a claim is live while it changes
/// here, or longer while claims may be stale here.
#[derive(Clone, Debug, Default)]
pub struct CopyWatch {
    /// The stamps (`last_seen` in Unix ms, `lease_id`) of this server's recent writes of its own
    /// row since the worker started, the last one last.
    stamps: Vec<(i64, i64)>,
    /// The `last_seen` of this server's row as this worker first found it (its earlier life's
    /// last write), once found.
    found_at_start: Option<i64>,
    /// The copy's claim as last found, and when (monotonic ms).
    seen: Option<(Claim, u64)>,
    /// Whether the current sighting was reported (`announce`).
    announced: bool,
}

impl CopyWatch {
    /// How many of this server's writes are remembered: more than a claim's expiry's worth of
    /// refreshes and leases (a relayed echo comes back within seconds).
    const STAMPS: usize = 256;

    /// This server wrote its own row, which now has the stamp of `row`.
    pub fn wrote(&mut self, row: &Claim) {
        if self.stamps.len() == Self::STAMPS {
            self.stamps.remove(0);
        }
        self.stamps.push((row.last_seen_unix_ms, row.lease_id));
    }

    /// This server's own row as read at `now_ms`, before it writes it again (`None`: no row):
    /// at every write of it, the refresh's and the lease's alike (a write of ours over the
    /// copy's version would otherwise hide it). Returns the claim when its stamp is none this
    /// server wrote and later than the row as this worker first found it, which is taken as
    /// this server's (an earlier life's last write): nothing is compared then.
    pub fn observe(&mut self, now_ms: u64, own: Option<Claim>) -> Option<Claim> {
        let found = own?;
        let Some(at_start) = self.found_at_start else {
            self.found_at_start = Some(found.last_seen_unix_ms);
            return None;
        };
        if found.last_seen_unix_ms <= at_start
            || self
                .stamps
                .contains(&(found.last_seen_unix_ms, found.lease_id))
        {
            return None;
        }
        self.seen = Some((found, now_ms));
        Some(found)
    }

    /// Another running server states a claim under this server's system identifier, answering
    /// for itself (a Citus node's answer, whose instance is not this server's: see
    /// [`crate::citus::Whose::Copy`]): a copy, seen at `now_ms`, whatever its row here says.
    pub fn sighted(&mut self, now_ms: u64, claim: Claim) {
        self.seen = Some((claim, now_ms));
    }

    /// The copy's claim, while one was seen within `expiry_ms` before `now_ms`, or at any time
    /// while claims may be stale here (`PathWatch::claims_may_be_stale`: a copy whose claims
    /// stopped arriving cannot be told from one that stopped).
    pub fn copy(&self, now_ms: u64, expiry_ms: u64, claims_may_be_stale: bool) -> Option<Claim> {
        self.seen
            .filter(|(_, at)| claims_may_be_stale || now_ms.saturating_sub(*at) < expiry_ms)
            .map(|(c, _)| c)
    }

    /// The copy's claim once per sighting (a run of `copy` answers that are `Some`), to be
    /// reported; arguments as for `copy`.
    pub fn announce(
        &mut self,
        now_ms: u64,
        expiry_ms: u64,
        claims_may_be_stale: bool,
    ) -> Option<Claim> {
        let copy = self.copy(now_ms, expiry_ms, claims_may_be_stale);
        let first = copy.is_some() && !self.announced;
        self.announced = copy.is_some();
        copy.filter(|_| first)
    }
}

/// One subscription that carries `_snowflake.claims` to this server, as the lease worker reads
/// it at a refresh (`pg_subscription`, `pg_stat_subscription`, `pg_stat_subscription_stats`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathReading {
    pub subscription: String,
    pub enabled: bool,
    /// The pid of its apply worker, if one runs.
    pub apply_pid: Option<i32>,
    /// How long ago its apply worker last received a message, by this server's clock.
    pub silent_ms: Option<u64>,
    /// Apply and table-synchronisation errors counted so far (PostgreSQL 15 and later; `None`
    /// on 14).
    pub errors: Option<i64>,
    /// The state of `_snowflake.claims` in this subscription (`pg_subscription_rel.srsubstate`):
    /// `'s'` once its copy is done and `'r'` once the apply worker has taken the table over (see
    /// [`copied`]). Until then the apply worker skips its changes, however well it runs (and a
    /// copy that keeps failing leaves it so). `'?'` when the subscription lists no table at all
    /// here, so that it may carry the claims unseen.
    pub table_state: char,
    /// The publisher's end of WAL as its last keepalive reported it
    /// (`pg_stat_subscription.latest_end_lsn`), if any: a keepalive comes after everything the
    /// publisher had to send up to that point.
    pub end_lsn: Option<i64>,
    /// The publisher's end of WAL as this server's lease worker asked the publisher itself
    /// (`IDENTIFY_SYSTEM` over the subscription's connection) while its start's gate waits:
    /// everything committed there before is at or below it. `None` where it was not asked or did
    /// not answer (a publisher down or unreachable).
    pub publisher_end: Option<i64>,
    /// Whether the start's gate waits for it at most `CATCH_UP_LIMIT_MS` (a Citus node: its pair
    /// is its Citus group, which Citus gives no other node, so a node that does not answer holds
    /// no start back for long).
    pub limited: bool,
    /// Whether it takes changes whatever server they came from (`origin = any`, PostgreSQL 16 and
    /// later; always so before 16): claims its publisher received from a third server would
    /// arrive relayed, proven only as far as that publisher.
    pub relays: bool,
}

/// Whether a subscription's copy of the claims is done (`PathReading::table_state`): `'r'`
/// (ready), or `'s'` (the copy finished, and the apply worker applies the table's changes from
/// the copy's end on; it marks it `'r'` at the first change it applies past that point). A
/// server stopped right after a copy starts again in `'s'`, and stays so until its apply worker
/// has caught up: a path like any other, not a copy still under way.
pub fn copied(table_state: char) -> bool {
    matches!(table_state, 'r' | 's')
}

/// How long the lease worker waits at start for every claims path to bring the claims up to date
/// (`CatchUp`) before it grants the first lease anyway (with a WARNING naming the paths).
pub const CATCH_UP_LIMIT_MS: u64 = MIN_EXPIRY_MS;

/// Whether every path that brings claims here has brought them up to date since the lease worker
/// started: no ID is issued before the fleet check has looked at claims that fresh, so that a
/// server back after its claim was retired sees the claim of whoever took its pair meanwhile
/// before it issues (its own table holds what arrived before it stopped).
///
/// The proof: the publisher's end of WAL, asked of the publisher after the worker started
/// (`PathReading::publisher_end`, the first answer is the target), and then a keepalive whose
/// end (`end_lsn`, as far as the publisher has sent) is at or past it while the path applies: a
/// keepalive comes after everything sent before it, and the apply worker applies in order. A
/// keepalive alone proves nothing: on 15 the first one after a restart reports where the slot
/// starts, however much the publisher has written since.
///
/// A path that moves towards its target is waited for as long as it moves (a backlog of bulk
/// writes in the publisher's database). The gate ends without proof (`stalled`) once no path it
/// waits for has moved for `CATCH_UP_LIMIT_MS`: a publisher that cannot be asked or sends
/// nothing (down, unreachable), an apply worker that does not apply. A path disabled, or with
/// its copy of the claims not ready, at the first reading is not waited for (it cannot catch
/// up soon; `unproven` names it), nor a Citus node (`PathReading::limited`) past
/// `CATCH_UP_LIMIT_MS`. A server without paths has caught up at once. Once every
/// path has, it stays so: this is about the start.
#[derive(Clone, Debug, Default)]
pub struct CatchUp {
    paths: Vec<Gate>,
    done: bool,
}

#[derive(Clone, Debug)]
struct Gate {
    subscription: String,
    /// The publisher's end of WAL, as first asked.
    target: Option<i64>,
    /// The furthest end a keepalive reported.
    end: Option<i64>,
    /// When it last moved: a target learned, or a further end (monotonic ms).
    moved_at: u64,
    caught_up: bool,
    /// Disabled, or its copy not ready, at the first reading: not waited for.
    unproven: bool,
    /// Waited for at most `CATCH_UP_LIMIT_MS` (`PathReading::limited`), from its first reading.
    limited_since: Option<u64>,
}

impl CatchUp {
    /// Takes a reading of the paths at monotonic `now_ms`; returns whether every one has caught
    /// up (or is not waited for).
    pub fn observe(&mut self, now_ms: u64, readings: &[PathReading]) -> bool {
        if self.done {
            return true;
        }
        let mut all = true;
        for r in readings {
            let i = match self
                .paths
                .iter()
                .position(|g| g.subscription == r.subscription)
            {
                Some(i) => i,
                None => {
                    self.paths.push(Gate {
                        subscription: r.subscription.clone(),
                        target: None,
                        end: None,
                        moved_at: now_ms,
                        caught_up: false,
                        // A subscription that lists no table here (`'?'`) may carry the claims
                        // unseen (pg_upgrade before 17 drops the list): waited for like any.
                        unproven: !r.enabled || !(copied(r.table_state) || r.table_state == '?'),
                        limited_since: r.limited.then_some(now_ms),
                    });
                    self.paths.len() - 1
                }
            };
            let g = &mut self.paths[i];
            if g.target.is_none() && r.publisher_end.is_some() {
                g.target = r.publisher_end;
                g.moved_at = now_ms;
            }
            // Towards a target only: a keepalive's end moves with any publisher's writes, and
            // without a target nothing says the path is on its way to anything.
            if r.end_lsn.is_some() && r.end_lsn > g.end {
                g.end = r.end_lsn;
                if g.target.is_some() {
                    g.moved_at = now_ms;
                }
            }
            let applying = r.enabled
                && r.apply_pid.is_some()
                && (copied(r.table_state) || r.table_state == '?');
            if applying && g.target.is_some_and(|t| r.end_lsn.is_some_and(|e| e >= t)) {
                g.caught_up = true;
            }
            if g.limited_since
                .is_some_and(|t| now_ms.saturating_sub(t) >= CATCH_UP_LIMIT_MS)
            {
                g.unproven = true;
            }
            all &= g.caught_up || g.unproven;
        }
        self.done = all;
        all
    }

    /// Whether no path the gate waits for has moved for `CATCH_UP_LIMIT_MS` by `now_ms`: the
    /// gate ends without proof.
    pub fn stalled(&self, now_ms: u64) -> bool {
        self.paths
            .iter()
            .filter(|g| !g.caught_up && !g.unproven)
            .all(|g| now_ms.saturating_sub(g.moved_at) >= CATCH_UP_LIMIT_MS)
    }

    /// The paths waited for that have not caught up yet, for messages.
    pub fn waiting(&self) -> Vec<&str> {
        self.paths
            .iter()
            .filter(|g| !g.caught_up && !g.unproven)
            .map(|g| g.subscription.as_str())
            .collect()
    }

    /// The paths not waited for (disabled, or their copy not ready, at the first reading; a
    /// limited path past its limit).
    pub fn unproven(&self) -> Vec<&str> {
        self.paths
            .iter()
            .filter(|g| !g.caught_up && g.unproven)
            .map(|g| g.subscription.as_str())
            .collect()
    }
}

/// A path that stopped carrying claims, or started again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathEvent {
    Broke {
        subscription: String,
        why: String,
    },
    Recovered {
        subscription: String,
    },
    /// A path that would relay claims (`PathReading::relays`), said once per path.
    Relays {
        subscription: String,
    },
}

#[derive(Clone, Debug)]
struct Path {
    last: PathReading,
    /// The last apply worker seen, kept across readings that saw none.
    last_pid: Option<i32>,
    /// Readings in a row that showed no apply worker at work on it.
    bad: u32,
    broken: bool,
    /// When it was first seen applying after its last bad reading (monotonic ms).
    healthy_since: Option<u64>,
}

/// Watches the paths (subscriptions) that bring other servers' claims here.
///
/// A peer's claim changes every `REFRESH_MS` while the peer runs. If a claim stops changing here,
/// either its server left or the path that carries it stopped: a subscription disabled, its apply
/// worker failing and restarting (a trigger that raises, a conflict), or stalled (a lock it
/// waits for, a publisher it cannot reach). Expiry is right only in the first case. So a claim
/// expires only while every path has been seen applying for `MIN_EXPIRY_MS`, long enough to have
/// brought a live peer's next refresh: from the worker's start, and again after any bad reading.
/// A path is bad at a reading when it is disabled, its apply worker counted new errors, no apply
/// worker runs or a new one replaced it, or it received nothing for `MIN_EXPIRY_MS` (a live peer
/// sends a change every `REFRESH_MS`). It is *broken* (worth a WARNING) when disabled, failing,
/// or bad at two readings in a row: an apply worker that is starting is bad for one reading only.
///
/// A path that relays (`PathReading::relays`: it takes changes of any origin) is never proven,
/// however well it applies: a claim it brings may have come from a third server through its
/// publisher, whose own path from that server this server cannot watch (A's claim reaching C
/// through B stops changing at C when B's subscription from A stops, while C's path from B
/// applies). So while such a path exists no claim expires here; retiring a claim still works.
#[derive(Clone, Debug, Default)]
pub struct PathWatch {
    paths: Vec<Path>,
}

impl PathWatch {
    /// Takes this refresh's readings at `now_ms` (a monotonic clock); returns what changed.
    pub fn observe(&mut self, now_ms: u64, readings: Vec<PathReading>) -> Vec<PathEvent> {
        let mut events = Vec::new();
        let mut next = Vec::with_capacity(readings.len());
        for r in readings {
            let prev = self
                .paths
                .iter()
                .find(|p| p.last.subscription == r.subscription);
            let new_errors = match (prev.and_then(|p| p.last.errors), r.errors) {
                (Some(before), Some(now)) => now > before,
                _ => false,
            };
            let last_pid = prev.and_then(|p| p.last_pid);
            let replaced = match (last_pid, r.apply_pid) {
                (Some(before), Some(now)) => before != now,
                _ => false,
            };
            let silent = r.silent_ms.is_none_or(|ms| ms >= MIN_EXPIRY_MS);
            let why = if !r.enabled {
                Some("it is disabled".to_string())
            } else if r.table_state == '?' {
                Some("it lists no tables in pg_subscription_rel (as after pg_upgrade, or when made with connect = false), so whether it brings _snowflake.claims is unknown: ALTER SUBSCRIPTION ... REFRESH PUBLICATION WITH (copy_data = false)".to_string())
            } else if !copied(r.table_state) {
                Some(format!(
                    "its copy of _snowflake.claims is not ready (state '{}' in pg_subscription_rel)",
                    r.table_state
                ))
            } else if new_errors {
                Some(format!(
                    "its workers failed ({} apply and copy errors so far)",
                    r.errors.unwrap_or(0)
                ))
            } else if r.apply_pid.is_none() {
                Some("no apply worker runs for it".to_string())
            } else if replaced {
                Some("its apply worker was replaced (it failed or was restarted)".to_string())
            } else if silent {
                Some(match r.silent_ms {
                    Some(ms) => format!("it has received nothing for {} s", ms / 1000),
                    None => "it has received nothing yet".to_string(),
                })
            } else {
                None
            };
            let bad = if why.is_some() {
                prev.map_or(1, |p| p.bad + 1)
            } else {
                0
            };
            if r.relays && !prev.is_some_and(|p| p.last.relays) {
                events.push(PathEvent::Relays {
                    subscription: r.subscription.clone(),
                });
            }
            let was_broken = prev.is_some_and(|p| p.broken);
            // A broken path has had a bad reading (every cause of breaking gives a reason), so it
            // stays broken while its readings stay bad.
            let broken = !r.enabled || new_errors || bad >= 2;
            match (was_broken, broken) {
                (false, true) => events.push(PathEvent::Broke {
                    subscription: r.subscription.clone(),
                    why: why.unwrap_or_default(),
                }),
                (true, false) => events.push(PathEvent::Recovered {
                    subscription: r.subscription.clone(),
                }),
                _ => {}
            }
            let healthy_since = if bad > 0 {
                None
            } else {
                Some(prev.and_then(|p| p.healthy_since).unwrap_or(now_ms))
            };
            next.push(Path {
                last_pid: r.apply_pid.or(last_pid),
                last: r,
                bad,
                broken,
                healthy_since,
            });
        }
        self.paths = next;
        events
    }

    /// Whether a path has not been seen applying for the smallest expiry (since the worker's
    /// start, or since its last bad reading).
    fn failing(p: &Path, now_ms: u64) -> bool {
        p.healthy_since
            .is_none_or(|since| now_ms.saturating_sub(since) < MIN_EXPIRY_MS)
    }

    /// Whether a claim that stopped changing here may belong to a server that still runs: a
    /// path is failing, or one relays (it is never proven, however well it applies: a claim it
    /// brings may have come through a hop this server cannot watch).
    pub fn claims_may_be_stale(&self, now_ms: u64) -> bool {
        self.paths
            .iter()
            .any(|p| p.last.relays || Self::failing(p, now_ms))
    }

    /// The subscriptions whose claims may be stale now, for messages.
    pub fn unproven(&self, now_ms: u64) -> Vec<&str> {
        self.paths
            .iter()
            .filter(|p| p.last.relays || Self::failing(p, now_ms))
            .map(|p| p.last.subscription.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn claim(sysid: i64, dc: u32, w: u32, version: i64) -> Claim {
        Claim {
            system_identifier: sysid,
            datacenter: dc,
            worker: w,
            last_seen_unix_ms: NOW,
            version,
            lease_id: 0,
            retired: false,
        }
    }

    /// Who holds our pair (0, 0) for a take-over (rule 8 of the worker): a row that names it,
    /// with a lease or none yet; a row of another pair whose lease is an ID of ours (a server
    /// that moved away after issuing here); not a row of another pair with no lease (whose
    /// lease 0 would decompose to (0, 0)), nor our own.
    #[test]
    fn the_holders_of_our_pair_are_named_by_their_row_or_by_their_lease() {
        let on_ours_no_lease = claim(7, 0, 0, 1);
        let mut moved_away = claim(8, 3, 1, 1);
        moved_away.lease_id = assemble(5_000, Node::new(0, 0).unwrap(), 3);
        let elsewhere_no_lease = claim(9, 3, 1, 1);
        let ours = claim(1, 0, 0, 1);
        let claims = [on_ours_no_lease, moved_away, elsewhere_no_lease, ours];
        let holders: Vec<i64> = holders_of_our_pair(1, 0, 0, &claims)
            .map(|c| c.system_identifier)
            .collect();
        assert_eq!(holders, vec![7, 8]);
    }

    const NOW: i64 = 1_800_000_000_000;
    const EXPIRY: u64 = 60_000;
    const ALL_LIVE: fn(&Claim) -> bool = |_| true;

    #[test]
    fn own_claims_never_conflict() {
        // A restart, a crash, or a promoted standby: the same system identifier.
        let claims = [claim(42, 1, 5, 1), claim(42, 1, 5, 2)];
        assert_eq!(conflict(42, 1, 5, &claims, ALL_LIVE), None);
    }

    #[test]
    fn a_copy_of_our_objects_is_another_server() {
        // A restored dump or schema copy carries everything in `_snowflake` but not the system
        // identifier: a claim of another system identifier is another server's.
        let other = claim(7, 1, 5, 1);
        assert_eq!(conflict(42, 1, 5, &[other], ALL_LIVE), Some(other));
    }

    #[test]
    fn distinct_pairs_never_conflict() {
        let claims: Vec<Claim> = (0..32)
            .flat_map(|dc: u32| {
                (0..32u32).map(move |w| claim(1000 + (dc * 32 + w) as i64, dc, w, 1))
            })
            .filter(|c| (c.datacenter, c.worker) != (1, 5))
            .collect();
        assert_eq!(conflict(42, 1, 5, &claims, ALL_LIVE), None);
    }

    #[test]
    fn a_live_claim_on_our_pair_from_another_server_conflicts() {
        let older = Claim {
            last_seen_unix_ms: NOW - 10_000,
            ..claim(7, 1, 5, 1)
        };
        let newer = Claim {
            last_seen_unix_ms: NOW - 2_000,
            ..claim(8, 1, 5, 1)
        };
        assert_eq!(
            conflict(42, 1, 5, &[older, newer], ALL_LIVE),
            Some(newer),
            "the most recently seen one"
        );
        assert_eq!(
            conflict(42, 1, 5, &[older, newer], |c| c.system_identifier == 7),
            Some(older)
        );
        assert_eq!(conflict(42, 1, 5, &[older, newer], |_| false), None);
    }

    /// Liveness comes from this server's observations only: a peer whose clock is far behind
    /// (its `last_seen` looks old) but whose claim keeps changing is live, and one whose clock is
    /// far ahead but whose claim stopped changing expires after the expiry of our clock.
    #[test]
    fn a_claim_is_live_while_it_changes_here_whatever_its_clock_says() {
        let mut l = Liveness::default();
        let behind = |v| Claim {
            last_seen_unix_ms: NOW - 3_600_000,
            ..claim(7, 1, 5, v)
        };
        let ahead = |v| Claim {
            last_seen_unix_ms: NOW + 3_600_000,
            ..claim(8, 1, 5, v)
        };
        let mut t = 0;
        let mut v = 1;
        while t < 10 * EXPIRY {
            l.observe(t, &[behind(v), ahead(1)]);
            assert!(
                l.live(&behind(v), t, EXPIRY),
                "a changing claim expired at {t} ms"
            );
            assert_eq!(l.live(&ahead(1), t, EXPIRY), t < EXPIRY, "at {t} ms");
            t += REFRESH_MS;
            v += 1;
        }
    }

    #[test]
    fn every_claim_is_live_until_watched_for_the_expiry() {
        let l = Liveness::default();
        assert!(l.live(&claim(7, 1, 5, 1), 0, EXPIRY), "never observed");
        let mut l = Liveness::default();
        // The worker starts and finds a claim that will never change again.
        for t in (0..EXPIRY).step_by(REFRESH_MS as usize) {
            l.observe(t, &[claim(7, 1, 5, 1)]);
        }
        assert!(l.live(&claim(7, 1, 5, 1), EXPIRY - 1, EXPIRY));
        l.observe(EXPIRY, &[claim(7, 1, 5, 1)]);
        assert!(!l.live(&claim(7, 1, 5, 1), EXPIRY, EXPIRY));
        // It changes again (its server came back): live at once.
        l.observe(EXPIRY + 1, &[claim(7, 1, 5, 2)]);
        assert!(l.live(&claim(7, 1, 5, 2), EXPIRY + 1, EXPIRY));
    }

    /// A stall of this server's own worker does not count as time the claim was watched: after
    /// it, the claim expires only once watched unchanged for the expiry's remainder.
    #[test]
    fn a_stall_of_our_own_looks_counts_as_two_refreshes_at_most() {
        let mut l = Liveness::default();
        l.observe(0, &[claim(7, 1, 5, 1)]);
        // Our worker stalled for a minute; the peer's did too, and it has not written since.
        l.observe(60_000, &[claim(7, 1, 5, 1)]);
        assert!(l.live(&claim(7, 1, 5, 1), 60_000, MIN_EXPIRY_MS));
        // Asked a refresh later, before looking again: the time since counts.
        assert!(!l.live(&claim(7, 1, 5, 1), 60_000 + REFRESH_MS, MIN_EXPIRY_MS));
        l.observe(60_000 + REFRESH_MS, &[claim(7, 1, 5, 1)]);
        assert!(!l.live(&claim(7, 1, 5, 1), 60_000 + REFRESH_MS, MIN_EXPIRY_MS));
    }

    /// A peer that refreshes every REFRESH_MS but misses up to two refreshes in a row (a slow
    /// transaction, a busy disk, replication lag) stays live at every instant under the smallest
    /// expiry allowed, its changes seen here at each of our own refreshes.
    #[test]
    fn the_smallest_expiry_outlives_two_missed_refreshes() {
        for missed in 0..=2u64 {
            let mut l = Liveness::default();
            l.observe(0, &[claim(7, 1, 5, 1)]);
            let next_change = (missed + 1) * REFRESH_MS;
            let mut t = 0;
            while t < next_change {
                l.observe(t, &[claim(7, 1, 5, 1)]);
                assert!(
                    l.live(&claim(7, 1, 5, 1), t, MIN_EXPIRY_MS),
                    "missed {missed}: expired at {t} ms"
                );
                t += REFRESH_MS;
            }
        }
    }

    #[test]
    fn a_stamp_of_our_own_row_we_did_not_write_is_a_copy_until_it_stops() {
        let ours = |version, seen| Claim {
            last_seen_unix_ms: seen,
            lease_id: 1,
            ..claim(42, 1, 5, version)
        };
        let mut w = CopyWatch::default();
        // The row as first found since the worker started: an earlier life's, nothing compared.
        assert_eq!(w.observe(0, Some(ours(9, 50))), None);
        w.wrote(&ours(10, 100));
        // That write sent back by a peer that retired it while this server was down: no copy.
        let retired_then = Claim {
            retired: true,
            ..ours(9, 50)
        };
        assert_eq!(w.observe(REFRESH_MS, Some(retired_then)), None);
        // An older write of that life, restored from a dump or relayed late: no copy.
        assert_eq!(w.observe(REFRESH_MS, Some(ours(8, 40))), None);
        assert_eq!(w.observe(REFRESH_MS, Some(ours(10, 100))), None);
        assert_eq!(
            w.observe(REFRESH_MS, None),
            None,
            "a row deleted is no copy"
        );
        w.wrote(&ours(11, 200));
        // The lease recorded its ID (a write of ours).
        w.wrote(&Claim {
            lease_id: 2,
            ..ours(12, 200)
        });
        // An earlier write of ours relayed back (origin = any), in a new version: no copy.
        assert_eq!(w.observe(REFRESH_MS, Some(ours(15, 100))), None);
        // A DBA retired our claim, or a rewrite of the table: our stamp, no copy.
        let retired = Claim {
            retired: true,
            ..ours(16, 200)
        };
        assert_eq!(w.observe(REFRESH_MS, Some(retired)), None);
        // A stamp we never wrote, after this worker's start, even older than our last write
        // (a copy whose clock is behind ours): another server with our system identifier.
        let behind = ours(16, 150);
        assert_eq!(w.observe(REFRESH_MS, Some(behind)), Some(behind));
        let copy = ours(13, 250);
        assert_eq!(w.observe(2 * REFRESH_MS, Some(copy)), Some(copy));
        w.wrote(&ours(14, 300));
        assert_eq!(w.announce(2 * REFRESH_MS, EXPIRY, false), Some(copy));
        assert_eq!(w.announce(3 * REFRESH_MS, EXPIRY, false), None, "once");
        assert_eq!(
            w.copy(2 * REFRESH_MS + EXPIRY - 1, EXPIRY, false),
            Some(copy)
        );
        assert_eq!(w.observe(3 * REFRESH_MS, Some(ours(14, 300))), None);
        assert_eq!(
            w.copy(2 * REFRESH_MS + EXPIRY, EXPIRY, true),
            Some(copy),
            "a path that does not apply may hide the copy's next claims"
        );
        assert_eq!(
            w.copy(2 * REFRESH_MS + EXPIRY, EXPIRY, false),
            None,
            "the copy stopped"
        );
        assert_eq!(w.announce(2 * REFRESH_MS + EXPIRY, EXPIRY, false), None);
        // Seen again later: reported again.
        w.observe(100 * REFRESH_MS, Some(ours(20, 900)));
        assert!(w.announce(100 * REFRESH_MS, EXPIRY, false).is_some());
    }

    /// A copy a Citus node answered for (`sighted`) is a copy as much as one found in our own
    /// row: reported once, and held for the expiry after the sighting, whatever its stamp (here
    /// one this server wrote).
    #[test]
    fn a_copy_sighted_elsewhere_is_a_copy_for_the_expiry() {
        let copy = Claim {
            lease_id: 1,
            ..claim(42, 1, 5, 3)
        };
        let mut w = CopyWatch::default();
        w.observe(0, Some(copy));
        w.wrote(&copy);
        assert_eq!(w.copy(0, EXPIRY, false), None);
        w.sighted(REFRESH_MS, copy);
        assert_eq!(w.announce(REFRESH_MS, EXPIRY, false), Some(copy));
        assert_eq!(w.announce(2 * REFRESH_MS, EXPIRY, false), None, "once");
        assert_eq!(w.copy(REFRESH_MS + EXPIRY - 1, EXPIRY, false), Some(copy));
        assert_eq!(w.copy(REFRESH_MS + EXPIRY, EXPIRY, false), None);
    }

    /// A server that moves from (1, 5) keeps the last ID it may have issued there in its claim
    /// (`left_pairs`): whoever takes (1, 5) next continues above it.
    #[test]
    fn a_pair_moved_away_from_stays_a_floor() {
        let node = |w: i64| Node::new(1, w).unwrap();
        let last = |ms, w| assemble(ms, node(w), MAX_SEQUENCE);
        // Server 7's row is on (1, 5) with its lease; its refresh now runs on (1, 6).
        let on5 = Claim {
            lease_id: last(9_000, 5),
            ..claim(7, 1, 5, 1)
        };
        let left = left_pairs_after(&[], Some(&on5), node(6), 0);
        assert_eq!(left, vec![last(9_000, 5)]);
        // On to (1, 7): both kept.
        let on6 = Claim {
            lease_id: last(9_500, 6),
            ..claim(7, 1, 6, 2)
        };
        let left = left_pairs_after(&left, Some(&on6), node(7), 0);
        assert_eq!(left, vec![last(9_000, 5), last(9_500, 6)]);
        // Back on (1, 5) and away again: one entry for it, the highest, on its own pair's bits
        // (the row's lease_id may carry the pair before, GREATEST across a move).
        let on5_again = Claim {
            lease_id: last(12_000, 6),
            ..claim(7, 1, 5, 3)
        };
        let left = left_pairs_after(&left, Some(&on5_again), node(6), 0);
        assert_eq!(left, vec![last(9_500, 6), last(12_000, 5)]);
        // A refresh on the same pair adds nothing, nor does a move before any lease.
        assert_eq!(left_pairs_after(&left, Some(&on6), node(6), 0), left);
        assert_eq!(left_pairs_after(&[], Some(&on5), node(5), 0), vec![]);
        let unleased = Claim { lease_id: 0, ..on5 };
        assert_eq!(left_pairs_after(&[], Some(&unleased), node(6), 0), vec![]);
        // A row lowered by a restore (the mark written back already): the floor counts.
        assert_eq!(
            left_pairs_after(&[], Some(&on5), node(6), 9_700),
            vec![last(9_700, 5)]
        );
        assert_eq!(
            left_pairs_after(&[], Some(&unleased), node(6), 9_700),
            vec![last(9_700, 5)]
        );
        // Two lists merged: one entry per pair, the highest.
        assert_eq!(
            merge_left_pairs(&[last(9_000, 5)], &[last(12_000, 5), last(100, 6)]),
            vec![last(100, 6), last(12_000, 5)]
        );
        let lefts: Vec<LeftPair> = left
            .iter()
            .map(|&last_id| LeftPair {
                system_identifier: 7,
                last_id,
            })
            .collect();
        let now_on6 = claim(7, 1, 6, 4);
        assert_eq!(conflict(42, 1, 5, &[now_on6], ALL_LIVE), None);
        assert_eq!(
            handover_floor(42, 1, 5, &[now_on6], &lefts),
            Some(last(12_000, 5))
        );
        assert_eq!(handover_floor(42, 1, 7, &[], &lefts), None);
        // A claim on the pair that never held a lease is no floor.
        assert_eq!(handover_floor(42, 1, 6, &[claim(8, 1, 6, 1)], &[]), None);
        assert_eq!(
            handover_floor(7, 1, 5, &[], &lefts),
            None,
            "a server's own past is its mark's business"
        );
    }

    /// Simulator seed 76941870213800: a server issuing on a floor ahead of its clock renewed its
    /// lease, and its machine was lost before that renewal's claim left. The pair's next holder
    /// saw only the lease before: it starts one lease length above it, not one ID above.
    #[test]
    fn a_claim_is_a_floor_one_renewal_past_its_lease() {
        let pair = Node::new(1, 5).unwrap();
        let seen = assemble(511_337_829_343, pair, MAX_SEQUENCE);
        // What the lost renewal let it issue: up to one lease length above the lease seen.
        let issued = assemble(511_337_829_343 + LONGEST_LEASE_MS, pair, MAX_SEQUENCE);
        let gone = Claim {
            lease_id: seen,
            ..claim(8, 1, 5, 1)
        };
        let floor = handover_floor(42, 1, 5, &[gone], &[]).unwrap();
        assert!(floor >= issued, "{floor} is below {issued}");
        assert_eq!(
            decompose(floor).unwrap().ms,
            511_337_829_343 + LONGEST_LEASE_MS
        );
        // A pair the server left is exact: it stopped issuing there before it wrote it.
        let left = LeftPair {
            system_identifier: 8,
            last_id: seen,
        };
        assert_eq!(handover_floor(42, 1, 5, &[], &[left]), Some(seen));
        // Near the end of the timestamp range the margin stops at its last millisecond.
        let late = Claim {
            lease_id: assemble(MAX_TIMESTAMP - 10, pair, 0),
            ..claim(8, 1, 5, 1)
        };
        assert_eq!(
            handover_floor(42, 1, 5, &[late], &[]),
            Some(assemble(MAX_TIMESTAMP, pair, MAX_SEQUENCE))
        );
    }

    /// An ID of 0 is no ID: a pair left with 0 (nothing issued there) is no floor, even on the
    /// pair (0, 0), where 0 decomposes to that pair. `None`, as when nothing is known.
    #[test]
    fn a_pair_left_with_no_id_is_no_floor() {
        let nothing = LeftPair {
            system_identifier: 8,
            last_id: 0,
        };
        assert_eq!(handover_floor(42, 0, 0, &[], &[nothing]), None);
        assert_eq!(
            handover_floor(42, 0, 0, &[claim(8, 0, 0, 1)], &[nothing]),
            None,
            "nor a claim that never held a lease"
        );
        // The smallest ID of the pair is one.
        let one = LeftPair {
            last_id: 1,
            ..nothing
        };
        assert_eq!(handover_floor(42, 0, 0, &[], &[nothing, one]), Some(1));
    }

    #[test]
    fn a_retired_claim_never_conflicts_but_is_a_floor() {
        let tombstone = Claim {
            lease_id: 9_000_000,
            retired: true,
            ..claim(7, 1, 5, 1)
        };
        let expired = Claim {
            lease_id: 5_000_000,
            ..claim(8, 1, 5, 1)
        };
        let other_pair = Claim {
            lease_id: 99_000_000,
            ..claim(9, 1, 6, 1)
        };
        let mine = Claim {
            lease_id: 77_000_000,
            ..claim(42, 1, 5, 1)
        };
        let claims = [tombstone, expired, other_pair, mine];
        assert_eq!(
            conflict(42, 1, 5, &claims, |c| c.system_identifier != 8),
            None
        );
        assert_eq!(
            handover_floor(42, 1, 5, &claims, &[]),
            Some(one_renewal_past(9_000_000))
        );
        assert_eq!(handover_floor(42, 2, 5, &claims, &[]), None);
        // A live claim is both: a conflict now, and a floor once it is gone.
        let live = Claim {
            lease_id: 12_000_000,
            ..claim(10, 1, 5, 1)
        };
        assert!(conflict(42, 1, 5, &[live], ALL_LIVE).is_some());
        assert_eq!(
            handover_floor(42, 1, 5, &[live, tombstone], &[]),
            Some(one_renewal_past(12_000_000))
        );
        // A row that arrived before its server moved to (1, 5), retired here by the recipe's
        // UPDATE with the last ID it issued there: the ID's own pair counts.
        let last = assemble(20_000, Node::new(1, 5).unwrap(), MAX_SEQUENCE);
        let stale = Claim {
            lease_id: last,
            retired: true,
            ..claim(11, 1, 6, 1)
        };
        assert_eq!(
            handover_floor(42, 1, 5, &[stale], &[]),
            Some(one_renewal_past(last))
        );
        assert_eq!(handover_floor(42, 2, 5, &[stale], &[]), None);
    }

    proptest! {
        /// Whatever the claims, a conflict is always someone else's live claim on our pair.
        #[test]
        fn a_conflict_is_always_someone_elses_live_claim_on_our_pair(
            rows in proptest::collection::vec((0i64..6, 0u32..3, 0u32..3, any::<bool>()), 0..20),
            me in 0i64..6,
        ) {
            let claims: Vec<Claim> = rows.iter().map(|&(s, d, w, r)| Claim { retired: r, ..claim(s, d, w, 1) }).collect();
            let live = |c: &Claim| c.system_identifier % 2 == 0;
            let got = conflict(me, 1, 1, &claims, live);
            let expected_any = claims.iter().any(|c| c.system_identifier != me
                && (c.datacenter, c.worker) == (1, 1) && !c.retired && live(c));
            prop_assert_eq!(got.is_some(), expected_any);
            if let Some(c) = got {
                prop_assert!(c.system_identifier != me && !c.retired && live(&c));
                prop_assert_eq!((c.datacenter, c.worker), (1, 1));
            }
        }

        /// A claim is live exactly while it changed here within the expiry: whatever the
        /// sequence of changes and silences a peer's claim goes through, at every refresh of
        /// ours `live` equals "the last change (or the first sight) is less than the expiry ago".
        #[test]
        fn liveness_is_the_time_since_the_last_change_here(
            changes in proptest::collection::vec(any::<bool>(), 1..60),
            expiry_steps in 3u64..12,
        ) {
            let expiry = expiry_steps * REFRESH_MS;
            let mut l = Liveness::default();
            let mut version = 0;
            let mut last_change = 0;
            for (i, &changed) in changes.iter().enumerate() {
                let t = i as u64 * REFRESH_MS;
                if changed || i == 0 {
                    version += 1;
                    last_change = t;
                }
                let c = claim(7, 1, 5, version);
                l.observe(t, &[c]);
                prop_assert_eq!(l.live(&c, t, expiry), t - last_change < expiry, "at {} ms", t);
            }
        }
    }

    fn reading(pid: Option<i32>, silent_ms: Option<u64>, errors: Option<i64>) -> PathReading {
        PathReading {
            subscription: "claims_from_b".into(),
            enabled: true,
            apply_pid: pid,
            silent_ms,
            errors,
            table_state: 'r',
            end_lsn: Some(100),
            publisher_end: None,
            limited: false,
            relays: false,
        }
    }

    #[test]
    fn a_path_that_relays_is_said_once_and_never_proven() {
        let mut w = PathWatch::default();
        let any = PathReading {
            relays: true,
            ..reading(Some(7), Some(10), Some(0))
        };
        let events = w.observe(0, vec![any.clone()]);
        assert!(
            matches!(&events[..], [PathEvent::Relays { .. }]),
            "{events:?}"
        );
        assert_eq!(w.observe(REFRESH_MS, vec![any.clone()]), vec![]);
        // However long it applies, it never proves a claim that stopped changing to be gone.
        for i in 2..100 {
            assert_eq!(w.observe(i * REFRESH_MS, vec![any.clone()]), vec![]);
            assert!(w.claims_may_be_stale(i * REFRESH_MS));
            assert_eq!(w.unproven(i * REFRESH_MS), vec!["claims_from_b"]);
        }
        // The same subscription made with origin = none, applying all along: proven.
        let direct = PathReading {
            relays: false,
            ..any
        };
        w.observe(100 * REFRESH_MS, vec![direct]);
        assert!(!w.claims_may_be_stale(100 * REFRESH_MS));
    }

    #[test]
    fn a_path_catches_up_once_a_keepalive_reaches_the_end_its_publisher_gave() {
        assert!(CatchUp::default().observe(0, &[]), "no paths: at once");
        let mut c = CatchUp::default();
        let at = |end: Option<i64>, asked: Option<i64>, pid: Option<i32>| PathReading {
            end_lsn: end,
            publisher_end: asked,
            ..reading(pid, Some(10), Some(0))
        };
        // A keepalive without the publisher's answer proves nothing, however it moves (on 15
        // the first one after a restart is where the slot starts).
        assert!(!c.observe(0, &[at(None, None, Some(7))]));
        assert!(!c.observe(1, &[at(Some(100), None, Some(7))]));
        assert!(!c.observe(2, &[at(Some(200), None, Some(7))]));
        assert!(!c.stalled(CATCH_UP_LIMIT_MS - 1));
        assert!(c.stalled(CATCH_UP_LIMIT_MS), "no target: not on its way");
        // The publisher answers 500: below it, or without an apply worker, not yet.
        assert!(!c.observe(3, &[at(Some(200), Some(500), Some(7))]));
        assert!(
            !c.stalled(CATCH_UP_LIMIT_MS),
            "learning the target is a move"
        );
        assert!(!c.observe(4, &[at(Some(499), Some(600), Some(7))]));
        assert!(!c.observe(5, &[at(Some(500), Some(600), None)]));
        assert_eq!(c.waiting(), vec!["claims_from_b"]);
        // Disabled for a while: not caught up meanwhile.
        let off = PathReading {
            enabled: false,
            ..at(Some(500), Some(600), Some(7))
        };
        assert!(!c.observe(6, std::slice::from_ref(&off)));
        // The first answer is the target; a later one changes nothing.
        assert!(c.observe(7, &[at(Some(500), Some(600), Some(7))]));
        // A path disabled (or not copied) at the first reading holds no start back, named.
        let mut d = CatchUp::default();
        assert!(d.observe(0, &[off]));
        assert_eq!(d.unproven(), vec!["claims_from_b"]);
        // Sticky: a path that breaks later is the fleet check's business, not the start's.
        assert!(c.observe(8, &[at(None, None, None)]));
        // A server stopped right after the claims were copied starts in 's' (the copy done,
        // the apply worker not yet past it), its publisher down: it waits like any other path.
        let synced = |end: Option<i64>, asked: Option<i64>, pid: Option<i32>| PathReading {
            table_state: 's',
            ..at(end, asked, pid)
        };
        let mut c = CatchUp::default();
        assert!(!c.observe(0, &[synced(None, None, Some(7))]));
        assert!(!c.observe(1, &[synced(None, None, None)]));
        assert!(c.observe(2, &[synced(Some(60), Some(60), Some(8))]));
        // A subscription that lists no table here may carry the claims unseen: waited for.
        let unlisted = |end: Option<i64>| PathReading {
            table_state: '?',
            ..at(end, Some(60), Some(8))
        };
        let mut c = CatchUp::default();
        assert!(!c.observe(0, &[unlisted(Some(10))]));
        assert!(c.unproven().is_empty());
        assert!(c.observe(1, &[unlisted(Some(60))]));
        // A Citus node that does not answer holds the start back at most the limit.
        let node = PathReading {
            limited: true,
            ..at(None, Some(1), None)
        };
        let mut c = CatchUp::default();
        assert!(!c.observe(0, std::slice::from_ref(&node)));
        assert!(!c.observe(CATCH_UP_LIMIT_MS - 1, std::slice::from_ref(&node)));
        assert!(c.observe(CATCH_UP_LIMIT_MS, std::slice::from_ref(&node)));
        assert_eq!(c.unproven(), vec!["claims_from_b"]);
        // And the fleet check takes it for a copied table.
        let mut w = PathWatch::default();
        w.observe(0, vec![synced(Some(1), None, Some(7))]);
        assert_eq!(
            w.observe(REFRESH_MS, vec![synced(Some(2), None, Some(7))]),
            vec![]
        );
    }

    /// The gate's stall and its list of the paths it waits for count only those paths: one that
    /// caught up, or that is not waited for (`unproven`), neither holds the stall back however
    /// lately it moved, nor is named as waited for.
    #[test]
    fn only_the_paths_waited_for_stall_the_gate_or_are_named_waiting() {
        let path = |name: &str, enabled: bool, end: i64| PathReading {
            subscription: name.into(),
            enabled,
            end_lsn: Some(end),
            publisher_end: Some(60),
            ..reading(Some(7), Some(10), Some(0))
        };
        // "stuck" has no target and never moves; "done" catches up, and "off" (disabled at the
        // first reading) keeps moving, both long after "stuck" last moved.
        let stuck = PathReading {
            publisher_end: None,
            ..path("stuck", true, 10)
        };
        let mut c = CatchUp::default();
        assert!(!c.observe(
            0,
            &[
                stuck.clone(),
                path("done", true, 10),
                path("off", false, 10)
            ]
        ));
        let late = CATCH_UP_LIMIT_MS - 1;
        assert!(!c.observe(
            late,
            &[
                stuck.clone(),
                path("done", true, 60),
                path("off", false, 50)
            ]
        ));
        assert_eq!(c.waiting(), vec!["stuck"]);
        assert_eq!(c.unproven(), vec!["off"]);
        assert!(
            c.stalled(CATCH_UP_LIMIT_MS),
            "the only path waited for has not moved for the limit"
        );
    }

    #[test]
    fn a_path_that_applies_proves_itself_after_the_smallest_expiry() {
        let mut w = PathWatch::default();
        assert!(!w.claims_may_be_stale(0), "no path: nothing can be stale");
        // The apply worker is starting at the first reading: bad once, not broken.
        assert_eq!(w.observe(0, vec![reading(None, None, Some(0))]), vec![]);
        assert!(w.claims_may_be_stale(0));
        let mut t = REFRESH_MS;
        assert_eq!(
            w.observe(t, vec![reading(Some(7), Some(100), Some(0))]),
            vec![]
        );
        let first_good = t;
        while t < first_good + MIN_EXPIRY_MS {
            assert!(
                w.claims_may_be_stale(t),
                "stale {} ms after the first good reading",
                t - first_good
            );
            t += REFRESH_MS;
            w.observe(t, vec![reading(Some(7), Some(1_000), Some(0))]);
        }
        assert!(!w.claims_may_be_stale(t));
    }

    #[test]
    fn a_failing_apply_worker_breaks_the_path_until_it_has_applied_again_for_the_expiry() {
        let mut w = PathWatch::default();
        for t in 0..5 {
            w.observe(t * REFRESH_MS, vec![reading(Some(7), Some(500), Some(0))]);
        }
        let mut t = 5 * REFRESH_MS;
        assert!(!w.claims_may_be_stale(t));
        // A trigger that raises: the worker fails, the launcher starts another every 5 s.
        let events = w.observe(t, vec![reading(Some(8), Some(500), Some(1))]);
        assert!(
            matches!(&events[..], [PathEvent::Broke { why, .. }] if why.contains("failed")),
            "{events:?}"
        );
        assert!(w.claims_may_be_stale(t));
        for pid in [None, Some(9), None, Some(10)] {
            t += REFRESH_MS;
            assert_eq!(
                w.observe(t, vec![reading(pid, Some(500), Some(1))]),
                vec![],
                "broken once, told once"
            );
            assert!(w.claims_may_be_stale(t));
        }
        // Fixed: the worker stays.
        t += REFRESH_MS;
        let events = w.observe(t, vec![reading(Some(11), Some(200), Some(1))]);
        assert_eq!(events, vec![], "a new worker is still a replaced one");
        t += REFRESH_MS;
        let events = w.observe(t, vec![reading(Some(11), Some(200), Some(1))]);
        assert_eq!(
            events,
            vec![PathEvent::Recovered {
                subscription: "claims_from_b".into()
            }]
        );
        let healthy = t;
        while t < healthy + MIN_EXPIRY_MS {
            assert!(w.claims_may_be_stale(t));
            t += REFRESH_MS;
            w.observe(t, vec![reading(Some(11), Some(200), Some(1))]);
        }
        assert!(!w.claims_may_be_stale(t));
    }

    /// A copy of the claims table that has not finished (or keeps failing on a duplicate key):
    /// the apply worker runs and receives, and skips every change of the table meanwhile.
    #[test]
    fn a_claims_table_not_yet_copied_holds_expiry_back() {
        let mut w = PathWatch::default();
        let copying = PathReading {
            table_state: 'd',
            ..reading(Some(7), Some(100), Some(0))
        };
        w.observe(0, vec![copying.clone()]);
        let events = w.observe(REFRESH_MS, vec![copying.clone()]);
        assert!(
            matches!(&events[..], [PathEvent::Broke { why, .. }] if why.contains("not ready (state 'd'")),
            "{events:?}"
        );
        assert!(w.claims_may_be_stale(50 * REFRESH_MS));
        let failing = PathReading {
            errors: Some(3),
            ..copying
        };
        assert_eq!(w.observe(2 * REFRESH_MS, vec![failing]), vec![]);
        assert!(w.claims_may_be_stale(2 * REFRESH_MS));
    }

    /// A subscription that lists no tables here (pg_upgrade before 17 drops its rows in
    /// `pg_subscription_rel`; `connect = false` never made them) may carry the claims unseen:
    /// watched, and bad until it lists them.
    #[test]
    fn a_subscription_that_lists_no_tables_holds_expiry_back() {
        let mut w = PathWatch::default();
        let unknown = PathReading {
            table_state: '?',
            ..reading(Some(7), Some(100), Some(0))
        };
        w.observe(0, vec![unknown.clone()]);
        let events = w.observe(REFRESH_MS, vec![unknown]);
        assert!(
            matches!(&events[..], [PathEvent::Broke { why, .. }] if why.contains("lists no tables")),
            "{events:?}"
        );
        assert!(w.claims_may_be_stale(50 * REFRESH_MS));
    }

    #[test]
    fn disabled_or_stalled_paths_break() {
        let mut w = PathWatch::default();
        w.observe(0, vec![reading(Some(7), Some(10), None)]);
        let off = PathReading {
            enabled: false,
            apply_pid: None,
            ..reading(None, None, None)
        };
        let events = w.observe(REFRESH_MS, vec![off]);
        assert!(
            matches!(&events[..], [PathEvent::Broke { why, .. }] if why.contains("disabled")),
            "{events:?}"
        );

        // Waiting for a lock the table's owner holds: the same worker, receiving nothing.
        let mut w = PathWatch::default();
        w.observe(0, vec![reading(Some(7), Some(10), None)]);
        assert_eq!(
            w.observe(
                REFRESH_MS,
                vec![reading(Some(7), Some(MIN_EXPIRY_MS), None)]
            ),
            vec![]
        );
        let events = w.observe(
            2 * REFRESH_MS,
            vec![reading(Some(7), Some(MIN_EXPIRY_MS + REFRESH_MS), None)],
        );
        assert!(
            matches!(&events[..], [PathEvent::Broke { why, .. }] if why.contains("received nothing for 20 s")),
            "{events:?}"
        );
    }

    proptest! {
        /// Safety: after any bad reading of any path, claims stay "may be stale" for at least
        /// the smallest expiry, whatever follows. Liveness: a path whose every reading for that
        /// long was good no longer holds claims back.
        #[test]
        fn a_bad_reading_holds_expiry_back_for_the_smallest_expiry(
            kinds in proptest::collection::vec(0u8..6, 1..40),
        ) {
            let mut w = PathWatch::default();
            let mut last_bad: Option<u64> = None;
            let mut first_good_after_bad: Option<u64> = None;
            let mut pid = 100;
            for (i, k) in kinds.iter().enumerate() {
                let t = i as u64 * REFRESH_MS;
                let (r, bad) = match k {
                    0 => (reading(None, None, Some(0)), true),
                    1 => { pid += 1; (reading(Some(pid), Some(10), Some(0)), i > 0) }
                    2 => (reading(Some(pid), Some(MIN_EXPIRY_MS * 2), Some(0)), true),
                    3 => (PathReading { enabled: false, ..reading(Some(pid), Some(10), Some(0)) }, true),
                    _ => (reading(Some(pid), Some(10), Some(0)), false),
                };
                // A new pid counts as bad only if a worker was seen before (k == 1 above is an
                // approximation: treat every new pid after the first reading as bad).
                w.observe(t, vec![r]);
                if bad {
                    last_bad = Some(t);
                    first_good_after_bad = None;
                } else if first_good_after_bad.is_none() {
                    first_good_after_bad = Some(t);
                }
                let stale = w.claims_may_be_stale(t);
                if let Some(b) = last_bad {
                    if t < b + MIN_EXPIRY_MS {
                        prop_assert!(stale, "a bad reading at {b} ms and not stale at {t} ms");
                    }
                }
                if i == 0 && !bad {
                    prop_assert!(stale, "a path never seen applying for the expiry");
                }
                if let Some(g) = first_good_after_bad {
                    if t >= g + MIN_EXPIRY_MS && (last_bad.is_none() || g > last_bad.unwrap()) {
                        prop_assert!(!stale, "good since {g} ms and still stale at {t} ms");
                    }
                }
            }
        }
    }
}
