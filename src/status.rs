//! What a DBA asks of a running server: its identity, the generator's health, and the floor
//! control that switching an existing table over needs.

use crate::config::{self, epoch_ms};
use crate::core::generator::FloorError;
use crate::core::layout::MAX_TIMESTAMP;
use crate::core::time::{unix_ms_to_pg_timestamp, Clock, SystemClock};
use crate::errors;
use crate::generator::{self, DatabaseTrust, PairState, GENERATOR};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

fn timestamp(ms_since_epoch: u64) -> Option<TimestampWithTimeZone> {
    if ms_since_epoch > MAX_TIMESTAMP {
        return None;
    }
    TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(ms_since_epoch as i64 + epoch_ms()))
        .ok()
}

/// This server's identity and the generator's position against the wall clock. Any role sees
/// the pair, the settings and the generator's position; the system identifier, the claim
/// conflict's other server and the lease database's owner and trust are NULL for a role that
/// [`errors::sees_server`] refuses.
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn snowflake_node() -> TableIterator<
    'static,
    (
        name!(datacenter_id, i32),
        name!(worker_id, i32),
        name!(epoch, TimestampWithTimeZone),
        name!(max_clock_drift_ms, i64),
        name!(last_timestamp, Option<TimestampWithTimeZone>),
        name!(lead_ms, i64),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(lease_worker_pid, Option<i32>),
        name!(system_identifier, Option<i64>),
        name!(claim_conflict_with, Option<i64>),
        name!(claim_conflict_seen, Option<TimestampWithTimeZone>),
        name!(pair_set, bool),
        name!(lease_database_owner, Option<String>),
        name!(lease_database_trusted, Option<bool>),
        name!(pair_source, String),
    ),
> {
    config::require_preload("snowflake_node()");
    let shared = *GENERATOR.share();
    let now = SystemClock.now_unix_ms() - epoch_ms();
    let node = crate::core::layout::Node::from_bits(shared.node_bits);
    let issued_any = shared.state.issued_any();
    let conflict = shared.conflict();
    let monitor = errors::sees_server();
    TableIterator::once((
        node.datacenter() as i32,
        node.worker() as i32,
        TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(epoch_ms()))
            .expect("epoch is a valid timestamp"),
        config::max_clock_drift_ms() as i64,
        if issued_any {
            timestamp(shared.state.last_ms())
        } else {
            None
        },
        if issued_any {
            (shared.state.last_ms() as i64 - now).max(0)
        } else {
            0
        },
        match shared.state.lease() {
            Some(lease) if lease > 0 => timestamp(lease),
            _ => None,
        },
        (shared.worker_pid != 0 && shared.worker_latch != 0).then_some(shared.worker_pid),
        monitor.then(crate::fleet::system_identifier),
        conflict.filter(|_| monitor).map(|c| c.system_identifier),
        conflict
            .as_ref()
            .filter(|_| monitor)
            .and_then(crate::fleet::last_seen),
        config::pair_set() || config::pair_source().from_citus(),
        shared
            .database_owner
            .get()
            .filter(|_| monitor)
            .map(|(_, owner)| owner),
        match shared.database_trust {
            DatabaseTrust::Unknown => None,
            _ if !monitor => None,
            trust => Some(trust == DatabaseTrust::Superuser),
        },
        pair_source(shared.pair),
    ))
}

/// Where the pair came from, in words: `config`, `citus group 3`, or why there is none.
fn pair_source(pair: PairState) -> String {
    let source = config::pair_source().name();
    match pair {
        PairState::Configured => source.into(),
        PairState::Group(g) => format!("{source} group {g}"),
        PairState::Unknown => format!("{source} (no group yet)"),
        PairState::Changed { recorded, now } => {
            format!("{source} group {recorded} (group changed to {now})")
        }
        PairState::Beyond { group, .. } => format!("{source} (group {group} out of range)"),
        PairState::Untrusted => format!("{source} (metadata not trusted)"),
    }
}

/// `snowflake_node()` with the columns it had in 1.5.0, kept by the upgrade to 1.6.0 (which adds
/// `lease_database_owner` and `lease_database_trusted`) for what was made on it, as
/// `snowflake_node_1_1` is for 1.1.0 (see `sql/snowflake--1.5.0--1.6.0.sql`).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn snowflake_node_1_5() -> TableIterator<
    'static,
    (
        name!(datacenter_id, i32),
        name!(worker_id, i32),
        name!(epoch, TimestampWithTimeZone),
        name!(max_clock_drift_ms, i64),
        name!(last_timestamp, Option<TimestampWithTimeZone>),
        name!(lead_ms, i64),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(lease_worker_pid, Option<i32>),
        name!(system_identifier, Option<i64>),
        name!(claim_conflict_with, Option<i64>),
        name!(claim_conflict_seen, Option<TimestampWithTimeZone>),
        name!(pair_set, bool),
    ),
> {
    let (a, b, c, d, e, f, g, h, i, j, k, l, ..) = snowflake_node()
        .next()
        .expect("snowflake_node() has one row");
    TableIterator::once((a, b, c, d, e, f, g, h, i, j, k, l))
}

/// `snowflake_node()` with the columns it had in 1.1.0, for the views and functions that were
/// made on it then: the upgrade to 1.2.0 keeps their function as `snowflake_node_1_1()`, outside
/// the extension, bound to this (see `sql/snowflake--1.1.0--1.2.0.sql`). A result type never
/// changes under a name that something may depend on.
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn snowflake_node_1_1() -> TableIterator<
    'static,
    (
        name!(datacenter_id, i32),
        name!(worker_id, i32),
        name!(epoch, TimestampWithTimeZone),
        name!(max_clock_drift_ms, i64),
        name!(last_timestamp, Option<TimestampWithTimeZone>),
        name!(lead_ms, i64),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(lease_worker_pid, Option<i32>),
    ),
> {
    let (a, b, c, d, e, f, g, h, ..) = snowflake_node()
        .next()
        .expect("snowflake_node() has one row");
    TableIterator::once((a, b, c, d, e, f, g, h))
}

/// `snowflake_node()` with the columns it had from 1.2.0 to 1.4.0, kept by the upgrade to 1.5.0
/// (which adds `pair_set`) for what was made on it, as `snowflake_node_1_1` is for 1.1.0 (see
/// `sql/snowflake--1.4.0--1.5.0.sql`).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn snowflake_node_1_4() -> TableIterator<
    'static,
    (
        name!(datacenter_id, i32),
        name!(worker_id, i32),
        name!(epoch, TimestampWithTimeZone),
        name!(max_clock_drift_ms, i64),
        name!(last_timestamp, Option<TimestampWithTimeZone>),
        name!(lead_ms, i64),
        name!(lease_until, Option<TimestampWithTimeZone>),
        name!(lease_worker_pid, Option<i32>),
        name!(system_identifier, Option<i64>),
        name!(claim_conflict_with, Option<i64>),
        name!(claim_conflict_seen, Option<TimestampWithTimeZone>),
    ),
> {
    let (a, b, c, d, e, f, g, h, i, j, k, ..) = snowflake_node()
        .next()
        .expect("snowflake_node() has one row");
    TableIterator::once((a, b, c, d, e, f, g, h, i, j, k))
}

/// `snowflake_stats()` with the columns it had in 1.1.0 and 1.2.0 (see `snowflake_node_1_1`
/// and `sql/snowflake--1.2.0--1.3.0.sql`).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn snowflake_stats_1_2() -> TableIterator<
    'static,
    (
        name!(ids_issued, i64),
        name!(borrowed_ms, i64),
        name!(clock_back_events, i64),
        name!(largest_clock_back_ms, i64),
        name!(waits, i64),
        name!(errors, i64),
    ),
> {
    let (a, b, c, d, _, _, g, h) = snowflake_stats()
        .next()
        .expect("snowflake_stats() has one row");
    TableIterator::once((a, b, c, d, g, h))
}

/// Counters since the server started (they live in shared memory and reset at restart).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn snowflake_stats() -> TableIterator<
    'static,
    (
        name!(ids_issued, i64),
        name!(borrowed_ms, i64),
        name!(clock_back_events, i64),
        name!(largest_clock_back_ms, i64),
        name!(clock_forward_jumps, i64),
        name!(largest_clock_forward_ms, i64),
        name!(waits, i64),
        name!(errors, i64),
    ),
> {
    config::require_preload("snowflake_stats()");
    let s = GENERATOR.share().state.stats();
    TableIterator::once((
        s.issued as i64,
        s.borrowed_ms as i64,
        s.clock_back_events as i64,
        s.largest_clock_back_ms as i64,
        s.clock_forward_jumps as i64,
        s.largest_clock_forward_ms as i64,
        s.waits as i64,
        s.errors as i64,
    ))
}

/// Makes every ID generated from now on greater than `id`. Used by `snowflake_adopt()`; only
/// superusers may call it (EXECUTE is revoked from PUBLIC), since pushing the floor ahead of the
/// clock would make this server's IDs run ahead of time.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_set_floor(id: i64) {
    set_floor(id, false)
}

/// `snowflake_set_floor()` for a caller that has checked the privilege (`snowflake_adopt`);
/// `key` says the floor is a table's largest key (adopt, set_floor_from), not an ID given.
pub fn set_floor(id: i64, key: bool) {
    config::require_preload("snowflake_set_floor()");
    config::require_primary("snowflake_set_floor()", config::STANDBY_SHARES_THE_PAIR);
    let drift = config::max_clock_drift_ms();
    let now = SystemClock.now_unix_ms() - epoch_ms();
    let result = GENERATOR.exclusive().state.ensure_above(id, now, drift);
    match result {
        // Acknowledged only once the floor is in WAL: a lease at or above it is persisted (a
        // restart right after this call starts above it).
        Ok(_) => {
            let ms = crate::core::layout::decompose(id).map_or(0, |p| p.ms);
            // Longer than a call of snowflake_nextval() waits: after a promotion (the failover
            // recipe) the first lease may wait for the claims paths to catch up.
            let limit = generator::LEASE_WAIT_LIMIT
                + std::time::Duration::from_millis(crate::core::fleet::CATCH_UP_LIMIT_MS);
            if generator::wait_until_persisted(ms, limit).is_err() {
                generator::lease_not_ready(limit, &config::database())
            }
        }
        Err(FloorError::Negative) => errors::layout(crate::core::layout::LayoutError::NegativeId(id), epoch_ms()),
        Err(FloorError::TooFarAhead { ahead_ms, max_drift_ms }) if key => errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("existing key {id} is above what snowflake_nextval() can generate now"),
            Some(format!(
                "Its timestamp lies {ahead_ms} ms ahead of the clock; snowflake.max_clock_drift allows {max_drift_ms} ms."
            )),
            Some("The existing keys do not come from this epoch's clock: keep their generator, or move the rows to a new table."),
        ),
        Err(FloorError::TooFarAhead { ahead_ms, max_drift_ms }) => errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("floor {id} is above what snowflake_nextval() can generate now"),
            Some(format!(
                "Its timestamp lies {ahead_ms} ms ahead of the clock; snowflake.max_clock_drift allows {max_drift_ms} ms."
            )),
            Some("Give an ID this server could have issued: at most snowflake_max_id(now()) plus snowflake.max_clock_drift."),
        ),
    }
}

extension_sql!(
    "REVOKE EXECUTE ON FUNCTION snowflake_set_floor(bigint) FROM PUBLIC;\n",
    name = "snowflake_set_floor_revoked",
    requires = [snowflake_set_floor]
);
