//! The runbooks of docs/operations.md that start a server from an older copy of the mark
//! (failover to a standby that had not acknowledged the last lease, point-in-time recovery, a
//! server rebuilt from a logical dump, `snowflake.database` moved), each run as written with the new server's clock 30 s
//! behind the old one's last IDs, and every ID the new server issues counted against every ID
//! the old one issued: exactly, with `GROUP BY id HAVING count(*) > 1`, none allowed. Each test
//! first checks that the runbook was needed (the new server's clock and mark are below the old
//! server's last IDs, so without it the new server would issue in the old one's milliseconds).
//! pg_upgrade's runbook is run the same way by tests/pg_upgrade.rs, and the removal runbook's
//! last step by tests/docs.rs.

mod common;
use common::{as_owner, Cluster};
use std::path::Path;

/// The old and the new server: one pair, a drift that lets the runbook's floor (30 s ahead of
/// the new server's clock) be set.
const SETTINGS: &str = "snowflake.datacenter_id = 2\nsnowflake.worker_id = 5\n\
                        snowflake.max_clock_drift = '60s'\nwal_level = replica";

/// In the schema the recipes name (docs/security.md). `ids` has no key, so that a repeated ID
/// is counted, not refused; `issue(secs, tag)` issues IDs for `secs` seconds, committing every
/// 50, as an application inserting steadily does.
const SETUP: &str = "CREATE SCHEMA snowflake; CREATE EXTENSION snowflake SCHEMA snowflake;
    CREATE TABLE ids (id bigint NOT NULL, tag text NOT NULL);
    CREATE PROCEDURE issue(secs float8, tag text) LANGUAGE plpgsql AS $$
    DECLARE stop timestamptz := clock_timestamp() + make_interval(secs => secs);
    BEGIN
      WHILE clock_timestamp() < stop LOOP
        INSERT INTO ids SELECT snowflake.snowflake_nextval(), tag FROM generate_series(1, 50);
        COMMIT;
      END LOOP;
    END $$";

/// On 15 libfaketime does not reach the lease worker (see
/// `common::worker_sees_the_clock`): these tests move the new server's clock, so they say so
/// there and stop before making any server.
fn clocks_move_whole_servers() -> bool {
    let major = common::pg_major();
    if major < 16 {
        eprintln!("on {major} libfaketime does not reach the lease worker: not run");
    }
    major >= 16
}

fn issue(c: &Cluster, secs: f64, tag: &str) {
    c.sql(&format!("CALL issue({secs}, '{tag}')"));
}

/// Every ID the old server issued, read while it runs.
fn ids_of(old: &Cluster) -> String {
    old.sql("SELECT string_agg(id::text, E'\\n') FROM ids")
}

/// The old server's IDs, into `old_ids` on the new server.
fn carry_ids(ids: &str, new: &Cluster) {
    let path = new.dir.join("old-ids.txt");
    std::fs::write(&path, format!("{ids}\n")).unwrap();
    new.sql(&format!(
        "CREATE TABLE old_ids (id bigint); COPY old_ids FROM '{}'; ANALYZE old_ids",
        path.display()
    ));
}

/// When the old server issued its last ID (Unix ms), as the new server reads `old_ids`.
fn last_old_ms(new: &Cluster) -> i64 {
    new.sql_i64(
        "SELECT (extract(epoch FROM snowflake.snowflake_timestamp(max(id))) * 1000)::bigint FROM old_ids",
    )
}

/// The new server's clock and `mark`, the mark it starts from, are both below the old server's
/// last ID: without the runbook, its IDs would run through the old server's last milliseconds.
fn assert_the_runbook_is_needed(new: &Cluster, mark: i64) {
    let last = last_old_ms(new);
    let clock = new.sql_i64("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint");
    assert!(
        mark < last && clock < last,
        "the new server's mark {mark} and clock {clock} are not both below the old server's last ID, at {last}"
    );
}

/// Issues for 6 s under `tag` and counts, exactly, the IDs that equal one of the old server's
/// or another of its own: none.
fn assert_no_repeat(new: &Cluster, tag: &str) {
    issue(new, 6.0, tag);
    let out = new.sql(&format!(
        "SELECT (SELECT count(*) FROM ids WHERE tag = '{tag}'), count(*) FROM (
           SELECT id FROM (SELECT id FROM ids WHERE tag = '{tag}' UNION ALL SELECT id FROM old_ids) u
            GROUP BY id HAVING count(*) > 1) d"
    ));
    let (n, repeated) = out.split_once('|').unwrap();
    assert!(n.parse::<i64>().unwrap() > 1000, "only {n} IDs issued");
    assert_eq!(repeated, "0", "{repeated} of {n} new IDs repeat one");
}

fn old_mark(c: &Cluster) -> i64 {
    c.sql_i64("SELECT last_value FROM _snowflake.lease_ms")
}

/// With quorum replication (`ANY 1 (s1, s2)`) the lease's commit waits for one standby only.
/// As docs/operations.md says: the standby with the most WAL (received or replayed) needs
/// nothing (it acknowledged the last lease); the other one, promoted instead, needs the
/// raise-mark recipe before it serves writes, and then repeats nothing either.
#[test]
fn failover_to_either_quorum_standby_repeats_nothing_as_the_runbook_says() {
    if !clocks_move_whole_servers() {
        return;
    }
    let mut primary = Cluster::new("quorum-primary", SETTINGS);
    primary.start();
    primary.sql(SETUP);
    let mut standbys = Vec::new();
    for name in ["s1", "s2"] {
        let mut s = Cluster::standby_of(&primary, &format!("quorum-{name}"));
        // The walreceiver's application_name, which synchronous_standby_names lists.
        s.conf(&format!("cluster_name = '{name}'"));
        s.fake_time(Some("-30s"));
        s.start();
        standbys.push(s);
    }
    let (mut s1, mut s2) = (standbys.remove(0), standbys.remove(0));
    primary.sql("ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (s1, s2)'");
    primary.sql("SELECT pg_reload_conf()");
    primary.wait_for(
        "SELECT string_agg(application_name || ':' || sync_state, ',' ORDER BY application_name) FROM pg_stat_replication",
        "s1:quorum,s2:quorum",
        30,
    );
    issue(&primary, 1.0, "before");
    let lsn = primary.sql("SELECT pg_current_wal_flush_lsn()");
    s2.wait_for(
        &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'"),
        "t",
        30,
    );
    // s2 falls behind (stopped here; a slow network does the same): the quorum is s1 alone.
    s2.stop("fast");
    issue(&primary, 3.0, "old");
    let mark = old_mark(&primary);
    let ids = ids_of(&primary);
    primary.stop("immediate");
    s2.start();

    // Both standbys restarted since (a restarted standby reports as received only the start of
    // the segment it replays from). Promote the one with the most WAL: s1.
    s1.stop("fast");
    s1.start();
    let most_wal = "SELECT GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())";
    let (lsn1, lsn2) = (s1.sql(most_wal), s2.sql(most_wal));
    assert_eq!(
        s1.sql(&format!("SELECT '{lsn1}'::pg_lsn > '{lsn2}'::pg_lsn")),
        "t",
        "s1 ({lsn1}) is not ahead of s2 ({lsn2})"
    );
    // The other standby, s2, promoted instead (first, while its clock is still behind the old
    // IDs): the recipe first.
    s2.promote();
    assert!(common::worker_sees_the_clock(&s2));
    carry_ids(&ids, &s2);
    assert_the_runbook_is_needed(&s2, old_mark(&s2));
    common::run_sql_recipe(&s2, "raise-mark", mark);
    assert_no_repeat(&s2, "s2");
    s2.stop("fast");

    // s1 needs nothing: it has the lease the last IDs were issued under.
    s1.promote();
    assert!(common::worker_sees_the_clock(&s1));
    carry_ids(&ids, &s1);
    assert!(old_mark(&s1) >= last_old_ms(&s1));
    assert_no_repeat(&s1, "s1");
}

/// Point-in-time recovery to a restore point before the old server's last IDs, with the clock
/// behind: the raise-mark recipe with the old server's mark, then no ID repeats.
#[test]
fn point_in_time_recovery_repeats_nothing_after_the_runbook() {
    if !clocks_move_whole_servers() {
        return;
    }
    let mut old = Cluster::new(
        "pitr-old",
        &format!("{SETTINGS}\narchive_mode = on\narchive_command = 'cp %p ../archive/%f'"),
    );
    let archive = old.dir.join("archive");
    assert!(as_owner(Path::new("/bin/mkdir"))
        .arg(&archive)
        .status()
        .unwrap()
        .success());
    old.start();
    old.sql(SETUP);
    issue(&old, 1.0, "before");
    // The base backup (pg_basebackup), made into a recovery to the restore point below.
    let mut new = Cluster::standby_of(&old, "pitr-new");
    // IDs up to the restore point: the mark there covers them, and lies in the old server's
    // last seconds that follow.
    issue(&old, 1.0, "before");
    old.sql("SELECT pg_create_restore_point('before the mistake')");
    issue(&old, 3.0, "old");
    let mark = old_mark(&old);
    let ids = ids_of(&old);
    let segment = old.sql("SELECT pg_walfile_name(pg_switch_wal())");
    old.wait_for(
        &format!("SELECT last_archived_wal >= '{segment}' FROM pg_stat_archiver"),
        "t",
        30,
    );
    old.stop("fast");

    std::fs::remove_file(new.data.join("standby.signal")).unwrap();
    assert!(as_owner(Path::new("/bin/touch"))
        .arg(new.data.join("recovery.signal"))
        .status()
        .unwrap()
        .success());
    new.conf(&format!(
        "restore_command = 'cp {}/%f %p'\n\
         recovery_target_name = 'before the mistake'\nrecovery_target_action = 'promote'",
        archive.display()
    ));
    new.fake_time(Some("-30s"));
    new.start();
    new.wait_for("SELECT pg_is_in_recovery()", "f", 60);
    assert!(common::worker_sees_the_clock(&new));
    carry_ids(&ids, &new);
    assert_eq!(
        new.sql_i64("SELECT count(*) FROM ids WHERE tag = 'old'"),
        0,
        "the recovery went past its target"
    );
    assert_the_runbook_is_needed(&new, old_mark(&new));
    common::run_sql_recipe(&new, "raise-mark", mark);
    assert_no_repeat(&new, "new");
}

/// The same server rebuilt from a logical dump (same pair), as the runbook says: the data
/// without `_snowflake`, then the old server's mark raised, with the new server's clock behind.
#[test]
fn a_server_rebuilt_from_a_dump_repeats_nothing_after_the_runbook() {
    if !clocks_move_whole_servers() {
        return;
    }
    let mut old = Cluster::new("rebuild-old", SETTINGS);
    old.start();
    old.sql(SETUP);
    issue(&old, 3.0, "old");
    let mark = old_mark(&old);
    let dump = old.dir.join("dump.sql");
    common::run(
        old.tool("pg_dump")
            .args(["--exclude-schema=_snowflake", "-f"])
            .arg(&dump)
            .arg("postgres"),
    );
    old.stop("fast");

    let mut new = Cluster::new("rebuild-new", SETTINGS);
    new.fake_time(None);
    new.set_fake_offset("-30s");
    new.start();
    assert!(common::worker_sees_the_clock(&new));
    new.script(&std::fs::read_to_string(&dump).unwrap())
        .unwrap_or_else(|e| panic!("the restore failed: {}", e.raw));
    new.sql("CREATE TABLE old_ids AS SELECT id FROM ids");
    // A new server has no mark: what it repeats depends on its clock alone. Set it to just
    // before the old server's last seconds, so that without the runbook it would issue in them.
    let behind = new.sql_i64(
        "SELECT floor(extract(epoch FROM snowflake.snowflake_timestamp(min(id)) - clock_timestamp()))::bigint - 1 FROM old_ids",
    );
    new.set_fake_offset(&format!("{}s", behind - 30));
    assert_the_runbook_is_needed(&new, old_mark(&new));
    common::run_sql_recipe(&new, "raise-mark", mark);
    assert_no_repeat(&new, "new");
}

/// Moving `snowflake.database` as the runbook says, after the server left a pair: the copy of
/// `_snowflake` keeps the floor of the pair it left (`left_pairs`), and the old database's final
/// mark raised after the restart, with the clock 30 s behind, repeats nothing (1.5.0's runbook
/// carried the mark only: the pair's next holder repeated the server's IDs).
#[test]
fn moving_the_lease_database_keeps_every_floor() {
    if !clocks_move_whole_servers() {
        return;
    }
    let mut c = Cluster::new("move-db", SETTINGS);
    c.fake_time(None);
    c.start();
    c.sql(SETUP);
    issue(&c, 1.0, "on 5");
    let last_on_5 = c.sql_i64("SELECT max(id) FROM ids");
    // The server moves from (2, 5) to (2, 6): its claim keeps its last ID on (2, 5).
    c.conf("snowflake.worker_id = 6");
    c.stop("fast");
    c.start();
    c.wait_for("SELECT snowflake.snowflake_nextval() > 0", "t", 30);
    c.sql("CREATE DATABASE sfdb");
    common::run_recipes(
        &["move-database"],
        &[
            ("PGHOST", c.dir.display().to_string()),
            ("PGPORT", c.port.to_string()),
            ("PGUSER", "postgres".to_string()),
            ("NEW_DB", "sfdb".to_string()),
        ],
    );
    // IDs go on until the restart, past the copy's mark.
    issue(&c, 2.0, "old");
    let ids = ids_of(&c);
    // (On 16 and later libfaketime reaches the lease worker too; `worker_sees_the_clock` reads
    // the claims of the `postgres` database, which this server's worker no longer writes.)
    c.set_fake_offset("-30s");
    c.stop("fast");
    c.start();
    let me = c.sql("SELECT system_identifier FROM pg_control_system()");
    let left = c
        .try_sql_in(
            "sfdb",
            &format!(
                "SELECT max(x) FROM _snowflake.claims, unnest(left_pairs) x WHERE system_identifier = {me}"
            ),
        )
        .unwrap();
    assert!(
        left.parse::<i64>().is_ok_and(|x| x >= last_on_5),
        "the floor of the pair it left is lost: {left:?}, last ID there {last_on_5}"
    );
    carry_ids(&ids, &c);
    // The old database's final mark; the server starts from the copy's.
    let mark = old_mark(&c);
    let copied = c
        .try_sql_in("sfdb", "SELECT last_value FROM _snowflake.lease_ms")
        .unwrap();
    assert_the_runbook_is_needed(&c, copied.parse().unwrap());
    common::run_sql_recipe(&c, "raise-mark", mark);
    assert_no_repeat(&c, "new");
}
