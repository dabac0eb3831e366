//! What a DBA asks of a running server: its identity, the generator's health, and the floor
//! control that switching an existing table over needs.

use crate::config::{self, epoch_ms};
use crate::core::generator::FloorError;
use crate::core::layout::MAX_TIMESTAMP;
use crate::core::time::{unix_ms_to_pg_timestamp, Clock, SystemClock};
use crate::errors;
use crate::shmem::{self, GENERATOR};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

fn timestamp(ms_since_epoch: u64) -> Option<TimestampWithTimeZone> {
    if ms_since_epoch > MAX_TIMESTAMP {
        return None;
    }
    TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(ms_since_epoch as i64 + epoch_ms()))
        .ok()
}

fn require_preload(function: &str) {
    if !config::preloaded() {
        errors::not_preloaded(function);
    }
}

/// This server's identity and the generator's position against the wall clock.
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
        name!(system_identifier, i64),
        name!(claim_conflict_with, Option<i64>),
        name!(claim_conflict_seen, Option<TimestampWithTimeZone>),
    ),
> {
    require_preload("snowflake_node()");
    let shared = *GENERATOR.share();
    let now = SystemClock.now_unix_ms() - epoch_ms();
    let node = config::node();
    let issued_any = shared.state.stats.issued > 0 || shared.state.last_ms > 0;
    let conflict = shared.conflict();
    TableIterator::once((
        node.datacenter() as i32,
        node.worker() as i32,
        TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(epoch_ms()))
            .expect("epoch is a valid timestamp"),
        config::max_clock_drift_ms() as i64,
        if issued_any {
            timestamp(shared.state.last_ms)
        } else {
            None
        },
        if issued_any {
            (shared.state.last_ms as i64 - now).max(0)
        } else {
            0
        },
        if shared.state.lease_ms > 0 {
            timestamp(shared.state.lease_ms)
        } else {
            None
        },
        (shared.worker_pid != 0 && shared.worker_latch != 0).then_some(shared.worker_pid),
        crate::fleet::system_identifier(),
        conflict.map(|c| c.system_identifier),
        conflict.as_ref().and_then(crate::fleet::last_seen),
    ))
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
    require_preload("snowflake_stats()");
    let s = GENERATOR.share().state.stats;
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
    require_preload("snowflake_set_floor()");
    if unsafe { pg_sys::RecoveryInProgress() } {
        errors::in_recovery("snowflake_set_floor()");
    }
    let drift = config::max_clock_drift_ms();
    let now = SystemClock.now_unix_ms() - epoch_ms();
    let result = GENERATOR.exclusive().state.ensure_above(id, now, drift);
    match result {
        Ok(_) => shmem::wake_worker(),
        Err(FloorError::Negative) => errors::layout(crate::core::layout::LayoutError::NegativeId(id), epoch_ms()),
        Err(FloorError::TooFarAhead { ahead_ms, max_drift_ms }) => errors::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("existing key {id} is above what snowflake_nextval() can generate now"),
            Some(format!(
                "Its timestamp lies {ahead_ms} ms ahead of the clock; snowflake.max_clock_drift allows {max_drift_ms} ms."
            )),
            Some("The existing keys do not come from this epoch's clock: keep their generator, or move the rows to a new table."),
        ),
    }
}

extension_sql!(
    r#"
REVOKE EXECUTE ON FUNCTION snowflake_set_floor(bigint) FROM PUBLIC;

-- Switches an existing bigint key (bigserial, identity, or plain) to snowflake_nextval() with
-- only a brief lock: writers wait for the switch, readers do not.
CREATE FUNCTION snowflake_adopt(tbl regclass, col name DEFAULT 'id') RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    typ regtype;
    ident "char";
    max_id bigint;
    first_id bigint;
BEGIN
    SELECT a.atttypid::regtype, a.attidentity INTO typ, ident
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_column',
            MESSAGE = format('column "%s" of relation %s does not exist', col, tbl);
    END IF;
    -- A view or a foreign table would run code of its owner's choosing as the caller (who is a
    -- superuser): only tables.
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = tbl) NOT IN ('r', 'p') THEN
        RAISE EXCEPTION USING ERRCODE = 'wrong_object_type',
            MESSAGE = format('%s is not a table', tbl),
            DETAIL = 'snowflake_adopt switches the key of a plain or partitioned table.';
    END IF;
    IF typ <> 'bigint'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = 'datatype_mismatch',
            MESSAGE = format('column "%s" of relation %s is of type %s, not bigint', col, tbl, typ),
            DETAIL = 'Snowflake IDs need all 64 bits.',
            HINT = format('Run ALTER TABLE %s ALTER COLUMN %I TYPE bigint first.', tbl, col);
    END IF;
    -- No writer may add an old-style key between reading the maximum and switching the default.
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', tbl);
    EXECUTE format('SELECT pg_catalog.max(%I) FROM %s', col, tbl) INTO max_id;
    IF max_id IS NOT NULL THEN
        PERFORM @extschema@.snowflake_set_floor(max_id);
    END IF;
    IF ident <> '' THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);
    END IF;
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.snowflake_nextval()', tbl, col);
    -- Check, do not assume: the next ID must be above every existing key.
    first_id := @extschema@.snowflake_nextval();
    IF max_id IS NOT NULL AND first_id <= max_id THEN
        RAISE EXCEPTION USING ERRCODE = 'internal_error',
            MESSAGE = format('snowflake_nextval() returned %s, not above the existing maximum %s', first_id, max_id);
    END IF;
    RETURN max_id;
END
$fn$;
COMMENT ON FUNCTION snowflake_adopt(regclass, name) IS
  'Switch an existing bigint key to DEFAULT snowflake_nextval(), guaranteeing new IDs above existing ones; returns the old maximum';
"#,
    name = "snowflake_adopt",
    requires = [snowflake_set_floor, "snowflake_decode"]
);
