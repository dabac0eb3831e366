-- snowflake 1.1.0 -> 1.2.0: time partitions on the snowflake key, and the fleet check's columns
-- in snowflake_node().
-- Frozen once released; the upgrade test checks that an upgraded install equals a fresh one.
\echo Use "ALTER EXTENSION snowflake UPDATE TO '1.2.0'" to load this file. \quit

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
    base_name name;
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
            part_name := base_name || '_' || to_char(lower_ts AT TIME ZONE 'UTC',
                CASE WHEN step < interval '1 day' THEN 'YYYYMMDD_HH24MI' ELSE 'YYYYMMDD' END);
            -- An overlap with a partition of other bounds, or a name taken by another table,
            -- is PostgreSQL's own error, and rolls back every partition this call made.
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

-- snowflake_node() reports this server's system identifier and a conflicting claim: its result
-- type changes. A view or a function made on the 1.1.0 one depends on it (by OID), and would stop
-- the update: such a function is kept for them, renamed snowflake_node_1_1(), bound to the
-- library's 1.1.0 columns, and left outside the extension (a WARNING names its dependents).
-- Without dependents it is simply replaced. (Changed in 1.5.0: this script used to drop it,
-- which failed with a dependent view.)
DO $keep$
DECLARE
    dependents text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', ')
      INTO dependents
      FROM pg_catalog.pg_depend d
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) '@extschema@.snowflake_node()'::pg_catalog.regprocedure
       AND d.deptype OPERATOR(pg_catalog.=) 'n';
    IF dependents IS NULL THEN
        DROP FUNCTION @extschema@.snowflake_node();
    ELSE
        ALTER FUNCTION @extschema@.snowflake_node() RENAME TO snowflake_node_1_1;
        CREATE OR REPLACE FUNCTION @extschema@.snowflake_node_1_1() RETURNS TABLE (
            datacenter_id int, worker_id int, epoch timestamptz, max_clock_drift_ms bigint,
            last_timestamp timestamptz, lead_ms bigint, lease_until timestamptz, lease_worker_pid int)
        STRICT VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_node_1_1_wrapper';
        ALTER EXTENSION snowflake DROP FUNCTION @extschema@.snowflake_node_1_1();
        RAISE WARNING 'snowflake_node() of 1.1.0 is kept as snowflake_node_1_1() for %', dependents
            USING DETAIL = 'snowflake_node() has more columns from 1.2.0 on; these objects keep the columns they were made with.',
                  HINT = 'Recreate them on snowflake_node() when convenient, then drop snowflake_node_1_1().';
    END IF;
END
$keep$;
CREATE  FUNCTION "snowflake_node"() RETURNS TABLE (
	"datacenter_id" INT,  /* i32 */
	"worker_id" INT,  /* i32 */
	"epoch" timestamp with time zone,  /* TimestampWithTimeZone */
	"max_clock_drift_ms" bigint,  /* i64 */
	"last_timestamp" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lead_ms" bigint,  /* i64 */
	"lease_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lease_worker_pid" INT,  /* Option < i32 > */
	"system_identifier" bigint,  /* i64 */
	"claim_conflict_with" bigint,  /* Option < i64 > */
	"claim_conflict_seen" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_node_wrapper';
