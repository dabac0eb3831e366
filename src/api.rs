//! The SQL functions. Each one converts its arguments, calls the core and reports errors.

use crate::config::{self, epoch_ms};
use crate::core::generator::{issue, IssueError, Step};
use crate::core::layout::{self, decompose};
use crate::core::time::{pg_timestamp_to_unix_ms, unix_ms_to_pg_timestamp, Clock, SystemClock};
use crate::errors;
use crate::shmem::{self, GENERATOR};
use pgrx::prelude::*;

/// How long a call waits for the lease worker before giving up with an error.
const LEASE_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The next ID of this server's generator: strictly greater than every ID it issued before.
#[pg_extern(volatile, parallel_safe)]
fn snowflake_nextval() -> i64 {
    if !config::preloaded() {
        errors::not_preloaded("snowflake_nextval()");
    }
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::in_recovery("snowflake_nextval()");
    }
    let node = config::node();
    let epoch = epoch_ms();
    let drift = config::max_clock_drift_ms();
    let mut lease_deadline = None;
    let result = issue(
        // The whole critical section: one clock read and a few comparisons.
        || {
            let now = SystemClock.now_unix_ms() - epoch;
            GENERATOR.exclusive().state.next(now, node, drift)
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
                    shmem::wake_worker();
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
        Err(IssueError::Gen(e)) => errors::generator(e),
        Err(IssueError::Wait(())) => errors::lease_not_ready(LEASE_WAIT_LIMIT, &config::database()),
    }
}

fn parts(id: i64) -> layout::Parts {
    decompose(id).unwrap_or_else(|e| errors::layout(e, epoch_ms()))
}

fn unix_ms(ts: TimestampWithTimeZone) -> i64 {
    pg_timestamp_to_unix_ms(ts.into()).unwrap_or_else(|| errors::infinite_timestamp())
}

/// When the ID was generated (to the millisecond), by this server's `snowflake.epoch`.
#[pg_extern(immutable, parallel_safe)]
fn snowflake_timestamp(id: i64) -> TimestampWithTimeZone {
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
fn snowflake_min_id(ts: TimestampWithTimeZone) -> i64 {
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
