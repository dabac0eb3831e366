-- snowflake 1.2.0 -> 1.3.0: snowflake_stats() counts forward clock jumps;
-- snowflake_drop_partitions() refuses tables whose partitions are not snowflake time ranges;
-- snowflake_create_partitions() keeps partition names distinct past 63 bytes; snowflake_adopt()
-- takes only tables and qualifies max().
-- Frozen once released; the upgrade test checks that an upgraded install equals a fresh one.
\echo Use "ALTER EXTENSION snowflake UPDATE TO '1.3.0'" to load this file. \quit

-- snowflake_stats()'s result type changes. As snowflake_node() in the 1.1.0 -> 1.2.0 script: a
-- function that views or functions depend on is kept for them as snowflake_stats_1_2(), with
-- the columns of 1.2.0, outside the extension. (Changed in 1.5.0: this script used to drop it.)
DO $keep$
DECLARE
    dependents text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', ')
      INTO dependents
      FROM pg_catalog.pg_depend d
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) '@extschema@.snowflake_stats()'::pg_catalog.regprocedure
       AND d.deptype OPERATOR(pg_catalog.=) 'n';
    IF dependents IS NULL THEN
        DROP FUNCTION @extschema@.snowflake_stats();
    ELSE
        ALTER FUNCTION @extschema@.snowflake_stats() RENAME TO snowflake_stats_1_2;
        CREATE OR REPLACE FUNCTION @extschema@.snowflake_stats_1_2() RETURNS TABLE (
            ids_issued bigint, borrowed_ms bigint, clock_back_events bigint,
            largest_clock_back_ms bigint, waits bigint, errors bigint)
        STRICT VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_stats_1_2_wrapper';
        ALTER EXTENSION snowflake DROP FUNCTION @extschema@.snowflake_stats_1_2();
        RAISE WARNING 'snowflake_stats() of 1.2.0 is kept as snowflake_stats_1_2() for %', dependents
            USING DETAIL = 'snowflake_stats() has more columns from 1.3.0 on; these objects keep the columns they were made with.',
                  HINT = 'Recreate them on snowflake_stats() when convenient, then drop snowflake_stats_1_2().';
    END IF;
END
$keep$;
CREATE  FUNCTION "snowflake_stats"() RETURNS TABLE (
	"ids_issued" bigint,  /* i64 */
	"borrowed_ms" bigint,  /* i64 */
	"clock_back_events" bigint,  /* i64 */
	"largest_clock_back_ms" bigint,  /* i64 */
	"clock_forward_jumps" bigint,  /* i64 */
	"largest_clock_forward_ms" bigint,  /* i64 */
	"waits" bigint,  /* i64 */
	"errors" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_stats_wrapper';

-- Creates the partitions of the steps in [from_ts, to_ts), both ends rounded down to a step
-- boundary in UTC (days at midnight, hours on the hour, weeks on Mondays), and at least the step
-- that holds from_ts. All or nothing: one transaction.
CREATE OR REPLACE FUNCTION snowflake_create_partitions(
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
CREATE OR REPLACE FUNCTION snowflake_drop_partitions(parent regclass, older_than timestamptz)
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

-- Switches an existing bigint key (bigserial, identity, or plain) to snowflake_nextval() with
-- only a brief lock: writers wait for the switch, readers do not.
CREATE OR REPLACE FUNCTION snowflake_adopt(tbl regclass, col name DEFAULT 'id') RETURNS bigint
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
