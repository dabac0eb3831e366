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
COMMENT ON FUNCTION snowflake_partitions(regclass) IS
  'The range partitions of a table partitioned on its snowflake key, with their bounds as IDs and as times';

