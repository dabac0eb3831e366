//! Time partitions on a snowflake key: a snowflake ID is a timestamp, so a table keyed by it can
//! be range-partitioned by time with no `created_at` column, one range of IDs per day (or hour).
//! The bounds are `snowflake_min_id()` of each step's start, so a row lands in the partition of
//! the millisecond its ID carries.
//!
//! `snowflake_partitions()` is PL/pgSQL (`partitions.sql`, beside this file): catalog reading,
//! with the arithmetic of the SQL functions of [`crate::api`]. The functions that create and drop
//! partitions act as the table's owner ([`crate::as_owner`]).

#[allow(unused_imports)] // named by `requires` below
use crate::api::{snowflake_min_id, snowflake_timestamp};
use pgrx::prelude::*;

extension_sql_file!(
    "partitions.sql",
    name = "snowflake_partitions",
    requires = [snowflake_min_id, snowflake_timestamp]
);
