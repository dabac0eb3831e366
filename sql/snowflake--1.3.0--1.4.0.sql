-- snowflake 1.3.0 -> 1.4.0: snowflake_horizon(), the read horizon for readers that poll in ID
-- order; short text forms that sort like the number: base62 (11 characters) and Crockford's
-- base32 (13 characters), with their parse functions.
-- Frozen once released; the upgrade test checks that an upgraded install equals a fresh one.
\echo Use "ALTER EXTENSION snowflake UPDATE TO '1.4.0'" to load this file. \quit

CREATE FUNCTION "snowflake_horizon"() RETURNS bigint
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_horizon_wrapper';
COMMENT ON FUNCTION snowflake_horizon() IS 'The largest ID such that no transaction of this server still in progress holds or can obtain an ID at or below it: read it before a query, then read rows up to it';

CREATE FUNCTION "snowflake_to_base62"("id" bigint) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_to_base62_wrapper';

CREATE FUNCTION "snowflake_from_base62"("encoded" TEXT) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_from_base62_wrapper';

CREATE FUNCTION "snowflake_to_base32"("id" bigint) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_to_base32_wrapper';

CREATE FUNCTION "snowflake_from_base32"("encoded" TEXT) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'snowflake_from_base32_wrapper';

COMMENT ON FUNCTION snowflake_to_base62(bigint) IS 'The ID as 11 base62 characters (0-9A-Za-z); byte order (COLLATE "C") is numeric order';
COMMENT ON FUNCTION snowflake_from_base62(text) IS 'The ID of an 11-character base62 form';
COMMENT ON FUNCTION snowflake_to_base32(bigint) IS 'The ID as 13 characters of Crockford''s base32; string order is numeric order';
COMMENT ON FUNCTION snowflake_from_base32(text) IS 'The ID of a 13-character Crockford base32 form (any case; I and L read as 1, O as 0; hyphens ignored)';
