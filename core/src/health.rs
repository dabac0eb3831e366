//! The health check: from what the server knows of itself (its settings, the generator's state,
//! what the lease worker last did), whether ID generation is healthy, as `ok`, `warning` or
//! `critical`, each with a reason and what to do. `snowflake_health()` in the glue gathers the
//! [`Facts`] (from shared memory and the settings, no table and no wait) and returns [`checks`].
//!
//! `critical`: IDs are not issued now, or will not be at the next call (a DBA acts now).
//! `warning`: IDs are issued, but something will stop them or already went wrong once.

use crate::fleet::{MIN_EXPIRY_MS, REFRESH_MS};
use crate::generator::State;
use crate::layout::MAX_TIMESTAMP;
use crate::time::unix_ms_text;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Warning,
    Critical,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Critical => "critical",
        }
    }

    /// 0, 1 or 2: what a monitoring system compares (the exporter's gauge).
    pub fn severity(self) -> i32 {
        self as i32
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub reason: String,
    /// What to do; empty when the check is `ok`.
    pub action: String,
}

/// Where the pair comes from (the glue's `PairState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pair {
    /// `snowflake.datacenter_id` and `snowflake.worker_id`; `set`: given in the configuration,
    /// not left at the defaults.
    Configured {
        set: bool,
    },
    Group(i64),
    Unknown,
    Changed {
        recorded: i64,
        now: i64,
    },
    Beyond {
        group: i64,
        max: i64,
    },
    Untrusted,
}

/// Whether the lease worker trusts `snowflake.database` (the glue's `DatabaseTrust`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    Unknown,
    Superuser,
    Tolerated,
    Refused,
}

/// Another server's claim on this server's pair, while it refuses because of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub system_identifier: i64,
    /// A physical copy of this server (its own system identifier).
    pub copy: bool,
    /// Only because a claims path is not applying (the claim would have expired otherwise).
    pub claims_stale: bool,
}

/// What the server knows of itself, read at once.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The clock, ms since the epoch; the epoch as Unix ms.
    pub now_ms: i64,
    /// A monotonic clock (ms), the one the state's failures were stamped with: ages ("in the
    /// last hour") are measured on it, so that no step of the wall clock ends a warning early.
    pub mono_ms: u64,
    pub epoch_unix_ms: i64,
    pub max_drift_ms: u64,
    /// In recovery: no ID is issued here, and no lease worker runs until a promotion.
    pub standby: bool,
    pub pair: Pair,
    pub pair_source: String,
    pub datacenter: u32,
    pub worker: u32,
    /// `snowflake.database`, and what the lease worker found there.
    pub database: String,
    pub database_missing: bool,
    pub trust: Trust,
    pub database_owner: Option<String>,
    /// An object in `_snowflake` that no superuser owns: (what, owner).
    pub foreign: Option<(String, String)>,
    pub worker_running: bool,
    /// How long ago (monotonic ms) the lease worker last refreshed this server's claim, granted
    /// a lease, and saw the clock jump forward; `None`: not since the server started.
    pub refresh_age_ms: Option<u64>,
    pub grant_age_ms: Option<u64>,
    pub forward_jump_age_ms: Option<u64>,
    /// The start's gate: no ID until the claims paths have caught up.
    pub awaiting_claims: bool,
    pub conflict: Option<Conflict>,
    /// A claims path is not applying (or relays): claims may be stale here.
    pub paths_stale: bool,
    /// The epoch the persisted mark was written under (Unix ms), once read.
    pub recorded_epoch_ms: Option<i64>,
    pub state: State,
}

/// How long after a clock step or a refusal its check stays a `warning`.
pub const RECENT_MS: u64 = 3_600_000;
/// How long IDs may wait for a lease before the lease check is `critical`: a renewal is one
/// transaction with one WAL flush (and a synchronous standby's confirmation).
pub const LEASE_WAIT_MS: u64 = 2_000;
/// Years of 41-bit time left below which `time_left` warns, and is critical.
pub const YEARS_WARNING: f64 = 5.0;
pub const YEARS_CRITICAL: f64 = 1.0;
const MS_PER_YEAR: f64 = 365.2425 * 86_400_000.0;

fn check(name: &'static str, status: Status, reason: String, action: &str) -> Check {
    Check {
        name,
        status,
        reason,
        action: action.into(),
    }
}

fn ok(name: &'static str, reason: String) -> Check {
    check(name, Status::Ok, reason, "")
}

fn ago(ms: u64) -> String {
    if ms < 120_000 {
        format!("{} s ago", ms / 1000)
    } else if ms < 7_200_000 {
        format!("{} min ago", ms / 60_000)
    } else {
        format!("{} h ago", ms / 3_600_000)
    }
}

/// The checks, the overall answer first (`overall`: the worst status, the checks that are not
/// `ok`, and the action of the first of the worst).
pub fn checks(f: &Facts) -> Vec<Check> {
    let list = vec![
        pair(f),
        lease_database(f),
        lease_worker(f),
        lease(f),
        fleet(f),
        clock(f),
        clock_steps(f),
        refusals(f),
        time_left(f),
    ];
    with_overall(list)
}

/// The library is not in `shared_preload_libraries`: nothing else can be known.
pub fn not_preloaded() -> Vec<Check> {
    with_overall(vec![check(
        "preload",
        Status::Critical,
        "the snowflake library is not in shared_preload_libraries: snowflake_nextval() fails with 55000".into(),
        "Add snowflake to shared_preload_libraries in postgresql.conf and restart the server.",
    )])
}

fn with_overall(list: Vec<Check>) -> Vec<Check> {
    let worst = list.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    let overall = if worst == Status::Ok {
        ok("overall", "every check is ok".into())
    } else {
        let named = |s: Status| {
            list.iter()
                .filter(|c| c.status == s)
                .map(|c| c.name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = vec![];
        for s in [Status::Critical, Status::Warning] {
            let n = named(s);
            if !n.is_empty() {
                parts.push(format!("{}: {n}", s.name()));
            }
        }
        let first = list
            .iter()
            .find(|c| c.status == worst)
            .expect("a worst check");
        Check {
            name: "overall",
            status: worst,
            reason: parts.join("; "),
            action: first.action.clone(),
        }
    };
    std::iter::once(overall).chain(list).collect()
}

fn pair(f: &Facts) -> Check {
    let (dc, w) = (f.datacenter, f.worker);
    let crit = |reason: String, action: &str| check("pair", Status::Critical, reason, action);
    match f.pair {
        Pair::Configured { set: true } => ok("pair", format!("datacenter_id {dc}, worker_id {w}")),
        Pair::Group(g) => ok(
            "pair",
            format!("datacenter_id {dc}, worker_id {w} ({} group {g})", f.pair_source),
        ),
        Pair::Configured { set: false } => check(
            "pair",
            Status::Warning,
            format!("snowflake.datacenter_id and snowflake.worker_id are not set: the default pair {dc}/{w} is used, and two servers that leave it unset issue the same IDs"),
            "Give each server its own snowflake.worker_id (and datacenter_id) in postgresql.conf and restart it.",
        ),
        Pair::Unknown => crit(
            format!("{} gives the pair, and this node's group is not known yet: no ID is issued", f.pair_source),
            "Check that Citus is installed in snowflake.database and this node is in the cluster (citus_get_node_group_id()); the server log names the cause.",
        ),
        Pair::Changed { recorded, now } => crit(
            format!("the Citus group changed from {recorded} to {now}: no ID is issued"),
            "See \"Citus\" in docs/multi-writer.md: a node whose group changed needs a new pair.",
        ),
        Pair::Beyond { group, max } => crit(
            format!("Citus group {group} is beyond what {} holds (at most {max}): no ID is issued", f.pair_source),
            "Choose a snowflake.pair_source that holds every group of the cluster, and restart.",
        ),
        Pair::Untrusted => crit(
            "the Citus metadata has an object no superuser owns, and no group is recorded: no ID is issued".into(),
            "The server log names the object: give it to a superuser or drop it.",
        ),
    }
}

fn lease_database(f: &Facts) -> Check {
    let db = &f.database;
    let crit = |reason: String, action: String| Check {
        name: "lease_database",
        status: Status::Critical,
        reason,
        action,
    };
    if f.database_missing {
        return crit(
            format!("snowflake.database names database \"{db}\", which does not exist: no ID is issued"),
            format!("Create the database (CREATE DATABASE {db}), or set snowflake.database to an existing database and restart."),
        );
    }
    if let Some((what, owner)) = &f.foreign {
        return crit(
            format!("{what} in database \"{db}\" is owned by {owner}, not a superuser: no ID is issued"),
            "Give it to a superuser (ALTER ... OWNER TO postgres) or drop it; see docs/security.md.".into(),
        );
    }
    let owner = f.database_owner.as_deref().unwrap_or("?");
    match f.trust {
        Trust::Superuser => ok("lease_database", format!("database \"{db}\", owned by superuser {owner}")),
        Trust::Refused => crit(
            format!("database \"{db}\" is owned by {owner}, not a superuser, so the lease worker does not trust it: no ID is issued"),
            format!("ALTER DATABASE {db} OWNER TO postgres, or set snowflake.database to a database a superuser owns and restart."),
        ),
        Trust::Tolerated => check(
            "lease_database",
            Status::Warning,
            format!("database \"{db}\" is owned by {owner}, not a superuser: its owner can stop ID generation (tolerated because the lease was already there)"),
            &format!("ALTER DATABASE {db} OWNER TO postgres, or move the lease to a database a superuser owns (docs/security.md)."),
        ),
        Trust::Unknown if f.standby => ok("lease_database", format!("database \"{db}\": read at promotion (standby)")),
        Trust::Unknown => check(
            "lease_database",
            Status::Warning,
            format!("the lease worker has not read database \"{db}\" yet"),
            "If this lasts, see the lease_worker check and the server log.",
        ),
    }
}

fn lease_worker(f: &Facts) -> Check {
    if f.standby {
        return ok(
            "lease_worker",
            "standby: the lease worker starts at promotion".into(),
        );
    }
    if !f.worker_running {
        return check(
            "lease_worker",
            Status::Critical,
            "no \"snowflake lease\" background worker runs: IDs wait for a lease that does not come".into(),
            "Check the server log for the worker's last error; raise max_worker_processes if the postmaster logged \"too many background workers\", and restart.",
        );
    }
    match f.refresh_age_ms {
        Some(age) if age > MIN_EXPIRY_MS => check(
            "lease_worker",
            Status::Critical,
            format!("the lease worker last refreshed this server's claim {}, not every {} s: it is blocked", ago(age), REFRESH_MS / 1000),
            "Look at the worker in pg_stat_activity (backend_type 'snowflake lease'): a lock on _snowflake, or a synchronous standby that does not confirm.",
        ),
        Some(age) => ok("lease_worker", format!("running; claim refreshed {}", ago(age))),
        None if f.database_missing || f.trust == Trust::Refused => {
            ok("lease_worker", "running, and waiting for its database".into())
        }
        None => ok("lease_worker", "running; starting".into()),
    }
}

fn lease(f: &Facts) -> Check {
    let s = &f.state;
    // Set by a call that found the lease too short, cleared by the next grant: a grant is one
    // transaction, so a call seen waiting long after the last grant waits for a blocked worker.
    // (The first call after an idle hour is seen so for the milliseconds of one renewal.)
    let waiting = s.lease_wanted();
    match f.grant_age_ms {
        _ if f.standby || s.refused() => ok("lease", "no ID is issued here now (see the other checks)".into()),
        Some(age) if waiting && age > LEASE_WAIT_MS => check(
            "lease",
            Status::Critical,
            format!("IDs wait for a lease, and the lease worker last persisted one {}", ago(age)),
            "Look at the lease worker in pg_stat_activity and the server log: a lock on _snowflake.lease_ms, WAL that cannot be flushed, or a synchronous standby that does not confirm.",
        ),
        Some(age) => {
            let lease = s.lease().unwrap_or(0);
            let headroom = lease as i64 - s.last_ms().max(f.now_ms.max(0) as u64) as i64;
            ok(
                "lease",
                if headroom > 0 {
                    format!("lease persisted {}, {headroom} ms ahead of the clock", ago(age))
                } else {
                    format!("lease persisted {}; renewed when IDs are issued", ago(age))
                },
            )
        }
        None => ok("lease", "no lease persisted since the start: the first ID writes one".into()),
    }
}

fn fleet(f: &Facts) -> Check {
    let (dc, w) = (f.datacenter, f.worker);
    let crit = |reason: String, action: &str| check("fleet", Status::Critical, reason, action);
    if let Some(c) = f.conflict {
        let other = c.system_identifier;
        if c.copy {
            return crit(
                format!("a physical copy of this server (system identifier {other}) uses datacenter_id {dc} and worker_id {w}: no ID is issued"),
                "Stop the copy; a copy that must write needs a new cluster (initdb) and its own pair.",
            );
        }
        return crit(
            format!(
                "the server with system identifier {other} also claims datacenter_id {dc} and worker_id {w}: no ID is issued{}",
                if c.claims_stale { " (its claim does not expire while a claims subscription is not applying)" } else { "" }
            ),
            &format!("Give one of the two servers another snowflake.worker_id and restart it; if the other is gone for good, UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {other}."),
        );
    }
    if f.awaiting_claims {
        return crit(
            "after the start, no ID is issued until the subscriptions that carry _snowflake.claims have caught up".into(),
            "Start the publisher or fix the subscription (pg_stat_subscription, the server log); for a server gone for good, retire its claim and ALTER SUBSCRIPTION ... DISABLE.",
        );
    }
    if f.paths_stale {
        return check(
            "fleet",
            Status::Warning,
            "a subscription that carries _snowflake.claims is not applying (or relays): a server that takes this pair meanwhile is not seen, and no claim expires".into(),
            "The server log names the subscription: fix it (pg_stat_subscription, its apply worker's log).",
        );
    }
    ok(
        "fleet",
        format!("no other server claims datacenter_id {dc} and worker_id {w}"),
    )
}

fn clock(f: &Facts) -> Check {
    let s = &f.state;
    if !s.issued_any() {
        return ok("clock", "no ID issued since the start".into());
    }
    let lead = s.last_ms() as i64 - f.now_ms;
    let drift = f.max_drift_ms as i64;
    if lead > drift {
        let moved = f.recorded_epoch_ms.filter(|&e| e < f.epoch_unix_ms);
        let (why, action) = match moved {
            Some(e) => (
                format!(" (snowflake.epoch moved later than {}, the mark's)", unix_ms_text(e)),
                "Set snowflake.epoch back to the epoch of the IDs issued (see \"Changing the epoch\" in docs/reference.md) and restart.",
            ),
            None => (
                String::new(),
                "Correct the system clock (NTP); calls succeed again once it passes the last ID. Raising snowflake.max_clock_drift lets them borrow ahead instead.",
            ),
        };
        return check(
            "clock",
            Status::Critical,
            format!("the clock is {lead} ms behind the last ID, more than snowflake.max_clock_drift ({drift} ms): calls fail with 58000{why}"),
            action,
        );
    }
    if lead > drift / 2 {
        return check(
            "clock",
            Status::Warning,
            format!("the last ID is {lead} ms ahead of the clock, near snowflake.max_clock_drift ({drift} ms)"),
            "A clock stepped back, or more IDs per millisecond than 3072 for a while: check NTP (clock_steps) and the load.",
        );
    }
    ok(
        "clock",
        format!("the last ID is {} ms ahead of the clock", lead.max(0)),
    )
}

fn clock_steps(f: &Facts) -> Check {
    let st = f.state.stats();
    let back_age = (st.clock_back_events > 0 && st.latest_clock_back_at_ms != i64::MIN)
        .then(|| (f.now_ms - st.latest_clock_back_at_ms).max(0) as u64);
    let counts = format!(
        "{} steps back (largest {} ms), {} jumps forward (largest {} ms) since the start",
        st.clock_back_events,
        st.largest_clock_back_ms,
        st.clock_forward_jumps,
        st.largest_clock_forward_ms
    );
    let recent: Vec<String> = [
        back_age
            .filter(|&a| a < RECENT_MS)
            .map(|a| format!("back {} ms {}", st.latest_clock_back_ms, ago(a))),
        f.forward_jump_age_ms
            .filter(|&a| a < RECENT_MS)
            .map(|a| format!("forward {}", ago(a))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if recent.is_empty() {
        ok("clock_steps", counts)
    } else {
        check(
            "clock_steps",
            Status::Warning,
            format!("the system clock stepped ({}): {counts}", recent.join(", ")),
            "Check the time service (chronyc tracking, timedatectl): a clock that steps makes IDs borrow ahead or fail, and one stepped forward dates IDs ahead.",
        )
    }
}

fn refusals(f: &Facts) -> Check {
    let st = f.state.stats();
    let age = (st.errors > 0 && st.latest_error_mono_ms != 0)
        .then(|| f.mono_ms.saturating_sub(st.latest_error_mono_ms));
    match age {
        Some(a) if a < RECENT_MS => check(
            "refusals",
            Status::Warning,
            format!(
                "{} calls of snowflake_nextval() failed since the start, the last {}",
                st.errors,
                ago(a)
            ),
            "The other checks and the server log say why (the clock, the fleet, the pair).",
        ),
        Some(a) => ok(
            "refusals",
            format!(
                "{} calls failed since the start, the last {}",
                st.errors,
                ago(a)
            ),
        ),
        None => ok("refusals", "no call failed since the start".into()),
    }
}

fn time_left(f: &Facts) -> Check {
    let left_ms = MAX_TIMESTAMP as i64 - f.now_ms.max(0);
    let years = left_ms as f64 / MS_PER_YEAR;
    let end = unix_ms_text(f.epoch_unix_ms + MAX_TIMESTAMP as i64);
    let reason = format!("{years:.1} years of IDs left: the 41-bit time ends at {end}");
    let action = "Plan a new epoch for new tables, or a move to another ID type, before then.";
    if years < YEARS_CRITICAL {
        check("time_left", Status::Critical, reason, action)
    } else if years < YEARS_WARNING {
        check("time_left", Status::Warning, reason, action)
    } else {
        ok("time_left", reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Node;

    const EPOCH: i64 = 1_288_834_974_657;

    fn healthy() -> Facts {
        let mut state = State::awaiting_lease();
        let now = 500_000_000_000;
        state.grant_lease(now as u64 + 500);
        Facts {
            now_ms: now,
            mono_ms: 100_000_000,
            epoch_unix_ms: EPOCH,
            max_drift_ms: 1000,
            standby: false,
            pair: Pair::Configured { set: true },
            pair_source: "config".into(),
            datacenter: 1,
            worker: 2,
            database: "postgres".into(),
            database_missing: false,
            trust: Trust::Superuser,
            database_owner: Some("postgres".into()),
            foreign: None,
            worker_running: true,
            refresh_age_ms: Some(1000),
            grant_age_ms: Some(200),
            forward_jump_age_ms: None,
            awaiting_claims: false,
            conflict: None,
            paths_stale: false,
            recorded_epoch_ms: Some(EPOCH),
            state,
        }
    }

    fn status(f: &Facts, name: &str) -> Status {
        checks(f)
            .into_iter()
            .find(|c| c.name == name)
            .unwrap()
            .status
    }

    /// An ID issued at the clock's reading plus `offset`.
    fn issue(f: &mut Facts, offset: i64) {
        let node = Node::new(1, 2).unwrap();
        f.state
            .next(f.now_ms + offset, node, f.max_drift_ms)
            .unwrap();
    }

    #[test]
    fn a_healthy_server_is_ok_everywhere() {
        let mut f = healthy();
        issue(&mut f, 0);
        let all = checks(&f);
        assert_eq!(all[0].name, "overall");
        for c in &all {
            assert_eq!(c.status, Status::Ok, "{c:?}");
            assert!(c.action.is_empty(), "{c:?}");
        }
    }

    #[test]
    fn overall_is_the_worst_and_names_the_checks() {
        let mut f = healthy();
        f.pair = Pair::Configured { set: false };
        f.worker_running = false;
        let all = checks(&f);
        assert_eq!(all[0].status, Status::Critical);
        assert_eq!(all[0].reason, "critical: lease_worker; warning: pair");
        assert_eq!(
            all[0].action,
            all.iter()
                .find(|c| c.name == "lease_worker")
                .unwrap()
                .action
        );
        assert!(not_preloaded()[0].status == Status::Critical);
    }

    #[test]
    fn each_state_a_dba_acts_on_is_reported() {
        type Break = Box<dyn Fn(&mut Facts)>;
        let cases: Vec<(&str, Status, Break)> = vec![
            (
                "pair",
                Status::Warning,
                Box::new(|f| f.pair = Pair::Configured { set: false }),
            ),
            (
                "pair",
                Status::Critical,
                Box::new(|f| f.pair = Pair::Unknown),
            ),
            (
                "pair",
                Status::Critical,
                Box::new(|f| {
                    f.pair = Pair::Changed {
                        recorded: 1,
                        now: 2,
                    }
                }),
            ),
            (
                "pair",
                Status::Critical,
                Box::new(|f| f.pair = Pair::Beyond { group: 40, max: 31 }),
            ),
            (
                "pair",
                Status::Critical,
                Box::new(|f| f.pair = Pair::Untrusted),
            ),
            (
                "lease_database",
                Status::Critical,
                Box::new(|f| f.database_missing = true),
            ),
            (
                "lease_database",
                Status::Critical,
                Box::new(|f| f.trust = Trust::Refused),
            ),
            (
                "lease_database",
                Status::Warning,
                Box::new(|f| f.trust = Trust::Tolerated),
            ),
            (
                "lease_database",
                Status::Warning,
                Box::new(|f| f.trust = Trust::Unknown),
            ),
            (
                "lease_database",
                Status::Critical,
                Box::new(|f| {
                    f.foreign = Some(("sequence _snowflake.lease_ms".into(), "app".into()))
                }),
            ),
            (
                "lease_worker",
                Status::Critical,
                Box::new(|f| f.worker_running = false),
            ),
            (
                "lease_worker",
                Status::Critical,
                Box::new(|f| f.refresh_age_ms = Some(MIN_EXPIRY_MS + 1)),
            ),
            (
                "fleet",
                Status::Critical,
                Box::new(|f| {
                    f.conflict = Some(Conflict {
                        system_identifier: 7,
                        copy: false,
                        claims_stale: false,
                    })
                }),
            ),
            (
                "fleet",
                Status::Critical,
                Box::new(|f| {
                    f.conflict = Some(Conflict {
                        system_identifier: 7,
                        copy: true,
                        claims_stale: false,
                    })
                }),
            ),
            (
                "fleet",
                Status::Critical,
                Box::new(|f| f.awaiting_claims = true),
            ),
            ("fleet", Status::Warning, Box::new(|f| f.paths_stale = true)),
            (
                "time_left",
                Status::Warning,
                Box::new(|f| f.now_ms = MAX_TIMESTAMP as i64 - 3 * MS_PER_YEAR as i64),
            ),
            (
                "time_left",
                Status::Critical,
                Box::new(|f| f.now_ms = MAX_TIMESTAMP as i64 - 1000),
            ),
            (
                "lease",
                Status::Critical,
                Box::new(|f| {
                    // A call waits for the lease, and none came for 3 s.
                    let now = f.now_ms + 600;
                    assert!(matches!(
                        f.state.next(now, Node::new(1, 2).unwrap(), 1000),
                        Ok(crate::generator::Step::WaitLease { .. })
                    ));
                    f.grant_age_ms = Some(LEASE_WAIT_MS + 1);
                }),
            ),
            (
                "clock",
                Status::Critical,
                Box::new(|f| {
                    issue(f, 0);
                    f.now_ms -= 1001;
                }),
            ),
            (
                "clock",
                Status::Critical,
                Box::new(|f| {
                    // The epoch moved later: the floor is ahead by as much.
                    issue(f, 0);
                    f.recorded_epoch_ms = Some(EPOCH - 5000);
                    f.now_ms -= 5000;
                }),
            ),
            (
                "clock",
                Status::Warning,
                Box::new(|f| {
                    issue(f, 0);
                    f.now_ms -= 600;
                }),
            ),
            (
                "clock_steps",
                Status::Warning,
                Box::new(|f| {
                    issue(f, 0);
                    issue(f, -300);
                }),
            ),
            (
                "clock_steps",
                Status::Warning,
                Box::new(|f| f.forward_jump_age_ms = Some(1000)),
            ),
            (
                "refusals",
                Status::Warning,
                Box::new(|f| {
                    issue(f, 0);
                    assert!(f
                        .state
                        .next(f.now_ms - 5000, Node::new(1, 2).unwrap(), 1000)
                        .is_err());
                    f.state.count_failure(f.mono_ms - 5000);
                }),
            ),
        ];
        for (name, want, break_it) in cases {
            let mut f = healthy();
            break_it(&mut f);
            let all = checks(&f);
            let c = all.iter().find(|c| c.name == name).unwrap();
            assert_eq!(c.status, want, "{c:?}");
            assert!(!c.action.is_empty(), "{c:?}");
            assert_eq!(all[0].status, want.max(all[0].status));
            assert!(all[0].status >= want);
        }
    }

    #[test]
    fn the_past_is_not_a_warning() {
        let mut f = healthy();
        issue(&mut f, -2 * RECENT_MS as i64);
        issue(&mut f, -2 * RECENT_MS as i64 - 300);
        assert!(f
            .state
            .next(
                f.now_ms - 3 * RECENT_MS as i64,
                Node::new(1, 2).unwrap(),
                1000
            )
            .is_err());
        f.state.count_failure(f.mono_ms - 3 * RECENT_MS);
        f.forward_jump_age_ms = Some(RECENT_MS + 1);
        assert_eq!(status(&f, "clock_steps"), Status::Ok);
        assert_eq!(status(&f, "refusals"), Status::Ok);
    }

    #[test]
    fn a_refusal_stays_recent_by_the_monotonic_clock_whatever_the_wall_clock_does() {
        let mut f = healthy();
        // A call failed a minute ago (a lease that did not come: nothing of the wall clock)...
        f.state.count_failure(f.mono_ms - 60_000);
        assert_eq!(status(&f, "refusals"), Status::Warning);
        // ...and the wall clock jumps forward by two hours: still a minute ago.
        f.now_ms += 2 * RECENT_MS as i64;
        f.forward_jump_age_ms = Some(1000);
        let c = checks(&f)
            .into_iter()
            .find(|c| c.name == "refusals")
            .unwrap();
        assert_eq!(c.status, Status::Warning, "{c:?}");
        assert!(c.reason.contains("60 s ago"), "{c:?}");
        // An hour later by the monotonic clock, it is past.
        f.mono_ms += RECENT_MS;
        assert_eq!(status(&f, "refusals"), Status::Ok);
    }

    #[test]
    fn a_standby_is_not_alarming() {
        let mut f = healthy();
        f.standby = true;
        f.worker_running = false;
        f.trust = Trust::Unknown;
        f.grant_age_ms = None;
        f.refresh_age_ms = None;
        assert_eq!(checks(&f)[0].status, Status::Ok);
    }
}
