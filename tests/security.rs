//! Nobody gets in: the lease worker runs as superuser in `snowflake.database`, which must be a
//! database a superuser owns (one another role owns is refused; a lease an earlier release put
//! into one is tolerated with a WARNING). Everything a role can do there (the owner's settings in
//! that tolerated case, objects planted before the worker first ran, connection switches) must
//! neither run its code as superuser, nor stop ID generation, nor hand it the high-water mark.

mod common;
use common::Cluster;

/// The lease worker makes its lease in `db` (owned by a superuser then), and the database is
/// given to `owner` afterwards: the set-up 1.5.0's docs asked for, which 1.6.0 tolerates.
fn lease_made_then_given_to(c: &mut Cluster, db: &str, owner: &str) {
    c.sql(&format!("ALTER SYSTEM SET snowflake.database = '{db}'"));
    c.stop("fast");
    c.start();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    c.sql(&format!("ALTER DATABASE {db} OWNER TO {owner}"));
}

/// A server whose `snowflake.database` is `app`, where the lease worker made its lease before
/// `app` was given to the ordinary role `appowner` (tolerated), who has run `prepare` in it (as
/// appowner) before the worker connects there again.
fn owned_app_database(name: &str, prepare: &str) -> Cluster {
    let mut c = Cluster::new(name, "snowflake.worker_id = 9");
    c.start();
    // CREATEDB: an owner who may also rename and drop databases.
    c.sql("CREATE ROLE appowner LOGIN CREATEDB");
    c.sql("CREATE DATABASE app");
    c.sql("CREATE EXTENSION snowflake");
    lease_made_then_given_to(&mut c, "app", "appowner");
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
            "SET ROLE NONE; SET statement_timeout = 0; SET search_path = pg_catalog; \
             SELECT count(*) FROM _snowflake.claims WHERE last_seen > '{since}'"
        ),
    )
    .unwrap_or_else(|e| e.raw)
}

#[test]
fn a_database_owner_cannot_become_superuser_or_stop_the_worker() {
    // Every session in app, the superuser's included, would also act as appowner.
    let c = owned_app_database(
        "owner-levers",
        &format!("{TRAPS}; ALTER DATABASE app SET role = 'appowner'"),
    );
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
            "SET ROLE NONE; SET statement_timeout = 0; SELECT string_agg(DISTINCT pg_catalog.pg_get_userbyid(relowner)::text, ',') FROM pg_catalog.pg_class WHERE relnamespace = '_snowflake'::regnamespace"
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

/// The refusal of `snowflake_nextval()` whose message and DETAIL say `says`, within 30 s.
fn refusal(c: &Cluster, says: &str) -> common::PgError {
    let mut last = None;
    let refused = common::eventually(30, || match c.try_sql("SELECT snowflake_nextval()") {
        Err(e) if format!("{} {}", e.message, e.detail).contains(says) => {
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
    // A role that may create schemas in the lease database (a superuser owns it) makes the lease
    // before the worker ever ran there, with the mark at 0.
    let mut c = Cluster::new("owner-objects", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE appowner LOGIN");
    c.sql("CREATE DATABASE app");
    c.sql("GRANT CREATE ON DATABASE app TO appowner; CREATE EXTENSION snowflake");
    c.psql_cmd_as("appowner", "app")
        .arg("-c")
        .arg("CREATE SCHEMA _snowflake; CREATE SEQUENCE _snowflake.lease_ms AS bigint MINVALUE 0 START 0;")
        .output()
        .unwrap();
    c.sql("ALTER SYSTEM SET snowflake.database = 'app'");
    c.stop("fast");
    c.start();
    let e = refusal(&c, "not by a superuser");
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

/// A table owner's code in the CHECK constraints PostgreSQL evaluates while it checks a new
/// partition against the default one, and while it plans a query with `constraint_exclusion`:
/// `m.trap()` makes whoever runs it... makes `tabowner` a superuser, if it runs as one.
const TABLE_TRAPS: &str = "
    CREATE SCHEMA m;
    CREATE FUNCTION m.escalate() RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN ALTER ROLE tabowner SUPERUSER; RETURN true; EXCEPTION WHEN OTHERS THEN RETURN true; END $$;
    CREATE FUNCTION m.trap() RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT m.escalate()';
    CREATE TABLE m.ev (id bigint NOT NULL) PARTITION BY RANGE (id);
    CREATE TABLE m.ev_default PARTITION OF m.ev DEFAULT;
    ALTER TABLE m.ev_default ADD CONSTRAINT trap CHECK (m.trap() OR id > 0);
    CREATE TABLE m.t (id bigint PRIMARY KEY, CONSTRAINT trap CHECK (m.trap() OR id > 0));
    INSERT INTO m.t VALUES (1), (2), (3);
    GRANT USAGE ON SCHEMA m TO PUBLIC;";

#[test]
fn a_table_owners_code_never_runs_as_the_superuser_who_maintains_the_table() {
    let mut c = Cluster::new("table-owner-code", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE ROLE tabowner LOGIN; GRANT CREATE ON DATABASE postgres TO tabowner; CREATE ROLE other LOGIN");
    c.try_sql_as("tabowner", TABLE_TRAPS).unwrap();
    assert_eq!(is_superuser(&c, "tabowner"), "f");

    // The traps are live: a superuser who plans a query on m.t with constraint_exclusion runs
    // m.trap() (proved in a transaction that is rolled back).
    let live = c
        .script("BEGIN;\nSET LOCAL constraint_exclusion = on;\nEXPLAIN SELECT * FROM m.t WHERE id = 5;\nSELECT rolsuper::text FROM pg_roles WHERE rolname = 'tabowner';\nROLLBACK;")
        .unwrap();
    assert!(live.ends_with("true"), "the trap did not run: {live}");
    assert_eq!(is_superuser(&c, "tabowner"), "f");

    // The superuser maintains the owner's tables: everything that touches them runs as tabowner.
    let made = c.sql("SET constraint_exclusion = on; SELECT count(*) FROM snowflake_create_partitions('m.ev', now(), now() + interval '2 days')");
    assert_eq!(made, "2");
    assert_eq!(
        is_superuser(&c, "tabowner"),
        "f",
        "create_partitions ran the owner's code as superuser"
    );
    assert_eq!(
        c.sql("SELECT DISTINCT pg_get_userbyid(c.relowner) FROM snowflake_partitions('m.ev') p JOIN pg_class c ON c.oid = p.partition"),
        "tabowner",
        "the partitions belong to the table's owner"
    );
    assert_eq!(
        c.sql("SET constraint_exclusion = on; SELECT snowflake_adopt('m.t')"),
        "3"
    );
    assert_eq!(
        is_superuser(&c, "tabowner"),
        "f",
        "adopt ran the owner's code as superuser"
    );
    // (Inserted by the owner: a superuser's INSERT would run the CHECK as itself, as any DML does.)
    c.try_sql_as("tabowner", "INSERT INTO m.t DEFAULT VALUES")
        .unwrap();
    assert_eq!(c.sql("SELECT count(*) FROM m.t WHERE id > 3"), "1");
    assert_eq!(
        c.sql("SET constraint_exclusion = on; SELECT count(*) FROM snowflake_drop_partitions('m.ev', now() + interval '3 days')"),
        "2"
    );
    assert_eq!(
        is_superuser(&c, "tabowner"),
        "f",
        "drop_partitions ran the owner's code as superuser"
    );

    // Acting as the owner gives no one more than they had: a role without the owner's
    // privileges is refused, and the functions that do the work cannot be called directly.
    for sql in [
        "SELECT snowflake_create_partitions('m.ev', now(), now() + interval '1 day')",
        "SELECT snowflake_drop_partitions('m.ev', now())",
        "SELECT snowflake_adopt('m.t')",
    ] {
        let e = c.try_sql_as("other", sql).expect_err(sql);
        assert_eq!(e.sqlstate, "42501", "{sql}: {}", e.raw);
        assert!(e.message.contains("must be owner of table m."), "{}", e.raw);
    }
    let e = c
        .try_sql_as(
            "tabowner",
            "SELECT _snowflake_create_partitions('m.ev', ARRAY[now(), now()], ARRAY[0, 0]::bigint[])",
        )
        .expect_err("the internal function ran");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    // A superuser calling it directly would be acting as itself: refused too.
    let e = c.sql_err("SELECT _snowflake_adopt_lock('m.t', 'id')");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    assert!(e.hint.contains("snowflake_adopt()"), "{}", e.raw);
    // The owner itself maintains its own table, as before (adopt of an empty table needs no
    // floor, and so no superuser).
    c.try_sql_as(
        "tabowner",
        "CREATE TABLE m.empty (id bigint PRIMARY KEY); SELECT snowflake_adopt('m.empty')",
    )
    .unwrap();
    assert_eq!(is_superuser(&c, "tabowner"), "f");
}

fn worker_pid(c: &Cluster) -> Option<String> {
    c.try_sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake lease'")
        .ok()
        .filter(|pid| !pid.is_empty())
}

/// Terminated, cancelled or killed, the lease worker is back within seconds, and its start
/// changes no schema: a session holding a lock on its claims table (which replication, a
/// monitoring query or a DBA may hold) does not stop it.
#[test]
fn the_lease_worker_comes_back_however_it_is_stopped() {
    let mut c = Cluster::new("worker-life", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval())");
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    let mut holder = c
        .psql_cmd("postgres")
        .arg("-c")
        .arg("BEGIN; LOCK TABLE _snowflake.claims IN ACCESS SHARE MODE; SELECT pg_sleep(600)")
        .spawn()
        .unwrap();
    c.wait_for(
        "SELECT count(*) FROM pg_locks WHERE relation = '_snowflake.claims'::regclass AND granted AND pid <> pg_backend_pid()",
        "1",
        20,
    );
    for how in ["pg_terminate_backend", "pg_cancel_backend", "kill -KILL"] {
        let before = worker_pid(&c).expect("a lease worker runs");
        let since = c.sql("SELECT now()");
        if let Some(signal) = how.strip_prefix("kill ") {
            let out = std::process::Command::new("kill")
                .args([signal, &before])
                .output()
                .unwrap();
            assert!(out.status.success());
        } else {
            assert_eq!(c.sql(&format!("SELECT {how}({before})")), "t");
        }
        let mut seen = String::new();
        let back = common::eventually(30, || {
            seen = c
                .try_sql(&format!(
                    "SELECT (SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake lease') <> {before} \
                        AND EXISTS (SELECT FROM _snowflake.claims WHERE last_seen > '{since}')"
                ))
                .unwrap_or_else(|e| e.raw);
            seen == "t"
        });
        assert!(
            back,
            "after {how}, no new lease worker refreshed its claim (last answer: {seen}):\n{}",
            c.log()
        );
        c.sql("INSERT INTO t SELECT FROM generate_series(1, 100)");
    }
    assert_eq!(c.sql("SELECT count(DISTINCT id) FROM t"), "300");
    let _ = holder.kill();
    let _ = holder.wait();
    // A shutdown is not a termination to come back from: the server stops.
    c.stop("fast");
}

/// The database owner's stand-ins for what a superuser runs in their database: overloads of the
/// helpers that an untyped literal would prefer (text over regclass) in `public`, which the
/// owner controls, a schema named after the superuser (`"$user"` comes first on a search_path),
/// and a `now()` there, first on the database's search_path. Each makes `appowner` a superuser
/// when a superuser runs it.
const RECIPE_TRAPS: &str = r#"
    CREATE FUNCTION public.escalate() RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN ALTER ROLE appowner SUPERUSER; RETURN true; EXCEPTION WHEN OTHERS THEN RETURN true; END $$;
    CREATE FUNCTION public.snowflake_adopt(text) RETURNS bigint LANGUAGE sql
      AS 'SELECT public.escalate(); SELECT 0::bigint';
    CREATE FUNCTION public.snowflake_create_partitions(text, timestamptz, timestamptz) RETURNS SETOF regclass
      LANGUAGE sql AS 'SELECT public.escalate(); SELECT NULL::regclass WHERE false';
    CREATE FUNCTION public.snowflake_drop_partitions(text, timestamptz) RETURNS SETOF text
      LANGUAGE sql AS 'SELECT public.escalate(); SELECT NULL::text WHERE false';
    CREATE SCHEMA postgres;
    CREATE FUNCTION postgres.snowflake_adopt(regclass) RETURNS bigint LANGUAGE sql
      AS 'SELECT public.escalate(); SELECT 0::bigint';
    CREATE FUNCTION postgres.now() RETURNS timestamptz LANGUAGE sql
      AS 'SELECT public.escalate(); SELECT pg_catalog.now()';
    GRANT USAGE ON SCHEMA postgres TO PUBLIC;
    ALTER DATABASE app SET search_path = "$user", public, pg_catalog;
    CREATE TABLE orders (id bigserial PRIMARY KEY, note text);
    INSERT INTO orders (note) SELECT 'old' FROM generate_series(1, 3);
    CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake.snowflake_nextval(), payload text)
        PARTITION BY RANGE (id);
"#;

/// On 15 and later the database's owner owns `public` and may rename it, with what is in it: a
/// schema of that name is then whatever it creates.
const RENAME_PUBLIC: &str = "
    ALTER SCHEMA public RENAME TO sf_old;
    CREATE SCHEMA public;
    GRANT USAGE ON SCHEMA public TO PUBLIC;
    ALTER FUNCTION sf_old.escalate() SET SCHEMA public;
    ALTER TABLE sf_old.orders SET SCHEMA public;
    ALTER TABLE sf_old.events SET SCHEMA public;";

/// Stand-ins with the extension's own signatures in `public` (where the extension is not).
const PUBLIC_STAND_INS: &str = "
    CREATE FUNCTION public.snowflake_adopt(regclass, name DEFAULT 'id') RETURNS bigint LANGUAGE sql
      AS 'SELECT public.escalate(); SELECT 0::bigint';
    CREATE FUNCTION public.snowflake_create_partitions(regclass, timestamptz, timestamptz, interval DEFAULT '1 day')
      RETURNS SETOF regclass LANGUAGE sql AS 'SELECT public.escalate(); SELECT NULL::regclass WHERE false';";

fn hostile_app(name: &str) -> Cluster {
    let mut c = Cluster::new(name, "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE appowner LOGIN");
    c.sql("CREATE DATABASE app OWNER appowner");
    // As Security recommends for a database another role owns: the extension in a schema that
    // a superuser owns.
    c.try_sql_in("app", "CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC; CREATE EXTENSION snowflake SCHEMA snowflake")
        .unwrap();
    let rename = RENAME_PUBLIC;
    let out = c
        .psql_cmd_as("appowner", "app")
        .arg("-c")
        .arg(format!("{RECIPE_TRAPS}{rename}{PUBLIC_STAND_INS}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c
}

/// Runs SQL as the superuser in `app`, file-style (as a user pastes a recipe into psql).
fn superuser_runs(c: &Cluster, sql: &str) -> String {
    let path = c.dir.join("recipe.sql");
    std::fs::write(&path, sql).unwrap();
    let out = c.psql_cmd("app").arg("-f").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{sql}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What a superuser runs in a database another role owns resolves only to snowflake's objects
/// and PostgreSQL's: the README's migration recipe and its partition job, run as written.
#[test]
fn the_recipes_a_superuser_runs_resolve_only_to_the_extension() {
    let c = hostile_app("recipes-hostile");
    superuser_runs(&c, &common::readme_recipe("adopt"));
    assert_eq!(
        is_superuser(&c, "appowner"),
        "f",
        "the adopt recipe ran the owner's code"
    );
    assert_eq!(
        c.try_sql_in("app", "SET search_path = pg_catalog; SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'public.orders'::regclass")
            .unwrap(),
        "snowflake.snowflake_nextval()"
    );
    // The partition job, as pg_cron would run it.
    let job = common::readme_recipe("partitions-cron");
    let command = job
        .split("$$")
        .nth(1)
        .expect("the job's command between $$");
    superuser_runs(&c, command);
    assert_eq!(
        is_superuser(&c, "appowner"),
        "f",
        "the partition job ran the owner's code"
    );
    assert_eq!(
        c.try_sql_in("app", "SET search_path = pg_catalog; SELECT count(*) FROM snowflake.snowflake_partitions('public.events')")
            .unwrap(),
        "7"
    );
}

/// The traps above are live: the 1.4.0 README's unqualified call, and a call qualified with
/// `public` (which the owner renamed and made again), make the owner a superuser.
#[test]
fn the_recipe_traps_catch_an_unqualified_call() {
    for call in [
        "SELECT snowflake_adopt('orders');",
        "SET search_path = pg_catalog, pg_temp; SELECT public.snowflake_adopt('public.orders'::regclass);",
    ] {
        let c = hostile_app("recipes-traps-live");
        superuser_runs(&c, call);
        assert_eq!(is_superuser(&c, "appowner"), "t", "{call}");
    }
}

/// Settings `pg_settings` does not show (`session_authorization`) and transaction defaults that
/// would make the worker's first transaction wait for a serializable one the owner keeps
/// prepared: the worker still starts, acts as the superuser, and IDs flow.
#[test]
fn hidden_settings_and_transaction_defaults_of_the_database_do_not_stop_the_worker() {
    let mut c = Cluster::new(
        "owner-session",
        "snowflake.worker_id = 9\nmax_prepared_transactions = 4",
    );
    c.start();
    c.sql("CREATE ROLE appowner LOGIN CREATEDB");
    c.sql("CREATE DATABASE app");
    c.sql("CREATE EXTENSION snowflake");
    lease_made_then_given_to(&mut c, "app", "appowner");
    let as_owner = |sql: &str| {
        let out = c
            .psql_cmd_as("appowner", "app")
            .arg("-c")
            .arg(sql)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    as_owner(
        "CREATE TABLE x (i int);
         ALTER DATABASE app SET default_transaction_isolation = 'serializable';
         ALTER DATABASE app SET default_transaction_read_only = on;
         ALTER DATABASE app SET default_transaction_deferrable = on;
         ALTER DATABASE app SET session_authorization = 'appowner'",
    );
    as_owner("BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE; INSERT INTO x VALUES (1); PREPARE TRANSACTION 'hold'");
    c.sql("ALTER SYSTEM SET snowflake.database = 'app'");
    c.stop("fast");
    c.start();
    assert_eq!(c.sql("SELECT count(*) FROM pg_prepared_xacts"), "1");
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    assert!(
        !c.log().contains("does not run as a superuser"),
        "{}",
        c.log()
    );
    assert_eq!(is_superuser(&c, "appowner"), "f");
}

/// A LATIN1 lease database whose owner names things outside ASCII (a setting of a placeholder,
/// a table): the worker starts, and a refused call is 42501, never a panic (a name that is not
/// UTF-8 made a Rust string conversion fail: XX000, and a worker that restarts forever).
#[test]
fn names_outside_ascii_in_a_latin1_database_stop_nothing() {
    let mut c = Cluster::new("latin1-owner", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE appowner LOGIN; CREATE ROLE other LOGIN; CREATE EXTENSION snowflake");
    c.sql("CREATE DATABASE app ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
    lease_made_then_given_to(&mut c, "app", "appowner");
    c.try_sql_in(
        "app",
        "CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC; CREATE EXTENSION snowflake SCHEMA snowflake",
    )
    .unwrap();
    // The clients speak UTF-8; the server stores LATIN1.
    let utf8 = |c: &Cluster, user: &str, sql: &str| {
        let out = c
            .psql_cmd_as(user, "app")
            .env("PGCLIENTENCODING", "UTF8")
            .arg("-c")
            .arg(sql)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, err) = utf8(&c, "postgres", "ALTER DATABASE app SET \"é.x\" = 'é'");
    assert!(ok, "{err}");
    let (ok, err) = utf8(
        &c,
        "appowner",
        "CREATE TABLE public.\"tablé\" (id bigint PRIMARY KEY)",
    );
    assert!(ok, "{err}");
    c.sql("ALTER SYSTEM SET snowflake.database = 'app'");
    c.stop("fast");
    c.start();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    assert!(!c.log().contains("panicked"), "{}", c.log());
    let (ok, err) = utf8(
        &c,
        "other",
        "SELECT snowflake.snowflake_adopt('public.\"tablé\"'::regclass)",
    );
    assert!(!ok);
    let e = common::parse_error(&err);
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    assert!(e.message.contains("must be owner of table"), "{}", e.raw);
}

/// Runs SQL as the superuser in `db`, file-style, with psql's `-v` variables; the error if any.
fn superuser_runs_in(c: &Cluster, db: &str, sql: &str, vars: &[&str]) -> Result<String, String> {
    let path = c.dir.join("recipe.sql");
    std::fs::write(&path, sql).unwrap();
    let mut cmd = c.psql_cmd(db);
    for v in vars {
        cmd.args(["-v", v]);
    }
    let out = cmd.arg("-f").arg(&path).output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

/// The recipes a superuser runs in an application database, as the docs write them (the
/// partition job's command as pg_cron runs it).
fn app_recipes() -> Vec<(&'static str, String)> {
    let job = common::readme_recipe("partitions-cron");
    let command = job
        .split("$$")
        .nth(1)
        .expect("the job's command")
        .to_string();
    vec![
        ("adopt", common::readme_recipe("adopt")),
        ("partitions-cron", command),
        (
            "raise-after-failover",
            common::readme_recipe("raise-after-failover"),
        ),
        ("removal", common::readme_recipe("removal")),
    ]
}

/// Every recipe whose marker says this file runs it is among those run against derived traps
/// (`app_recipes`, and `raise-mark` in the lease database): a recipe marked for a superuser is
/// covered as written, and one added to the docs with that marker fails here until it is run.
#[test]
fn every_recipe_marked_for_this_file_is_run_against_derived_traps() {
    let mut run: Vec<String> = app_recipes()
        .into_iter()
        .map(|(name, _)| name.to_string())
        .chain(["raise-mark".to_string()])
        .collect();
    run.sort();
    assert_eq!(common::recipes_run_by("tests/security.rs"), run);
}

/// In `app` (see `hostile_app`), its owner plants stand-ins for everything `recipes` name, in
/// `public` and in the schema named after the superuser, and gives the tables they name index
/// predicates and expressions that escalate it.
fn plant_derived_traps(c: &Cluster, recipes: &[&str]) {
    let text = recipes.join("\n");
    let tables = common::named_tables(&text);
    let sql = format!(
        "{}{}{}",
        common::recipe_traps(recipes, "public", "appowner"),
        common::recipe_traps(recipes, "postgres", "appowner").replace(
            "CREATE FUNCTION postgres.escalate_appowner",
            "CREATE OR REPLACE FUNCTION postgres.escalate_appowner"
        ),
        common::table_traps(&tables, "public", "appowner"),
    );
    let out = c
        .psql_cmd_as("appowner", "app")
        .args(["-v", "ON_ERROR_STOP=1", "-c"])
        .arg(&sql)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "planting failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every recipe a superuser runs in an application database, run as written where the database's
/// owner (who also owns the tables) planted what the recipes' own text invites: a function of
/// every name they call, operators for what they combine, index predicates and expressions on
/// the tables they name, a schema named after the superuser and the database's search_path. The
/// traps are derived from the recipes, so a new or changed recipe is covered as it is written.
#[test]
fn recipes_a_superuser_runs_run_nothing_another_role_planted() {
    let c = hostile_app("recipes-derived");
    let recipes = app_recipes();
    let texts: Vec<&str> = recipes.iter().map(|(_, t)| t.as_str()).collect();
    plant_derived_traps(&c, &texts);
    assert_eq!(
        c.try_sql_in("app", "SET search_path = pg_catalog; SELECT (SELECT count(*) FROM pg_proc WHERE proowner = 'appowner'::regrole) > 300 AND (SELECT count(*) FROM pg_operator WHERE oprowner = 'appowner'::regrole) > 300").unwrap(),
        "t",
        "the stand-ins were not planted"
    );
    for (name, recipe) in &recipes {
        if *name == "removal" {
            // Every snowflake default but the one the recipe names goes first (DDL only).
            c.try_sql_in(
                "app",
                "ALTER TABLE public.events ALTER COLUMN id DROP DEFAULT",
            )
            .unwrap();
        }
        let out = superuser_runs_in(&c, "app", recipe, &[])
            .unwrap_or_else(|e| panic!("recipe {name} failed:\n{e}"));
        assert_eq!(
            is_superuser(&c, "appowner"),
            "f",
            "recipe {name} ran code of the database's or the table's owner as superuser:\n{out}"
        );
        // (Catalogs only: a superuser's query on the tables would plan over their traps.)
        let check = match *name {
            "adopt" => "SELECT pg_get_expr(adbin, adrelid) = 'snowflake.snowflake_nextval()' FROM pg_attrdef WHERE adrelid = 'public.orders'::regclass".to_string(),
            "partitions-cron" => "SELECT count(*) > 0 FROM pg_inherits WHERE inhparent = 'public.events'::regclass".to_string(),
            "raise-after-failover" => format!("SELECT snowflake.snowflake_nextval() > {}", out.lines().last().unwrap_or("NULL")),
            _ => "SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'snowflake') = 0 AND (SELECT attidentity = 'd' FROM pg_attribute WHERE attrelid = 'public.orders'::regclass AND attname = 'id')".to_string(),
        };
        assert_eq!(
            c.try_sql_in("app", &format!("SET search_path = pg_catalog; {check}"))
                .unwrap(),
            "t",
            "recipe {name} did not do its work"
        );
    }
}

/// The derived traps are live: 1.5.0's runbooks, which read the table's maximum as the superuser
/// (and, after a failover, called the floor function without its schema), make the owner a
/// superuser.
#[test]
fn the_derived_traps_catch_the_recipes_of_1_5_0() {
    let old = [
        "SELECT snowflake_set_floor(max(id)) FROM orders;",
        "SET search_path = pg_catalog, pg_temp;\nSELECT setval(pg_get_serial_sequence('public.orders', 'id'), (SELECT max(id) FROM public.orders));",
    ];
    for sql in old {
        let c = hostile_app("recipes-derived-live");
        let mut recipes: Vec<String> = app_recipes().into_iter().map(|(_, t)| t).collect();
        recipes.push(sql.to_string());
        let texts: Vec<&str> = recipes.iter().map(String::as_str).collect();
        plant_derived_traps(&c, &texts);
        c.try_sql_in("app", "SET search_path = pg_catalog; SELECT snowflake.snowflake_adopt('public.orders'::regclass)")
            .unwrap();
        let _ = superuser_runs_in(&c, "app", sql, &[]);
        assert_eq!(is_superuser(&c, "appowner"), "t", "{sql}");
    }
}

/// In the lease database (a superuser owns it), a role that may create in its `public` plants
/// stand-ins for the mark recipe, and for 1.5.0's retirement arithmetic, whose `bigint | integer`
/// found that role's operator before pg_catalog's: the recipe as written runs none of them, the
/// old arithmetic runs one.
#[test]
fn the_mark_recipe_runs_nothing_planted_in_the_lease_database() {
    let mut c = Cluster::new("lease-db-recipes", "snowflake.worker_id = 9");
    c.start();
    // The extension in the schema the recipes name (docs/security.md).
    c.sql("CREATE SCHEMA snowflake; CREATE EXTENSION snowflake SCHEMA snowflake; CREATE ROLE planter LOGIN; GRANT CREATE ON SCHEMA public TO planter");
    // A lease written, with its epoch (1.5.0's arithmetic reads both).
    c.wait_for("SELECT snowflake.snowflake_nextval() > 0", "t", 30);
    let mark = common::readme_recipe("raise-mark");
    let old_retire = "SELECT CASE WHEN l.last_value > 0 AND e.last_value >= 0 THEN
    ((l.last_value - e.last_value) << 22) | (current_setting('snowflake.datacenter_id')::bigint << 17)
    | (current_setting('snowflake.worker_id')::bigint << 12) | 4095 ELSE 0 END
  FROM _snowflake.lease_ms l, _snowflake.epoch_ms e";
    let sql = common::recipe_traps(&[&mark, old_retire], "public", "planter");
    let out = c
        .psql_cmd_as("planter", "postgres")
        .args(["-v", "ON_ERROR_STOP=1", "-c"])
        .arg(&sql)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        c.sql("SELECT count(*) > 500 FROM pg_operator WHERE oprnamespace = 'public'::regnamespace"),
        "t",
        "the stand-ins were not planted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Within the default max_clock_drift (10 s), which snowflake_set_floor() enforces.
    let ahead = c.sql_i64("SELECT (extract(epoch FROM now()) * 1000)::bigint + 5000");
    superuser_runs_in(&c, "postgres", &mark, &[&format!("old_mark={ahead}")]).unwrap();
    assert_eq!(
        is_superuser(&c, "planter"),
        "f",
        "the mark recipe ran planter's code"
    );
    assert!(c.sql_i64("SELECT last_value FROM _snowflake.lease_ms") >= ahead);
    // 1.5.0's mesh-retire ran with search_path = pg_catalog, public.
    let old = superuser_runs_in(
        &c,
        "postgres",
        &format!("SET search_path = pg_catalog, public;\n{old_retire};"),
        &[],
    );
    assert_eq!(
        is_superuser(&c, "planter"),
        "t",
        "the traps are not live: {old:?}"
    );
}

fn refused_for_database(c: &Cluster) -> common::PgError {
    refusal(c, "named by snowflake.database")
}

/// A lease database that a role other than a superuser owns is refused, naming its owner, until
/// a superuser owns it; one where an earlier release already made the lease is used with a
/// WARNING at every start, and `snowflake_node()` says so.
#[test]
fn a_lease_database_another_role_owns_is_refused_or_only_tolerated() {
    let mut c = Cluster::new("lease-db-owner", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE mallory LOGIN");
    c.sql("CREATE DATABASE app OWNER mallory");
    c.sql("CREATE EXTENSION snowflake");
    assert_eq!(
        c.sql("SELECT lease_database_owner, lease_database_trusted FROM snowflake_node()"),
        "postgres|t"
    );
    c.sql("ALTER SYSTEM SET snowflake.database = 'app'");
    c.stop("fast");
    c.start();
    let e = refused_for_database(&c);
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.message.contains("database \"app\"") && e.message.contains("role \"mallory\""),
        "{}",
        e.raw
    );
    assert!(e.hint.contains("OWNER TO"), "{}", e.raw);
    assert_eq!(
        c.sql("SELECT lease_database_owner, lease_database_trusted FROM snowflake_node()"),
        "mallory|f"
    );
    assert!(c
        .log()
        .contains("snowflake lease worker refuses database \"app\""));
    // Mallory makes a `_snowflake` of her own and drops it again: the worker still refuses her
    // database (1.6.0's first cut refused her schema, then made its lease there once she dropped
    // it, and tolerated the database from then on).
    c.try_sql_in(
        "app",
        "SET ROLE mallory; CREATE SCHEMA _snowflake; CREATE SEQUENCE _snowflake.lease_ms",
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(5));
    let e = refused_for_database(&c);
    assert!(e.message.contains("role \"mallory\""), "{}", e.raw);
    c.try_sql_in("app", "SET ROLE mallory; DROP SCHEMA _snowflake CASCADE")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(5));
    let e = refused_for_database(&c);
    assert!(e.message.contains("role \"mallory\""), "{}", e.raw);
    // The worker made nothing there.
    assert_eq!(
        c.try_sql_in(
            "app",
            "SELECT count(*) FROM pg_namespace WHERE nspname = '_snowflake'"
        )
        .unwrap(),
        "0"
    );
    // A superuser takes it: the worker continues by itself.
    c.sql("ALTER DATABASE app OWNER TO postgres");
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    assert_eq!(
        c.sql("SELECT lease_database_owner, lease_database_trusted FROM snowflake_node()"),
        "postgres|t"
    );
    // Given back to mallory with the lease in it (1.5.0's set-up): tolerated, with a WARNING.
    c.sql("ALTER DATABASE app OWNER TO mallory");
    c.stop("fast");
    c.start();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    assert_eq!(
        c.sql("SELECT lease_database_owner, lease_database_trusted FROM snowflake_node()"),
        "mallory|f"
    );
    assert!(
        c.log()
            .contains("database \"app\" named by snowflake.database is owned by role \"mallory\""),
        "{}",
        c.log()
    );
}

/// The functions that read a table's largest key refuse a transaction whose snapshot may be older
/// than their lock (a key committed in between would be missed: an identity or a floor below it).
#[test]
fn reading_a_tables_largest_key_needs_read_committed() {
    let mut c = Cluster::new("largest-key-isolation", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval()); INSERT INTO t DEFAULT VALUES");
    c.sql("CREATE TABLE s (id bigserial PRIMARY KEY); INSERT INTO s DEFAULT VALUES");
    for call in [
        "SELECT snowflake_set_floor_from('t')",
        "SELECT snowflake_unadopt('t')",
        "SELECT snowflake_adopt('s')",
    ] {
        for level in ["REPEATABLE READ", "SERIALIZABLE"] {
            let e = c.sql_err(&format!("BEGIN ISOLATION LEVEL {level}; {call}; COMMIT"));
            assert_eq!(e.sqlstate, "25000", "{call} in {level}: {}", e.raw);
        }
        c.sql(&format!("BEGIN; {call}; ROLLBACK"));
    }
    // A database whose default is SERIALIZABLE (its owner may set that: finding E): the HINT
    // does not send the caller to "the default", and says what to run first.
    c.sql("CREATE DATABASE ser");
    c.sql("ALTER DATABASE ser SET default_transaction_isolation = 'serializable'");
    c.try_sql_in("ser", "CREATE EXTENSION snowflake; CREATE TABLE s (id bigserial PRIMARY KEY); INSERT INTO s DEFAULT VALUES")
        .unwrap();
    let e = c
        .try_sql_in("ser", "SELECT snowflake_adopt('public.s'::regclass)")
        .expect_err("adopt ran in a serializable transaction");
    assert_eq!(e.sqlstate, "25000", "{}", e.raw);
    assert!(
        e.hint
            .contains("SET default_transaction_isolation = 'read committed'"),
        "{}",
        e.raw
    );
    // As the HINT says (each statement its own transaction, as psql runs a file).
    superuser_runs_in(
        &c,
        "ser",
        "SET default_transaction_isolation = 'read committed';\nSELECT snowflake_adopt('public.s'::regclass);",
        &[],
    )
    .unwrap();
}

/// The owner of another database pulls every lever PostgreSQL gives her over her own database
/// while IDs are issued in the lease database and in a third one: none stops an ID there for more
/// than the 5 s each call is allowed. (1.5.0's docs put the lease into such a database, where a
/// queued VACUUM FULL of a catalog the worker reads stopped every ID of the server.)
#[test]
fn the_owner_of_an_application_database_stops_no_id_elsewhere() {
    let mut c = Cluster::new("owner-locks", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE mallory LOGIN");
    c.sql("CREATE DATABASE app OWNER mallory");
    c.sql("CREATE DATABASE other");
    c.sql("CREATE EXTENSION snowflake");
    c.try_sql_in("other", "CREATE EXTENSION snowflake").unwrap();
    c.try_sql_as("mallory", "SELECT 1").unwrap();
    let games = [
        "BEGIN; SELECT count(*) FROM pg_catalog.pg_subscription_rel; SELECT count(*) FROM pg_catalog.pg_class; SELECT pg_sleep(40)",
        "VACUUM FULL pg_catalog.pg_subscription_rel",
        "VACUUM FULL pg_catalog.pg_class",
        "REINDEX TABLE pg_catalog.pg_namespace",
        "CLUSTER pg_catalog.pg_statistic USING pg_statistic_relid_att_inh_index",
        "BEGIN; ALTER DATABASE app CONNECTION LIMIT 0; SELECT pg_sleep(40)",
        "ALTER DATABASE app ALLOW_CONNECTIONS false",
    ];
    let mut held = Vec::new();
    for (i, game) in games.iter().enumerate() {
        held.push(
            c.psql_cmd_as("mallory", "app")
                .arg("-c")
                .arg(game)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        if i == 0 {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    // The same levers in the lease database, which she does not own, are refused or skipped.
    let e = c
        .try_sql_as(
            "mallory",
            "BEGIN; LOCK TABLE _snowflake.claims IN ACCESS EXCLUSIVE MODE; COMMIT",
        )
        .expect_err("locked the worker's claims");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    // Over 15 s (several lease renewals), every call in the lease database and in another one
    // answers within 5 s.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(15) {
        for db in ["postgres", "other"] {
            c.try_sql_in(
                db,
                "SET statement_timeout = '5s'; SELECT count(snowflake_nextval()) FROM generate_series(1, 5000)",
            )
            .unwrap_or_else(|e| panic!("an ID in {db} waited for mallory's locks: {}", e.raw));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    for mut h in held {
        let _ = h.kill();
        let _ = h.wait();
    }
    assert_eq!(is_superuser(&c, "mallory"), "f");
}

/// The bodies of the extension's functions written in SQL or PL/pgSQL, as installed in `db`:
/// the text that, resolved at run time, would call whatever a name finds (issue 49).
fn extension_bodies(c: &Cluster, db: &str) -> String {
    c.try_sql_in(
        db,
        "SET search_path = pg_catalog; \
         SELECT string_agg(p.prosrc, E'\\n' ORDER BY p.proname) FROM pg_proc p \
           JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
           JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake' \
           JOIN pg_language l ON l.oid = p.prolang AND l.lanname IN ('sql', 'plpgsql')",
    )
    .unwrap()
}

/// Every name the extension's own bodies call and every function of the extension, with the
/// arities it has: what an attacker would shadow.
fn extension_call_text(c: &Cluster, db: &str) -> String {
    let members = c
        .try_sql_in(
            db,
            "SET search_path = pg_catalog; \
             SELECT string_agg(p.proname || '(' || repeat('x,', p.pronargs) || 'x)' || E'\\n' || p.proname || '(x)' || E'\\n' || p.proname || '()', E'\\n') FROM pg_proc p \
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake'",
        )
        .unwrap();
    format!("{}\n{members}", extension_bodies(c, db))
}

fn plant_as(c: &Cluster, role: &str, db: &str, sql: &str) {
    let out = c.psql_cmd_as(role, db).arg("-c").arg(sql).output().unwrap();
    assert!(
        out.status.success(),
        "{role} could not plant: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every entry point a superuser runs on a table another role owns, qualified with the schema
/// the extension is in, with a safe search_path and every argument of its exact type (in a
/// schema others create in, a stand-in of fewer arguments makes a call that relies on a
/// default ambiguous: an error, nothing runs).
fn entry_points(schema: &str, owner: &str) -> String {
    format!(
        "SET search_path = pg_catalog, pg_temp;
         SELECT {schema}.snowflake_adopt('public.{owner}_orders'::regclass, 'id'::name);
         SELECT {schema}.snowflake_set_floor_from('public.{owner}_orders'::regclass, 'id'::name);
         SELECT count(*) FROM {schema}.snowflake_create_partitions('public.{owner}_events'::regclass, now() - interval '3 days', now() + interval '2 days', '1 day'::interval);
         SELECT count(*) FROM {schema}.snowflake_partitions('public.{owner}_events'::regclass);
         SELECT count(*) FROM {schema}.snowflake_drop_partitions('public.{owner}_events'::regclass, now() - interval '1 day');
         SELECT {schema}.snowflake_unadopt('public.{owner}_orders'::regclass, 'id'::name);
         SELECT count(*) FROM {schema}.snowflake_partitions('public.{owner}_events'::regclass);"
    )
}

/// The tables of `owner`: the superuser's own (where the extension's SQL runs as superuser) and
/// tom's (where it runs as tom).
fn tables(owner: &str) -> String {
    format!(
        "CREATE TABLE public.{owner}_orders (id bigserial PRIMARY KEY, note text);
         INSERT INTO public.{owner}_orders (note) VALUES ('old');
         CREATE TABLE public.{owner}_events (id bigint PRIMARY KEY, payload text) PARTITION BY RANGE (id);"
    )
}

/// Issue 49: no SQL of the extension resolves a name at run time where another role can
/// create. Traps are derived from the installed extension itself: for every name its SQL and
/// PL/pgSQL bodies call, and every function it has, stand-ins of every arity called with
/// integer, numeric, text (and more) arguments, in every schema the attacker may create in,
/// plus the extension's own schema renamed and made again. Then a superuser runs every entry
/// point, in a database whose `public` is open to everyone (eve plants, the README's quick start
/// makes the extension there) and in one mallory owns (the extension `SCHEMA public`, as the
/// Citus recipe makes it, then `public` renamed and remade). Nobody becomes superuser.
#[test]
fn the_extensions_own_sql_calls_nothing_another_role_can_plant() {
    let mut c = Cluster::new("own-sql-traps", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE mallory LOGIN; CREATE ROLE tom LOGIN; CREATE ROLE eve LOGIN");
    // Where the traps come from: the installed extension.
    c.sql("CREATE EXTENSION snowflake");
    let calls = extension_call_text(&c, "postgres");
    assert!(
        calls.contains("snowflake_adopt(") && calls.contains("_snowflake_max_key("),
        "{calls}"
    );
    let quick_start = common::readme_recipe("quick-start");

    // A database a superuser owns, whose public everyone may create in.
    c.sql("CREATE DATABASE open");
    c.try_sql_in("open", "GRANT CREATE ON SCHEMA public TO PUBLIC")
        .unwrap();
    plant_as(&c, "tom", "open", &tables("tom"));
    c.try_sql_in("open", &tables("postgres")).unwrap();
    // (Planted first, a stand-in with one of the extension's signatures would make CREATE
    // EXTENSION fail: security.md says so.)
    superuser_runs_in(&c, "open", &quick_start, &[]).unwrap();
    plant_as(
        &c,
        "eve",
        "open",
        &common::recipe_traps(&[&calls, &quick_start], "public", "eve"),
    );
    for owner in ["postgres", "tom"] {
        let out = superuser_runs_in(&c, "open", &entry_points("public", owner), &[])
            .unwrap_or_else(|e| panic!("the entry points failed:\n{e}"));
        assert_eq!(
            is_superuser(&c, "eve"),
            "f",
            "the extension's SQL ran eve's code as superuser ({owner}'s tables):\n{out}"
        );
        // adopt, set_floor_from, 5 made, 5 listed, 2 dropped, unadopt, 3 left.
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["1", "1", "5", "5", "2", "1", "3"]
        );
    }

    // A database mallory owns (and so its public on 15 and later): the extension made there
    // `SCHEMA public`, then mallory renames public and makes another, with the extension's own
    // signatures in it too.
    c.sql("CREATE DATABASE mal OWNER mallory");
    c.try_sql_in("mal", "ALTER SCHEMA public OWNER TO mallory")
        .unwrap();
    plant_as(&c, "mallory", "mal", "CREATE SCHEMA postgres");
    plant_as(
        &c,
        "mallory",
        "mal",
        &common::recipe_traps(&[&calls], "postgres", "mallory"),
    );
    c.try_sql_in(
        "mal",
        "SET search_path = pg_catalog, pg_temp; CREATE EXTENSION snowflake SCHEMA public",
    )
    .unwrap();
    plant_as(
        &c,
        "mallory",
        "mal",
        &common::recipe_traps(&[&calls], "public", "mallory"),
    );
    plant_as(
        &c,
        "mallory",
        "mal",
        &format!(
            "ALTER SCHEMA public RENAME TO public_old; CREATE SCHEMA public; GRANT ALL ON SCHEMA public TO PUBLIC; {}",
            common::recipe_traps(&[&calls], "public", "mallory")
        ),
    );
    plant_as(&c, "tom", "mal", &tables("tom"));
    c.try_sql_in("mal", &tables("postgres")).unwrap();
    for owner in ["postgres", "tom"] {
        let out = superuser_runs_in(&c, "mal", &entry_points("public_old", owner), &[])
            .unwrap_or_else(|e| panic!("the entry points failed:\n{e}"));
        assert_eq!(
            is_superuser(&c, "mallory"),
            "f",
            "the extension's SQL ran mallory's code as superuser ({owner}'s tables):\n{out}"
        );
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["1", "1", "5", "5", "2", "1", "3"]
        );
    }
}
