//! The read horizon: `snowflake_horizon()` stays below every ID that an open transaction holds
//! (plain, parallel, prepared, across a restart), and readers that follow the README's queries
//! never miss a row while writers commit out of order: on the server itself, on a physical
//! standby and on a node that receives another writer's rows through logical replication.

mod common;
use common::{readme_recipe, Cluster};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

const EVENTS: &str = "CREATE EXTENSION IF NOT EXISTS snowflake; \
    CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), payload text NOT NULL)";

/// A psql session kept open, to hold a transaction while other sessions look.
struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Session {
    fn open(c: &Cluster) -> Session {
        Session::open_as(c, "postgres", "postgres")
    }

    fn open_as(c: &Cluster, user: &str, db: &str) -> Session {
        let mut child = c
            .psql_cmd_as(user, db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Session {
            child,
            stdin,
            stdout,
        }
    }

    /// Runs `sql` and returns its output lines (psql stops at the first error: ON_ERROR_STOP).
    fn run(&mut self, sql: &str) -> Vec<String> {
        writeln!(self.stdin, "{sql}\n\\echo __done__").unwrap();
        self.stdin.flush().unwrap();
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "the session ended during {sql} (after {lines:?})"
            );
            let line = line.trim_end().to_string();
            if line == "__done__" {
                return lines;
            }
            lines.push(line);
        }
    }

    fn one(&mut self, sql: &str) -> i64 {
        let out = self.run(sql);
        out.last()
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| panic!("no number from {sql}: {out:?}"))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn horizon(c: &Cluster) -> i64 {
    c.sql_i64("SELECT snowflake_horizon()")
}

fn parallel_setting() -> &'static str {
    // 16 renamed force_parallel_mode to debug_parallel_query.
    if common::pg_major() >= 16 {
        "debug_parallel_query"
    } else {
        "force_parallel_mode"
    }
}

#[test]
fn the_horizon_stays_below_every_id_an_open_transaction_holds() {
    let mut c = Cluster::new("horizon-exact", "max_prepared_transactions = 4");
    c.start();
    c.sql(EVENTS);
    let before = horizon(&c);
    let last = c.sql_i64("INSERT INTO events (payload) VALUES ('x') RETURNING id");
    assert!(before < last);
    // Nothing open: the horizon is the last ID issued. Reading it commits the server to
    // nothing: on an idle server it stays there.
    let idle = horizon(&c);
    assert_eq!(idle, last);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(horizon(&c), idle, "reading the horizon moved the generator");
    // Advancing it (the publisher's call) keeps it up with the clock while the server is idle
    // (every later ID is above it); PUBLIC may not.
    let later = c.sql_i64("SELECT snowflake_advance_horizon()");
    assert!(
        later > idle + (40 << 22),
        "an idle server's advanced horizon did not follow the clock: {idle} then {later}"
    );
    c.sql("CREATE ROLE reader LOGIN; GRANT EXECUTE ON FUNCTION snowflake_horizon() TO reader");
    assert_eq!(
        c.try_sql_as("reader", "SELECT snowflake_horizon() >= 0")
            .unwrap(),
        "t"
    );
    let e = c
        .try_sql_as("reader", "SELECT snowflake_advance_horizon()")
        .expect_err("PUBLIC advanced the horizon");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    let next = c.sql_i64("INSERT INTO events (payload) VALUES ('x') RETURNING id");
    assert!(next > later);

    // A transaction that took an ID and has not committed holds the horizon below it, however
    // many later IDs commit.
    let mut s1 = Session::open(&c);
    let a = s1.one("BEGIN; INSERT INTO events (payload) VALUES ('open') RETURNING id;");
    let b = c.sql_i64("WITH i AS (INSERT INTO events (payload) SELECT 'later' FROM generate_series(1, 50) RETURNING id) SELECT max(id) FROM i");
    assert!(b > a);
    assert_eq!(horizon(&c), a - 1);
    // A savepoint rolled back does not release it: the transaction may still commit its first ID.
    s1.run("SAVEPOINT s; INSERT INTO events (payload) VALUES ('gone'); ROLLBACK TO SAVEPOINT s;");
    assert_eq!(horizon(&c), a - 1);
    s1.run("COMMIT;");
    let after = horizon(&c);
    assert!(after >= b, "{after} after the commit, below {b}");
    // An aborted transaction releases it too.
    let r = s1.one("BEGIN; INSERT INTO events (payload) VALUES ('rolled back') RETURNING id;");
    assert_eq!(horizon(&c), r - 1);
    s1.run("ROLLBACK;");
    assert!(horizon(&c) >= r);

    // IDs generated by a parallel worker belong to the leader's transaction, which never called
    // snowflake_nextval() itself here.
    let p = s1.one(&format!(
        "BEGIN; SET LOCAL {} = on; SET LOCAL parallel_setup_cost = 0; \
         CREATE TEMP TABLE batch ON COMMIT DROP AS SELECT snowflake_nextval() AS id FROM generate_series(1, 5); \
         SELECT min(id) FROM batch;",
        parallel_setting()
    ));
    let plan = s1.run(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT snowflake_nextval() FROM generate_series(1, 5);",
    );
    assert!(
        plan.iter().any(|l| l.contains("Workers Launched: 1")),
        "no parallel worker ran: {plan:?}"
    );
    assert_eq!(
        horizon(&c),
        p - 1,
        "a parallel worker's IDs are held by its leader"
    );
    s1.run("INSERT INTO events (id, payload) SELECT id, 'parallel' FROM batch; COMMIT;");
    assert!(horizon(&c) > p);

    // A prepared transaction holds it until COMMIT PREPARED, from another session, and across a
    // restart, after which the server cannot know its IDs and holds the horizon below them all.
    let q = s1.one("BEGIN; INSERT INTO events (payload) VALUES ('prepared') RETURNING id;");
    s1.run("PREPARE TRANSACTION 'hz';");
    drop(s1);
    c.sql("INSERT INTO events (payload) VALUES ('after')");
    assert_eq!(horizon(&c), q - 1);
    c.stop("immediate");
    c.start();
    c.sql("INSERT INTO events (payload) VALUES ('after the restart')");
    assert_eq!(
        horizon(&c),
        -1,
        "a prepared transaction from before the restart"
    );
    c.sql("COMMIT PREPARED 'hz'");
    let last = c.sql_i64("SELECT max(id) FROM events");
    assert!(horizon(&c) >= last);
    assert_eq!(
        c.sql("SELECT count(*) FROM events WHERE payload = 'prepared'"),
        "1"
    );
    // A prepared transaction that rolls back releases its entry as well.
    let mut s2 = Session::open(&c);
    let g = s2.one("BEGIN; INSERT INTO events (payload) VALUES ('p2') RETURNING id; ");
    s2.run("PREPARE TRANSACTION 'hz2';");
    assert_eq!(horizon(&c), g - 1);
    c.sql("ROLLBACK PREPARED 'hz2'");
    assert!(horizon(&c) >= g);

    // Off: the function says so; IDs are generated as before.
    c.stop("fast");
    c.conf("snowflake.track_horizon = off");
    c.start();
    let e = c.sql_err("SELECT snowflake_horizon()");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.message.contains("snowflake.track_horizon is off"),
        "{}",
        e.raw
    );
    c.sql("INSERT INTO events (payload) VALUES ('untracked')");
    // A typo in its value stops the server at start-up, like every other snowflake setting.
    c.stop("fast");
    c.conf("snowflake.track_horizon = sometimes");
    assert!(c.try_start().is_err());
    assert!(
        c.log()
            .contains("parameter \"snowflake.track_horizon\" requires a Boolean value"),
        "{}",
        c.log()
    );
}

/// The writers' mix: transactions that commit after random delays, roll back, roll back to a
/// savepoint, prepare and commit or roll back from the prepared state, and take their IDs from a
/// parallel worker. Each takes 20 IDs.
fn writer_scripts(dir: &std::path::Path) -> Vec<String> {
    let delay = "\\set d random(0, 4000)\n\\sleep :d us\n";
    // Long enough that readers poll while it is open, so that the naive reader surely skips.
    let slow = "\\set d random(20, 80)\n\\sleep :d ms\n";
    let rows = "INSERT INTO events (payload) SELECT 'w' FROM generate_series(1, 20);\n";
    let scripts = [
        ("commit", 8, format!("BEGIN;\n{rows}{delay}COMMIT;\n")),
        ("slow", 1, format!("BEGIN;\n{rows}{slow}COMMIT;\n")),
        ("rollback", 2, format!("BEGIN;\n{rows}{delay}ROLLBACK;\n")),
        (
            "savepoint",
            2,
            format!(
                "BEGIN;\nINSERT INTO events (payload) SELECT 'w' FROM generate_series(1, 10);\nSAVEPOINT s;\n{rows}ROLLBACK TO SAVEPOINT s;\n\
                 INSERT INTO events (payload) SELECT 'w' FROM generate_series(1, 10);\n{delay}COMMIT;\n"
            ),
        ),
        (
            "prepared",
            2,
            format!(
                "\\set g random(1, 1000000000000)\nBEGIN;\n{rows}PREPARE TRANSACTION 'w:client_id-:g';\n{slow}\
                 COMMIT PREPARED 'w:client_id-:g';\n"
            ),
        ),
        (
            "prepared-rollback",
            1,
            format!(
                "\\set g random(1, 1000000000000)\nBEGIN;\n{rows}PREPARE TRANSACTION 'r:client_id-:g';\n{delay}\
                 ROLLBACK PREPARED 'r:client_id-:g';\n"
            ),
        ),
        (
            "parallel",
            1,
            format!(
                "BEGIN;\nSET LOCAL {} = on;\nSET LOCAL parallel_setup_cost = 0;\n\
                 CREATE TEMP TABLE batch ON COMMIT DROP AS SELECT snowflake_nextval() AS id FROM generate_series(1, 20);\n\
                 {delay}INSERT INTO events (id, payload) SELECT id, 'parallel' FROM batch;\n{delay}COMMIT;\n",
                parallel_setting()
            ),
        ),
    ];
    let mut args = Vec::new();
    for (name, weight, text) in scripts {
        let path = dir.join(format!("writer-{name}.sql"));
        std::fs::write(&path, text).unwrap();
        args.push("-f".to_string());
        args.push(format!("{}@{weight}", path.display()));
    }
    args
}

fn run_writers(c: &Cluster, clients: u32, transactions: u32) {
    let mut cmd = std::process::Command::new(c.bin.join("pgbench"));
    cmd.args(["-n", "-h"])
        .arg(&c.dir)
        .args(["-p", &c.port.to_string(), "-U", "postgres"])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-t",
            &transactions.to_string(),
        ])
        .args(writer_scripts(&c.dir))
        .arg("postgres");
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pgbench failed:\n{text}");
    assert!(
        text.contains("number of failed transactions: 0 ")
            || (!text.contains("failed transactions") && !text.contains("aborted")),
        "pgbench had failures:\n{text}"
    );
}

/// Runs a README SQL recipe through psql with `vars` (-v name=value); its output lines.
fn recipe_rows(c: &Cluster, recipe: &str, vars: &[(&str, String)]) -> Vec<String> {
    let path = c.dir.join(format!("recipe-{recipe}.sql"));
    if !path.exists() {
        std::fs::write(&path, readme_recipe(recipe)).unwrap();
    }
    let mut cmd = c.psql_cmd("postgres");
    for (k, v) in vars {
        cmd.arg("-v").arg(format!("{k}={v}"));
    }
    let out = cmd.arg("-f").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "recipe {recipe}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn ids(lines: &[String]) -> Vec<i64> {
    lines
        .iter()
        .filter_map(|l| l.split('|').next()?.parse().ok())
        .collect()
}

/// Sets its flags when dropped, also while a panic unwinds: threads that loop until a flag is
/// set then end, and the scope that waits for them does too.
struct Stop<'a> {
    done: &'a AtomicBool,
    publishing: Option<&'a AtomicBool>,
}

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(p) = self.publishing {
            p.store(false, Ordering::SeqCst);
        }
    }
}

/// A reader with one cursor that polls `WHERE id > cursor`: with the horizon's recipe, or with
/// the naive query that trusts the largest ID it saw.
#[derive(Default)]
struct Reader {
    last_seen: i64,
    seen: BTreeSet<i64>,
    polls: usize,
}

impl Reader {
    fn take(&mut self, got: Vec<i64>) -> usize {
        self.polls += 1;
        let n = got.len();
        for id in got {
            assert!(id > self.last_seen, "rows out of order");
            self.seen.insert(id);
            self.last_seen = id;
        }
        n
    }
}

#[test]
fn a_reader_that_stops_at_the_horizon_never_misses_a_row() {
    let c = Cluster::new(
        "horizon-readers",
        "max_prepared_transactions = 20\nmax_worker_processes = 16\nmax_parallel_workers = 8",
    );
    let mut c = c;
    c.start();
    c.sql(EVENTS);
    let done = AtomicBool::new(false);
    let (with, without) = thread::scope(|s| {
        let _stop = Stop {
            done: &done,
            publishing: None,
        };
        let readers = s.spawn(|| {
            let (mut with, mut without) = (Reader::default(), Reader::default());
            let naive = "SELECT id FROM events WHERE id > :last_seen ORDER BY id LIMIT 1000";
            loop {
                let finished = done.load(Ordering::SeqCst);
                let got = ids(&recipe_rows(
                    &c,
                    "horizon-poll",
                    &[("last_seen", with.last_seen.to_string())],
                ));
                let n = with.take(got);
                let got = ids(&c
                    .sql(&naive.replace(":last_seen", &without.last_seen.to_string()))
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>());
                let m = without.take(got);
                if finished && n == 0 && m == 0 {
                    return (with, without);
                }
            }
        });
        run_writers(&c, 8, 1000);
        done.store(true, Ordering::SeqCst);
        readers.join().unwrap()
    });
    let all: BTreeSet<i64> = c
        .sql("SELECT id FROM events ORDER BY id")
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(c.sql("SELECT count(*) FROM pg_prepared_xacts"), "0");
    assert!(all.len() >= 100_000, "only {} rows", all.len());
    assert!(
        c.sql_i64("SELECT count(*) FROM events WHERE payload = 'parallel'") > 0,
        "no parallel writer committed"
    );
    let missed: Vec<_> = all.difference(&with.seen).take(5).collect();
    assert!(
        missed.is_empty(),
        "the horizon reader missed {} of {} rows (e.g. {missed:?}) in {} polls",
        all.len() - with.seen.len(),
        all.len(),
        with.polls
    );
    let naive_missed = all.len() - without.seen.len();
    assert!(
        naive_missed > 0,
        "the naive reader missed nothing in {} polls: the test did not make commits out of order",
        without.polls
    );
    eprintln!(
        "{} rows; the horizon reader saw all in {} polls, the naive one missed {naive_missed} in {}",
        all.len(),
        with.polls,
        without.polls
    );
}

#[test]
fn readers_on_a_standby_and_on_another_writer_never_miss_a_row() {
    let logical =
        "wal_level = logical\nmax_worker_processes = 16\nmax_logical_replication_workers = 8\n\
                   max_prepared_transactions = 20\nmax_parallel_workers = 6";
    let mut a = Cluster::new(
        "hz-a",
        &format!("{logical}\nsnowflake.datacenter_id = 1\nsnowflake.worker_id = 1"),
    );
    let mut b = Cluster::new(
        "hz-b",
        &format!("{logical}\nsnowflake.datacenter_id = 1\nsnowflake.worker_id = 2"),
    );
    a.start();
    b.start();
    for c in [&a, &b] {
        c.sql(EVENTS);
        c.script(&readme_recipe("horizon-publish-setup")).unwrap();
    }
    a.script(&readme_recipe("horizon-mesh-setup")).unwrap();
    b.sql("CREATE PUBLICATION pub_b FOR TABLE events, snowflake_horizons");
    a.sql(&format!(
        "CREATE SUBSCRIPTION sub_b CONNECTION '{}' PUBLICATION pub_b",
        b.conninfo()
    ));
    let mut standby = Cluster::standby_of(&a, "hz-standby");
    standby.start();
    // Every writer publishes its horizon before readers start (the README's rule).
    for c in [&a, &b] {
        c.script(&readme_recipe("horizon-publish")).unwrap();
    }
    standby.wait_for("SELECT count(*) FROM snowflake_horizons", "2", 60);
    let e = standby.sql_err("SELECT snowflake_horizon()");
    assert_eq!(e.sqlstate, "25006", "{}", e.raw);
    let e = standby.sql_err("SELECT snowflake_advance_horizon()");
    assert_eq!(e.sqlstate, "25006", "{}", e.raw);

    let done = AtomicBool::new(false);
    let publishing = AtomicBool::new(true);
    let (mesh, on_standby) = thread::scope(|s| {
        // Whatever happens below, the helper threads stop (the scope waits for them).
        let _stop = Stop {
            done: &done,
            publishing: Some(&publishing),
        };
        let publishers = s.spawn(|| {
            while publishing.load(Ordering::SeqCst) {
                for c in [&a, &b] {
                    c.script(&readme_recipe("horizon-publish")).unwrap();
                }
                thread::sleep(Duration::from_millis(20));
            }
        });
        let mesh_reader = s.spawn(|| {
            let mut r = Reader::default();
            let mut idle = 0;
            loop {
                let finished = done.load(Ordering::SeqCst);
                let got = ids(&recipe_rows(&a, "horizon-mesh-poll", &[]));
                // One cursor per writer, so the rows come in ID order per writer only.
                r.polls += 1;
                let n = got.len();
                for id in got {
                    assert!(r.seen.insert(id), "{id} read twice");
                }
                idle = if finished && n == 0 { idle + 1 } else { 0 };
                if idle >= 3 {
                    return r;
                }
            }
        });
        let standby_reader = s.spawn(|| {
            let mut r = Reader::default();
            let mut idle = 0;
            loop {
                let finished = done.load(Ordering::SeqCst);
                let got = ids(&recipe_rows(
                    &standby,
                    "horizon-standby-poll",
                    &[("last_seen", r.last_seen.to_string())],
                ));
                let n = r.take(got);
                idle = if finished && n == 0 { idle + 1 } else { 0 };
                if idle >= 3 {
                    return r;
                }
            }
        });
        let wa = s.spawn(|| run_writers(&a, 3, 500));
        let wb = s.spawn(|| run_writers(&b, 3, 500));
        wa.join().unwrap();
        wb.join().unwrap();
        // Everything replicated; then the last horizons, published once more and replicated.
        let total = b.sql("SELECT count(*) FROM events");
        a.wait_for(
            "SELECT count(*) FROM events WHERE snowflake_worker_id(id) = 2",
            &total,
            120,
        );
        publishing.store(false, Ordering::SeqCst);
        publishers.join().unwrap();
        for c in [&a, &b] {
            c.script(&readme_recipe("horizon-publish")).unwrap();
        }
        let published =
            "SELECT string_agg(horizon::text, ',' ORDER BY worker_id) FROM snowflake_horizons WHERE worker_id = 2";
        a.wait_for(published, &b.sql(published), 60);
        let count = a.sql("SELECT count(*) FROM events");
        standby.wait_for("SELECT count(*) FROM events", &count, 60);
        let published =
            "SELECT string_agg(horizon::text, ',' ORDER BY worker_id) FROM snowflake_horizons";
        standby.wait_for(published, &a.sql(published), 60);
        done.store(true, Ordering::SeqCst);
        (mesh_reader.join().unwrap(), standby_reader.join().unwrap())
    });
    let all: BTreeSet<i64> = a
        .sql("SELECT id FROM events ORDER BY id")
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let from_b = all.iter().filter(|&&id| (id >> 12) & 31 == 2).count();
    assert!(
        from_b > 1000 && all.len() - from_b > 1000,
        "{from_b} of {}",
        all.len()
    );
    for (name, r) in [("mesh", &mesh), ("standby", &on_standby)] {
        let missed: Vec<_> = all.difference(&r.seen).take(5).collect();
        let kinds = if missed.is_empty() {
            String::new()
        } else {
            a.sql(&format!(
                "SELECT string_agg(DISTINCT payload, ',') FROM events WHERE id IN ({})",
                all.difference(&r.seen)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ))
        };
        assert!(
            missed.is_empty(),
            "the {name} reader missed ({kinds}) {} of {} rows (e.g. {missed:?}) in {} polls",
            all.len() - r.seen.len(),
            all.len(),
            r.polls
        );
    }
}

/// A transaction prepared before a restart is recorded before anything else counts: entries of
/// transactions prepared after the restart, and ended since, do not crowd it out of the table
/// (1.4.0 skipped it and reported a horizon above its ID), and the -1 it causes clears when it
/// ends.
#[test]
fn a_transaction_prepared_before_a_restart_is_never_crowded_out() {
    let mut c = Cluster::new("horizon-survivor", "max_prepared_transactions = 2");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE ev (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), p text)");
    c.script("BEGIN;\nINSERT INTO ev (p) VALUES ('a');\nPREPARE TRANSACTION 'a';")
        .unwrap();
    c.stop("immediate");
    c.start();
    for name in ["b1", "b2"] {
        c.script(&format!(
            "BEGIN;\nINSERT INTO ev (p) VALUES ('{name}');\nPREPARE TRANSACTION '{name}';\nCOMMIT PREPARED '{name}';"
        ))
        .unwrap();
    }
    let h = horizon(&c);
    assert_eq!(
        h, -1,
        "a transaction prepared before the restart was not held below"
    );
    c.sql("COMMIT PREPARED 'a'");
    let a = c.sql_i64("SELECT id FROM ev WHERE p = 'a'");
    let h = horizon(&c);
    assert!(h >= a, "the horizon {h} stayed below {a} after 'a' ended");
}

/// With prepared transactions disabled, PREPARE TRANSACTION fails with PostgreSQL's own error,
/// not one about the horizon's table.
#[test]
fn prepare_without_prepared_transactions_is_postgresqls_own_error() {
    let mut c = Cluster::new("horizon-no-prepare", "max_prepared_transactions = 0");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE ev (id bigint PRIMARY KEY DEFAULT snowflake_nextval())");
    let e = c
        .script("BEGIN;\nINSERT INTO ev DEFAULT VALUES;\nPREPARE TRANSACTION 'x';")
        .expect_err("PREPARE worked with max_prepared_transactions = 0");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.message.contains("prepared transactions are disabled"),
        "{}",
        e.raw
    );
}

/// Reading the horizon commits an idle server to nothing: no lease is written and no position
/// taken, so a clock that is ahead while a reader polls leaves no trace once it is corrected
/// (1.4.0 moved the generator to the clock and had a lease written for any reader).
#[test]
fn reading_the_horizon_of_an_idle_server_writes_nothing() {
    let mut c = Cluster::new("horizon-read-only", "");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE ROLE reader LOGIN; GRANT EXECUTE ON FUNCTION snowflake_horizon() TO reader");
    for _ in 0..5 {
        c.try_sql_as("reader", "SELECT snowflake_horizon()")
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        c.sql("SELECT last_timestamp IS NULL, lease_until IS NULL FROM snowflake_node()"),
        "t|t"
    );
    assert_eq!(c.sql("SELECT last_value FROM _snowflake.lease_ms"), "0");
}

/// Who holds the horizon back, as the README's query shows it: a session with an ID in its open
/// transaction and a prepared transaction, each with the smallest ID it holds; nobody once they
/// end.
#[test]
fn the_holders_of_the_horizon_are_named() {
    let mut c = Cluster::new("horizon-holders", "max_prepared_transactions = 2");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE ev (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), p text)");
    let holders = common::readme_recipe("horizon-holders");
    assert_eq!(c.script(&holders).unwrap(), "");
    c.script("BEGIN;\nINSERT INTO ev (p) VALUES ('prepared');\nPREPARE TRANSACTION 'p1';")
        .unwrap();
    let mut s = Session::open(&c);
    let held = s.one("BEGIN; INSERT INTO ev (p) VALUES ('open') RETURNING id;");
    let pid = s.one("SELECT pg_backend_pid();");
    let out = c.script(&holders).unwrap();
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows[0].contains("|p1|postgres|"),
        "the prepared one first (its ID is older): {out}"
    );
    assert!(
        rows[1].starts_with(&format!("{held}|{pid}|postgres|idle in transaction|")),
        "{out}"
    );
    s.run("COMMIT;");
    c.sql("COMMIT PREPARED 'p1'");
    assert_eq!(c.script(&holders).unwrap(), "");
}

/// An ordinary role reads the horizon of an idle server while its clock is an hour ahead; the
/// clock is corrected and the server restarted: it issues IDs at once, by the right clock (1.4.0
/// had committed the generator, and a lease, to the wrong hour). The reader's backend is what
/// reads the clock here, so this holds on every major (libfaketime reaches backends on all).
#[test]
fn a_reader_during_a_clock_ahead_leaves_no_trace() {
    let mut c = Cluster::new("horizon-clock-ahead", "");
    c.fake_time(None);
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE ROLE reader LOGIN; GRANT EXECUTE ON FUNCTION snowflake_horizon() TO reader");
    c.set_fake_offset("+3600s");
    assert!(c.clock_offset_s() > 3500.0, "the clock did not move");
    for _ in 0..5 {
        c.try_sql_as("reader", "SELECT snowflake_horizon()")
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
    }
    c.set_fake_offset("+0s");
    c.stop("fast");
    c.start();
    let id = c.sql_i64("SELECT snowflake_nextval()");
    assert_eq!(
        c.sql(&format!(
            "SELECT abs(extract(epoch FROM snowflake_timestamp({id}) - now())) < 60"
        )),
        "t",
        "the first ID after the correction is not dated by the corrected clock"
    );
}

/// What `snowflake_horizon_holders()` shows is what `pg_stat_activity` shows of others' queries:
/// a role with only CONNECT sees no other role's transaction (1.5.0 showed it the exact ID, and
/// so the millisecond, of another role's uncommitted row in another database); the role itself
/// sees its own, and members of pg_read_all_stats see all, prepared ones included.
/// `snowflake_horizon()`, one below that ID, is for pg_read_all_stats and the roles granted it
/// (1.6.0 gave it to every role: issue 49).
#[test]
fn the_holders_of_the_horizon_are_as_private_as_pg_stat_activity() {
    let mut c = Cluster::new("horizon-holders-private", "max_prepared_transactions = 2");
    c.start();
    c.sql("CREATE ROLE tom LOGIN; CREATE ROLE eve LOGIN; CREATE ROLE watcher LOGIN IN ROLE pg_read_all_stats");
    c.sql("CREATE DATABASE tomdb OWNER tom");
    // tom owns tomdb and so its public: the extension goes into a superuser's schema.
    c.try_sql_in(
        "tomdb",
        "CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC; CREATE EXTENSION snowflake SCHEMA snowflake",
    )
    .unwrap();
    c.sql("CREATE EXTENSION snowflake");
    c.psql_cmd_as("tom", "tomdb")
        .arg("-c")
        .arg("CREATE TABLE ev (id bigint PRIMARY KEY DEFAULT snowflake.snowflake_nextval())")
        .output()
        .unwrap();
    let mut s = Session::open_as(&c, "tom", "tomdb");
    let held = s.one("BEGIN; INSERT INTO ev DEFAULT VALUES RETURNING id;");
    let holders = "SELECT count(*), coalesce(string_agg(held_id::text, ','), '') FROM snowflake_horizon_holders()";
    assert_eq!(
        c.try_sql_as("eve", holders).unwrap(),
        "0|",
        "eve saw tom's transaction"
    );
    assert_eq!(
        c.try_sql_as("watcher", holders).unwrap(),
        format!("1|{held}")
    );
    assert_eq!(c.try_sql_as("tom", holders).unwrap(), format!("1|{held}"));
    assert_eq!(c.sql(holders), format!("1|{held}"));
    let e = c
        .try_sql_as("eve", "SELECT snowflake_horizon()")
        .expect_err("eve read the horizon, one below tom's uncommitted ID");
    assert_eq!(e.sqlstate, "42501", "{}", e.raw);
    assert_eq!(
        c.try_sql_as("watcher", "SELECT snowflake_horizon()")
            .unwrap(),
        (held - 1).to_string()
    );
    s.run("PREPARE TRANSACTION 'tom1';");
    assert_eq!(
        c.try_sql_as("eve", holders).unwrap(),
        "0|",
        "eve saw tom's prepared transaction"
    );
    assert_eq!(c.try_sql_as("tom", holders).unwrap(), format!("1|{held}"));
    assert_eq!(
        c.try_sql_as("watcher", holders).unwrap(),
        format!("1|{held}")
    );
    c.try_sql_in("tomdb", "COMMIT PREPARED 'tom1'").unwrap();
}
