//! The SQL functions. Each one converts its arguments, calls the core and reports errors.

use crate::config::{self, epoch_ms};
use crate::core::generator::{issue, GenError, IssueError, Step};
use crate::core::layout::{self, decompose};
use crate::core::time::{pg_timestamp_to_unix_ms, unix_ms_to_pg_timestamp};
use crate::errors;
use crate::generator;
use pgrx::prelude::*;

/// How long a call waits for the lease worker before giving up with an error.
const LEASE_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

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
    if let Some(Ok(Step::Issued(id))) = first {
        return pg_sys::Datum::from(id);
    }
    pg_sys::Datum::from(unsafe { nextval_slow(&first) })
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

/// Everything but the common path: checks, the first call's set-up, waits and errors.
#[pg_guard]
#[cold]
#[inline(never)]
unsafe extern "C-unwind" fn nextval_slow(first: &Option<Result<Step, GenError>>) -> i64 {
    if !config::preloaded() {
        errors::not_preloaded("snowflake_nextval()");
    }
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::in_recovery("snowflake_nextval()");
    }
    generator::enable_hot_path(crate::horizon::hot_slot());
    let mut pending = *first;
    let mut lease_deadline = None;
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
                    let deadline = *lease_deadline
                        .get_or_insert_with(|| std::time::Instant::now() + LEASE_WAIT_LIMIT);
                    if std::time::Instant::now() > deadline {
                        return Err(());
                    }
                    generator::wake_worker();
                    unsafe { pg_sys::pg_usleep(200) };
                }
                Step::Issued(_) => {}
            }
            pg_sys::check_for_interrupts!();
            Ok(())
        },
    );
    match result {
        Ok(id) => id,
        Err(IssueError::Gen(GenError::Refused)) => {
            let foreign = generator::GENERATOR.share().foreign.get();
            match foreign {
                Some((what, owner)) => errors::foreign_object(
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
            errors::epoch_moved_later(recorded, epoch_ms(), behind_ms)
        }
        Err(IssueError::Gen(e)) => errors::generator(e, config::epoch_ms()),
        Err(IssueError::Wait(())) => errors::lease_not_ready(LEASE_WAIT_LIMIT, &config::database()),
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
    pg_timestamp_to_unix_ms(ts.into()).unwrap_or_else(|| errors::infinite_timestamp())
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
