//! Settings (GUCs) and start-up checks.
//!
//! PostgreSQL only WARNs about a bad value of a placeholder setting that a preloaded library
//! defines later, and then silently uses the default: a worker_id of 32 would quietly become 0 and
//! collide with another server. So every value is checked here first, and a bad one stops the
//! server at start-up with PostgreSQL's own message for that mistake.

use crate::core::layout::{Node, MAX_DATACENTER, MAX_WORKER, TWITTER_EPOCH_MS};
use crate::core::time::{parse_epoch, Clock, SystemClock};
use crate::errors;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::{pg_sys, PgLogLevel, PgSqlErrorCode};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

pub const DEFAULT_EPOCH: &CStr = c"2010-11-04 01:42:54.657+00";
pub const DEFAULT_MAX_CLOCK_DRIFT_MS: i32 = 10_000;
pub const MIN_MAX_CLOCK_DRIFT_MS: i32 = 100;
pub const MAX_MAX_CLOCK_DRIFT_MS: i32 = 86_400_000;
pub const DEFAULT_CLAIM_EXPIRY_MS: i32 = 60_000;
const MIN_CLAIM_EXPIRY_MS: i32 = crate::core::fleet::MIN_EXPIRY_MS as i32;
const MAX_CLAIM_EXPIRY_MS: i32 = 86_400_000;

static DATACENTER_ID: GucSetting<i32> = GucSetting::<i32>::new(0);
static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(0);
static EPOCH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static MAX_CLOCK_DRIFT: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_CLOCK_DRIFT_MS);
static CLAIM_EXPIRY: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_CLAIM_EXPIRY_MS);
static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

// Set once in `_PG_init` (in the postmaster when preloaded, so every backend inherits them) and
// constant afterwards: the settings behind them can only change with a restart.
static PRELOADED: AtomicBool = AtomicBool::new(false);
static EPOCH_MS: AtomicI64 = AtomicI64::new(TWITTER_EPOCH_MS);
static NODE_BITS: AtomicU64 = AtomicU64::new(0);

pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// The epoch in Unix milliseconds.
pub fn epoch_ms() -> i64 {
    EPOCH_MS.load(Ordering::Relaxed)
}

pub fn node() -> Node {
    Node::from_bits(NODE_BITS.load(Ordering::Relaxed))
}

/// `snowflake.max_clock_drift` in ms; it may change on reload (SIGHUP).
#[inline]
pub fn max_clock_drift_ms() -> u64 {
    // SAFETY: PostgreSQL writes the setting only from this (the backend's only) thread, on
    // reload; reading it directly skips pgrx's per-call thread check on the hot path.
    unsafe { MAX_CLOCK_DRIFT.as_ptr().read() }.max(0) as u64
}

/// `snowflake.claim_expiry` in ms: how long another server's claim stays live unrefreshed.
pub fn claim_expiry_ms() -> u64 {
    CLAIM_EXPIRY.get().max(MIN_CLAIM_EXPIRY_MS) as u64
}

/// The database in which the lease worker keeps the high-water mark.
pub fn database() -> String {
    DATABASE
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".into())
}

/// The raw text of a setting as PostgreSQL holds it (a placeholder before we define it).
fn raw_setting(name: &CStr) -> Option<String> {
    let p = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    if p.is_null() {
        None
    } else {
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

fn fatal(code: PgSqlErrorCode, message: String, detail: Option<String>, hint: Option<&str>) -> ! {
    errors::report(PgLogLevel::FATAL, code, message, detail, hint);
    unreachable!("FATAL does not return")
}

/// Parses an integer setting, in the unit it is declared with; `units` maps suffixes to factors.
fn parse_int(text: &str, units: &[(&str, i64)]) -> Option<i64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '+'))
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let n: i64 = num.parse().ok()?;
    if unit.is_empty() {
        return Some(n);
    }
    units
        .iter()
        .find(|(u, _)| *u == unit)
        .and_then(|(_, f)| n.checked_mul(*f))
}

fn check_int(name: &CStr, min: i64, max: i64, units: &[(&str, i64)]) -> Option<i64> {
    let text = raw_setting(name)?;
    let pname = name.to_string_lossy();
    match parse_int(&text, units) {
        Some(v) if (min..=max).contains(&v) => Some(v),
        Some(v) => fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{v} is outside the valid range for parameter \"{pname}\" ({min} .. {max})"),
            None,
            Some("Fix the setting in postgresql.conf (or postgresql.auto.conf) and start the server again."),
        ),
        None => fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{pname}\": \"{text}\""),
            Some(format!("\"{pname}\" takes a whole number between {min} and {max}.")),
            None,
        ),
    }
}

const TIME_UNITS: &[(&str, i64)] = &[
    ("ms", 1),
    ("s", 1000),
    ("min", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// The epoch from the setting's text, checked: after 1970 and not in the future.
fn check_epoch(level: PgLogLevel) -> i64 {
    let Some(text) = raw_setting(c"snowflake.epoch") else {
        return TWITTER_EPOCH_MS;
    };
    let problem = match parse_epoch(&text) {
        Ok(ms) if ms > SystemClock.now_unix_ms() => {
            format!(
                "\"{}\" is in the future; IDs can only count time since a past instant.",
                text.trim()
            )
        }
        Ok(ms) => return ms,
        Err(why) => why,
    };
    errors::report(
        level,
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"snowflake.epoch\": \"{}\"", text.trim()),
        Some(problem),
        Some("Use a past UTC timestamp such as '2015-01-01 00:00:00+00', or milliseconds since 1970."),
    );
    unreachable!("FATAL and ERROR do not return")
}

/// Settings of a library loaded by one backend only (CREATE EXTENSION without preload): the pure
/// functions still work with the configured epoch; the generator refuses with a clear error.
pub fn init_unpreloaded() {
    EPOCH_MS.store(check_epoch(PgLogLevel::ERROR), Ordering::Relaxed);
}

/// Checks and defines every setting, in the postmaster while shared_preload_libraries is being
/// processed. A bad value stops the server here, before anything else is set up.
pub fn init_preloaded() {
    let datacenter =
        check_int(c"snowflake.datacenter_id", 0, MAX_DATACENTER.into(), &[]).unwrap_or(0);
    let worker = check_int(c"snowflake.worker_id", 0, MAX_WORKER.into(), &[]).unwrap_or(0);
    check_int(
        c"snowflake.max_clock_drift",
        MIN_MAX_CLOCK_DRIFT_MS.into(),
        MAX_MAX_CLOCK_DRIFT_MS.into(),
        TIME_UNITS,
    );
    check_int(
        c"snowflake.claim_expiry",
        MIN_CLAIM_EXPIRY_MS.into(),
        MAX_CLAIM_EXPIRY_MS.into(),
        TIME_UNITS,
    );
    let epoch = check_epoch(PgLogLevel::FATAL);
    GucRegistry::define_int_guc(
        c"snowflake.datacenter_id",
        c"Datacenter ID (0..31) written into every snowflake ID this server generates.",
        c"Together with snowflake.worker_id it must be unique among all servers that generate IDs for the same data.",
        &DATACENTER_ID,
        0,
        MAX_DATACENTER as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"snowflake.worker_id",
        c"Worker ID (0..31) written into every snowflake ID this server generates.",
        c"Together with snowflake.datacenter_id it must be unique among all servers that generate IDs for the same data.",
        &WORKER_ID,
        0,
        MAX_WORKER as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"snowflake.epoch",
        c"Instant from which snowflake timestamps count milliseconds.",
        c"A past UTC timestamp or milliseconds since 1970; the default is Twitter's epoch, 2010-11-04 01:42:54.657 UTC.",
        &EPOCH,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"snowflake.max_clock_drift",
        c"How far the timestamps of issued snowflake IDs may run ahead of the wall clock.",
        c"Covers clocks stepped backwards and bursts beyond 4096 IDs per millisecond; past it snowflake_nextval() raises an error.",
        &MAX_CLOCK_DRIFT,
        MIN_MAX_CLOCK_DRIFT_MS,
        MAX_MAX_CLOCK_DRIFT_MS,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"snowflake.claim_expiry",
        c"How long another server's claim on a datacenter and worker ID stays live without a refresh.",
        c"Servers refresh their claim every 5 s; a claim older than this no longer stops snowflake_nextval().",
        &CLAIM_EXPIRY,
        MIN_CLAIM_EXPIRY_MS,
        MAX_CLAIM_EXPIRY_MS,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_string_guc(
        c"snowflake.database",
        c"Database in which snowflake keeps its persisted high-water mark.",
        c"The lease worker connects to it and keeps the sequence _snowflake.lease_ms there; it must exist.",
        &DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    // Any other snowflake.* name is a typo: 15 renamed the call that says so and made it
    // remove the placeholder as well.
    #[cfg(feature = "pg14")]
    unsafe {
        pg_sys::EmitWarningsOnPlaceholders(c"snowflake".as_ptr())
    };
    #[cfg(not(feature = "pg14"))]
    unsafe {
        pg_sys::MarkGUCPrefixReserved(c"snowflake".as_ptr())
    };

    EPOCH_MS.store(epoch, Ordering::Relaxed);
    let node = Node::new(datacenter, worker).expect("checked above");
    NODE_BITS.store(node.bits(), Ordering::Relaxed);
    PRELOADED.store(true, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_settings_parse_with_units() {
        assert_eq!(parse_int("31", &[]), Some(31));
        assert_eq!(parse_int(" 7 ", &[]), Some(7));
        assert_eq!(parse_int("-1", &[]), Some(-1));
        assert_eq!(parse_int("abc", &[]), None);
        assert_eq!(parse_int("60s", TIME_UNITS), Some(60_000));
        assert_eq!(parse_int("2 min", TIME_UNITS), Some(120_000));
        assert_eq!(parse_int("1500", TIME_UNITS), Some(1500));
        assert_eq!(parse_int("5 parsecs", TIME_UNITS), None);
    }
}
