//! Settings (GUCs) and start-up checks.
//!
//! PostgreSQL only WARNs about a bad value of a placeholder setting that a preloaded library
//! defines later, and then silently uses the default: a worker_id of 32 would quietly become 0 and
//! collide with another server. So every value is checked here first, and a bad one stops the
//! server at start-up with PostgreSQL's own message for that mistake.

use crate::core::layout::{Node, MAX_DATACENTER, MAX_TIMESTAMP, MAX_WORKER, TWITTER_EPOCH_MS};
use crate::core::time::{parse_epoch, Clock, SystemClock};
use crate::errors;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::{pg_sys, PgLogLevel, PgSqlErrorCode};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

pub const DEFAULT_EPOCH: &CStr = c"2010-11-04 01:42:54.657+00";
pub const DEFAULT_MAX_CLOCK_DRIFT_MS: f64 = 10_000.0;
pub const MIN_MAX_CLOCK_DRIFT_MS: f64 = 100.0;
/// Any gap the layout can hold: after a clock that ran ahead by a year is corrected, raising the
/// drift above the gap lets the server issue again at once (IDs dated in the future until real
/// time catches up). A real (floating-point) setting, since an integer in ms ends at 24.8 days.
pub const MAX_MAX_CLOCK_DRIFT_MS: f64 = MAX_TIMESTAMP as f64;
pub const DEFAULT_CLAIM_EXPIRY_MS: i32 = 60_000;
const MIN_CLAIM_EXPIRY_MS: i32 = crate::core::fleet::MIN_EXPIRY_MS as i32;
const MAX_CLAIM_EXPIRY_MS: i32 = 86_400_000;

static DATACENTER_ID: GucSetting<i32> = GucSetting::<i32>::new(0);
static WORKER_ID: GucSetting<i32> = GucSetting::<i32>::new(0);
static EPOCH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT_EPOCH));
static MAX_CLOCK_DRIFT: GucSetting<f64> = GucSetting::<f64>::new(DEFAULT_MAX_CLOCK_DRIFT_MS);
static CLAIM_EXPIRY: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_CLAIM_EXPIRY_MS);
static TRACK_HORIZON: GucSetting<bool> = GucSetting::<bool>::new(true);
static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

// Set once in `_PG_init` (in the postmaster when preloaded, so every backend inherits them) and
// constant afterwards: the settings behind them can only change with a restart.
static PRELOADED: AtomicBool = AtomicBool::new(false);
static PAIR_SET: AtomicBool = AtomicBool::new(false);
static EPOCH_MS: AtomicI64 = AtomicI64::new(TWITTER_EPOCH_MS);
static NODE_BITS: AtomicU64 = AtomicU64::new(0);

pub fn preloaded() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// The one check of every function that needs the generator in shared memory: 55000 with the
/// fix when the library was not preloaded.
pub fn require_preload(function: &str) {
    if !preloaded() {
        not_preloaded(function);
    }
}

/// The one check of every function that only a primary can answer: 25006 during recovery, with
/// why (`detail`) and what to do instead (`hint`).
pub fn require_primary(function: &str, (detail, hint): (&str, &str)) {
    // SAFETY: a plain read of the server's state, valid in any backend.
    if unsafe { pgrx::pg_sys::RecoveryInProgress() } {
        in_recovery(function, detail, hint);
    }
}

/// Why a standby generates no IDs, for `require_primary`.
pub const STANDBY_SHARES_THE_PAIR: (&str, &str) = (
    "A standby shares its primary's datacenter_id and worker_id, so IDs it generated could repeat the primary's.",
    "Generate IDs on the primary; a promoted standby generates them once it accepts writes.",
);

/// The epoch in Unix milliseconds.
pub fn epoch_ms() -> i64 {
    EPOCH_MS.load(Ordering::Relaxed)
}

pub fn node() -> Node {
    Node::from_bits(NODE_BITS.load(Ordering::Relaxed))
}

/// Whether `snowflake.datacenter_id` or `snowflake.worker_id` was set by any source (a
/// configuration file, postgresql.auto.conf, the command line), even to 0; false when both were
/// left at their defaults and the server warned at start-up.
pub fn pair_set() -> bool {
    PAIR_SET.load(Ordering::Relaxed)
}

/// `snowflake.max_clock_drift` in ms; it may change on reload (SIGHUP).
#[inline]
pub fn max_clock_drift_ms() -> u64 {
    // SAFETY: PostgreSQL writes the setting only from this (the backend's only) thread, on
    // reload; reading it directly skips pgrx's per-call thread check on the hot path. The cast
    // saturates (a negative or NaN value, which the bounds exclude anyway, becomes 0).
    (unsafe { MAX_CLOCK_DRIFT.as_ptr().read() }) as u64
}

/// `snowflake.claim_expiry` in ms: how long another server's claim stays live unrefreshed.
pub fn claim_expiry_ms() -> u64 {
    CLAIM_EXPIRY.get().max(MIN_CLAIM_EXPIRY_MS) as u64
}

/// `snowflake.track_horizon`: whether transactions' IDs are tracked for `snowflake_horizon()`.
pub fn track_horizon() -> bool {
    TRACK_HORIZON.get()
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

/// Parses a real setting ("1.5s", "400d", "2500"), in the unit it is declared with.
fn parse_real(text: &str, units: &[(&str, i64)]) -> Option<f64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let n: f64 = num.parse().ok().filter(|n: &f64| n.is_finite())?;
    if unit.is_empty() {
        return Some(n);
    }
    units
        .iter()
        .find(|(u, _)| *u == unit)
        .map(|(_, f)| n * *f as f64)
}

fn check_real(name: &CStr, min: f64, max: f64, units: &[(&str, i64)]) {
    let Some(text) = raw_setting(name) else {
        return;
    };
    let pname = name.to_string_lossy();
    match parse_real(&text, units) {
        Some(v) if (min..=max).contains(&v) => {}
        Some(v) => fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{v} ms is outside the valid range for parameter \"{pname}\" ({min} ms .. {max} ms)"),
            Some(format!("\"{pname}\" allows up to {} days, the whole range of a snowflake timestamp.", (max / 86_400_000.0).floor())),
            Some("Fix the setting in postgresql.conf (or postgresql.auto.conf) and start the server again."),
        ),
        None => fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"{pname}\": \"{text}\""),
            Some(format!("\"{pname}\" takes a time such as '10s', '2d' or '400d' (ms without a unit).")),
            None,
        ),
    }
}

/// Every setting this library defines. Any other `snowflake.*` in the configuration is a typo,
/// and a typo such as `snowflake.workerid = 7` would leave the server running as worker 0, the
/// very way two servers come to share a pair: it stops the server at start-up.
pub const SETTINGS: [&str; 7] = [
    "snowflake.datacenter_id",
    "snowflake.worker_id",
    "snowflake.epoch",
    "snowflake.max_clock_drift",
    "snowflake.claim_expiry",
    "snowflake.database",
    "snowflake.track_horizon",
];

/// The settings under our prefix that we do not define, each with the one it most likely meant.
pub fn unknown_settings(names: &[String]) -> Vec<(String, Option<&'static str>)> {
    let squash = |s: &str| {
        s.to_ascii_lowercase()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '.')
            .collect::<String>()
    };
    names
        .iter()
        .filter(|n| n.to_ascii_lowercase().starts_with("snowflake."))
        .filter(|n| !SETTINGS.iter().any(|k| k.eq_ignore_ascii_case(n)))
        .map(|n| {
            let meant = SETTINGS.iter().copied().find(|k| squash(k) == squash(n));
            (n.clone(), meant)
        })
        .collect()
}

/// Every setting PostgreSQL holds now, placeholders included, with the source of its value
/// (`PGC_S_DEFAULT` for one that nothing set).
fn all_settings() -> Vec<(String, pg_sys::GucSource::Type)> {
    // SAFETY: called in the postmaster while shared_preload_libraries is processed; the array
    // and the names it points to are PostgreSQL's own and stay valid during the call.
    unsafe {
        // 16 moved the settings into a hash table and gave this function a count out-parameter.
        #[cfg(any(feature = "pg14", feature = "pg15"))]
        let (vars, n) = (pg_sys::get_guc_variables(), pg_sys::GetNumConfigOptions());
        #[cfg(not(any(feature = "pg14", feature = "pg15")))]
        let (vars, n) = {
            let mut n = 0;
            (pg_sys::get_guc_variables(&mut n), n)
        };
        (0..n.max(0) as usize)
            .map(|i| *vars.add(i))
            .filter(|v| !v.is_null() && !(**v).name.is_null())
            .map(|v| {
                let name = CStr::from_ptr((*v).name).to_string_lossy().into_owned();
                (name, (*v).source)
            })
            .collect()
    }
}

/// The names of every setting PostgreSQL holds now, placeholders included.
fn all_setting_names() -> Vec<String> {
    all_settings().into_iter().map(|(name, _)| name).collect()
}

/// Whether any source set `snowflake.datacenter_id` or `snowflake.worker_id`, among `settings`
/// (name and source). A setting that is absent, or present with `PGC_S_DEFAULT`, was not set: a
/// server that writes 0 chose 0.
fn pair_set_in(settings: &[(String, pg_sys::GucSource::Type)]) -> bool {
    settings.iter().any(|(name, source)| {
        (name.eq_ignore_ascii_case("snowflake.datacenter_id")
            || name.eq_ignore_ascii_case("snowflake.worker_id"))
            && *source != pg_sys::GucSource::PGC_S_DEFAULT
    })
}

/// Two servers left on the default pair (0, 0) issue the same IDs, and nothing else would tell
/// them: a server whose pair nobody set says so once, in the postmaster's log at start-up. It
/// still starts (a single server needs no pair, and a 1.x server upgraded as it was keeps working).
fn warn_default_pair() {
    errors::report(
        PgLogLevel::WARNING,
        PgSqlErrorCode::ERRCODE_WARNING,
        "snowflake.datacenter_id and snowflake.worker_id are not set".into(),
        Some("Both settings are at their defaults, so this server's pair is (0, 0). Two servers with the same pair can issue the same IDs.".into()),
        Some("Set snowflake.datacenter_id and snowflake.worker_id in postgresql.conf to a pair that no other server uses, and restart. A single server can ignore this."),
    );
}

fn check_unknown_settings() {
    if let Some((name, meant)) = unknown_settings(&all_setting_names()).into_iter().next() {
        fatal(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("unrecognized configuration parameter \"{name}\""),
            Some(format!("snowflake defines only {}.", SETTINGS.join(", "))),
            Some(&match meant {
                Some(k) => format!("Did you mean \"{k}\"? Fix postgresql.conf (or postgresql.auto.conf) and start the server again."),
                None => "Remove or correct it in postgresql.conf (or postgresql.auto.conf) and start the server again.".into(),
            }),
        )
    }
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

fn check_bool(name: &CStr) {
    let Some(text) = raw_setting(name) else {
        return;
    };
    let mut value = false;
    let c = CString::new(text.clone()).unwrap_or_default();
    if !unsafe { pg_sys::parse_bool(c.as_ptr(), &mut value) } {
        let pname = name.to_string_lossy();
        fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("parameter \"{pname}\" requires a Boolean value"),
            Some(format!("It is set to \"{text}\".")),
            Some("Use on or off in postgresql.conf (or postgresql.auto.conf) and start the server again."),
        );
    }
}

const TIME_UNITS: &[(&str, i64)] = &[
    ("ms", 1),
    ("s", 1000),
    ("min", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// The epoch from the setting's text, checked: from 1970 on, and its 41 bits not yet used up.
/// An epoch later than the clock is allowed (a machine without a hardware clock may boot at 1970
/// before NTP sets it): `snowflake_nextval()` refuses until the clock passes it, and a preloaded
/// library says so in the log at start-up.
fn check_epoch(level: PgLogLevel) -> i64 {
    let Some(text) = raw_setting(c"snowflake.epoch") else {
        return TWITTER_EPOCH_MS;
    };
    let now = SystemClock.now_unix_ms();
    let problem = match parse_epoch(&text).and_then(|ms| epoch_problem(ms, now).map(|_| ms)) {
        Ok(ms) => {
            if ms > now && level == PgLogLevel::FATAL {
                errors::report(
                    PgLogLevel::WARNING,
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("snowflake.epoch \"{}\" is later than the system clock", text.trim()),
                    Some(format!("The clock reads {now} ms after 1970, the epoch is {ms}: snowflake_nextval() refuses until the clock passes the epoch.")),
                    Some("If the clock is right, set snowflake.epoch to a past instant and restart."),
                );
            }
            return ms;
        }
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

/// Why an epoch cannot be used at clock `now` (both Unix ms): before 1970, or so long ago that its
/// 41 bits of milliseconds are already used up.
pub fn epoch_problem(epoch_ms: i64, now_unix_ms: i64) -> Result<(), String> {
    if epoch_ms < 0 {
        return Err(format!(
            "The epoch is {epoch_ms} ms after 1970-01-01 UTC; it must not be before 1970."
        ));
    }
    let end = epoch_ms.saturating_add(MAX_TIMESTAMP as i64);
    if end < now_unix_ms {
        return Err(format!(
            "41 bits of milliseconds from this epoch ended at {end} ms after 1970 (69.7 years after it); the clock reads {now_unix_ms}."
        ));
    }
    Ok(())
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
    check_unknown_settings();
    check_real(
        c"snowflake.max_clock_drift",
        MIN_MAX_CLOCK_DRIFT_MS,
        MAX_MAX_CLOCK_DRIFT_MS,
        TIME_UNITS,
    );
    check_int(
        c"snowflake.claim_expiry",
        MIN_CLAIM_EXPIRY_MS.into(),
        MAX_CLAIM_EXPIRY_MS.into(),
        TIME_UNITS,
    );
    check_bool(c"snowflake.track_horizon");
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
    GucRegistry::define_float_guc(
        c"snowflake.max_clock_drift",
        c"How far the timestamps of issued snowflake IDs may run ahead of the wall clock.",
        c"Covers clocks stepped backwards and bursts beyond 4096 IDs per millisecond; past it snowflake_nextval() raises an error. Up to the whole 41-bit range, for a clock that ran ahead and was corrected.",
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
    GucRegistry::define_bool_guc(
        c"snowflake.track_horizon",
        c"Tracks the smallest snowflake ID of every open transaction, for snowflake_horizon().",
        c"Costs one compare in snowflake_nextval() and one at the end of a transaction that took an ID; off makes snowflake_horizon() raise an error.",
        &TRACK_HORIZON,
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

    // Read from the defined settings, which keep the source of the placeholders they replace.
    let pair_set = pair_set_in(&all_settings());
    if !pair_set {
        warn_default_pair();
    }

    EPOCH_MS.store(epoch, Ordering::Relaxed);
    PAIR_SET.store(pair_set, Ordering::Relaxed);
    let node = Node::new(datacenter, worker).expect("checked above");
    NODE_BITS.store(node.bits(), Ordering::Relaxed);
    PRELOADED.store(true, Ordering::Relaxed);
}

// The errors of this module (reported through `errors::raise`).

fn not_preloaded(function: &str) -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("{function} requires the snowflake library to be preloaded"),
        Some("The generator lives in shared memory, which only a library in shared_preload_libraries can set up.".into()),
        Some("Add 'snowflake' to shared_preload_libraries in postgresql.conf and restart the server."),
    )
}

/// A function that only a primary can answer, called during recovery: 25006, as PostgreSQL's own
/// commands that cannot run on a standby.
fn in_recovery(function: &str, detail: &str, hint: &str) -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("cannot execute {function} during recovery"),
        Some(detail.into()),
        Some(hint),
    )
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
        assert_eq!(parse_real("400d", TIME_UNITS), Some(34_560_000_000.0));
        assert_eq!(parse_real("1.5s", TIME_UNITS), Some(1500.0));
        assert_eq!(parse_real("2500", TIME_UNITS), Some(2500.0));
        assert_eq!(parse_real("1e3 ms", TIME_UNITS), Some(1000.0));
        assert_eq!(parse_real("soon", TIME_UNITS), None);
        assert_eq!(parse_real("nan", TIME_UNITS), None);
        // Parses, to infinity: refused rather than taken as "no limit".
        assert_eq!(parse_real("1e999", TIME_UNITS), None);
    }

    #[test]
    fn unknown_snowflake_settings_are_named_with_what_they_meant() {
        let names: Vec<String> = [
            "work_mem",
            "snowflake.worker_id",
            "Snowflake.Epoch",
            "snowflake.workerid",
            "snowflake.DataCenterID",
            "snowflake.nonsense",
            "snowflakes.x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            unknown_settings(&names),
            vec![
                (
                    "snowflake.workerid".to_string(),
                    Some("snowflake.worker_id")
                ),
                (
                    "snowflake.DataCenterID".to_string(),
                    Some("snowflake.datacenter_id")
                ),
                ("snowflake.nonsense".to_string(), None),
            ]
        );
    }

    #[test]
    fn the_pair_is_set_when_any_source_set_either_setting() {
        use pg_sys::GucSource::{PGC_S_ARGV, PGC_S_DEFAULT, PGC_S_FILE};
        let set = |list: &[(&str, pg_sys::GucSource::Type)]| {
            pair_set_in(
                &list
                    .iter()
                    .map(|(n, s)| (n.to_string(), *s))
                    .collect::<Vec<_>>(),
            )
        };
        assert!(!set(&[]));
        assert!(!set(&[
            ("snowflake.datacenter_id", PGC_S_DEFAULT),
            ("snowflake.worker_id", PGC_S_DEFAULT),
            ("work_mem", PGC_S_FILE),
            ("snowflake.epoch", PGC_S_FILE),
        ]));
        // Set to 0 is set: the server chose its pair.
        assert!(set(&[
            ("snowflake.datacenter_id", PGC_S_DEFAULT),
            ("snowflake.worker_id", PGC_S_FILE),
        ]));
        assert!(set(&[("Snowflake.DataCenter_ID", PGC_S_ARGV)]));
    }

    #[test]
    fn an_epoch_must_be_from_1970_and_its_range_not_used_up() {
        let now = 1_800_000_000_000;
        assert!(epoch_problem(TWITTER_EPOCH_MS, now).is_ok());
        assert!(epoch_problem(0, now).is_ok(), "1970 itself: ends in 2039");
        assert!(
            epoch_problem(now + 86_400_000, now).is_ok(),
            "later than the clock"
        );
        let e1950 = crate::core::time::parse_epoch("1950-01-01").unwrap();
        assert!(epoch_problem(e1950, now)
            .unwrap_err()
            .contains("before 1970"));
        // 1970 + 69.7 years is 2039: the range of a 1970 epoch is used up in 2040.
        let y2040 = crate::core::time::parse_epoch("2040-01-01").unwrap();
        assert!(epoch_problem(0, y2040).unwrap_err().contains("ended"));
    }
}
