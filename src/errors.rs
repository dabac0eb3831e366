//! Error reports in PostgreSQL's style: lower-case primary message, DETAIL with the facts,
//! HINT with the fix, and a precise SQLSTATE.

use crate::core::generator::GenError;
use crate::core::layout::{LayoutError, MAX_TIMESTAMP};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub fn raise(
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<&str>,
) -> ! {
    report(PgLogLevel::ERROR, code, message, detail, hint);
    unreachable!("ERROR does not return")
}

pub fn report(
    level: PgLogLevel,
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<&str>,
) {
    let mut r = ErrorReport::new(code, message, "snowflake");
    if let Some(d) = detail {
        r = r.set_detail(d);
    }
    if let Some(h) = hint {
        r = r.set_hint(h);
    }
    r.report(level);
}

pub fn not_preloaded(function: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("{function} requires the snowflake library to be preloaded"),
        Some("The generator lives in shared memory, which only a library in shared_preload_libraries can set up.".into()),
        Some("Add 'snowflake' to shared_preload_libraries in postgresql.conf and restart the server."),
    )
}

pub fn in_recovery(function: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("cannot execute {function} during recovery"),
        Some("A standby shares its primary's datacenter_id and worker_id, so IDs it generated could repeat the primary's.".into()),
        Some("Generate IDs on the primary; a promoted standby generates them once it accepts writes."),
    )
}

pub fn lease_not_ready(waited: std::time::Duration, database: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake ID generator is not ready".into(),
        Some(format!(
            "The \"snowflake lease\" background worker has not persisted a high-water mark for the next IDs within {} s; it keeps it in the sequence _snowflake.lease_ms of database \"{database}\".",
            waited.as_secs()
        )),
        Some("Check the server log for errors of the \"snowflake lease\" worker, and that the database named by snowflake.database exists."),
    )
}

pub fn layout(e: LayoutError, epoch_ms: i64) -> ! {
    use PgSqlErrorCode::*;
    match e {
        LayoutError::NegativeId(id) => raise(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid snowflake ID {id}"),
            Some("Snowflake IDs are never negative: bit 63 is always 0.".into()),
            None,
        ),
        LayoutError::FieldOutOfRange { field, value, max } => raise(
            ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{field} {value} is out of range for a snowflake ID"),
            Some(format!("{field} must be between 0 and {max}.")),
            None,
        ),
        LayoutError::BeforeEpoch { unix_ms, .. } => raise(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            "timestamp is before the snowflake epoch".into(),
            Some(format!(
                "The timestamp is {} ms after 1970-01-01 UTC; the epoch (snowflake.epoch) is {epoch_ms}.",
                unix_ms
            )),
            None,
        ),
        LayoutError::PastEnd { unix_ms, .. } => raise(
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            "timestamp is out of range for a snowflake ID".into(),
            Some(format!(
                "The timestamp is {unix_ms} ms after 1970-01-01 UTC; 41 bits of milliseconds end at {} with the epoch {epoch_ms}.",
                epoch_ms + MAX_TIMESTAMP as i64
            )),
            None,
        ),
    }
}

pub fn infinite_timestamp() -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
        "timestamp out of range for a snowflake ID".into(),
        Some("Infinite timestamps cannot be encoded.".into()),
        None,
    )
}

pub fn generator(e: GenError, epoch_ms: i64) -> ! {
    match e {
        GenError::ClockBehind { behind_ms, max_drift_ms } => raise(
            PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
            "could not generate a snowflake ID because the system clock is behind".into(),
            Some(format!(
                "The clock is {behind_ms} ms behind the timestamp of the last issued ID; snowflake.max_clock_drift allows {max_drift_ms} ms."
            )),
            Some("IDs resume by themselves once the clock catches up. To issue now, raise snowflake.max_clock_drift above the gap and reload (any gap up to the 41-bit range): new IDs are then dated that far in the future until real time catches up. If the clock was ahead and has been corrected, this is the gap it ran ahead by; see \"Clock faults\" in docs/operations.md."),
        ),
        GenError::BeforeEpoch { before_ms } => raise(
            PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
            "could not generate a snowflake ID because the system clock reads before snowflake.epoch".into(),
            Some(format!(
                "The clock reads {before_ms} ms before the epoch {epoch_ms} (Unix ms); snowflake timestamps count from it."
            )),
            Some("IDs are issued once the clock passes the epoch. If the clock is right, snowflake.epoch is wrong: set a past instant and restart the server."),
        ),
        // The fleet check reports this with the other server's details (`fleet::refuse`);
        // this is the same error for any path that meets it without them.
        GenError::Refused => raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "snowflake ID generation is refused: another server claims this server's datacenter and worker ID".into(),
            None,
            Some("Give each server its own snowflake.datacenter_id and snowflake.worker_id."),
        ),
        GenError::TimestampExhausted => raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            "snowflake timestamp range is exhausted".into(),
            Some("41 bits of milliseconds since snowflake.epoch have all been used.".into()),
            Some("Move to a new table with a later snowflake.epoch."),
        ),
    }
}

/// The lease worker found an object in `_snowflake` that no superuser owns.
pub fn foreign_object(what: &str, owner: &str, database: &str, recheck: std::time::Duration) -> ! {
    raise(
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

/// `snowflake.epoch` moved later on a server that issued IDs under an earlier one: new IDs would
/// be below old ones.
pub fn epoch_moved_later(recorded_ms: i64, configured_ms: i64, ahead_ms: u64) -> ! {
    let ts = |ms: i64| {
        pgrx::datum::TimestampWithTimeZone::try_from(crate::core::time::unix_ms_to_pg_timestamp(ms))
            .map(|t| t.to_string())
            .unwrap_or_else(|_| format!("{ms} ms after 1970"))
    };
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowflake.epoch is later than the epoch this server issued IDs under".into(),
        Some(format!(
            "IDs were issued under the epoch {} ({recorded_ms} Unix ms); snowflake.epoch is now {} ({configured_ms}). An ID counts milliseconds since its epoch, so new IDs would lie below those already issued until {ahead_ms} ms from now.",
            ts(recorded_ms),
            ts(configured_ms)
        )),
        Some(&format!(
            "Set snowflake.epoch back to '{}' and restart. An epoch can only move earlier on a server that has issued IDs; a later one needs new tables and a new snowflake.database.",
            ts(recorded_ms)
        )),
    )
}

/// Another live server claims our (datacenter, worker): issuing would repeat its IDs.
pub fn node_claimed(
    datacenter: u32,
    worker: u32,
    other_system_identifier: i64,
    other_last_seen: &str,
    expiry_s: u64,
    claims_stale: bool,
) -> ! {
    let stale = if claims_stale {
        " Claims may be out of date here: a subscription that carries _snowflake.claims to this server is not applying (the server log names it), and a server whose claims stop arriving cannot be told from one that left, so no claim expires until it applies again."
    } else {
        ""
    };
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake datacenter_id {datacenter} and worker_id {worker} are also used by another server"
        ),
        Some(format!(
            "The server with system identifier {other_system_identifier} claimed them, last seen at {other_last_seen}; two servers with one pair generate the same IDs, so this server generates none until that claim is gone.{stale}"
        )),
        Some(&format!(
            "Give one of the two servers another snowflake.worker_id (or datacenter_id) and restart it. If the other server no longer runs, its claim expires once this server has seen it unchanged for {expiry_s} s, or retire it now (it stays as the floor for this pair): UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {other_system_identifier}."
        )),
    )
}
