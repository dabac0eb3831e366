//! What a DBA relies on: status and statistics, switching existing tables over, upgrading from
//! the first release, and who may change what.

mod common;
use common::Cluster;
use std::thread;
use std::time::Duration;

#[test]
fn node_and_stats_report_the_generator() {
    let mut c = Cluster::new(
        "status",
        "snowflake.datacenter_id = 9\nsnowflake.worker_id = 30\nsnowflake.max_clock_drift = '10s'",
    );
    c.fake_time(None);
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    assert_eq!(
        c.sql("SET timezone = 'UTC'; SELECT datacenter_id, worker_id, epoch, max_clock_drift_ms, last_timestamp IS NULL FROM snowflake_node()"),
        "9|30|2010-11-04 01:42:54.657+00|10000|t"
    );
    assert_eq!(c.sql("SELECT ids_issued FROM snowflake_stats()"), "0");
    c.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 12345)");
    assert_eq!(c.sql("SELECT ids_issued FROM snowflake_stats()"), "12345");
    let node = c.sql(
        "SELECT last_timestamp IS NOT NULL, lead_ms BETWEEN 0 AND 10000, lease_until >= last_timestamp, \
                lease_worker_pid = (SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake lease') \
         FROM snowflake_node()",
    );
    assert_eq!(node, "t|t|t|t");

    // The clock moves for the whole server, the lease worker included, or the test says why not.
    c.set_fake_offset("-8s");
    if !common::worker_sees_the_clock(&c) {
        return;
    }
    c.set_fake_offset("+0s");
    // A clock stepped back 8 s (seen about 6 s behind its highest reading, after our 1.5 s
    // wait, less if the machine is slow) is one event; past the drift it counts errors.
    c.sql("SELECT snowflake_nextval()");
    c.set_fake_offset("-8s");
    thread::sleep(Duration::from_millis(1500));
    c.sql("SELECT snowflake_nextval(); SELECT snowflake_nextval()");
    let s = c.sql("SELECT clock_back_events, largest_clock_back_ms BETWEEN 2000 AND 8000, errors FROM snowflake_stats()");
    assert_eq!(s, "1|t|0");
    c.set_fake_offset("-30s");
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(c.sql_err("SELECT snowflake_nextval()").sqlstate, "58000");
    // Still the same episode: the clock never caught up in between.
    assert_eq!(
        c.sql("SELECT errors >= 1, clock_back_events FROM snowflake_stats()"),
        "t|1"
    );

    // Counters live in shared memory: a restart resets them.
    c.set_fake_offset("+0s");
    c.stop("fast");
    c.env.clear();
    c.start();
    assert_eq!(
        c.sql("SELECT ids_issued, errors, clock_back_events FROM snowflake_stats()"),
        "0|0|0"
    );
}

#[test]
fn adopt_switches_existing_tables_and_keeps_new_ids_above_old_ones() {
    let mut c = Cluster::new("adopt", "snowflake.max_clock_drift = '10s'");
    c.start();
    c.sql(
        "CREATE EXTENSION snowflake;
         CREATE TABLE serial_t (id bigserial PRIMARY KEY, pid int DEFAULT pg_backend_pid(), ord bigserial, v text);
         INSERT INTO serial_t (v) SELECT 'old' FROM generate_series(1, 10000);
         CREATE TABLE ident_t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
         INSERT INTO ident_t (v) SELECT 'old' FROM generate_series(1, 100);
         CREATE TABLE int_t (id int PRIMARY KEY);
         CREATE TABLE future_t (id bigint PRIMARY KEY);
         CREATE TABLE far_t (id bigint PRIMARY KEY DEFAULT 1);
         -- Keys from a generator whose clock ran 3 s ahead: new IDs must still be above them.
         INSERT INTO future_t VALUES (snowflake_compose(now() + interval '3 seconds', 31, 31, 4095));
         INSERT INTO far_t VALUES (snowflake_compose(now() + interval '1 hour', 0, 0, 0));",
    );
    // Writers keep inserting while the table is switched over: none fails.
    let bench = thread::scope(|s| {
        let h = s.spawn(|| {
            c.pgbench_ok(
                "INSERT INTO serial_t (v) VALUES ('during');\n",
                &["-c", "4", "-j", "2", "-T", "4"],
            )
        });
        thread::sleep(Duration::from_millis(1500));
        let old_max = c.sql_i64("SELECT snowflake_adopt('serial_t')");
        (h.join().unwrap(), old_max)
    });
    let (_report, old_max) = bench;
    c.sql("INSERT INTO serial_t (v) VALUES ('after')");
    let check = c.sql(&format!(
        "SELECT count(*) FILTER (WHERE id > {old_max}) > 0, \
                (SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY pid ORDER BY ord) p FROM serial_t) x WHERE id <= p), \
                pg_get_expr(adbin, adrelid) \
         FROM serial_t, pg_attrdef WHERE adrelid = 'serial_t'::regclass AND adnum = 1 GROUP BY adbin, adrelid"
    ));
    assert_eq!(check, "t|0|snowflake_nextval()");

    // Identity columns lose their identity and take the default.
    c.sql("SELECT snowflake_adopt('ident_t')");
    assert_eq!(
        c.sql("INSERT INTO ident_t (v) VALUES ('new') RETURNING id > 100, snowflake_worker_id(id)"),
        "t|0"
    );

    let future_max = c.sql_i64("SELECT max(id) FROM future_t");
    c.sql("SELECT snowflake_adopt('future_t'); INSERT INTO future_t DEFAULT VALUES");
    assert_eq!(
        c.sql(&format!(
            "SELECT count(*) FROM future_t WHERE id > {future_max}"
        )),
        "1"
    );

    // Refusals: wrong type, keys too far ahead; nothing changes.
    let e = c.sql_err("SELECT snowflake_adopt('int_t')");
    assert_eq!(e.sqlstate, "42804", "{}", e.raw);
    assert!(e.hint.contains("TYPE bigint"));
    let e = c.sql_err("SELECT snowflake_adopt('far_t')");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(e.detail.contains("ahead of the clock"), "{}", e.raw);
    assert_eq!(
        c.sql(
            "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'far_t'::regclass"
        ),
        "1"
    );
    assert_eq!(
        c.sql_err("SELECT snowflake_adopt('serial_t', 'nope')")
            .sqlstate,
        "42703"
    );
}

/// Everything an extension's functions are, as the catalog says (comments included): for
/// comparing installs.
/// Settings (`SET search_path`), argument names and defaults included: an upgrade script that
/// loses one must not pass.
const CATALOG: &str = "SELECT string_agg(format('%s %s %s %s %s %s %s %s %s %s %s', p.oid::regprocedure, p.provolatile, p.proisstrict, \
     p.proparallel, p.prosecdef, pg_get_function_result(p.oid), md5(p.prosrc), p.proacl, obj_description(p.oid, 'pg_proc'), \
     p.proconfig, pg_get_function_arguments(p.oid)), E'\\n' ORDER BY p.oid::regprocedure::text) \
     FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
     JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake'";

/// Every released version, each with a query that must fail there because a later one adds it.
const RELEASES: [(&str, &str); 7] = [
    ("1.0.0", "SELECT * FROM snowflake_stats()"),
    ("1.1.0", "SELECT * FROM snowflake_partitions('pg_class')"),
    ("1.2.0", "SELECT clock_forward_jumps FROM snowflake_stats()"),
    ("1.3.0", "SELECT snowflake_to_base62(1)"),
    (
        "1.4.0",
        "SELECT '_snowflake_adopt_lock(regclass, name)'::regprocedure",
    ),
    ("1.5.0", "SELECT lease_database_owner FROM snowflake_node()"),
    (
        "1.6.0",
        "SELECT '_snowflake_partition_steps(regclass, timestamptz, timestamptz, interval, timestamptz, timestamptz)'::regprocedure",
    ),
];

#[test]
fn upgrade_from_every_release_matches_a_fresh_install() {
    let mut c = Cluster::new("upgrade", "");
    c.start();
    c.sql("CREATE DATABASE fresh");
    c.try_sql_in("fresh", "CREATE EXTENSION snowflake").unwrap();
    let version = "SELECT extversion FROM pg_extension WHERE extname = 'snowflake'";
    assert_eq!(
        c.try_sql_in("fresh", version).unwrap(),
        env!("CARGO_PKG_VERSION")
    );
    let fresh = c.try_sql_in("fresh", CATALOG).unwrap();
    for (old, missing) in RELEASES {
        let db = format!("v{}", old.replace('.', "_"));
        c.sql(&format!("CREATE DATABASE {db}"));
        c.try_sql_in(&db, &format!("CREATE EXTENSION snowflake VERSION '{old}'; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval()); INSERT INTO t DEFAULT VALUES")).unwrap();
        assert_eq!(c.try_sql_in(&db, version).unwrap(), old);
        assert!(
            c.try_sql_in(&db, missing).is_err(),
            "{old} should not have what `{missing}` uses"
        );
        // A view on each status function, and a statement prepared on one, made before the
        // update: the update keeps them working (a result type that changed keeps the old
        // function, renamed, for its dependents).
        // (1.0.0 has neither function.)
        let views = old != "1.0.0";
        let columns = "SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'v_stats'::regclass \
                       UNION ALL SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'v_node'::regclass";
        // The function each view reads.
        let reads = "SELECT string_agg(DISTINCT d.refobjid::regprocedure::text, ',' ORDER BY d.refobjid::regprocedure::text) FROM pg_depend d \
                     JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid \
                     WHERE r.ev_class IN ('v_stats'::regclass, 'v_node'::regclass) AND d.refclassid = 'pg_proc'::regclass";
        let mut columns_before = String::new();
        if views {
            c.try_sql_in(&db, "CREATE VIEW v_stats AS SELECT * FROM snowflake_stats(); CREATE VIEW v_node AS SELECT * FROM snowflake_node()")
                .unwrap();
            columns_before = c.try_sql_in(&db, columns).unwrap();
        }
        c.try_sql_in(&db, "ALTER EXTENSION snowflake UPDATE")
            .unwrap();
        if views {
            assert_eq!(c.try_sql_in(&db, columns).unwrap(), columns_before);
            assert_eq!(
                c.try_sql_in(
                    &db,
                    "SELECT (SELECT ids_issued >= 1 FROM v_stats), (SELECT worker_id FROM v_node)"
                )
                .unwrap(),
                "t|0"
            );
            // snowflake_node() changed in 1.2.0, 1.5.0 and 1.6.0, snowflake_stats() in 1.3.0:
            // each view reads the one of its version, kept under a frozen name where it changed
            // since.
            let kept = match old {
                "1.1.0" => "snowflake_node_1_1(),snowflake_stats_1_2()",
                "1.2.0" => "snowflake_node_1_4(),snowflake_stats_1_2()",
                "1.5.0" => "snowflake_node_1_5(),snowflake_stats()",
                "1.6.0" => "snowflake_node(),snowflake_stats()",
                _ => "snowflake_node_1_4(),snowflake_stats()",
            };
            assert_eq!(c.try_sql_in(&db, reads).unwrap(), kept, "from {old}");
        }
        // The new column is there, whatever the update kept (this server set no pair).
        assert_eq!(
            c.try_sql_in(&db, "SELECT pair_set FROM snowflake_node()")
                .unwrap(),
            "f"
        );
        assert_eq!(
            c.try_sql_in(&db, version).unwrap(),
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(
            c.try_sql_in(&db, CATALOG).unwrap(),
            fresh,
            "an install upgraded from {old} differs from a fresh one"
        );
        // The upgraded extension works, with the table made before the upgrade.
        let out = c
            .try_sql_in(&db, "INSERT INTO t DEFAULT VALUES; SELECT count(*), (SELECT ids_issued >= 2 FROM snowflake_stats()) FROM t")
            .unwrap();
        assert_eq!(out, "2|t");
    }
}

#[test]
fn non_superusers_generate_ids_but_cannot_change_the_node_identity() {
    let mut c = Cluster::new("roles", "snowflake.worker_id = 6");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE ROLE app LOGIN; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval()); GRANT ALL ON t TO app");
    assert_eq!(
        c.try_sql_as("app", "INSERT INTO t DEFAULT VALUES RETURNING snowflake_worker_id(id), (snowflake_decode(id)).worker_id").unwrap(),
        "6|6"
    );
    assert!(c
        .try_sql_as("app", "SELECT * FROM snowflake_node(), snowflake_stats()")
        .is_ok());
    let denied = [
        ("SET snowflake.worker_id = 3", "55P02"),
        ("SET snowflake.max_clock_drift = '1h'", "55P02"),
        ("ALTER SYSTEM SET snowflake.worker_id = 3", "42501"),
        ("SELECT snowflake_set_floor(1)", "42501"),
        ("SELECT snowflake_adopt('t')", "42501"),
    ];
    for (sql, code) in denied {
        let e = c.try_sql_as("app", sql).expect_err(sql);
        assert_eq!(e.sqlstate, code, "{sql}: {}", e.raw);
    }
    assert_eq!(c.sql("SHOW snowflake.worker_id"), "6");
}

/// `snowflake.max_clock_drift` out of range, set with ALTER SYSTEM or found at a reload, is
/// refused with its bounds in whole milliseconds, a DETAIL and a HINT (1.6.0 printed PostgreSQL's
/// `(100 .. 2.19902e+12)`), and the server keeps the value it had.
#[test]
fn max_clock_drift_out_of_range_names_its_bounds_in_ms() {
    let mut c = Cluster::new("drift-range", "");
    c.start();
    let range = "is outside the valid range for parameter \"snowflake.max_clock_drift\" (100 ms .. 2199023255551 ms)";
    for (value, shown) in [("50ms", "50"), ("-5", "-5"), ("25452d", "2199052800000")] {
        let e = c.sql_err(&format!(
            "ALTER SYSTEM SET snowflake.max_clock_drift = '{value}'"
        ));
        assert_eq!(e.sqlstate, "22023", "{}", e.raw);
        assert_eq!(e.message, format!("{shown} ms {range}"), "{}", e.raw);
        assert!(
            e.detail
                .contains("takes a time from 100 ms up to 25451 days"),
            "{}",
            e.raw
        );
        assert_eq!(
            e.hint, "Give a value in that range, such as '10s'.",
            "{}",
            e.raw
        );
    }
    c.sql("ALTER SYSTEM SET snowflake.max_clock_drift = '1.5s'");
    c.sql("SELECT pg_reload_conf()");
    c.wait_for("SHOW snowflake.max_clock_drift", "1500ms", 20);
    // A bad value in the file at a reload: logged with the same words; the value stays.
    c.conf("snowflake.max_clock_drift = '50ms'");
    c.sql("ALTER SYSTEM RESET snowflake.max_clock_drift");
    c.sql("SELECT pg_reload_conf()");
    assert!(
        common::eventually(20, || c.log().contains(&format!("50 ms {range}"))),
        "{}",
        c.log()
    );
    assert_eq!(c.sql("SHOW snowflake.max_clock_drift"), "1500ms");
    // Within the bounds, whatever its form.
    assert_eq!(
        c.sql("SELECT setting FROM pg_settings WHERE name = 'snowflake.max_clock_drift'"),
        "1500"
    );
}

/// `snowflake.database` naming a database that does not exist: a call says so at once, naming
/// the database, with the fix (1.6.0 waited 10 s and spoke of max_worker_processes); the lease
/// worker says it once and looks again quietly (1.6.0's postmaster logged `FATAL: database
/// "appdb" does not exist` every second); once the database is created, IDs are issued. An
/// empty name is refused as it is set (and at start-up: `sql_api`'s bad settings).
#[test]
fn a_missing_lease_database_is_named_and_the_worker_backs_off() {
    let mut c = Cluster::new("nodb", "snowflake.database = 'appdb'");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    let asked = std::time::Instant::now();
    let e = c.sql_err("SELECT snowflake_nextval()");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.detail
            .contains("snowflake.database names database \"appdb\", which does not exist"),
        "{}",
        e.raw
    );
    assert!(e.hint.contains("CREATE DATABASE appdb"), "{}", e.raw);
    assert!(
        asked.elapsed() < Duration::from_secs(8),
        "said at once, not after the 10 s wait for a lease: {:?}",
        asked.elapsed()
    );
    // A few seconds more: the worker looks again quietly, no FATAL a second.
    thread::sleep(Duration::from_secs(6));
    let log = c.log();
    let fatals = log
        .matches("FATAL:  database \"appdb\" does not exist")
        .count();
    assert!(fatals <= 1, "{fatals} FATALs:\n{log}");
    assert_eq!(
        log.matches(
            "WARNING:  snowflake: database \"appdb\" named by snowflake.database does not exist"
        )
        .count(),
        1,
        "{log}"
    );
    let e = c.sql_err("ALTER SYSTEM SET snowflake.database = ''");
    assert_eq!(e.sqlstate, "22023", "{}", e.raw);

    c.sql("CREATE DATABASE appdb");
    c.wait_for("SELECT snowflake_nextval() > 0 FROM (SELECT 1) s", "t", 30);
    assert!(c.log().contains("found database \"appdb\""), "{}", c.log());
}

/// A clock stepped back is said in the log once, with its size, by the lease worker, however many
/// calls see it (1.6.0 logged nothing: only a counter, and 58000 at each call beyond the drift).
/// The calls see the step (libfaketime reaches backends on every major), the worker says it.
#[test]
fn a_clock_stepped_back_is_logged_once_with_its_size() {
    let mut c = Cluster::new("clockback", "snowflake.max_clock_drift = '10s'");
    c.fake_time(None);
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    c.sql("SELECT snowflake_nextval()");
    c.set_fake_offset("-5s");
    thread::sleep(Duration::from_millis(1500));
    for _ in 0..3 {
        c.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)");
    }
    assert_eq!(
        c.sql("SELECT clock_back_events FROM snowflake_stats()"),
        "1"
    );
    let said = "WARNING:  snowflake: the system clock went back by at least ";
    let sizes = || -> Vec<u64> {
        c.log()
            .split(said)
            .skip(1)
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    assert!(
        common::eventually(10, || !sizes().is_empty()),
        "no WARNING:\n{}",
        c.log()
    );
    thread::sleep(Duration::from_secs(2));
    let sizes = sizes();
    assert!(
        sizes.len() == 1 && (2_000..=5_000).contains(&sizes[0]),
        "{sizes:?}\n{}",
        c.log()
    );
}

/// The lease worker's start says the mark as a timestamp, with its raw value, and on a new server
/// that there is none yet (1.6.0: `persisted high-water mark 1795741346773 (Unix ms)`, and on a
/// new server `0 (Unix ms), written under the epoch (not recorded)`).
#[test]
fn the_start_says_the_mark_as_a_timestamp() {
    let mut c = Cluster::new("mark-log", "");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    c.sql("SELECT snowflake_nextval()");
    assert!(
        c.log().contains(
            "snowflake lease worker started; no high-water mark yet (a new _snowflake.lease_ms)"
        ),
        "{}",
        c.log()
    );
    c.stop("fast");
    c.start();
    let said = "snowflake lease worker started; persisted high-water mark ";
    assert!(
        common::eventually(10, || c.log().contains(said)),
        "expected {said:?} in:\n{}",
        c.log()
    );
    // "2026-11-27 01:02:26.773+00 (1795741346773 Unix ms), written under the epoch ..."
    let log = c.log();
    let line = log.split(said).nth(1).unwrap().lines().next().unwrap();
    let (text, rest) = line.split_once(" (").unwrap();
    let (raw, rest) = rest.split_once(" Unix ms), ").unwrap();
    assert_eq!(
        c.sql(&format!(
            "SELECT to_char(to_timestamp({raw} / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || '+00'"
        )),
        text,
        "{line}"
    );
    assert_eq!(
        rest,
        "written under the epoch 2010-11-04 01:42:54.657+00 (1288834974657 Unix ms)"
    );
}
