//! Whether the lease worker's last commit is where the docs say a lease is: received by the
//! synchronous standbys where the commit waits for them ([`crate::core::worker`], rule 5).
//!
//! A commit with `synchronous_commit = on` waits in `SyncRepWaitForLSN` until the standbys have
//! flushed its record, but a cancel or a terminate of the waiting process ends that wait with a
//! WARNING ("canceling wait for synchronous replication ... The transaction has already
//! committed locally, but might not have been replicated to the standby"), and the commit
//! returns normally. So the commit's return proves nothing: after it, the worker compares the
//! end of its commit record (`XactLastCommitEnd`) with what the standbys confirmed
//! (`WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH]`, which the walsenders advance only as far as
//! `synchronous_standby_names` is satisfied, priority or quorum alike), read under
//! `SyncRepLock` as `SyncRepWaitForLSN` reads it, and waits, outside the generator's lock, until
//! it is covered. PostgreSQL's own checks, in its order: no wait when no walsender may run
//! (`max_wal_senders = 0`: `SyncRepRequested()` is false) or no synchronous standby is defined.

use crate::core::worker::Standbys;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::pg_sys;
use pgrx::spi::Spi;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// `SyncRepLock`'s place among the individual LWLocks (`lwlocknames.txt`, `lwlocklist.h` from 17:
/// 32 in every major from 15 to 19); its name is checked before the first use.
const SYNC_REP_LOCK: u16 = 32;

/// `WalSndCtl->sync_standbys_status` holds `SYNC_STANDBY_INIT | SYNC_STANDBY_DEFINED` from these
/// releases on: PostgreSQL 18 introduced it, and its fix of a race at start-up was backported to
/// 15.13, 16.9 and 17.5 as the same byte, which was the bool `sync_standbys_defined` before (so a
/// build against a newer minor may run on an older one).
#[cfg(feature = "pg15")]
const STATUS_BITS_SINCE: i32 = 150_013;
#[cfg(feature = "pg16")]
const STATUS_BITS_SINCE: i32 = 160_009;
#[cfg(feature = "pg17")]
const STATUS_BITS_SINCE: i32 = 170_005;
#[cfg(any(feature = "pg18", feature = "pg19"))]
const STATUS_BITS_SINCE: i32 = 180_000;

/// How often the wait looks again: no walsender wakes this process (it is not in their queue).
const LOOK_MS: i64 = 20;

static LOCK_CHECKED: AtomicBool = AtomicBool::new(false);

/// Whether this process's last commit (its record's end) has been confirmed by the synchronous
/// standbys, or needs no confirmation (no synchronous standby defined, no walsenders).
pub fn last_commit_replicated() -> bool {
    // SAFETY: this process's own variable, set by RecordTransactionCommit.
    let lsn = unsafe { pg_sys::XactLastCommitEnd };
    confirmed(lsn)
}

/// Waits until the standbys have confirmed this process's last commit: checks for interrupts
/// at every look, so a terminate (PostgreSQL's shutdown among them) ends the worker and a cancel
/// raises an ERROR, and neither grants anything. Exits if the postmaster dies. Holds no lock
/// while it waits.
pub fn wait_for_last_commit() {
    // SAFETY: as above.
    let lsn = unsafe { pg_sys::XactLastCommitEnd };
    while !confirmed(lsn) {
        // SAFETY: this process's own latch, as every background worker waits.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                LOOK_MS as _,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        pgrx::check_for_interrupts!();
    }
}

/// Who confirms a commit here now ([`crate::core::worker`], rule 9): this process's
/// `synchronous_standby_names` (read again after each SIGHUP) and the walsenders PostgreSQL's own
/// rules count as synchronous for it (`sync` with a priority list, `quorum` with `ANY`), as
/// `pg_stat_replication` shows them. With no name set (or no walsender possible) none is: then
/// no transaction is needed, which is the common case the worker meets after every nap.
pub fn standbys_now() -> Standbys {
    // SAFETY: PostgreSQL's own setting, NUL-terminated when set, and a plain integer setting.
    let names = unsafe {
        let p = pg_sys::SyncRepStandbyNames;
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    if names.is_empty() || unsafe { pg_sys::max_wal_senders } == 0 {
        return Standbys {
            names,
            pids: Vec::new(),
        };
    }
    let pids = BackgroundWorker::transaction(|| {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT pid, sync_state FROM pg_catalog.pg_stat_replication ORDER BY pid",
                    None,
                    &[],
                )
                .expect("read pg_stat_replication")
                .filter_map(|row| {
                    let pid = row.get::<i32>(1).ok().flatten()?;
                    let state = row.get::<String>(2).ok().flatten()?;
                    matches!(state.as_str(), "sync" | "quorum").then_some(pid)
                })
                .collect()
        })
    });
    Standbys { names, pids }
}

/// Whether `lsn` needs no confirmation or has it, as `SyncRepWaitForLSN` decides whether to wait
/// (for a commit with `synchronous_commit = on`: mode `SYNC_REP_WAIT_FLUSH`).
fn confirmed(lsn: pg_sys::XLogRecPtr) -> bool {
    // SAFETY: reads of PostgreSQL's settings and of the walsenders' shared memory, which exists
    // whenever max_wal_senders > 0; the lock is taken and released around plain reads.
    unsafe {
        if lsn == 0 || pg_sys::max_wal_senders == 0 || pg_sys::WalSndCtl.is_null() {
            return true;
        }
        let lock = sync_rep_lock();
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_SHARED);
        let ctl = &*pg_sys::WalSndCtl;
        let status = ctl.sync_standbys_status;
        let flushed = ctl.lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize];
        pg_sys::LWLockRelease(lock);
        lsn <= flushed || !standbys_defined(status)
    }
}

/// Whether synchronous standbys are defined, from `WalSndCtl`'s byte (see
/// [`STATUS_BITS_SINCE`]); before the checkpointer has initialized it, PostgreSQL's own
/// fallback: this process's `synchronous_standby_names`.
fn standbys_defined(status: u8) -> bool {
    if server_version_num() < STATUS_BITS_SINCE {
        return status != 0;
    }
    if status & pg_sys::SYNC_STANDBY_INIT as u8 != 0 {
        return status & pg_sys::SYNC_STANDBY_DEFINED as u8 != 0;
    }
    // SAFETY: PostgreSQL's own setting, NUL-terminated when set.
    let names = unsafe { pg_sys::SyncRepStandbyNames };
    !names.is_null() && unsafe { *names } != 0
}

fn server_version_num() -> i32 {
    let name = c"server_version_num";
    // SAFETY: a NUL-terminated name; the value is parsed before anything else runs.
    let p = unsafe { pg_sys::GetConfigOption(name.as_ptr(), false, false) };
    if p.is_null() {
        return 0;
    }
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `SyncRepLock`, its name checked once: a server whose lock is elsewhere is an internal error,
/// not a wrong answer.
unsafe fn sync_rep_lock() -> *mut pg_sys::LWLock {
    if !LOCK_CHECKED.load(Ordering::Relaxed) {
        // SAFETY: the name of an individual LWLock, a static string.
        let name = unsafe { pg_sys::GetLWLockIdentifier(pg_sys::PG_WAIT_LWLOCK, SYNC_REP_LOCK) };
        let name = if name.is_null() {
            ""
        } else {
            unsafe { CStr::from_ptr(name) }.to_str().unwrap_or("")
        };
        if name != "SyncRep" {
            pgrx::ereport!(
                ERROR,
                pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("snowflake: individual LWLock {SYNC_REP_LOCK} of this server is \"{name}\", not \"SyncRep\""),
                "The lease worker reads what the synchronous standbys confirmed under SyncRepLock; this server's build is not one it knows."
            );
        }
        LOCK_CHECKED.store(true, Ordering::Relaxed);
    }
    // SAFETY: MainLWLockArray holds the individual LWLocks first.
    unsafe { &mut (*pg_sys::MainLWLockArray.add(SYNC_REP_LOCK as usize)).lock }
}
