//! `snowflake_health()`: whether ID generation is healthy, as [`crate::core::health`] decides it
//! from what shared memory and the settings hold. One copy of the shared state under a shared
//! lock, no table read, no wait and no write: a monitoring role calls it every few seconds.

use crate::config;
use crate::core::health::{self, Conflict, Facts, Pair, Trust};
use crate::core::time::{Clock, SystemClock};
use crate::generator::{monotonic_ms, DatabaseTrust, PairState, GENERATOR};
use pgrx::prelude::*;

/// One row per check, the overall answer (`overall`) first: its status is the worst of the
/// others, its reason names the checks that are not `ok`, its action is the first worst one's.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn snowflake_health() -> TableIterator<
    'static,
    (
        name!(check_name, String),
        name!(status, String),
        name!(severity, i32),
        name!(reason, String),
        name!(action, Option<String>),
    ),
> {
    let checks = if config::preloaded() {
        health::checks(&facts())
    } else {
        health::not_preloaded()
    };
    TableIterator::new(checks.into_iter().map(|c| {
        (
            c.name.to_string(),
            c.status.name().to_string(),
            c.status.severity(),
            c.reason,
            (!c.action.is_empty()).then_some(c.action),
        )
    }))
}

fn facts() -> Facts {
    let shared = *GENERATOR.share();
    let mono = monotonic_ms();
    let age = |at: u64| (at != 0).then(|| mono.saturating_sub(at));
    let epoch = config::epoch_ms();
    let node = crate::core::layout::Node::from_bits(shared.node_bits);
    let me = crate::fleet::system_identifier();
    Facts {
        now_ms: SystemClock.now_unix_ms() - epoch,
        mono_ms: mono,
        epoch_unix_ms: epoch,
        max_drift_ms: config::max_clock_drift_ms(),
        // SAFETY: a plain read of the server's state, valid in any backend.
        standby: unsafe { pg_sys::RecoveryInProgress() },
        pair: match shared.pair {
            PairState::Configured => Pair::Configured {
                set: config::pair_set(),
            },
            PairState::Group(g) => Pair::Group(g),
            PairState::Unknown => Pair::Unknown,
            PairState::Changed { recorded, now } => Pair::Changed { recorded, now },
            PairState::Beyond { group, max } => Pair::Beyond { group, max },
            PairState::Untrusted => Pair::Untrusted,
        },
        pair_source: config::pair_source().name().into(),
        datacenter: node.datacenter(),
        worker: node.worker(),
        database: config::database(),
        database_missing: shared.database_missing,
        trust: match shared.database_trust {
            DatabaseTrust::Unknown => Trust::Unknown,
            DatabaseTrust::Superuser => Trust::Superuser,
            DatabaseTrust::Tolerated => Trust::Tolerated,
            DatabaseTrust::Refused => Trust::Refused,
        },
        database_owner: shared.database_owner.get().map(|(_, owner)| owner),
        foreign: shared.foreign.get(),
        worker_running: shared.worker_pid != 0 && shared.worker_latch != 0,
        refresh_age_ms: age(shared.refreshed_at),
        grant_age_ms: age(shared.granted_at),
        forward_jump_age_ms: age(shared.forward_jump_at),
        awaiting_claims: shared.awaiting_claims,
        conflict: shared.conflict().map(|c| Conflict {
            system_identifier: c.system_identifier,
            copy: c.system_identifier == me,
            claims_stale: shared.claims_stale,
        }),
        paths_stale: shared.paths_stale,
        recorded_epoch_ms: (shared.recorded_epoch_ms != i64::MIN)
            .then_some(shared.recorded_epoch_ms),
        state: shared.state,
    }
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowflake_health() IS 'Whether ID generation is healthy: one row per check (ok, warning or critical) with its reason and what to do, the overall answer first';
REVOKE EXECUTE ON FUNCTION snowflake_health() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_health() TO pg_monitor;
"#,
    name = "snowflake_health_granted",
    requires = [snowflake_health]
);
