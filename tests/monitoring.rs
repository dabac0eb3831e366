//! Monitoring: `snowflake_health()` and the query file for prometheus-postgres-exporter, shipped
//! in the .deb, run by the real exporter (Debian's package, `scripts/deps.sh test` installs it)
//! against a real cluster, scraped over HTTP: the metrics move as IDs are issued, calls are
//! refused and the clock steps, and the health goes from ok to critical when something breaks.

mod common;
use common::{eventually, find_deb_file, pg_major, readme_recipe, run, Cluster};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const QUERY_FILE: &str = "monitoring/prometheus-postgres-exporter.yaml";

/// The monitoring role's password: the exporter reads it from a file, and never logs it.
const MONITOR_PASSWORD: &str = "xyzzy-monitor-secret";

/// The cluster listens on 127.0.0.1 too, and asks `monitor` for its password there (as Debian's
/// pg_hba.conf does over TCP): the exporter connects as the docs say, over TCP.
fn listen_with_password(c: &mut Cluster) {
    c.conf("listen_addresses = '127.0.0.1'");
    let hba = c.data.join("pg_hba.conf");
    let old = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("host all monitor 127.0.0.1/32 scram-sha-256\n{old}"),
    )
    .unwrap();
}

/// The query file as the .deb of `make package` ships it, checked against the repository's.
fn query_file_from_the_package(dir: &Path) -> PathBuf {
    let major = pg_major();
    let deb = find_deb_file(major);
    let unpacked = dir.join("deb");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked));
    let shipped = unpacked.join(format!(
        "usr/share/doc/postgresql-{major}-snowflake/examples/prometheus-postgres-exporter.yaml"
    ));
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join(QUERY_FILE);
    assert_eq!(
        std::fs::read_to_string(&shipped).unwrap_or_else(|e| panic!("{shipped:?}: {e}")),
        std::fs::read_to_string(&ours).unwrap(),
        "the package ships another query file than {QUERY_FILE}"
    );
    shipped
}

/// prometheus-postgres-exporter, started on a free port against `c` as role `monitor` (a
/// member of pg_monitor); stopped when dropped.
struct Exporter {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Exporter {
    fn start(c: &Cluster, queries: &Path) -> Exporter {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = c.dir.join("exporter.log");
        let passfile = c.dir.join("monitor.pass");
        std::fs::write(&passfile, MONITOR_PASSWORD).unwrap();
        // The command line of docs/operations.md, run as written (its own process group, so
        // that the exporter goes with the shell when dropped).
        let child = Command::new("bash")
            .arg("-c")
            .arg(readme_recipe("exporter"))
            .env("PGHOST", "127.0.0.1")
            .env("PGPORT", c.port.to_string())
            .env("DB", "postgres")
            .env("QUERIES", queries)
            .env("PASSFILE", &passfile)
            .env("LISTEN", format!("127.0.0.1:{port}"))
            .env_remove("DATA_SOURCE_NAME")
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("bash runs");
        Exporter { child, port, log }
    }

    /// One scrape of /metrics over HTTP: the samples whose name starts with `snowflake`, by
    /// name with its labels (`snowflake_health_severity{check="clock",...}` as
    /// `snowflake_health_severity{check="clock"}`, the exporter's `server` label left out).
    fn scrape(&self) -> Option<HashMap<String, f64>> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let body = text.split_once("\r\n\r\n")?.1;
        let mut samples = HashMap::new();
        for line in body.lines().filter(|l| l.starts_with("snowflake")) {
            let (name, value) = line.rsplit_once(' ')?;
            let name = match name.split_once('{') {
                Some((base, labels)) => {
                    let kept: Vec<&str> = labels
                        .trim_end_matches('}')
                        .split(',')
                        .filter(|l| l.starts_with("check="))
                        .collect();
                    if kept.is_empty() {
                        base.to_string()
                    } else {
                        format!("{base}{{{}}}", kept.join(","))
                    }
                }
                None => name.to_string(),
            };
            samples.insert(name, value.parse().ok()?);
        }
        Some(samples)
    }

    /// Scrapes until `check` holds of a scrape, for at most `secs`; the last scrape and the
    /// exporter's log in the panic otherwise.
    fn until(
        &self,
        secs: u64,
        what: &str,
        mut check: impl FnMut(&HashMap<String, f64>) -> bool,
    ) -> HashMap<String, f64> {
        let mut last = None;
        let ok = eventually(secs, || {
            last = self.scrape();
            last.as_ref().is_some_and(&mut check)
        });
        assert!(
            ok,
            "{what}: not seen within {secs} s; last scrape {last:?}\nexporter log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        last.unwrap()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // SAFETY: a signal to the process group this test started (the shell and the exporter).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn health(m: &HashMap<String, f64>, check: &str) -> f64 {
    m.get(&format!("snowflake_health_severity{{check=\"{check}\"}}"))
        .copied()
        .unwrap_or(-1.0)
}

fn get(m: &HashMap<String, f64>, name: &str) -> f64 {
    m.get(name).copied().unwrap_or(-1.0)
}

#[test]
fn the_exporter_sees_the_metrics_move_and_the_health_break() {
    let mut c = Cluster::new(
        "monitoring",
        "snowflake.worker_id = 3\nsnowflake.max_clock_drift = '2s'",
    );
    c.fake_time(None);
    listen_with_password(&mut c);
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE ROLE monitor LOGIN IN ROLE pg_monitor");
    c.sql(&format!("ALTER ROLE monitor PASSWORD '{MONITOR_PASSWORD}'"));
    c.script(&common::readme_recipe("monitor-path")).unwrap();
    let queries = query_file_from_the_package(&c.dir);
    let exporter = Exporter::start(&c, &queries);

    // A healthy server: every check ok, once the lease worker has read its database.
    let m = exporter.until(30, "overall health ok", |m| health(m, "overall") == 0.0);
    for check in [
        "pair",
        "lease_database",
        "lease_worker",
        "lease",
        "fleet",
        "clock",
        "clock_steps",
        "refusals",
        "time_left",
    ] {
        assert_eq!(health(&m, check), 0.0, "{check} in {m:?}");
    }
    let issued = get(&m, "snowflake_ids_issued");
    assert!(issued >= 0.0, "{m:?}");

    // What a fleet's rules read: a server that issues (not a standby), its drift in force.
    assert_eq!(get(&m, "snowflake_in_recovery"), 0.0, "{m:?}");
    assert_eq!(get(&m, "snowflake_max_clock_drift_ms"), 2000.0, "{m:?}");
    assert_eq!(
        get(&m, "snowflake_lease_worker_pid"),
        c.sql_i64("SELECT lease_worker_pid FROM snowflake_node()") as f64,
        "{m:?}"
    );

    // IDs issued, and the last one's time in Unix seconds (against the server's clock).
    c.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)");
    let m = exporter.until(20, "ids_issued up by 1000", |m| {
        get(m, "snowflake_ids_issued") >= issued + 1000.0
    });
    let now = c.sql_i64("SELECT extract(epoch FROM now())::bigint") as f64;
    let last = get(&m, "snowflake_last_id_time");
    assert!(
        (last - now).abs() < 30.0,
        "last ID at {last}, now {now}: {m:?}"
    );

    // The clock stepped back 60 s, beyond max_clock_drift: calls refused, a step seen, the last
    // ID ahead of the clock, and the health critical, saying why.
    c.set_fake_offset("-60s");
    assert_eq!(c.sql_err("SELECT snowflake_nextval()").sqlstate, "58000");
    let m = exporter.until(20, "a refusal and a step back", |m| {
        get(m, "snowflake_refusals") >= 1.0
            && get(m, "snowflake_clock_back_events") >= 1.0
            && get(m, "snowflake_lead_ms") > 2000.0
    });
    assert_eq!(health(&m, "clock"), 2.0, "{m:?}");
    assert_eq!(health(&m, "clock_steps"), 1.0, "{m:?}");
    assert_eq!(health(&m, "refusals"), 1.0, "{m:?}");
    assert_eq!(health(&m, "overall"), 2.0, "{m:?}");
    assert_eq!(
        c.sql("SELECT status, reason LIKE 'the clock is % ms behind the last ID%', action IS NOT NULL FROM snowflake_health() WHERE check_name = 'clock'"),
        "critical|t|t"
    );
    // The overall row names what is wrong.
    assert_eq!(
        c.sql(
            "SELECT status || ': ' || reason FROM snowflake_health() WHERE check_name = 'overall'"
        ),
        "critical: critical: clock; warning: clock_steps, refusals"
    );
    c.set_fake_offset("+0s");
    exporter.until(20, "the clock ok again", |m| health(m, "clock") == 0.0);
    c.sql("SELECT snowflake_nextval()");

    // A forward jump, seen by the lease worker (libfaketime reaches it from 16 on).
    if pg_major() >= 16 {
        c.set_fake_offset("+30s");
        exporter.until(20, "a forward jump", |m| {
            get(m, "snowflake_clock_forward_jumps") >= 1.0
                && get(m, "snowflake_largest_clock_forward_ms") >= 29_000.0
        });
    } else {
        eprintln!("SKIPPED on PostgreSQL 15 (the forward jump): libfaketime does not reach the lease worker");
    }

    // The lease worker blocked: a lock on the claims it refreshes every 5 s.
    let mut locker = c
        .psql_cmd("postgres")
        .arg("-c")
        .arg("SET application_name = 'locker'; BEGIN; LOCK TABLE _snowflake.claims; SELECT pg_sleep(120)")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    c.wait_for(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'locker' AND l.mode = 'AccessExclusiveLock' AND l.granted",
        "1",
        20,
    );
    let m = exporter.until(40, "lease_worker critical", |m| {
        health(m, "lease_worker") == 2.0
    });
    assert_eq!(health(&m, "overall"), 2.0);
    // Its refresh waits for the lock until lock_timeout (5 s), the worker exits and starts
    // again a second later: not running, then blocked, until the lock goes.
    let reason = "SELECT reason FROM snowflake_health() WHERE check_name = 'lease_worker'";
    assert!(
        eventually(40, || c.sql(reason).contains("it is blocked")),
        "{}",
        c.sql(reason)
    );
    c.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'locker'",
    );
    let _ = locker.wait();
    exporter.until(30, "lease_worker ok again", |m| {
        health(m, "lease_worker") == 0.0
    });

    // The server goes away: the exporter logs its failed connections, never the password.
    c.stop("fast");
    assert!(
        eventually(30, || {
            let _ = exporter.scrape();
            std::fs::read_to_string(&exporter.log).is_ok_and(|l| l.contains("127.0.0.1"))
        }),
        "no failed connection logged:\n{}",
        std::fs::read_to_string(&exporter.log).unwrap_or_default()
    );
    let log = std::fs::read_to_string(&exporter.log).unwrap();
    assert!(
        !log.contains(MONITOR_PASSWORD),
        "the exporter logged the password:\n{log}"
    );

    // snowflake.database naming no database: critical at once, with the fix.
    drop(exporter);
    c.conf("snowflake.database = 'nosuchdb'");
    c.start();
    let exporter = Exporter::start(&c, &queries);
    let m = exporter.until(30, "lease_database critical", |m| {
        health(m, "lease_database") == 2.0
    });
    assert_eq!(health(&m, "overall"), 2.0);
    assert_eq!(
        c.sql("SELECT action FROM snowflake_health() WHERE check_name = 'lease_database'"),
        "Create the database (CREATE DATABASE nosuchdb), or set snowflake.database to an existing database and restart."
    );
}

/// Who may call it: pg_monitor and those granted EXECUTE; it needs nothing else (no table of
/// `_snowflake`), and reveals nothing to PUBLIC.
#[test]
fn health_is_for_monitoring_roles_and_reads_nothing_else() {
    let mut c = Cluster::new("health-roles", "snowflake.worker_id = 4");
    c.start();
    c.sql(
        "CREATE EXTENSION snowflake; \
         CREATE ROLE nobody LOGIN; CREATE ROLE monitor LOGIN IN ROLE pg_monitor; CREATE ROLE checker LOGIN; \
         GRANT EXECUTE ON FUNCTION snowflake_health() TO checker",
    );
    let e = c
        .try_sql_as("nobody", "SELECT * FROM snowflake_health()")
        .unwrap_err();
    assert_eq!(e.sqlstate, "42501", "{e:?}");
    // A database owner's function named like it, in the schema "$user" finds first: the
    // monitoring role's search_path (docs/operations.md) keeps it from being called.
    c.sql(
        "CREATE SCHEMA monitor AUTHORIZATION nobody; \
         SET ROLE nobody; \
         CREATE FUNCTION monitor.snowflake_health() RETURNS TABLE (check_name text, status text) \
           LANGUAGE sql AS $$ SELECT 'overall', 'planted' $$; \
         GRANT USAGE ON SCHEMA monitor TO PUBLIC; \
         RESET ROLE",
    );
    let planted =
        "SELECT check_name || '=' || status FROM snowflake_health() WHERE check_name = 'overall'";
    assert_eq!(c.try_sql_as("monitor", planted).unwrap(), "overall=planted");
    c.script(&common::readme_recipe("monitor-path")).unwrap();
    for role in ["monitor", "checker"] {
        let q = "SELECT check_name || '=' || status FROM snowflake_health() WHERE check_name = 'overall'";
        assert!(
            eventually(30, || c.try_sql_as(role, q).as_deref() == Ok("overall=ok")),
            "{role}: {:?}",
            c.try_sql_as(role, "SELECT * FROM snowflake_health()")
        );
    }
    // Cheap: one row per check, read from shared memory; a thousand calls take well under the
    // time of one scrape interval.
    let started = std::time::Instant::now();
    c.sql("SELECT count(*) FROM generate_series(1, 1000), LATERAL snowflake_health()");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // Not preloaded: one critical check, no error.
    let mut bare = Cluster::with_preload("health-bare", "", false);
    bare.start();
    bare.sql("CREATE EXTENSION snowflake");
    assert_eq!(
        bare.sql("SELECT string_agg(check_name || '=' || status, ',') FROM snowflake_health()"),
        "overall=critical,preload=critical"
    );
}

/// A lease worker stopped (SIGSTOP, as a DBA saw it) long enough that a call gives up waiting for
/// its lease with 55000: that call is counted like every other refusal, and the health check's
/// `refusals` row warns. Counted once per call, in `snowflake_stats()` as the exporter reads it.
#[test]
fn a_call_that_times_out_waiting_for_the_lease_is_counted() {
    let mut c = Cluster::new("lease-wait-counted", "snowflake.worker_id = 5");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    c.sql("SELECT snowflake_nextval()");
    assert_eq!(c.sql("SELECT errors FROM snowflake_stats()"), "0");
    let pid: i32 = c
        .sql("SELECT lease_worker_pid FROM snowflake_node()")
        .parse()
        .unwrap();
    /// Lets the worker go on whatever the test's end.
    struct Stopped(i32);
    impl Drop for Stopped {
        fn drop(&mut self) {
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let stopped = Stopped(pid);
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Calls go on within the lease persisted ahead, then one waits its 10 s in vain.
    let mut refused = None;
    assert!(
        eventually(90, || match c.try_sql("SELECT snowflake_nextval()") {
            Ok(_) => false,
            Err(e) => {
                refused = Some(e);
                true
            }
        }),
        "no call failed while the lease worker was stopped"
    );
    let e = refused.unwrap();
    assert_eq!(e.sqlstate, "55000", "{e:?}");
    assert!(
        e.raw.contains("snowflake ID generator is not ready"),
        "{e:?}"
    );
    // A call that statement_timeout cancels while it waits is a failed call too (a DBA's play
    // found such calls uncounted: the alert on refusals never fired for them).
    let e = c
        .try_sql("SET statement_timeout = '1s'; SELECT snowflake_nextval()")
        .expect_err("a call issued while the lease worker was stopped");
    assert_eq!(e.sqlstate, "57014", "{e:?}");
    drop(stopped);
    assert_eq!(c.sql("SELECT errors FROM snowflake_stats()"), "2");
    assert_eq!(
        c.sql("SELECT status, reason LIKE '2 calls of snowflake_nextval() failed since the start, the last % ago' FROM snowflake_health() WHERE check_name = 'refusals'"),
        "warning|t"
    );
    // The worker, going on, grants the lease again: IDs resume.
    assert!(eventually(30, || c
        .try_sql("SELECT snowflake_nextval()")
        .is_ok()));
    assert_eq!(c.sql("SELECT errors FROM snowflake_stats()"), "2");
}

/// The alert rules that ship (monitoring/snowflake.rules.yml, in the .deb's examples): valid for
/// Prometheus (`promtool check rules`), and alerting as their unit tests say (`promtool test
/// rules`, Debian's `prometheus` package; scripts/deps.sh test installs it). Each alert is a
/// page or a ticket, and its summary names a check of snowflake_health() and a docs section that
/// exists.
#[test]
fn the_alert_rules_pass_promtool_and_link_to_sections_that_exist() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring");
    run(Command::new("promtool")
        .args(["check", "rules", "snowflake.rules.yml"])
        .current_dir(&dir));
    run(Command::new("promtool")
        .args(["test", "rules", "snowflake.rules.test.yml"])
        .current_dir(&dir));
    let rules = std::fs::read_to_string(dir.join("snowflake.rules.yml")).unwrap();
    let alerts: Vec<&str> = rules.split("      - alert: ").skip(1).collect();
    assert!(alerts.len() >= 4, "{rules}");
    for alert in &alerts {
        assert!(
            alert.contains("severity: page\n") || alert.contains("severity: ticket\n"),
            "{alert}"
        );
        let summary = alert
            .lines()
            .find_map(|l| l.trim().strip_prefix("summary: "))
            .unwrap_or_else(|| panic!("no summary: {alert}"));
        assert!(summary.contains("snowflake check "), "{summary}");
        assert!(summary.contains("docs/"), "{summary}");
    }
    // Every docs section linked: a heading of that file, as GitHub makes its anchor.
    let slug = |heading: &str| -> String {
        heading
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut links = 0;
    for part in rules.split("docs/").skip(1) {
        let link: String = part
            .chars()
            .take_while(|c| c.is_alphanumeric() || "-_.#".contains(*c))
            .collect();
        let (file, anchor) = link.split_once('#').unwrap_or_else(|| panic!("{link}"));
        let text = std::fs::read_to_string(root.join("docs").join(file)).unwrap();
        assert!(
            text.lines()
                .filter(|l| l.starts_with('#'))
                .any(|h| slug(h) == anchor),
            "docs/{file} has no section #{anchor}"
        );
        links += 1;
    }
    assert!(links >= 5, "{rules}");
}
