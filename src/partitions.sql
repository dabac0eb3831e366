-- The partitions of a table range-partitioned on one bigint column, with their bounds as IDs and
-- as times. A MINVALUE or MAXVALUE bound is NULL; the default partition is not listed. Rust
-- (partitions.rs): it calls nothing of the extension by name.
CREATE FUNCTION snowflake_partitions(
    parent regclass,
    OUT partition regclass,
    OUT from_id bigint,
    OUT to_id bigint,
    OUT from_ts timestamptz,
    OUT to_ts timestamptz
) RETURNS SETOF record
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'snowflake_partitions_wrapper';
COMMENT ON FUNCTION snowflake_partitions(regclass) IS
  'The range partitions of a table partitioned on its snowflake key, with their bounds as IDs and as times';
