//! The lease worker: persists the generator's high-water mark through WAL.
//!
//! The mark is a plain PostgreSQL sequence, `_snowflake.lease_ms` in the database named by
//! `snowflake.database`, holding Unix milliseconds. `setval` is WAL-logged and its transaction's
//! commit flushes that WAL, so the mark survives crashes and reaches streaming standbys (and a
//! synchronous standby before the commit returns). The worker
//!
//! 1. starts when the server accepts writes (after crash recovery, or when a standby is promoted),
//! 2. reads the persisted mark and raises the generator's floor above it,
//! 3. keeps a lease ahead of issued time: writes `setval`, commits (flushed), and only then lets
//!    backends issue IDs up to it.
//!
//! Backends never wait for it on the common path: they compare against the lease in shared
//! memory, and wake the worker only when a burst or a pause has used the lease up.

use crate::config;
use crate::core::fleet::REFRESH_MS;
use crate::core::lease::renewal;
use crate::core::time::{Clock, SystemClock};
use crate::shmem::GENERATOR;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::time::Duration;

pub const SCHEMA: &str = "_snowflake";
pub const SEQUENCE: &str = "_snowflake.lease_ms";

pub fn register() {
    BackgroundWorkerBuilder::new("snowflake lease")
        .set_type("snowflake lease")
        .set_library("snowflake")
        .set_function("snowflake_lease_worker_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

fn read_or_create_mark() -> i64 {
    BackgroundWorker::transaction(|| {
        Spi::run(&format!(
            "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
             CREATE SEQUENCE IF NOT EXISTS {SEQUENCE} AS bigint MINVALUE 0 START 0;
             COMMENT ON SEQUENCE {SEQUENCE} IS
               'snowflake: Unix ms up to which IDs may have been issued by this server. Do not drop or lower it.';
             {}",
            crate::fleet::CLAIMS_DDL
        ))
        .expect("create the lease sequence");
        Spi::get_one::<i64>(&format!("SELECT last_value FROM {SEQUENCE}"))
            .expect("read the lease sequence")
            .unwrap_or(0)
    })
}

fn persist(unix_ms: i64) {
    BackgroundWorker::transaction(|| {
        // The commit must be flushed (and, with a synchronous standby, received there) before
        // any ID uses the lease, whatever the server's default is.
        Spi::run("SET LOCAL synchronous_commit = on").expect("set synchronous_commit");
        Spi::run(&format!(
            "SELECT pg_catalog.setval('{SEQUENCE}', {unix_ms}, true)"
        ))
        .expect("persist the lease");
    });
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_lease_worker_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(Some(&config::database()), None);

    let epoch = config::epoch_ms();
    let mark = read_or_create_mark();
    {
        let mut g = GENERATOR.exclusive();
        if mark > epoch {
            g.state.raise_floor((mark - epoch) as u64);
        }
        g.worker_latch = unsafe { pg_sys::MyLatch } as usize;
        g.worker_pid = unsafe { pg_sys::MyProcPid };
    }
    log!("snowflake lease worker started; persisted high-water mark {mark} (Unix ms)");

    // The claim is refreshed first: backends wait for the first lease, so after a start no ID is
    // issued before the fleet check has looked at the other servers' claims.
    let mut conflict = None;
    let mut claimed_at: Option<std::time::Instant> = None;
    loop {
        if claimed_at.is_none_or(|t| t.elapsed() >= Duration::from_millis(REFRESH_MS)) {
            conflict = crate::fleet::refresh(conflict);
            claimed_at = Some(std::time::Instant::now());
        }
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let drift = config::max_clock_drift_ms();
        let now = SystemClock.now_unix_ms() - epoch;
        let plan = {
            let g = GENERATOR.share();
            let wanted = g.state.lease_wanted || g.state.stats.issued != g.issued_at_renewal;
            renewal(now, g.state.last_ms, g.state.lease_ms, wanted, drift)
        };
        if let Some(lease) = plan {
            persist(epoch + lease as i64);
            let mut g = GENERATOR.exclusive();
            g.state.lease_ms = g.state.lease_ms.max(lease);
            g.state.lease_wanted = false;
            g.issued_at_renewal = g.state.stats.issued;
        }
        let nap = Duration::from_millis((crate::core::lease::lease_length_ms(drift) / 4).max(5));
        if !BackgroundWorker::wait_latch(Some(nap)) {
            break;
        }
    }
    GENERATOR.exclusive().worker_latch = 0;
}
