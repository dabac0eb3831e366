//! Error reports in PostgreSQL's style: lower-case primary message, DETAIL with the facts,
//! HINT with the fix, and a precise SQLSTATE. The reporting leaf of the glue: `raise` and
//! `report`, and the messages of the core's layout errors, which several modules raise. Each
//! module's own errors live beside it, at the end of that module.

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

/// Whether the current role may see what identifies this server and its surroundings (the
/// disclosure rule of docs/security.md, "Status queries"): superusers and roles with the
/// privileges of `pg_monitor`, who may run `snowflake_health()`, which names the same facts.
/// `has_privs_of_role`, as PostgreSQL's own checks for its predefined roles: a member that does
/// not inherit `pg_monitor`'s privileges sees them after `SET ROLE pg_monitor` only.
pub fn sees_server() -> bool {
    // SAFETY: a role-cache lookup for the current user.
    unsafe {
        pgrx::pg_sys::has_privs_of_role(
            pgrx::pg_sys::GetUserId(),
            pgrx::pg_sys::Oid::from(pgrx::pg_sys::ROLE_PG_MONITOR),
        )
    }
}
