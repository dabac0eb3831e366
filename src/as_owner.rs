//! What a superuser runs on someone else's table runs as that table's owner.
//!
//! `snowflake_adopt()`, `snowflake_create_partitions()` and `snowflake_drop_partitions()` plan
//! queries on a table and change it. PostgreSQL runs code of the table owner's choosing while it
//! does (an IMMUTABLE function in a CHECK constraint is evaluated when a partition is checked or
//! a query planned, an index predicate while the planner proves it), as whoever runs the
//! statement. Called by a superuser on a table an ordinary role owns, that code would run as the
//! superuser. So these functions do what PostgreSQL's own maintenance commands (VACUUM, ANALYZE,
//! REINDEX, REFRESH MATERIALIZED VIEW) do: everything that touches the table runs as its owner,
//! inside a security-restricted operation, with `search_path = pg_catalog, pg_temp`.
//!
//! The caller must have the owner's privileges (be the owner, a member of its role, or a
//! superuser), so acting as the owner never gives anyone more than they had. The work itself is
//! PL/pgSQL (`as_owner.sql`, beside this file), in functions no one else may execute, each of which refuses to
//! run as anyone but the table's owner; they are found by their membership in the extension and
//! called by OID, so nothing a database owner creates in the extension's schema can stand in
//! for them.

use crate::core::partitions::{drop_cutoff, is_time_bound};
use crate::core::time::pg_timestamp_to_unix_ms;
use crate::errors;
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// The OID of the extension's own function `name` (a member of extension snowflake).
fn own_function(name: &str) -> pg_sys::Oid {
    Spi::get_one_with_args::<pg_sys::Oid>(
        "SELECT p.oid FROM pg_catalog.pg_proc p
           JOIN pg_catalog.pg_depend d
             ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
            AND d.objid OPERATOR(pg_catalog.=) p.oid
            AND d.deptype OPERATOR(pg_catalog.=) 'e'
           JOIN pg_catalog.pg_extension e
             ON e.oid OPERATOR(pg_catalog.=) d.refobjid
            AND e.extname OPERATOR(pg_catalog.=) 'snowflake'
          WHERE p.proname OPERATOR(pg_catalog.=) $1::pg_catalog.name",
        &[name.into()],
    )
    .expect("look up the extension's own function")
    .unwrap_or_else(|| panic!("extension snowflake has no function {name}"))
}

/// The owner of table `rel`, after checking that the caller has its privileges.
fn owner_for(rel: pg_sys::Oid, function: &str) -> pg_sys::Oid {
    let found = Spi::connect(|client| {
        client
            .select(
                "SELECT c.relowner,
                        pg_catalog.textsend(pg_catalog.format('%s', c.oid::pg_catalog.regclass))
                   FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1",
                None,
                &[rel.into()],
            )
            .expect("read the table's owner")
            .next()
            .and_then(|row| {
                Some((
                    row.get::<pg_sys::Oid>(1).ok().flatten()?,
                    // The name's bytes, shown as ASCII with the others escaped: a SQL_ASCII
                    // database may hold any bytes, which no conversion to UTF-8 accepts.
                    row.get::<Vec<u8>>(2)
                        .ok()
                        .flatten()
                        .unwrap_or_default()
                        .escape_ascii()
                        .to_string(),
                ))
            })
    });
    let Some((owner, name)) = found else {
        errors::raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", rel.to_u32()),
            None,
            None,
        )
    };
    // SAFETY: a lookup in the role cache for the current user.
    if !unsafe { pg_sys::has_privs_of_role(pg_sys::GetUserId(), owner) } {
        errors::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("must be owner of table {name}"),
            Some(format!(
                "{function} acts as the owner of the table it works on; its caller must have that role's privileges."
            )),
            Some("Run it as the table's owner, a member of its role, or a superuser."),
        )
    }
    owner
}

/// The functions that read a table's largest key lock its writers out first, and the statement
/// that reads it must see every key committed before the lock: in READ COMMITTED it takes its
/// snapshot after the lock, in REPEATABLE READ and SERIALIZABLE the transaction's snapshot may be
/// older (and would miss them: an identity or a floor below an existing key).
fn require_read_committed(function: &str) {
    // SAFETY: plain reads of the transaction's isolation level and of the session's default.
    let (level, default) = unsafe { (pg_sys::XactIsoLevel, pg_sys::DefaultXactIsoLevel) };
    if level >= pg_sys::XACT_REPEATABLE_READ as i32 {
        // A database or role may make another level the default (ALTER DATABASE ... SET
        // default_transaction_isolation): the call on its own is then not READ COMMITTED.
        let hint = if default >= pg_sys::XACT_REPEATABLE_READ as i32 {
            "This session's default_transaction_isolation is not READ COMMITTED: run SET default_transaction_isolation = 'read committed'; first, then call it on its own (or in BEGIN ISOLATION LEVEL READ COMMITTED)."
        } else {
            "Run it in a READ COMMITTED transaction (this session's default), for example on its own."
        };
        errors::raise(
            PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
            format!("{function} cannot run in a REPEATABLE READ or SERIALIZABLE transaction"),
            Some("It reads the table's largest key after locking out its writers; a transaction snapshot taken before the lock could miss keys committed since.".into()),
            Some(hint),
        )
    }
}

/// Runs `f` as `owner`, in a security-restricted operation with a safe search_path, as
/// PostgreSQL's maintenance commands do. An error inside rolls back the user and the settings
/// with the (sub)transaction it aborts.
fn as_owner<R>(owner: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let mut user = pg_sys::InvalidOid;
    let mut context = 0;
    // SAFETY: PostgreSQL's own calls for a security-restricted operation, undone in reverse
    // order below; on error, transaction abort restores both.
    let nest = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        let nest = pg_sys::NewGUCNestLevel();
        // What RestrictSearchPath() does on 17 and later, written out for every major.
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        nest
    };
    let result = f();
    // SAFETY: see above.
    unsafe {
        pg_sys::AtEOXact_GUC(false, nest);
        pg_sys::SetUserIdAndSecContext(user, context);
    }
    result
}

/// Calls the extension's function `name` by OID (no name resolution, no EXECUTE check: only
/// this module calls it, as the table's owner).
fn call(name: &str, args: &[pg_sys::Datum]) -> pg_sys::Datum {
    let f = own_function(name);
    let none = pg_sys::InvalidOid;
    // SAFETY: the function's arguments are those its SQL declaration names (as_owner.sql),
    // none NULL, and it never returns NULL.
    unsafe {
        match args {
            [a, b] => pg_sys::OidFunctionCall2Coll(f, none, *a, *b),
            [a, b, c] => pg_sys::OidFunctionCall3Coll(f, none, *a, *b, *c),
            [a, b, c, d] => pg_sys::OidFunctionCall4Coll(f, none, *a, *b, *c, *d),
            [a, b, c, d, e, g] => pg_sys::OidFunctionCall6Coll(f, none, *a, *b, *c, *d, *e, *g),
            _ => unreachable!("no function of as_owner.sql takes {} arguments", args.len()),
        }
    }
}

/// The elements of a non-NULL array returned by one of the functions of as_owner.sql.
fn array<T, R>(datum: pg_sys::Datum, each: impl Fn(T::As<'_>) -> R) -> Vec<Option<R>>
where
    T: pgrx::datum::UnboxDatum,
{
    // SAFETY: a non-NULL array of T, as the function's declaration says.
    let a = unsafe { pgrx::datum::Array::<T>::from_datum(datum, false) };
    a.map(|a| a.iter().map(|e| e.map(&each)).collect())
        .unwrap_or_default()
}

/// The SQL declarations are in `as_owner.sql` (their argument types, regclass and name,
/// have no Rust type here): `tbl` is a regclass and `col` a name, passed on as they came.
#[pg_extern(sql = false)]
fn snowflake_adopt(tbl: pg_sys::Oid, col: &std::ffi::CStr) -> Option<i64> {
    let col_name = col;
    // A `name` is a NUL-terminated array of bytes: passed on as it came.
    let col = pg_sys::Datum::from(col.as_ptr());
    let owner = owner_for(tbl, "snowflake_adopt()");
    require_read_committed("snowflake_adopt()");
    let tbl_datum = pg_sys::Datum::from(tbl);
    // Checks, locks the table against writers, reads its largest key.
    let max = as_owner(owner, || {
        array::<i64, _>(call("_snowflake_adopt_lock", &[tbl_datum, col]), |id| id)
    });
    let max = max.first().copied().flatten();
    // The floor is the caller's to raise (snowflake_set_floor is revoked from PUBLIC): asked for
    // with the caller's rights, under the lock taken above.
    if let Some(id) = max {
        let set_floor = own_function("snowflake_set_floor");
        let allowed = Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.has_function_privilege($1, 'EXECUTE')",
            &[set_floor.into()],
        )
        .expect("check the privilege on snowflake_set_floor")
        .unwrap_or(false);
        if !allowed {
            errors::raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                "permission denied for function snowflake_set_floor".into(),
                Some(format!(
                    "snowflake_adopt() raises the generator's floor above the table's largest key ({id}), which needs EXECUTE on snowflake_set_floor(bigint)."
                )),
                Some("Run it as a superuser."),
            );
        }
        crate::status::set_floor(id, true);
    }
    // The default is built from snowflake_nextval()'s OID; the first ID is drawn here, by no
    // name, and must be above every existing key.
    let nextval = own_function("snowflake_nextval");
    let first = as_owner(owner, || {
        call("_snowflake_adopt_switch", &[tbl_datum, col]);
        set_default(tbl, col_name, nextval);
        crate::api::next_id()
    });
    if let Some(id) = max.filter(|&id| first <= id) {
        errors::raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("snowflake_nextval() returned {first}, not above the existing maximum {id}"),
            None,
            None,
        )
    }
    max
}

/// `ALTER TABLE tbl ALTER COLUMN col SET DEFAULT snowflake_nextval()` on the table and on every
/// table that inherits from it (its partitions), as ALTER TABLE recurses, with the expression
/// built from the function's OID: no name is parsed. (Parsed, `snowflake_nextval()` found
/// whatever a role that may create in the extension's schema had put there: a
/// `snowflake_nextval(integer DEFAULT 0)` of hers made it ambiguous, 42725; issue 49.)
/// `_snowflake_adopt_switch` has dropped the old defaults with ALTER TABLE, which checked the
/// column and locked each of these tables.
fn set_default(tbl: pg_sys::Oid, col: &std::ffi::CStr, nextval: pg_sys::Oid) {
    let rels: Vec<pg_sys::Oid> = Spi::connect(|client| {
        client
            .select(
                "WITH RECURSIVE t(relid) AS (
                     SELECT $1::pg_catalog.oid
                     UNION ALL
                     SELECT i.inhrelid FROM pg_catalog.pg_inherits i
                       JOIN t ON i.inhparent OPERATOR(pg_catalog.=) t.relid)
                 SELECT relid FROM t",
                None,
                &[tbl.into()],
            )
            .expect("list the table and the tables that inherit from it")
            .filter_map(|row| row.get::<pg_sys::Oid>(1).ok().flatten())
            .collect()
    });
    for rel in rels {
        // SAFETY: PostgreSQL's own calls of ALTER TABLE ... SET DEFAULT (ATExecColumnDefault and
        // StoreAttrDefault), on a table of this transaction's, under the lock ALTER TABLE takes;
        // the expression is a call of a function without arguments that returns bigint.
        unsafe {
            let attnum = pg_sys::get_attnum(rel, col.as_ptr());
            if attnum == pg_sys::InvalidAttrNumber as pg_sys::AttrNumber {
                continue;
            }
            let r = pg_sys::table_open(rel, pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE);
            pg_sys::RemoveAttrDefault(
                rel,
                attnum,
                pg_sys::DropBehavior::DROP_RESTRICT,
                false,
                true,
            );
            pg_sys::CommandCounterIncrement();
            let expr = pg_sys::makeFuncExpr(
                nextval,
                pg_sys::INT8OID,
                std::ptr::null_mut(),
                pg_sys::InvalidOid,
                pg_sys::InvalidOid,
                pg_sys::CoercionForm::COERCE_EXPLICIT_CALL,
            );
            #[cfg(any(feature = "pg15", feature = "pg16", feature = "pg17"))]
            pg_sys::StoreAttrDefault(r, attnum, expr.cast(), false, false);
            #[cfg(any(feature = "pg18", feature = "pg19"))]
            pg_sys::StoreAttrDefault(r, attnum, expr.cast(), false);
            pg_sys::table_close(r, pg_sys::NoLock as pg_sys::LOCKMODE);
            pg_sys::CommandCounterIncrement();
        }
    }
}

/// Raises the generator's floor above the largest key of `tbl.col`, read as the table's owner:
/// what a superuser runs after a failover (`snowflake_set_floor(max(id)) FROM t` would plan the
/// query, and so evaluate the table owner's index predicates, as the superuser). Its EXECUTE is
/// revoked from PUBLIC, as `snowflake_set_floor(bigint)`'s is. Returns the key, NULL for an
/// empty table (the floor is then unchanged).
#[pg_extern(sql = false)]
fn snowflake_set_floor_from(tbl: pg_sys::Oid, col: &std::ffi::CStr) -> Option<i64> {
    let col = pg_sys::Datum::from(col.as_ptr());
    let owner = owner_for(tbl, "snowflake_set_floor_from()");
    require_read_committed("snowflake_set_floor_from()");
    let max = as_owner(owner, || {
        array::<i64, _>(
            call("_snowflake_max_key", &[tbl.into(), col, false.into()]),
            |id| id,
        )
    });
    let max = max.first().copied().flatten();
    if let Some(id) = max {
        crate::status::set_floor(id, true);
    }
    max
}

/// The reverse of `snowflake_adopt`, for removing the extension: as the table's owner, the
/// column's snowflake default becomes an identity (`GENERATED BY DEFAULT`) that continues above
/// the largest key. Returns that key (NULL for an empty table).
#[pg_extern(sql = false)]
fn snowflake_unadopt(tbl: pg_sys::Oid, col: &std::ffi::CStr) -> Option<i64> {
    let col = pg_sys::Datum::from(col.as_ptr());
    let owner = owner_for(tbl, "snowflake_unadopt()");
    require_read_committed("snowflake_unadopt()");
    let max = as_owner(owner, || {
        array::<i64, _>(
            call("_snowflake_max_key", &[tbl.into(), col, true.into()]),
            |id| id,
        )
    });
    max.first().copied().flatten()
}

#[pg_extern(sql = false)]
fn snowflake_create_partitions(
    parent: pg_sys::Oid,
    from_ts: TimestampWithTimeZone,
    to_ts: TimestampWithTimeZone,
    step: Interval,
) -> SetOfIterator<'static, pg_sys::Oid> {
    let owner = owner_for(parent, "snowflake_create_partitions()");
    let made = as_owner(owner, || {
        // Checks the parent's partitioning first.
        crate::partitions::list(parent);
        let bounds: Vec<TimestampWithTimeZone> = array::<TimestampWithTimeZone, _>(
            call(
                "_snowflake_partition_steps",
                &[
                    parent.into(),
                    from_ts.into_datum().unwrap(),
                    to_ts.into_datum().unwrap(),
                    step.into_datum().unwrap(),
                    crate::api::snowflake_timestamp(0).into_datum().unwrap(),
                    crate::api::snowflake_timestamp(i64::MAX)
                        .into_datum()
                        .unwrap(),
                ],
            ),
            |ts| ts,
        )
        .into_iter()
        .flatten()
        .collect();
        // Times outside the layout are refused (22008) before anything is made.
        let ids: Vec<i64> = bounds
            .iter()
            .map(|&ts| crate::api::snowflake_min_id(ts))
            .collect();
        array::<pg_sys::Oid, _>(
            call(
                "_snowflake_create_partitions",
                &[
                    parent.into(),
                    bounds.into_datum().unwrap(),
                    ids.into_datum().unwrap(),
                ],
            ),
            |oid| oid,
        )
    });
    SetOfIterator::new(made.into_iter().flatten())
}

#[pg_extern(sql = false)]
fn snowflake_drop_partitions(
    parent: pg_sys::Oid,
    older_than: TimestampWithTimeZone,
) -> SetOfIterator<'static, String> {
    let owner = owner_for(parent, "snowflake_drop_partitions()");
    let dropped = as_owner(owner, || {
        let parts = crate::partitions::list(parent);
        // Only a table whose every partition has snowflake time bounds: a table partitioned on
        // other keys (a bigserial's 1..1000, 1000..2000) would otherwise have every partition
        // "before" the cut-off. It is refused whole, and nothing is dropped.
        if let Some(p) = parts
            .iter()
            .find(|p| !is_time_bound(p.from_id) || !is_time_bound(p.to_id))
        {
            let show = |b: Option<i64>, open: &str| b.map_or(open.to_string(), |v| v.to_string());
            errors::raise(
                PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                format!(
                    "partition {} of {} does not have snowflake time bounds",
                    relation_name(p.oid),
                    relation_name(parent)
                ),
                Some(format!(
                    "Its bounds are FROM ({}) TO ({}). A snowflake time partition is bounded by snowflake_min_id() of its start and end: the first ID of a millisecond, a multiple of 4194304 (2^22).",
                    show(p.from_id, "MINVALUE"),
                    show(p.to_id, "MAXVALUE")
                )),
                Some("snowflake_drop_partitions only drops partitions of tables keyed by snowflake IDs (made by snowflake_create_partitions, or pg_partman with an interval of whole milliseconds); nothing was dropped. Drop other partitions with DROP TABLE."),
            )
        }
        // A cut-off before the epoch covers no ID: nothing is dropped (the daily job of a young
        // epoch asks for 90 days ago). One past the layout's last millisecond covers every ID.
        let us: i64 = older_than.into_inner();
        let ms = pg_timestamp_to_unix_ms(us).unwrap_or(if us < 0 { i64::MIN } else { i64::MAX });
        let Some(cutoff) = drop_cutoff(ms, crate::config::epoch_ms()) else {
            return Vec::new();
        };
        let mut old: Vec<_> = parts
            .into_iter()
            .filter_map(|p| p.to_id.filter(|&to| to <= cutoff).map(|to| (to, p.oid)))
            .collect();
        old.sort_by_key(|&(to, oid)| (to, oid.to_u32()));
        let oids: Vec<pg_sys::Oid> = old.into_iter().map(|(_, oid)| oid).collect();
        array::<&str, _>(
            call(
                "_snowflake_drop_partitions",
                &[parent.into(), oids.into_datum().unwrap()],
            ),
            |name| name.to_string(),
        )
    });
    SetOfIterator::new(dropped.into_iter().flatten())
}

/// A relation's name as the functions of as_owner.sql show it (qualified: they run with
/// `search_path = pg_catalog, pg_temp`), its bytes as ASCII.
fn relation_name(rel: pg_sys::Oid) -> String {
    Spi::get_one_with_args::<Vec<u8>>(
        "SELECT pg_catalog.textsend(pg_catalog.format('%s', $1::pg_catalog.regclass))",
        &[rel.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_default()
    .escape_ascii()
    .to_string()
}

extension_sql_file!(
    "as_owner.sql",
    name = "as_owner",
    requires = ["snowflake_set_floor_revoked", "snowflake_nextval"]
);
