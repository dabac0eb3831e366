-- snowflake 1.5.0 -> 1.6.0: snowflake_set_floor_from() and snowflake_unadopt() read a table
-- as its owner, for the failover and removal recipes (a superuser who planned max(id) over a
-- table ran its owner's index predicates as superuser). snowflake_node() says who owns the
-- lease database (lease_database_owner, lease_database_trusted) and where the pair came from
-- (pair_source). Partitions are computed in
-- UTC whatever the session's TimeZone (a step of days is that many 24 hours), infinity and times
-- outside the layout are refused before any work, and a cut-off outside the layout drops nothing
-- (before the epoch) or every bounded partition (after its end).
-- Frozen once released; the upgrade test checks that an upgraded install equals a fresh one.
\echo Use "ALTER EXTENSION snowflake UPDATE TO '1.6.0'" to load this file. \quit

CREATE FUNCTION snowflake_set_floor_from(tbl regclass, col name DEFAULT 'id') RETURNS bigint
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_set_floor_from_wrapper';
REVOKE EXECUTE ON FUNCTION snowflake_set_floor_from(regclass, name) FROM PUBLIC;
COMMENT ON FUNCTION snowflake_set_floor_from(regclass, name) IS
  'Make every ID generated from now on greater than the largest key of a table, read as the table''s owner; returns that key';

CREATE FUNCTION snowflake_unadopt(tbl regclass, col name DEFAULT 'id') RETURNS bigint
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_unadopt_wrapper';
COMMENT ON FUNCTION snowflake_unadopt(regclass, name) IS
  'Replace a key''s snowflake default by an identity that continues above its largest key (before DROP EXTENSION); returns that key';

-- The table owner's part of snowflake_set_floor_from (unadopt false: reads the largest key) and
-- of snowflake_unadopt (true: also replaces the key's snowflake default by an identity that
-- continues above it).
CREATE FUNCTION _snowflake_max_key(tbl regclass, col name, unadopt boolean) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- Under FORCE ROW LEVEL SECURITY the owner would see only some rows: an error then, never a
-- smaller maximum.
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
            MESSAGE = format('_snowflake_max_key runs only as the owner of %s', tbl),
            HINT = 'Call snowflake_set_floor_from() or snowflake_unadopt(), which act as the table''s owner.';
    END IF;
    SELECT a.atttypid::regtype INTO typ
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_column',
            MESSAGE = format('column "%s" of relation %s does not exist', col, tbl);
    END IF;
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = tbl) NOT IN ('r', 'p') THEN
        RAISE EXCEPTION USING ERRCODE = 'wrong_object_type',
            MESSAGE = format('%s is not a table', tbl),
            DETAIL = 'Only a plain or partitioned table has keys of its own.';
    END IF;
    IF typ <> 'bigint'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = 'datatype_mismatch',
            MESSAGE = format('column "%s" of relation %s is of type %s, not bigint', col, tbl, typ),
            DETAIL = 'Snowflake IDs need all 64 bits.';
    END IF;
    IF unadopt THEN
        -- Only a default that calls one of snowflake's functions is replaced.
        IF NOT EXISTS (
            SELECT FROM pg_attrdef ad
              JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
              JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
                              AND d.refclassid = 'pg_proc'::regclass
              JOIN pg_depend e ON e.classid = 'pg_proc'::regclass AND e.objid = d.refobjid
                              AND e.refclassid = 'pg_extension'::regclass AND e.deptype = 'e'
              JOIN pg_extension x ON x.oid = e.refobjid AND x.extname = 'snowflake'
             WHERE ad.adrelid = tbl AND a.attname = col) THEN
            RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
                MESSAGE = format('column "%s" of relation %s has no snowflake default', col, tbl),
                HINT = 'snowflake_unadopt replaces a default that calls a snowflake function; nothing was changed.';
        END IF;
        -- No writer may take a snowflake key between reading the maximum and the switch.
        EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', tbl);
    ELSE
        -- Writers in flight commit (or not) before the maximum is read.
        EXECUTE format('LOCK TABLE %s IN SHARE MODE', tbl);
    END IF;
    EXECUTE format('SELECT pg_catalog.max(%I) FROM %s', col, tbl) INTO max_id;
    IF unadopt THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I ADD GENERATED BY DEFAULT AS IDENTITY', tbl, col);
        IF max_id IS NOT NULL THEN
            PERFORM pg_catalog.setval(pg_catalog.pg_get_serial_sequence(tbl::text, col::text), max_id);
        END IF;
    END IF;
    RETURN ARRAY[max_id];
END
$fn$;

REVOKE EXECUTE ON FUNCTION _snowflake_max_key(regclass, name, boolean) FROM PUBLIC;

-- snowflake_node() gains lease_database_owner and lease_database_trusted: its result type
-- changes. As in the 1.4.0 -> 1.5.0 script, a function that views or functions depend on is
-- kept for them as snowflake_node_1_5(), with the columns of 1.5.0, outside the extension;
-- without dependents it is replaced.
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
        -- One left by an earlier installation that was dropped (DROP EXTENSION leaves it, being
        -- no member): a superuser made it, and only a superuser decides what becomes of it.
        IF pg_catalog.to_regprocedure('@extschema@.snowflake_node_1_5()') IS NOT NULL THEN
            RAISE EXCEPTION 'snowflake_node_1_5() exists already in schema @extschema@'
                USING DETAIL = pg_catalog.format('This update keeps snowflake_node() of 1.5.0 under that name for %s; the one there was left by an earlier installation of the extension.', dependents),
                      HINT = 'Drop that snowflake_node_1_5() (recreating what depends on it on snowflake_node()), then update again.';
        END IF;
        ALTER FUNCTION @extschema@.snowflake_node() RENAME TO snowflake_node_1_5;
        CREATE OR REPLACE FUNCTION @extschema@.snowflake_node_1_5() RETURNS TABLE (
            datacenter_id int, worker_id int, epoch timestamptz, max_clock_drift_ms bigint,
            last_timestamp timestamptz, lead_ms bigint, lease_until timestamptz, lease_worker_pid int,
            system_identifier bigint, claim_conflict_with bigint, claim_conflict_seen timestamptz,
            pair_set boolean)
        STRICT VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', 'snowflake_node_1_5_wrapper';
        ALTER EXTENSION snowflake DROP FUNCTION @extschema@.snowflake_node_1_5();
        RAISE WARNING 'snowflake_node() of 1.5.0 is kept as snowflake_node_1_5() for %', dependents
            USING DETAIL = 'snowflake_node() has the columns lease_database_owner, lease_database_trusted and pair_source from 1.6.0 on; these objects keep the columns they were made with.',
                  HINT = 'Recreate them on snowflake_node() when convenient, then drop snowflake_node_1_5().';
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
	"pair_set" bool,  /* bool */
	"lease_database_owner" TEXT,  /* Option < String > */
	"lease_database_trusted" bool,  /* Option < bool > */
	"pair_source" TEXT  /* String */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_node_wrapper';

-- Partitions in UTC, bounded before any work.
CREATE OR REPLACE FUNCTION _snowflake_create_partitions(
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
    steps numeric;
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
    taken regclass;
    existing text[];
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
    -- Its partitions would be temporary too, which an owner acting in a security-restricted
    -- operation may not create.
    IF (SELECT c.relpersistence FROM pg_class c WHERE c.oid = parent) = 't' THEN
        RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
            MESSAGE = format('cannot create partitions of temporary table %s', parent),
            DETAIL = 'snowflake_create_partitions acts as the table''s owner in a security-restricted operation, which may create no temporary table.',
            HINT = 'Create them with CREATE TEMPORARY TABLE ... PARTITION OF, bounded by snowflake_min_id() of each step''s start and end.';
    END IF;
    step_ms := extract(epoch FROM step) * 1000;
    IF step IS NULL OR extract(month FROM step) <> 0 OR extract(year FROM step) <> 0
       OR step_ms <= 0 OR step_ms % 60000 <> 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('invalid partition step "%s"', step),
            DETAIL = 'The step must be a positive whole number of minutes; months and years have no fixed length.',
            HINT = 'Use a step such as ''1 day'', ''6 hours'' or ''7 days''.';
    END IF;
    -- A step of days is that many 24 hours, in every session: an interval of seconds only, which
    -- timestamptz arithmetic adds as elapsed time (an interval of days would be added in the
    -- session's TimeZone, 23 or 25 hours across a daylight-saving change).
    step := make_interval(secs => step_ms / 1000);
    -- Infinity and times outside the layout are refused before any work (snowflake_min_id
    -- raises 22008 for them), the last step's end included.
    IF NOT isfinite(from_ts) OR NOT isfinite(to_ts) THEN
        RAISE EXCEPTION USING ERRCODE = 'datetime_field_overflow',
            MESSAGE = 'timestamp out of range for a snowflake ID',
            DETAIL = format('Partitions are made from %s to %s; infinite timestamps cannot be encoded.', from_ts, to_ts);
    END IF;
    -- 2000-01-03 was a Monday at midnight UTC; date_bin counts elapsed time.
    lower_ts := date_bin(step, from_ts, '2000-01-03 00:00:00+00');
    -- to_ts's own step is left out (unless it is from_ts's): "three days ago to two days ahead"
    -- is five whole days, whatever the time of day.
    last_ts := greatest(date_bin(step, to_ts, '2000-01-03 00:00:00+00'), lower_ts + step);
    PERFORM @extschema@.snowflake_min_id(lower_ts), @extschema@.snowflake_min_id(last_ts);
    steps := (extract(epoch FROM last_ts) - extract(epoch FROM lower_ts)) * 1000 / step_ms;
    -- Each partition made holds locks until the transaction ends, in the lock table every
    -- session shares (max_locks_per_transaction 64 by default): well within it.
    IF steps > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded',
            MESSAGE = format('too many partitions: %s steps of %s from %s to %s', steps, step, lower_ts, last_ts),
            DETAIL = 'snowflake_create_partitions makes at most 1000 partitions in one call.',
            HINT = 'Premake a shorter range, or use a longer step.';
    END IF;
    SELECT n.nspname, c.relname INTO schema_name, base_name
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent;
    -- Serialises concurrent calls on one parent; readers and writers are not blocked.
    EXECUTE format('LOCK TABLE %s IN SHARE UPDATE EXCLUSIVE MODE', parent);
    -- The bounds that exist, read once (after the lock: a concurrent call's are committed).
    existing := ARRAY(SELECT p.from_id || '/' || p.to_id FROM @extschema@.snowflake_partitions(parent) p);
    WHILE lower_ts < last_ts LOOP
        upper_ts := lower_ts + step;
        lo := @extschema@.snowflake_min_id(lower_ts);
        hi := @extschema@.snowflake_min_id(upper_ts);
        IF NOT (lo || '/' || hi) = ANY (existing) THEN
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
            taken := to_regclass(format('%I.%I', schema_name, part_name));
            IF taken IS NOT NULL AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = taken) THEN
                -- Made by a transaction that committed after this one's snapshot was taken
                -- (REPEATABLE READ or SERIALIZABLE): this one cannot see what it made.
                RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                    MESSAGE = format('could not create partition %I.%I of %s because of a concurrent snowflake_create_partitions', schema_name, part_name, parent),
                    DETAIL = 'Another transaction created it after this transaction''s snapshot was taken.',
                    HINT = 'Retry the transaction.';
            END IF;
            IF taken IS NOT NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'duplicate_table',
                    MESSAGE = format('cannot create partition %I.%I of %s: the name is taken', schema_name, part_name, parent),
                    DETAIL = format('The partition of %s to %s (UTC) is named after its parent%s, and another table already has that name.',
                                    lower_ts AT TIME ZONE 'UTC', upper_ts AT TIME ZONE 'UTC',
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
CREATE OR REPLACE FUNCTION _snowflake_drop_partitions(parent regclass, older_than timestamptz)
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    cutoff bigint;
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
    -- A cut-off before the epoch covers no ID: nothing is dropped (the daily job of a young
    -- epoch asks for 90 days ago). One past the layout's last millisecond covers every ID.
    IF older_than <= @extschema@.snowflake_timestamp(0) THEN
        RETURN dropped;
    ELSIF older_than > @extschema@.snowflake_timestamp(9223372036854775807) THEN
        cutoff := 9223372036854775807;
    ELSE
        cutoff := @extschema@.snowflake_min_id(older_than);
    END IF;
    FOR p IN SELECT * FROM @extschema@.snowflake_partitions(parent)
              WHERE to_id IS NOT NULL AND to_id <= cutoff ORDER BY to_id LOOP
        part_name := p.partition::text;
        EXECUTE format('DROP TABLE %s', p.partition);
        dropped := dropped || part_name;
    END LOOP;
    RETURN dropped;
END
$fn$;

-- The partition key in its error is quoted by a prefix.
CREATE OR REPLACE FUNCTION snowflake_partitions(
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
            -- A prefix: an expression key may be megabytes long, and every call would log it.
            DETAIL = format('Its partition key is %s.',
                            CASE WHEN length(pg_get_partkeydef(parent)) > 64
                                 THEN left(pg_get_partkeydef(parent), 64) || '...'
                                 ELSE pg_get_partkeydef(parent) END),
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
