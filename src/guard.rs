//! `snowflake_guard()`: a `BEFORE INSERT OR UPDATE ... FOR EACH ROW` trigger that refuses an
//! explicit ID which a generator would issue again later ([`crate::core::guard`]'s rule), at the
//! statement that brings it, instead of a duplicate key in a later insert.
//!
//! It runs as the role that writes the row, runs no SQL and resolves no name: the column is
//! found by comparing the trigger's argument with the bytes of the table's own column names
//! (any encoding), and the generator's position is read from shared memory under a shared
//! LWLock, held for a copy of the state and nothing else. It never raises the floor: a writer's
//! row must not move the server's IDs (one row dated 2080 would stop every table's inserts).

use crate::config::{self, epoch_ms};
use crate::core::guard::{judge, judge_always, Danger, NotJustIssued};
use crate::core::layout::{decompose, Node};
use crate::core::time::{unix_ms_text, Clock, SystemClock};
use crate::errors;
use crate::generator::GENERATOR;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};
use std::ffi::CStr;

/// The guard. Its first argument names the key column (`id` without one); a second, `'always'`,
/// refuses every ID but the one `snowflake_nextval()` just returned in this session
/// ([`crate::core::guard::judge_always`]).
#[pg_trigger]
fn snowflake_guard<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    let data = trigger.trigger_data();
    let event = data.tg_event;
    let before_row = event & pg_sys::TRIGGER_EVENT_TIMINGMASK == pg_sys::TRIGGER_EVENT_BEFORE
        && event & pg_sys::TRIGGER_EVENT_ROW != 0;
    let op = event & pg_sys::TRIGGER_EVENT_OPMASK;
    let (insert, update) = (
        op == pg_sys::TRIGGER_EVENT_INSERT,
        op == pg_sys::TRIGGER_EVENT_UPDATE,
    );
    if !before_row || !(insert || update) {
        errors::raise(
            PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            "snowflake_guard() must be fired BEFORE INSERT OR UPDATE, FOR EACH ROW".into(),
            None,
            Some("CREATE TRIGGER snowflake_guard BEFORE INSERT OR UPDATE OF id ON tbl FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id')"),
        );
    }
    // SAFETY: PostgreSQL's trigger data for a BEFORE ROW INSERT or UPDATE trigger: the relation,
    // its descriptor, the trigger's arguments and the tuples are valid during the call.
    let (id, old_id, rel_name, column, always) = unsafe {
        let rel = data.tg_relation;
        let desc = (*rel).rd_att;
        let trig = data.tg_trigger;
        let nargs = (*trig).tgnargs;
        if nargs > 2 {
            errors::raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("snowflake_guard() takes at most two arguments, the key column and 'always', not {nargs}"),
                None,
                Some("Re-create the trigger with EXECUTE FUNCTION snowflake_guard('id') or snowflake_guard('id', 'always'), naming the key column."),
            )
        }
        let arg = |i: usize| CStr::from_ptr(*(*trig).tgargs.add(i)).to_bytes();
        let column: Vec<u8> = if nargs == 0 {
            b"id".to_vec()
        } else {
            arg(0).to_vec()
        };
        let always = nargs == 2;
        if always && arg(1) != b"always" {
            errors::raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "snowflake_guard()'s second argument must be 'always', not '{}'",
                    name_text(arg(1))
                ),
                None,
                Some("Re-create the trigger with EXECUTE FUNCTION snowflake_guard('id', 'always'), or with the key column only."),
            )
        }
        let rel_name = name_text(CStr::from_ptr((*(*rel).rd_rel).relname.data.as_ptr()).to_bytes());
        let attnum = find_column(desc, &column, &rel_name).unwrap_or_else(|| {
            errors::raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
                format!(
                    "column \"{}\" of relation \"{rel_name}\" does not exist",
                    name_text(&column)
                ),
                Some("snowflake_guard() checks the column its trigger's argument names.".into()),
                Some("Re-create the trigger with EXECUTE FUNCTION snowflake_guard('...'), naming the key column."),
            )
        });
        let get = |tuple: *mut pg_sys::HeapTupleData| {
            let mut null = false;
            let datum = pg_sys::heap_getattr(tuple, attnum, desc, &mut null);
            (!null).then(|| datum.value() as i64)
        };
        let (new, old) = if insert {
            (get(data.tg_trigtuple), None)
        } else {
            (get(data.tg_newtuple), get(data.tg_trigtuple))
        };
        (new, old, rel_name, name_text(&column), always)
    };
    let row = trigger.new();
    let Some(id) = id else {
        return Ok(row);
    };
    // A row that keeps its ID brings no new one.
    if old_id == Some(id) {
        return Ok(row);
    }
    if always {
        let last = crate::api::last_returned();
        if let Err(NotJustIssued { last_returned }) = judge_always(id, last) {
            refuse_explicit(id, &rel_name, &column, last_returned, update);
        }
        return Ok(row);
    }
    config::require_preload("snowflake_guard()");
    let (state, node) = {
        let g = GENERATOR.share();
        (g.state, Node::from_bits(g.node_bits))
    };
    let now = SystemClock.now_unix_ms() - epoch_ms();
    let drift = config::max_clock_drift_ms();
    if let Err(danger) = judge(id, node, &state, now, drift) {
        refuse(id, danger, &rel_name, &column, node, &state, now, drift);
    }
    Ok(row)
}

extension_sql!(
    "COMMENT ON FUNCTION snowflake_guard() IS 'Trigger: refuses an explicit snowflake ID that a generator would issue again later (its argument names the key column, id by default); with a second argument, always, any explicit ID';\n",
    name = "snowflake_guard_comment",
    requires = [snowflake_guard]
);

/// The 1-based number of the live column whose name is `name`, byte for byte. Errors if it is
/// not `bigint`, or if it is generated: a BEFORE trigger sees a generated column as NULL (a
/// stored one is computed after it, a virtual one on read), and NULL would pass every time. It
/// is checked here, at every row, since the column may be altered after the trigger is made.
///
/// # Safety
/// `desc` is a valid tuple descriptor.
unsafe fn find_column(desc: pg_sys::TupleDesc, name: &[u8], rel_name: &str) -> Option<i32> {
    unsafe {
        (0..(*desc).natts).find_map(|i| {
            let att = tuple_desc_attr(desc, i);
            let att_name = CStr::from_ptr((*att).attname.data.as_ptr()).to_bytes();
            (!(*att).attisdropped && att_name == name).then(|| {
                if (*att).atttypid != pg_sys::INT8OID {
                    errors::raise(
                        PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                        format!(
                            "snowflake_guard() checks bigint columns, and column \"{}\" is not one",
                            name_text(name)
                        ),
                        None,
                        Some("Name the table's bigint key column in the trigger's argument."),
                    )
                }
                if (*att).attgenerated != 0 {
                    let kind = if (*att).attgenerated as u8 == b's' { "stored" } else { "virtual" };
                    errors::raise(
                        PgSqlErrorCode::ERRCODE_INVALID_OBJECT_DEFINITION,
                        format!(
                            "snowflake_guard() cannot check generated column \"{}\" of relation \"{rel_name}\"",
                            name_text(name)
                        ),
                        Some(format!("Column \"{}\" is a {kind} generated column: a BEFORE trigger sees it as NULL, so no ID in it would be checked.", name_text(name))),
                        Some("Guard the column the key is computed from instead, or make the key a plain column with DEFAULT snowflake_nextval()."),
                    )
                }
                i + 1
            })
        })
    }
}

/// The `i`th (0-based) attribute of `desc`.
///
/// # Safety
/// `desc` is a valid tuple descriptor with more than `i` attributes.
unsafe fn tuple_desc_attr(desc: pg_sys::TupleDesc, i: i32) -> *const pg_sys::FormData_pg_attribute {
    unsafe {
        // 18 put the compact attributes first, the full ones after them (TupleDescAttr).
        #[cfg(any(feature = "pg18", feature = "pg19"))]
        let atts: *const pg_sys::FormData_pg_attribute = (*desc)
            .compact_attrs
            .as_ptr()
            .add((*desc).natts as usize)
            .cast();
        #[cfg(not(any(feature = "pg18", feature = "pg19")))]
        let atts: *const pg_sys::FormData_pg_attribute = (*desc).attrs.as_ptr();
        atts.add(i as usize)
    }
}

/// A name for a message: as it is when it is ASCII, or UTF-8 in a UTF-8 database; otherwise
/// its bytes outside ASCII as `\xE9` (a LATIN1 name is no UTF-8 string).
fn name_text(bytes: &[u8]) -> String {
    // SAFETY: a plain read of the database's encoding.
    let utf8 = unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32;
    match std::str::from_utf8(bytes) {
        Ok(s) if utf8 || s.is_ascii() => s.to_string(),
        _ => bytes
            .iter()
            .map(|&b| {
                if b.is_ascii() {
                    (b as char).to_string()
                } else {
                    format!("\\x{b:02X}")
                }
            })
            .collect(),
    }
}

/// An ID's time, as a timestamp with its raw milliseconds.
fn when(ms: i64) -> String {
    unix_ms_text(ms + epoch_ms())
}

#[allow(clippy::too_many_arguments)]
fn refuse(
    id: i64,
    danger: Danger,
    table: &str,
    column: &str,
    own: Node,
    state: &crate::core::generator::State,
    now: i64,
    drift: u64,
) -> ! {
    let parts = decompose(id).expect("a refused ID is not negative");
    let pair = |dc: u32, w: u32| format!("datacenter_id {dc}, worker_id {w}");
    let facts = format!(
        "Column \"{column}\" of table \"{table}\": ID {id} is dated {}, on the pair {}.",
        when(parts.ms as i64),
        pair(parts.datacenter, parts.worker)
    );
    let (message, detail, hint) = match danger {
        Danger::AboveOwn { last_id } => (
            format!("explicit ID {id} is one that this server's snowflake_nextval() would issue later"),
            format!(
                "{facts} That is this server's pair, and {}; every ID it issues next is above that. The clock reads {}.",
                match last_id {
                    Some(last) => format!(
                        "it has issued IDs up to {last}, dated {}",
                        when(state.last_ms() as i64)
                    ),
                    None => "it has issued none since it started (its lease worker has not granted the first lease yet)".to_string(),
                },
                when(now),
            ),
            "Leave the column out so that its default gives the ID. To keep explicit IDs, first make this server issue above the largest of them, as a superuser: snowflake_set_floor(id), or snowflake_set_floor_from(tbl) on a table that holds them (see \"Explicit IDs\" in docs/operations.md).",
        ),
        Danger::AheadOfClock { ahead_ms } => (
            format!("explicit ID {id} is one that the server of its pair would issue later"),
            format!(
                "{facts} Its time is {ahead_ms} ms ahead of this server's clock ({}), more than snowflake.max_clock_drift ({drift} ms) allows; this server's pair is {}.",
                when(now),
                pair(own.datacenter(), own.worker())
            ),
            "Leave the column out so that its default gives the ID. An ID of another pair must not lie ahead of the clock: the server that holds that pair issues it when its clock gets there (see \"Explicit IDs\" in docs/operations.md).",
        ),
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_CHECK_VIOLATION,
        message,
        Some(detail),
        Some(hint),
    )
}

/// The refusal of `'always'` mode: the ID is not the one `snowflake_nextval()` just returned.
fn refuse_explicit(id: i64, table: &str, column: &str, last: Option<i64>, update: bool) -> ! {
    let last = match last {
        Some(last) => format!("returned {last} last"),
        None => "has returned none in this session".to_string(),
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_GENERATED_ALWAYS,
        format!("column \"{column}\" of table \"{table}\" takes only IDs from snowflake_nextval()"),
        Some(format!(
            "The row's ID is {id}, and snowflake_nextval() {last}. The trigger's 'always' mode admits only that ID{}.",
            if update { ", or the row's own" } else { "" }
        )),
        Some("Leave the column to its default. To bring rows in with their IDs, raise the floor first, then disable the trigger for the import (see \"Explicit IDs\" in docs/operations.md)."),
    )
}
