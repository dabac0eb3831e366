//! The SQL functions. Each one converts its arguments, calls the core and reports errors.

use crate::config::{self, epoch_ms};
use crate::core::generator::{issue, GenError, IssueError, Step};
use crate::core::layout::{self, decompose};
use crate::core::time::{pg_timestamp_to_unix_ms, unix_ms_to_pg_timestamp};
use crate::errors;
use crate::generator::{self, DatabaseTrust, PairState};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicI64, Ordering};

/// `snowflake_nextval()`, written as a bare V1 C function rather than a `#[pg_extern]`.
///
/// The common path is one clock read, LWLockAcquire, a few comparisons, LWLockRelease. pgrx's
/// wrapper (panic guard, memory-context bookkeeping) and its sigsetjmp guard around every
/// `pg_sys` call cost several times that, so this path calls the two LWLock functions directly
/// and holds nothing that needs dropping: if PostgreSQL raised an error inside them, its longjmp
/// would cross only plain frames, as in a C extension. Anything unusual (first call, a wait, an
/// error) goes to `nextval_slow`, which is guarded like any pgrx function.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowflake_nextval_wrapper(
    _fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let first = unsafe { generator::hot_attempt() };
    let id = match first {
        Some(Ok(Step::Issued(id))) => id,
        _ => unsafe { nextval_slow(&first) },
    };
    LAST_RETURNED.store(id, Ordering::Relaxed);
    pg_sys::Datum::from(id)
}

/// The last ID `snowflake_nextval()` returned in this process (`NONE_RETURNED` before the
/// first): what `snowflake_guard(..., 'always')` admits. Process-local, so no lock: a backend
/// runs one statement at a time, and evaluates a row's default just before its BEFORE ROW
/// triggers fire. A plain store on the hot path (an atomic only to need no `unsafe`).
static LAST_RETURNED: AtomicI64 = AtomicI64::new(NONE_RETURNED);
/// No ID is negative.
const NONE_RETURNED: i64 = -1;

/// The last ID `snowflake_nextval()` returned in this session, if any.
pub(crate) fn last_returned() -> Option<i64> {
    Some(LAST_RETURNED.load(Ordering::Relaxed)).filter(|&id| id != NONE_RETURNED)
}

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_snowflake_nextval_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

extension_sql!(
    r#"
CREATE FUNCTION snowflake_nextval() RETURNS bigint
LANGUAGE c STRICT VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'snowflake_nextval_wrapper';
COMMENT ON FUNCTION snowflake_nextval() IS 'The next snowflake ID of this server: time-ordered, unique across servers with distinct worker IDs';
"#,
    name = "snowflake_nextval"
);

/// The next ID, as `snowflake_nextval()` gives it, for the extension's own Rust (no call by name).
pub(crate) fn next_id() -> i64 {
    // SAFETY: the wrapper never reads its fcinfo.
    unsafe { snowflake_nextval_wrapper(std::ptr::null_mut()) }.value() as i64
}

/// Everything but the common path: checks, the first call's set-up, waits and errors.
#[pg_guard]
#[cold]
#[inline(never)]
unsafe extern "C-unwind" fn nextval_slow(first: &Option<Result<Step, GenError>>) -> i64 {
    // Every call that fails is counted once, here or below, before it raises (with no shared
    // memory, when the library is not preloaded, there is nothing to count in).
    config::require_preload("snowflake_nextval()");
    // SAFETY: a plain read of the server's state, valid in any backend.
    if unsafe { pg_sys::RecoveryInProgress() } {
        generator::count_failure();
    }
    config::require_primary("snowflake_nextval()", config::STANDBY_SHARES_THE_PAIR);
    generator::enable_hot_path(crate::horizon::hot_slot);
    let mut pending = *first;
    let mut lease_deadline = None;
    let mut lease_round = 0;
    // Refused because of another server's claim: once per call, the lease worker looks at the
    // claims again first (a DBA may have retired that claim a moment ago), and the call tries
    // again if it did.
    let mut looked = false;
    let result = loop {
        let result = issue(
            // The common path's own attempt, now that it is enabled.
            || {
                pending
                    .take()
                    .or_else(|| unsafe { generator::hot_attempt() })
                    .expect("hot path enabled above")
            },
            // Waits happen with the lock released, and stay interruptible.
            |step| {
                match step {
                    // At most a millisecond away.
                    Step::WaitClock { .. } => unsafe { pg_sys::pg_usleep(50) },
                    Step::WaitLease { .. } => {
                        let deadline = *lease_deadline.get_or_insert_with(|| {
                            std::time::Instant::now() + generator::LEASE_WAIT_LIMIT
                        });
                        if std::time::Instant::now() > deadline || generator::database_is_missing()
                        {
                            return Err(());
                        }
                        generator::nap_for_lease(&mut lease_round);
                    }
                    Step::Issued(_) => {}
                }
                generator::check_for_interrupts_counted();
                Ok(())
            },
        );
        if matches!(result, Err(IssueError::Gen(GenError::Refused))) && !looked {
            looked = true;
            if generator::look_again(generator::LOOK_WAIT_LIMIT) {
                continue;
            }
        }
        break result;
    };
    if result.is_err() {
        generator::count_failure();
    }
    match result {
        Ok(id) => id,
        Err(IssueError::Gen(GenError::Refused)) => {
            let (foreign, trust, database, pair) = {
                let g = generator::GENERATOR.share();
                (
                    g.foreign.get(),
                    g.database_trust,
                    g.database_owner.get(),
                    g.pair,
                )
            };
            if let (DatabaseTrust::Refused, Some((database, owner))) = (trust, database) {
                untrusted_database(&database, &owner, crate::lease::FOREIGN_RECHECK)
            }
            if pair.refuses() {
                pair_refused(pair)
            }
            match foreign {
                Some((what, owner)) => foreign_object(
                    &what,
                    &owner,
                    &config::database(),
                    crate::lease::FOREIGN_RECHECK,
                ),
                None => crate::fleet::refuse(),
            }
        }
        Err(IssueError::Gen(GenError::ClockBehind { behind_ms, .. })) if epoch_moved_later() => {
            let recorded = generator::GENERATOR.share().recorded_epoch_ms;
            epoch_moved_later_error(recorded, epoch_ms(), behind_ms)
        }
        Err(IssueError::Gen(e)) => generator_error(e, config::epoch_ms()),
        Err(IssueError::Wait(())) => {
            generator::lease_not_ready(generator::LEASE_WAIT_LIMIT, &config::database())
        }
    }
}

/// Whether the persisted mark was written under an epoch earlier than the configured one.
fn epoch_moved_later() -> bool {
    let recorded = generator::GENERATOR.share().recorded_epoch_ms;
    recorded != i64::MIN && recorded < epoch_ms()
}

fn parts(id: i64) -> layout::Parts {
    decompose(id).unwrap_or_else(|e| errors::layout(e, epoch_ms()))
}

fn unix_ms(ts: TimestampWithTimeZone) -> i64 {
    pg_timestamp_to_unix_ms(ts.into()).unwrap_or_else(|| infinite_timestamp())
}

/// When the ID was generated (to the millisecond), by this server's `snowflake.epoch`.
#[pg_extern(immutable, parallel_safe)]
pub(crate) fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
    let ms = parts(id).ms as i64 + epoch_ms();
    TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(ms))
        .expect("every 41-bit ms is a valid timestamp")
}

#[pg_extern(immutable, parallel_safe)]
fn snowflake_datacenter_id(id: i64) -> i32 {
    parts(id).datacenter as i32
}

#[pg_extern(immutable, parallel_safe)]
fn snowflake_worker_id(id: i64) -> i32 {
    parts(id).worker as i32
}

#[pg_extern(immutable, parallel_safe)]
fn snowflake_sequence(id: i64) -> i32 {
    parts(id).sequence as i32
}

/// The smallest ID that can carry the millisecond of `ts`: `id >= snowflake_min_id(ts)` selects
/// every ID generated at or after it, as a primary-key range.
#[pg_extern(immutable, parallel_safe)]
pub(crate) fn snowflake_min_id(ts: TimestampWithTimeZone) -> i64 {
    layout::min_id(unix_ms(ts), epoch_ms()).unwrap_or_else(|e| errors::layout(e, epoch_ms()))
}

/// The largest ID that can carry the millisecond of `ts`.
#[pg_extern(immutable, parallel_safe)]
fn snowflake_max_id(ts: TimestampWithTimeZone) -> i64 {
    layout::max_id(unix_ms(ts), epoch_ms()).unwrap_or_else(|e| errors::layout(e, epoch_ms()))
}

/// Builds an ID from its parts, e.g. to write tests or to translate IDs from another system.
#[pg_extern(immutable, parallel_safe)]
fn snowflake_compose(
    ts: TimestampWithTimeZone,
    datacenter_id: i32,
    worker_id: i32,
    sequence: i32,
) -> i64 {
    let epoch = epoch_ms();
    let ms =
        layout::ms_since_epoch(unix_ms(ts), epoch).unwrap_or_else(|e| errors::layout(e, epoch));
    layout::compose(ms, datacenter_id.into(), worker_id.into(), sequence.into())
        .unwrap_or_else(|e| errors::layout(e, epoch))
}

// A SQL function with OUT parameters rather than a composite type: `SELECT * FROM
// snowflake_decode(id)` and `(snowflake_decode(id)).created_at` both work, and the planner
// inlines it into the four field accessors.
extension_sql!(
    r#"
CREATE FUNCTION snowflake_decode(
    id bigint,
    OUT created_at timestamptz,
    OUT datacenter_id integer,
    OUT worker_id integer,
    OUT sequence integer
) RETURNS record
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (snowflake_timestamp(id), snowflake_datacenter_id(id), snowflake_worker_id(id), snowflake_sequence(id));
COMMENT ON FUNCTION snowflake_decode(bigint) IS 'The parts of a snowflake ID: when, which datacenter and worker, which sequence';
"#,
    name = "snowflake_decode",
    requires = [
        snowflake_timestamp,
        snowflake_datacenter_id,
        snowflake_worker_id,
        snowflake_sequence
    ]
);

// The errors of this module (reported through [`errors::raise`]).

/// `snowflake.epoch` moved later on a server that issued IDs under an earlier one: new IDs would
/// be below old ones.
fn epoch_moved_later_error(recorded_ms: i64, configured_ms: i64, ahead_ms: u64) -> ! {
    let ts = |ms: i64| {
        pgrx::datum::TimestampWithTimeZone::try_from(crate::core::time::unix_ms_to_pg_timestamp(ms))
            .map(|t| t.to_string())
            .unwrap_or_else(|_| format!("{ms} ms after 1970"))
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake.epoch is later than the epoch this server issued IDs under".into(),
        Some(format!(
            "The persisted mark _snowflake.lease_ms was written under the epoch {} ({recorded_ms} Unix ms), by this server's IDs or by a dump or setval brought in; snowflake.epoch is now {} ({configured_ms}). An ID counts milliseconds since its epoch, so new IDs would lie below those the mark stands for until {ahead_ms} ms from now.",
            ts(recorded_ms),
            ts(configured_ms)
        )),
        Some(&format!(
            "Set snowflake.epoch back to '{}' and restart. An epoch can only move earlier on a server that has issued IDs; a later one needs new tables and a new snowflake.database.",
            ts(recorded_ms)
        )),
    )
}

fn generator_error(e: GenError, epoch_ms: i64) -> ! {
    match e {
        GenError::ClockBehind { behind_ms, max_drift_ms } => errors::raise(
            PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
            "could not generate a snowflake ID because the system clock is behind".into(),
            Some(format!(
                "The clock is {behind_ms} ms behind the timestamp of the last issued ID; snowflake.max_clock_drift allows {max_drift_ms} ms."
            )),
            Some("IDs resume by themselves once the clock catches up. To issue now, raise snowflake.max_clock_drift above the gap and reload (any gap up to the 41-bit range): new IDs are then dated that far in the future until real time catches up. If the clock was ahead and has been corrected, this is the gap it ran ahead by; see \"Clock faults\" in docs/operations.md."),
        ),
        GenError::BeforeEpoch { before_ms } => errors::raise(
            PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
            "could not generate a snowflake ID because the system clock reads before snowflake.epoch".into(),
            Some(format!(
                "The clock reads {before_ms} ms before the epoch {epoch_ms} (Unix ms); snowflake timestamps count from it."
            )),
            Some("IDs are issued once the clock passes the epoch. If the clock is right, snowflake.epoch is wrong: set a past instant and restart the server."),
        ),
        // The fleet check reports this with the other server's details ([`crate::fleet::refuse`]);
        // this is the same error for any path that meets it without them.
        GenError::Refused => errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake ID generation is refused: another server claims this server's datacenter and worker ID".into(),
            None,
            Some("Give each server its own snowflake.datacenter_id and snowflake.worker_id."),
        ),
        GenError::TimestampExhausted => errors::raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "snowflake timestamp range is exhausted".into(),
            Some("41 bits of milliseconds since snowflake.epoch have all been used.".into()),
            Some("Move to a new table with a later snowflake.epoch."),
        ),
    }
}

/// `snowflake.database` is owned by a role other than a superuser, and holds no lease yet.
fn untrusted_database(database: &str, owner: &str, recheck: std::time::Duration) -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowflake ID generation is refused: database \"{database}\" named by snowflake.database is owned by role \"{owner}\", not by a superuser"),
        Some(format!(
            "The lease worker keeps this server's high-water mark and claim in that database and runs there as superuser; its owner can lock, vacuum, rename or drop what the worker needs, and so stop every ID of this server. The worker looks again every {} s.",
            recheck.as_secs()
        )),
        Some(&crate::lease::untrusted_database_hint(database)),
    )
}

/// The lease worker found an object in `_snowflake` that no superuser owns.
fn foreign_object(what: &str, owner: &str, database: &str, recheck: std::time::Duration) -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake ID generation is refused: the lease worker does not trust an object it did not create".into(),
        Some(format!(
            "{what} in database \"{database}\" is owned by role \"{owner}\", not by a superuser. The lease worker keeps this server's high-water mark in schema _snowflake and runs there as superuser: whoever owns it could lower the mark (and so repeat IDs) or change what the worker runs."
        )),
        Some(&format!(
            "A superuser should find out who made it and why. If it holds no mark of this server (it was made before snowflake first ran there), drop it (DROP SCHEMA _snowflake CASCADE, in database \"{database}\"); if a superuser made it, give it to one (ALTER ... OWNER TO a superuser). The worker looks again every {} s.",
            recheck.as_secs()
        )),
    )
}

/// The pair comes from the Citus group (`snowflake.pair_source`), and there is none to use.
fn pair_refused(pair: PairState) -> ! {
    let source = config::pair_source().name();
    let database = config::citus_database().unwrap_or_default();
    let (message, detail, hint) = match pair {
        PairState::Changed { recorded, now } => (
            format!("snowflake ID generation is refused: this node's Citus group changed from {recorded} to {now}"),
            format!("snowflake.pair_source is '{source}': this node's pair came from Citus group {recorded}, recorded in _snowflake.citus_group in database \"{}\", and the Citus metadata of database \"{database}\" gives it group {now} now. Citus gives a node a new group when it is removed and added again, and a node started from another node's backup carries that node's group; the node stops rather than switch pairs unseen.", config::database()),
            format!("If this node was removed and added again, let it take the new group: DELETE FROM _snowflake.citus_group in database \"{}\", then restart it (its IDs continue above every ID it issued). If it was started from another node's backup, it is a copy of that node (its system identifier is the other's): stop it, remove it from the cluster (citus_remove_node), and make a new node from a new cluster (initdb) instead.", config::database()),
        ),
        PairState::Beyond { group, max } => (
            format!("snowflake ID generation is refused: Citus group {group} is beyond what snowflake.pair_source = '{source}' holds"),
            format!("With '{source}' a node's pair comes from its Citus group, and groups 0 to {max} have pairs; Citus never gives a group number twice, so nodes added and removed use them up."),
            "With 'citus_in_datacenter', set snowflake.pair_source = 'citus' (groups up to 1023) and restart; beyond 1023, give the node a pair of its own (snowflake.pair_source = 'config' with snowflake.datacenter_id and snowflake.worker_id) that no other node holds.".to_string(),
        ),
        PairState::Untrusted => (
            "snowflake ID generation is refused: the Citus worker does not trust the Citus metadata".to_string(),
            format!("snowflake.pair_source is '{source}', and a table or function of Citus that the worker reads in database \"{database}\" is not owned by a superuser (the server log names it)."),
            "A superuser should find out who made it and why; the worker looks again every 5 s.".to_string(),
        ),
        _ => match crate::citus::found() {
            (false, _) => (
                "snowflake ID generation is refused: this node's Citus group is not known yet".to_string(),
                format!("snowflake.pair_source is '{source}': this node's pair comes from its Citus group, and the Citus worker has not read database \"{database}\" (snowflake.citus_database) yet."),
                "If this lasts more than a few seconds, the server log says why the worker cannot read it (a database that does not exist, no background worker slot left).".to_string(),
            ),
            (true, false) => (
                "snowflake ID generation is refused: this node is not in a Citus cluster".to_string(),
                format!("snowflake.pair_source is '{source}': this node's pair comes from its Citus group, and database \"{database}\" (snowflake.citus_database) has no citus extension."),
                "Set snowflake.citus_database to the database where the citus extension is and restart, or CREATE EXTENSION citus there and add the node to the cluster.".to_string(),
            ),
            (true, true) => (
                "snowflake ID generation is refused: this node is not in a Citus cluster yet".to_string(),
                format!("snowflake.pair_source is '{source}': this node's pair comes from its Citus group, which the Citus metadata of database \"{database}\" does not give yet: a worker has one once a coordinator has added it."),
                "Add the node from the coordinator (SELECT citus_add_node('host', port)); on the coordinator itself, SELECT citus_set_coordinator_host('host', port). IDs are issued a few seconds later, with no restart.".to_string(),
            ),
        },
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        message,
        Some(detail),
        Some(&hint),
    )
}

fn infinite_timestamp() -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
        "timestamp out of range for a snowflake ID".into(),
        Some("Infinite timestamps cannot be encoded.".into()),
        None,
    )
}
