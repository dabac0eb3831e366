//! The lease worker: persists the generator's high-water mark through WAL.
//!
//! The mark is a plain PostgreSQL sequence, `_snowflake.lease_ms` in the database named by
//! `snowflake.database`, holding Unix milliseconds, beside `_snowflake.epoch_ms`, the epoch it was
//! written under. `setval` is WAL-logged and its transaction's commit flushes that WAL, so the
//! mark survives crashes and reaches streaming standbys (and a synchronous standby before the
//! commit returns). The worker
//!
//! 1. starts when the server accepts writes (after crash recovery, or when a standby is promoted),
//! 2. refuses to use a `_snowflake` schema or object that no superuser owns,
//! 3. reads the persisted mark and raises the generator's floor above it,
//! 4. keeps a lease ahead of issued time while IDs are being issued: writes `setval`, commits
//!    (flushed), and only then lets backends issue IDs up to it.
//!
//! Backends never wait for it on the common path: they compare against the lease in shared
//! memory, and wake the worker only when a burst or a pause has used the lease up.
//!
//! **Trust.** The worker runs as the bootstrap superuser in a database that an ordinary role may
//! own. Nothing that role controls may change what it does: its session pins every setting that
//! the database's or a role's defaults could use against it (`pin_session`), every statement
//! names its functions and operators with their schema, and it uses only objects a superuser owns.

use crate::config;
use crate::core::fleet::REFRESH_MS;
use crate::core::lease::{forward_jump, renewal, restored_floor};
use crate::core::time::{Clock, SystemClock};
use crate::shmem::{ForeignObject, GENERATOR};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

pub const SCHEMA: &str = "_snowflake";

/// How often the worker looks again at a `_snowflake` object it refused.
pub const FOREIGN_RECHECK: Duration = Duration::from_secs(2);

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

/// Settings that `ALTER DATABASE ... SET` or `ALTER ROLE ... SET` (which the database's owner may
/// run) would otherwise hand to the worker's session, pinned for that session: a session value
/// outranks database and role defaults. `synchronous_commit` is not here: each transaction sets
/// it with SET LOCAL, which outranks them too.
const PINNED: [(&CStr, &CStr); 12] = [
    // Unqualified names could resolve to the owner's functions and operators (run as superuser).
    (c"search_path", c"pg_catalog, pg_temp"),
    // Each of these would stop the worker from writing the lease, and so stop ID generation.
    (c"default_transaction_read_only", c"off"),
    (c"default_transaction_isolation", c"read committed"),
    (c"default_transaction_deferrable", c"off"),
    (c"statement_timeout", c"0"),
    (c"lock_timeout", c"0"),
    (c"idle_in_transaction_session_timeout", c"0"),
    // PostgreSQL 17 and later only; skipped where it does not exist.
    (c"transaction_timeout", c"0"),
    // Where and how the worker's tables are made.
    (c"default_tablespace", c""),
    (c"default_table_access_method", c"heap"),
    (c"session_replication_role", c"origin"),
    // Citus, where it is loaded (skipped elsewhere): `_snowflake` is each node's own. Citus would
    // otherwise propagate the worker's CREATE SCHEMA from a coordinator to every worker (making
    // the lease depend on every node being reachable) and, on a worker node after its metadata
    // sync, refuse it ("operation is not allowed on this node"), stopping the lease.
    (c"citus.enable_ddl_propagation", c"off"),
];

fn pin_session() {
    for (name, value) in PINNED {
        // SAFETY: plain calls into PostgreSQL's GUC code with valid C strings, outside any
        // transaction (none of these settings' checks needs one).
        unsafe {
            if pg_sys::GetConfigOption(name.as_ptr(), true, false).is_null() {
                continue;
            }
            pg_sys::SetConfigOption(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_SUSET,
                pg_sys::GucSource::PGC_S_SESSION,
            );
        }
    }
}

/// Connects to `snowflake.database` as the bootstrap superuser. `ALTER DATABASE ...
/// ALLOW_CONNECTIONS false`, which its owner may run, does not keep the worker out.
fn connect() {
    let db = CString::new(config::database()).expect("a database name has no NUL byte");
    // SAFETY: called once, first thing in a registered background worker with SPI access.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnection(
            db.as_ptr(),
            std::ptr::null(),
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
}

/// Every relation of `_snowflake`, and the schema itself, whose owner is not a superuser. The
/// schema and everything the worker uses are created by the worker, as superuser: someone else's
/// could be lowered, dropped or changed under it.
const FOREIGN_SQL: &str = "
    SELECT o.kind, o.name, r.rolname::pg_catalog.text
      FROM (SELECT 'schema'::pg_catalog.text AS kind, n.nspname::pg_catalog.text AS name,
                   n.nspowner AS owner
              FROM pg_catalog.pg_namespace n
             WHERE n.nspname OPERATOR(pg_catalog.=) '_snowflake'
            UNION ALL
            SELECT c.relkind::pg_catalog.text,
                   pg_catalog.concat(n.nspname, '.', c.relname), c.relowner
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
             WHERE n.nspname OPERATOR(pg_catalog.=) '_snowflake') o
      JOIN pg_catalog.pg_authid r ON r.oid OPERATOR(pg_catalog.=) o.owner
     WHERE NOT r.rolsuper
     ORDER BY 1 DESC, 2";

/// The first `_snowflake` object no superuser owns, as ("schema _snowflake", owner).
fn foreign_object() -> Option<(String, String)> {
    Spi::connect(|client| {
        client
            .select(FOREIGN_SQL, Some(1), &[])
            .expect("look for objects that no superuser owns")
            .next()
            .map(|row| {
                let text = |i| row.get::<String>(i).ok().flatten().unwrap_or_default();
                let kind = match text(1).as_str() {
                    "schema" => "schema",
                    "S" => "sequence",
                    "r" => "table",
                    "i" => "index",
                    "v" => "view",
                    _ => "relation",
                };
                (format!("{kind} {}", text(2)), text(3))
            })
    })
}

/// Waits, refusing ID generation, while `_snowflake` holds an object no superuser owns; false if
/// the worker is asked to stop meanwhile.
fn wait_while_foreign_objects() -> bool {
    let mut warned = false;
    loop {
        let found = BackgroundWorker::transaction(foreign_object);
        let mut g = GENERATOR.exclusive();
        match found {
            None => {
                if g.foreign.get().is_some() {
                    g.foreign = ForeignObject::NONE;
                    g.state.refused = false;
                    drop(g);
                    log!("snowflake: the objects of schema {SCHEMA} are owned by superusers again; the lease worker continues");
                }
                return true;
            }
            Some((what, owner)) => {
                g.foreign = ForeignObject::new(&what, &owner);
                g.state.refused = true;
                drop(g);
                if !warned {
                    warning!(
                        "snowflake lease worker refuses {what} in database \"{}\": it is owned by role \"{owner}\", not by a superuser; snowflake_nextval() refuses until it is",
                        config::database()
                    );
                    warned = true;
                }
            }
        }
        if !BackgroundWorker::wait_latch(Some(FOREIGN_RECHECK)) {
            return false;
        }
    }
}

/// A random node token (see `core::fleet`), from PostgreSQL's strong random source.
fn random_token() -> i64 {
    let mut buf = [0u8; 8];
    // SAFETY: a valid buffer of the length given.
    let ok = unsafe { pg_sys::pg_strong_random(buf.as_mut_ptr().cast(), buf.len()) };
    assert!(ok, "no strong random source");
    // Positive and above the sequence's MINVALUE 1.
    (i64::from_ne_bytes(buf) & ((1 << 62) - 1)) | 1
}

/// Creates what is missing (as superuser, so it is ours) and reads the mark and its epoch.
fn create_and_read_mark() -> (i64, Option<i64>) {
    let token = random_token();
    BackgroundWorker::transaction(|| {
        for statement in [
            format!("CREATE SCHEMA IF NOT EXISTS {SCHEMA}"),
            format!("REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC"),
            format!("CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.lease_ms AS bigint MINVALUE 0 START 0"),
            format!("COMMENT ON SEQUENCE {SCHEMA}.lease_ms IS 'snowflake: Unix ms up to which IDs may have been issued by this server. Do not drop or lower it.'"),
            format!("CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.epoch_ms AS bigint MINVALUE -1 START -1"),
            format!("COMMENT ON SEQUENCE {SCHEMA}.epoch_ms IS 'snowflake: the epoch (Unix ms) that {SCHEMA}.lease_ms was written under; -1 if none. Do not change it.'"),
            format!("CREATE SEQUENCE IF NOT EXISTS {SCHEMA}.node_token AS bigint MINVALUE 1 START {token}"),
            format!("COMMENT ON SEQUENCE {SCHEMA}.node_token IS 'snowflake: this server''s node token (see {SCHEMA}.claims). Do not copy it to another server.'"),
            crate::fleet::CLAIMS_DDL.into(),
            // 1.2.0 made the table without these.
            format!("ALTER TABLE {SCHEMA}.claims ADD COLUMN IF NOT EXISTS lease_id bigint NOT NULL DEFAULT 0, ADD COLUMN IF NOT EXISTS retired boolean NOT NULL DEFAULT false"),
            format!("COMMENT ON TABLE {SCHEMA}.claims IS 'snowflake: which server (by system identifier) generates with which datacenter and worker ID, and the highest ID it may have issued; replicate it with your data'"),
            format!("REVOKE ALL ON ALL TABLES IN SCHEMA {SCHEMA} FROM PUBLIC"),
            format!("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {SCHEMA} FROM PUBLIC"),
        ] {
            Spi::run(&statement).unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        // Someone may have made `_snowflake` between the check and the CREATE ... IF NOT EXISTS
        // that then adopted it: look again, and use nothing of it if so (the error rolls back,
        // the worker restarts and refuses it).
        if let Some((what, owner)) = foreign_object() {
            error!("snowflake lease worker: {what} was made by role \"{owner}\" while the worker started");
        }
        let mark = Spi::get_one::<i64>(&format!("SELECT last_value FROM {SCHEMA}.lease_ms"))
            .expect("read the lease sequence")
            .unwrap_or(0);
        let epoch = Spi::get_one::<i64>(&format!("SELECT last_value FROM {SCHEMA}.epoch_ms"))
            .expect("read the epoch sequence")
            .filter(|&e| e >= 0);
        (mark, epoch)
    })
}

/// Persists a lease: first raised above the highest ID another server may have issued on our
/// pair (a pair handed over; see `core::fleet::handover_floor`), in the same transaction, so that
/// no lease is ever written without having looked. Returns the lease written, if one was needed.
fn renew(epoch: i64, drift: u64) -> Option<u64> {
    let node = config::node();
    BackgroundWorker::transaction(|| {
        // The commit must be flushed (and, with a synchronous standby, received there) before
        // any ID uses the lease, whatever the server's default is.
        Spi::run("SET LOCAL synchronous_commit = on").expect("set synchronous_commit");
        if let Some(id) = crate::fleet::handover_floor(node) {
            let ms = crate::core::layout::decompose(id)
                .map(|p| p.ms)
                .unwrap_or(0);
            GENERATOR.exclusive().state.raise_floor(ms);
        }
        let now = SystemClock.now_unix_ms() - epoch;
        let lease = {
            let g = GENERATOR.share();
            renewal(now, g.state.last_ms, g.state.lease_ms, true, drift)
        }?;
        Spi::run_with_args(
            "SELECT pg_catalog.setval('_snowflake.lease_ms', $1, true), pg_catalog.setval('_snowflake.epoch_ms', $2, true)",
            &[(epoch + lease as i64).into(), epoch.into()],
        )
        .expect("persist the lease");
        Some(lease)
    })
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_lease_worker_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    connect();
    pin_session();
    {
        let mut g = GENERATOR.exclusive();
        g.worker_latch = unsafe { pg_sys::MyLatch } as usize;
        g.worker_pid = unsafe { pg_sys::MyProcPid };
    }
    if !wait_while_foreign_objects() {
        GENERATOR.exclusive().worker_latch = 0;
        return;
    }

    let epoch = config::epoch_ms();
    let (mark, recorded_epoch) = create_and_read_mark();
    {
        let mut g = GENERATOR.exclusive();
        g.state
            .raise_floor(restored_floor(mark, recorded_epoch, epoch));
        g.recorded_epoch_ms = recorded_epoch.unwrap_or(epoch);
    }
    log!("snowflake lease worker started; persisted high-water mark {mark} (Unix ms), written under the epoch {}", recorded_epoch.map_or("(not recorded)".into(), |e| e.to_string()));

    // The claim is refreshed first: backends wait for the first lease, so after a start no ID is
    // issued before the fleet check has looked at the other servers' claims.
    let mut conflict = None;
    let mut claimed_at: Option<Instant> = None;
    let mut looked = (SystemClock.now_unix_ms(), Instant::now());
    loop {
        if claimed_at.is_none_or(|t| t.elapsed() >= Duration::from_millis(REFRESH_MS)) {
            conflict = crate::fleet::refresh(conflict);
            claimed_at = Some(Instant::now());
        }
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        // A wall clock that advanced more than elapsed time did jumped forward: IDs issued from
        // now on are dated that far ahead if the clock is wrong, and a later correction puts
        // them in the future. Say so while it can still be acted on.
        let (wall, mono) = (SystemClock.now_unix_ms(), Instant::now());
        let elapsed = mono.duration_since(looked.1).as_millis() as i64;
        if let Some(jump) = forward_jump(wall - looked.0, elapsed) {
            {
                let mut g = GENERATOR.exclusive();
                g.state.stats.clock_forward_jumps += 1;
                g.state.stats.largest_clock_forward_ms =
                    g.state.stats.largest_clock_forward_ms.max(jump);
            }
            warning!(
                "snowflake: the system clock jumped forward by {jump} ms; IDs issued from now on carry its time, and if it is wrong they stay ahead of real time after it is corrected (see \"Clock faults\" in the README)"
            );
        }
        looked = (wall, mono);

        let drift = config::max_clock_drift_ms();
        let now = wall - epoch;
        let plan = {
            let g = GENERATOR.share();
            let wanted = g.state.lease_wanted || g.state.stats.issued != g.issued_at_renewal;
            renewal(now, g.state.last_ms, g.state.lease_ms, wanted, drift)
        };
        if plan.is_some() {
            if let Some(lease) = renew(epoch, drift) {
                let mut g = GENERATOR.exclusive();
                g.state.lease_ms = g.state.lease_ms.max(lease);
                g.state.lease_wanted = false;
                g.issued_at_renewal = g.state.stats.issued;
                g.recorded_epoch_ms = epoch;
            }
        }
        let nap = Duration::from_millis((crate::core::lease::lease_length_ms(drift) / 4).max(5));
        if !BackgroundWorker::wait_latch(Some(nap)) {
            break;
        }
    }
    GENERATOR.exclusive().worker_latch = 0;
}
