//! The one generator of this server: a [`State`] in shared memory under a PostgreSQL LWLock, so
//! every backend and parallel worker shares one last timestamp and one sequence. That one state
//! is what makes [the generator's invariant](crate::core::generator#invariant) hold for the whole
//! server; the lease bound it checks is [`crate::core::lease`]'s rule, kept by [`crate::lease`].
//! Nothing here sleeps or waits while holding the LWLock: a call that must wait returns to
//! [`crate::core::generator::issue`]'s loop, which waits with no lock held.

use crate::core::generator::State;
use pgrx::lwlock::PgLwLock;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, pg_sys};

#[derive(Clone, Copy)]
#[repr(C)]
pub struct Shared {
    pub state: State,
    /// The lease worker's latch (an address inside shared memory, the same in every process),
    /// set by a backend that needs a lease renewed now; 0 while no worker has started.
    pub worker_latch: usize,
    pub worker_pid: i32,
    /// The other server's claim while `state.refused` is set (see [`crate::fleet`]).
    pub conflict: crate::core::fleet::Claim,
    /// Whether that claim is a conflict only because claims may be stale here (a path that
    /// carries them is not applying; see [`crate::core::fleet::PathWatch`]).
    pub claims_stale: bool,
    /// While `state.refused` is set because the lease worker found an object in `_snowflake` that
    /// no superuser owns (see `foreign_object` in [`crate::lease`]): what it is and who owns it.
    pub foreign: ForeignObject,
    /// The epoch the persisted mark was written under (Unix ms), `i64::MIN` until the lease
    /// worker has read it: tells an epoch that moved later from a clock that is behind.
    pub recorded_epoch_ms: i64,
    /// The owner of `snowflake.database` as the lease worker last read it (`owner` of this
    /// text; `what` is the database's name), and what the worker made of it (see
    /// `note_database_owner` in [`crate::lease`]).
    pub database_owner: ForeignObject,
    pub database_trust: DatabaseTrust,
    /// While the lease worker waits at start for the claims paths to bring the claims up to date
    /// (see [`crate::core::fleet::CatchUp`]) before it grants the first lease.
    pub awaiting_claims: bool,
    /// The lease worker's connection to `snowflake.database`: set just before it connects and
    /// cleared once connected, so a worker that finds it still set knows the last one died while
    /// connecting (PostgreSQL's FATAL for a database that does not exist).
    pub connecting: bool,
    /// The lease worker found that `snowflake.database` names no database (see
    /// `wait_for_database` in [`crate::lease`]); it waits for it to be created.
    pub database_missing: bool,
    /// The pair IDs are issued with ([`node`]): the configured one, or the one of the Citus group
    /// once the lease worker knows it.
    pub node_bits: u64,
    /// Where that pair came from, and why there is none while there is none.
    pub pair: PairState,
    /// This server's claim as its lease worker last wrote it, for `snowflake.fleet_claim`
    /// (system identifier 0 until then), and the pairs it left.
    pub own_claim: crate::core::fleet::Claim,
    pub own_left: [i64; 16],
    pub own_left_len: u32,
    /// A random number drawn when the server starts (shared memory is made): a physical copy of
    /// this server shares its system identifier, never this (see [`crate::core::citus::Whose`]).
    pub instance: i64,
    /// When the lease worker last refreshed this server's claim, last granted a lease, and last
    /// saw the clock jump forward ([`monotonic_ms`], 0 for never); whether claims may be stale
    /// here (a claims path not applying, conflict or not). For `snowflake_health()`.
    pub refreshed_at: u64,
    pub granted_at: u64,
    pub forward_jump_at: u64,
    pub paths_stale: bool,
}

/// The monotonic clock in ms (system-wide, so comparable between processes; neither a clock
/// step nor libfaketime, as the tests run it, moves it), never 0.
pub fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000).max(1)
}

/// Where the pair in use came from ([`crate::core::citus`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(C)]
pub enum PairState {
    /// `snowflake.datacenter_id` and `snowflake.worker_id`.
    Configured,
    /// The Citus group, not known yet: refused.
    Unknown,
    /// The Citus group, recorded in `_snowflake.citus_group`.
    Group(i64),
    /// Citus gives another group than the one recorded: refused.
    Changed { recorded: i64, now: i64 },
    /// A group the pair source cannot hold: refused.
    Beyond { group: i64, max: i64 },
    /// The Citus worker refuses the cluster's metadata (an object no superuser owns), and no
    /// group is recorded yet: refused.
    Untrusted,
}

impl PairState {
    /// Whether the generator refuses because of it.
    pub fn refuses(self) -> bool {
        !matches!(self, PairState::Configured | PairState::Group(_))
    }
}

/// A random number from PostgreSQL's strong random source (the node token, the instance).
pub fn strong_random() -> i64 {
    let mut buf = [0u8; 8];
    // SAFETY: a valid buffer of the length given.
    let ok = unsafe { pg_sys::pg_strong_random(buf.as_mut_ptr().cast(), buf.len()) };
    assert!(ok, "no strong random source");
    i64::from_ne_bytes(buf)
}

/// The pair IDs are issued with now.
pub fn node() -> crate::core::layout::Node {
    crate::core::layout::Node::from_bits(GENERATOR.share().node_bits)
}

/// Whether the lease worker trusts `snowflake.database`: a superuser must own it, since its
/// owner may lock, vacuum, rename and drop what lives there (the lease among it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum DatabaseTrust {
    /// The worker has not looked yet.
    Unknown,
    /// A superuser owns it.
    Superuser,
    /// Another role owns it, and the worker's lease was already there (made by an earlier
    /// release, whose docs put it in the application database): it is used, with a WARNING at
    /// every start of the worker, until a release refuses it.
    Tolerated,
    /// Another role owns it and no lease is there yet: refused (`state.refused` is set).
    Refused,
}

/// Text of fixed size, so that it can live in shared memory: NUL-padded, cut at a char boundary.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ForeignObject {
    what: [u8; 192],
    owner: [u8; 64],
}

impl ForeignObject {
    pub const NONE: ForeignObject = ForeignObject {
        what: [0; 192],
        owner: [0; 64],
    };

    pub fn new(what: &str, owner: &str) -> ForeignObject {
        fn fill<const N: usize>(text: &str) -> [u8; N] {
            let mut buf = [0u8; N];
            let mut end = text.len().min(N - 1);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            buf[..end].copy_from_slice(&text.as_bytes()[..end]);
            buf
        }
        ForeignObject {
            what: fill(what),
            owner: fill(owner),
        }
    }

    /// (what, owner), or None when nothing foreign was found.
    pub fn get(&self) -> Option<(String, String)> {
        let text = |b: &[u8]| {
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            String::from_utf8_lossy(&b[..end]).into_owned()
        };
        (self.what[0] != 0).then(|| (text(&self.what), text(&self.owner)))
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            // Nothing may be issued until the lease worker has read the persisted high-water
            // mark and written a lease above it.
            state: State::awaiting_lease(),
            worker_latch: 0,
            worker_pid: 0,
            conflict: crate::core::fleet::Claim::NONE,
            claims_stale: false,
            foreign: ForeignObject::NONE,
            recorded_epoch_ms: i64::MIN,
            database_owner: ForeignObject::NONE,
            database_trust: DatabaseTrust::Unknown,
            awaiting_claims: false,
            connecting: false,
            database_missing: false,
            node_bits: crate::config::configured_node().bits(),
            pair: if crate::config::pair_source().from_citus() {
                PairState::Unknown
            } else {
                PairState::Configured
            },
            own_claim: crate::core::fleet::Claim::NONE,
            own_left: [0; 16],
            own_left_len: 0,
            instance: strong_random(),
            refreshed_at: 0,
            granted_at: 0,
            forward_jump_at: 0,
            paths_stale: false,
        }
    }
}

impl Shared {
    /// The other server's claim while the generator refuses because of it.
    pub fn conflict(&self) -> Option<crate::core::fleet::Claim> {
        (self.state.refused()
            && self.foreign.get().is_none()
            && self.database_trust != DatabaseTrust::Refused
            && !self.pair.refuses())
        .then_some(self.conflict)
    }
}

// SAFETY: plain old data; the one address in it points into shared memory itself.
unsafe impl PGRXSharedMemory for Shared {}

pub static GENERATOR: PgLwLock<Shared> = unsafe { PgLwLock::new(c"snowflake_generator") };

/// Requests the segment and the LWLock; only valid while shared_preload_libraries is processed.
pub fn init() {
    pg_shmem_init!(GENERATOR);
}

/// This backend's direct pointers to the generator and its LWLock, for the hot path. Null until
/// the first call has checked that the library is preloaded and the server is not in recovery
/// (a backend never goes back into recovery, so the check need not be repeated).
#[derive(Clone, Copy)]
struct Hot {
    shared: *mut Shared,
    lock: *mut pg_sys::LWLock,
    /// The holding slot of this process's transaction (see [`crate::horizon`]); null when
    /// `snowflake.track_horizon` is off.
    slot: *const crate::core::horizon::Slot,
}

static mut HOT: Hot = Hot {
    shared: std::ptr::null_mut(),
    lock: std::ptr::null_mut(),
    slot: std::ptr::null(),
};

/// The two LWLock calls without pgrx's sigsetjmp guard around them (see `snowflake_nextval`).
mod unguarded {
    use pgrx::pg_sys::{LWLock, LWLockMode};
    unsafe extern "C-unwind" {
        pub fn LWLockAcquire(lock: *mut LWLock, mode: LWLockMode::Type) -> bool;
        pub fn LWLockRelease(lock: *mut LWLock);
    }
}

/// Sets up the hot path of this process, once; `slot` finds the read horizon's slot that its IDs
/// are held in (null when tracking is off).
pub fn enable_hot_path(slot: fn() -> *const crate::core::horizon::Slot) {
    // SAFETY: backends are single-threaded; the pointers stay valid for the process's life.
    unsafe {
        if HOT.shared.is_null() {
            let lock = &raw mut (*pg_sys::GetNamedLWLockTranche(GENERATOR.name().as_ptr())).lock;
            let shared: *mut Shared = &mut *GENERATOR.exclusive();
            let slot = slot();
            HOT = Hot { shared, lock, slot };
        }
    }
}

/// One attempt on the common path, or None before `enable_hot_path`.
///
/// # Safety
/// Only from a backend's main thread.
#[inline(always)]
pub unsafe fn hot_attempt(
) -> Option<Result<crate::core::generator::Step, crate::core::generator::GenError>> {
    unsafe {
        let hot = (&raw const HOT).read();
        if hot.shared.is_null() {
            return None;
        }
        let read = || {
            crate::core::time::Clock::now_unix_ms(&crate::core::time::SystemClock)
                - crate::config::epoch_ms()
        };
        let drift = crate::config::max_clock_drift_ms();
        // The clock is read before the lock, so that the critical section stays a few dozen
        // instructions: with the read inside it, two busy backends collide on the lock so often
        // that they sleep on it, and their throughput fell eightfold (see "Many cores"). But a
        // backend that waited for the lock may bring a reading older than the last holder's,
        // which would count as the clock going back and, with a small max_clock_drift, could
        // even raise a spurious 58000. So a reading older than the newest the generator has
        // seen is taken again, under the lock, where it is authoritative: only a clock that
        // really went back is treated as one. That costs a second read only in that case.
        let early = read();
        unguarded::LWLockAcquire(hot.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        // The pair is read under the lock: from the Citus group, it is known only once the lease
        // worker has read it.
        let node = crate::core::layout::Node::from_bits((*hot.shared).node_bits);
        let state = &mut (*hot.shared).state;
        let now = if state.is_stale(early) { read() } else { early };
        let step = state.next(now, node, drift);
        // The read horizon's invariant: an issued ID is held by its transaction's slot before
        // the lock is released (IDs increase, so only the first of a transaction is stored).
        if let Ok(crate::core::generator::Step::Issued(id)) = step {
            if !hot.slot.is_null() {
                (*hot.slot).hold(id);
            }
        }
        unguarded::LWLockRelease(hot.lock);
        Some(step)
    }
}

/// Wakes the lease worker, if one runs. Called with no lock held.
pub fn wake_worker() {
    let latch = GENERATOR.share().worker_latch;
    if latch != 0 {
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

/// One wait of a backend for the lease worker, with no lock held: a short sleep that doubles
/// with every `round` up to a few milliseconds (a lease usually arrives within one WAL flush; a
/// worker that is down or blocked is not polled thousands of times a second). The caller checks
/// for interrupts after it: `snowflake_nextval()` with [`check_for_interrupts_counted`].
pub fn nap_for_lease(round: &mut u32) {
    let micros = 100u32 << (*round).min(6);
    *round += 1;
    wake_worker();
    unsafe { pg_sys::pg_usleep(micros.into()) };
}

/// The interrupt check of a waiting `snowflake_nextval()`: a cancel (`statement_timeout`
/// among them) or a termination ends the call with an error here, so the call is counted as a
/// failed one first ([`count_failure`]), as `ProcessInterrupts` will raise it: pending, and not
/// held off.
pub fn check_for_interrupts_counted() {
    // SAFETY: flags and counters of this process that PostgreSQL's signal handlers and
    // CHECK_FOR_INTERRUPTS read the same way.
    let raises = unsafe {
        pg_sys::InterruptPending != 0
            && pg_sys::InterruptHoldoffCount == 0
            && pg_sys::CritSectionCount == 0
            && (pg_sys::ProcDiePending != 0
                || (pg_sys::QueryCancelPending != 0 && pg_sys::QueryCancelHoldoffCount == 0))
    };
    if raises {
        count_failure();
    }
    pg_sys::check_for_interrupts!();
}

/// How long a call refused because of another server's claim waits for the lease worker to look
/// at the claims again (`look_again`) before it raises the refusal: the look comes within
/// [`crate::core::worker::LOOK_AGAIN_MS`] of the worker's last refresh, and takes one
/// transaction.
pub const LOOK_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A call refused because of another server's claim asks the lease worker to look at the claims
/// again, and waits with no lock held until a look that started after it asked has finished, or
/// `limit` passed: a claim a DBA retired (or a peer that moved away) is then seen by this very
/// call, not at the worker's next refresh, 5 s later. Returns whether such a look finished. No
/// look is asked when no worker runs or the refusal is not a claim's.
pub fn look_again(limit: std::time::Duration) -> bool {
    let ticket = {
        let mut g = GENERATOR.exclusive();
        if g.worker_latch == 0 || g.conflict().is_none() {
            return false;
        }
        g.state.ask_look()
    };
    // One wake is enough: the latch stays set until the worker's next nap, and the worker naps
    // no longer than until the look is allowed.
    wake_worker();
    let deadline = std::time::Instant::now() + limit;
    let mut micros = 500u32;
    loop {
        if GENERATOR.share().state.look_answered(ticket) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        unsafe { pg_sys::pg_usleep(micros.into()) };
        micros = (micros * 2).min(10_000);
        check_for_interrupts_counted();
    }
}

/// Waits until a lease up to timestamp field `ms` is persisted (WAL-flushed by the lease
/// worker, as every lease is before it is granted), asking the worker for one: a floor raised to
/// `ms` survives a restart from then on, since the generator starts above the persisted lease.
/// `Err` after `limit`.
pub fn wait_until_persisted(ms: u64, limit: std::time::Duration) -> Result<(), ()> {
    let deadline = std::time::Instant::now() + limit;
    let mut round = 0;
    loop {
        {
            let mut g = GENERATOR.exclusive();
            if g.state.lease().is_none_or(|lease| lease >= ms) {
                return Ok(());
            }
            g.state.want_lease();
        }
        if std::time::Instant::now() > deadline || database_is_missing() {
            return Err(());
        }
        nap_for_lease(&mut round);
        pg_sys::check_for_interrupts!();
    }
}

/// Counts a call of `snowflake_nextval()` that fails, once, just before it raises (whatever it
/// fails on: a refusal, the clock, a lease that did not come, a standby), stamped with
/// [`monotonic_ms`] for the health check's "in the last hour".
pub fn count_failure() {
    GENERATOR.exclusive().state.count_failure(monotonic_ms());
}

/// How long a call waits for the lease worker before giving up with an error.
pub const LEASE_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A call waited `waited` for a lease in vain: where to look, which differs when no lease worker
/// has started at all (it then wrote nothing to the log).
pub fn lease_not_ready(waited: std::time::Duration, database: &str) -> ! {
    let (awaiting_claims, no_worker, missing) = {
        let g = GENERATOR.share();
        (g.awaiting_claims, g.worker_pid == 0, g.database_missing)
    };
    if missing {
        database_missing(database)
    }
    let (detail, hint) = if awaiting_claims {
        (
            format!(
                "After a start, no ID is issued before every subscription that carries _snowflake.claims here has applied its publisher's end of WAL; they have not within {} s. The server log names those that do not move.",
                waited.as_secs(),
            ),
            GATE_HINT,
        )
    } else if no_worker {
        // No worker has started since the server did: it has written nothing to the log.
        (
            format!(
                "No \"snowflake lease\" background worker has started since the server started, so no high-water mark was persisted within {} s.",
                waited.as_secs()
            ),
            "Background workers start only in a server that accepts connections (not in single-user mode) and only where max_worker_processes leaves a slot: the postmaster logs \"too many background workers\" at start-up when it does not. Raise max_worker_processes and restart.",
        )
    } else {
        (
            format!(
                "The \"snowflake lease\" background worker has not persisted a high-water mark for the next IDs within {} s; it keeps it in the sequence _snowflake.lease_ms of database \"{database}\".",
                waited.as_secs()
            ),
            "Check the server log for errors of the \"snowflake lease\" worker, and that the database named by snowflake.database exists.",
        )
    };
    crate::errors::raise(
        pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake ID generator is not ready".into(),
        Some(detail),
        Some(hint),
    )
}

/// Whether the lease worker found that `snowflake.database` names no database: a call then
/// fails at once rather than wait for a lease that cannot come.
pub fn database_is_missing() -> bool {
    GENERATOR.share().database_missing
}

/// `snowflake.database` names a database that does not exist: the lease worker cannot persist a
/// mark until it is created, or the setting names another and the server restarts.
pub fn database_missing(database: &str) -> ! {
    crate::errors::raise(
        pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake ID generator is not ready".into(),
        Some(format!(
            "snowflake.database names database \"{database}\", which does not exist; the \"snowflake lease\" background worker keeps the high-water mark there, and no ID is issued until it can."
        )),
        Some(&database_missing_hint(database)),
    )
}

/// The fix for a `snowflake.database` that names no database, for the error and the log.
pub fn database_missing_hint(database: &str) -> String {
    format!(
        "Create the database (CREATE DATABASE {}), or set snowflake.database to an existing database and restart the server.",
        quote_ident(database)
    )
}

/// `name` as an SQL identifier, quoted where it must be.
fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// What to do while the start's gate waits for a claims subscription that does not move.
pub const GATE_HINT: &str = "Start the publisher, or fix the subscription (pg_stat_subscription, and the log of its apply worker). If its server is gone for good, retire its claim (UPDATE _snowflake.claims SET retired = true WHERE system_identifier = ...) and ALTER SUBSCRIPTION ... DISABLE: a subscription disabled at the start is not waited for.";
