//! Settings (GUCs) and start-up checks, driven by one table, `SETTINGS`.
//!
//! PostgreSQL only WARNs about a bad value of a placeholder setting that a preloaded library
//! defines later, and then silently uses the default: a worker_id of 32 would quietly become 0 and
//! collide with another server. So every value is checked here first, with PostgreSQL's own
//! parsers and unit flags (`'1.5min'` means what PostgreSQL means by it), and a bad one stops the
//! server at start-up with PostgreSQL's own message for that mistake.

use crate::core::citus::PairSource;
use crate::core::layout::{Node, MAX_DATACENTER, MAX_TIMESTAMP, MAX_WORKER, TWITTER_EPOCH_MS};
use crate::core::time::{parse_epoch, Clock, SystemClock, LATEST_EPOCH_UNIX_MS};
use crate::errors;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::{pg_guard, pg_sys, PgLogLevel, PgSqlErrorCode};
use std::ffi::{CStr, CString};
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};

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
static PAIR_SOURCE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"config"));
static CITUS_DATABASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

// Set once in `_PG_init` (in the postmaster when preloaded, so every backend inherits them) and
// constant afterwards: the settings behind them can only change with a restart.
static PRELOADED: AtomicBool = AtomicBool::new(false);
static PAIR_SET: AtomicBool = AtomicBool::new(false);
static EPOCH_MS: AtomicI64 = AtomicI64::new(TWITTER_EPOCH_MS);
static NODE_BITS: AtomicU64 = AtomicU64::new(0);
static SOURCE: AtomicU8 = AtomicU8::new(PairSource::Config as u8);

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

/// The pair `snowflake.datacenter_id` and `snowflake.worker_id` name. The pair in use is
/// [`crate::generator::node`]: this one, or one made from the Citus group (`pair_source`).
pub fn configured_node() -> Node {
    Node::from_bits(NODE_BITS.load(Ordering::Relaxed))
}

/// `snowflake.pair_source`.
pub fn pair_source() -> PairSource {
    match SOURCE.load(Ordering::Relaxed) {
        1 => PairSource::Citus,
        2 => PairSource::CitusInDatacenter,
        _ => PairSource::Config,
    }
}

/// `snowflake.citus_database`: the database of this node's Citus cluster, where the Citus worker
/// reads the node's group and asks the other nodes for their claims; `None` when not set (no
/// Citus worker runs).
pub fn citus_database() -> Option<String> {
    CITUS_DATABASE
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .filter(|d| !d.is_empty())
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

/// When a new value of a setting takes effect (the reference's settings table says "restart" and
/// "reload"; `pg_settings.context` says postmaster and sighup).
#[derive(Clone, Copy)]
enum Context {
    /// Read once, at start-up (`PGC_POSTMASTER`).
    Restart,
    /// Read again when the configuration is reloaded (`PGC_SIGHUP`).
    Reload,
}

impl Context {
    fn guc(self) -> GucContext {
        match self {
            Context::Restart => GucContext::Postmaster,
            Context::Reload => GucContext::Sighup,
        }
    }
}

/// A setting's type, the variable PostgreSQL keeps its value in, and for a number its bounds,
/// its unit (`GucFlags::UNIT_MS` or none) and what a value must be, in words, for the DETAIL of a
/// bad one (`"snowflake.x" takes {takes}.`).
enum Kind {
    Int {
        value: &'static GucSetting<i32>,
        min: i32,
        max: i32,
        unit: GucFlags,
        takes: &'static str,
    },
    Real {
        value: &'static GucSetting<f64>,
        min: f64,
        max: f64,
        unit: GucFlags,
        takes: &'static str,
    },
    Bool {
        value: &'static GucSetting<bool>,
    },
    /// Text that PostgreSQL takes as it is; `check` stops the server when it is unusable.
    Text {
        value: &'static GucSetting<Option<CString>>,
        check: TextCheck,
    },
}

/// The check of a text setting's value. A name rather than a function pointer: a pointer in the
/// table would link the server's error reporting into the glue's unit tests, which run without a
/// server.
#[derive(Clone, Copy)]
enum TextCheck {
    /// Any text.
    Any,
    /// `epoch_of`: from 1970 on, and its 41 bits not used up.
    Epoch,
    /// One of `PairSource::NAMES`.
    PairSource,
    /// A database's name: not empty (the lease worker reports one that does not exist).
    Database,
}

/// One setting, as it is defined, checked at start-up, and named in the typo check.
struct Setting {
    name: &'static CStr,
    short: &'static CStr,
    long: &'static CStr,
    context: Context,
    kind: Kind,
}

/// Every setting this library defines (the typo check's DETAIL names them in this order). Registration
/// (`init_preloaded`), the start-up checks (`check`) and the typo check (`unknown_settings`)
/// all read this table; tests/docs.rs checks the reference's settings table against what the
/// server then shows in `pg_settings`.
static SETTINGS: &[Setting] = &[
    Setting {
        name: c"snowflake.datacenter_id",
        short: c"Datacenter ID (0..31) written into every snowflake ID this server generates.",
        long: c"Together with snowflake.worker_id it must be unique among all servers that generate IDs for the same data.",
        context: Context::Restart,
        kind: Kind::Int {
            value: &DATACENTER_ID,
            min: 0,
            max: MAX_DATACENTER as i32,
            unit: GucFlags::empty(),
            takes: "a whole number from 0 to 31",
        },
    },
    Setting {
        name: c"snowflake.worker_id",
        short: c"Worker ID (0..31) written into every snowflake ID this server generates.",
        long: c"Together with snowflake.datacenter_id it must be unique among all servers that generate IDs for the same data.",
        context: Context::Restart,
        kind: Kind::Int {
            value: &WORKER_ID,
            min: 0,
            max: MAX_WORKER as i32,
            unit: GucFlags::empty(),
            takes: "a whole number from 0 to 31",
        },
    },
    Setting {
        name: c"snowflake.epoch",
        short: c"Instant from which snowflake timestamps count milliseconds.",
        long: c"A past UTC timestamp or milliseconds since 1970; the default is Twitter's epoch, 2010-11-04 01:42:54.657 UTC.",
        context: Context::Restart,
        kind: Kind::Text {
            value: &EPOCH,
            check: TextCheck::Epoch,
        },
    },
    Setting {
        name: c"snowflake.max_clock_drift",
        short: c"How far the timestamps of issued snowflake IDs may run ahead of the wall clock.",
        long: c"Covers clocks stepped backwards and bursts beyond 4096 IDs per millisecond; past it snowflake_nextval() raises an error. Up to the whole 41-bit range, for a clock that ran ahead and was corrected.",
        context: Context::Reload,
        kind: Kind::Real {
            value: &MAX_CLOCK_DRIFT,
            min: MIN_MAX_CLOCK_DRIFT_MS,
            max: MAX_MAX_CLOCK_DRIFT_MS,
            unit: GucFlags::UNIT_MS,
            takes: "a time from 100 ms up to 25451 days, the whole range of a snowflake timestamp, such as '10s', '2d' or '400d' (ms without a unit)",
        },
    },
    Setting {
        name: c"snowflake.claim_expiry",
        short: c"How long another server's claim on a datacenter and worker ID stays live without a refresh.",
        long: c"Servers refresh their claim every 5 s; a claim older than this no longer stops snowflake_nextval().",
        context: Context::Reload,
        kind: Kind::Int {
            value: &CLAIM_EXPIRY,
            min: MIN_CLAIM_EXPIRY_MS,
            max: MAX_CLAIM_EXPIRY_MS,
            unit: GucFlags::UNIT_MS,
            takes: "a time from 15 s to 1 day, such as '15s', '60s' or '1d' (ms without a unit)",
        },
    },
    Setting {
        name: c"snowflake.database",
        short: c"Database in which snowflake keeps its persisted high-water mark.",
        long: c"The lease worker connects to it and keeps the sequence _snowflake.lease_ms there; it must exist.",
        context: Context::Restart,
        kind: Kind::Text {
            value: &DATABASE,
            check: TextCheck::Database,
        },
    },
    Setting {
        name: c"snowflake.pair_source",
        short: c"Where this server's datacenter and worker ID come from: config, citus or citus_in_datacenter.",
        long: c"config: snowflake.datacenter_id and snowflake.worker_id. citus: the node's Citus group (0..1023) is the whole pair. citus_in_datacenter: snowflake.datacenter_id, and the group (0..31) as the worker ID.",
        context: Context::Restart,
        kind: Kind::Text {
            value: &PAIR_SOURCE,
            check: TextCheck::PairSource,
        },
    },
    Setting {
        name: c"snowflake.citus_database",
        short: c"Database of this node's Citus cluster, for pairs from Citus groups and the fleet check through Citus.",
        long: c"When set, a worker connects to it, reads the node's group and asks every node of the cluster for its claim over Citus's connections. Empty: no Citus worker.",
        context: Context::Restart,
        kind: Kind::Text {
            value: &CITUS_DATABASE,
            check: TextCheck::Any,
        },
    },
    Setting {
        name: c"snowflake.track_horizon",
        short: c"Tracks the smallest snowflake ID of every open transaction, for snowflake_horizon().",
        long: c"Costs one compare in snowflake_nextval() and one at the end of a transaction that took an ID; off makes snowflake_horizon() raise an error.",
        context: Context::Restart,
        kind: Kind::Bool {
            value: &TRACK_HORIZON,
        },
    },
];

impl Setting {
    fn name(&self) -> &'static str {
        self.name.to_str().expect("setting names are ASCII")
    }

    /// Defines the setting: PostgreSQL then applies the value of its placeholder, which `check`
    /// has accepted.
    fn define(&'static self) {
        let (name, short, long, context) = (self.name, self.short, self.long, self.context.guc());
        match self.kind {
            Kind::Int {
                value,
                min,
                max,
                unit,
                ..
            } => GucRegistry::define_int_guc(name, short, long, value, min, max, context, unit),
            // PostgreSQL's own refusal of a real setting out of its bounds prints them with %g
            // (`(100 .. 2.19902e+12)`): its bounds are the widest, and the hook refuses a value
            // outside the setting's own with integer bounds, its DETAIL and a HINT.
            // SAFETY: the hook cannot panic: it compares numbers and formats text.
            Kind::Real { value, unit, .. } => unsafe {
                GucRegistry::define_float_guc_with_hooks(
                    name,
                    short,
                    long,
                    value,
                    -f64::MAX,
                    f64::MAX,
                    context,
                    unit,
                    Some(check_max_clock_drift_hook),
                    None,
                    None,
                )
            },
            Kind::Bool { value } => {
                GucRegistry::define_bool_guc(name, short, long, value, context, GucFlags::empty())
            }
            Kind::Text {
                value,
                check: TextCheck::Any,
            } => {
                GucRegistry::define_string_guc(name, short, long, value, context, GucFlags::empty())
            }
            // SAFETY: the hooks catch nothing because they cannot panic: they parse or compare
            // text and numbers, and report through PostgreSQL's GUC_check_* strings.
            Kind::Text { value, check } => unsafe {
                let hook: unsafe extern "C-unwind" fn(_, _, _) -> _ = match check {
                    TextCheck::Epoch => check_epoch_hook,
                    TextCheck::PairSource => check_pair_source_hook,
                    TextCheck::Database => check_database_hook,
                    TextCheck::Any => unreachable!("matched above"),
                };
                GucRegistry::define_string_guc_with_hooks(
                    name,
                    short,
                    long,
                    value,
                    context,
                    GucFlags::empty(),
                    Some(hook),
                    None,
                    None,
                )
            },
        }
    }

    /// Checks the value of the setting's placeholder, if anything set one, with PostgreSQL's own
    /// parsers and unit flags, so that a value means what PostgreSQL means by it; a bad one stops
    /// the server with the message PostgreSQL would only have logged as a WARNING.
    fn check(&self) {
        let Some(raw) = raw_setting(self.name) else {
            return;
        };
        let text = raw.to_string_lossy();
        match self.kind {
            Kind::Int {
                min,
                max,
                unit,
                takes,
                ..
            } => {
                let (mut v, mut hint) = (0, std::ptr::null());
                // SAFETY: a NUL-terminated string and out-parameters of the right types;
                // parse_int only reads the flags' unit bits and sets hint to a static string.
                if !unsafe { pg_sys::parse_int(raw.as_ptr(), &mut v, unit.bits(), &mut hint) } {
                    self.invalid(&text, takes, hint);
                }
                if !(min..=max).contains(&v) {
                    self.out_of_range(v, (min, max, unit), takes);
                }
            }
            Kind::Real {
                min,
                max,
                unit,
                takes,
                ..
            } => {
                let (mut v, mut hint) = (0.0, std::ptr::null());
                // SAFETY: as for parse_int; parse_real rejects NaN and an overflow.
                if !unsafe { pg_sys::parse_real(raw.as_ptr(), &mut v, unit.bits(), &mut hint) } {
                    self.invalid(&text, takes, hint);
                }
                if !(min..=max).contains(&v) {
                    self.out_of_range(v, (min, max, unit), takes);
                }
            }
            Kind::Bool { .. } => {
                let mut v = false;
                // SAFETY: a NUL-terminated string and a bool out-parameter.
                if !unsafe { pg_sys::parse_bool(raw.as_ptr(), &mut v) } {
                    fatal(
                        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                        format!("parameter \"{}\" requires a Boolean value", self.name()),
                        Some(format!("It is set to \"{text}\".")),
                        Some(&fix_hint(self.name(), "Use on or off")),
                    );
                }
            }
            Kind::Text { check, .. } => match check {
                TextCheck::Any => {}
                TextCheck::Epoch => {
                    epoch_of(&text, PgLogLevel::FATAL, set_at(self.name()));
                }
                TextCheck::Database => {
                    if text.is_empty() {
                        fatal(
                            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                            format!("invalid value for parameter \"{}\": \"\"", self.name()),
                            Some(DATABASE_DETAIL.into()),
                            Some(&fix_hint(self.name(), "Set it to the database where the lease worker keeps the mark (the default is postgres)")),
                        );
                    }
                }
                TextCheck::PairSource => {
                    if PairSource::parse(&text).is_none() {
                        fatal(
                            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                            format!(
                                "invalid value for parameter \"{}\": \"{text}\"",
                                self.name()
                            ),
                            Some(format!(
                                "\"{}\" takes {}.",
                                self.name(),
                                PairSource::NAMES.join(", ")
                            )),
                            Some(&fix_hint(self.name(), "Fix it")),
                        );
                    }
                }
            },
        }
    }

    /// PostgreSQL's message for a value its parser refuses, with the parser's HINT if it gave
    /// one (the valid units, or "Value exceeds integer range.").
    fn invalid(&self, text: &str, takes: &str, hint: *const std::ffi::c_char) -> ! {
        // SAFETY: parse_int and parse_real leave hint null or point it at a static string.
        let hint = (!hint.is_null()).then(|| unsafe { CStr::from_ptr(hint) }.to_string_lossy());
        fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "invalid value for parameter \"{}\": \"{text}\"",
                self.name()
            ),
            Some(format!(
                "\"{}\" takes {takes}.{}",
                self.name(),
                set_at(self.name()).map_or(String::new(), |at| format!(" It is set {at}."))
            )),
            hint.as_deref(),
        )
    }

    /// PostgreSQL's message for a value outside the bounds, with the unit as PostgreSQL names it.
    fn out_of_range<T: Display>(&self, v: T, (min, max, unit): (T, T, GucFlags), takes: &str) -> ! {
        let u = match unit.bits() as u32 & pg_sys::GUC_UNIT {
            0 => "",
            pg_sys::GUC_UNIT_MS => " ms",
            pg_sys::GUC_UNIT_S => " s",
            pg_sys::GUC_UNIT_MIN => " min",
            _ => unreachable!("snowflake's settings are in ms, s or min, or have no unit"),
        };
        let name = self.name();
        fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            out_of_range_message(name, v, min, max, u),
            Some(format!("\"{name}\" takes {takes}.")),
            Some(&fix_hint(name, "Fix it")),
        )
    }
}

/// PostgreSQL's words for a value outside a setting's bounds, with the numbers as Rust prints
/// them: a whole number of milliseconds as an integer (`2199023255551`, where PostgreSQL's `%g`
/// gives `2.19902e+12`).
fn out_of_range_message<T: Display>(name: &str, v: T, min: T, max: T, u: &str) -> String {
    format!("{v}{u} is outside the valid range for parameter \"{name}\" ({min}{u} .. {max}{u})")
}

/// The raw text of a setting as PostgreSQL holds it (a placeholder before we define it).
fn raw_setting(name: &CStr) -> Option<CString> {
    // SAFETY: a NUL-terminated name; the result, if any, is copied before anything else runs.
    let p = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
    if p.is_null() {
        None
    } else {
        Some(unsafe { CStr::from_ptr(p) }.to_owned())
    }
}

fn fatal(code: PgSqlErrorCode, message: String, detail: Option<String>, hint: Option<&str>) -> ! {
    errors::report(PgLogLevel::FATAL, code, message, detail, hint);
    unreachable!("FATAL does not return")
}

/// The settings under our prefix that we do not define, each with the one it most likely meant.
/// Any other `snowflake.*` in the configuration is a typo, and a typo such as
/// `snowflake.workerid = 7` would leave the server running as worker 0, the very way two servers
/// come to share a pair: it stops the server at start-up.
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
        .filter(|n| !SETTINGS.iter().any(|k| k.name().eq_ignore_ascii_case(n)))
        .map(|n| {
            let meant = SETTINGS
                .iter()
                .map(Setting::name)
                .find(|k| squash(k) == squash(n));
            (n.clone(), meant)
        })
        .collect()
}

/// Every setting PostgreSQL holds now, placeholders included, with the source of its value
/// (`PGC_S_DEFAULT` for one that nothing set).
fn all_settings() -> Vec<(String, pg_sys::GucSource::Type)> {
    // SAFETY: PostgreSQL's own settings, valid during the call (see `guc_variables`).
    unsafe {
        guc_variables()
            .into_iter()
            .map(|v| {
                let name = CStr::from_ptr((*v).name).to_string_lossy().into_owned();
                (name, (*v).source)
            })
            .collect()
    }
}

/// Every setting PostgreSQL holds now, placeholders included, each with a name.
///
/// # Safety
/// Called in the postmaster while shared_preload_libraries is processed: the array and what it
/// points to are PostgreSQL's own and stay valid during the caller's use.
unsafe fn guc_variables() -> Vec<*mut pg_sys::config_generic> {
    unsafe {
        // 16 moved the settings into a hash table and gave this function a count out-parameter.
        #[cfg(feature = "pg15")]
        let (vars, n) = (pg_sys::get_guc_variables(), pg_sys::GetNumConfigOptions());
        #[cfg(not(feature = "pg15"))]
        let (vars, n) = {
            let mut n = 0;
            (pg_sys::get_guc_variables(&mut n), n)
        };
        (0..n.max(0) as usize)
            .map(|i| *vars.add(i))
            .filter(|v| !v.is_null() && !(**v).name.is_null())
            .collect()
    }
}

/// Where the value of setting `name` was set, as PostgreSQL recorded it, in words that follow
/// "set" or "fix it": `at line 3 of "/etc/.../conf.d/snowflake.conf"` (a configuration file,
/// postgresql.auto.conf for ALTER SYSTEM), `on the server's command line`, or `None` when
/// PostgreSQL does not know.
fn set_at(name: &str) -> Option<String> {
    // SAFETY: as in `all_settings`; the strings are copied before anything else runs.
    unsafe {
        let v = guc_variables().into_iter().find(|v| {
            CStr::from_ptr((**v).name)
                .to_string_lossy()
                .eq_ignore_ascii_case(name)
        })?;
        if !(*v).sourcefile.is_null() {
            let file = CStr::from_ptr((*v).sourcefile).to_string_lossy();
            return Some(format!("at line {} of \"{file}\"", (*v).sourceline));
        }
        ((*v).source == pg_sys::GucSource::PGC_S_ARGV)
            .then(|| "on the server's command line".to_string())
    }
}

/// A start-up refusal's HINT: `fix` (such as "Fix it") where the setting was set, and start again.
fn fix_hint(name: &str, fix: &str) -> String {
    let at = set_at(name).unwrap_or_else(|| "in postgresql.conf (or postgresql.auto.conf)".into());
    format!("{fix} {at} and start the server again.")
}

/// The names of every setting PostgreSQL holds now, placeholders included.
fn all_setting_names() -> Vec<String> {
    all_settings().into_iter().map(|(name, _)| name).collect()
}

/// Whether any source set `snowflake.datacenter_id` or `snowflake.worker_id`, among `settings`
/// (name and source). A setting that is absent, or present with `PGC_S_DEFAULT`, was not set: a
/// server that writes 0 chose 0.
fn pair_set_in(settings: &[(String, pg_sys::GucSource::Type)]) -> bool {
    is_set(settings, "snowflake.datacenter_id") || is_set(settings, "snowflake.worker_id")
}

/// Whether any source set the setting `name` (even to its default value).
fn is_set(settings: &[(String, pg_sys::GucSource::Type)], name: &str) -> bool {
    settings.iter().any(|(n, source)| {
        n.eq_ignore_ascii_case(name) && *source != pg_sys::GucSource::PGC_S_DEFAULT
    })
}

/// A pair from the Citus group needs the Citus database, and a pair setting that the group
/// replaces is a contradiction: both stop the server at start-up rather than leave one of the
/// two silently unused.
fn check_pair_source(source: PairSource, settings: &[(String, pg_sys::GucSource::Type)]) {
    if !source.from_citus() {
        return;
    }
    let name = source.name();
    if citus_database().is_none() {
        fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("snowflake.pair_source = '{name}' needs snowflake.citus_database"),
            Some("The pair comes from the node's Citus group, which the Citus worker reads in the database where the citus extension is.".into()),
            Some(&format!(
                "Set snowflake.citus_database to that database {}, and start the server again.",
                set_at("snowflake.pair_source").map_or_else(
                    || "in postgresql.conf".to_string(),
                    |at| format!("beside snowflake.pair_source (set {at})")
                )
            )),
        );
    }
    let replaced: &[&str] = match source {
        PairSource::Citus => &["snowflake.datacenter_id", "snowflake.worker_id"],
        _ => &["snowflake.worker_id"],
    };
    if let Some(set) = replaced.iter().find(|n| is_set(settings, n)) {
        fatal(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{set} is set, but snowflake.pair_source = '{name}' takes it from the node's Citus group"),
            Some(match source {
                PairSource::Citus => "With 'citus' the group is the whole pair (datacenter_id = group / 32, worker_id = group % 32).".to_string(),
                _ => "With 'citus_in_datacenter' the group is the worker_id, and snowflake.datacenter_id names the cluster.".to_string(),
            }),
            Some(&format!(
                "Remove {set} {} (with ALTER SYSTEM RESET if it is in postgresql.auto.conf), or set snowflake.pair_source = 'config', and start the server again.",
                set_at(set).unwrap_or_else(|| "from postgresql.conf (or postgresql.auto.conf)".into())
            )),
        );
    }
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
        let ours: Vec<&str> = SETTINGS.iter().map(Setting::name).collect();
        fatal(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("unrecognized configuration parameter \"{name}\""),
            Some(format!("snowflake defines only {}.", ours.join(", "))),
            Some(&match meant {
                Some(k) => format!("Did you mean \"{k}\"? {}", fix_hint(&name, "Fix it")),
                None => fix_hint(&name, "Remove or correct it"),
            }),
        )
    }
}

/// The epoch of a setting's text in Unix ms, checked: from 1970 on, and its 41 bits not yet used
/// up; otherwise reported at `level` (FATAL at start-up, ERROR in a backend that loads the
/// library without preload). An epoch later than the clock is allowed (a machine without a
/// hardware clock may boot at 1970 before NTP sets it): `snowflake_nextval()` refuses until the
/// clock passes it, and a preloaded library says so in the log at start-up.
fn epoch_of(text: &str, level: PgLogLevel, at: Option<String>) -> i64 {
    let now = SystemClock.now_unix_ms();
    let problem = match parse_epoch(text).and_then(|ms| epoch_problem(ms, now).map(|_| ms)) {
        Ok(ms) => return ms,
        Err(why) => match at {
            Some(at) => format!("{why} It is set {at}."),
            None => why,
        },
    };
    errors::report(
        level,
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!(
            "invalid value for parameter \"snowflake.epoch\": \"{}\"",
            text.trim()
        ),
        Some(problem),
        Some(EPOCH_HINT),
    );
    unreachable!("FATAL and ERROR do not return")
}

/// Why an epoch cannot be used at clock `now` (both Unix ms): before 1970, so long ago that its
/// 41 bits of milliseconds are already used up, or so late that they run past PostgreSQL's last
/// timestamp (where every sum of the epoch and an ID's time would overflow or wrap).
pub fn epoch_problem(epoch_ms: i64, now_unix_ms: i64) -> Result<(), String> {
    if epoch_ms < 0 {
        return Err(format!(
            "The epoch is {epoch_ms} ms after 1970-01-01 UTC; it must not be before 1970."
        ));
    }
    if epoch_ms > LATEST_EPOCH_UNIX_MS {
        return Err(format!(
            "The epoch is {epoch_ms} ms after 1970-01-01 UTC; its 41 bits of milliseconds would run past PostgreSQL's last timestamp (294276 AD), so it must be at most {LATEST_EPOCH_UNIX_MS}."
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

/// The check hook of `snowflake.epoch`: PostgreSQL calls it for every new value, so `ALTER
/// SYSTEM SET snowflake.epoch` refuses a value that would stop the next start (with the same
/// DETAIL as that start would give), and a reload that finds one in the file logs it and keeps
/// the file's other changes, as for any invalid value. At start-up the value was checked already
/// (`Setting::check`, which stops the server: a hook's refusal would only be a WARNING there).
#[pg_guard]
unsafe extern "C-unwind" fn check_epoch_hook(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the candidate value (NULL for no value).
    let Some(text) = (unsafe { candidate(newval) }) else {
        return true;
    };
    let now = SystemClock.now_unix_ms();
    match parse_epoch(&text).and_then(|ms| epoch_problem(ms, now)) {
        Ok(()) => true,
        Err(why) => refuse_in_check_hook(&why, Some(EPOCH_HINT)),
    }
}

/// The value a check hook is given, if any.
///
/// # Safety
/// `newval` must be the pointer PostgreSQL passes to a string setting's check hook.
unsafe fn candidate(newval: *mut *mut std::ffi::c_char) -> Option<String> {
    let value = unsafe { *newval };
    (!value.is_null()).then(|| {
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned()
    })
}

/// A check hook's refusal: 22023 with this DETAIL and HINT, as the GUC_check_errdetail and
/// GUC_check_errhint macros give them (strings palloc'd in the current context, which PostgreSQL
/// reads right after the hook). Returns false, the hook's answer.
fn refuse_in_check_hook(detail: &str, hint: Option<&str>) -> bool {
    let detail = CString::new(detail.replace('\0', "")).unwrap_or_default();
    // SAFETY: called from a check hook, in the memory context PostgreSQL set for it.
    unsafe {
        pg_sys::GUC_check_errcode(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as i32);
        pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
        if let Some(hint) = hint {
            let hint = CString::new(hint.replace('\0', "")).unwrap_or_default();
            pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
        }
    }
    false
}

/// `snowflake.pair_source` is checked when it is set (ALTER SYSTEM, a reload), as PostgreSQL's
/// own enum settings are: a value the next start would refuse is refused now.
#[pg_guard]
unsafe extern "C-unwind" fn check_pair_source_hook(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the candidate value (NULL for no value).
    let Some(text) = (unsafe { candidate(newval) }) else {
        return true;
    };
    if PairSource::parse(&text).is_some() {
        return true;
    }
    let detail = format!(
        "\"snowflake.pair_source\" takes {}.",
        PairSource::NAMES.join(", ")
    );
    refuse_in_check_hook(&detail, None)
}

/// `snowflake.max_clock_drift` is checked against its bounds when it is set (ALTER SYSTEM, a
/// reload, a backend's start), with the start-up refusal's message and DETAIL: PostgreSQL's own
/// check, whose bounds are set wide, would print them with `%g`. At start-up the value was checked
/// already (`Setting::check`, which stops the server).
#[pg_guard]
unsafe extern "C-unwind" fn check_max_clock_drift_hook(
    newval: *mut f64,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the candidate value.
    let v = unsafe { *newval };
    if (MIN_MAX_CLOCK_DRIFT_MS..=MAX_MAX_CLOCK_DRIFT_MS).contains(&v) {
        return true;
    }
    let name = "snowflake.max_clock_drift";
    let message = out_of_range_message(
        name,
        v,
        MIN_MAX_CLOCK_DRIFT_MS,
        MAX_MAX_CLOCK_DRIFT_MS,
        " ms",
    );
    let takes = SETTINGS
        .iter()
        .find_map(|s| match s.kind {
            Kind::Real { takes, .. } if s.name() == name => Some(takes),
            _ => None,
        })
        .unwrap_or("a time");
    let message = CString::new(message).unwrap_or_default();
    // SAFETY: called from a check hook, in the memory context PostgreSQL set for it.
    unsafe { pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(message.as_ptr()) };
    refuse_in_check_hook(
        &format!("\"{name}\" takes {takes}."),
        Some("Give a value in that range, such as '10s'."),
    )
}

/// `snowflake.database` is checked when it is set (ALTER SYSTEM, a reload): an empty name, which
/// the next start would refuse, is refused now.
#[pg_guard]
unsafe extern "C-unwind" fn check_database_hook(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the candidate value (NULL for no value).
    match unsafe { candidate(newval) } {
        Some(text) if text.is_empty() => refuse_in_check_hook(DATABASE_DETAIL, None),
        _ => true,
    }
}

const DATABASE_DETAIL: &str =
    "\"snowflake.database\" takes the name of the database where the lease worker keeps the high-water mark; it must not be empty.";

const EPOCH_HINT: &str =
    "Use a past UTC timestamp such as '2015-01-01 00:00:00+00', or milliseconds since 1970.";

/// Settings of a library loaded by one backend only (CREATE EXTENSION without preload): the pure
/// functions still work with the configured epoch; the generator refuses with a clear error.
pub fn init_unpreloaded() {
    let epoch = raw_setting(c"snowflake.epoch").map_or(TWITTER_EPOCH_MS, |text| {
        epoch_of(&text.to_string_lossy(), PgLogLevel::ERROR, None)
    });
    EPOCH_MS.store(epoch, Ordering::Relaxed);
}

/// Checks and defines every setting, in the postmaster while shared_preload_libraries is being
/// processed. A bad value stops the server here, before anything else is set up.
pub fn init_preloaded() {
    SETTINGS.iter().for_each(Setting::check);
    check_unknown_settings();
    SETTINGS.iter().for_each(Setting::define);
    // Any other snowflake.* name is a typo: this says so and removes the placeholder.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"snowflake".as_ptr()) };

    // Read from the defined settings, which keep the source of the placeholders they replace.
    let settings = all_settings();
    let source = PAIR_SOURCE
        .get()
        .and_then(|s| PairSource::parse(&s.to_string_lossy()))
        .unwrap_or(PairSource::Config);
    check_pair_source(source, &settings);
    let pair_set = pair_set_in(&settings);
    if !pair_set && !source.from_citus() {
        warn_default_pair();
    }
    if source == PairSource::CitusInDatacenter && !is_set(&settings, "snowflake.datacenter_id") {
        errors::report(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_WARNING,
            "snowflake.datacenter_id is not set, and snowflake.pair_source = 'citus_in_datacenter' takes it to name the cluster".into(),
            Some("The datacenter ID is the default, 0. Two clusters whose data meet and that both leave it so issue the same IDs.".into()),
            Some("Set snowflake.datacenter_id to a number that no other cluster uses, and restart; a single cluster can use snowflake.pair_source = 'citus' instead."),
        );
    }
    let epoch_text = EPOCH
        .get()
        .unwrap_or_else(|| DEFAULT_EPOCH.to_owned())
        .to_string_lossy()
        .into_owned();
    let epoch = epoch_of(&epoch_text, PgLogLevel::FATAL, None);
    let now = SystemClock.now_unix_ms();
    if epoch > now {
        errors::report(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("snowflake.epoch \"{}\" is later than the system clock", epoch_text.trim()),
            Some(format!("The clock reads {now} ms after 1970, the epoch is {epoch}: snowflake_nextval() refuses until the clock passes the epoch.")),
            Some("If the clock is right, set snowflake.epoch to a past instant and restart."),
        );
    }

    EPOCH_MS.store(epoch, Ordering::Relaxed);
    PAIR_SET.store(pair_set, Ordering::Relaxed);
    let node = Node::new(DATACENTER_ID.get().into(), WORKER_ID.get().into())
        .expect("PostgreSQL keeps the pair within the bounds defined above");
    NODE_BITS.store(node.bits(), Ordering::Relaxed);
    SOURCE.store(source as u8, Ordering::Relaxed);
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
    fn every_setting_is_ours_once_and_its_default_within_its_bounds() {
        let names: Vec<&str> = SETTINGS.iter().map(Setting::name).collect();
        for (i, n) in names.iter().enumerate() {
            assert!(
                n.starts_with("snowflake.") && *n == n.to_ascii_lowercase(),
                "{n}"
            );
            assert!(!names[..i].contains(n), "{n} twice");
        }
        for s in SETTINGS {
            // SAFETY: plain reads of the statics' boot values; no server is involved.
            let within = match s.kind {
                Kind::Int {
                    value, min, max, ..
                } => (min..=max).contains(&unsafe { value.as_ptr().read() }),
                Kind::Real {
                    value, min, max, ..
                } => (min..=max).contains(&unsafe { value.as_ptr().read() }),
                Kind::Bool { .. } | Kind::Text { .. } => true,
            };
            assert!(within, "{}'s default", s.name());
        }
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
        // The latest epoch PostgreSQL's timestamps hold whole, and one past it.
        assert!(epoch_problem(LATEST_EPOCH_UNIX_MS, now).is_ok());
        assert!(epoch_problem(LATEST_EPOCH_UNIX_MS + 1, now)
            .unwrap_err()
            .contains("294276"));
        assert!(epoch_problem(i64::MAX, now).is_err());
    }
}
