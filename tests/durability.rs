//! Never a duplicate: crashes and restarts with the clock set back, a clock stepped back while
//! clients insert, failover to a standby whose clock lags, and many servers feeding one table.
//! Real servers, real crashes (`pg_ctl stop -m immediate`), a real clock moved by libfaketime.

mod common;
use common::Cluster;
use std::thread;
use std::time::Duration;

const TABLE: &str = "CREATE EXTENSION snowflake; \
    CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), pid int DEFAULT pg_backend_pid(), \
                    ord bigserial, payload text, \
                    at timestamptz DEFAULT clock_timestamp())";

fn max_id(c: &Cluster) -> i64 {
    c.sql_i64("SELECT max(id) FROM t")
}

/// Every ID inserted after `floor` exists is above it, and each session saw its IDs increase.
fn assert_all_above(c: &Cluster, floor: i64, marker: &str) {
    let out = c.sql(&format!(
        "SELECT count(*), count(*) FILTER (WHERE id <= {floor}) FROM t WHERE payload = '{marker}'"
    ));
    let (n, below) = out.split_once('|').unwrap();
    assert!(n.parse::<i64>().unwrap() > 0, "no rows with {marker}");
    assert_eq!(
        below, "0",
        "{below} of {n} new IDs are not above the old maximum {floor}"
    );
}

fn assert_sessions_increase(c: &Cluster) {
    let bad = c.sql_i64(
        "SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY pid ORDER BY ord) AS prev FROM t) x WHERE id <= prev",
    );
    assert_eq!(bad, 0, "a session saw its IDs go down");
}

#[test]
fn crash_and_restart_with_the_clock_set_back() {
    let mut c = Cluster::new("crash", "snowflake.max_clock_drift = '60s'");
    c.start();
    c.sql(TABLE);
    c.sql("INSERT INTO t (payload) SELECT 'before' FROM generate_series(1, 200000)");
    let before = max_id(&c);
    c.stop("immediate");

    c.fake_time(Some("-10s"));
    c.start();
    let offset = c.clock_offset_s();
    assert!(
        offset < -9.0,
        "the server's clock is not behind ({offset} s)"
    );
    if !common::worker_sees_the_clock(&c) {
        return;
    }
    c.sql("INSERT INTO t (payload) SELECT 'after crash' FROM generate_series(1, 1000)");
    assert_all_above(&c, before, "after crash");

    // The same after a clean stop, with the clock set back further still.
    let before = max_id(&c);
    c.stop("fast");
    c.fake_time(Some("-20s"));
    c.start();
    c.sql("INSERT INTO t (payload) SELECT 'after clean stop' FROM generate_series(1, 1000)");
    assert_all_above(&c, before, "after clean stop");
    assert_sessions_increase(&c);
}

#[test]
fn backend_crash_reinitialises_shared_memory_and_still_never_repeats() {
    let mut c = Cluster::new(
        "backend-crash",
        "snowflake.max_clock_drift = '60s'\nrestart_after_crash = on",
    );
    c.fake_time(None);
    c.start();
    c.sql(TABLE);
    c.sql("INSERT INTO t (payload) SELECT 'before' FROM generate_series(1, 50000)");
    let before = max_id(&c);
    // Clock back 10 s, then a backend dies by SIGKILL: the postmaster resets shared memory, so
    // the generator's state is gone and only the persisted lease remains.
    c.set_fake_offset("-10s");
    if !common::worker_sees_the_clock(&c) {
        return;
    }
    let victim =
        c.sql_i64("SELECT pid FROM pg_stat_activity WHERE backend_type = 'snowflake lease'");
    let _ = std::process::Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status();
    // First the postmaster sees the crash, then a new worker starts: right after the kill, the
    // dying worker itself may still be listed.
    assert!(
        common::eventually(60, || c.log().contains("terminated by signal 9")),
        "no crash happened:\n{}",
        c.log()
    );
    c.wait_for(
        &format!(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'snowflake lease' AND pid <> {victim}"
        ),
        "t",
        60,
    );
    assert_eq!(
        c.sql("SELECT ids_issued FROM snowflake_stats()"),
        "0",
        "shared memory was not reset"
    );
    c.sql("INSERT INTO t (payload) SELECT 'after backend crash' FROM generate_series(1, 1000)");
    assert_all_above(&c, before, "after backend crash");
}

#[test]
fn clock_stepped_back_while_clients_insert() {
    let mut c = Cluster::new("step", "snowflake.max_clock_drift = '10s'");
    c.fake_time(None);
    c.start();
    c.sql(TABLE);
    let bench = thread::scope(|s| {
        let h = s.spawn(|| {
            c.pgbench_ok(
                "INSERT INTO t (payload) VALUES ('stepped');\n",
                &["-c", "8", "-j", "2", "-T", "8"],
            )
        });
        thread::sleep(Duration::from_secs(3));
        c.set_fake_offset("-5s");
        h.join().unwrap()
    });
    let text = bench;
    let offset = c.clock_offset_s();
    assert!(offset < -4.0, "the step did not happen ({offset} s)");
    if !common::worker_sees_the_clock(&c) {
        return;
    }
    let processed: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .expect("pgbench summary");
    assert_eq!(
        c.sql_i64("SELECT count(*) FROM t WHERE payload = 'stepped'"),
        processed,
        "every insert made it"
    );
    assert_sessions_increase(&c);
    // `at` is the server's (stepped) clock when the row was inserted: IDs issued while it was
    // behind carry the last timestamp, well ahead of it.
    let ahead = c
        .sql_i64("SELECT count(*) FROM t WHERE snowflake_timestamp(id) > at + interval '1 second'");
    assert!(ahead > 0, "no ID was issued while the clock was behind");

    // Past max_clock_drift: clear errors, nothing inserted, nothing repeated...
    let before = max_id(&c);
    let count = c.sql_i64("SELECT count(*) FROM t");
    c.set_fake_offset("-40s");
    thread::sleep(Duration::from_millis(2500));
    assert!(c.clock_offset_s() < -35.0, "the second step did not happen");
    let e = c.sql_err("INSERT INTO t (payload) VALUES ('too far')");
    assert_eq!(e.sqlstate, "58000", "{}", e.raw);
    assert!(
        e.detail.contains("ms behind") && e.detail.contains("max_clock_drift"),
        "{}",
        e.raw
    );
    assert!(!e.hint.is_empty());
    assert_eq!(c.sql_i64("SELECT count(*) FROM t"), count);
    // ...and the server recovers by itself when the clock catches up.
    c.set_fake_offset("+0s");
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 15);
    c.sql("INSERT INTO t (payload) VALUES ('recovered')");
    assert_all_above(&c, before, "recovered");
}

#[test]
fn failover_to_a_standby_whose_clock_is_behind() {
    let mut primary = Cluster::new("primary", "snowflake.worker_id = 4\nwal_level = replica");
    primary.start();
    primary.sql(TABLE);
    let mut standby = Cluster::standby_of(&primary, "standby");
    standby.fake_time(Some("-5s"));
    standby.start();
    assert!(
        standby.clock_offset_s() < -4.0,
        "standby clock is not behind"
    );

    primary.sql("INSERT INTO t (payload) SELECT 'primary' FROM generate_series(1, 100000)");
    let before = max_id(&primary);
    let lsn = primary.sql("SELECT pg_current_wal_flush_lsn()");
    standby.wait_for(
        &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'"),
        "t",
        60,
    );
    // A standby shares the primary's worker ID: it must not generate IDs itself.
    assert_eq!(
        standby.sql_err("SELECT snowflake_nextval()").sqlstate,
        "25006"
    );

    primary.stop("immediate");
    standby.promote();
    // The lease worker starts at promotion: it must see the standby's clock.
    if !common::worker_sees_the_clock(&standby) {
        return;
    }
    standby.sql("INSERT INTO t (payload) SELECT 'promoted' FROM generate_series(1, 1000)");
    assert_eq!(
        standby.sql_i64("SELECT count(*) FROM t WHERE payload = 'primary'"),
        100000
    );
    assert_all_above(&standby, before, "promoted");
    // The promoted server inherits the primary's system identifier and its claim: once its own
    // worker has refreshed that claim, it still sees no other server on its pair.
    let promoted_at = standby.sql("SELECT now()");
    standby.wait_for(
        &format!("SELECT count(*) FROM _snowflake.claims WHERE last_seen > '{promoted_at}'"),
        "1",
        20,
    );
    assert_eq!(
        standby.sql(
            "SELECT claim_conflict_with IS NULL, snowflake_nextval() > 0 FROM snowflake_node()"
        ),
        "t|t"
    );
}

#[test]
fn two_servers_feed_one_table_through_logical_replication() {
    let logical =
        "wal_level = logical\nmax_worker_processes = 16\nmax_logical_replication_workers = 8";
    let mut a = Cluster::new(
        "fan-a",
        &format!("{logical}\nsnowflake.datacenter_id = 1\nsnowflake.worker_id = 1"),
    );
    let mut b = Cluster::new(
        "fan-b",
        &format!("{logical}\nsnowflake.datacenter_id = 1\nsnowflake.worker_id = 2"),
    );
    let mut hub = Cluster::new(
        "fan-hub",
        &format!("{logical}\nsnowflake.datacenter_id = 2\nsnowflake.worker_id = 1"),
    );
    for c in [&mut a, &mut b, &mut hub] {
        c.start();
        c.sql(TABLE);
    }
    for (c, name) in [(&a, "a"), (&b, "b")] {
        c.sql(&format!("CREATE PUBLICATION pub_{name} FOR TABLE t"));
        hub.sql(&format!(
            "CREATE SUBSCRIPTION sub_{name} CONNECTION 'host={} port={} user=postgres dbname=postgres' PUBLICATION pub_{name}",
            c.dir.display(),
            c.port
        ));
    }
    let script = "INSERT INTO t (payload) VALUES ('fan-in');\n";
    thread::scope(|s| {
        let ha = s.spawn(|| a.pgbench_ok(script, &["-c", "4", "-j", "2", "-t", "5000"]));
        let hb = s.spawn(|| b.pgbench_ok(script, &["-c", "4", "-j", "2", "-t", "5000"]));
        ha.join().unwrap();
        hb.join().unwrap();
    });
    hub.wait_for("SELECT count(*) FROM t", "40000", 120);
    let per_origin = hub.sql(
        "SELECT string_agg(o || ':' || n, ',' ORDER BY o) FROM \
         (SELECT snowflake_datacenter_id(id) || '/' || snowflake_worker_id(id) AS o, count(*) AS n FROM t GROUP BY 1) x",
    );
    assert_eq!(per_origin, "1/1:20000,1/2:20000");
    assert!(
        !hub.log().contains("duplicate key"),
        "a conflict on the hub:\n{}",
        hub.log()
    );
}

/// A clock that jumps forward by `jump` while the server runs, IDs issued meanwhile, then the
/// correction: refused (58000) until `snowflake.max_clock_drift` is raised above the gap, at
/// once after it, restart or not; and never a duplicate, also when real time later passes
/// through the range used while the clock was ahead.
/// The README's alert, run as written from this (the monitoring) host, whose clock is right.
fn future_ids_alert(c: &Cluster) -> String {
    common::run_recipes(&["future-ids-alert"], &[("DB", c.uri())])
}

fn forward_jump_corrected(name: &str, jump: &str, remedy: &str) {
    let mut c = Cluster::new(name, "snowflake.max_clock_drift = '10s'");
    c.fake_time(None);
    c.start();
    c.sql(TABLE);
    c.sql("INSERT INTO t (payload) SELECT 'before' FROM generate_series(1, 1000)");
    assert_eq!(future_ids_alert(&c), "f");
    c.set_fake_offset(jump);
    if !common::worker_sees_the_clock(&c) {
        return;
    }
    // Visible when it happens: a WARNING and a counter.
    c.wait_for("SELECT clock_forward_jumps FROM snowflake_stats()", "1", 10);
    assert!(
        c.log().contains("the system clock jumped forward by"),
        "{}",
        c.log()
    );
    c.sql("INSERT INTO t (payload) SELECT 'ahead' FROM generate_series(1, 5000)");
    let ahead = max_id(&c);
    assert_eq!(
        future_ids_alert(&c),
        "t",
        "the alert missed IDs dated in the future"
    );

    // Corrected: the IDs issued while ahead lie in the future now.
    c.set_fake_offset("+0s");
    thread::sleep(Duration::from_millis(300));
    let e = c.sql_err("INSERT INTO t (payload) VALUES ('corrected')");
    assert_eq!(e.sqlstate, "58000", "{}", e.raw);
    assert!(
        e.hint
            .contains("raise snowflake.max_clock_drift above the gap"),
        "{}",
        e.raw
    );
    // A restart does not lose what was issued: still refused.
    c.stop("fast");
    c.start();
    let e = c.sql_err("INSERT INTO t (payload) VALUES ('restarted')");
    assert_eq!(e.sqlstate, "58000", "{}", e.raw);

    // The remedy works for any gap: at once, on reload.
    c.script(remedy).unwrap();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 10);
    c.sql("INSERT INTO t (payload) SELECT 'resumed' FROM generate_series(1, 1000)");
    assert_all_above(&c, ahead, "resumed");
    let resumed = max_id(&c);
    c.stop("fast");
    c.start();
    c.sql("INSERT INTO t (payload) SELECT 'resumed after restart' FROM generate_series(1, 1000)");
    assert_all_above(&c, resumed, "resumed after restart");

    // Real time reaches the range that was used while the clock was ahead.
    let before = max_id(&c);
    c.set_fake_offset(jump);
    thread::sleep(Duration::from_millis(300));
    c.sql("INSERT INTO t (payload) SELECT 'passing' FROM generate_series(1, 1000)");
    assert_all_above(&c, before, "passing");
    assert_sessions_increase(&c);
    assert_eq!(c.sql("SELECT count(*) = count(DISTINCT id) FROM t"), "t");
}

#[test]
fn a_clock_two_days_ahead_then_corrected() {
    // The README's remedy as written: it is for a clock that ran 2 days ahead.
    forward_jump_corrected("jump-2d", "+2d", &common::readme_recipe("raise-drift"));
}

#[test]
fn a_clock_four_hundred_days_ahead_then_corrected() {
    forward_jump_corrected(
        "jump-400d",
        "+400d",
        "ALTER SYSTEM SET snowflake.max_clock_drift = '401d';\nSELECT pg_reload_conf();",
    );
}

#[test]
fn a_server_that_booted_ahead_and_issued_nothing_is_unaffected_by_the_correction() {
    let mut c = Cluster::new("boot-ahead", "snowflake.max_clock_drift = '10s'");
    c.fake_time(Some("+2d"));
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    if !common::worker_sees_the_clock(&c) {
        return;
    }
    // Long enough for any lease the worker would write at start-up.
    thread::sleep(Duration::from_secs(2));
    assert_eq!(
        c.sql("SELECT lease_until IS NULL FROM snowflake_node()"),
        "t"
    );
    c.stop("fast");
    c.env.clear();
    c.start();
    assert!(c.clock_offset_s().abs() < 2.0);
    assert_eq!(
        c.sql("SELECT abs(extract(epoch FROM snowflake_timestamp(snowflake_nextval()) - clock_timestamp())) < 5"),
        "t"
    );
}

#[test]
fn an_epoch_moved_later_is_refused_naming_both_epochs() {
    let mut c = Cluster::new("epoch-later", "");
    c.start();
    c.sql(TABLE);
    c.sql("INSERT INTO t (payload) SELECT 'twitter' FROM generate_series(1, 1000)");
    let before = max_id(&c);
    let count = c.sql_i64("SELECT count(*) FROM t");
    c.stop("fast");

    // The same Unix time is a smaller timestamp field under a later epoch: new IDs would fall
    // below old ones. Refused, with both epochs.
    c.conf("snowflake.epoch = '2015-01-01'");
    c.start();
    let e = c.sql_err("INSERT INTO t (payload) VALUES ('2015')");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.message
            .contains("snowflake.epoch is later than the epoch this server issued IDs under"),
        "{}",
        e.raw
    );
    assert!(
        e.detail.contains("1288834974657") && e.detail.contains("1420070400000"),
        "{}",
        e.raw
    );
    assert!(e.hint.contains("Set snowflake.epoch back to"), "{}", e.raw);
    assert_eq!(c.sql_i64("SELECT count(*) FROM t"), count);
    c.stop("fast");

    // Back to the old epoch: IDs continue above.
    c.conf("snowflake.epoch = '2010-11-04 01:42:54.657+00'");
    c.start();
    c.sql("INSERT INTO t (payload) SELECT 'back' FROM generate_series(1, 100)");
    assert_all_above(&c, before, "back");
    let before = max_id(&c);
    c.stop("fast");

    // An earlier epoch is safe (IDs stay above, re-dated)...
    c.conf("snowflake.epoch = '2009-01-01'");
    c.start();
    c.sql("INSERT INTO t (payload) SELECT 'earlier' FROM generate_series(1, 100)");
    assert_all_above(&c, before, "earlier");
    c.stop("fast");
    // ...but once IDs were issued under it, going back to the later one is refused too.
    c.conf("snowflake.epoch = '2010-11-04 01:42:54.657+00'");
    c.start();
    assert_eq!(c.sql_err("SELECT snowflake_nextval()").sqlstate, "55000");
}

/// A mark raised from outside (a restore of `_snowflake.lease_ms` from a dump of a server whose
/// IDs ran ahead) is a floor at once, and the worker never writes the mark lower again, so the
/// raise survives a crash (1.4.0 wrote its own lower lease over it).
#[test]
fn a_mark_raised_from_outside_is_never_lowered() {
    let mut c = Cluster::new("raised-mark", "snowflake.max_clock_drift = '1h'");
    c.start();
    // In the schema the recipes name (see docs/security.md), on this session's search_path.
    c.sql("CREATE SCHEMA snowflake; CREATE EXTENSION snowflake SCHEMA snowflake; ALTER ROLE postgres SET search_path = public, snowflake");
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    c.sql("CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval()); INSERT INTO orders DEFAULT VALUES");
    // The README's runbook after a failover, with the old server's mark 10 minutes ahead (as a
    // server whose IDs ran ahead would have left it): the floor from the table, then the mark.
    let ahead = c.sql_i64("SELECT (extract(epoch FROM now()) * 1000)::bigint + 600000");
    for recipe in ["raise-after-failover", "raise-mark"] {
        common::run_sql_recipe(&c, recipe, ahead);
    }
    let above =
        format!("SELECT snowflake_nextval() >= snowflake_min_id(to_timestamp({ahead} / 1000.0))");
    c.wait_for(&above, "t", 20);
    // Renewals as IDs are issued over a few seconds.
    for _ in 0..4 {
        c.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 20000)");
        thread::sleep(Duration::from_millis(700));
    }
    let mark = "SELECT last_value FROM _snowflake.lease_ms";
    assert!(
        c.sql_i64(mark) >= ahead,
        "the worker lowered the raised mark"
    );
    c.stop("immediate");
    c.start();
    assert!(
        c.sql_i64(mark) >= ahead,
        "the raised mark did not survive a crash"
    );
    c.wait_for(&above, "t", 20);
}

/// `snowflake_set_floor()` returns once its floor is durable: a clean restart right after it,
/// with no ID issued in between, still starts above it (1.5.0 kept the floor in shared memory
/// until the next ID wanted a lease, and the restart lost it).
#[test]
fn a_floor_set_survives_a_restart_before_any_write() {
    let mut c = Cluster::new("floor-durable", "snowflake.max_clock_drift = '1h'");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    // As after a failover: the old server's last IDs lie 30 s ahead of this server's clock.
    let floor = c.sql_i64("SELECT snowflake_max_id(now() + interval '30 s')");
    c.sql(&format!("SELECT snowflake_set_floor({floor})"));
    c.stop("fast");
    c.start();
    let next = c.sql_i64("SELECT snowflake_nextval()");
    assert!(
        next > floor,
        "the floor {floor} was lost in the restart: next ID {next}"
    );
}

/// The failover recipe's mark line raises the floor even where the server already holds a lease
/// above the old mark (1.5.0's `setval(GREATEST(...))` then changed nothing, and the worker
/// compared the mark with its lease, not with what it had issued: IDs went on below the mark).
#[test]
fn a_mark_inside_the_lease_already_held_is_a_floor() {
    let mut c = Cluster::new("mark-in-lease", "snowflake.max_clock_drift = '1h'");
    c.start();
    c.sql("CREATE SCHEMA snowflake; CREATE EXTENSION snowflake SCHEMA snowflake");
    // A lease is held (about a second ahead of the clock); the old server's mark is its end.
    c.wait_for("SELECT snowflake.snowflake_nextval() > 0", "t", 20);
    let old_mark = c.sql_i64("SELECT last_value FROM _snowflake.lease_ms");
    common::run_sql_recipe(&c, "raise-mark", old_mark);
    let next = c.sql_i64("SELECT snowflake.snowflake_nextval()");
    let above = c.sql_i64(&format!(
        "SELECT snowflake.snowflake_max_id(to_timestamp({old_mark} / 1000.0))"
    ));
    assert!(
        next > above,
        "ID {next} is not above the old mark {old_mark}"
    );
}

/// A plain dump that includes `_snowflake`, restored with psql's defaults into the server it
/// came from, sets the mark back to the dump's value: the worker writes its own back within a
/// few seconds, and a crash before it looks still starts above the last lease the server
/// recorded in its claim (1.5.0 kept the lowered mark, and a restart with the clock behind
/// repeated IDs).
#[test]
fn a_restored_dump_never_lowers_the_floor() {
    restored_dump_never_lowers_the_floor("plain");
}

/// The same with a custom-format dump and pg_restore, which also goes on past "already exists"
/// and runs the dump's `setval`.
#[test]
fn a_dump_restored_by_pg_restore_never_lowers_the_floor() {
    restored_dump_never_lowers_the_floor("custom");
}

fn restored_dump_never_lowers_the_floor(format: &str) {
    let mut c = Cluster::new(
        &format!("dump-restore-{format}"),
        "snowflake.max_clock_drift = '1h'",
    );
    c.start();
    c.sql(TABLE);
    c.sql("INSERT INTO t (payload) VALUES ('before the dump')");
    let dump = c.dir.join("dump");
    let out = c
        .tool("pg_dump")
        .args(["-F", format, "-f"])
        .arg(&dump)
        .arg("postgres")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // IDs run 30 s ahead (as a server whose clock was ahead leaves them): its lease with them.
    let floor = c.sql_i64("SELECT snowflake_max_id(now() + interval '30 s')");
    c.sql(&format!("SELECT snowflake_set_floor({floor})"));
    c.sql("INSERT INTO t (payload) VALUES ('ahead')");
    let held = c.sql_i64("SELECT last_value FROM _snowflake.lease_ms");
    let restore = || {
        // The tools' defaults: they go on past "already exists", as a user's restore does
        // (pg_restore then exits with 1, counting the errors it ignored).
        let out = if format == "plain" {
            c.psql_cmd("postgres")
                .args(["-v", "ON_ERROR_STOP=0", "-f"])
                .arg(&dump)
                .output()
                .unwrap()
        } else {
            c.tool("pg_restore")
                .args(["-d", "postgres"])
                .arg(&dump)
                .output()
                .unwrap()
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("errors ignored on restore"),
            "{stderr}"
        );
        c.sql_i64("SELECT last_value FROM _snowflake.lease_ms")
    };
    assert!(restore() < held, "the restore did not lower the mark");
    c.wait_for(
        &format!("SELECT last_value >= {held} FROM _snowflake.lease_ms"),
        "t",
        15,
    );
    assert!(
        c.log().contains("was lowered to"),
        "no WARNING for the lowered mark"
    );
    // Again, and a crash before the worker looks.
    assert!(restore() < held, "the restore did not lower the mark");
    c.stop("immediate");
    c.start();
    c.sql("INSERT INTO t (payload) VALUES ('after the crash')");
    assert_all_above(&c, floor, "after the crash");
}

/// A thousand IDs of `c` in one statement, or the message of its error.
fn thousand_ids(c: &Cluster) -> Result<Vec<i64>, String> {
    c.try_sql("SELECT snowflake_nextval() FROM generate_series(1, 1000)")
        .map(|out| out.lines().map(|l| l.parse().unwrap()).collect())
        .map_err(|e| e.message)
}

/// The promoted server issues, once it can, until it is past every ID of `old` (the old
/// primary's): each of the old primary's milliseconds has been its own too by then. Its IDs,
/// and how many of them are in `old`.
fn issue_past(promoted: &Cluster, old: &[i64]) -> (Vec<i64>, usize) {
    assert!(common::eventually(60, || thousand_ids(promoted).is_ok()));
    let old_max = old.iter().copied().max().unwrap();
    let old: std::collections::HashSet<i64> = old.iter().copied().collect();
    let mut new = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(90);
    while new.last().is_none_or(|&id| id <= old_max) {
        assert!(
            std::time::Instant::now() < until,
            "the promoted standby did not pass the old primary's IDs"
        );
        new.extend(thousand_ids(promoted).unwrap());
    }
    let equal = new.iter().filter(|id| old.contains(id)).count();
    (new, equal)
}

/// Issue 50, item 1: the lease worker's commit waits for the synchronous standby, and a cancel
/// (or a terminate) of that wait makes PostgreSQL return the commit with a WARNING, committed
/// locally only. No ID may be issued under such a lease: after a failover to the standby (its
/// clock 8 s behind, so that it issues in the old server's milliseconds) no ID repeats.
fn failover_after_the_workers_synchronous_wait_is_interrupted(how: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut primary = Cluster::new(
        &format!("sync-{how}-primary"),
        "snowflake.datacenter_id = 1\nsnowflake.worker_id = 1\nwal_level = replica",
    );
    primary.start();
    primary.sql("CREATE EXTENSION snowflake");
    let mut standby = Cluster::standby_of(&primary, &format!("sync-{how}-s1"));
    // The walreceiver's application_name, which synchronous_standby_names lists.
    standby.conf("cluster_name = 's1'");
    standby.fake_time(Some("-8s"));
    standby.start();
    assert!(
        standby.clock_offset_s() < -7.0,
        "standby clock is not behind"
    );
    primary.sql("ALTER SYSTEM SET synchronous_standby_names = 's1'");
    primary.sql("SELECT pg_reload_conf()");
    primary.wait_for(
        "SELECT string_agg(application_name || ':' || sync_state, ',') FROM pg_stat_replication",
        "s1:sync",
        30,
    );
    let signal = primary.walsender("s1");
    // Only the worker's own commits wait for the standby: the load reads IDs, it writes nothing.
    let ids = thousand_ids;
    assert_eq!(ids(&primary).unwrap().len(), 1000);
    let ours = "before the synchronous standbys confirmed it";
    let stop = AtomicBool::new(false);
    let (old, signalled) = thread::scope(|scope| {
        let loads: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut got = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        // Waiting for a lease ends in an error (55000) after 10 s: tried again.
                        got.extend(ids(&primary).unwrap_or_default());
                    }
                    got
                })
            })
            .collect();
        assert!(common::eventually(30, || primary
            .sql_i64("SELECT ids_issued FROM snowflake_stats()")
            > 20_000));
        // The standby is unreachable from here on: every lease commit waits on SyncRep.
        signal("-STOP");
        // Each time the worker waits there, it is interrupted, until it says it waits for the
        // standby itself (the fix) or five waits were interrupted (the old grant: each one let
        // a lease through).
        let mut signalled = 0;
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while signalled < 5 && !primary.log().contains(ours) {
            assert!(
                std::time::Instant::now() < until,
                "the worker never waited on SyncRep"
            );
            let hit = primary.sql(&format!(
                "SELECT count(pg_{how}_backend(pid)) FROM pg_stat_activity \
                  WHERE backend_type = 'snowflake lease' AND wait_event = 'SyncRep'"
            ));
            if hit == "1" {
                signalled += 1;
                // That wait has ended before the next look.
                assert!(common::eventually(30, || primary.sql(
                    "SELECT count(*) FROM pg_stat_activity \
                      WHERE backend_type = 'snowflake lease' AND wait_event = 'SyncRep'"
                ) == "0"));
            }
            thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        let old: Vec<i64> = loads.into_iter().flat_map(|h| h.join().unwrap()).collect();
        (old, signalled)
    });
    assert!(signalled >= 1);
    assert!(
        primary
            .log()
            .contains("canceling wait for synchronous replication due to user request")
            || primary
                .log()
                .contains("canceling the wait for synchronous replication and terminating"),
        "no wait for synchronous replication was interrupted:\n{}",
        primary.log()
    );
    // The old primary fails; the standby never received what the walsender held.
    standby.stop("fast");
    signal("-CONT");
    primary.stop("immediate");
    standby.start();
    standby.promote();
    let (new, equal) = issue_past(&standby, &old);
    eprintln!(
        "pg_{how}_backend interrupted {signalled} waits; the old primary issued {} IDs, the promoted standby {}, equal: {equal}",
        old.len(),
        new.len()
    );
    assert_eq!(
        equal,
        0,
        "{equal} of the promoted standby's {} IDs were issued by the old primary ({} IDs, {signalled} waits interrupted by pg_{how}_backend)",
        new.len(),
        old.len()
    );
}

#[test]
fn failover_after_a_cancel_of_the_workers_synchronous_wait_repeats_nothing() {
    failover_after_the_workers_synchronous_wait_is_interrupted("cancel");
}

#[test]
fn failover_after_a_terminate_of_the_workers_synchronous_wait_repeats_nothing() {
    failover_after_the_workers_synchronous_wait_is_interrupted("terminate");
}

/// Issue 59, item 2: `synchronous_standby_names` switched from s1 to s2 while s2 lagged (its
/// walsender stopped). 1.7.0 went on issuing under the leases only s1 had confirmed, and a
/// failover to s2 repeated them. Now the lease worker sees the switch and takes the lease back:
/// while s2 lags, no ID is issued; once s2 has caught up, IDs flow again, and a failover to s2
/// (its clock 8 s behind, so that it issues in the old primary's milliseconds) repeats none of
/// the old primary's IDs, before the switch or after. What the docs say: once an ID was issued
/// after the switch, the new standby has every lease the primary used.
#[test]
fn failover_to_a_standby_made_synchronous_while_it_lagged_repeats_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let mut primary = Cluster::new(
        "switch-primary",
        "snowflake.datacenter_id = 1\nsnowflake.worker_id = 2\nwal_level = replica",
    );
    primary.start();
    primary.sql("CREATE EXTENSION snowflake");
    // A call waiting for a lease gives up after 2 s (the worker ignores this setting).
    primary.sql("ALTER DATABASE postgres SET statement_timeout = '2s'");
    let mut s1 = Cluster::standby_of(&primary, "switch-s1");
    s1.conf("cluster_name = 's1'");
    s1.start();
    let mut s2 = Cluster::standby_of(&primary, "switch-s2");
    s2.conf("cluster_name = 's2'");
    s2.fake_time(Some("-8s"));
    s2.start();
    assert!(s2.clock_offset_s() < -7.0, "s2's clock is not behind");
    primary.sql("ALTER SYSTEM SET synchronous_standby_names = 's1'");
    primary.sql("SELECT pg_reload_conf()");
    primary.wait_for(
        "SELECT string_agg(application_name || ':' || sync_state, ',' ORDER BY application_name) FROM pg_stat_replication",
        "s1:sync,s2:async",
        30,
    );
    let signal = primary.walsender("s2");
    let ids = thousand_ids;
    let issued = || primary.sql_i64("SELECT ids_issued FROM snowflake_stats()");
    let seen = "snowflake: the synchronous standbys changed";
    // Batches that started after the worker saw the switch and before s2 caught up.
    let switched = AtomicBool::new(false);
    let caught_up = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let while_lagging = Mutex::new(Vec::<i64>::new());
    let old: Vec<i64> = thread::scope(|scope| {
        let loads: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut got = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let lagging =
                            switched.load(Ordering::SeqCst) && !caught_up.load(Ordering::SeqCst);
                        let batch = ids(&primary).unwrap_or_default();
                        if lagging {
                            while_lagging.lock().unwrap().extend(&batch);
                        }
                        got.extend(batch);
                    }
                    got
                })
            })
            .collect();
        // A failed assertion below ends the loads too (the scope joins them).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        assert!(common::eventually(30, || issued() > 20_000));
        // s2 falls behind, and the primary issues on.
        signal("-STOP");
        let at_stop = issued();
        assert!(common::eventually(30, || issued() > at_stop + 20_000));
        // s1 is lost; the DBA makes s2 synchronous to restore service.
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = 's2'");
        primary.sql("SELECT pg_reload_conf()");
        assert!(
            common::eventually(30, || primary.log().contains(seen)),
            "the lease worker did not see the switch:\n{}",
            primary.log()
        );
        switched.store(true, Ordering::SeqCst);
        s1.stop("immediate");
        // Until no lease granted before could still be used: its end has passed (1.7.0 used it
        // up, about a second of IDs), or the lease was taken back.
        assert!(common::eventually(30, || primary.sql(
            "SELECT lease_until <= last_timestamp OR lease_until < now() FROM snowflake_node()"
        ) == "t"));
        let lagging_ids = while_lagging.lock().unwrap().len();
        assert_eq!(
            lagging_ids, 0,
            "{lagging_ids} IDs issued after the switch under leases s2 does not have"
        );
        // s2 catches up: IDs flow again, under leases it confirmed.
        caught_up.store(true, Ordering::SeqCst);
        signal("-CONT");
        let at_cont = issued();
        assert!(common::eventually(60, || issued() > at_cont + 20_000));
        drop(_stop);
        loads.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    primary.stop("immediate");
    s2.promote();
    let (new, equal) = issue_past(&s2, &old);
    eprintln!(
        "the old primary issued {} IDs, the promoted s2 {}, equal: {equal}",
        old.len(),
        new.len()
    );
    assert_eq!(equal, 0, "{equal} of s2's IDs were the old primary's");
}
