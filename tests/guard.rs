//! The key guard, `snowflake_guard()`: an explicit ID that a generator would issue again later is
//! refused at the statement that brings it (issue 51), never an ID the generator issued, never a
//! row that logical replication applies; and the docs' way to bring rows in with their IDs.

mod common;
use common::{eventually, readme_recipe, Cluster};

/// This server's pair is datacenter 1, worker 2.
const CONF: &str =
    "snowflake.datacenter_id = 1\nsnowflake.worker_id = 2\nsnowflake.max_clock_drift = '10s'";

/// A server with the extension, a role `app` that owns `public.orders`, guarded by the docs'
/// recipe, run as written by its owner.
fn guarded(name: &str, extra: &str) -> Cluster {
    let mut c = Cluster::new(name, &format!("{CONF}\n{extra}"));
    c.start();
    c.sql(
        "CREATE EXTENSION snowflake; CREATE ROLE app LOGIN; GRANT CREATE ON SCHEMA public TO app",
    );
    as_app(
        &c,
        "CREATE TABLE public.orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), note text)",
    );
    as_app(&c, &readme_recipe("guard"));
    c
}

fn as_app(c: &Cluster, sql: &str) -> String {
    c.try_sql_as("app", sql)
        .unwrap_or_else(|e| panic!("{sql}\n{}", e.raw))
}

fn app_err(c: &Cluster, sql: &str) -> common::PgError {
    match c.try_sql_as("app", sql) {
        Ok(out) => panic!("expected an error from {sql}, got {out}"),
        Err(e) => e,
    }
}

/// The scenario, and every way a row brings a key: INSERT, COPY, INSERT ... ON
/// CONFLICT, UPDATE of the key. The HINT's fix (the floor) then lets the same ID in.
#[test]
fn an_explicit_id_the_generator_would_reach_is_refused_at_its_statement() {
    let c = guarded("guard-refuses", "");
    as_app(&c, "INSERT INTO orders (note) VALUES ('by default')");
    // snowflake_compose(now() + '4 s', ...) on this server's pair: without the guard a later
    // default would collide with it; with it, the INSERT itself fails.
    let ahead = "snowflake_compose(now() + interval '4 s', 1, 2, 0)";
    let e = app_err(
        &c,
        &format!("INSERT INTO orders (id, note) VALUES ({ahead}, 'explicit')"),
    );
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
    assert!(
        e.message
            .contains("is one that this server's snowflake_nextval() would issue later"),
        "{}",
        e.raw
    );
    for fact in [
        "Column \"id\" of table \"orders\"",
        "on the pair datacenter_id 1, worker_id 2",
        "That is this server's pair, and it has issued IDs up to ",
        "The clock reads ",
    ] {
        assert!(e.detail.contains(fact), "{fact}: {}", e.raw);
    }
    assert!(
        e.hint.contains("Leave the column out") && e.hint.contains("snowflake_set_floor(id)"),
        "{}",
        e.raw
    );
    // The same in a table without the guard is stored: what issue 51 called a time bomb.
    as_app(
        &c,
        "CREATE TABLE plain (id bigint PRIMARY KEY DEFAULT snowflake_nextval())",
    );
    as_app(&c, &format!("INSERT INTO plain VALUES ({ahead})"));

    // COPY, INSERT ... ON CONFLICT (both arms), UPDATE of the key.
    let id = c.sql_i64(&format!("SELECT {ahead}"));
    let existing = c.sql_i64("SELECT min(id) FROM orders");
    for sql in [
        format!("COPY orders (id, note) FROM PROGRAM 'echo {id},copied' (FORMAT csv)"),
        format!("INSERT INTO orders (id) VALUES ({id}) ON CONFLICT DO NOTHING"),
        format!(
            "INSERT INTO orders (id) VALUES ({existing}) ON CONFLICT (id) DO UPDATE SET id = {id}"
        ),
        format!("UPDATE orders SET id = {id}"),
    ] {
        let e = c.sql_err(&sql);
        assert_eq!(e.sqlstate, "23514", "{sql}: {}", e.raw);
        assert!(
            e.message.contains(&format!("explicit ID {id} ")),
            "{}",
            e.raw
        );
    }
    // A row that keeps its key, and a key below what the generator issued, pass.
    as_app(&c, "UPDATE orders SET id = id, note = 'kept'");
    let gone = as_app(&c, "DELETE FROM orders RETURNING id");
    as_app(
        &c,
        &format!("INSERT INTO orders (id, note) VALUES ({gone}, 'back')"),
    );
    as_app(
        &c,
        "INSERT INTO orders (id) SELECT snowflake_nextval() FROM generate_series(1, 100)",
    );

    // Another pair: refused only more than max_clock_drift (10 s) ahead of the clock.
    let e = app_err(
        &c,
        "INSERT INTO orders (id) VALUES (snowflake_compose(now() + interval '1 min', 3, 4, 0))",
    );
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
    assert!(
        e.message
            .contains("the server of its pair would issue later"),
        "{}",
        e.raw
    );
    assert!(
        e.detail
            .contains("more than snowflake.max_clock_drift (10000 ms) allows")
            && e.detail
                .contains("this server's pair is datacenter_id 1, worker_id 2"),
        "{}",
        e.raw
    );
    as_app(
        &c,
        "INSERT INTO orders (id) VALUES (snowflake_compose(now() + interval '5 s', 3, 4, 0))",
    );
    as_app(
        &c,
        "INSERT INTO orders (id) VALUES (snowflake_compose(now() - interval '1 day', 3, 4, 0))",
    );

    // The HINT's fix: the floor above the ID (as a superuser), then the same INSERT passes, and
    // the defaults continue above it.
    c.sql(&format!("SELECT snowflake_set_floor({id})"));
    as_app(
        &c,
        &format!("INSERT INTO orders (id, note) VALUES ({id}, 'after the floor')"),
    );
    assert_eq!(
        as_app(
            &c,
            &format!("INSERT INTO orders DEFAULT VALUES RETURNING id > {id}")
        ),
        "t"
    );
    // The guard never raised the floor itself: the table without it still holds a bomb for
    // the IDs of the next seconds, and nothing moved the generator past what we set.
    assert_eq!(c.sql("SELECT lead_ms <= 10000 FROM snowflake_node()"), "t");
}

/// IDs of the column's default, and IDs of `snowflake_nextval()` given explicitly by the same or
/// another backend, always pass, several clients at once.
#[test]
fn the_generators_own_ids_pass_under_load() {
    let c = guarded("guard-load", "");
    c.sql("ALTER TABLE orders OWNER TO postgres");
    let out = c.pgbench_ok(
        "INSERT INTO orders DEFAULT VALUES;\n\
         INSERT INTO orders (id) SELECT snowflake_nextval();\n\
         SELECT snowflake_nextval() AS x \\gset\n\
         INSERT INTO orders (id, note) VALUES (:x, 'explicit');\n",
        &["-c", "6", "-j", "3", "-t", "400"],
    );
    assert!(
        out.contains("number of transactions actually processed: 2400"),
        "{out}"
    );
    assert_eq!(c.sql("SELECT count(*) FROM orders"), "7200");
}

/// A subscriber applies its publisher's rows, even those its guard would refuse from a session:
/// the apply worker and the initial copy run with session_replication_role = replica, where an
/// ordinary trigger does not fire.
#[test]
fn logical_replication_apply_is_not_refused() {
    let logical = "wal_level = logical\nmax_worker_processes = 16\nmax_logical_replication_workers = 6\nmax_replication_slots = 6\nmax_wal_senders = 6";
    let subscriber = guarded("guard-sub", logical);
    let mut publisher = Cluster::new(
        "guard-pub",
        &format!("{logical}\nsnowflake.datacenter_id = 1\nsnowflake.worker_id = 1"),
    );
    publisher.start();
    publisher.sql(
        "CREATE EXTENSION snowflake; \
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), note text); \
         CREATE PUBLICATION pub FOR TABLE orders",
    );
    // Rows the subscriber's guard refuses from a session: its own pair a minute ahead, another
    // pair a minute ahead. One before the subscription (the initial copy), one after (the apply).
    let dangerous = |seq: u32| {
        format!(
            "INSERT INTO orders (id, note) VALUES \
             (snowflake_compose(now() + interval '1 min', 1, 2, {seq}), 'own pair'), \
             (snowflake_compose(now() + interval '1 min', 7, 7, {seq}), 'another pair'), \
             (DEFAULT, 'default')"
        )
    };
    publisher.sql(&dangerous(1));
    subscriber.sql(&format!(
        "CREATE SUBSCRIPTION sub CONNECTION '{}' PUBLICATION pub",
        publisher.conninfo()
    ));
    publisher.sql(&dangerous(2));
    assert!(
        eventually(60, || subscriber.sql("SELECT count(*) FROM orders") == "6"),
        "the subscriber has {} rows of 6; its log:\n{}",
        subscriber.sql("SELECT count(*) FROM orders"),
        subscriber.log()
    );
    assert!(
        !subscriber.log().contains("explicit ID"),
        "{}",
        subscriber.log()
    );
    // The guard is active there for sessions.
    let e = subscriber.sql_err(&dangerous(3));
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
}

/// Partitions (the trigger is cloned to each, whatever its column order), a LATIN1 database
/// with a column named outside ASCII, and a guard put where it cannot work.
#[test]
fn partitions_encodings_and_misuse() {
    let c = guarded("guard-misc", "");
    let ahead = "snowflake_compose(now() + interval '4 s', 1, 2, 0)";
    // A partition whose key is not its first column (a dropped column before it).
    as_app(
        &c,
        "CREATE TABLE events (id bigint NOT NULL DEFAULT snowflake_nextval(), note text) PARTITION BY RANGE (id); \
         CREATE TABLE events_a (gone int, note text, id bigint NOT NULL); ALTER TABLE events_a DROP COLUMN gone; \
         ALTER TABLE events ATTACH PARTITION events_a FOR VALUES FROM (0) TO (MAXVALUE); \
         CREATE TRIGGER events_snowflake_guard BEFORE INSERT OR UPDATE OF id ON events \
             FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id')",
    );
    as_app(
        &c,
        "INSERT INTO events (note) SELECT 'x' FROM generate_series(1, 10)",
    );
    let e = app_err(&c, &format!("INSERT INTO events (id) VALUES ({ahead})"));
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
    assert!(e.detail.contains("table \"events_a\""), "{}", e.raw);
    let e = app_err(&c, &format!("UPDATE events SET id = {ahead}"));
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);

    // LATIN1: the column is found by its bytes, and named with them escaped.
    c.sql("CREATE DATABASE l1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
    // The client speaks UTF-8; the server stores LATIN1 (é is the byte 0xE9 there).
    let l1 = |sql: &str| {
        let out = c
            .psql_cmd("l1")
            .env("PGCLIENTENCODING", "UTF8")
            .arg("-c")
            .arg(sql)
            .output()
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(common::parse_error(&String::from_utf8_lossy(&out.stderr)))
        }
    };
    l1("CREATE EXTENSION snowflake; \
        CREATE TABLE t (\"clé\" bigint DEFAULT snowflake_nextval()); \
        CREATE TRIGGER g BEFORE INSERT OR UPDATE ON t FOR EACH ROW EXECUTE FUNCTION snowflake_guard('clé'); \
        INSERT INTO t DEFAULT VALUES")
    .unwrap();
    let e = l1(&format!("INSERT INTO t VALUES ({ahead})")).unwrap_err();
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
    assert!(
        e.detail.contains("Column \"cl\\xE9\" of table \"t\""),
        "{}",
        e.raw
    );

    // Misuse: a column that is not there, or not bigint; the wrong kind of trigger.
    for (trigger, sqlstate) in [
        (
            "BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION snowflake_guard('nope')",
            "42703",
        ),
        (
            "BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION snowflake_guard('note')",
            "42804",
        ),
        (
            "AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION snowflake_guard()",
            "39P01",
        ),
        (
            "BEFORE INSERT ON orders FOR EACH STATEMENT EXECUTE FUNCTION snowflake_guard()",
            "39P01",
        ),
        (
            "BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id', 'x')",
            "22023",
        ),
    ] {
        as_app(&c, &format!("CREATE TRIGGER wrong {trigger}"));
        let e = app_err(&c, "INSERT INTO orders (note) VALUES ('x')");
        assert_eq!(e.sqlstate, sqlstate, "{trigger}: {}", e.raw);
        as_app(&c, "DROP TRIGGER wrong ON orders");
    }
}

/// The docs' way to bring rows in with their IDs: the floor first (the raise-mark recipe with
/// the newest row's time), then the rows, into the guarded table.
#[test]
fn rows_come_in_with_their_ids_after_the_floor() {
    let c = guarded("guard-import", "");
    // The rows to bring in: this pair's IDs of the next 3 seconds (a dump of this server taken
    // before it was rebuilt, whose clock ran a little ahead).
    c.sql(
        "CREATE TABLE orders_old AS SELECT snowflake_compose(now() + i * interval '3 ms', 1, 2, 5) AS id, \
                'old ' || i AS note FROM generate_series(1, 1000) i; \
         GRANT SELECT ON orders_old TO app",
    );
    let e = app_err(&c, "INSERT INTO orders SELECT * FROM orders_old");
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
    // The newest row's time in Unix ms, read where the rows come from, as the docs say.
    let newest = c.sql_i64(
        "SELECT (extract(epoch FROM snowflake_timestamp(max(id))) * 1000)::bigint FROM orders_old",
    );
    common::run_sql_recipe(&c, "raise-mark", newest);
    as_app(&c, "INSERT INTO orders SELECT * FROM orders_old");
    // The defaults continue above them: no duplicate key, in the seconds the rows cover.
    let past = format!("SELECT clock_timestamp() > to_timestamp({newest} / 1000.0)");
    loop {
        as_app(
            &c,
            "INSERT INTO orders (note) SELECT 'new' FROM generate_series(1, 200)",
        );
        if c.sql(&past) == "t" {
            break;
        }
    }
    assert_eq!(
        c.sql("SELECT min(id) > (SELECT max(id) FROM orders_old) FROM orders WHERE note = 'new'"),
        "t"
    );
}
