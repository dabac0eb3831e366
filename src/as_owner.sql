-- What a superuser runs on someone else's table runs as that table's owner (see as_owner.rs):
-- the C functions snowflake_adopt, snowflake_create_partitions and snowflake_drop_partitions
-- check that their caller has the owner's privileges, then call the PL/pgSQL functions below by
-- OID as the owner, in a security-restricted operation. No one may execute those directly, and
-- each refuses to run as anyone but the table's owner.

CREATE FUNCTION snowflake_adopt(tbl regclass, col name DEFAULT 'id') RETURNS bigint
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_adopt_wrapper';
COMMENT ON FUNCTION snowflake_adopt(regclass, name) IS
  'Switch an existing bigint key to DEFAULT snowflake_nextval(), guaranteeing new IDs above existing ones; returns the old maximum';

CREATE FUNCTION snowflake_create_partitions(
    parent regclass,
    from_ts timestamptz,
    to_ts timestamptz,
    step interval DEFAULT '1 day'
) RETURNS SETOF regclass
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_create_partitions_wrapper';
COMMENT ON FUNCTION snowflake_create_partitions(regclass, timestamptz, timestamptz, interval) IS
  'Create the missing range partitions of a snowflake-keyed table for the steps in [from_ts, to_ts), both rounded down to UTC step boundaries; returns those created';

CREATE FUNCTION snowflake_drop_partitions(parent regclass, older_than timestamptz)
RETURNS SETOF text
LANGUAGE c STRICT VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'snowflake_drop_partitions_wrapper';
COMMENT ON FUNCTION snowflake_drop_partitions(regclass, timestamptz) IS
  'Drop the partitions of a snowflake-keyed table whose whole ID range lies before older_than; returns their names';

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
CREATE FUNCTION _snowflake_drop_partitions(parent regclass, older_than timestamptz)
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
REVOKE EXECUTE ON FUNCTION _snowflake_adopt_lock(regclass, name) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_adopt_switch(regclass, name, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_create_partitions(regclass, timestamptz, timestamptz, interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_drop_partitions(regclass, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION _snowflake_max_key(regclass, name, boolean) FROM PUBLIC;
