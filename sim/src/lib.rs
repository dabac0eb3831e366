//! A deterministic simulator of snowflake's protocols (TigerBeetle's VOPR and FoundationDB's
//! simulator are the models): a fleet of simulated servers, each running the core's own
//! generator ([`State`]) and lease worker ([`Worker`]), the very state machines the extension
//! runs, against a simulated world of clocks, crashes, commits, replication and DBAs.
//!
//! A schedule is a list of events drawn from one seeded PRNG, with fault rates drawn from the
//! same seed (swarm testing: some schedules are calm, some are storms). After every event the
//! world checks its invariants:
//!
//! * **no ID is issued twice** in the fleet, except where docs/operations.md "Guarantees and
//!   their limits" and docs/multi-writer.md name the case (`Excuse`);
//! * **every ID of a server is above every ID it issued before**, across crashes, restarts,
//!   failovers and restores (a server's *lineage*), and above every value of its mark that
//!   someone else set and its worker has read (docs/operations.md: such a value is a floor);
//! * **the read horizon never passes an ID whose transaction may still commit**: at every
//!   `snowflake_horizon()`, no ID of a transaction still open or prepared is at or below it,
//!   across crashes (prepared transactions survive them, the prepared table does not);
//! * **liveness**: once every fault has ended and the fleet is set up as the docs say (distinct
//!   pairs, paths applying, servers up), every server issues again within `RESUME_MS`.
//!
//! Where the docs prescribe a remedy (a failover from a standby that lacked the last lease: the
//! raise-mark recipe), the world applies it as written, and then no ID may repeat.
//!
//! Also in the world: clocks that step and clocks that slew (a wrong rate, the monotonic clock
//! with it); the epoch moved earlier or later; claims paths that relay (`origin = any`);
//! physical copies started beside their original (a pg_basebackup or a snapshot, or a standby
//! promoted while its primary runs on, unfenced), which keep its system identifier and pair. The
//! docs say never to let a copy issue IDs for shared data, so repeats of a copy's IDs are
//! excused; everything else is checked: the other servers' IDs, the original's own lineage, the
//! copy's start above what its original had issued, and the original's return to IDs once the
//! copy is stopped.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use snowflake_core::fleet::{
    handover_floor, merge_left_pairs, Claim, LeftPair, PathReading, REFRESH_MS,
};
use snowflake_core::generator::FloorError;
use snowflake_core::generator::{GenError, State, Step};
use snowflake_core::horizon::{
    enter, enter_survivors, hold, purge, read as read_horizon, Prepared, EMPTY,
};
use snowflake_core::layout::{assemble, decompose, Node, MAX_SEQUENCE};
use snowflake_core::lease::stands_above;
use snowflake_core::worker::{AtStart, GateEnd, Refreshed, Settings, Standbys, Todo, Worker};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

/// Twitter's epoch, the default.
pub const EPOCH: i64 = 1_288_834_974_657;
/// Real time when a schedule starts (Unix ms, in 2027).
const T0: i64 = 1_800_000_000_000;
/// The epochs a server may be restarted with: the default, a day earlier, an hour later.
const EPOCHS: [i64; 3] = [EPOCH, EPOCH - 86_400_000, EPOCH + 3_600_000];
/// The pairs servers are given: fewer than servers can hold, so that pairs are shared by
/// mistake and handed over.
const PAIRS: [(i64, i64); 5] = [(0, 0), (0, 1), (1, 0), (3, 7), (31, 31)];
/// How long after every fault has ended every server must issue again: a start's gate (15 s),
/// a claim's expiry after a peer moved away (15 s), a refresh (5 s), and room.
pub const RESUME_MS: u64 = 45_000;
/// The length of the calm tail that checks liveness.
const TAIL_MS: u64 = 60_000;
/// How many committed states of a server are kept, for standbys and point-in-time recovery.
const HISTORY: usize = 48;

/// One event of a schedule. Server numbers are taken modulo the fleet's size; an event that
/// does not apply to the world as it is (a call on a server that is down) changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ev {
    /// Real time advances by this many ms (every clock with it); replication delivers.
    Advance(u16),
    /// A backend of the server calls `snowflake_nextval()` in its transaction (one begins if
    /// none is open).
    Call(u8, u8),
    /// The server's lease worker runs until it naps or waits for a commit.
    Tick(u8),
    /// The server's pending lease commit is flushed (and acknowledged).
    Flush(u8),
    /// The server's clock steps by this many ms (back when negative).
    Step(u8, i64),
    /// The server crashes (`pg_ctl stop -m immediate`): shared memory and unflushed work lost.
    Crash(u8),
    /// The server starts, if it is down.
    Start(u8),
    /// The server is restarted cleanly with another pair (index into `PAIRS`).
    Move(u8, u8),
    /// The claims path from the first server to the second stops applying.
    Stall(u8, u8),
    /// That path applies again (and is made again if it was dropped).
    Heal(u8, u8),
    /// That subscription is dropped.
    Drop(u8, u8),
    /// A dump of the server's own `_snowflake`, taken this many commits ago, is restored over it
    /// with `--clean` while it runs (its mark and its own claim lowered together).
    RestoreOwn(u8, u8),
    /// A DBA's `setval` moves the server's mark by this many ms.
    Setval(u8, i64),
    /// A dump of the first server's `_snowflake` is restored into the second.
    CopyDump(u8, u8),
    /// The server is replaced by its standby, or recovered to a point in time, this many
    /// commits behind (0: a synchronous standby); the docs' raise-mark recipe runs when it is
    /// behind.
    Rewind(u8, u8),
    /// The server is retired by the mesh-retire recipe and never writes again.
    Retire(u8),
    /// The backend's transaction ends: commits (0), aborts (1) or is prepared (2).
    End(u8, u8, u8),
    /// A prepared transaction of the server (by position) is committed or rolled back.
    Finish(u8, u8),
    /// `snowflake_horizon()` is read on the server (`snowflake_advance_horizon()` if true).
    Horizon(u8, bool),
    /// For this many ms, the server's (or, with `None`, every server's: a host paused) lease
    /// worker stops (a lock in the lease database, a slow disk): it neither looks nor renews, and
    /// its commits wait; with `true`, only its synchronous commits wait (a synchronous standby
    /// unreachable): its lease commit, not its claim's refreshes, which are asynchronous.
    Freeze(Option<u8>, u32, bool),
    /// The server's clock runs at a wrong rate from now on, by this many parts per million
    /// (NTP slews at most 500; a broken clock source runs further off); its monotonic clock too.
    Slew(u8, i32),
    /// The server is restarted cleanly with `snowflake.epoch` set to another value (index into
    /// `EPOCHS`).
    Epoch(u8, u8),
    /// The second server's machine now runs a physical copy of the first, as of this many
    /// commits ago (0: a pg_basebackup or a snapshot of the running server; more: a standby
    /// promoted while its primary runs on, unfenced). The second server's own identity is gone
    /// without being retired; the copy keeps the first's system identifier, pair and epoch, and
    /// the second's clock and subscriptions.
    Clone(u8, u8, u8),
    /// The claims path from the first server to the second relays (`origin = any`), or no
    /// longer does.
    Relay(u8, u8, bool),
    /// The server's lease worker is cancelled (`pg_cancel_backend`, or a terminate) while its
    /// lease commit waits for the synchronous standby (`Freeze(.., true)`): PostgreSQL ends the
    /// wait, the commit is the server's and not the standby's until the standby is reachable
    /// again, and a failover to the standby (`Rewind(s, 0)`) meanwhile lacks it.
    Cancel(u8),
    /// A DBA's `snowflake_set_floor()` on the server, this many per-mille of its
    /// `max_clock_drift` ahead of its clock (issue 59: a floor raise moves the lease by the whole
    /// raise in one renewal).
    SetFloor(u8, u16),
    /// The server's machine is lost for good, with what it had not sent yet; every other server
    /// follows the docs' procedure for a server that is gone: retire its claim (their own copy
    /// of it, the only one left), drop the subscriptions from and to it (issue 59).
    Lose(u8),
    /// `synchronous_standby_names` is reloaded to another standby, this many commits behind (the
    /// synchronous one died; issue 59): it catches up at the next commit that waits for it.
    SyncSwitch(u8, u8),
}

/// The kinds of events, in `Ev`'s order; the first `CLASSIC` were the world's before slews,
/// epochs, copies and relays joined.
const KINDS: usize = 24;
const CLASSIC: usize = 20;
/// Backends per server, each with at most one open transaction.
const BACKENDS: usize = 3;
/// `max_prepared_transactions`: PostgreSQL refuses a PREPARE beyond it, and the prepared
/// table has as many entries.
const MAX_PREPARED: usize = 2;

/// A backend's open transaction: the IDs it was issued and its holding slot.
#[derive(Clone, Debug)]
struct Txn {
    ids: Vec<i64>,
    slot: i64,
}

/// The fault rates of a schedule, drawn from its seed (swarm testing).
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    pub servers: usize,
    pub events: usize,
    /// Weights of each kind of event, in `Ev`'s order.
    pub weights: [u32; KINDS],
    /// Replication lag of the claims paths, ms.
    pub lag_ms: u64,
    pub max_drift_ms: u64,
    pub claim_expiry_ms: u64,
}

/// A violated invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two servers issued the same ID.
    Duplicate {
        id: i64,
        first: usize,
        second: usize,
    },
    /// A server issued an ID at or below one its lineage issued before.
    NotAbove { id: i64, server: usize, before: i64 },
    /// A server issued nothing for `RESUME_MS` after every fault ended.
    Stalled { server: usize, why: String },
    /// A server's read horizon passed an ID whose transaction may still commit.
    Horizon {
        server: usize,
        id: i64,
        horizon: i64,
    },
    /// A server issued an ID at or below a value of its mark that its worker did not write and
    /// had read (docs/operations.md: such a value is a floor for every ID after it).
    BelowMark {
        id: i64,
        server: usize,
        floor_ms: i64,
    },
}

impl Violation {
    /// The kind, which shrinking keeps.
    pub fn kind(&self) -> u8 {
        match self {
            Violation::Duplicate { .. } => 0,
            Violation::NotAbove { .. } => 1,
            Violation::Stalled { .. } => 2,
            Violation::Horizon { .. } => 3,
            Violation::BelowMark { .. } => 4,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Duplicate { id, first, second } => write!(
                f,
                "ID {id} ({}) issued by server {first} and again by server {second}",
                show(*id)
            ),
            Violation::NotAbove { id, server, before } => write!(
                f,
                "server {server} issued {id} ({}), not above {before} ({}) that its lineage issued before",
                show(*id),
                show(*before)
            ),
            Violation::Stalled { server, why } => write!(
                f,
                "server {server} issued nothing in the last {} s of a calm tail: {why}",
                RESUME_MS / 1000
            ),
            Violation::Horizon {
                server,
                id,
                horizon,
            } => write!(
                f,
                "server {server}'s horizon {horizon} passes {id} ({}), held by a transaction that may still commit",
                show(*id)
            ),
            Violation::BelowMark {
                id,
                server,
                floor_ms,
            } => write!(
                f,
                "server {server} issued {id} ({}), not above ms {floor_ms} of a mark its worker read and did not write",
                show(*id)
            ),
        }
    }
}

fn show(id: i64) -> String {
    decompose(id).map_or("?".into(), |p| {
        format!(
            "ms {} pair ({},{}) seq {}",
            p.ms, p.datacenter, p.worker, p.sequence
        )
    })
}

/// A row of `_snowflake.claims`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    claim: Claim,
    left_pairs: Vec<i64>,
}

impl Row {
    /// Whether this row tells at least what `now` tells of its server: a lease as high, a
    /// tombstone kept, every pair left.
    fn same_or_newer_than(&self, now: &Row) -> bool {
        self.claim.lease_id >= now.claim.lease_id
            && (self.claim.retired || !now.claim.retired)
            && merge_left_pairs(&self.left_pairs, &now.left_pairs) == self.left_pairs
    }
}

/// A server's `_snowflake`, as committed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Db {
    mark: i64,
    mark_epoch: Option<i64>,
    claims: Vec<Row>,
}

impl Db {
    fn row(&self, sysid: i64) -> Option<&Row> {
        self.claims
            .iter()
            .find(|r| r.claim.system_identifier == sysid)
    }

    fn put(&mut self, row: Row) {
        let sysid = row.claim.system_identifier;
        self.claims.retain(|r| r.claim.system_identifier != sysid);
        self.claims.push(row);
    }
}

/// A claims path (a subscription) from one server to another.
#[derive(Clone, Debug)]
struct Path {
    stalled: bool,
    /// It takes changes of any origin (`origin = any`): what its publisher applied from others
    /// travels on it too.
    relays: bool,
    /// Rows due, with whether each was relayed (rows are relayed once: a mesh that relays
    /// both ways would send them round forever).
    queue: VecDeque<(u64, Row, bool)>,
    delivered: i64,
    /// Whether a keepalive reached the subscriber since it started: until then
    /// `pg_stat_subscription.latest_end_lsn` is NULL, and the first one reports where the slot
    /// starts (what was delivered before), not what the publisher has written since.
    reported: bool,
    errors: i64,
    pid: i32,
    last_heard: u64,
}

/// A lease commit written and not yet flushed.
#[derive(Clone, Copy, Debug)]
struct Pending {
    write: snowflake_core::worker::LeaseWrite,
}

#[derive(Clone, Debug)]
struct Server {
    sysid: i64,
    pair: usize,
    epoch: i64,
    offset_ms: i64,
    /// How far its clock runs off, in parts per million, and the part of a ms not yet applied.
    rate_ppm: i64,
    skew_frac: i64,
    /// How far its monotonic clock ran off since the start (a slew moves both clocks).
    mono_skew: i64,
    /// A physical copy of another server, stopped for good in the calm tail (the docs: never run
    /// both as writers).
    copy: bool,
    drift_ms: u64,
    up: bool,
    retired: bool,
    /// Closed for writes until the docs' remedy is durable (the floor's ms).
    floor_due: Option<u64>,
    /// The ID the remedy raises the floor above, until it is durable: a DBA's
    /// `snowflake_set_floor()` that did not return (a crash) is run again.
    remedy: Option<i64>,
    db: Db,
    history: VecDeque<(u64, Db)>,
    shm: State,
    worker: Option<Worker>,
    started_at: u64,
    nap_until: u64,
    pending: Option<Pending>,
    lineage: usize,
    /// Every lineage this server has had.
    lives: Vec<usize>,
    /// The mark and own claim were lowered together and the worker has not looked since.
    lowered_unseen: bool,
    last_issued_at: Option<u64>,
    last_refusal: String,
    /// Blind (see `World::blind`) since the last refresh, or when the lease was renewed (its
    /// hand-over floor read then): the docs' limit lasts until the fleet check and the next
    /// lease have seen what arrived.
    blind_since_refresh: bool,
    lease_blind: bool,
    /// When this server's claim was first written on its current pair.
    pair_since: u64,
    /// This life's gate at start ended at its limit, without the proof (said in a WARNING).
    unproven_start: bool,
    /// The claims (system identifier, pair) on their way to this server when it last started:
    /// its start's gate waits for them (issue 50), so it knows of them before its first ID.
    start_backlog: Vec<(i64, (u32, u32))>,
    /// The claims as its fleet check last read them.
    looked_at: Vec<Claim>,
    /// Its backends' open transactions (lost in a crash).
    txns: Vec<Option<Txn>>,
    /// Its prepared transactions, by XID, with their IDs (they survive a crash).
    prepared: Vec<(u32, Vec<i64>)>,
    /// The horizon's prepared table and whether the survivors were entered since the start
    /// (shared memory).
    ptable: Vec<Prepared>,
    scanned: bool,
    /// The mark as its worker last wrote or read it: any other value there was set by someone
    /// else.
    mark_seen: i64,
    /// The highest such value its worker read (ms since the epoch): every later ID is above it.
    mark_floor_ms: i64,
    /// The lease worker is stopped until then.
    frozen_until: u64,
    /// Its lease commits wait until then.
    commits_wait_until: u64,
    /// What its synchronous standby has while it lacks a lease commit whose wait was cancelled
    /// (until the standby is reachable again, `commits_wait_until`).
    standby_db: Option<Db>,
    /// When its own claim was last written (a refresh, or a lease's stamp).
    claim_written_t: u64,
    /// Set when a lease was committed after its claim had gone unwritten for the expiry less a
    /// refresh, until the next refresh: the lease it had before. Blindness excuses no ID above
    /// it meanwhile (the docs: such a lease waits for the refresh).
    silent_grant_above: Option<u64>,
    /// What its synchronous standby has since `synchronous_standby_names` was switched to one
    /// that lagged (`Ev::SyncSwitch`), until a commit waited for it.
    switched_db: Option<Db>,
    /// No ID was issued since that switch: the docs' test of whether the new standby has every
    /// lease the primary used (an ID after the switch waited for a lease it confirmed). A
    /// failover to it before runs the recipe.
    switch_pending: bool,
    /// How many times `synchronous_standby_names` was switched (`Ev::SyncSwitch`): what the
    /// glue reads at its look names the standbys by it.
    standbys_gen: u64,
    /// What the worker saw at its last look (the glue looks at the start, after every nap and
    /// after every lease commit): the log line the docs' test of `switch_pending` reads.
    standbys_looked: u64,
}

/// A server lost for good (`Ev::Lose`): the highest ID each of its lineages issued on each pair,
/// and for every server the furthest the hand-over floor reaches by its clock at the loss (its
/// clock plus its `max_clock_drift`; `i64::MIN` once its clock went back or its epoch changed:
/// the docs' rule needs clocks in sync), and the pairs its copy of the lost server's claim
/// named then (a pair it never knew the lost server held is the docs' limit).
#[derive(Clone, Debug)]
struct Lost {
    server: usize,
    lineages: Vec<usize>,
    pair_max: HashMap<(u32, u32), i64>,
    reach: Vec<i64>,
    known: Vec<Vec<(u32, u32)>>,
}

impl Server {
    /// Whether `db` put in place of this server's `_snowflake` lowers both its mark and its own
    /// claim below what it may have issued: the docs' limit until the worker has looked.
    fn lowered_by(&self, db: &Db) -> bool {
        let issued = self.shm.highest_possible_ms();
        let claimed = db
            .row(self.sysid)
            .and_then(|r| decompose(r.claim.lease_id).ok())
            .map_or(0, |p| p.ms);
        (db.mark - db.mark_epoch.unwrap_or(self.epoch)).max(0) < issued as i64 && claimed < issued
    }

    fn node(&self) -> Node {
        let (dc, w) = PAIRS[self.pair];
        Node::new(dc, w).expect("a valid pair")
    }

    /// Its worker reads the mark (at start, at a refresh, at a lease): a value someone else set
    /// is a floor from then on, in the milliseconds of the epoch it was written under.
    /// The glue's look at the synchronous standbys (rule 9 of the core's worker).
    fn look_at_standbys(&mut self) {
        let seen = Standbys {
            names: format!("s{}", self.standbys_gen),
            pids: Vec::new(),
        };
        if let Some(w) = self.worker.as_mut() {
            w.standbys_seen(seen, &mut self.shm);
            self.standbys_looked = self.standbys_gen;
        }
    }

    fn read_mark(&mut self) {
        if self.db.mark != self.mark_seen {
            let epoch = self.db.mark_epoch.unwrap_or(self.epoch);
            self.mark_floor_ms = self.mark_floor_ms.max(self.db.mark - epoch);
            self.mark_seen = self.db.mark;
        }
    }

    /// Its worker writes its mark.
    fn write_mark(&mut self, mark: i64) {
        self.db.mark = mark;
        self.mark_seen = mark;
    }
}

/// The simulated world.
pub struct World {
    knobs: Knobs,
    t: u64,
    servers: Vec<Server>,
    /// paths[from][to]
    paths: Vec<Vec<Option<Path>>>,
    /// Every ID issued: by which server, in which lineage, whether its server was blind then,
    /// and which servers it was misinformed about then (a bit each, see `misinformed`).
    issued: HashMap<i64, (usize, usize, bool, u64)>,
    lineage_max: Vec<i64>,
    /// Lineages whose IDs the docs allow to be issued again (a restart after a restore lowered
    /// the mark and the claim together, before the worker looked).
    tainted: HashSet<usize>,
    /// Lineages rewound (a failover or recovery that lacked the last lease), with their last ID
    /// then: the docs' remedy raises the server's own floor, but a pair it had left since is
    /// not known as left, and its next holder may repeat those IDs (named in the docs).
    rewound: Vec<(usize, i64)>,
    /// (server, other): a restore of `_snowflake` put back an older row of the other server's
    /// claim at the first (a tombstone undone, its last IDs or pairs left lowered), until a newer
    /// row of it arrives there (named in the docs: re-run the retire's UPDATE after such a
    /// restore).
    misinformed: HashSet<(usize, usize)>,
    /// Entries of `misinformed` whose newer row has arrived, until the first server's worker
    /// looks at the claims (its next refresh): it refuses only from then on.
    misinformed_arrived: HashSet<(usize, usize)>,
    /// Identities gone unretired (a machine overwritten by `Ev::Clone`): a system identifier no
    /// server has any more, and the lineages it had.
    gone: Vec<(i64, Vec<usize>)>,
    /// (server, lineage): as `misinformed`, for a gone identity's claim, until a newer row of it
    /// arrives there (one still on its way).
    misinformed_gone: HashSet<(usize, usize)>,
    /// The lineages of physical copies (`Ev::Clone`).
    copies: HashSet<usize>,
    /// The highest ID each lineage issued on each pair.
    lineage_pair_max: HashMap<(usize, u32, u32), i64>,
    /// Servers lost for good (`Ev::Lose`).
    lost: Vec<Lost>,
    version: i64,
    pids: i32,
    xids: u32,
    /// Steps taken (for the rate).
    pub steps: u64,
    pub ids: u64,
}

impl World {
    pub fn new(knobs: Knobs) -> World {
        let n = knobs.servers;
        let mut servers = Vec::with_capacity(n);
        for i in 0..n {
            servers.push(Server {
                sysid: 7_000_000_000_000_000_000 + i as i64,
                pair: i % PAIRS.len(),
                epoch: EPOCH,
                offset_ms: 0,
                rate_ppm: 0,
                skew_frac: 0,
                mono_skew: 0,
                copy: false,
                drift_ms: knobs.max_drift_ms,
                up: false,
                retired: false,
                floor_due: None,
                remedy: None,
                db: Db::default(),
                history: VecDeque::new(),
                shm: State::awaiting_lease(),
                worker: None,
                started_at: 0,
                nap_until: 0,
                pending: None,
                lineage: i,
                lives: vec![i],
                lowered_unseen: false,
                last_issued_at: None,
                last_refusal: String::new(),
                blind_since_refresh: false,
                lease_blind: false,
                pair_since: 0,
                unproven_start: false,
                start_backlog: Vec::new(),
                looked_at: Vec::new(),
                txns: vec![None; BACKENDS],
                prepared: Vec::new(),
                ptable: vec![Prepared::default(); MAX_PREPARED],
                scanned: false,
                mark_seen: 0,
                mark_floor_ms: 0,
                frozen_until: 0,
                commits_wait_until: 0,
                standby_db: None,
                claim_written_t: 0,
                silent_grant_above: None,
                switched_db: None,
                switch_pending: false,
                standbys_gen: 0,
                standbys_looked: 0,
            });
        }
        let paths = (0..n)
            .map(|from| {
                (0..n)
                    .map(|to| {
                        (from != to).then(|| Path {
                            stalled: false,
                            relays: false,
                            queue: VecDeque::new(),
                            delivered: 0,
                            reported: false,
                            errors: 0,
                            pid: 100 + (from * n + to) as i32,
                            last_heard: 0,
                        })
                    })
                    .collect()
            })
            .collect();
        let mut w = World {
            knobs,
            t: 0,
            servers,
            paths,
            issued: HashMap::new(),
            lineage_max: vec![0; n],
            tainted: HashSet::new(),
            rewound: Vec::new(),
            misinformed: HashSet::new(),
            misinformed_arrived: HashSet::new(),
            gone: Vec::new(),
            misinformed_gone: HashSet::new(),
            copies: HashSet::new(),
            lineage_pair_max: HashMap::new(),
            lost: Vec::new(),
            version: 1,
            pids: 10_000,
            xids: 1_000,
            steps: 0,
            ids: 0,
        };
        for i in 0..n {
            w.start(i);
        }
        w
    }

    fn wall(&self, i: usize) -> i64 {
        T0 + self.t as i64 + self.servers[i].offset_ms
    }

    fn mono(&self, i: usize) -> u64 {
        let s = &self.servers[i];
        ((self.t - s.started_at) as i64 + s.mono_skew).max(0) as u64
    }

    fn settings(&self, i: usize) -> Settings {
        let s = &self.servers[i];
        Settings {
            system_identifier: s.sysid,
            node: s.node(),
            max_drift_ms: s.drift_ms,
            claim_expiry_ms: self.knobs.claim_expiry_ms,
        }
    }

    /// A commit of server `i`: kept for standbys, and its own row sent on its paths.
    fn commit(&mut self, i: usize, own_row_changed: bool) {
        let snapshot = self.servers[i].db.clone();
        let s = &mut self.servers[i];
        if s.history.len() == HISTORY {
            s.history.pop_front();
        }
        s.history.push_back((self.t, snapshot));
        if !own_row_changed {
            return;
        }
        let Some(row) = self.servers[i].db.row(self.servers[i].sysid).cloned() else {
            return;
        };
        let due = self.t + self.knobs.lag_ms;
        for p in self.paths[i].iter_mut().flatten() {
            p.queue.push_back((due, row.clone(), false));
        }
    }

    fn next_version(&mut self) -> i64 {
        self.version += 1;
        self.version
    }

    /// Replication: every path that applies delivers what is due.
    fn deliver(&mut self) {
        let n = self.servers.len();
        for from in 0..n {
            for to in 0..n {
                let up = self.servers[from].up;
                let t = self.t;
                let mut arrived = Vec::new();
                if let Some(p) = self.paths[from][to].as_mut() {
                    // A subscriber that is down applies nothing: the publisher's slot keeps the
                    // rows for its start, after the first keepalive.
                    if p.stalled || !self.servers[to].up {
                        continue;
                    }
                    if up {
                        p.last_heard = t;
                        // The walsender's first message after the subscriber's start is a
                        // keepalive at the slot's start: nothing of the backlog comes with it.
                        if !std::mem::replace(&mut p.reported, true) {
                            continue;
                        }
                    }
                    while p.queue.front().is_some_and(|(due, _, _)| *due <= t) {
                        let (_, row, relayed) = p.queue.pop_front().expect("a row");
                        p.delivered += 1;
                        p.last_heard = t;
                        arrived.push((row, relayed));
                    }
                }
                if arrived.iter().any(|(_, relayed)| !relayed)
                    && self.misinformed.contains(&(to, from))
                {
                    self.misinformed_arrived.insert((to, from));
                }
                let due = t + self.knobs.lag_ms;
                for (mut row, relayed) in arrived {
                    if !relayed {
                        for p in self.paths[to].iter_mut().flatten().filter(|p| p.relays) {
                            p.queue.push_back((due, row.clone(), true));
                        }
                    }
                    if let Some((_, lives)) = self
                        .gone
                        .iter()
                        .find(|g| g.0 == row.claim.system_identifier)
                    {
                        for l in lives {
                            self.misinformed_gone.remove(&(to, *l));
                        }
                    }
                    row.claim.version = self.next_version();
                    let own = row.claim.system_identifier == self.servers[to].sysid;
                    self.servers[to].db.put(row);
                    if own {
                        // A physical copy's claim overwrote its original's own row: with the
                        // mark lowered too, the docs' limit (never run both as writers).
                        let s = &mut self.servers[to];
                        let db = s.db.clone();
                        s.lowered_unseen |= s.lowered_by(&db);
                        if !s.up {
                            self.split_if_lowered(to);
                        }
                    }
                }
            }
        }
    }

    fn readings(&self, i: usize) -> Vec<PathReading> {
        let mut out = Vec::new();
        for from in 0..self.servers.len() {
            if let Some(p) = &self.paths[from][i] {
                out.push(PathReading {
                    subscription: format!("claims_from_{from}"),
                    enabled: true,
                    apply_pid: (!p.stalled).then_some(p.pid),
                    silent_ms: Some(self.t - p.last_heard),
                    errors: Some(p.errors),
                    table_state: 'r',
                    end_lsn: p.reported.then_some(p.delivered),
                    // What the publisher has to send: delivered, or on its way.
                    publisher_end: self.servers[from]
                        .up
                        .then_some(p.delivered + p.queue.len() as i64),
                    limited: false,
                    relays: p.relays,
                });
            }
        }
        out
    }

    /// The server starts: shared memory new, the worker reads what is committed.
    fn start(&mut self, i: usize) {
        let s = &mut self.servers[i];
        if s.up || s.retired {
            return;
        }
        s.up = true;
        s.started_at = self.t;
        s.mono_skew = 0;
        s.nap_until = self.t;
        s.pending = None;
        s.floor_due = None;
        s.unproven_start = false;
        s.shm = State::awaiting_lease();
        let mut backlog = Vec::new();
        for p in self.paths.iter_mut().filter_map(|row| row[i].as_mut()) {
            p.reported = false;
            backlog.extend(p.queue.iter().map(|(_, row, _)| {
                (
                    row.claim.system_identifier,
                    (row.claim.datacenter, row.claim.worker),
                )
            }));
        }
        self.servers[i].start_backlog = backlog;
        let s = &mut self.servers[i];
        s.ptable = vec![Prepared::default(); MAX_PREPARED];
        s.scanned = false;
        s.read_mark();
        let at = AtStart {
            mark_unix_ms: s.db.mark,
            recorded_epoch_ms: s.db.mark_epoch,
            own_claim: s.db.row(s.sysid).map(|r| r.claim),
            left_pairs: s
                .db
                .row(s.sysid)
                .map_or(Vec::new(), |r| r.left_pairs.clone()),
        };
        let node = s.node();
        let (worker, _) = Worker::start(s.epoch, &at, node, &mut s.shm);
        s.worker = Some(worker);
        s.look_at_standbys();
        if let Some(floor_id) = s.remedy {
            self.raise_floor_after_failover(i, floor_id);
        }
    }

    fn crash(&mut self, i: usize) {
        let s = &mut self.servers[i];
        if !s.up {
            return;
        }
        s.up = false;
        s.worker = None;
        s.pending = None;
        s.txns = vec![None; BACKENDS];
        self.split_if_lowered(i);
    }

    /// The docs' limit: the mark and the claim lowered together, and a restart before the worker
    /// looked. The next life may repeat this one's IDs.
    fn split_if_lowered(&mut self, i: usize) {
        if self.servers[i].lowered_unseen {
            let new = self.lineage_max.len();
            self.lineage_max.push(0);
            if self.copies.contains(&self.servers[i].lineage) {
                self.copies.insert(new);
            }
            self.servers[i].lineage = new;
            // Any server may repeat what an earlier life of this one issued above the dump: this
            // one after its restart, and the next holder of its pair, whose hand-over floor is
            // the lowered claim.
            self.tainted.extend(self.servers[i].lives.iter().copied());
            self.servers[i].lives.push(new);
            self.servers[i].lowered_unseen = false;
            // Floors read from the mark before are lost with it (the same limit).
            self.servers[i].mark_floor_ms = 0;
        }
    }

    /// Whether server `i` cannot know, by the docs' own limits, that another server issues on
    /// its pair: no path brings that server's claims here (a subscription dropped), or its fleet
    /// check's last look did not see its claim on this pair, made after this server's start (the
    /// start's gate waits for the claims made before it, unless it ended at its limit, which is
    /// said; a claim that arrives is seen at the next refresh, within 5 s).
    fn blind(&self, i: usize) -> bool {
        let me = &self.servers[i];
        self.servers.iter().enumerate().any(|(k, other)| {
            k != i
                && !other.retired
                && (self.paths[k][i].is_none()
                    || (other.up && {
                        let node = other.node();
                        let unknown = me
                            .looked_at
                            .iter()
                            .find(|c| c.system_identifier == other.sysid)
                            .is_none_or(|known| {
                                (known.datacenter, known.worker)
                                    != (node.datacenter(), node.worker())
                            });
                        unknown && (other.pair_since >= me.started_at || me.unproven_start)
                    }))
        })
    }

    /// The world as it is, one line per server (for `SIM_TRACE=1`): its state, its lease, and
    /// the claims its `_snowflake` holds as (server, pair, lease ms, retired, pairs left).
    pub fn describe(&self) -> String {
        let mut out = format!("t={} ms", self.t);
        let who = |sysid: i64| {
            self.servers
                .iter()
                .position(|s| s.sysid == sysid)
                .unwrap_or(99)
        };
        let ms = |id: i64| decompose(id).map_or(0, |p| p.ms);
        for (i, s) in self.servers.iter().enumerate() {
            let (dc, w) = PAIRS[s.pair];
            out += &format!(
                "\n    server {i}: {} pair ({dc},{w}) clock {:+} ms, last_ms {} lease {:?} refused {} lineage {} max {}; mark {}; claims {:?}",
                if s.retired { "retired" } else if s.up { "up" } else { "down" },
                s.offset_ms,
                s.shm.last_ms(),
                s.shm.lease(),
                s.shm.refused(),
                s.lineage,
                ms(self.lineage_max[s.lineage]),
                s.db.mark - s.db.mark_epoch.unwrap_or(s.epoch),
                s.db.claims
                    .iter()
                    .map(|r| (who(r.claim.system_identifier), r.claim.datacenter, r.claim.worker, ms(r.claim.lease_id), r.claim.retired, r.left_pairs.iter().map(|&l| ms(l)).collect::<Vec<_>>()))
                    .collect::<Vec<_>>()
            );
        }
        out
    }

    fn record(&mut self, i: usize, id: i64) -> Result<(), Violation> {
        self.ids += 1;
        let lineage = self.servers[i].lineage;
        let now_blind = self.blind(i);
        let s = &mut self.servers[i];
        s.blind_since_refresh |= now_blind;
        let above_silent_grant = s
            .silent_grant_above
            .is_some_and(|above| decompose(id).is_ok_and(|p| p.ms > above));
        let blind = (now_blind || s.blind_since_refresh || s.lease_blind) && !above_silent_grant;
        let floor_ms = s.mark_floor_ms;
        if decompose(id).is_ok_and(|p| p.ms as i64 <= floor_ms) {
            return Err(Violation::BelowMark {
                id,
                server: i,
                floor_ms,
            });
        }
        let before = self.lineage_max[lineage];
        if id <= before {
            return Err(Violation::NotAbove {
                id,
                server: i,
                before,
            });
        }
        self.lineage_max[lineage] = id;
        self.servers[i].last_issued_at = Some(self.t);
        // An ID after the worker's look at the switch (its log line): the docs' test.
        let s = &mut self.servers[i];
        if s.standbys_looked == s.standbys_gen {
            s.switch_pending = false;
        }
        let misinformed_now = self
            .misinformed
            .iter()
            .filter(|&&(at, _)| at == i)
            .fold(0u64, |bits, &(_, k)| bits | 1 << k);
        if let Some(&(first, other, was_blind, first_misinformed)) = self.issued.get(&id) {
            let excused = self.excused(
                i,
                lineage,
                blind,
                id,
                first,
                other,
                was_blind,
                first_misinformed,
            ) || self.out_of_sync(i, other, id)
                || self.unknown_holder(i, other, id);
            if !excused {
                return Err(Violation::Duplicate {
                    id,
                    first,
                    second: i,
                });
            }
        }
        // A pair taken from a server lost for good continues above every ID it issued there
        // (issue 59), unless the taker's clock was not in sync with it (or its drift smaller),
        // or it never knew that server held the pair.
        if let Ok(p) = decompose(id) {
            let pair = (p.datacenter, p.worker);
            let below = self.lost.iter().find_map(|l| {
                l.pair_max
                    .get(&pair)
                    .copied()
                    .filter(|&m| id <= m && !l.lineages.contains(&lineage))
                    .filter(|&m| decompose(m).is_ok_and(|q| q.ms as i64 <= l.reach[i]))
                    .filter(|_| {
                        l.known[i].contains(&pair)
                            || self.servers[i]
                                .db
                                .row(self.servers[l.server].sysid)
                                .is_some_and(|r| pairs_named(r).contains(&pair))
                    })
            });
            if let Some(m) = below {
                let (first, other, was_blind, first_misinformed) = self.issued[&m];
                if !self.excused(
                    i,
                    lineage,
                    blind,
                    m,
                    first,
                    other,
                    was_blind,
                    first_misinformed,
                ) {
                    return Err(Violation::Duplicate {
                        id: m,
                        first,
                        second: i,
                    });
                }
            }
            let e = self
                .lineage_pair_max
                .entry((lineage, pair.0, pair.1))
                .or_insert(0);
            *e = (*e).max(id);
        }
        self.issued.insert(id, (i, lineage, blind, misinformed_now));
        Ok(())
    }

    /// Whether an ID that server `i` (lineage `lineage`, `blind` now) issues was issued before by
    /// server `first` (lineage `other`, `was_blind` then, misinformed about the servers
    /// `first_misinformed` names), in a case the docs name.
    #[allow(clippy::too_many_arguments)]
    fn excused(
        &self,
        i: usize,
        lineage: usize,
        blind: bool,
        id: i64,
        first: usize,
        other: usize,
        was_blind: bool,
        first_misinformed: u64,
    ) -> bool {
        // A first issuer that could not see the second excuses nothing if the second's start
        // had the first's claim on this pair on its way: its gate waits for that claim.
        let first_sysid = self.servers[first].sysid;
        let gate_knew = decompose(id).is_ok_and(|p| {
            self.servers[i]
                .start_backlog
                .contains(&(first_sysid, (p.datacenter, p.worker)))
        });
        // Either could not know of the other (the earlier one may resume after its claim
        // expired at the later one: a worker stalled for the expiry, with no path to see
        // the later one's claim).
        blind
            || (was_blind && !gate_knew)
            // A physical copy's IDs (docs/operations.md: never let it issue IDs for shared
            // data; the fleet check sees it only where its claims reach its original).
            || self.copies.contains(&other)
            || self.copies.contains(&lineage)
            || self.tainted.contains(&other)
            || self.misinformed.contains(&(i, first))
            // The first issued it while a restore had removed or aged the second's live
            // claim at its server (the docs: "a live server's until its next refresh").
            || first_misinformed & (1 << i) != 0
            // The first was an identity gone since, whose claim a restore aged here.
            || self.misinformed_gone.contains(&(i, other))
            || (first != i
                && self.rewound.iter().any(|&(l, max)| {
                    let sysid = self.servers[first].sysid;
                    let pair_in = |db: &Db| {
                        db.row(sysid)
                            .map(|r| (r.claim.datacenter, r.claim.worker))
                    };
                    // The pair the rewound server names now, or the one its claim here
                    // names: the recovery lost the claims that told of the pair, with the
                    // lease (the docs' limit of a recovery that lacks the last lease).
                    l == other
                        && id <= max
                        && decompose(id).is_ok_and(|p| {
                            let pair = Some((p.datacenter, p.worker));
                            pair != pair_in(&self.servers[first].db)
                                || pair != pair_in(&self.servers[i].db)
                        })
                }))
    }

    /// Whether `id`, issued before by lineage `other` of a server lost since, lies beyond the
    /// furthest the hand-over floor of server `i` reaches (its clock was not in sync, or its
    /// drift smaller: the docs' condition).
    fn out_of_sync(&self, i: usize, other: usize, id: i64) -> bool {
        self.lost.iter().any(|l| {
            l.lineages.contains(&other) && decompose(id).is_ok_and(|p| p.ms as i64 > l.reach[i])
        })
    }

    /// Whether `id`, issued before by lineage `other` of a server lost since, is on a pair that
    /// server `i` never knew it held: its claim on that pair reached `i` neither before the loss
    /// nor since. The docs' limit of a hand-over (DESIGN.md, "Where the next holder looks": a
    /// holder lost before its claim on a new pair reached anyone is not known to hold it; the
    /// recipe raises the taker's floor then). The lost pair's own check keeps the same condition.
    fn unknown_holder(&self, i: usize, other: usize, id: i64) -> bool {
        let Ok(p) = decompose(id) else {
            return false;
        };
        let pair = (p.datacenter, p.worker);
        self.lost.iter().any(|l| {
            l.lineages.contains(&other)
                && !l.known[i].contains(&pair)
                && !self.servers[i]
                    .db
                    .row(self.servers[l.server].sysid)
                    .is_some_and(|r| pairs_named(r).contains(&pair))
        })
    }

    /// Server `k`'s clock went back (a step, another epoch): a hand-over floor it computes
    /// from now on may fall below what a server lost before issued (the docs' condition of
    /// clocks in sync).
    fn clock_back(&mut self, k: usize) {
        for l in &mut self.lost {
            l.reach[k] = i64::MIN;
        }
    }

    fn call(&mut self, i: usize, b: usize) -> Result<(), Violation> {
        let s = &mut self.servers[i];
        if !s.up || s.retired || s.floor_due.is_some() {
            return Ok(());
        }
        let now = T0 + self.t as i64 + s.offset_ms - s.epoch;
        let node = s.node();
        match s.shm.next(now, node, s.drift_ms) {
            Ok(Step::Issued(id)) => {
                // In the critical section that issued it: the slot holds it.
                let txn = s.txns[b].get_or_insert(Txn {
                    ids: Vec::new(),
                    slot: EMPTY,
                });
                txn.slot = hold(txn.slot, id);
                txn.ids.push(id);
                self.record(i, id)
            }
            Ok(Step::WaitLease { .. }) => {
                s.nap_until = self.t;
                s.last_refusal = "waits for a lease".into();
                Ok(())
            }
            Ok(Step::WaitClock { .. }) => Ok(()),
            Err(e) => {
                if e == GenError::Refused {
                    // As the glue does: a refused call asks the worker for a look at the claims
                    // and wakes it (a DBA's retire is then seen at once).
                    s.shm.ask_look();
                    s.nap_until = self.t;
                }
                s.last_refusal = match e {
                    GenError::Refused => format!(
                        "refused, conflict {:?}",
                        s.worker.as_ref().and_then(|w| w.conflict())
                    ),
                    other => other.to_string(),
                };
                Ok(())
            }
        }
    }

    /// The lease worker runs: polls and performs until it naps or a lease commit is pending.
    fn tick(&mut self, i: usize) {
        {
            let s = &self.servers[i];
            if !s.up || s.pending.is_some() || s.worker.is_none() || self.t < s.frozen_until {
                return;
            }
        }
        {
            // A lease whose commit's wait was cancelled: the glue waits until the synchronous
            // standby has it, then the worker grants it.
            let t = self.t;
            let s = &mut self.servers[i];
            let w = s.worker.as_mut().expect("a worker");
            if w.awaits_standbys() {
                if t < s.commits_wait_until {
                    return;
                }
                if w.replicated((s.db.mark, s.db.mark_epoch), &mut s.shm) {
                    // The glue waited for the synchronous standbys of now.
                    s.switched_db = None;
                }
                // A restore that lowered the mark while the lease waited leaves it below what
                // may be issued now, as one right after a grant does (the docs' limit of
                // restoring `_snowflake`: the next look writes it back).
                let db = s.db.clone();
                s.lowered_unseen |= s.lowered_by(&db);
            }
            let s = &self.servers[i];
            if self.t < s.nap_until && !s.shm.lease_wanted() {
                return;
            }
        }
        if let Some(ms) = self.servers[i].floor_due {
            // snowflake_set_floor() returns once a lease at or above the floor is durable.
            let s = &mut self.servers[i];
            if s.shm.lease().is_none_or(|l| l >= ms) {
                s.floor_due = None;
                s.remedy = None;
            } else {
                s.shm.want_lease();
            }
        }
        for _ in 0..16 {
            let settings = self.settings(i);
            let (mono, wall) = (self.mono(i), self.wall(i));
            let s = &mut self.servers[i];
            let w = s.worker.as_mut().expect("a worker");
            match w.poll(mono, wall, &s.shm, s.drift_ms) {
                Todo::ReadPaths => {
                    let readings = self.readings(i);
                    let s = &mut self.servers[i];
                    let w = s.worker.as_mut().expect("a worker");
                    if let Some(GateEnd::CaughtUp { unproven }) = w.paths_read(mono, &readings) {
                        // Paths disabled at the start are not waited for (said as a WARNING).
                        s.unproven_start |= !unproven.is_empty();
                    }
                }
                Todo::Refresh => {
                    let blind = self.blind(i);
                    self.servers[i].blind_since_refresh = blind;
                    self.refresh(i, mono, wall, &settings);
                }
                Todo::ForwardJump(jump) => s.shm.record_forward_jump(jump),
                // Only a log line.
                Todo::ClockBack { .. } => {}
                Todo::Renew => {
                    // The hand-over floor is read now: a restore that put back older claims
                    // here (see `misinformed`) leaves it low for this lease.
                    let blind = self.blind(i)
                        || self.misinformed.iter().any(|&(at, k)| {
                            at == i && !self.misinformed_arrived.contains(&(at, k))
                        });
                    let s = &mut self.servers[i];
                    s.read_mark();
                    let w = s.worker.as_mut().expect("a worker");
                    s.lease_blind = blind;
                    let handover = {
                        let node = settings.node;
                        let left = left_pairs_of(&s.db);
                        let claims: Vec<Claim> = s.db.claims.iter().map(|r| r.claim).collect();
                        handover_floor(s.sysid, node.datacenter(), node.worker(), &claims, &left)
                    };
                    let (mark, epoch) = (s.db.mark, s.db.mark_epoch);
                    let plan = w.renew_read(wall, handover, mark, epoch, &settings, &mut s.shm);
                    if let Some(write) = plan.write {
                        s.pending = Some(Pending { write });
                        return;
                    }
                }
                Todo::Nap(ms) => {
                    s.nap_until = self.t + ms;
                    s.look_at_standbys();
                    return;
                }
            }
        }
    }

    fn refresh(&mut self, i: usize, mono: u64, wall: i64, settings: &Settings) {
        // This look sees the rows that arrived since a restore aged them here.
        let seen: Vec<(usize, usize)> = self
            .misinformed_arrived
            .iter()
            .copied()
            .filter(|&(at, _)| at == i)
            .collect();
        for e in seen {
            self.misinformed_arrived.remove(&e);
            self.misinformed.remove(&e);
        }
        // The look at the mark, in its own transaction.
        let s = &mut self.servers[i];
        s.read_mark();
        let w = s.worker.as_mut().expect("a worker");
        let check = w.mark_read(s.db.mark, s.db.mark_epoch, &mut s.shm);
        if check.found.is_some() {
            s.lowered_unseen = false;
        }
        if let Some((own, own_epoch)) = check.write_back {
            // Unless a value that stands for later IDs was set since the look.
            let found = (s.db.mark, s.db.mark_epoch);
            if !stands_above(found, s.epoch, (own, own_epoch)) {
                s.db.mark_epoch = Some(own_epoch);
                s.write_mark(own);
            }
            self.commit(i, false);
        }
        // The claim's refresh.
        let version = self.next_version();
        let s = &mut self.servers[i];
        let w = s.worker.as_mut().expect("a worker");
        let own = s.db.row(s.sysid).cloned();
        let (lease_id, left) = w.claim_row(
            own.as_ref().map(|r| &r.claim),
            own.as_ref().map_or(&[][..], |r| &r.left_pairs[..]),
            settings.node,
            &s.shm,
        );
        let row = Row {
            claim: Claim {
                system_identifier: s.sysid,
                datacenter: settings.node.datacenter(),
                worker: settings.node.worker(),
                last_seen_unix_ms: wall,
                version,
                lease_id: lease_id.max(own.as_ref().map_or(0, |r| r.claim.lease_id)),
                retired: false,
            },
            left_pairs: left,
        };
        let written = row.claim;
        if own.as_ref().is_none_or(|r| {
            (r.claim.datacenter, r.claim.worker) != (written.datacenter, written.worker)
        }) {
            s.pair_since = self.t;
        }
        s.db.put(row);
        s.claim_written_t = self.t;
        s.silent_grant_above = None;
        self.commit(i, true);
        let read = Refreshed {
            own_before: own.map(|r| r.claim),
            written,
            claims: self.servers[i].db.claims.iter().map(|r| r.claim).collect(),
            left_pairs: left_pairs_of(&self.servers[i].db),
            paths: self.readings(i),
        };
        let s = &mut self.servers[i];
        s.looked_at = read.claims.clone();
        let w = s.worker.as_mut().expect("a worker");
        w.refreshed(mono, read, settings, &mut s.shm);
    }

    /// The pending lease commit is flushed: the mark and the claim written, then the grant.
    fn flush(&mut self, i: usize) {
        let s = &self.servers[i];
        if self.t < s.frozen_until.max(s.commits_wait_until) {
            return;
        }
        self.land(i, true);
    }

    /// The pending lease commit's wait for the synchronous standby is cancelled: committed here,
    /// not on the standby, and the worker told so.
    fn cancel(&mut self, i: usize) {
        let s = &self.servers[i];
        if s.pending.is_none() || self.t < s.frozen_until || self.t >= s.commits_wait_until {
            return;
        }
        let s = &mut self.servers[i];
        if s.standby_db.is_none() {
            s.standby_db = Some(
                s.history
                    .back()
                    .map_or_else(|| s.db.clone(), |h| h.1.clone()),
            );
        }
        self.land(i, false);
    }

    /// The pending lease commit lands here: the mark and the claim written, then the worker told
    /// whether the synchronous standby has it too.
    fn land(&mut self, i: usize, replicated: bool) {
        let Some(Pending { write }) = self.servers[i].pending else {
            return;
        };
        let mono = self.mono(i);
        let version = self.next_version();
        let s = &mut self.servers[i];
        // The write's statement reads the mark it raises.
        s.read_mark();
        let found = (s.db.mark, s.db.mark_epoch);
        let written = write.written(found);
        s.write_mark(written);
        if !write.keeps_found(found) {
            s.db.mark_epoch = Some(write.epoch_ms);
        }
        let sysid = s.sysid;
        let before = s.db.row(sysid).cloned();
        let node = s.node();
        let stamp = before.as_ref().map(|r| {
            let mut row = r.clone();
            row.claim.lease_id = row.claim.lease_id.max(write.claim_lease_id);
            // The lease's write also puts this server's pair in its row.
            (row.claim.datacenter, row.claim.worker) = (node.datacenter(), node.worker());
            row.claim.version = version;
            row
        });
        if let Some(row) = stamp.clone() {
            if before.as_ref().is_some_and(|b| {
                (b.claim.datacenter, b.claim.worker) != (row.claim.datacenter, row.claim.worker)
            }) {
                s.pair_since = self.t;
            }
            s.db.put(row);
        }
        let settings = self.settings(i);
        let s = &mut self.servers[i];
        if stamp.is_some() {
            if self.t - s.claim_written_t >= settings.claim_expiry_ms - REFRESH_MS {
                s.silent_grant_above = s.shm.lease();
            }
            s.claim_written_t = self.t;
        }
        self.commit(i, stamp.is_some());
        let s = &mut self.servers[i];
        s.pending = None;
        if replicated {
            // The commit waited for the synchronous standby of now: it has everything before.
            s.switched_db = None;
        }
        let w = s.worker.as_mut().expect("a worker");
        w.renew_committed(
            mono,
            &write,
            written,
            found,
            before.map(|r| r.claim),
            stamp.map(|r| r.claim),
            replicated,
            &settings,
            &mut s.shm,
        );
        s.look_at_standbys();
    }

    /// The backend's transaction ends: committed, aborted or prepared, as the glue's transaction
    /// callback does it (PRE_PREPARE enters it in the prepared table, then the slot is cleared).
    fn end(&mut self, i: usize, b: usize, how: u8) {
        let s = &mut self.servers[i];
        if !s.up {
            return;
        }
        let Some(txn) = s.txns[b].take() else {
            return;
        };
        if how % 3 != 2 || txn.ids.is_empty() || s.prepared.len() >= MAX_PREPARED {
            // Committed, aborted, or its PREPARE refused by PostgreSQL (aborted).
            return;
        }
        self.xids += 1;
        let xid = self.xids;
        let s = &mut self.servers[i];
        let mut entered = enter(&mut s.ptable, xid, txn.slot);
        if !entered {
            let ended = ended_xids(&s.ptable, &s.prepared);
            purge(&mut s.ptable, &ended);
            entered = enter(&mut s.ptable, xid, txn.slot);
        }
        if entered {
            s.prepared.push((xid, txn.ids));
        }
    }

    /// `snowflake_horizon()` on server `i`, as the glue reads it: the survivors of the last
    /// restart entered first, ended entries purged, then the horizon under the lock. No ID of a
    /// transaction still open or prepared may be at or below it.
    fn horizon(&mut self, i: usize, advance: bool) -> Result<(), Violation> {
        let now = self.wall(i) - self.servers[i].epoch;
        let s = &mut self.servers[i];
        if !s.up {
            return Ok(());
        }
        if !s.scanned {
            let ended = ended_xids(&s.ptable, &s.prepared);
            purge(&mut s.ptable, &ended);
            let survivors: Vec<u32> = s.prepared.iter().map(|p| p.0).collect();
            s.scanned = enter_survivors(&mut s.ptable, &survivors);
        }
        let h = if s.scanned {
            let ended = ended_xids(&s.ptable, &s.prepared);
            purge(&mut s.ptable, &ended);
            if advance {
                s.shm.advance_idle(now);
            }
            let slots = s.txns.iter().map(|t| t.as_ref().map_or(EMPTY, |t| t.slot));
            read_horizon(s.shm.position(s.node()), true, slots, &s.ptable)
        } else {
            read_horizon(i64::MAX, false, [], &[])
        };
        let held = s
            .txns
            .iter()
            .flatten()
            .flat_map(|t| t.ids.iter())
            .chain(s.prepared.iter().flat_map(|p| p.1.iter()));
        if let Some(&id) = held.filter(|&&id| id <= h).min() {
            return Err(Violation::Horizon {
                server: i,
                id,
                horizon: h,
            });
        }
        Ok(())
    }

    /// The docs' remedy after a failover or recovery that lacked the last lease, on server `i`:
    /// a floor above the old server's last IDs (`snowflake_set_floor_from` on its tables, or
    /// `snowflake_set_floor` with its mark: `floor_id` is the higher), durable before the server
    /// serves writes (a drift raised first if the floor is further ahead of the clock).
    fn raise_floor_after_failover(&mut self, i: usize, floor_id: i64) {
        let now = self.wall(i) - self.servers[i].epoch;
        let s = &mut self.servers[i];
        let ms = decompose(floor_id).map_or(0, |p| p.ms);
        if let Err(snowflake_core::generator::FloorError::TooFarAhead { ahead_ms, .. }) =
            s.shm.ensure_above(floor_id, now, s.drift_ms)
        {
            s.drift_ms = ahead_ms + 1_000;
            s.shm
                .ensure_above(floor_id, now, s.drift_ms)
                .expect("within the raised drift");
        }
        s.shm.want_lease();
        s.floor_due = Some(ms);
        s.remedy = Some(floor_id);
    }

    /// A restore puts `db` in place of server `b`'s `_snowflake`: notes every other server whose
    /// claim there it made older, and every gone identity's.
    fn note_restored_claims(&mut self, b: usize, db: &Db) {
        for (sysid, lives) in &self.gone {
            if let Some(now) = self.servers[b].db.row(*sysid) {
                if db
                    .row(*sysid)
                    .is_none_or(|then| !then.same_or_newer_than(now))
                {
                    self.misinformed_gone.extend(lives.iter().map(|&l| (b, l)));
                }
            }
        }
        for k in 0..self.servers.len() {
            let sysid = self.servers[k].sysid;
            if k == b {
                continue;
            }
            let Some(now) = self.servers[b].db.row(sysid) else {
                continue;
            };
            let older = db
                .row(sysid)
                .is_none_or(|then| !then.same_or_newer_than(now));
            if older {
                self.misinformed.insert((b, k));
                self.misinformed_arrived.remove(&(b, k));
            }
        }
    }

    /// Server `i`, if it is up, is restarted cleanly (what is pending commits first) with what
    /// `change` sets in its configuration.
    fn restart(&mut self, i: usize, change: impl FnOnce(&mut Server)) {
        if self.servers[i].up {
            self.flush(i);
            self.crash(i);
            change(&mut self.servers[i]);
            self.start(i);
        }
    }

    /// Server `a` is lost for good (issue 59), and every other server follows the docs'
    /// procedure for a server that is gone: its claim retired there (their own copy of it, the
    /// only one left), the subscriptions from and to it dropped.
    fn lose(&mut self, a: usize) {
        let n = self.servers.len();
        if self.servers[a].retired || !(0..n).any(|k| k != a && !self.servers[k].retired) {
            return;
        }
        self.crash(a);
        let sysid = self.servers[a].sysid;
        let lineages = self.servers[a].lives.clone();
        let pair_max: HashMap<(u32, u32), i64> = self
            .lineage_pair_max
            .iter()
            .filter(|((l, _, _), _)| lineages.contains(l))
            .fold(HashMap::new(), |mut m, (&(_, dc, w), &id)| {
                let e = m.entry((dc, w)).or_insert(0);
                *e = (*e).max(id);
                m
            });
        let reach = (0..n)
            .map(|k| {
                let s = &self.servers[k];
                T0 + self.t as i64 + s.offset_ms - s.epoch + s.drift_ms as i64
            })
            .collect();
        let known = (0..n)
            .map(|k| {
                self.servers[k]
                    .db
                    .row(sysid)
                    .map_or(Vec::new(), pairs_named)
            })
            .collect();
        for k in 0..n {
            self.paths[a][k] = None;
            self.paths[k][a] = None;
            if k == a || self.servers[k].retired {
                continue;
            }
            let version = self.next_version();
            if let Some(mut row) = self.servers[k].db.row(sysid).cloned() {
                row.claim.retired = true;
                row.claim.version = version;
                self.servers[k].db.put(row);
                self.commit(k, false);
            }
        }
        self.servers[a].retired = true;
        self.servers[a].prepared.clear();
        self.lost.push(Lost {
            server: a,
            lineages,
            pair_max,
            reach,
            known,
        });
    }

    /// Server `b`'s machine starts a physical copy of server `a` as of `behind` commits ago.
    fn clone_server(&mut self, a: usize, b: usize, behind: usize) {
        let len = self.servers[a].history.len();
        if a == b || self.servers[a].retired || self.servers[b].retired || len == 0 {
            return;
        }
        let back = behind.min(len - 1);
        let src = &self.servers[a];
        let db = src.history[len - 1 - back].1.clone();
        // A copy of the running server's committed state starts above everything it issued (its
        // leases were durable before they were used), unless a restore had lowered them unseen
        // or the floor of a failover's remedy was not yet durable.
        let whole = back == 0 && !src.lowered_unseen && src.remedy.is_none();
        let inherited = if whole {
            self.lineage_max[src.lineage]
        } else {
            0
        };
        let (sysid, pair, epoch, drift) = (src.sysid, src.pair, src.epoch, src.drift_ms);
        let prepared = if back == 0 {
            src.prepared.clone()
        } else {
            Vec::new()
        };
        let mark_floor_ms = if whole { src.mark_floor_ms } else { 0 };
        // The second server's own identity ends here, unretired: its claim stays where it
        // arrived, as a server's that died.
        let (old_sysid, old_lives) = (self.servers[b].sysid, self.servers[b].lives.clone());
        if !(0..self.servers.len()).any(|k| k != b && self.servers[k].sysid == old_sysid) {
            self.gone.push((old_sysid, old_lives));
        }
        self.crash(b);
        let lineage = self.lineage_max.len();
        self.lineage_max.push(inherited);
        self.copies.insert(lineage);
        let t = self.t;
        let s = &mut self.servers[b];
        s.sysid = sysid;
        s.pair = pair;
        s.epoch = epoch;
        s.drift_ms = drift;
        s.mark_seen = db.mark;
        s.mark_floor_ms = mark_floor_ms;
        s.history = VecDeque::from([(t, db.clone())]);
        s.db = db;
        s.prepared = prepared;
        s.lineage = lineage;
        s.lives = vec![lineage];
        s.copy = true;
        s.remedy = None;
        // The machine's standby was the old server's: the copy has none of its own yet.
        s.standby_db = None;
        s.switched_db = None;
        s.switch_pending = false;
        s.lowered_unseen = false;
        s.last_issued_at = None;
        s.looked_at.clear();
        s.blind_since_refresh = false;
        s.lease_blind = false;
        s.pair_since = t;
        s.claim_written_t = t;
        s.silent_grant_above = None;
        self.clock_back(b);
        self.start(b);
    }

    /// Performs one event.
    pub fn step(&mut self, ev: Ev) -> Result<(), Violation> {
        self.steps += 1;
        // A standby reachable again has received what it lacked.
        let t = self.t;
        for s in self
            .servers
            .iter_mut()
            .filter(|s| t >= s.commits_wait_until)
        {
            s.standby_db = None;
        }
        let n = self.servers.len();
        let at = |x: u8| x as usize % n;
        match ev {
            Ev::Advance(ms) => {
                self.t += u64::from(ms);
                for s in self.servers.iter_mut().filter(|s| s.rate_ppm != 0) {
                    let d = i64::from(ms) * s.rate_ppm + s.skew_frac;
                    s.offset_ms += d / 1_000_000;
                    s.mono_skew += d / 1_000_000;
                    s.skew_frac = d % 1_000_000;
                }
                self.deliver();
            }
            Ev::Call(i, b) => self.call(at(i), b as usize % BACKENDS)?,
            Ev::End(i, b, how) => self.end(at(i), b as usize % BACKENDS, how),
            Ev::Finish(i, k) => {
                let s = &mut self.servers[at(i)];
                if s.up && !s.prepared.is_empty() {
                    let k = k as usize % s.prepared.len();
                    s.prepared.remove(k);
                }
            }
            Ev::Horizon(i, advance) => self.horizon(at(i), advance)?,
            Ev::Freeze(who, ms, commits_only) => {
                let until = self.t + u64::from(ms);
                for (k, s) in self.servers.iter_mut().enumerate() {
                    if who.is_none_or(|i| at(i) == k) {
                        if commits_only {
                            s.commits_wait_until = s.commits_wait_until.max(until);
                        } else {
                            s.frozen_until = s.frozen_until.max(until);
                        }
                    }
                }
            }
            Ev::Tick(i) => self.tick(at(i)),
            Ev::Flush(i) => self.flush(at(i)),
            Ev::Cancel(i) => self.cancel(at(i)),
            Ev::Step(i, d) => {
                let s = &mut self.servers[at(i)];
                s.offset_ms += d;
                if d < 0 {
                    self.clock_back(at(i));
                }
            }
            Ev::Crash(i) => self.crash(at(i)),
            Ev::Start(i) => self.start(at(i)),
            Ev::Move(i, p) => self.restart(at(i), |s| s.pair = p as usize % PAIRS.len()),
            Ev::Stall(a, b) | Ev::Heal(a, b) | Ev::Drop(a, b) => {
                let (a, b) = (at(a), at(b));
                if a == b || self.servers[a].retired || self.servers[b].retired {
                    return Ok(());
                }
                let pid = self.pids;
                self.pids += 1;
                let row = self.servers[a].db.row(self.servers[a].sysid).cloned();
                let due = self.t + self.knobs.lag_ms;
                let path = &mut self.paths[a][b];
                match ev {
                    Ev::Stall(..) => {
                        if let Some(p) = path {
                            if !p.stalled {
                                p.stalled = true;
                                p.errors += 1;
                            }
                        }
                    }
                    Ev::Heal(..) => match path {
                        Some(p) => {
                            if p.stalled {
                                p.stalled = false;
                                p.pid = pid;
                            }
                        }
                        None => {
                            // Subscribed again: the copy brings the publisher's row.
                            let mut p = Path {
                                stalled: false,
                                relays: false,
                                queue: VecDeque::new(),
                                // A new slot starts where the publisher's WAL is now, past any
                                // position an earlier subscription of this name reported (a
                                // path carries far fewer than 2^20 rows).
                                delivered: (self.t as i64) << 20,
                                reported: false,
                                errors: 0,
                                pid,
                                last_heard: self.t,
                            };
                            if let Some(row) = row {
                                p.queue.push_back((due, row, false));
                            }
                            *path = Some(p);
                        }
                    },
                    _ => *path = None,
                }
            }
            Ev::RestoreOwn(i, age) => {
                let i = at(i);
                let s = &mut self.servers[i];
                let len = s.history.len();
                if s.up && len > 0 {
                    let back = (age as usize).min(len - 1);
                    let old = s.history[len - 1 - back].1.clone();
                    s.lowered_unseen |= s.lowered_by(&old);
                    self.note_restored_claims(i, &old);
                    let s = &mut self.servers[i];
                    s.db = old;
                    self.commit(i, false);
                }
            }
            Ev::Setval(i, d) => {
                let i = at(i);
                let s = &mut self.servers[i];
                if s.up && s.db.mark > 0 {
                    s.db.mark = (s.db.mark + d).max(0);
                    // With its claim lowered before (a restore) and not written since.
                    let db = s.db.clone();
                    s.lowered_unseen |= s.lowered_by(&db);
                    self.commit(i, false);
                }
            }
            Ev::CopyDump(a, b) => {
                let (a, b) = (at(a), at(b));
                if a != b && self.servers[b].up && !self.servers[a].retired {
                    let dump = self.servers[a].db.clone();
                    self.note_restored_claims(b, &dump);
                    let s = &mut self.servers[b];
                    s.lowered_unseen |= s.lowered_by(&dump);
                    s.db = dump;
                    self.commit(b, false);
                }
            }
            Ev::Rewind(i, behind) => {
                let i = at(i);
                let s = &self.servers[i];
                let len = s.history.len();
                if s.retired || len == 0 {
                    return Ok(());
                }
                let back = (behind as usize).min(len - 1);
                let old_mark = s.db.mark - s.db.mark_epoch.unwrap_or(s.epoch);
                // The old server's last IDs, as its tables (or a replica of them) show them.
                let last_id = self.lineage_max[s.lineage];
                // A synchronous standby lacks a commit whose wait was cancelled, and the DBA,
                // trusting it, runs no remedy.
                let db = match (&s.switched_db, &s.standby_db, back) {
                    (Some(db), _, 0) | (None, Some(db), 0) => db.clone(),
                    _ => s.history[len - 1 - back].1.clone(),
                };
                // A standby made synchronous since the primary's last ID (issue 59) is trusted
                // only once an ID was issued after the switch (docs/operations.md); before, the
                // recipe runs.
                let remedy = back > 0 || s.switch_pending;
                self.note_restored_claims(i, &db);
                // The old server is gone (fenced); its undelivered claims with it.
                self.crash(i);
                for p in self.paths[i].iter_mut().flatten() {
                    // Positions go on from where the lost rows would have been: the promoted
                    // server's WAL continues past them.
                    p.delivered += p.queue.len() as i64;
                    p.queue.clear();
                }
                let s = &mut self.servers[i];
                // Any recovery that may lack the last lease runs the remedy (a synchronous
                // standby, `behind` 0, needs none).
                s.switched_db = None;
                s.switch_pending = false;
                if remedy {
                    self.rewound.push((s.lineage, last_id));
                    let mark_id = assemble(
                        old_mark.max(0) as u64,
                        Node::new(31, 31).expect("pair"),
                        MAX_SEQUENCE,
                    );
                    s.remedy = Some(s.remedy.unwrap_or(0).max(mark_id).max(last_id));
                }
                s.db = db;
                s.history.clear();
                s.standby_db = None;
                // The old server's floors are the remedy's; a recovery to an earlier point has
                // the transactions prepared then, which this world does not keep.
                s.mark_floor_ms = 0;
                if back > 0 {
                    s.prepared.clear();
                }
                self.start(i);
            }
            Ev::Slew(i, ppm) => self.servers[at(i)].rate_ppm = i64::from(ppm),
            Ev::Epoch(i, k) => {
                self.restart(at(i), |s| s.epoch = EPOCHS[k as usize % EPOCHS.len()]);
                self.clock_back(at(i));
            }
            Ev::SetFloor(i, per_mille) => {
                let i = at(i);
                let now = self.wall(i) - self.servers[i].epoch;
                let s = &mut self.servers[i];
                if s.up && s.floor_due.is_none() {
                    let ahead = s.drift_ms * u64::from(per_mille.min(999)) / 1000;
                    let ms = (now.max(0) as u64 + ahead).min(snowflake_core::layout::MAX_TIMESTAMP);
                    let id = assemble(ms, s.node(), MAX_SEQUENCE);
                    // snowflake_set_floor() returns once a lease above it is durable; IDs wait
                    // for that lease meanwhile.
                    if !matches!(
                        s.shm.ensure_above(id, now, s.drift_ms),
                        Err(FloorError::TooFarAhead { .. }) | Err(FloorError::Negative)
                    ) {
                        s.shm.want_lease();
                        s.nap_until = self.t;
                    }
                }
            }
            Ev::Lose(a) => self.lose(at(a)),
            Ev::SyncSwitch(i, behind) => {
                let s = &mut self.servers[at(i)];
                let len = s.history.len();
                if s.up && len > 0 {
                    let back = (behind as usize).min(len - 1);
                    s.switched_db = Some(s.history[len - 1 - back].1.clone());
                    s.switch_pending = true;
                    // The worker sees it at its next look.
                    s.standbys_gen += 1;
                }
            }
            Ev::Clone(a, b, behind) => self.clone_server(at(a), at(b), behind as usize),
            Ev::Relay(a, b, on) => {
                if let Some(p) = self.paths[at(a)][at(b)].as_mut() {
                    p.relays = on;
                }
            }
            Ev::Retire(i) => {
                let i = at(i);
                let others: Vec<usize> = (0..n)
                    .filter(|&k| k != i && !self.servers[k].retired)
                    .collect();
                if self.servers[i].retired || !self.servers[i].up || others.is_empty() {
                    return Ok(());
                }
                // Writes stopped; the recipe waits until every node has its claim, then reads
                // the highest ID it may have issued from its own claim.
                self.flush(i);
                let sysid = self.servers[i].sysid;
                let Some((last, left)) = self.servers[i]
                    .db
                    .row(sysid)
                    .map(|r| (r.claim.lease_id, r.left_pairs.clone()))
                else {
                    return Ok(());
                };
                let everywhere = others.iter().all(|&k| {
                    self.servers[k].db.row(sysid).is_some()
                        && self.paths[i][k].as_ref().is_none_or(|p| p.queue.is_empty())
                        && self.paths.iter().flatten().flatten().all(|p| {
                            p.queue
                                .iter()
                                .all(|(_, r, _)| r.claim.system_identifier != sysid)
                        })
                });
                if !everywhere {
                    return Ok(());
                }
                for k in others {
                    self.paths[i][k] = None;
                    self.paths[k][i] = None;
                    let version = self.next_version();
                    let db = &mut self.servers[k].db;
                    if let Some(mut row) = db.row(sysid).cloned() {
                        row.claim.retired = true;
                        row.claim.lease_id = row.claim.lease_id.max(last);
                        row.left_pairs.extend(left.iter().copied());
                        row.claim.version = version;
                        db.put(row);
                    }
                    self.commit(k, false);
                }
                self.crash(i);
                self.servers[i].retired = true;
                self.servers[i].prepared.clear();
            }
        }
        Ok(())
    }

    /// The calm tail: every fault ends, the fleet is set up as the docs say, and every server
    /// must issue again within `RESUME_MS`.
    pub fn tail(&mut self) -> Result<(), Violation> {
        let n = self.servers.len();
        for s in self.servers.iter_mut() {
            s.frozen_until = 0;
            s.commits_wait_until = 0;
            s.standby_db = None;
            s.rate_ppm = 0;
        }
        // Every path direct (`origin = none`), as the docs set a mesh up.
        for p in self.paths.iter_mut().flatten().flatten() {
            p.relays = false;
        }
        // A physical copy is stopped for good: of the servers with one system identifier, one
        // (the original, if it still runs) stays.
        for i in 0..n {
            let keep = (0..n)
                .filter(|&k| {
                    !self.servers[k].retired && self.servers[k].sysid == self.servers[i].sysid
                })
                .min_by_key(|&k| (self.servers[k].copy, k));
            if keep.is_some_and(|k| k != i) && !self.servers[i].retired {
                // Its machine runs nothing now: the subscriptions to it are dropped, as for any
                // server that left (a copy cannot be retired).
                self.crash(i);
                self.servers[i].retired = true;
                for k in 0..n {
                    self.paths[i][k] = None;
                    self.paths[k][i] = None;
                }
            }
        }
        for a in 0..n {
            for b in 0..n {
                self.step(Ev::Heal(a as u8, b as u8))?;
            }
        }
        for i in 0..n {
            self.flush(i);
            self.start(i);
            // An epoch moved later than the one IDs were issued under is refused: the docs say
            // to set it back and restart.
            let recorded = self.servers[i]
                .worker
                .as_ref()
                .map(|w| w.recorded_epoch_ms());
            if let Some(r) = recorded.filter(|&r| r < self.servers[i].epoch) {
                self.restart(i, |s| s.epoch = r);
            }
        }
        // Distinct pairs: a server that shares its pair moves to a free one.
        for i in 0..n {
            let taken = |w: &World, p: usize| {
                (0..n).any(|k| k != i && !w.servers[k].retired && w.servers[k].pair == p)
            };
            if !self.servers[i].retired && taken(self, self.servers[i].pair) {
                if let Some(p) = (0..PAIRS.len()).find(|&p| !taken(self, p)) {
                    self.step(Ev::Move(i as u8, p as u8))?;
                }
            }
        }
        let start = self.t;
        while self.t < start + TAIL_MS {
            for i in 0..n {
                // A clock that is wrong is corrected, but never behind what was issued by more
                // than the drift (the docs' "a clock that ran ahead": IDs resume once real time
                // catches up, or at once with a raised drift).
                let s = &mut self.servers[i];
                let wall_ms = T0 + self.t as i64 + s.offset_ms - s.epoch;
                let last = s.shm.last_ms() as i64;
                let correct = T0 + self.t as i64 - s.epoch;
                let target = correct.max(last - s.drift_ms as i64 / 2);
                s.offset_ms += target - wall_ms;
                if target < wall_ms {
                    self.clock_back(i);
                }
                self.tick(i);
                self.flush(i);
                self.call(i, 0)?;
                self.end(i, 0, 0);
            }
            self.step(Ev::Advance(10))?;
        }
        for (i, s) in self.servers.iter().enumerate() {
            if s.retired {
                continue;
            }
            if s.last_issued_at.is_none_or(|t| t + RESUME_MS < self.t) {
                let now = T0 + self.t as i64 + s.offset_ms - s.epoch;
                return Err(Violation::Stalled {
                    server: i,
                    why: format!(
                        "{} (clock {now}, last_ms {}, lease {:?}, floor due {:?}, drift {}, pending {}, gated {:?})",
                        s.last_refusal,
                        s.shm.last_ms(),
                        s.shm.lease(),
                        s.floor_due,
                        s.drift_ms,
                        s.pending.is_some(),
                        s.worker.as_ref().map(|w| w.gated())
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The entries of `table` whose transactions are no longer prepared (committed or rolled back).
fn ended_xids(table: &[Prepared], prepared: &[(u32, Vec<i64>)]) -> Vec<u32> {
    table
        .iter()
        .map(|e| e.xid)
        .filter(|&x| x != 0 && !prepared.iter().any(|p| p.0 == x))
        .collect()
}

/// The pairs a row of the claims says its server holds: the one it names, and its lease's. (A
/// pair it left is not one: its entry there is exact, and a return to it that no claim told of
/// is the docs' limit of a holder lost before its claim on a pair reached anyone.)
fn pairs_named(r: &Row) -> Vec<(u32, u32)> {
    let leased = (r.claim.lease_id > 0)
        .then(|| decompose(r.claim.lease_id).ok())
        .flatten()
        .map(|p| (p.datacenter, p.worker));
    leased
        .into_iter()
        .chain([(r.claim.datacenter, r.claim.worker)])
        .collect()
}

/// The pairs the claims of `db` left.
fn left_pairs_of(db: &Db) -> Vec<LeftPair> {
    db.claims
        .iter()
        .flat_map(|r| {
            r.left_pairs.iter().map(|&id| LeftPair {
                system_identifier: r.claim.system_identifier,
                last_id: id,
            })
        })
        .collect()
}

/// The PRNG of a schedule.
pub struct Prng(ChaCha8Rng);

impl Prng {
    pub fn new(seed: u64) -> Prng {
        Prng(ChaCha8Rng::seed_from_u64(seed))
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }

    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// The knobs and the events of the schedule of `seed`.
pub fn schedule(seed: u64) -> (Knobs, Vec<Ev>) {
    let mut r = Prng::new(seed);
    let servers = 2 + r.below(3) as usize;
    // Swarm testing: each fault kind is present or absent, and frequent or rare, by the seed.
    let mut weights = [0u32; KINDS];
    let base = [300, 300, 200, 150]; // advance, call, tick, flush
    for (w, b) in weights.iter_mut().zip(base) {
        *w = b;
    }
    let swarm = |r: &mut Prng| match r.below(4) {
        0 => 0,
        1 => 1,
        2 => 3,
        _ => 10,
    };
    for w in weights.iter_mut().take(CLASSIC).skip(4) {
        *w = swarm(&mut r);
    }
    // The kinds added last (slews, epochs, copies, relays) are drawn from a stream of their own,
    // and half the schedules have none of them: those are the schedules the world made before
    // they joined, seed for seed, so that they dilute nothing of what it found then.
    let mut late = Prng::new(seed ^ 0x005e_ed0f_1a7e_c0de);
    if late.chance(500) {
        for w in weights.iter_mut().skip(CLASSIC) {
            *w = swarm(&mut late);
        }
    }
    let knobs = Knobs {
        servers,
        events: 2_000 + r.below(6_000) as usize,
        weights,
        lag_ms: [0, 5, 50, 400][r.below(4) as usize],
        max_drift_ms: [1_000, 10_000, 60_000][r.below(3) as usize],
        claim_expiry_ms: 15_000,
    };
    let total: u32 = weights.iter().sum();
    let mut events = Vec::with_capacity(knobs.events);
    let srv = |r: &mut Prng| r.below(servers as u64) as u8;
    for _ in 0..knobs.events {
        let mut pick = r.below(u64::from(total)) as u32;
        let mut kind = 0;
        while pick >= weights[kind] {
            pick -= weights[kind];
            kind += 1;
        }
        let ev = match kind {
            0 => Ev::Advance([1, 3, 10, 50, 400, 3_000][r.below(6) as usize]),
            1 => Ev::Call(srv(&mut r), r.below(BACKENDS as u64) as u8),
            2 => Ev::Tick(srv(&mut r)),
            3 => Ev::Flush(srv(&mut r)),
            4 => {
                let size = [5, 500, 5_000, 20_000, 120_000, 2 * 86_400_000][r.below(6) as usize];
                let d = if r.chance(500) { -size } else { size };
                Ev::Step(srv(&mut r), d)
            }
            5 => Ev::Crash(srv(&mut r)),
            6 => Ev::Start(srv(&mut r)),
            7 => Ev::Move(srv(&mut r), r.below(PAIRS.len() as u64) as u8),
            8 => Ev::Stall(srv(&mut r), srv(&mut r)),
            9 => Ev::Heal(srv(&mut r), srv(&mut r)),
            10 => Ev::Drop(srv(&mut r), srv(&mut r)),
            11 => Ev::RestoreOwn(srv(&mut r), r.below(HISTORY as u64) as u8),
            12 => {
                let size = [100, 5_000, 600_000][r.below(3) as usize];
                Ev::Setval(srv(&mut r), if r.chance(500) { -size } else { size })
            }
            13 => Ev::CopyDump(srv(&mut r), srv(&mut r)),
            14 => Ev::Rewind(srv(&mut r), [0, 1, 3, 20][r.below(4) as usize]),
            15 => Ev::Retire(srv(&mut r)),
            16 => Ev::End(
                srv(&mut r),
                r.below(BACKENDS as u64) as u8,
                r.below(3) as u8,
            ),
            17 => Ev::Finish(srv(&mut r), r.below(MAX_PREPARED as u64) as u8),
            18 => Ev::Horizon(srv(&mut r), r.chance(500)),
            19 => Ev::Freeze(
                (!r.chance(300)).then(|| srv(&mut r)),
                [300, 3_000, 20_000, 60_000][r.below(4) as usize],
                r.chance(500),
            ),
            20 => Ev::Slew(
                srv(&mut r),
                [500, -500, 50_000, -50_000, 0][r.below(5) as usize],
            ),
            21 => Ev::Epoch(srv(&mut r), r.below(EPOCHS.len() as u64) as u8),
            22 => Ev::Clone(srv(&mut r), srv(&mut r), [0, 0, 1, 5][r.below(4) as usize]),
            _ => Ev::Relay(srv(&mut r), srv(&mut r), r.chance(700)),
        };
        events.push(ev);
    }
    // Cancelled synchronous waits (issue 50) are put among those events from a stream of their
    // own, in half the schedules, as rare or frequent as the others: the events drawn above stay
    // what they were, seed for seed (and a cancel does nothing unless a commit waits for the
    // synchronous standby).
    let mut later = Prng::new(seed ^ 0x0050_ca9c_e1ed_5a1c);
    if later.chance(500) {
        let per_mille = u64::from(swarm(&mut later));
        let mut with = Vec::with_capacity(events.len());
        for ev in events {
            if later.below(1000) < per_mille {
                with.push(Ev::Cancel(srv(&mut later)));
            }
            with.push(ev);
        }
        events = with;
    }
    // A pair handed over while its server is down, and that server's start before the new
    // holder's claim reaches it (issue 50's start gate, found on 15; `handover_burst`): in a
    // quarter of the schedules, from a stream of its own, inserted whole at a random place.
    let mut handed = Prng::new(seed ^ 0x0050_6a7e_0ff1_ce50);
    if servers > 1 && handed.chance(250) {
        for _ in 0..1 + handed.below(2) {
            let a = srv(&mut handed);
            let b = (a + 1 + handed.below(servers as u64 - 1) as u8) % servers as u8;
            let p = handed.below(PAIRS.len() as u64) as u8;
            let at = handed.below(events.len() as u64 + 1) as usize;
            events.splice(at..at, handover_burst(a, b, p));
        }
    }
    // Issue 59, each in a quarter of the schedules, from streams of their own: a lost writer's
    // pair handed over by the docs' procedure after its claims path stalled and its floor was
    // raised; a standby made synchronous while it lagged, then a failover to it.
    let mut lost = Prng::new(seed ^ 0x0059_1057_4a7d_0ff0);
    if servers > 1 && lost.chance(250) {
        let a = srv(&mut lost);
        let h = (a + 1 + lost.below(servers as u64 - 1) as u8) % servers as u8;
        let p = lost.below(PAIRS.len() as u64) as u8;
        let ahead = [300, 600, 900][lost.below(3) as usize];
        let at = lost.below(events.len() as u64 + 1) as usize;
        events.splice(at..at, lost_writer_burst(a, h, p, ahead));
    }
    let mut switch = Prng::new(seed ^ 0x0059_5717_c4ed_5ba5);
    if switch.chance(250) {
        let a = srv(&mut switch);
        let behind = 1 + switch.below(3) as u8;
        let at = switch.below(events.len() as u64 + 1) as usize;
        events.splice(at..at, sync_switch_burst(a, behind));
    }
    (knobs, events)
}

/// Server `a` issues on pair `p`; its claims path to `h` stalls; a DBA raises its floor `ahead`
/// per-mille of its drift ahead of its clock, and it issues above it; it is lost, and `h`, by
/// the docs' procedure (retire, drop the path), moves onto `p` and issues (issue 59: on 1.7.0
/// the next holder started at the claim it had seen plus 1 s, below the raise).
fn lost_writer_burst(a: u8, h: u8, p: u8, ahead: u16) -> Vec<Ev> {
    let mut burst = vec![Ev::Move(a, p)];
    for _ in 0..3 {
        burst.extend([
            Ev::Advance(400),
            Ev::Tick(a),
            Ev::Call(a, 0),
            Ev::Tick(a),
            Ev::Flush(a),
        ]);
    }
    burst.extend([Ev::Tick(a), Ev::Call(a, 0), Ev::Advance(400), Ev::Tick(h)]);
    burst.extend([
        Ev::Stall(a, h),
        Ev::SetFloor(a, ahead),
        Ev::Tick(a),
        Ev::Flush(a),
    ]);
    burst.extend([Ev::Tick(a), Ev::Call(a, 1), Ev::Call(a, 2), Ev::Lose(a)]);
    burst.extend([Ev::Move(h, p), Ev::Advance(10), Ev::Tick(h)]);
    for _ in 0..4 {
        burst.extend([
            Ev::Advance(400),
            Ev::Tick(h),
            Ev::Flush(h),
            Ev::Tick(h),
            Ev::Call(h, 0),
        ]);
    }
    burst
}

/// Server `a` issues on a floor raised ahead of its clock; `synchronous_standby_names` is
/// switched to a standby `behind` commits behind; `a` is called, and fails over to that
/// standby (issue 59: on 1.7.0 `a` kept issuing under the lease only the former standby had).
fn sync_switch_burst(a: u8, behind: u8) -> Vec<Ev> {
    let mut burst = vec![
        Ev::Tick(a),
        Ev::Call(a, 0),
        Ev::Tick(a),
        Ev::Flush(a),
        Ev::Tick(a),
    ];
    burst.extend([
        Ev::Call(a, 0),
        Ev::SetFloor(a, 500),
        Ev::Tick(a),
        Ev::Flush(a),
        Ev::Tick(a),
    ]);
    burst.extend([
        Ev::Call(a, 1),
        Ev::SyncSwitch(a, behind),
        // The worker's next look (its nap ends).
        Ev::Advance(300),
        Ev::Tick(a),
        Ev::Call(a, 2),
        Ev::Rewind(a, 0),
    ]);
    for _ in 0..3 {
        burst.extend([
            Ev::Advance(10),
            Ev::Tick(a),
            Ev::Flush(a),
            Ev::Tick(a),
            Ev::Call(a, 0),
        ]);
    }
    burst
}

/// Server `a` holds pair `p` and stops; the DBA drops its claims subscription at `b` (as the
/// docs say for a peer gone) and moves `b` to `p`; once `a`'s claim has expired there, `b`
/// issues; `a` starts, and both call in the same millisecond as soon as `a` has a lease (`b`
/// first: it cannot see `a`, `a` can see it).
fn handover_burst(a: u8, b: u8, p: u8) -> Vec<Ev> {
    let mut burst = vec![Ev::Move(a, p), Ev::Advance(10), Ev::Tick(a), Ev::Call(a, 0)];
    // `a` issues, stops; its subscription at `b` is dropped and `b` takes the pair.
    burst.extend([
        Ev::Tick(a),
        Ev::Flush(a),
        Ev::Tick(a),
        Ev::Call(a, 0),
        Ev::Crash(a),
    ]);
    burst.extend([Ev::Drop(a, b), Ev::Move(b, p), Ev::Advance(10), Ev::Tick(b)]);
    for _ in 0..6 {
        burst.extend([Ev::Advance(3_000), Ev::Tick(b)]);
    }
    burst.extend([
        Ev::Call(b, 0),
        Ev::Tick(b),
        Ev::Flush(b),
        Ev::Tick(b),
        Ev::Call(b, 0),
    ]);
    // `a` starts, gets a lease, and both call in one millisecond.
    burst.extend([
        Ev::Start(a),
        Ev::Advance(1),
        Ev::Tick(a),
        Ev::Call(a, 0),
        Ev::Tick(a),
    ]);
    burst.extend([
        Ev::Flush(a),
        Ev::Tick(a),
        Ev::Call(b, 1),
        Ev::Call(a, 0),
        Ev::Heal(a, b),
    ]);
    burst
}

/// Runs `events` on a new world of `knobs`, then the calm tail. With `trace`, prints the world
/// after every event.
pub fn run_traced(
    knobs: Knobs,
    events: &[Ev],
    trace: bool,
) -> (Result<(), (usize, Violation)>, u64, u64) {
    let mut w = World::new(knobs);
    for (at, &ev) in events.iter().enumerate() {
        let result = w.step(ev);
        if trace {
            println!("  {at:4}  {ev:?}: {}", w.describe());
        }
        if let Err(v) = result {
            return (Err((at, v)), w.steps, w.ids);
        }
    }
    let tail = w.tail().map_err(|v| (events.len(), v));
    if trace {
        println!("  tail: {}", w.describe());
    }
    (tail, w.steps, w.ids)
}

/// Runs `events` on a new world of `knobs`, then the calm tail.
pub fn run(knobs: Knobs, events: &[Ev]) -> (Result<(), (usize, Violation)>, u64, u64) {
    run_traced(knobs, events, false)
}

/// The fewest events (by deleting chunks, then single events) that still break the same
/// invariant.
pub fn shrink(knobs: Knobs, events: &[Ev], kind: u8) -> Vec<Ev> {
    let start: Vec<Ev> = match run(knobs, events).0 {
        // Events after the one that broke it play no part.
        Err((at, _)) if at < events.len() => events[..=at].to_vec(),
        _ => events.to_vec(),
    };
    shrink_by(
        start,
        |evs| matches!(run(knobs, evs).0, Err((_, v)) if v.kind() == kind),
    )
}

/// Deletes chunks of `events`, halving their size down to one event, for as long as `fails`
/// still holds of what is left.
pub fn shrink_by(mut cur: Vec<Ev>, fails: impl Fn(&[Ev]) -> bool) -> Vec<Ev> {
    let mut chunk = cur.len() / 2;
    while chunk >= 1 {
        let mut i = 0;
        let mut progressed = false;
        while i < cur.len() {
            let end = (i + chunk).min(cur.len());
            let mut trial = cur[..i].to_vec();
            trial.extend_from_slice(&cur[end..]);
            if fails(&trial) {
                cur = trial;
                progressed = true;
            } else {
                i += chunk;
            }
        }
        if !progressed {
            chunk /= 2;
        }
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_exactly() {
        for seed in [1, 2, 3] {
            let (knobs, events) = schedule(seed);
            let (a, steps_a, ids_a) = run(knobs, &events);
            let (b, steps_b, ids_b) = run(knobs, &events);
            assert_eq!((a, steps_a, ids_a), (b, steps_b, ids_b));
            assert!(ids_a > 0, "seed {seed} issued nothing");
        }
    }

    #[test]
    fn shrinking_keeps_what_breaks_it_and_drops_the_rest() {
        let (_, events) = schedule(5);
        let mut events = events[..400].to_vec();
        events.insert(100, Ev::Crash(9));
        events.insert(300, Ev::Start(9));
        let fails = |evs: &[Ev]| {
            let crash = evs.iter().position(|e| *e == Ev::Crash(9));
            crash.is_some_and(|c| evs[c..].contains(&Ev::Start(9)))
        };
        assert_eq!(shrink_by(events, fails), vec![Ev::Crash(9), Ev::Start(9)]);
    }

    /// Runs `events` on a new world of `knobs` (no tail), each event required to hold.
    fn world(servers: usize, events: &[Ev]) -> World {
        let mut knobs = schedule(1).0;
        knobs.servers = servers;
        knobs.lag_ms = 5;
        let mut w = World::new(knobs);
        for &ev in events {
            w.step(ev).expect("no invariant broken");
        }
        w
    }

    #[test]
    fn a_path_that_relays_brings_a_third_servers_claim_once() {
        let sysid0 = 7_000_000_000_000_000_000;
        let events = [Ev::Drop(0, 2), Ev::Tick(0), Ev::Advance(10)];
        let w = world(3, &events);
        assert!(w.servers[2].db.row(sysid0).is_none(), "no path brings it");
        let mut events = events.to_vec();
        events.extend([Ev::Relay(1, 2, true), Ev::Relay(2, 1, true)]);
        events.extend([Ev::Advance(6_000), Ev::Tick(0)]);
        events.extend([Ev::Advance(10), Ev::Advance(10)]);
        let w = world(3, &events);
        assert!(w.servers[2].db.row(sysid0).is_some(), "relayed through 1");
        let relays = w.readings(2).iter().filter(|r| r.relays).count();
        assert_eq!(relays, 1, "and the fleet check is told");
        // Relayed once: rows do not go round between 1 and 2, which relay both ways.
        assert!(w
            .paths
            .iter()
            .flatten()
            .flatten()
            .all(|p| p.queue.is_empty()));
    }

    #[test]
    fn a_physical_copy_whose_claims_reach_its_original_is_refused_there() {
        // Server 1's machine starts a copy of server 0; its claims reach 0, which refuses.
        let mut events = vec![Ev::Tick(0), Ev::Tick(1), Ev::Clone(0, 1, 0)];
        for _ in 0..10 {
            events.extend([
                Ev::Advance(3_000),
                Ev::Tick(0),
                Ev::Tick(1),
                Ev::Advance(10),
            ]);
        }
        let w = world(2, &events);
        assert_eq!(w.servers[1].sysid, w.servers[0].sysid);
        let conflict = w.servers[0].worker.as_ref().and_then(|w| w.conflict());
        assert_eq!(
            conflict.map(|c| c.system_identifier),
            Some(w.servers[0].sysid)
        );
        assert!(w.servers[0].shm.refused());
    }

    #[test]
    fn a_slewed_clock_drifts_and_an_epoch_moved_is_kept() {
        let w = world(
            2,
            &[Ev::Slew(0, 50_000), Ev::Advance(3_000), Ev::Advance(3_000)],
        );
        assert_eq!((w.servers[0].offset_ms, w.mono(0)), (300, 6_300));
        assert_eq!(w.servers[1].offset_ms, 0);
        let mut events = vec![Ev::Epoch(1, 1)];
        for _ in 0..4 {
            events.extend([Ev::Tick(0), Ev::Call(1, 0), Ev::Tick(1), Ev::Flush(1)]);
            events.extend([Ev::Advance(3_000), Ev::Advance(10)]);
        }
        let w = world(2, &events);
        assert_eq!(w.servers[1].epoch, EPOCHS[1]);
        assert_eq!(w.servers[1].db.mark_epoch, Some(EPOCHS[1]));
    }

    /// Seed 76941870213800, shrunk: server 1 issues on a floor two days ahead of its clock (a
    /// recovery's remedy), renews its lease, and its machine is overwritten by a copy of server
    /// 0 before that renewal's claim leaves. Server 0 takes the pair after the expiry: it
    /// continues one lease length above the claim it saw, above what the renewal let 1 issue.
    #[test]
    fn a_pair_taken_from_a_server_lost_before_its_last_renewal_left_repeats_nothing() {
        let knobs = schedule(76941870213800).0;
        let events = [
            Ev::Step(1, 172_800_000),
            Ev::Advance(3_000),
            Ev::Call(1, 0),
            Ev::Tick(1),
            Ev::Flush(1),
            Ev::Advance(3_000),
            Ev::Tick(0),
            Ev::Advance(50),
            Ev::Step(1, -172_800_000),
            Ev::Rewind(1, 20),
            Ev::Advance(3_000),
            Ev::Advance(3_000),
            Ev::Tick(1),
            Ev::Flush(1),
            Ev::Tick(1),
            Ev::Call(1, 0),
            Ev::Clone(0, 1, 1),
            Ev::Move(0, 1),
        ];
        let (result, _, _) = run(knobs, &events);
        assert!(result.is_ok(), "{result:?}");
    }

    /// Seed 76941870168454, shrunk: servers 0 and 1 end on one pair; 0 refuses, seeing 1's
    /// claim, until a `--clean` restore of its own `_snowflake` removes that claim there. It
    /// then issues before 1's next refresh arrives: the docs' limit of such a restore ("a live
    /// server's [claim] until its next refresh"), which the world excuses.
    #[test]
    fn a_clean_restore_that_removes_a_live_peers_claim_is_the_docs_limit() {
        let knobs = schedule(76941870168454).0;
        let events = [
            Ev::Call(1, 2),
            Ev::Advance(400),
            Ev::Tick(1),
            Ev::Flush(1),
            Ev::Setval(1, 600_000),
            Ev::Tick(0),
            Ev::CopyDump(1, 0),
            Ev::Rewind(0, 1),
            Ev::Move(1, 4),
            Ev::Tick(0),
            Ev::Advance(50),
            Ev::Advance(3_000),
            Ev::Tick(1),
            Ev::Rewind(1, 0),
            Ev::Advance(3),
            Ev::Tick(1),
            Ev::Move(0, 4),
            Ev::Advance(3),
            Ev::Advance(400),
            Ev::Tick(0),
            Ev::Advance(3_000),
            Ev::Flush(0),
            Ev::RestoreOwn(0, 43),
            Ev::Tick(0),
            Ev::Call(0, 1),
            Ev::Tick(0),
            Ev::Call(0, 0),
        ];
        let mut w = World::new(knobs);
        for &ev in &events[..23] {
            w.step(ev).expect("no invariant broken before the restore");
        }
        assert!(w.misinformed.contains(&(0, 1)), "1's claim is gone at 0");
        let (result, _, _) = run(knobs, &events);
        assert!(result.is_ok(), "{result:?}");
    }

    /// Seed 106498791905104, shrunk: server 0 issues on (0, 0), then its machine is overwritten
    /// by a copy of server 1 (its identity gone, unretired), and a dump of the copy's
    /// `_snowflake` is restored into server 1, putting back server 0's claim as old as the dump.
    /// Server 1 moves to (0, 0) and repeats server 0's IDs: the docs' limit of restoring
    /// `_snowflake` (the claims as old as the dump), which the world excuses for an identity
    /// gone as for a running server.
    #[test]
    fn a_restore_that_ages_a_gone_servers_claim_is_the_docs_limit() {
        let knobs = schedule(106498791905104).0;
        let events = [
            Ev::Call(0, 1),
            Ev::Call(1, 1),
            Ev::Advance(10),
            Ev::Tick(0),
            Ev::Step(1, 172_800_000),
            Ev::Advance(400),
            Ev::Tick(1),
            Ev::Flush(1),
            Ev::CopyDump(1, 0),
            Ev::Flush(0),
            Ev::Advance(3_000),
            Ev::Rewind(0, 1),
            Ev::Advance(1),
            Ev::Tick(0),
            Ev::Flush(0),
            Ev::Tick(1),
            Ev::Tick(0),
            Ev::Call(0, 1),
            Ev::Advance(3_000),
            Ev::Clone(1, 0, 5),
            Ev::CopyDump(0, 1),
            Ev::Tick(1),
            Ev::Tick(0),
            Ev::Advance(50),
            Ev::Move(1, 0),
        ];
        let mut w = World::new(knobs);
        for &ev in &events[..21] {
            w.step(ev).expect("no invariant broken before the move");
        }
        assert!(
            w.misinformed_gone.contains(&(1, 0)),
            "0's first life aged at 1"
        );
        let (result, _, _) = run(knobs, &events);
        assert!(result.is_ok(), "{result:?}");
    }

    /// The start gate (issue 50): a server back after another took its pair while it was down
    /// (its subscription dropped there) issues nothing before that server's claim arrives.
    /// With the gate opening at the path's first report, both issue the same IDs.
    #[test]
    fn a_server_back_after_its_pair_was_taken_waits_for_the_takers_claim() {
        let mut knobs = schedule(1).0;
        knobs.servers = 2;
        knobs.lag_ms = 400;
        let mut events = vec![Ev::Advance(10), Ev::Tick(0), Ev::Tick(1), Ev::Advance(500)];
        events.extend(handover_burst(0, 1, 3));
        let mut w = World::new(knobs);
        for &ev in &events {
            w.step(ev).expect("no invariant broken");
        }
        assert!(w.servers[1].last_issued_at.is_some(), "the taker issued");
        assert!(w.servers[0]
            .start_backlog
            .contains(&(w.servers[1].sysid, (3, 7))));
        assert!(w.tail().is_ok());
    }

    /// Issue 59: server 0 issues on (3, 7), its claims path to 1 stalls, its floor is raised
    /// 6 s ahead of its clock (drift 10 s) and it issues there; it is lost, and 1 takes the pair
    /// by the docs' procedure. 1 continues above 0's IDs (on 1.7.0 it started at the claim it
    /// had seen plus 1 s, below them: `make sim-mutants SIM_MUTANT='lost writer'`).
    #[test]
    fn a_lost_writers_pair_handed_over_continues_above_its_ids() {
        let mut knobs = schedule(1).0;
        (knobs.servers, knobs.lag_ms, knobs.max_drift_ms) = (2, 50, 10_000);
        let mut events = vec![Ev::Advance(10), Ev::Tick(0), Ev::Tick(1), Ev::Advance(500)];
        events.extend(lost_writer_burst(0, 1, 3, 600));
        let mut w = World::new(knobs);
        for &ev in &events {
            w.step(ev).expect("no invariant broken");
        }
        let raised = w.lost[0].pair_max[&(3, 7)];
        let clock = T0 + w.t as i64 - EPOCH;
        assert!(
            decompose(raised).unwrap().ms as i64 > clock,
            "0 issued ahead"
        );
        let taker = w.lineage_pair_max[&(w.servers[1].lineage, 3, 7)];
        assert!(taker > raised, "1 issued on the pair, above 0's IDs");
        assert!(w.tail().is_ok());
    }

    /// Issue 59: server 0 issues on a floor raised ahead of its clock; its synchronous standby
    /// is switched to one a commit behind (without the last lease), and it fails over to it.
    /// The call after the switch waits for a lease the new standby confirms, so the DBA runs
    /// the recipe (no ID since the switch), and nothing repeats (with the grant kept, the call
    /// issues, the standby is trusted, and its IDs repeat: `make sim-mutants
    /// SIM_MUTANT='switch of the synchronous'`).
    #[test]
    fn a_failover_to_a_standby_made_synchronous_while_it_lagged_repeats_nothing() {
        let mut knobs = schedule(1).0;
        (knobs.servers, knobs.lag_ms, knobs.max_drift_ms) = (2, 50, 10_000);
        let mut events = vec![Ev::Advance(10), Ev::Tick(0), Ev::Tick(1), Ev::Advance(500)];
        events.extend(sync_switch_burst(0, 1));
        let mut w = World::new(knobs);
        for &ev in &events[..events.len() - 16] {
            w.step(ev).expect("no invariant broken");
        }
        assert!(w.servers[0].switch_pending, "no ID after the switch");
        for &ev in &events[events.len() - 16..] {
            w.step(ev).expect("no invariant broken");
        }
        assert_eq!(w.rewound.len(), 1, "the recipe ran");
        assert!(w.tail().is_ok());
    }

    #[test]
    fn a_crash_with_the_clock_set_back_repeats_nothing() {
        let knobs = schedule(1).0;
        let mut events = vec![Ev::Advance(10); 50];
        events.extend([Ev::Tick(0), Ev::Call(0, 0), Ev::Advance(400), Ev::Tick(0)]);
        events.extend([Ev::Flush(0), Ev::Tick(0), Ev::Call(0, 0), Ev::Call(0, 0)]);
        events.extend([Ev::Step(0, -5_000), Ev::Crash(0), Ev::Start(0)]);
        events.extend([Ev::Tick(0), Ev::Call(0, 0)]);
        let (result, _, _) = run(knobs, &events);
        // The real protocol holds: the restart starts above the persisted lease.
        assert!(result.is_ok(), "{result:?}");
    }
}
