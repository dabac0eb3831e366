//! pg_upgrade to the major under test from 15 (the oldest supported major, and Debian 12's) and
//! from 18 (the newest before 19), each where it is older than the major under test
//! (never from the same major: that is no upgrade), with the README's recipe run as
//! written: the keys stay as they were, and the persisted high-water mark travels with the data,
//! so the upgraded server issues IDs above the old maximum even when its clock is behind.

mod common;
use common::{as_owner, bindir, pg_config_of, pg_major, readme_script, Cluster};

#[test]
fn pg_upgrade_from_15_keeps_the_keys_and_carries_the_high_water_mark() {
    upgrade_from(15, false);
}

#[test]
fn pg_upgrade_from_18_keeps_the_keys_and_carries_the_high_water_mark() {
    upgrade_from(18, false);
}

/// The same recipe between clusters laid out as Debian's (`Cluster::debian_style`): the old one
/// made by `pg_createcluster` where 15 is Debian's own server (its settings in
/// /etc/postgresql/15/NAME/conf.d/), the new one the same layout by initdb (no Debian package of
/// a newer major here, so no `pg_upgradecluster`).
#[test]
fn pg_upgrade_from_15_with_debians_layout() {
    upgrade_from(15, true);
}

/// The pg_config of the old major's server: `make test-major` lists those of the majors it
/// upgrades from (the ones older than the major under test) in
/// SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS. None for the major under test or a newer one: pg_upgrade
/// cannot go down, and within one major it upgrades nothing.
fn old_pg_config(old_major: u32) -> Option<String> {
    if old_major >= pg_major() {
        return None;
    }
    let listed = std::env::var("SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS").unwrap_or_else(|_| {
        panic!("SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS names no server (run it with make test-major)")
    });
    let found = listed
        .split_whitespace()
        .find(|p| common::major_of(&pg_config_of(p, "--version")) == old_major);
    Some(
        found
            .unwrap_or_else(|| {
                panic!("no {old_major} in SNOWFLAKE_UPGRADE_FROM_PG_CONFIGS={listed}")
            })
            .to_string(),
    )
}

fn upgrade_from(old_major: u32, debian: bool) {
    let Some(old_pg_config) = old_pg_config(old_major) else {
        eprintln!(
            "pg_upgrade from {old_major} does not apply to {}: it only goes to a newer major",
            pg_major()
        );
        return;
    };
    let old_bin = std::path::PathBuf::from(pg_config_of(&old_pg_config, "--bindir"));
    let settings =
        "snowflake.datacenter_id = 3\nsnowflake.worker_id = 7\nsnowflake.max_clock_drift = '60s'";
    let layout = if debian { "debian-" } else { "" };
    let old_name = format!("upgrade-old-{layout}{old_major}");
    let mut old = if debian {
        Cluster::debian_style(&old_bin, &old_name, settings, true)
    } else {
        Cluster::of(&old_bin, &old_name, settings, true)
    };
    old.start();
    old.sql(
        "CREATE EXTENSION snowflake;
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), payload text);
         INSERT INTO t (payload) SELECT 'old' FROM generate_series(1, 100000);",
    );
    let fingerprint = "SELECT count(*), max(id), md5(string_agg(id::text, ',' ORDER BY id)) FROM t";
    let before = old.sql(fingerprint);
    let old_max = old.sql_i64("SELECT max(id) FROM t");
    let old_version = old.sql("SELECT version()");
    let new_major = pg_major();
    if common::major_of(&pg_config_of(&old_pg_config, "--version")) != new_major {
        strip_back_branch_attver(&old);
    }
    old.stop("fast");

    // The new cluster, made as the old one was (see Cluster::of), and stopped.
    let new_name = format!("upgrade-new-{layout}{old_major}");
    let mut new = if debian {
        Cluster::debian_style(&bindir(), &new_name, "", false)
    } else {
        Cluster::of(&bindir(), &new_name, "", false)
    };
    let out = as_owner(std::path::Path::new("/bin/bash"))
        .arg("-c")
        .arg(readme_script(&["pg_upgrade"]))
        .current_dir(&new.dir)
        .env("OLD_BIN", &old_bin)
        .env("NEW_BIN", &new.bin)
        .env("OLD_CONF", &old.conf_dir)
        .env("NEW_CONF", &new.conf_dir)
        // pg_upgrade's own variables for the ports it starts the two servers on.
        .env("PGPORTOLD", old.port.to_string())
        .env("PGPORTNEW", new.port.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the README's pg_upgrade recipe failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The upgraded server, with its clock 10 s behind the old one's.
    new.fake_time(Some("-10s"));
    new.start();
    assert!(
        new.clock_offset_s() < -9.0,
        "the new server's clock is not behind"
    );
    // Where libfaketime cannot reach the lease worker (15), the upgrade is still checked,
    // with a clock that is not behind.
    if !common::worker_sees_the_clock(&new) {
        new.stop("fast");
        new.env.clear();
        new.start();
    }
    // The old cluster's claim, under its system identifier, holds IDs back until it is retired
    // (the worker has looked at the claims by then: the refusal names it).
    assert!(
        common::eventually(15, || new.try_sql("SELECT snowflake_nextval()").is_err_and(
            |e| e.sqlstate == "55000" && e.message.contains("also used by another server")
        )),
        "the old cluster's claim did not hold IDs back: {:?}",
        new.try_sql("SELECT snowflake_nextval()")
    );
    // It is retired as the README says, and the very next call issues (1.6.0 refused for up to
    // 5 s more, until the worker's next read of the claims).
    let out = as_owner(std::path::Path::new("/bin/bash"))
        .arg("-c")
        .arg(readme_script(&["pg_upgrade-after"]))
        .env("OLD_BIN", &old_bin)
        .env("NEW_BIN", &new.bin)
        .env("OLD_DATA", &old.data)
        .env("PGHOST", &new.dir)
        .env("PGPORT", new.port.to_string())
        .env("PGDATABASE", "postgres")
        .env("PGUSER", "postgres")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the README's pg_upgrade-after recipe failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let retired = std::time::Instant::now();
    let first = new.try_sql("SELECT snowflake_nextval() > 0");
    let took = retired.elapsed();
    assert_eq!(
        first.as_ref().map(String::as_str),
        Ok("t"),
        "the call right after the retire was refused"
    );
    assert!(
        took < std::time::Duration::from_secs(1),
        "the first ID after the retire took {took:?}"
    );
    assert_eq!(
        new.sql("SELECT count(*) FILTER (WHERE retired), count(*) FILTER (WHERE system_identifier = (SELECT system_identifier FROM pg_control_system())) FROM _snowflake.claims"),
        "1|1"
    );
    assert_eq!(
        new.sql_i64("SELECT current_setting('server_version_num')::int / 10000"),
        new_major as i64,
        "upgraded from {old_version}"
    );
    assert_eq!(
        new.sql(fingerprint),
        before,
        "the keys changed in the upgrade"
    );
    assert_eq!(
        new.sql("SELECT datacenter_id, worker_id FROM snowflake_node()"),
        "3|7",
        "the recipe carries the node's identity over"
    );
    new.sql("INSERT INTO t (payload) SELECT 'new' FROM generate_series(1, 1000)");
    let below = new.sql_i64(&format!(
        "SELECT count(*) FROM t WHERE payload = 'new' AND id <= {old_max}"
    ));
    assert_eq!(
        below, 0,
        "{below} new IDs are not above the old maximum {old_max}"
    );
    assert_eq!(
        new.sql("SELECT count(*), count(DISTINCT id) FROM t"),
        "101000|101000"
    );
}

/// Debian's 15.20 (a back-branch release of late 2026) records a version in every new column's
/// attoptions under the reserved key `pg_attver`. Only pg_dump releases of the same date or later
/// know that key; the newest 16, 17 and 18 that can be installed here (16.15, 17.11, 18.6 from
/// PyPI) are older, dump it as an ordinary option and then refuse it on restore ("unrecognized
/// parameter"), for any table, with or without snowflake. A column created before that minor
/// release has no such key, so removing it returns the catalog to a state a real 15 cluster is
/// in, and pg_upgrade to these builds works. With the current minor of the new major it
/// is not needed.
fn strip_back_branch_attver(c: &Cluster) {
    c.sql(
        "SET allow_system_table_mods = on;
         UPDATE pg_catalog.pg_attribute
            SET attoptions = (SELECT array_agg(o) FROM unnest(attoptions) o WHERE o NOT LIKE 'pg_attver=%')
          WHERE attoptions::text LIKE '%pg_attver=%'",
    );
}
