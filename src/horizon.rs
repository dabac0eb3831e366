//! `snowflake_horizon()`: the read horizon of [`crate::core::horizon`], kept in shared memory.
//!
//! Invariant (see [`crate::core::horizon`] for why it makes the horizon exact): every ID this server has
//! issued to a transaction that has not yet ended and become visible is at or above the value in
//! that transaction's holding slot, or, for a prepared transaction, in its prepared entry.
//! The pieces that keep it, each with its reason:
//! - [`crate::generator::hot_attempt`] stores the ID into the slot in the critical section that issues it, so
//!   no reader under the generator's lock can see an issued ID that no slot holds;
//! - the slot of a backend is its PGPROC's index; a parallel worker uses its lock group leader's,
//!   since its IDs belong to the leader's transaction (the leader waits for its workers before it
//!   commits or aborts, so nothing writes the slot after it is emptied);
//! - `on_xact` empties the slot on COMMIT and ABORT, which PostgreSQL calls after
//!   `ProcArrayEndTransaction`: the transaction is visible to every snapshot taken from then on.
//!   The callback is registered in the postmaster, so every backend has it, including a parallel
//!   leader that never called `snowflake_nextval()` itself;
//! - on PRE_PREPARE the slot's ID moves to the prepared table under the transaction's XID, and an
//!   entry is dropped only when `TransactionIdIsInProgress` says that XID has ended: a prepared
//!   transaction stays in the proc array until COMMIT/ROLLBACK PREPARED has made it visible;
//! - shared memory starts empty after a restart, but transactions prepared before it survive: the
//!   first `snowflake_horizon()` enters every prepared transaction it does not know as holding
//!   `UNKNOWN` (below every ID), after purging the entries of transactions that ended;
//! - the prepared table has `max_prepared_transactions` entries, as many as PostgreSQL lets be
//!   prepared at once, so once ended ones are purged every prepared transaction fits. If one does
//!   not anyway, nothing is skipped: PREPARE fails (53400) rather than hold no entry, and a scan
//!   that cannot record a survivor reports -1 and runs again at the next call.
//!
//! The prepared table's rules (enter, purge, enter the survivors, nothing known until then) are
//! the core's ([`crate::core::horizon::enter`] and its siblings), which the simulator drives with
//! crashes; this module keeps the table in shared memory, takes the lock and asks PostgreSQL
//! which transactions are prepared or have ended.

use crate::config;
use crate::core::horizon::Slot;
use crate::core::horizon::{self as rules, Prepared, EMPTY};
use crate::errors;
use crate::generator::GENERATOR;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};
use std::sync::atomic::{AtomicBool, Ordering};

#[repr(C)]
struct Header {
    /// Slots laid out (as requested).
    capacity: usize,
    /// Slots in use: one per PGPROC that can run a transaction (MaxBackends), at most `capacity`.
    slots: usize,
    prepared: usize,
    /// Whether the prepared transactions that survived the last restart have been entered.
    scanned: AtomicBool,
}

/// The segment: a `Header`, then `capacity` slots, then `prepared` entries. Null when
/// `snowflake.track_horizon` is off or the library is not preloaded.
static mut SEGMENT: *mut Header = std::ptr::null_mut();
static mut REQUESTED: (usize, usize) = (0, 0);

fn size(slots: usize, prepared: usize) -> usize {
    std::mem::size_of::<Header>()
        + slots * std::mem::size_of::<Slot>()
        + prepared * std::mem::size_of::<Prepared>()
}

unsafe fn slots_ptr(h: *mut Header) -> *mut Slot {
    unsafe { (h as *mut u8).add(std::mem::size_of::<Header>()) as *mut Slot }
}

unsafe fn prepared_ptr(h: *mut Header) -> *mut Prepared {
    unsafe { slots_ptr(h).add((*h).capacity) as *mut Prepared }
}

fn setting_int(name: &std::ffi::CStr) -> usize {
    let p = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    if p.is_null() {
        return 0;
    }
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0)
}

/// How many slots: one per PGPROC that can run a transaction (MaxBackends is known when shared
/// memory is requested, in the shmem_request_hook).
fn slot_count() -> usize {
    unsafe { pg_sys::MaxBackends as usize }
}

fn request() {
    let n = (slot_count(), setting_int(c"max_prepared_transactions"));
    unsafe {
        REQUESTED = n;
        pg_sys::RequestAddinShmemSpace(size(n.0, n.1));
    }
}

/// Requests the segment, installs the start-up hook and registers the transaction callback.
/// Only in the postmaster while shared_preload_libraries is processed, and only when
/// `snowflake.track_horizon` is on.
pub fn init() {
    unsafe {
        static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(on_request);
        #[pg_guard]
        unsafe extern "C-unwind" fn on_request() {
            unsafe {
                if let Some(prev) = PREV_REQUEST {
                    prev();
                }
            }
            request();
        }
    }
    unsafe {
        static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_startup);
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());

        #[pg_guard]
        unsafe extern "C-unwind" fn on_startup() {
            unsafe {
                if let Some(prev) = PREV_STARTUP {
                    prev();
                }
                let (slots, prepared) = REQUESTED;
                // AddinShmemInitLock: number 21 of the main LWLocks on every major (as pgrx uses it).
                let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
                pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
                let mut found = false;
                let h = pg_sys::ShmemInitStruct(
                    c"snowflake horizon".as_ptr(),
                    size(slots, prepared),
                    &mut found,
                ) as *mut Header;
                if !found {
                    h.write(Header {
                        capacity: slots,
                        slots: slots.min(pg_sys::MaxBackends.max(0) as usize),
                        prepared,
                        scanned: AtomicBool::new(prepared == 0),
                    });
                    for i in 0..slots {
                        slots_ptr(h).add(i).write(Slot::empty());
                    }
                    for i in 0..prepared {
                        prepared_ptr(h).add(i).write(Prepared::default());
                    }
                }
                pg_sys::LWLockRelease(init_lock);
                SEGMENT = h;
            }
        }
    }
}

/// The slot of `proc`, or None when tracking is off or `proc` has none (an auxiliary process).
unsafe fn slot_of(proc: *mut pg_sys::PGPROC) -> Option<&'static Slot> {
    unsafe {
        let h = SEGMENT;
        if h.is_null() || proc.is_null() {
            return None;
        }
        let base = (*pg_sys::ProcGlobal).allProcs;
        let index =
            (proc as usize).wrapping_sub(base as usize) / std::mem::size_of::<pg_sys::PGPROC>();
        (index < (*h).slots).then(|| &*slots_ptr(h).add(index))
    }
}

/// The slot that the IDs this process issues are held in: its own, or in a parallel worker its
/// leader's. Null when tracking is off. Errors if the process has none, rather than issue IDs
/// that no slot holds.
pub fn hot_slot() -> *const Slot {
    unsafe {
        if SEGMENT.is_null() {
            return std::ptr::null();
        }
        let me = pg_sys::MyProc;
        let leader = if me.is_null() || (*me).lockGroupLeader.is_null() {
            me
        } else {
            (*me).lockGroupLeader
        };
        match slot_of(leader) {
            Some(s) => s,
            None => errors::raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                "this process has no snowflake horizon slot".into(),
                Some(format!(
                    "Its PGPROC lies outside the {} slots that were set up at start-up.",
                    (*SEGMENT).slots
                )),
                Some("Set snowflake.track_horizon = off, or report this as a bug."),
            ),
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    let Some(slot) = (unsafe { slot_of(pg_sys::MyProc) }) else {
        return;
    };
    if slot.own() == EMPTY {
        return;
    }
    match event {
        // After ProcArrayEndTransaction (commit, abort) or once the prepared entry exists.
        XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE => slot.clear(),
        XACT_EVENT_PRE_PREPARE => prepare(slot),
        _ => {}
    }
}

/// Copies the slot's ID into the prepared table under the transaction's XID. Without an XID the
/// transaction wrote nothing, so it has no row to hide and needs no entry.
fn prepare(slot: &Slot) {
    let xid = unsafe { pg_sys::GetTopTransactionIdIfAny() };
    if xid == pg_sys::InvalidTransactionId {
        return;
    }
    // With max_prepared_transactions = 0 PostgreSQL refuses the PREPARE itself, after this
    // callback ("prepared transactions are disabled"): its error, not one of ours.
    if prepared_table().is_empty() {
        return;
    }
    for attempt in 0..2 {
        {
            let _lock = GENERATOR.exclusive();
            if rules::enter(prepared_table(), xid.into_inner(), slot.own()) {
                return;
            }
        }
        if attempt == 0 {
            purge_ended();
        }
    }
    errors::raise(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        "no free snowflake horizon entry for this prepared transaction".into(),
        Some(format!(
            "Every one of the {} entries (max_prepared_transactions) holds a prepared transaction that has not ended.",
            prepared_table().len()
        )),
        Some("Commit or roll back prepared transactions (pg_prepared_xacts), then prepare again."),
    )
}

/// The prepared table; the caller holds the generator's lock (or only reads XIDs to purge).
#[allow(clippy::mut_from_ref)]
fn prepared_table() -> &'static mut [Prepared] {
    unsafe {
        let h = SEGMENT;
        std::slice::from_raw_parts_mut(prepared_ptr(h), (*h).prepared)
    }
}

/// Drops the entries of prepared transactions that have ended (committed or rolled back, and
/// visible). Ending is final, so checking outside the lock is safe.
fn purge_ended() {
    let xids: Vec<u32> = {
        let _lock = GENERATOR.share();
        prepared_table()
            .iter()
            .map(|e| e.xid)
            .filter(|&x| x != 0)
            .collect()
    };
    let ended: Vec<u32> = xids
        .into_iter()
        .filter(|&x| unsafe {
            !pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from_inner(x))
        })
        .collect();
    if !ended.is_empty() {
        let _lock = GENERATOR.exclusive();
        rules::purge(prepared_table(), &ended);
    }
}

/// Enters the prepared transactions that this server's shared memory knows nothing about (they
/// were prepared before the last restart) as holding `UNKNOWN`. The entries of transactions that
/// ended are purged first: then every survivor fits, since PostgreSQL itself keeps at most
/// `max_prepared_transactions` prepared. Returns false, and leaves the scan to be done again, if
/// one did not fit anyway: the horizon must not be reported past a transaction it could not
/// record.
fn scan_survivors() -> bool {
    purge_ended();
    let xids: Vec<u32> = Spi::connect(|client| {
        client
            .select(
                "SELECT transaction::pg_catalog.text FROM pg_catalog.pg_prepared_xacts",
                None,
                &[],
            )
            .expect("list the prepared transactions")
            .filter_map(|r| r.get::<String>(1).ok().flatten())
            .filter_map(|s| s.parse::<u32>().ok())
            .collect()
    });
    let _lock = GENERATOR.exclusive();
    if !rules::enter_survivors(prepared_table(), &xids) {
        return false;
    }
    unsafe { (*SEGMENT).scanned.store(true, Ordering::Release) };
    true
}

/// Commits the generator to the clock (see [`crate::core::horizon::advance`]), so that the horizon of an
/// idle server keeps up with time. When the lease is behind the clock (an idle server renews
/// none), it asks the lease worker for one and waits for it, with the lock released, for at most
/// a second: without it the horizon is only lower, never wrong.
fn advance_idle_generator() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let now = crate::core::time::Clock::now_unix_ms(&crate::core::time::SystemClock)
            - config::epoch_ms();
        let short = { GENERATOR.exclusive().state.advance_idle(now) };
        if !short || std::time::Instant::now() > deadline {
            return;
        }
        crate::generator::wake_worker();
        unsafe { pg_sys::pg_usleep(200) };
        pg_sys::check_for_interrupts!();
    }
}

/// The largest ID such that no transaction of this server still in progress holds or can still
/// obtain an ID at or below it. Reading it changes nothing: on an idle server it stays at the last
/// ID issued (or the floor after a restart).
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_horizon() -> i64 {
    read_horizon("snowflake_horizon()", false)
}

/// `snowflake_horizon()` after committing an idle generator to the clock (see
/// `advance_idle_generator`), so that an idle server's horizon keeps up with time: what a writer
/// that publishes its horizon for other readers needs. It is a promise about future IDs (none
/// will be issued below the previous millisecond, even after the clock is corrected if it was
/// ahead), so only a role the DBA chose may make it: EXECUTE is revoked from PUBLIC.
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_advance_horizon() -> i64 {
    read_horizon("snowflake_advance_horizon()", true)
}

fn read_horizon(function: &str, advance: bool) -> i64 {
    config::require_preload(function);
    config::require_primary(
        function,
        (
            "Which transactions hold IDs is known only to the primary that issued them.",
            "Read the horizon that the primary publishes into a table (see \"On a standby, and with several writers\" in docs/reading-in-order.md).",
        ),
    );
    if unsafe { SEGMENT.is_null() } {
        errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("{function} is not available: snowflake.track_horizon is off"),
            None,
            Some("Set snowflake.track_horizon = on in postgresql.conf and restart the server."),
        );
    }
    // Until every transaction prepared before the last restart is recorded, nothing is known to
    // be visible: the horizon is below every ID.
    let scanned = unsafe { (*SEGMENT).scanned.load(Ordering::Acquire) } || scan_survivors();
    if !scanned {
        return rules::read(i64::MAX, false, [], &[]);
    }
    purge_ended();
    if advance {
        advance_idle_generator();
    }
    let shared = GENERATOR.share();
    let node = crate::core::layout::Node::from_bits(shared.node_bits);
    let p = shared.state.position(node);
    let h = unsafe { SEGMENT };
    let slots = unsafe { std::slice::from_raw_parts(slots_ptr(h), (*h).slots) };
    rules::read(p, scanned, slots.iter().map(Slot::held), prepared_table())
}

/// Who holds the horizon back: every backend whose open transaction holds an ID (`pid`, as in
/// `pg_stat_activity`), and every prepared transaction (`prepared_xid`, as in
/// `pg_prepared_xacts`), each with the smallest ID it holds (0 for a transaction prepared before
/// the last restart, whose IDs are unknown). A parallel worker's IDs show under its leader.
///
/// An ID tells when a row was made and by which server, as a query's text does, so what each
/// caller sees is what `pg_stat_activity` shows it of other sessions' queries: the transactions
/// of roles whose privileges it has, all of them for members of `pg_read_all_stats`.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn snowflake_horizon_holders() -> TableIterator<
    'static,
    (
        name!(pid, Option<i32>),
        name!(prepared_xid, Option<i64>),
        name!(held_id, i64),
    ),
> {
    config::require_preload("snowflake_horizon_holders()");
    if unsafe { SEGMENT.is_null() } {
        errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake_horizon_holders() is not available: snowflake.track_horizon is off".into(),
            None,
            Some("Set snowflake.track_horizon = on in postgresql.conf and restart the server."),
        );
    }
    if unsafe { !(*SEGMENT).scanned.load(Ordering::Acquire) } {
        scan_survivors();
    }
    purge_ended();
    // SAFETY: role-cache lookups for the current user.
    let sees = |role: pg_sys::Oid| unsafe {
        let me = pg_sys::GetUserId();
        pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS))
            || has_privs_of_role_checked(me, role)
    };
    // The owner of each prepared transaction, read before the lock is taken (SPI may wait).
    let prepared_owners: Vec<(i64, pg_sys::Oid)> = Spi::connect(|client| {
        client
            .select(
                "SELECT p.transaction::pg_catalog.text::pg_catalog.int8, p.ownerid
                   FROM pg_catalog.pg_prepared_xact() p",
                None,
                &[],
            )
            .expect("read the prepared transactions' owners")
            .filter_map(|row| {
                Some((
                    row.get::<i64>(1).ok().flatten()?,
                    row.get::<pg_sys::Oid>(2).ok().flatten()?,
                ))
            })
            .collect()
    });
    let mut rows = Vec::new();
    {
        let _lock = GENERATOR.share();
        let h = unsafe { SEGMENT };
        let slots = unsafe { std::slice::from_raw_parts(slots_ptr(h), (*h).slots) };
        for (i, slot) in slots.iter().enumerate() {
            let held = slot.held();
            if held != EMPTY {
                // SAFETY: slot i is the PGPROC of index i (see `slot_of`), within allProcs.
                let (pid, role) = unsafe {
                    let proc = (*pg_sys::ProcGlobal).allProcs.add(i);
                    ((*proc).pid, (*proc).roleId)
                };
                rows.push((Some(pid), None, held, role));
            }
        }
        for e in prepared_table().iter().filter(|e| e.xid != 0) {
            // A prepared transaction whose owner is not known (it just ended) shows to
            // pg_read_all_stats only.
            let owner = prepared_owners
                .iter()
                .find(|(xid, _)| *xid == e.xid as i64)
                .map_or(pg_sys::InvalidOid, |(_, o)| *o);
            rows.push((None, Some(e.xid as i64), e.min_id, owner));
        }
    }
    let mut rows: Vec<_> = rows
        .into_iter()
        .filter(|r| sees(r.3))
        .map(|(pid, xid, held, _)| (pid, xid, held))
        .collect();
    rows.sort_by_key(|r| r.2);
    TableIterator::new(rows)
}

/// `has_privs_of_role`, false for no role (a backend that has not yet logged in, a prepared
/// transaction whose owner is unknown).
unsafe fn has_privs_of_role_checked(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    role != pg_sys::InvalidOid && unsafe { pg_sys::has_privs_of_role(member, role) }
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowflake_horizon_holders() IS 'Who holds the horizon back: the backends (pid) and prepared transactions (prepared_xid) whose open transaction holds an ID, with the smallest ID each holds';
COMMENT ON FUNCTION snowflake_horizon() IS 'The largest ID such that no transaction of this server still in progress holds or can obtain an ID at or below it: read it before a query, then read rows up to it';
-- Its value is one below the smallest ID an open transaction holds, any role's in any database:
-- for pg_read_all_stats and the roles a DBA grants it to, as snowflake_horizon_holders() is.
REVOKE EXECUTE ON FUNCTION snowflake_horizon() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_horizon() TO pg_read_all_stats;
REVOKE EXECUTE ON FUNCTION snowflake_advance_horizon() FROM PUBLIC;
COMMENT ON FUNCTION snowflake_advance_horizon() IS 'snowflake_horizon() after committing an idle generator to the previous millisecond, so that an idle writer''s published horizon keeps up with time; for the role that publishes horizons';
"#,
    name = "snowflake_horizon_comment",
    requires = [
        snowflake_horizon,
        snowflake_advance_horizon,
        snowflake_horizon_holders
    ]
);
