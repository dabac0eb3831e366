//! Time partitions on a snowflake key: a snowflake ID is a timestamp, so a table keyed by it can
//! be range-partitioned by time with no `created_at` column, one range of IDs per day (or hour).
//! The bounds are `snowflake_min_id()` of each step's start, so a row lands in the partition of
//! the millisecond its ID carries.
//!
//! `snowflake_partitions()` reads the catalog here, in Rust, with every name and operator
//! qualified by `pg_catalog`: it calls nothing of the extension by name, so no function that
//! another role creates beside the extension can stand in for one of its own (issue 49). The
//! functions that create and drop partitions act as the table's owner ([`crate::as_owner`]) and
//! list partitions through [`list`].

use crate::core::partitions::parse_bound;
use crate::errors;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// One range partition of a table partitioned on its snowflake key: `None` for an open end.
pub(crate) struct Part {
    pub oid: pg_sys::Oid,
    pub from_id: Option<i64>,
    pub to_id: Option<i64>,
}

/// The name of a relation for messages, its bytes shown as ASCII (a SQL_ASCII database may hold
/// any bytes).
const NAME: &str = "pg_catalog.textsend(pg_catalog.format('%I.%I', n.nspname, c.relname))";

fn name_of(bytes: Option<Vec<u8>>) -> String {
    bytes.unwrap_or_default().escape_ascii().to_string()
}

/// The range partitions of `parent` (the default partition left out), ordered by their lower
/// bound, after checking that it is range-partitioned on one bigint column.
pub(crate) fn list(parent: pg_sys::Oid) -> Vec<Part> {
    type Kind = (
        Option<i8>,
        Option<i8>,
        Option<i16>,
        Option<pg_sys::Oid>,
        Option<Vec<u8>>,
        Option<String>,
    );
    let found: Option<Kind> = Spi::connect(|client| {
        let q = format!(
            "SELECT c.relkind, p.partstrat, p.partnatts, a.atttypid, {NAME},
                    CASE WHEN p.partrelid IS NOT NULL THEN pg_catalog.pg_get_partkeydef(c.oid) END
               FROM pg_catalog.pg_class c
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
               LEFT JOIN pg_catalog.pg_partitioned_table p ON p.partrelid OPERATOR(pg_catalog.=) c.oid
               LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid
                    AND a.attnum OPERATOR(pg_catalog.=) p.partattrs[0]
              WHERE c.oid OPERATOR(pg_catalog.=) $1"
        );
        let mut rows = client
            .select(q.as_str(), None, &[parent.into()])
            .expect("read the table's partitioning");
        rows.next().map(|r| {
            (
                r.get::<i8>(1).ok().flatten(),
                r.get::<i8>(2).ok().flatten(),
                r.get::<i16>(3).ok().flatten(),
                r.get::<pg_sys::Oid>(4).ok().flatten(),
                r.get::<Vec<u8>>(5).ok().flatten(),
                r.get::<String>(6).ok().flatten(),
            )
        })
    });
    let Some((kind, strategy, nkeys, keytype, name, keydef)) = found else {
        errors::raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {} does not exist", parent.to_u32()),
            None,
            None,
        )
    };
    let name = name_of(name);
    if kind != Some(b'p' as i8) {
        errors::raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a partitioned table"),
            None,
            Some("Create it with PARTITION BY RANGE on its snowflake key, e.g. CREATE TABLE events (id bigint DEFAULT snowflake_nextval(), ...) PARTITION BY RANGE (id)."),
        )
    }
    if strategy != Some(b'r' as i8) || nkeys != Some(1) || keytype != Some(pg_sys::INT8OID) {
        // A prefix: an expression key may be megabytes long, and every call would log it.
        let keydef = keydef.unwrap_or_default();
        let shown = if keydef.chars().count() > 64 {
            format!("{}...", keydef.chars().take(64).collect::<String>())
        } else {
            keydef
        };
        errors::raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not partitioned by range on one bigint column"),
            Some(format!("Its partition key is {shown}.")),
            Some("Snowflake time partitions need PARTITION BY RANGE (id) on the bigint snowflake key."),
        )
    }
    let mut parts: Vec<Part> = Spi::connect(|client| {
        client
            .select(
                r"SELECT s.inhrelid, s.b[1], s.b[2] FROM (
                    SELECT i.inhrelid,
                           pg_catalog.regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                                                   '^FOR VALUES FROM [(](.*)[)] TO [(](.*)[)]$') AS b
                      FROM pg_catalog.pg_inherits i
                      JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid
                     WHERE i.inhparent OPERATOR(pg_catalog.=) $1) s
                  WHERE s.b IS NOT NULL",
                None,
                &[parent.into()],
            )
            .expect("read the partitions' bounds")
            .filter_map(|r| {
                let oid = r.get::<pg_sys::Oid>(1).ok().flatten()?;
                let from = parse_bound(&r.get::<String>(2).ok().flatten()?)?;
                let to = parse_bound(&r.get::<String>(3).ok().flatten()?)?;
                Some(Part {
                    oid,
                    from_id: from,
                    to_id: to,
                })
            })
            .collect()
    });
    parts.sort_by_key(|p| (p.from_id, p.oid.to_u32()));
    parts
}

fn timestamp(id: Option<i64>) -> Option<TimestampWithTimeZone> {
    id.filter(|&id| id >= 0)
        .map(crate::api::snowflake_timestamp)
}

/// The partitions of a table range-partitioned on one bigint column, with their bounds as IDs
/// and as times (declared in partitions.sql: its first column is a regclass).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn snowflake_partitions(
    parent: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(partition, pg_sys::Oid),
        name!(from_id, Option<i64>),
        name!(to_id, Option<i64>),
        name!(from_ts, Option<TimestampWithTimeZone>),
        name!(to_ts, Option<TimestampWithTimeZone>),
    ),
> {
    let rows: Vec<_> = list(parent)
        .into_iter()
        .map(|p| {
            (
                p.oid,
                p.from_id,
                p.to_id,
                timestamp(p.from_id),
                timestamp(p.to_id),
            )
        })
        .collect();
    TableIterator::new(rows)
}

extension_sql_file!("partitions.sql", name = "snowflake_partitions");
