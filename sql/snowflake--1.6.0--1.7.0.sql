-- snowflake 1.6.0 -> 1.7.0 (issue 49): no SQL of the extension calls a function of the
-- extension by name. snowflake_partitions() is Rust (it listed partitions in PL/pgSQL and called
-- snowflake_timestamp() by name); the table owner's PL/pgSQL of snowflake_adopt() and of the
-- partition functions is given what it used to call by name (snowflake_min_id() of each bound,
-- the partitions to drop) by the Rust that calls it by OID; snowflake_adopt() stores the new
-- default itself, built from snowflake_nextval()'s OID. CREATE EXTENSION refuses a schema whose
-- owner is not a superuser; this update only warns.
-- snowflake_unadopt() sets a nullable key NOT NULL, and before 17 gives the partitions of a
-- partitioned table the identity's sequence as their default. snowflake_horizon() is for
-- pg_read_all_stats and the roles granted it. snowflake_guard() is a trigger that refuses an
-- explicit ID a generator would issue again later, or with 'always' any explicit ID (issue 51).
-- snowflake_health() (issue 51) is new.

-- A schema whose owner is not a superuser is refused by CREATE EXTENSION (src/schema_check.sql).
-- Here only a WARNING: refusing the update would keep 1.6.0's SQL, which issue 49 broke.
DO $check$
DECLARE
    nsp_name name;
    owner oid;
BEGIN
    SELECT n.nspname, n.nspowner INTO nsp_name, owner
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema();
    IF owner OPERATOR(pg_catalog.=) 'pg_database_owner'::pg_catalog.regrole THEN
        SELECT d.datdba INTO owner FROM pg_catalog.pg_database d
         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database();
    END IF;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) owner) THEN
        RAISE WARNING USING
            MESSAGE = pg_catalog.format('extension snowflake is in schema %I, which role %I owns, not a superuser',
                                        nsp_name, pg_catalog.pg_get_userbyid(owner)),
            DETAIL = 'A schema''s owner can rename it and make another of its name, drop it with the extension in it, and put functions there that a superuser''s call of the extension would run as that superuser. 1.7.0 refuses to be created in such a schema.',
            HINT = 'Give the schema to a superuser (ALTER SCHEMA ... OWNER TO ...), or re-create the extension in a schema a superuser owns (see "Creating the extension in a schema others can create in" in docs/security.md).';
    END IF;
END
$check$;

CREATE OR REPLACE FUNCTION snowflake_partitions(
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

DROP FUNCTION _snowflake_adopt_switch(regclass, name, bigint[]);
DROP FUNCTION _snowflake_create_partitions(regclass, timestamptz, timestamptz, interval);
DROP FUNCTION _snowflake_drop_partitions(regclass, timestamptz);

CREATE OR REPLACE FUNCTION _snowflake_max_key(tbl regclass, col name, unadopt boolean) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- Under FORCE ROW LEVEL SECURITY the owner would see only some rows: an error then, never a
-- smaller maximum.
SET row_security = off
AS $fn$
DECLARE
    typ regtype;
    max_id bigint;
    nulls bigint;
    seq regclass;
    part regclass;
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
        -- An identity needs NOT NULL, which snowflake_adopt does not ask of a key: set here
        -- where no key is NULL, refused where one is.
        IF NOT (SELECT a.attnotnull FROM pg_attribute a
                 WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped) THEN
            EXECUTE format('SELECT count(*) FROM %s WHERE %I IS NULL', tbl, col) INTO nulls;
            IF nulls > 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'not_null_violation',
                    MESSAGE = format('column "%s" of relation %s has NULL keys', col, tbl),
                    DETAIL = format('%s rows have no key; the identity that replaces the snowflake default needs NOT NULL.', nulls),
                    HINT = format('Give them keys (UPDATE %s SET %I = DEFAULT WHERE %I IS NULL) or delete them, then run snowflake_unadopt again; nothing was changed.', tbl, col, col);
            END IF;
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', tbl, col);
        END IF;
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I ADD GENERATED BY DEFAULT AS IDENTITY', tbl, col);
        seq := pg_catalog.pg_get_serial_sequence(tbl::text, col::text)::regclass;
        IF max_id IS NOT NULL THEN
            PERFORM pg_catalog.setval(seq, max_id);
        END IF;
        -- Before 17 the identity is the parent's only: each partition's key draws from its
        -- sequence too (by OID), so a row inserted into a partition directly still gets one.
        IF current_setting('server_version_num')::int < 170000 THEN
            FOR part IN SELECT t.relid FROM pg_partition_tree(tbl) t WHERE t.relid <> tbl LOOP
                EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT pg_catalog.nextval(%L::pg_catalog.regclass)',
                               part, col, seq::oid::text);
            END LOOP;
        END IF;
    END IF;
    RETURN ARRAY[max_id];
END
$fn$;

CREATE FUNCTION _snowflake_adopt_switch(tbl regclass, col name) RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    ident "char";
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
    -- On the table and every table that inherits from it, each locked.
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col);
    RETURN true;
END
$fn$;

CREATE FUNCTION _snowflake_partition_steps(
    parent regclass,
    from_ts timestamptz,
    to_ts timestamptz,
    step interval,
    first_ts timestamptz,
    last_ts_ok timestamptz
) RETURNS timestamptz[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    step_ms numeric;
    steps numeric;
    lower_ts timestamptz;
    last_ts timestamptz;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class c
                    WHERE c.oid = parent
                      AND c.relowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('_snowflake_partition_steps runs only as the owner of %s', parent),
            HINT = 'Call snowflake_create_partitions(), which acts as the table''s owner.';
    END IF;
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
    -- raises 22008 for the others), the last step's end included.
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
    IF lower_ts < first_ts OR last_ts > last_ts_ok THEN
        RETURN ARRAY[lower_ts, last_ts];
    END IF;
    steps := (extract(epoch FROM last_ts) - extract(epoch FROM lower_ts)) * 1000 / step_ms;
    -- Each partition made holds locks until the transaction ends, in the lock table every
    -- session shares (max_locks_per_transaction 64 by default): well within it.
    IF steps > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded',
            MESSAGE = format('too many partitions: %s steps of %s from %s to %s', steps, step, lower_ts, last_ts),
            DETAIL = 'snowflake_create_partitions makes at most 1000 partitions in one call.',
            HINT = 'Premake a shorter range, or use a longer step.';
    END IF;
    RETURN ARRAY(SELECT lower_ts + step * i FROM generate_series(0, steps::int) i);
END
$fn$;

CREATE FUNCTION _snowflake_create_partitions(
    parent regclass,
    bounds timestamptz[],
    ids bigint[]
) RETURNS regclass[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    step interval := bounds[2] - bounds[1];
    lower_ts timestamptz;
    upper_ts timestamptz;
    lo bigint;
    hi bigint;
    schema_name name;
    base_name text;
    suffix text;
    keep int;
    part_name text;
    name_suffix text;
    n int;
    first_taken text;
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
    SELECT n.nspname, c.relname INTO schema_name, base_name
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent;
    -- Serialises concurrent calls on one parent; readers and writers are not blocked.
    EXECUTE format('LOCK TABLE %s IN SHARE UPDATE EXCLUSIVE MODE', parent);
    -- The bounds that exist, read once (after the lock: a concurrent call's are committed).
    existing := ARRAY(
        SELECT (b[1]::bigint)::text || '/' || (b[2]::bigint)::text
          FROM (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                    '^FOR VALUES FROM [(]''?(-?[0-9]+)''?[)] TO [(]''?(-?[0-9]+)''?[)]$') AS b
                  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = parent) s
         WHERE b IS NOT NULL);
    FOR i IN 1 .. array_length(bounds, 1) - 1 LOOP
        lower_ts := bounds[i];
        upper_ts := bounds[i + 1];
        lo := ids[i];
        hi := ids[i + 1];
        IF NOT (lo::text || '/' || hi::text) = ANY (existing) THEN
            suffix := '_' || to_char(lower_ts AT TIME ZONE 'UTC',
                CASE WHEN step < interval '1 day' THEN 'YYYYMMDD_HH24MI' ELSE 'YYYYMMDD' END);
            -- A name longer than max_identifier_length (63 bytes) would be cut at the end, and
            -- neighbouring steps would get one name: the parent's part is shortened instead (by
            -- whole characters), so the date always stays. A name another relation has (made by
            -- another role where it may create, or a twin parent's shortened name) gets _1, _2...
            -- with a WARNING: failing would make nothing until inserts fail with 23514.
            n := 0;
            LOOP
                name_suffix := suffix || CASE WHEN n = 0 THEN '' ELSE '_' || n END;
                keep := length(base_name);
                WHILE octet_length(left(base_name, keep) || name_suffix)
                      > current_setting('max_identifier_length')::int LOOP
                    keep := keep - 1;
                END LOOP;
                part_name := left(base_name, keep) || name_suffix;
                taken := to_regclass(format('%I.%I', schema_name, part_name));
                IF taken IS NOT NULL AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = taken) THEN
                    -- Made by a transaction that committed after this one's snapshot was taken
                    -- (REPEATABLE READ or SERIALIZABLE): this one cannot see what it made.
                    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
                        MESSAGE = format('could not create partition %I.%I of %s because of a concurrent snowflake_create_partitions', schema_name, part_name, parent),
                        DETAIL = 'Another transaction created it after this transaction''s snapshot was taken.',
                        HINT = 'Retry the transaction.';
                END IF;
                EXIT WHEN taken IS NULL;
                IF n = 0 THEN
                    first_taken := format('%I.%I', schema_name, part_name);
                END IF;
                n := n + 1;
            END LOOP;
            IF n > 0 THEN
                RAISE WARNING USING
                    MESSAGE = format('partition of %s named %I.%I: %s is taken by a relation that is not its partition', parent, schema_name, part_name, first_taken),
                    DETAIL = format('The partition of %s to %s (UTC) is named after its parent%s; another relation already has that name, perhaps made by another role that may create in schema %I.',
                                    lower_ts AT TIME ZONE 'UTC', upper_ts AT TIME ZONE 'UTC',
                                    CASE WHEN keep < length(base_name) THEN ' (shortened to fit max_identifier_length)' ELSE '' END,
                                    schema_name),
                    HINT = 'Keep partitioned tables in a schema only trusted roles can create in, or rename the other relation.';
            END IF;
            -- An overlap with a partition of other bounds is PostgreSQL's own error, and rolls
            -- back every partition this call made.
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%s) TO (%s)',
                           schema_name, part_name, parent, lo, hi);
            made := made || format('%I.%I', schema_name, part_name)::regclass;
        END IF;
    END LOOP;
    RETURN made;
END
$fn$;

CREATE FUNCTION _snowflake_drop_partitions(parent regclass, parts oid[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    part oid;
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
    FOREACH part IN ARRAY parts LOOP
        -- Only a partition of this parent.
        CONTINUE WHEN NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = part AND i.inhparent = parent);
        part_name := part::regclass::text;
        EXECUTE format('DROP TABLE %s', part::regclass);
        dropped := dropped || part_name;
    END LOOP;
    RETURN dropped;
END
$fn$;

REVOKE EXECUTE ON FUNCTION _snowflake_adopt_switch(regclass, name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_partition_steps(regclass, timestamptz, timestamptz, interval, timestamptz, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_create_partitions(regclass, timestamptz[], bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_drop_partitions(regclass, oid[]) FROM PUBLIC;

REVOKE EXECUTE ON FUNCTION snowflake_horizon() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_horizon() TO pg_read_all_stats;

CREATE FUNCTION snowflake_guard() RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_guard_wrapper';
COMMENT ON FUNCTION snowflake_guard() IS 'Trigger: refuses an explicit snowflake ID that a generator would issue again later (its argument names the key column, id by default); with a second argument, always, any explicit ID';

-- snowflake_health() (issue 51): whether ID generation is healthy, for pg_monitor and the roles
-- granted it (its reasons name the lease database, its owner and other servers' identifiers).
CREATE FUNCTION "snowflake_health"() RETURNS TABLE (
    "check_name" TEXT,
    "status" TEXT,
    "severity" INT,
    "reason" TEXT,
    "action" TEXT
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_health_wrapper';
COMMENT ON FUNCTION snowflake_health() IS 'Whether ID generation is healthy: one row per check (ok, warning or critical) with its reason and what to do, the overall answer first';
REVOKE EXECUTE ON FUNCTION snowflake_health() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION snowflake_health() TO pg_monitor;
