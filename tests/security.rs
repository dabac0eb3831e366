//! Nobody gets in: the lease worker runs as superuser in `snowflake.database`, which must be a
//! database a superuser owns (one another role owns is refused; a lease an earlier release put
//! into one is tolerated with a WARNING). Everything a role can do there (the owner's settings in
//! that tolerated case, objects planted before the worker first ran, connection switches) must
//! neither run its code as superuser, nor stop ID generation, nor hand it the high-water mark.

mod common;
use common::{extension_functions, overload_traps, plant_as, Cluster, Traps};

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
    c.try_sql_in_untimed(
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
        c.try_sql_in_untimed(
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

#[test]
fn the_lease_worker_starts_while_other_sessions_change_roles() {
    // Any ALTER ROLE empties the cache that answers superuser(); the worker's check of its own
    // role then reads the catalog, which it may only do inside a transaction (outside one: a
    // segmentation fault, and the postmaster restarts every process; seen at the second start).
    let mut c = Cluster::new("worker-roles", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE r1; CREATE ROLE r2");
    let mut changers: Vec<_> = ["r1", "r2"]
        .iter()
        .map(|role| {
            let script: String = (0..400_000)
                .map(|i| format!("ALTER ROLE {role} CONNECTION LIMIT {i};\n"))
                .collect();
            let path = c.dir.join(format!("changes-{role}.sql"));
            std::fs::write(&path, script).unwrap();
            c.psql_cmd("postgres")
                .args(["-v", "ON_ERROR_STOP=0", "-f"])
                .arg(&path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for start in 0..12 {
        let before = worker_pid(&c).unwrap_or_else(|| "0".into());
        let since = c.sql("SELECT now()");
        c.sql(&format!("SELECT pg_terminate_backend({before})"));
        // Back (its claim refreshed after the check), or crashed: the log says so.
        let back = common::eventually(30, || {
            c.log().contains("terminated by signal")
                || c.try_sql(&format!(
                    "SELECT (SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake lease') <> {before} \
                        AND EXISTS (SELECT FROM _snowflake.claims WHERE last_seen > '{since}')"
                )).as_deref() == Ok("t")
        });
        assert!(
            back && !c.log().contains("terminated by signal"),
            "start {start}: the lease worker crashed or did not come back:\n{}",
            c.log()
        );
    }
    for mut p in changers.drain(..) {
        let _ = p.kill();
        let _ = p.wait();
    }
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
    ALTER DATABASE app SET search_path = "$user", public, snowflake, pg_catalog;
    ALTER DATABASE app SET default_transaction_isolation = 'serializable';
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
        .split("$job$")
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
        .split("$job$")
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
        (
            "partitions-off-utc",
            common::readme_recipe("partitions-off-utc"),
        ),
        ("horizon-holders", common::readme_recipe("horizon-holders")),
        ("checklist", common::readme_recipe("checklist")),
        // Last: it drops the extension.
        ("removal", common::readme_recipe("removal")),
    ]
}

/// The recipes this file runs as written besides `app_recipes`: in the lease database
/// (`raise-mark`), as shell (`future-ids-alert`), where the extension is made (`extension-schema`)
/// and where `public` is open to everyone (`OPEN_RECIPES`).
const OTHER_RECIPES: &[&str] = &["raise-mark", "future-ids-alert", "extension-schema"];

/// The recipes a superuser runs in a database that a superuser owns whose `public` everyone may
/// create in, in this order: the README's quick start makes the extension there.
const OPEN_RECIPES: &[&str] = &[
    "quick-start",
    "short-forms",
    "partitions",
    "partitions-off-utc",
    "horizon-holders",
];

/// Every recipe whose marker says this file runs it is among those run against derived traps
/// (`app_recipes`, and `raise-mark` in the lease database): a recipe marked for a superuser is
/// covered as written, and one added to the docs with that marker fails here until it is run.
#[test]
fn every_recipe_marked_for_this_file_is_run_against_derived_traps() {
    let mut run: Vec<String> = app_recipes()
        .into_iter()
        .map(|(name, _)| name.to_string())
        .chain(OTHER_RECIPES.iter().map(|n| n.to_string()))
        .chain(OPEN_RECIPES.iter().map(|n| n.to_string()))
        .collect();
    run.sort();
    run.dedup();
    assert_eq!(common::recipes_run_by("tests/security.rs"), run);
}

/// In `app` (see `hostile_app`), its owner plants stand-ins for everything `recipes` name, in
/// `public` and in the schema named after the superuser, and gives the tables they name index
/// predicates and expressions that escalate it.
fn plant_derived_traps(c: &Cluster, recipes: &[&str]) {
    let text = recipes.join("\n");
    let tables = common::named_tables(&text);
    // And stand-ins of every function of the extension, of every kind, in both schemas.
    let fns = extension_functions(c, "app");
    let sql = format!(
        "{}{}{}{}",
        // First: the stand-ins with the extension's own shapes (a name the recipes call, planted
        // below returning bigint, would keep its place).
        [Traps::Exact, Traps::Loose]
            .iter()
            .flat_map(|&k| ["public", "postgres"].map(|s| overload_traps(&fns, s, "appowner", k)))
            .collect::<String>(),
        common::recipe_traps(recipes, "public", "appowner").replace(
            "CREATE FUNCTION public.escalate_appowner",
            "CREATE OR REPLACE FUNCTION public.escalate_appowner"
        ),
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
    let alert = common::readme_recipe("future-ids-alert");
    let texts: Vec<&str> = recipes
        .iter()
        .map(|(_, t)| t.as_str())
        .chain([alert.as_str()])
        .collect();
    plant_derived_traps(&c, &texts);
    assert_eq!(
        c.try_sql_in("app", "SET search_path = pg_catalog; SELECT (SELECT count(*) FROM pg_proc WHERE proowner = 'appowner'::regrole) > 300 AND (SELECT count(*) FROM pg_operator WHERE oprowner = 'appowner'::regrole) > 300").unwrap(),
        "t",
        "the stand-ins were not planted"
    );
    for (name, recipe) in &recipes {
        if *name == "removal" {
            // The future-IDs alert, as a monitoring host runs it (a superuser here), while the
            // extension is there: issue 49's finding B planted postgres.snowflake_node() and
            // operators for its arithmetic, with snowflake on the database's search_path.
            let app = c.uri().replace("/postgres?", "/app?");
            let out = common::run_recipes(&["future-ids-alert"], &[("DB", app)]);
            assert_eq!(out, "f", "the alert's answer");
            assert_eq!(
                is_superuser(&c, "appowner"),
                "f",
                "the future-IDs alert ran the database owner's code as superuser"
            );
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
            // Status: they ran (no partition is off UTC midnight, no transaction holds an ID).
            "partitions-off-utc" | "horizon-holders" => format!("SELECT {}", out.is_empty()),
            // Its ten checks, each a row: item | value | ok.
            "checklist" => format!("SELECT {}", out.lines().filter(|l| l.matches('|').count() == 2).count() == 10),
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
        // 1.6.0's future-IDs alert: unqualified, on the database's search_path (finding B).
        "SELECT extract(epoch FROM last_timestamp)::bigint - 1 > 60 FROM snowflake_node();",
        "SELECT snowflake_set_floor(max(id)) FROM orders;",
        "SET search_path = pg_catalog, pg_temp;\nSELECT setval(pg_get_serial_sequence('public.orders', 'id'), (SELECT max(id) FROM public.orders));",
    ];
    for sql in old {
        let c = hostile_app("recipes-derived-live");
        let mut recipes: Vec<String> = app_recipes().into_iter().map(|(_, t)| t).collect();
        recipes.push(sql.to_string());
        let texts: Vec<&str> = recipes.iter().map(String::as_str).collect();
        plant_derived_traps(&c, &texts);
        c.try_sql_in("app", "BEGIN ISOLATION LEVEL READ COMMITTED; SET search_path = pg_catalog; SELECT snowflake.snowflake_adopt('public.orders'::regclass); COMMIT")
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
/// plus `public` renamed and made again. Then a superuser runs every entry point, in a database
/// whose `public` is open to everyone (eve plants, the README's quick start makes the extension
/// there) and in one mallory owns (her `public` refused, the extension in a superuser's schema
/// as docs/security.md makes it). Nobody becomes superuser.
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
    entry_points_run_nothing_planted(&c, "open", "public", "eve");

    // A database mallory owns (and so its public on 15 and later). The extension may not go into
    // her public (1.7.0's first cut allowed it, and the Citus recipe put it there): it goes into a
    // schema a superuser owns, as docs/security.md's recipe makes it. Then mallory plants in
    // public and in her "$user", and renames public and makes another.
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
    let e = c
        .try_sql_in(
            "mal",
            "SET search_path = pg_catalog, pg_temp; CREATE EXTENSION snowflake SCHEMA public",
        )
        .expect_err("the extension went into mallory's public");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    superuser_runs_in(&c, "mal", &common::readme_recipe("extension-schema"), &[]).unwrap();
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
    entry_points_run_nothing_planted(&c, "mal", "snowflake", "mallory");
}

/// A superuser runs every entry point on his own tables and on tom's, in database `db` with the
/// extension in `schema`: each does its work, and `attacker` is still no superuser.
fn entry_points_run_nothing_planted(c: &Cluster, db: &str, schema: &str, attacker: &str) {
    for owner in ["postgres", "tom"] {
        let out = superuser_runs_in(c, db, &entry_points(schema, owner), &[])
            .unwrap_or_else(|e| panic!("the entry points failed:\n{e}"));
        assert_eq!(
            is_superuser(c, attacker),
            "f",
            "the extension's SQL ran {attacker}'s code as superuser ({owner}'s tables):\n{out}"
        );
        // adopt, set_floor_from, 5 made, 5 listed, 2 dropped, unadopt, 3 left.
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["1", "1", "5", "5", "2", "1", "3"]
        );
    }
}

/// Issue 49, finding A: in a database a superuser owns whose `public` everyone may create in
/// (15 with `GRANT CREATE ON SCHEMA public TO PUBLIC`), eve plants, before the extension is
/// there, stand-ins for every function of the extension that a loosely typed call would prefer
/// (`snowflake_drop_partitions(text, timestamptz)` won over `'events'` in 1.6.0's recipes), and
/// for every name and operator the recipes' text uses. The README's quick start makes the
/// extension there, and every recipe a superuser runs in such a database runs as written: each
/// does its work, and eve's code never runs. Then she adds stand-ins that make calls ambiguous
/// (one more argument with a default, fewer arguments): a call then fails with 42725, and still
/// runs nothing of hers.
#[test]
fn recipes_as_written_run_nothing_eve_planted_where_public_is_open() {
    let mut c = Cluster::new("recipes-open-public", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE eve LOGIN");
    // The extension's functions, from an installation elsewhere.
    c.sql("CREATE EXTENSION snowflake");
    let fns = extension_functions(&c, "postgres");
    let recipes: Vec<(&str, String)> = OPEN_RECIPES
        .iter()
        .map(|n| (*n, common::readme_recipe(n)))
        .collect();
    let alert = common::readme_recipe("future-ids-alert");
    let texts: Vec<&str> = recipes
        .iter()
        .map(|(_, t)| t.as_str())
        .chain([alert.as_str()])
        .collect();
    c.sql("CREATE DATABASE open");
    c.try_sql_in("open", "GRANT CREATE ON SCHEMA public TO PUBLIC")
        .unwrap();
    plant_as(
        &c,
        "eve",
        "open",
        &overload_traps(&fns, "public", "eve", Traps::Loose),
    );
    assert_eq!(
        c.try_sql_in("open", "SELECT count(*) >= 30 AND to_regprocedure('public.snowflake_drop_partitions(text, timestamptz)') IS NOT NULL FROM pg_proc WHERE proowner = 'eve'::regrole AND proname LIKE 'snowflake%'")
            .unwrap(),
        "t",
        "the stand-ins were not planted"
    );
    let open = c.uri().replace("/postgres?", "/open?");
    for (name, recipe) in &recipes {
        let out = superuser_runs_in(&c, "open", recipe, &[])
            .unwrap_or_else(|e| panic!("recipe {name} failed:\n{e}"));
        if *name == "quick-start" {
            // Once the extension is there (some of these have its signatures, and made first
            // would make CREATE EXTENSION fail: security.md's "squatting"): stand-ins for every
            // name and operator the recipes use.
            plant_as(
                &c,
                "eve",
                "open",
                &common::recipe_traps(&texts, "public", "eve").replace(
                    "CREATE FUNCTION public.escalate_eve",
                    "CREATE OR REPLACE FUNCTION public.escalate_eve",
                ),
            );
        }
        assert_eq!(
            is_superuser(&c, "eve"),
            "f",
            "recipe {name} ran eve's code as superuser:\n{out}"
        );
        match *name {
            "quick-start" => assert_eq!(out.lines().count(), 3, "{out}"),
            "partitions" => assert_eq!(
                out.lines().filter(|l| l.starts_with("events_")).count(),
                10,
                "{out}"
            ),
            "short-forms" => assert_eq!(
                out.lines().collect::<Vec<_>>(),
                [
                    "15G63YLn9Ae|0S8NYH5E27400",
                    "910499571847892992|910499571847892992|910499571847892992"
                ]
            ),
            _ => {}
        }
    }
    assert_eq!(
        common::run_recipes(&["future-ids-alert"], &[("DB", open.clone())]),
        "f"
    );
    assert_eq!(is_superuser(&c, "eve"), "f", "the alert ran eve's code");

    // snowflake_adopt() resolves no name: eve's snowflake_nextval(integer DEFAULT 0) makes the
    // name ambiguous, and adopt writes the default all the same (finding D; 1.7.0's first cut
    // failed with 42725), on the table and on each of its partitions.
    plant_as(
        &c,
        "eve",
        "open",
        "CREATE FUNCTION public.snowflake_nextval(integer DEFAULT 0) RETURNS bigint LANGUAGE sql AS 'SELECT public.escalate_eve(); SELECT 0::bigint'",
    );
    c.try_sql_in(
        "open",
        "CREATE TABLE public.legacy (id bigserial PRIMARY KEY, note text);
         INSERT INTO public.legacy (note) VALUES ('old');
         CREATE TABLE public.plegacy (id bigint NOT NULL DEFAULT 0, note text) PARTITION BY RANGE (id);
         CREATE TABLE public.plegacy_1 PARTITION OF public.plegacy FOR VALUES FROM (MINVALUE) TO (MAXVALUE);",
    )
    .unwrap();
    let e = c
        .try_sql_in(
            "open",
            "CREATE TABLE public.t (id bigint DEFAULT snowflake_nextval())",
        )
        .expect_err("the name is ambiguous");
    assert_eq!(e.sqlstate, "42725", "{}", e.raw);
    for t in ["public.legacy", "public.plegacy"] {
        c.try_sql_in(
            "open",
            &format!("SET search_path = pg_catalog, pg_temp; SELECT public.snowflake_adopt('{t}'::regclass, 'id'::name)"),
        )
        .unwrap_or_else(|e| panic!("adopt {t}: {}", e.raw));
    }
    // Each default calls the extension's function, by OID, and works.
    assert_eq!(
        c.try_sql_in(
            "open",
            "SET search_path = pg_catalog; \
             SELECT string_agg(ad.adrelid::regclass::text || ':' || (d.refobjid = 'public.snowflake_nextval()'::regprocedure)::text, ',' ORDER BY 1) \
               FROM pg_attrdef ad JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid AND d.refclassid = 'pg_proc'::regclass \
              WHERE ad.adrelid IN ('public.legacy'::regclass, 'public.plegacy'::regclass, 'public.plegacy_1'::regclass)"
        )
        .unwrap(),
        "public.legacy:true,public.plegacy:true,public.plegacy_1:true"
    );
    let ids = c
        .try_sql_in(
            "open",
            "INSERT INTO public.legacy (note) VALUES ('new'); INSERT INTO public.plegacy_1 (note) VALUES ('new');
             SELECT count(*) FROM public.legacy WHERE id > 1 AND note = 'new'",
        )
        .unwrap();
    assert_eq!(ids, "1");
    assert_eq!(is_superuser(&c, "eve"), "f", "adopt ran eve's code");

    // Stand-ins that make a call ambiguous: the recipes that call the extension fail with 42725
    // (security.md: what a schema open to others still allows), and nothing of eve's runs.
    plant_as(
        &c,
        "eve",
        "open",
        &overload_traps(&fns, "public", "eve", Traps::Ambiguous),
    );
    for (name, recipe) in recipes
        .iter()
        .filter(|(n, _)| ["short-forms", "partitions-off-utc", "horizon-holders"].contains(n))
    {
        let e = superuser_runs_in(&c, "open", recipe, &[])
            .expect_err("a call that two functions match ran");
        assert!(e.contains("42725"), "recipe {name}: {e}");
        assert_eq!(is_superuser(&c, "eve"), "f", "recipe {name}");
    }
    let e = std::panic::catch_unwind(|| {
        common::run_recipes(&["future-ids-alert"], &[("DB", open.clone())])
    });
    assert!(e.is_err(), "the alert found one snowflake_node()");
    assert_eq!(is_superuser(&c, "eve"), "f", "the alert ran eve's code");

    assert_eq!(is_superuser(&c, "eve"), "f");
}

/// The stderr of `sql` run by a superuser in `db` (its WARNINGs), and whether it succeeded.
fn superuser_warnings(c: &Cluster, db: &str, sql: &str) -> (bool, String) {
    let out = c.psql_cmd(db).arg("-c").arg(sql).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Issue 49, finding C: `CREATE EXTENSION` refuses a schema whose owner is not a superuser (the
/// database owner's `public` on 15 and later, her `"$user"`, a `snowflake` she made first); the
/// recipe of docs/security.md stops at a schema she made first and works in one a superuser made;
/// a superuser's `public` open to everyone is accepted with a WARNING; an update in a schema she
/// owns warns. (1.7.0's first cut made the extension in her schema, which she renamed and remade
/// with her own `snowflake_adopt(regclass)`, or dropped with the extension.)
#[test]
fn the_extension_goes_only_into_a_schema_a_superuser_owns() {
    let mut c = Cluster::new("extension-schema", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE mallory LOGIN");
    c.sql("CREATE DATABASE mal OWNER mallory");
    // The README's bare CREATE EXTENSION: public is pg_database_owner's, that is mallory's.
    let e = c
        .try_sql_in("mal", "CREATE EXTENSION snowflake")
        .expect_err("created in mallory's public");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    assert!(
        e.message.contains("schema public") && e.message.contains("role mallory"),
        "{}",
        e.raw
    );
    assert!(e.detail.contains("pg_database_owner"), "{}", e.raw);
    assert!(
        e.hint
            .contains("CREATE EXTENSION snowflake SCHEMA snowflake"),
        "{}",
        e.raw
    );
    // Her "$user" schema, first on the search_path.
    plant_as(&c, "mallory", "mal", "CREATE SCHEMA postgres");
    let e = c
        .try_sql_in("mal", "CREATE EXTENSION snowflake")
        .expect_err("created in mallory's \"$user\"");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    assert!(e.message.contains("schema postgres"), "{}", e.raw);
    // She made schema snowflake first: the recipe stops at CREATE SCHEMA...
    plant_as(
        &c,
        "mallory",
        "mal",
        "CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC",
    );
    let recipe = common::readme_recipe("extension-schema");
    let e = superuser_runs_in(&c, "mal", &recipe, &[]).expect_err("the recipe went on");
    assert!(e.contains("42P06"), "{e}");
    // ...and run on without ON_ERROR_STOP, CREATE EXTENSION refuses her schema.
    let path = c.dir.join("no-stop.sql");
    std::fs::write(&path, recipe.replace("\\set ON_ERROR_STOP on", "")).unwrap();
    let out = c
        .psql_cmd("mal")
        .args(["-v", "ON_ERROR_STOP=0", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("42501") && err.contains("schema snowflake"),
        "{err}"
    );
    assert_eq!(
        c.try_sql_in(
            "mal",
            "SELECT count(*) FROM pg_extension WHERE extname = 'snowflake'"
        )
        .unwrap(),
        "0"
    );
    // A superuser drops hers: the recipe works, and the schema is out of her reach (she can
    // neither rename nor drop it, nor create in it).
    c.try_sql_in("mal", "DROP SCHEMA snowflake CASCADE")
        .unwrap();
    superuser_runs_in(&c, "mal", &recipe, &[]).unwrap();
    assert_eq!(
        c.try_sql_in("mal", "SELECT pg_get_userbyid(n.nspowner) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'snowflake'")
            .unwrap(),
        "postgres"
    );
    for sql in [
        "ALTER SCHEMA snowflake RENAME TO s2",
        "DROP SCHEMA snowflake CASCADE",
        "CREATE FUNCTION snowflake.snowflake_adopt(text) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'",
    ] {
        let out = c.psql_cmd_as("mallory", "mal").arg("-c").arg(sql).output().unwrap();
        assert!(!out.status.success(), "mallory: {sql}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("42501"),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A superuser's public that everyone may create in: accepted, with a WARNING.
    c.sql("CREATE DATABASE open");
    c.try_sql_in("open", "GRANT CREATE ON SCHEMA public TO PUBLIC")
        .unwrap();
    let (ok, err) = superuser_warnings(&c, "open", "CREATE EXTENSION snowflake");
    assert!(ok, "{err}");
    assert!(
        err.contains("WARNING") && err.contains("open to CREATE"),
        "{err}"
    );
    // Not where only superusers may create.
    c.sql("CREATE DATABASE closed");
    let (ok, err) = superuser_warnings(&c, "closed", "CREATE EXTENSION snowflake");
    assert!(ok && !err.contains("WARNING"), "{err}");

    // 1.6.0 made in her public, then updated: a WARNING (refusing would keep 1.6.0's SQL).
    c.sql("CREATE DATABASE mal2 OWNER mallory");
    c.try_sql_in("mal2", "CREATE EXTENSION snowflake VERSION '1.6.0'")
        .unwrap();
    let (ok, err) = superuser_warnings(&c, "mal2", "ALTER EXTENSION snowflake UPDATE");
    assert!(ok, "{err}");
    assert!(
        err.contains("WARNING") && err.contains("which role mallory owns"),
        "{err}"
    );
}

/// How a recipe run as written ended.
#[derive(Debug, PartialEq)]
enum Ran {
    /// Every statement succeeded.
    Done,
    /// Its first error stopped it: nothing after it ran.
    Stopped,
}

/// Runs `sql` as the superuser in `db` as a user runs a file with psql: psql's own default goes
/// on after an error, so only the recipe's `\set ON_ERROR_STOP on` stops it. An error where the
/// recipe went on after an error (the caller checks who became superuser first).
fn run_as_written(
    c: &Cluster,
    db: &str,
    name: &str,
    sql: &str,
    vars: &[&str],
) -> Result<Ran, String> {
    let path = c.dir.join("as-written.sql");
    std::fs::write(&path, sql).unwrap();
    let mut cmd = c.psql_cmd(db);
    cmd.args(["-v", "ON_ERROR_STOP=0"]);
    for v in vars {
        cmd.args(["-v", v]);
    }
    let out = cmd.arg("-f").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    match (out.status.code(), err.matches("ERROR:").count()) {
        (Some(0), 0) => Ok(Ran::Done),
        (Some(3), 1) => Ok(Ran::Stopped),
        (code, n) => Err(format!(
            "recipe {name} in {db} went on after an error ({n} errors, exit {code:?}):\n{err}"
        )),
    }
}

/// The relations a recipe creates or reads: the name after `CREATE TABLE`, `FROM`, `JOIN`,
/// `INTO` and `UPDATE` (not a function's, not the catalogs'), and each `'schema.name'::regclass`;
/// unqualified names are `public`'s.
fn recipe_relations(texts: &[&str]) -> Vec<String> {
    let mut names = common::named_tables(&texts.join("\n"));
    for text in texts {
        let words: Vec<&str> = text.split_whitespace().collect();
        for w in words.windows(2) {
            let key = w[0].to_ascii_lowercase();
            if !["table", "from", "join", "into", "update"].contains(&key.as_str()) {
                continue;
            }
            let name: String = w[1]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            let rest = &w[1][name.len()..];
            if name.is_empty()
                || rest.starts_with('(')
                || name.starts_with("pg_")
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                continue;
            }
            let name = if name.contains('.') {
                name
            } else {
                format!("public.{name}")
            };
            if name.starts_with("public.") && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// SQL with which `role` squats `names` before a superuser makes them: a table with a trigger
/// that makes `role` a superuser at every INSERT, UPDATE or DELETE (and index predicates that do
/// when a query on it is planned), or, for the names in `views`, a view whose every row calls
/// such a function. Everyone may write to them.
fn squat_relations(names: &[String], role: &str, views: &[&str]) -> String {
    let mut sql = format!(
        "CREATE FUNCTION public.squat_{role}() RETURNS bigint LANGUAGE plpgsql AS $s$
           BEGIN BEGIN ALTER ROLE {role} SUPERUSER; EXCEPTION WHEN OTHERS THEN NULL; END; RETURN 0; END $s$;
         CREATE FUNCTION public.squat_trigger_{role}() RETURNS trigger LANGUAGE plpgsql AS $s$
           BEGIN PERFORM public.squat_{role}(); RETURN NEW; END $s$;
         GRANT EXECUTE ON FUNCTION public.squat_{role}(), public.squat_trigger_{role}() TO PUBLIC;\n"
    );
    let mut tables = Vec::new();
    for n in names {
        if views.contains(&n.as_str()) {
            sql.push_str(&format!(
                "CREATE VIEW {n} AS SELECT public.squat_{role}() AS id, 'x'::text AS item, 'x'::text AS payload;\n"
            ));
        } else {
            sql.push_str(&format!(
                "CREATE TABLE {n} (id bigint, item text, payload text);
                 CREATE TRIGGER squat BEFORE INSERT OR UPDATE OR DELETE ON {n}
                   FOR EACH ROW EXECUTE FUNCTION public.squat_trigger_{role}();\n"
            ));
            tables.push(n.clone());
        }
        sql.push_str(&format!("GRANT ALL ON {n} TO PUBLIC;\n"));
    }
    sql + &common::table_traps(&tables, "public", role)
}

/// The recipes a superuser runs, each as a user runs it, in order: `OPEN_RECIPES` (the quick
/// start makes the extension), then `app_recipes` (the partition job with the `\set
/// ON_ERROR_STOP on` pg_cron's single query has: it stops at its first error too).
fn recipes_in_order(open: bool) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&str, String)> = if open {
        OPEN_RECIPES
            .iter()
            .map(|n| (*n, common::readme_recipe(n)))
            .collect()
    } else {
        Vec::new()
    };
    v.extend(app_recipes().into_iter().map(|(n, t)| {
        if n == "partitions-cron" {
            (n, format!("\\set ON_ERROR_STOP on\n{t}"))
        } else {
            (n, t)
        }
    }));
    v
}

/// Issue 49, third round (findings A and B): another role makes, before the superuser runs the
/// docs' recipes, relations named like every one they create or read: tables with a trigger and
/// index predicates that make her a superuser, views whose rows do. In a database a superuser
/// owns whose `public` everyone may create in (eve), and in one mallory owns (with her
/// `public.snowflake_nextval()` and every other name the quick start calls, which its
/// `CREATE TABLE` would bind once `CREATE EXTENSION` is refused). Every recipe runs as written,
/// with psql's default of going on after an error: each does its work or stops at its first
/// error, and nobody becomes superuser.
#[test]
fn recipes_stop_at_their_first_error_where_another_role_made_their_relations() {
    let mut c = Cluster::new("recipes-squatted", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE eve LOGIN; CREATE ROLE mallory LOGIN");
    let recipes = recipes_in_order(true);
    let texts: Vec<&str> = recipes.iter().map(|(_, t)| t.as_str()).collect();
    let names = recipe_relations(&texts);
    assert!(
        names.contains(&"public.orders".to_string())
            && names.contains(&"public.events".to_string()),
        "{names:?}"
    );
    let quick_start = common::readme_recipe("quick-start");
    for (db, views) in [
        ("squat_tables", vec![]),
        ("squat_views", vec!["public.orders", "public.events"]),
        ("squat_mixed", vec!["public.events"]),
    ] {
        c.sql(&format!("CREATE DATABASE {db}"));
        c.try_sql_in(db, "GRANT CREATE ON SCHEMA public TO PUBLIC")
            .unwrap();
        plant_as(&c, "eve", db, &squat_relations(&names, "eve", &views));
        for (name, recipe) in &recipes {
            let ran = run_as_written(&c, db, name, recipe, &[]);
            assert_eq!(
                is_superuser(&c, "eve"),
                "f",
                "recipe {name} ran eve's code as superuser in {db} ({ran:?})"
            );
            let ran = ran.unwrap_or_else(|e| panic!("{e}"));
            if *name == "quick-start" {
                assert_eq!(ran, Ran::Stopped, "the quick start went past eve's orders");
            }
        }
    }

    // A database mallory owns: the quick start stops at CREATE EXTENSION (42501); then the
    // extension goes into a superuser's schema (security.md) and the recipes for such a
    // database run.
    c.sql("CREATE DATABASE mal OWNER mallory");
    c.try_sql_in("mal", "ALTER SCHEMA public OWNER TO mallory")
        .unwrap();
    plant_as(
        &c,
        "mallory",
        "mal",
        &format!(
            "{}{}",
            squat_relations(&names, "mallory", &["public.events"]),
            common::recipe_traps(&[&quick_start], "public", "mallory")
        ),
    );
    let ran = run_as_written(&c, "mal", "quick-start", &quick_start, &[]);
    assert_eq!(
        is_superuser(&c, "mallory"),
        "f",
        "the quick start ran mallory's code ({ran:?})"
    );
    assert_eq!(ran, Ok(Ran::Stopped));
    assert_eq!(
        run_as_written(
            &c,
            "mal",
            "extension-schema",
            &common::readme_recipe("extension-schema"),
            &[]
        ),
        Ok(Ran::Done)
    );
    for (name, recipe) in recipes_in_order(false) {
        let ran = run_as_written(&c, "mal", name, &recipe, &[]);
        assert_eq!(
            is_superuser(&c, "mallory"),
            "f",
            "recipe {name} ran mallory's code as superuser ({ran:?})"
        );
        ran.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Issue 49, third round (finding C): the quick start puts the extension in `public`; tom, who
/// may create schemas in the database (`GRANT CREATE ON DATABASE`, which a database's owner
/// always has), makes a schema `snowflake` with a stand-in of every function of the extension.
/// Every recipe a superuser runs finds the extension's schema in `pg_extension` and calls
/// through it: each does its work, and tom's code never runs. (Recipes that named
/// `snowflake.snowflake_adopt(...)` ran his.)
#[test]
fn recipes_call_the_extension_where_it_is_not_a_schema_named_snowflake() {
    let mut c = Cluster::new("recipes-schema-squat", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE tom LOGIN");
    c.sql("CREATE DATABASE app1");
    c.sql("GRANT CREATE ON DATABASE app1 TO tom");
    for name in ["quick-start", "partitions"] {
        assert_eq!(
            run_as_written(&c, "app1", name, &common::readme_recipe(name), &[]),
            Ok(Ran::Done)
        );
    }
    // The table the adopt recipe migrates: a bigserial one.
    c.try_sql_in(
        "app1",
        "DROP TABLE public.orders; CREATE TABLE public.orders (id bigserial PRIMARY KEY, item text); INSERT INTO public.orders (item) VALUES ('old')",
    )
    .unwrap();
    let fns = extension_functions(&c, "app1");
    plant_as(
        &c,
        "tom",
        "app1",
        &format!(
            "CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC; {}{}",
            overload_traps(&fns, "snowflake", "tom", Traps::Exact),
            overload_traps(&fns, "snowflake", "tom", Traps::Loose)
        ),
    );
    assert_eq!(
        c.try_sql_in("app1", "SELECT to_regprocedure('snowflake.snowflake_adopt(regclass)') IS NOT NULL AND to_regprocedure('snowflake.snowflake_create_partitions(regclass, timestamptz, timestamptz)') IS NOT NULL")
            .unwrap(),
        "t",
        "tom's stand-ins were not planted"
    );
    let now_ms = c.sql("SELECT (extract(epoch FROM now()) * 1000)::bigint");
    let mut recipes = recipes_in_order(false);
    // Before the removal, which drops the extension.
    recipes.insert(
        recipes.len() - 1,
        ("raise-mark", common::readme_recipe("raise-mark")),
    );
    for (name, recipe) in recipes {
        if name == "removal" {
            c.try_sql_in(
                "app1",
                "ALTER TABLE public.events ALTER COLUMN id DROP DEFAULT",
            )
            .unwrap();
        }
        let mark = format!("old_mark={now_ms}");
        let ran = run_as_written(&c, "app1", name, &recipe, &[&mark]);
        assert_eq!(
            is_superuser(&c, "tom"),
            "f",
            "recipe {name} ran tom's snowflake.* as superuser ({ran:?})"
        );
        assert_eq!(ran, Ok(Ran::Done), "recipe {name}");
    }
    assert_eq!(
        c.try_sql_in(
            "app1",
            "SELECT count(*) FROM pg_extension WHERE extname = 'snowflake'"
        )
        .unwrap(),
        "0",
        "the removal recipe did not run to its end"
    );
}

/// Issue 49, third round (finding D1): eve makes, in a `public` open to everyone, a table named
/// like the partition a superuser's daily call makes five days ahead. The call makes every
/// partition all the same (that one named with `_1`, with a WARNING), rows of that day find it,
/// and eve's table is neither touched nor run. (1.7.0's first cut failed with 42P07 and made
/// nothing, day after day, until inserts failed with 23514.)
#[test]
fn a_table_named_like_a_partition_stops_no_partition() {
    let mut c = Cluster::new("partition-name-squat", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE ROLE eve LOGIN");
    c.sql("CREATE DATABASE open");
    c.try_sql_in("open", "GRANT CREATE ON SCHEMA public TO PUBLIC; CREATE EXTENSION snowflake; CREATE TABLE public.tevents (id bigint PRIMARY KEY, payload text) PARTITION BY RANGE (id)")
        .unwrap();
    let day = c.sql("SELECT to_char((now() + interval '5 days') AT TIME ZONE 'UTC', 'YYYYMMDD')");
    plant_as(
        &c,
        "eve",
        "open",
        &squat_relations(&[format!("public.tevents_{day}")], "eve", &[]),
    );
    let (ok, err) = superuser_warnings(
        &c,
        "open",
        "SET search_path = pg_catalog, pg_temp; SELECT count(*) FROM public.snowflake_create_partitions('public.tevents'::regclass, now(), now() + interval '7 days')",
    );
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("public.tevents_{day}_1"))
            && err.contains("is taken by a relation that is not its partition"),
        "{err}"
    );
    assert_eq!(
        c.try_sql_in("open", &format!(
            "SET search_path = pg_catalog; \
             SELECT count(*) FROM public.snowflake_partitions('public.tevents'::regclass); \
             INSERT INTO public.tevents VALUES (public.snowflake_min_id(now() + interval '5 days'), 'x'); \
             SELECT tableoid::regclass FROM public.tevents; \
             SELECT count(*) FROM pg_inherits WHERE inhrelid = 'public.tevents_{day}'::regclass"
        ))
        .unwrap(),
        format!("7\npublic.tevents_{day}_1\n0")
    );
    assert_eq!(is_superuser(&c, "eve"), "f");
}
