//! A background worker's hardened session, shared by the lease worker ([`crate::lease`]) and the
//! Citus worker ([`crate::citus`]): each runs as the bootstrap superuser in a database that an
//! ordinary role may own, so nothing that role controls may change what it does. Its session
//! forgets every setting of the database and its roles and pins what the workers rely on
//! (`forget_database_settings`); its signals, naps and reloads are PostgreSQL's own.

use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use std::ffi::{CStr, CString};
use std::time::Duration;

/// How long the worker waits for a lock before it gives up, exits and is started again. Its own
/// objects are out of everyone's reach but superusers', yet a transaction of the database's
/// owner can hold what it needs at its first start (a `_snowflake` schema created and not yet
/// committed, say), and such a transaction can stay open forever.
const LOCK_TIMEOUT: &CStr = c"5s";

/// The values the worker needs whatever the server's configuration says (postgresql.conf may
/// set any of them server-wide), set for its session after the database's and roles' settings
/// are gone (`forget_database_settings`). `synchronous_commit` is not here: each transaction sets
/// it with SET LOCAL.
const PINNED: [(&CStr, &CStr); 12] = [
    // Unqualified names could resolve to the owner's functions and operators (run as superuser).
    (c"search_path", c"pg_catalog, pg_temp"),
    // Each of these would stop the worker from writing the lease, and so stop ID generation.
    (c"default_transaction_read_only", c"off"),
    (c"default_transaction_isolation", c"read committed"),
    (c"default_transaction_deferrable", c"off"),
    (c"statement_timeout", c"0"),
    (c"lock_timeout", LOCK_TIMEOUT),
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

pub(crate) fn set_for_session(name: &CStr, value: &CStr) {
    // SAFETY: plain calls into PostgreSQL's GUC code with valid C strings. A value PostgreSQL
    // refuses is a WARNING in the log, not an error that would stop the worker.
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SET,
            true,
            pg_sys::WARNING as i32,
            false,
        );
    }
}

fn pin_session() {
    for (name, value) in PINNED {
        // SAFETY: a lookup with a valid C string; missing_ok.
        if unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) }.is_null() {
            continue;
        }
        set_for_session(name, value);
    }
}

/// The settings PostgreSQL applied to the worker's session from `ALTER DATABASE ... SET` and
/// `ALTER ROLE ... SET` (the four rows of `pg_db_role_setting` that apply to a session), each
/// with its built-in value and context where `pg_settings` shows it.
///
/// What the database's owner can impose on the worker's session is exactly these: PostgreSQL
/// applies them to every session that connects, the superuser's included, and the owner may set
/// at the database level any setting an ordinary role may SET (and any a superuser granted it).
/// So none of them is kept, whatever it is named: a list of dangerous settings would miss the
/// next one.
const DATABASE_SETTINGS_SQL: &str = "
    SELECT pg_catalog.textsend(n.name), s.boot_val::pg_catalog.text, s.context::pg_catalog.text
      FROM (SELECT DISTINCT pg_catalog.lower(pg_catalog.split_part(c.cfg, '=', 1)) AS name
              FROM pg_catalog.pg_db_role_setting d
              CROSS JOIN LATERAL pg_catalog.unnest(d.setconfig) AS c(cfg)
             WHERE d.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0::pg_catalog.oid,
                       (SELECT b.oid FROM pg_catalog.pg_database b
                         WHERE b.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())])
               AND d.setrole OPERATOR(pg_catalog.=) ANY (ARRAY[0::pg_catalog.oid,
                       (SELECT r.oid FROM pg_catalog.pg_roles r
                         WHERE r.rolname OPERATOR(pg_catalog.=) SESSION_USER)])) n
      LEFT JOIN pg_catalog.pg_show_all_settings() s
        ON pg_catalog.lower(s.name) OPERATOR(pg_catalog.=) n.name
     ORDER BY 1";

/// Puts every setting of `DATABASE_SETTINGS_SQL` back to its built-in value for this session,
/// then sets `PINNED` over the result. Settings fixed at connection (`backend` context) cannot
/// change any more and change nothing the worker relies on; names `pg_settings` does not show
/// are placeholders of libraries the worker never loads, or hidden settings, of which only
/// `role` could matter (it would make the worker act as another role): it goes back to `none`,
/// and each worker's main function checks afterwards that it acts as a superuser.
/// Returns the names that were set back.
pub(crate) fn forget_database_settings() -> Vec<String> {
    // Before the first transaction: the worker's own transaction defaults (a serializable,
    // read-only, deferrable default would make that transaction wait for a safe snapshot as long
    // as another serializable transaction stays open, a prepared one across restarts), nothing
    // of the owner's on the search_path, and the worker acting as the bootstrap superuser it
    // connected as: `session_authorization` and `role`, which `pg_settings` does not show, can be
    // set for a database too.
    pin_session();
    // (Its check looks the role up, so inside a transaction; a SET that is not LOCAL outlives it.)
    BackgroundWorker::transaction(|| {
        // SAFETY: a syscache lookup of a role that always exists, inside a transaction.
        let name = unsafe {
            pg_sys::GetUserNameFromId(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), false)
        };
        set_for_session(c"session_authorization", unsafe { CStr::from_ptr(name) });
    });
    set_for_session(c"role", c"none");
    // A setting's name as bytes in the database's encoding (a placeholder may be named in any
    // letters: a LATIN1 name is no UTF-8 string); built-in values and contexts are ASCII.
    let found: Vec<(Vec<u8>, Option<String>, Option<String>)> =
        BackgroundWorker::transaction(|| {
            Spi::connect(|client| {
                client
                    .select(DATABASE_SETTINGS_SQL, None, &[])
                    .expect("read the settings of the database and its roles")
                    .map(|row| {
                        (
                            row.get::<Vec<u8>>(1).ok().flatten().unwrap_or_default(),
                            row.get::<String>(2).ok().flatten(),
                            row.get::<String>(3).ok().flatten(),
                        )
                    })
                    .collect()
            })
        });
    let mut reset = Vec::new();
    for (name, boot, context) in found {
        let value = match (name.as_slice(), context.as_deref()) {
            (b"role", _) => "none".to_string(),
            // Set back above, before any of them was read.
            (b"session_authorization", _) => continue,
            (_, Some("user" | "superuser")) => boot.unwrap_or_default(),
            _ => continue,
        };
        if let (Ok(n), Ok(v)) = (CString::new(name.clone()), CString::new(value)) {
            set_for_session(&n, &v);
            reset.push(name.escape_ascii().to_string());
        }
    }
    pin_session();
    reset
}

/// Whether the worker acts as a superuser, asked inside a transaction: `superuser()` answers
/// from a one-entry cache that any change to a role (another session's `ALTER ROLE`) empties,
/// and then looks the role up in the catalog, which outside a transaction has no resource owner
/// to pin the cache entry to (a segmentation fault seen on 19beta1).
pub(crate) fn acts_as_superuser() -> bool {
    // SAFETY: a check of the current user, inside a transaction.
    BackgroundWorker::transaction(|| unsafe { pg_sys::superuser() })
}

/// Connects to `database` as the bootstrap superuser. `ALTER DATABASE ... ALLOW_CONNECTIONS
/// false`, which its owner may run, does not keep the worker out.
pub(crate) fn connect(database: &str) {
    let db = CString::new(database).expect("a database name has no NUL byte");
    // SAFETY: called once, first thing in a registered background worker with SPI access.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnection(
            db.as_ptr(),
            std::ptr::null(),
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
}

/// The worker's life. SIGTERM (`pg_terminate_backend()`, a shutdown) is PostgreSQL's `die`: the
/// worker ends at its next interrupt check, also inside a statement or a lock wait, with a FATAL
/// error and exit code 1, and the postmaster starts it again a second later unless the server is
/// shutting down. (A worker that returned, exit code 0, would never be started again, and every
/// `snowflake_nextval()` of the server would wait for a lease that never comes.) A cancel
/// (SIGINT) is an ERROR, which in a background worker ends it the same way; `kill -9` makes
/// the postmaster restart every process, the worker among them. SIGHUP reloads the
/// configuration.
pub(crate) fn handle_signals() {
    // The handlers themselves, as PostgreSQL exports them (pgrx's `pg_sys::die` is a Rust wrapper
    // for calling it, not a signal handler).
    // PostgreSQL 19 passes a handler the signal's details too (SIGNAL_ARGS gained a
    // `const pg_signal_info *`).
    unsafe extern "C-unwind" {
        #[cfg(not(feature = "pg19"))]
        fn die(signal: std::ffi::c_int);
        #[cfg(not(feature = "pg19"))]
        fn SignalHandlerForConfigReload(signal: std::ffi::c_int);
        #[cfg(feature = "pg19")]
        fn die(signal: std::ffi::c_int, info: *const pg_sys::pg_signal_info);
        #[cfg(feature = "pg19")]
        fn SignalHandlerForConfigReload(
            signal: std::ffi::c_int,
            info: *const pg_sys::pg_signal_info,
        );
    }
    // SAFETY: installs PostgreSQL's own handlers, then unblocks signals, first thing in the
    // worker as every background worker does.
    unsafe {
        #[cfg(not(any(feature = "pg18", feature = "pg19")))]
        {
            pg_sys::pqsignal(pg_sys::SIGHUP as i32, Some(SignalHandlerForConfigReload));
            pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(die));
        }
        // PostgreSQL 18 names the backend's variant pqsignal_be.
        #[cfg(any(feature = "pg18", feature = "pg19"))]
        {
            pg_sys::pqsignal_be(pg_sys::SIGHUP as i32, Some(SignalHandlerForConfigReload));
            pg_sys::pqsignal_be(pg_sys::SIGTERM as i32, Some(die));
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Sleeps until `timeout` passes or the latch is set (a backend that wants a lease, a signal),
/// then lets PostgreSQL act on a pending termination or cancel. Exits if the postmaster died.
pub(crate) fn nap(timeout: Duration) {
    // SAFETY: this process's own latch, as every background worker waits.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            timeout.as_millis().min(i32::MAX as u128) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

/// Reads the configuration files again after a SIGHUP.
pub(crate) fn reload_if_asked() {
    // SAFETY: the flag is set by PostgreSQL's own SIGHUP handler; reading the file is what every
    // process does when it is set.
    if unsafe { pg_sys::ConfigReloadPending } != 0 {
        unsafe {
            pg_sys::ConfigReloadPending = 0;
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}
