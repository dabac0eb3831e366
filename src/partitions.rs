//! Time partitions on a snowflake key: a snowflake ID is a timestamp, so a table keyed by it can
//! be range-partitioned by time with no `created_at` column, one range of IDs per day (or hour).
//! The bounds are `snowflake_min_id()` of each step's start, so a row lands in the partition of
//! the millisecond its ID carries.
//!
//! These are PL/pgSQL: they are DDL through SPI, and the arithmetic they need is already in the
//! SQL functions of `api.rs`.

#[allow(unused_imports)] // named by `requires` below
use crate::api::{snowflake_min_id, snowflake_timestamp};
use pgrx::prelude::*;

extension_sql!(
    r#"
-- The partitions of a table range-partitioned on one bigint column, with their bounds as IDs and
-- as times. A MINVALUE or MAXVALUE bound is NULL; the default partition is not listed.
CREATE FUNCTION snowflake_partitions(
    parent regclass,
    OUT partition regclass,
    OUT from_id bigint,
    OUT to_id bigint,
    OUT from_ts timestamptz,
    OUT to_ts timestamptz
) RETURNS SETOF record
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    kind "char";
    strategy "char";
    nkeys int;
    keytype oid;
    bounds text[];
BEGIN
    SELECT c.relkind, p.partstrat, p.partnatts, a.atttypid
      INTO kind, strategy, nkeys, keytype
      FROM pg_class c
      LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid
      LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = p.partattrs[0]
     WHERE c.oid = parent;
    IF kind IS DISTINCT FROM 'p' THEN
        RAISE EXCEPTION USING ERRCODE = 'wrong_object_type',
            MESSAGE = format('"%s" is not a partitioned table', parent),
            HINT = 'Create it with PARTITION BY RANGE on its snowflake key, e.g. CREATE TABLE events (id bigint DEFAULT snowflake_nextval(), ...) PARTITION BY RANGE (id).';
    END IF;
    IF strategy <> 'r' OR nkeys <> 1 OR keytype IS DISTINCT FROM 'bigint'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = 'wrong_object_type',
            MESSAGE = format('"%s" is not partitioned by range on one bigint column', parent),
            DETAIL = format('Its partition key is %s.', pg_get_partkeydef(parent)),
            HINT = 'Snowflake time partitions need PARTITION BY RANGE (id) on the bigint snowflake key.';
    END IF;
    FOR partition, bounds IN
        SELECT i.inhrelid::regclass,
               regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \((.*)\) TO \((.*)\)$')
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = parent
    LOOP
        CONTINUE WHEN bounds IS NULL;  -- the default partition
        from_id := nullif(btrim(bounds[1], ''''), 'MINVALUE')::bigint;
        to_id := nullif(btrim(bounds[2], ''''), 'MAXVALUE')::bigint;
        from_ts := CASE WHEN from_id >= 0 THEN @extschema@.snowflake_timestamp(from_id) END;
        to_ts := CASE WHEN to_id >= 0 THEN @extschema@.snowflake_timestamp(to_id) END;
        RETURN NEXT;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION snowflake_partitions(regclass) IS
  'The range partitions of a table partitioned on its snowflake key, with their bounds as IDs and as times';

-- Creates the partitions of the steps in [from_ts, to_ts), both ends rounded down to a step
-- boundary in UTC (days at midnight, hours on the hour, weeks on Mondays), and at least the step
-- that holds from_ts. All or nothing: one transaction.
CREATE FUNCTION snowflake_create_partitions(
    parent regclass,
    from_ts timestamptz,
    to_ts timestamptz,
    step interval DEFAULT '1 day'
) RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    step_ms numeric;
    lower_ts timestamptz;
    upper_ts timestamptz;
    last_ts timestamptz;
    lo bigint;
    hi bigint;
    schema_name name;
    base_name text;
    suffix text;
    keep int;
    part_name text;
BEGIN
    -- Checks the parent's partitioning first.
    PERFORM @extschema@.snowflake_partitions(parent) LIMIT 1;
    step_ms := extract(epoch FROM step) * 1000;
    IF step IS NULL OR extract(month FROM step) <> 0 OR extract(year FROM step) <> 0
       OR step_ms <= 0 OR step_ms % 60000 <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('invalid partition step "%s"', step),
            DETAIL = 'The step must be a positive whole number of minutes; months and years have no fixed length.',
            HINT = 'Use a step such as ''1 day'', ''6 hours'' or ''7 days''.';
    END IF;
    SELECT n.nspname, c.relname INTO schema_name, base_name
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent;
    -- Serialises concurrent calls on one parent; readers and writers are not blocked.
    EXECUTE format('LOCK TABLE %s IN SHARE UPDATE EXCLUSIVE MODE', parent);
    -- 2000-01-03 was a Monday at midnight UTC.
    lower_ts := date_bin(step, from_ts, '2000-01-03 00:00:00+00');
    -- to_ts's own step is left out (unless it is from_ts's): "three days ago to two days ahead"
    -- is five whole days, whatever the time of day.
    last_ts := greatest(date_bin(step, to_ts, '2000-01-03 00:00:00+00'), lower_ts + step);
    WHILE lower_ts < last_ts LOOP
        upper_ts := lower_ts + step;
        lo := @extschema@.snowflake_min_id(lower_ts);
        hi := @extschema@.snowflake_min_id(upper_ts);
        IF NOT EXISTS (SELECT FROM @extschema@.snowflake_partitions(parent) p
                        WHERE p.from_id = lo AND p.to_id = hi) THEN
            suffix := '_' || to_char(lower_ts AT TIME ZONE 'UTC',
                CASE WHEN step < interval '1 day' THEN 'YYYYMMDD_HH24MI' ELSE 'YYYYMMDD' END);
            -- A name longer than max_identifier_length (63 bytes) would be cut at the end, and
            -- neighbouring steps would get one name: the parent's part is shortened instead (by
            -- whole characters), so the date always stays.
            keep := length(base_name);
            WHILE octet_length(left(base_name, keep) || suffix)
                  > current_setting('max_identifier_length')::int LOOP
                keep := keep - 1;
            END LOOP;
            part_name := left(base_name, keep) || suffix;
            IF to_regclass(format('%I.%I', schema_name, part_name)) IS NOT NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'duplicate_table',
                    MESSAGE = format('cannot create partition %I.%I of %s: the name is taken', schema_name, part_name, parent),
                    DETAIL = format('The partition of %s to %s is named after its parent%s, and another table already has that name.',
                                    lower_ts, upper_ts,
                                    CASE WHEN keep < length(base_name) THEN ' (shortened to fit max_identifier_length)' ELSE '' END),
                    HINT = 'Rename the other table, or give the parent a shorter name; nothing was created.';
            END IF;
            -- An overlap with a partition of other bounds is PostgreSQL's own error, and rolls
            -- back every partition this call made.
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%s) TO (%s)',
                           schema_name, part_name, parent, lo, hi);
            RETURN NEXT format('%I.%I', schema_name, part_name)::regclass;
        END IF;
        lower_ts := upper_ts;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION snowflake_create_partitions(regclass, timestamptz, timestamptz, interval) IS
  'Create the missing range partitions of a snowflake-keyed table for the steps in [from_ts, to_ts), both rounded down to UTC step boundaries; returns those created';

-- Drops the partitions whose whole range lies before snowflake_min_id(older_than): none of them
-- can hold an ID of older_than or later.
CREATE FUNCTION snowflake_drop_partitions(parent regclass, older_than timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    cutoff bigint := @extschema@.snowflake_min_id(older_than);
    p record;
    part_name text;
BEGIN
    -- Only a table whose every partition has snowflake time bounds: each bound the first ID of
    -- a millisecond, snowflake_min_id() of some time, which is a multiple of 2^22 = 4194304. A
    -- table partitioned on other keys (a bigserial's 1..1000, 1000..2000) would otherwise have
    -- every partition "before" the cutoff: it is refused whole, and nothing is dropped.
    FOR p IN SELECT * FROM @extschema@.snowflake_partitions(parent)
              WHERE from_id < 0 OR from_id % 4194304 <> 0 OR to_id < 0 OR to_id % 4194304 <> 0
              LIMIT 1 LOOP
        RAISE EXCEPTION USING ERRCODE = 'wrong_object_type',
            MESSAGE = format('partition %s of %s does not have snowflake time bounds', p.partition, parent),
            DETAIL = format('Its bounds are FROM (%s) TO (%s). A snowflake time partition is bounded by snowflake_min_id() of its start and end: the first ID of a millisecond, a multiple of 4194304 (2^22).',
                            coalesce(p.from_id::text, 'MINVALUE'), coalesce(p.to_id::text, 'MAXVALUE')),
            HINT = 'snowflake_drop_partitions only drops partitions of tables keyed by snowflake IDs (made by snowflake_create_partitions, or pg_partman with an interval of whole milliseconds); nothing was dropped. Drop other partitions with DROP TABLE.';
    END LOOP;
    FOR p IN SELECT * FROM @extschema@.snowflake_partitions(parent)
              WHERE to_id IS NOT NULL AND to_id <= cutoff ORDER BY to_id LOOP
        part_name := p.partition::text;
        EXECUTE format('DROP TABLE %s', p.partition);
        RETURN NEXT part_name;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION snowflake_drop_partitions(regclass, timestamptz) IS
  'Drop the partitions of a snowflake-keyed table whose whole ID range lies before older_than; returns their names';
"#,
    name = "snowflake_partitions",
    requires = [snowflake_min_id, snowflake_timestamp]
);
