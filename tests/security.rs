//! Nobody gets in: the lease worker runs as superuser in `snowflake.database`, which an ordinary
//! role may own. Everything that owner can do to the database (its settings, objects planted in
//! it before the worker first ran, its connection switches) must neither run the owner's code as
//! superuser, nor stop ID generation, nor hand the owner the high-water mark.

mod common;
use common::Cluster;

/// A server whose `snowflake.database` is `app`, owned by the ordinary role `appowner`, who has
/// run `prepare` in it (as appowner) before the worker first connects there.
fn owned_app_database(name: &str, prepare: &str) -> Cluster {
    let mut c = Cluster::new(name, "snowflake.worker_id = 9");
    c.start();
    // CREATEDB: an owner who may also rename and drop databases.
    c.sql("CREATE ROLE appowner LOGIN CREATEDB");
    c.sql("CREATE DATABASE app OWNER appowner");
    c.sql("CREATE EXTENSION snowflake");
    let out = c
        .psql_cmd_as("appowner", "app")
        .arg("-c")
        .arg(prepare)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "appowner's preparation failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.sql("ALTER SYSTEM SET snowflake.database = 'app'");
    c.stop("fast");
    c.start();
    c
}

fn is_superuser(c: &Cluster, role: &str) -> String {
    c.sql(&format!(
        "SELECT rolsuper FROM pg_roles WHERE rolname = '{role}'"
    ))
}

/// Functions and operators that shadow every one the worker's SQL could resolve through
/// search_path; each one makes its caller's role... its owner a superuser.
const TRAPS: &str = "
    CREATE SCHEMA evil;
    CREATE FUNCTION evil.escalate() RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN ALTER ROLE appowner SUPERUSER; RETURN true; EXCEPTION WHEN OTHERS THEN RETURN true; END $$;
    CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT evil.escalate(); SELECT pg_catalog.now()';
    CREATE FUNCTION evil.random() RETURNS float8 LANGUAGE sql AS 'SELECT evil.escalate(); SELECT 0.5::float8';
    CREATE FUNCTION evil.setval(regclass, bigint, boolean) RETURNS bigint LANGUAGE sql
      AS 'SELECT evil.escalate(); SELECT pg_catalog.setval($1, $2, $3)';
    CREATE FUNCTION evil.concat(name, text, name) RETURNS text LANGUAGE sql AS 'SELECT evil.escalate(); SELECT $1::text';
    CREATE FUNCTION evil.max(bigint) RETURNS bigint LANGUAGE sql AS 'SELECT evil.escalate(); SELECT $1';
    CREATE FUNCTION evil.int8eq(bigint, bigint) RETURNS boolean LANGUAGE sql
      AS 'SELECT evil.escalate(); SELECT pg_catalog.int8eq($1, $2)';
    CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.int8eq);
    CREATE FUNCTION evil.mul(numeric, numeric) RETURNS numeric LANGUAGE sql
      AS 'SELECT evil.escalate(); SELECT pg_catalog.numeric_mul($1, $2)';
    CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = evil.mul);
    CREATE OPERATOR evil.* (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = evil.mul);
    GRANT USAGE ON SCHEMA evil TO PUBLIC;
    ALTER DATABASE app SET search_path = evil, pg_catalog, public;
    ALTER DATABASE app SET default_transaction_read_only = on;
    ALTER DATABASE app SET statement_timeout = '1ms';
    ALTER DATABASE app SET lock_timeout = '1ms';
    ALTER DATABASE app SET idle_in_transaction_session_timeout = '1ms';
    ALTER DATABASE app SET default_transaction_isolation = 'serializable';
    ALTER DATABASE app SET synchronous_commit = 'off';
    ALTER ROLE appowner SET search_path = evil, pg_catalog";

/// What the worker's session in `app` must look like anyway, read from the worker's own claim.
/// A query error is an answer too, and `eventually` asks again: the worker is seen connected to
/// `app` before it is done there (its schema not yet made, or a lock it holds meeting the 1 ms
/// `lock_timeout` this session inherits from the database). One clean-clone run on 15 failed
/// on such an error when it was unwrapped; which of the two it was is not known.
fn claims_refreshed_since(c: &Cluster, since: &str) -> String {
    c.try_sql_in(
        "app",
        &format!(
            "SET statement_timeout = 0; SET search_path = pg_catalog; \
             SELECT count(*) FROM _snowflake.claims WHERE last_seen > '{since}'"
        ),
    )
    .unwrap_or_else(|e| e.raw)
}

#[test]
fn a_database_owner_cannot_become_superuser_or_stop_the_worker() {
    let c = owned_app_database("owner-levers", TRAPS);
    // The worker's first claim refresh ran at start: checked now, and after more below. (The
    // next test shows that the traps do work on a session that follows the database settings.)
    assert_eq!(is_superuser(&c, "appowner"), "f");
    let since = c.sql("SELECT now()");
    // IDs are issued with every setting above in force for the worker's database...
    c.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval())");
    c.sql("INSERT INTO t SELECT FROM generate_series(1, 1000)");
    // ...across two claim refreshes and lease renewals (every statement the worker runs).
    c.wait_for(
        "SELECT count(*) >= 1 FROM pg_stat_activity WHERE backend_type = 'snowflake lease' AND datname = 'app'",
        "t",
        20,
    );
    let mut last = String::new();
    assert!(
        common::eventually(20, || {
            last = claims_refreshed_since(&c, &since);
            last == "1"
        }),
        "the worker did not refresh its claim in app; the last answer was: {last}"
    );
    std::thread::sleep(std::time::Duration::from_secs(6));
    c.sql("INSERT INTO t SELECT FROM generate_series(1, 1000)");
    assert_eq!(c.sql("SELECT count(DISTINCT id) FROM t"), "2000");
    assert_eq!(
        is_superuser(&c, "appowner"),
        "f",
        "the lease worker ran the database owner's code as superuser"
    );
    // Everything the worker made belongs to the superuser.
    assert_eq!(
        c.try_sql_in(
            "app",
            "SET statement_timeout = 0; SELECT string_agg(DISTINCT pg_catalog.pg_get_userbyid(relowner)::text, ',') FROM pg_catalog.pg_class WHERE relnamespace = '_snowflake'::regnamespace"
        )
        .unwrap(),
        "postgres"
    );
    assert!(
        !c.log().contains("read-only transaction") && !c.log().contains("statement timeout"),
        "{}",
        c.log()
    );

    // The owner's switches on the database itself.
    let e = c
        .try_sql_as("appowner", "DROP DATABASE app WITH (FORCE)")
        .expect_err("dropped the worker's database");
    // The worker's process is the superuser's, which the owner may not terminate.
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    let e = c
        .try_sql_as("appowner", "ALTER DATABASE app RENAME TO app2")
        .expect_err("renamed the worker's database");
    assert_eq!(e.sqlstate, "55006", "{}", e.raw);
    c.try_sql_as("appowner", "ALTER DATABASE app ALLOW_CONNECTIONS false")
        .unwrap();
    let mut c = c;
    c.stop("fast");
    c.start();
    c.sql("INSERT INTO t SELECT FROM generate_series(1, 10)");
    assert_eq!(c.sql("SELECT count(DISTINCT id) FROM t"), "2010");
    assert_eq!(is_superuser(&c, "appowner"), "f");
}

#[test]
fn the_traps_would_have_worked_on_a_session_that_followed_the_database_settings() {
    // Proves the traps of the test above are live: a superuser session in `app` that uses the
    // database's search_path runs evil.now() and makes appowner a superuser.
    let c = owned_app_database("owner-traps-live", TRAPS);
    assert_eq!(is_superuser(&c, "appowner"), "f");
    // Each -c is its own transaction: the first SETs make the next one read-write.
    let out = c
        .psql_cmd("app")
        .args([
            "-c",
            "SET statement_timeout = 0; SET default_transaction_read_only = off",
        ])
        .args(["-c", "SELECT now()"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(is_superuser(&c, "appowner"), "t");
}

fn refusal(c: &Cluster) -> common::PgError {
    let mut last = None;
    let refused = common::eventually(30, || match c.try_sql("SELECT snowflake_nextval()") {
        Err(e) if e.detail.contains("not by a superuser") => {
            last = Some(e);
            true
        }
        _ => false,
    });
    assert!(refused, "snowflake_nextval() was not refused:\n{}", c.log());
    last.unwrap()
}

#[test]
fn objects_the_worker_did_not_create_are_refused_until_a_superuser_fixes_them() {
    // The owner makes the lease before the worker ever ran there, with the mark at 0.
    let c = owned_app_database(
        "owner-objects",
        "CREATE SCHEMA _snowflake; CREATE SEQUENCE _snowflake.lease_ms AS bigint MINVALUE 0 START 0;",
    );
    let e = refusal(&c);
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.detail.contains("schema _snowflake")
            && e.detail.contains("\"appowner\"")
            && e.detail.contains("\"app\""),
        "{}",
        e.raw
    );
    assert!(
        e.hint.contains("DROP SCHEMA _snowflake CASCADE"),
        "{}",
        e.raw
    );
    assert!(c
        .log()
        .contains("snowflake lease worker refuses schema _snowflake"));
    // The worker used nothing of it: no claim table, the owner's sequence untouched.
    assert_eq!(
        c.try_sql_in("app", "SELECT to_regclass('_snowflake.claims') IS NULL, (SELECT last_value FROM _snowflake.lease_ms)")
            .unwrap(),
        "t|0"
    );

    // A superuser takes the schema but not the owner's sequence: that is named now.
    c.try_sql_in("app", "ALTER SCHEMA _snowflake OWNER TO postgres")
        .unwrap();
    assert!(common::eventually(20, || {
        c.try_sql("SELECT snowflake_nextval()")
            .err()
            .is_some_and(|e| e.detail.contains("sequence _snowflake.lease_ms"))
    }));

    // Fixed: the worker continues by itself, and its objects are out of the owner's reach.
    c.try_sql_in("app", "DROP SCHEMA _snowflake CASCADE")
        .unwrap();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    let e = c
        .psql_cmd_as("appowner", "app")
        .arg("-c")
        .arg("CREATE SEQUENCE _snowflake.x")
        .output()
        .unwrap();
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("permission denied"));
}
