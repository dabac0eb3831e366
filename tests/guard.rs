//! The key guard, `snowflake_guard()`: an explicit ID that a generator would issue again later is
//! refused at the statement that brings it (issue 51), never an ID the generator issued, never a
//! row that logical replication applies; in 'always' mode, every ID but the one the session's
//! generator just returned; and the docs' way to bring rows in with their IDs.

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
/// another backend, always pass, several clients at once, in the default mode and in 'always'.
#[test]
fn the_generators_own_ids_pass_under_load() {
    let c = guarded("guard-load", "");
    c.sql("ALTER TABLE orders OWNER TO postgres");
    // 'always' too: each row's ID is the one its session drew last.
    c.sql(
        "CREATE TRIGGER orders_zz_always BEFORE INSERT OR UPDATE OF id ON orders \
             FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id', 'always')",
    );
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
    // And an 'always' guard after it (names sort later): the apply writes nothing but explicit IDs.
    as_app(
        &subscriber,
        "CREATE TRIGGER orders_zz_always BEFORE INSERT OR UPDATE OF id ON orders \
             FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id', 'always')",
    );
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
    let e = subscriber.sql_err("INSERT INTO orders (id) SELECT min(id) - 1 FROM orders");
    assert_eq!(e.sqlstate, "428C9", "{}", e.raw);
    // Rows updated at the publisher, key and all, are applied too.
    publisher.sql("UPDATE orders SET id = id - 1, note = 'moved' WHERE note = 'default'");
    assert!(
        eventually(60, || subscriber
            .sql("SELECT count(*) FROM orders WHERE note = 'moved'")
            == "2"),
        "{}",
        subscriber.log()
    );
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
        (
            "BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id', 'always', 'x')",
            "22023",
        ),
    ] {
        as_app(&c, &format!("CREATE TRIGGER wrong {trigger}"));
        let e = app_err(&c, "INSERT INTO orders (note) VALUES ('x')");
        assert_eq!(e.sqlstate, sqlstate, "{trigger}: {}", e.raw);
        as_app(&c, "DROP TRIGGER wrong ON orders");
    }
}

/// A generated key column (issue 58): a BEFORE trigger sees it as NULL, and NULL passed, so an ID
/// 5 s ahead on this server's pair went in through `x`. The guard now refuses to run on one
/// (42P17), in both modes, at every row: also where the column became generated after the
/// trigger was made. STORED on every major; VIRTUAL too where the server has it (18+).
#[test]
fn a_generated_key_column_is_refused() {
    let c = guarded("guard-generated", "");
    let major = c.sql_i64("SELECT current_setting('server_version_num')::int / 10000");
    let ahead = "snowflake_compose(now() + interval '5 s', 1, 2, 0)";
    let mut kinds = vec!["STORED"];
    if major >= 18 {
        kinds.push("VIRTUAL");
    }
    let refused = |table: &str, kind: &str, sql: &str| {
        let e = app_err(&c, sql);
        assert_eq!(e.sqlstate, "42P17", "{sql}: {}", e.raw);
        assert!(
            e.message.contains(&format!(
                "snowflake_guard() cannot check generated column \"id\" of relation \"{table}\""
            )),
            "{sql}: {}",
            e.raw
        );
        assert!(
            e.detail.contains(&format!(
                "is a {} generated column: a BEFORE trigger sees it as NULL",
                kind.to_lowercase()
            )),
            "{}",
            e.raw
        );
        assert!(
            e.hint
                .contains("Guard the column the key is computed from instead"),
            "{}",
            e.raw
        );
    };
    for kind in &kinds {
        for (n, args) in ["'id'", "'id', 'always'"].into_iter().enumerate() {
            let t = format!("gen_{}_{n}", kind.to_lowercase());
            as_app(
                &c,
                &format!(
                    "CREATE TABLE {t} (x bigint, id bigint GENERATED ALWAYS AS (x) {kind}); \
                     CREATE TRIGGER g BEFORE INSERT OR UPDATE ON {t} \
                         FOR EACH ROW EXECUTE FUNCTION snowflake_guard({args})"
                ),
            );
            // The row, and any row at all: the guard cannot check the column.
            refused(&t, kind, &format!("INSERT INTO {t} (x) VALUES ({ahead})"));
            refused(&t, kind, &format!("INSERT INTO {t} (x) VALUES (NULL)"));
            refused(
                &t,
                kind,
                &format!("INSERT INTO {t} (x) SELECT snowflake_nextval()"),
            );
            assert_eq!(as_app(&c, &format!("SELECT count(*) FROM {t}")), "0");
        }
    }
    // A trigger made while the key was plain, then the key made generated.
    as_app(
        &c,
        "CREATE TABLE later (x bigint, id bigint DEFAULT snowflake_nextval()); \
         CREATE TRIGGER g BEFORE INSERT ON later FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id'); \
         INSERT INTO later (x) VALUES (1); \
         ALTER TABLE later DROP COLUMN id, ADD COLUMN id bigint GENERATED ALWAYS AS (x) STORED",
    );
    refused(
        "later",
        "STORED",
        &format!("INSERT INTO later (x) VALUES ({ahead})"),
    );
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

/// `snowflake_guard('id', 'always')`, as `GENERATED ALWAYS`: a row passes only with the ID that
/// `snowflake_nextval()` just returned in its session, however the statement brings its rows
/// (VALUES of several rows, INSERT ... SELECT, COPY, ON CONFLICT, partitions); any other ID is
/// refused (428C9), even one the generator issued before; an UPDATE keeps its key or takes a
/// new one from the generator. Then the docs' import: the floor, the trigger disabled for it.
#[test]
fn always_admits_only_the_id_just_issued() {
    let c = guarded("guard-always", "");
    as_app(
        &c,
        "DROP TRIGGER orders_snowflake_guard ON orders; \
         INSERT INTO orders (note) VALUES ('before')",
    );
    as_app(&c, &readme_recipe("guard-always"));
    let refused = |sql: &str| {
        let e = app_err(&c, sql);
        assert_eq!(e.sqlstate, "428C9", "{sql}: {}", e.raw);
        assert!(
            e.message.contains(
                "column \"id\" of table \"orders\" takes only IDs from snowflake_nextval()"
            ),
            "{sql}: {}",
            e.raw
        );
        e
    };
    // Defaults and calls of snowflake_nextval(), one row or many, each evaluated for its row.
    for sql in [
        "INSERT INTO orders DEFAULT VALUES",
        "INSERT INTO orders (note) VALUES ('a'), ('b'), ('c')",
        "INSERT INTO orders (id, note) VALUES (snowflake_nextval(), 'd'), (DEFAULT, 'e'), ((SELECT snowflake_nextval()), 'f')",
        "INSERT INTO orders (note) SELECT 'g' || i FROM generate_series(1, 500) i",
        "INSERT INTO orders (id, note) SELECT snowflake_nextval(), 'h' || i FROM generate_series(1, 100) i ORDER BY i DESC",
        "INSERT INTO orders (note) VALUES ('i') ON CONFLICT DO NOTHING",
        "INSERT INTO orders (note) VALUES ('j') ON CONFLICT (id) DO UPDATE SET note = 'k'",
        // An ID the client read, given back before any other call in the session.
        "SELECT set_config('my.id', snowflake_nextval()::text, false); \
         INSERT INTO orders (id, note) VALUES (current_setting('my.id')::bigint, 'l')",
        // UPDATE: keeping the key, or taking a new one from the generator (SET id = DEFAULT).
        "UPDATE orders SET note = 'kept' WHERE note = 'a'",
        "UPDATE orders SET id = id WHERE note = 'b'",
        "UPDATE orders SET id = DEFAULT WHERE note LIKE 'h%'",
    ] {
        as_app(&c, sql);
    }
    // COPY with the column left out (FROM PROGRAM: as a superuser).
    c.sql("COPY orders (note) FROM PROGRAM 'seq 1 50'");
    assert_eq!(as_app(&c, "SELECT count(*) FROM orders"), "661");

    // A session that drew no ID: nothing explicit passes, not even an ID of the past.
    let old = c.sql_i64("SELECT min(id) FROM orders");
    as_app(&c, &format!("DELETE FROM orders WHERE id = {old}"));
    let e = refused(&format!("INSERT INTO orders (id) VALUES ({old})"));
    assert!(
        e.detail.contains(&format!(
            "The row's ID is {old}, and snowflake_nextval() has returned none in this session."
        )),
        "{}",
        e.raw
    );
    assert!(
        e.hint.contains("Leave the column to its default")
            && e.hint
                .contains("raise the floor first, then disable the trigger"),
        "{}",
        e.raw
    );
    // One that drew IDs: only the last one passes.
    let e = refused(&format!(
        "SELECT snowflake_nextval(); INSERT INTO orders (id) VALUES ({old})"
    ));
    assert!(
        e.detail.contains(&format!(
            "The row's ID is {old}, and snowflake_nextval() returned "
        )),
        "{}",
        e.raw
    );
    for sql in [
        // Another ID drawn between: the first is explicit now.
        "SELECT set_config('my.id', snowflake_nextval()::text, false); SELECT snowflake_nextval(); \
         INSERT INTO orders (id) VALUES (current_setting('my.id')::bigint)"
            .to_string(),
        "INSERT INTO orders (id) VALUES (snowflake_nextval() - 1)".into(),
        format!("INSERT INTO orders (id) VALUES (DEFAULT), ({old})"),
        format!("INSERT INTO orders (id) VALUES ({old}) ON CONFLICT DO NOTHING"),
        // Another pair's ID of the past, which the default mode lets in.
        "INSERT INTO orders (id) VALUES (snowflake_compose(now() - interval '1 day', 3, 4, 0))"
            .into(),
        // Rows whose IDs were all drawn before the first was written (a sort on them): the
        // first row is not the last ID drawn. Refused, never let through.
        "INSERT INTO orders (id) SELECT x FROM (SELECT snowflake_nextval() AS x FROM generate_series(1, 3)) s ORDER BY x".into(),
        "UPDATE orders SET id = id + 1 WHERE note = 'c'".into(),
    ] {
        refused(&sql);
    }
    let e = c.sql_err(&format!(
        "COPY orders (id, note) FROM PROGRAM 'echo {old},copied' (FORMAT csv)"
    ));
    assert_eq!(e.sqlstate, "428C9", "{}", e.raw);
    let e = refused("UPDATE orders SET id = id - 1 WHERE note = 'd'");
    assert!(
        e.detail.contains("admits only that ID, or the row's own."),
        "{}",
        e.raw
    );

    // A BEFORE trigger that fires earlier (names sort first) and draws an ID for itself makes
    // the row's default not the last one; one that sets the key from the generator passes.
    as_app(
        &c,
        "ALTER TABLE orders ADD COLUMN audit bigint; \
         CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS \
             'BEGIN NEW.audit := snowflake_nextval(); RETURN NEW; END'; \
         CREATE TRIGGER a_audit BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION audit()",
    );
    refused("INSERT INTO orders (note) VALUES ('audited')");
    as_app(
        &c,
        "DROP TRIGGER a_audit ON orders; \
         CREATE FUNCTION rekey() RETURNS trigger LANGUAGE plpgsql AS \
             'BEGIN NEW.id := snowflake_nextval(); RETURN NEW; END'; \
         CREATE TRIGGER a_rekey BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION rekey(); \
         INSERT INTO orders (id, note) VALUES (1, 'rekeyed'); \
         DROP TRIGGER a_rekey ON orders",
    );

    // A partitioned table: the trigger is cloned to each partition, and judges the routed row.
    as_app(
        &c,
        "CREATE TABLE events (id bigint NOT NULL DEFAULT snowflake_nextval(), note text) PARTITION BY RANGE (id); \
         CREATE TABLE events_a PARTITION OF events FOR VALUES FROM (0) TO (MAXVALUE); \
         CREATE TRIGGER events_snowflake_guard BEFORE INSERT OR UPDATE OF id ON events \
             FOR EACH ROW EXECUTE FUNCTION snowflake_guard('id', 'always'); \
         INSERT INTO events (note) SELECT 'x' FROM generate_series(1, 10); \
         INSERT INTO events (id, note) VALUES (snowflake_nextval(), 'y'), (DEFAULT, 'z')",
    );
    let e = app_err(&c, &format!("INSERT INTO events (id) VALUES ({old})"));
    assert_eq!(e.sqlstate, "428C9", "{}", e.raw);
    assert!(e.message.contains("of table \"events_a\""), "{}", e.raw);

    // The docs' import: rows with this pair's IDs of the next seconds. The floor first, as for
    // the default mode, then the rows with the trigger disabled, in one transaction.
    c.sql(
        "CREATE TABLE orders_old AS SELECT snowflake_compose(now() + i * interval '3 ms', 1, 2, 5) AS id, \
                'old ' || i AS note FROM generate_series(1, 1000) i; \
         GRANT SELECT ON orders_old TO app",
    );
    refused("INSERT INTO orders (id, note) SELECT * FROM orders_old");
    let newest = c.sql_i64(
        "SELECT (extract(epoch FROM snowflake_timestamp(max(id))) * 1000)::bigint FROM orders_old",
    );
    common::run_sql_recipe(&c, "raise-mark", newest);
    as_app(&c, &readme_recipe("guard-always-import"));
    assert_eq!(
        as_app(&c, "SELECT count(*) FROM orders WHERE note LIKE 'old %'"),
        "1000"
    );
    // The trigger is back: explicit IDs are refused, defaults continue above the rows.
    refused(&format!("INSERT INTO orders (id) VALUES ({old})"));
    assert_eq!(
        as_app(
            &c,
            "INSERT INTO orders DEFAULT VALUES RETURNING id > (SELECT max(id) FROM orders_old)"
        ),
        "t"
    );
}
