-- Issue 49: the extension goes only into a schema that a superuser owns. A schema's owner can
-- rename it and make another of its name, drop it with the extension in it, and put functions
-- there that a superuser's call would run as that superuser. On 15 and later `public` belongs
-- to pg_database_owner, that is to the database's owner. A schema a superuser owns that others
-- may create in is accepted with a WARNING: the extension's own SQL calls nothing there by name.
-- (sql/snowflake--1.6.0--1.7.0.sql checks the same at an update, with a WARNING.)
DO $check$
DECLARE
    nsp oid;
    nsp_name name;
    owner oid;
    via text := '';
BEGIN
    SELECT n.oid, n.nspname, n.nspowner INTO nsp, nsp_name, owner
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema();
    IF owner OPERATOR(pg_catalog.=) 'pg_database_owner'::pg_catalog.regrole THEN
        SELECT d.datdba INTO owner FROM pg_catalog.pg_database d
         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database();
        via := ' (through pg_database_owner: it owns the database)';
    END IF;
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) owner) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('extension snowflake may not be created in schema %I: it is owned by role %I, not by a superuser',
                                        nsp_name, pg_catalog.pg_get_userbyid(owner)),
            DETAIL = pg_catalog.format('Role %I owns schema %I%s. A schema''s owner can rename it and make another of its name, drop it with the extension in it, and put functions there that a superuser''s call of the extension would run as that superuser.',
                                       pg_catalog.pg_get_userbyid(owner), nsp_name, via),
            HINT = 'As a superuser, put it in a schema a superuser owns: CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC; CREATE EXTENSION snowflake SCHEMA snowflake; (see "Creating the extension in a schema others can create in" in docs/security.md).';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
                WHERE n.oid OPERATOR(pg_catalog.=) nsp
                  AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
                  AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
                  AND (a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                       OR NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                                WHERE r.oid OPERATOR(pg_catalog.=) a.grantee))) THEN
        RAISE WARNING USING
            MESSAGE = pg_catalog.format('schema %I of extension snowflake is open to CREATE by roles that are not superusers', nsp_name),
            DETAIL = 'Such a role can add functions named like the extension''s: a call whose argument is not of the parameter''s exact type may find one of hers and run it as the caller, and one with an extra argument with a default makes exactly typed calls fail as ambiguous (42725).',
            HINT = 'Give every argument its exact type (''public.events''::regclass), or revoke CREATE on the schema from those roles (see "Creating the extension in a schema others can create in" in docs/security.md).';
    END IF;
END
$check$;
