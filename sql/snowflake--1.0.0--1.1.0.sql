-- snowflake 1.0.0 -> 1.1.0: status and statistics functions, and switching existing tables over.

\echo Use "ALTER EXTENSION snowflake UPDATE TO '1.1.0'" to load this file. \quit

COMMENT ON FUNCTION snowflake_nextval() IS 'The next snowflake ID of this server: time-ordered, unique across servers with distinct worker IDs';

CREATE  FUNCTION "snowflake_node"() RETURNS TABLE (
	"datacenter_id" INT,  /* i32 */
	"worker_id" INT,  /* i32 */
	"epoch" timestamp with time zone,  /* TimestampWithTimeZone */
	"max_clock_drift_ms" bigint,  /* i64 */
	"last_timestamp" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lead_ms" bigint,  /* i64 */
	"lease_until" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"lease_worker_pid" INT  /* Option < i32 > */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_node_wrapper';

CREATE  FUNCTION "snowflake_stats"() RETURNS TABLE (
	"ids_issued" bigint,  /* i64 */
	"borrowed_ms" bigint,  /* i64 */
	"clock_back_events" bigint,  /* i64 */
	"largest_clock_back_ms" bigint,  /* i64 */
	"waits" bigint,  /* i64 */
	"errors" bigint  /* i64 */
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_stats_wrapper';

CREATE  FUNCTION "snowflake_set_floor"(
	"id" bigint /* i64 */
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'snowflake_set_floor_wrapper';

REVOKE EXECUTE ON FUNCTION snowflake_set_floor(bigint) FROM PUBLIC;

-- Switches an existing bigint key (bigserial, identity, or plain) to snowflake_nextval() with
-- only a brief lock: writers wait for the switch, readers do not.
CREATE FUNCTION snowflake_adopt(tbl regclass, col name DEFAULT 'id') RETURNS bigint
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
    IF typ <> 'bigint'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = 'datatype_mismatch',
            MESSAGE = format('column "%s" of relation %s is of type %s, not bigint', col, tbl, typ),
            DETAIL = 'Snowflake IDs need all 64 bits.',
            HINT = format('Run ALTER TABLE %s ALTER COLUMN %I TYPE bigint first.', tbl, col);
    END IF;
    -- No writer may add an old-style key between reading the maximum and switching the default.
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', tbl);
    EXECUTE format('SELECT max(%I) FROM %s', col, tbl) INTO max_id;
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
