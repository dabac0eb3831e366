-- snowflake 1.4.0 -> 1.5.0: snowflake_adopt(), snowflake_create_partitions() and
-- snowflake_drop_partitions() act as the owner of the table they work on, in a
-- security-restricted operation (C functions over PL/pgSQL ones that only the owner runs).
-- snowflake_horizon() no longer moves an idle generator: snowflake_advance_horizon() does, for
-- the role the DBA grants it to. snowflake_node() says whether this server's pair was set
-- (pair_set).
-- Frozen once released; the upgrade test checks that an upgraded install equals a fresh one.
\echo Use "ALTER EXTENSION snowflake UPDATE TO '1.5.0'" to load this file. \quit

-- What a superuser runs on someone else's table runs as that table's owner (see as_owner.rs):
-- the C functions snowflake_adopt, snowflake_create_partitions and snowflake_drop_partitions
-- check that their caller has the owner's privileges, then call the PL/pgSQL functions below by
-- OID as the owner, in a security-restricted operation. No one may execute those directly, and
-- each refuses to run as anyone but the table's owner.

CREATE OR REPLACE FUNCTION snowflake_adopt(tbl regclass, col name DEFAULT 'id') RETURNS bigint
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_adopt_wrapper';
COMMENT ON FUNCTION snowflake_adopt(regclass, name) IS
  'Switch an existing bigint key to DEFAULT snowflake_nextval(), guaranteeing new IDs above existing ones; returns the old maximum';

CREATE OR REPLACE FUNCTION snowflake_create_partitions(
    parent regclass,
    from_ts timestamptz,
    to_ts timestamptz,
    step interval DEFAULT '1 day'
) RETURNS SETOF regclass
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_create_partitions_wrapper';
COMMENT ON FUNCTION snowflake_create_partitions(regclass, timestamptz, timestamptz, interval) IS
  'Create the missing range partitions of a snowflake-keyed table for the steps in [from_ts, to_ts), both rounded down to UTC step boundaries; returns those created';

CREATE OR REPLACE FUNCTION snowflake_drop_partitions(parent regclass, older_than timestamptz)
RETURNS SETOF text
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_drop_partitions_wrapper';
COMMENT ON FUNCTION snowflake_drop_partitions(regclass, timestamptz) IS
  'Drop the partitions of a snowflake-keyed table whose whole ID range lies before older_than; returns their names';

CREATE FUNCTION _snowflake_adopt_lock(tbl regclass, col name) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- Under FORCE ROW LEVEL SECURITY the owner would see only some rows, and the largest key could
-- be hidden: an error then, never a smaller maximum.
SET row_security = off
AS $fn$
DECLARE
    typ regtype;
    max_id bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class c
                    WHERE c.oid = tbl
                      AND c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('_snowflake_adopt_lock runs only as the owner of %s', tbl),
            HINT = 'Call snowflake_adopt(), which acts as the table''s owner.';
    END IF;
    SELECT a.atttypid::regtype INTO typ
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_column',
            MESSAGE = format('column "%s" of relation %s does not exist', col, tbl);
    END IF;
    -- A view or a foreign table has no key of its own to switch: only tables.
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
    -- No writer may add an old-style key between reading the maximum and switching the default
    -- (the lock lasts until the caller's transaction ends).
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', tbl);
    EXECUTE format('SELECT pg_catalog.max(%I) FROM %s', col, tbl) INTO max_id;
    RETURN ARRAY[max_id];
END
$fn$;

CREATE FUNCTION _snowflake_adopt_switch(tbl regclass, col name, old_max bigint[]) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ident "char";
    max_id bigint := old_max[1];
    first_id bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class c
                    WHERE c.oid = tbl
                      AND c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('_snowflake_adopt_switch runs only as the owner of %s', tbl),
            HINT = 'Call snowflake_adopt(), which acts as the table''s owner.';
    END IF;
    SELECT a.attidentity INTO ident
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
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
    RETURN first_id;
END
$fn$;

CREATE FUNCTION _snowflake_create_partitions(
    parent regclass,
    from_ts timestamptz,
    to_ts timestamptz,
    step interval
) RETURNS regclass[]
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
    made regclass[] := '{}';
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class c
                    WHERE c.oid = parent
                      AND c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('_snowflake_create_partitions runs only as the owner of %s', parent),
            HINT = 'Call snowflake_create_partitions(), which acts as the table''s owner.';
    END IF;
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
            made := made || format('%I.%I', schema_name, part_name)::regclass;
        END IF;
        lower_ts := upper_ts;
    END LOOP;
    RETURN made;
END
$fn$;
CREATE FUNCTION _snowflake_drop_partitions(parent regclass, older_than timestamptz)
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    cutoff bigint := @extschema@.snowflake_min_id(older_than);
    p record;
    part_name text;
    dropped text[] := '{}';
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class c
                    WHERE c.oid = parent
                      AND c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('_snowflake_drop_partitions runs only as the owner of %s', parent),
            HINT = 'Call snowflake_drop_partitions(), which acts as the table''s owner.';
    END IF;
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
        dropped := dropped || part_name;
    END LOOP;
    RETURN dropped;
END
$fn$;
REVOKE EXECUTE ON FUNCTION _snowflake_adopt_lock(regclass, name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_adopt_switch(regclass, name, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_create_partitions(regclass, timestamptz, timestamptz, interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_drop_partitions(regclass, timestamptz) FROM PUBLIC;

CREATE FUNCTION "snowflake_advance_horizon"() RETURNS bigint
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_advance_horizon_wrapper';
REVOKE EXECUTE ON FUNCTION snowflake_advance_horizon() FROM PUBLIC;
COMMENT ON FUNCTION snowflake_advance_horizon() IS 'snowflake_horizon() after committing an idle generator to the previous millisecond, so that an idle writer''s published horizon keeps up with time; for the role that publishes horizons';

CREATE FUNCTION "snowflake_horizon_holders"() RETURNS TABLE (
	"pid" INT,
	"prepared_xid" bigint,
	"held_id" bigint
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_horizon_holders_wrapper';
COMMENT ON FUNCTION snowflake_horizon_holders() IS 'Who holds the horizon back: the backends (pid) and prepared transactions (prepared_xid) whose open transaction holds an ID, with the smallest ID each holds';

-- snowflake_node() gains pair_set: its result type changes. As in the 1.1.0 -> 1.2.0 script, a
-- function that views or functions depend on is kept for them as snowflake_node_1_4(), with the
-- columns of 1.2.0 to 1.4.0, outside the extension; without dependents it is replaced.
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
        ALTER FUNCTION @extschema@.snowflake_node() RENAME TO snowflake_node_1_4;
        CREATE OR REPLACE FUNCTION @extschema@.snowflake_node_1_4() RETURNS TABLE (
            datacenter_id int, worker_id int, epoch timestamptz, max_clock_drift_ms bigint,
            last_timestamp timestamptz, lead_ms bigint, lease_until timestamptz, lease_worker_pid int,
            system_identifier bigint, claim_conflict_with bigint, claim_conflict_seen timestamptz)
        STRICT VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_node_1_4_wrapper';
        ALTER EXTENSION snowflake DROP FUNCTION @extschema@.snowflake_node_1_4();
        RAISE WARNING 'snowflake_node() of 1.4.0 is kept as snowflake_node_1_4() for %', dependents
            USING DETAIL = 'snowflake_node() has the column pair_set from 1.5.0 on; these objects keep the columns they were made with.',
                  HINT = 'Recreate them on snowflake_node() when convenient, then drop snowflake_node_1_4().';
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
	"claim_conflict_seen" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"pair_set" bool  /* bool */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_node_wrapper';
