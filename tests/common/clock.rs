//! Waiting for a condition, and what the lease worker's clock says (libfaketime moves a server's
//! clock; the clock tests check that it reached the worker).

use super::{pg_major, Cluster};

/// Polls `check` every 200 ms until it holds, for at most `secs` seconds; false if it never did.
pub fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// How far the lease worker's clock is behind this server's backends' (seconds; about 0 when
/// both see one clock), measured at the worker's next claim refresh: its `last_seen` is the
/// worker's `now()`, read by a backend at once.
pub fn worker_clock_lag_s(c: &Cluster) -> f64 {
    let q = "SELECT last_seen::text, extract(epoch FROM clock_timestamp() - last_seen) FROM _snowflake.claims \
             WHERE system_identifier = (SELECT system_identifier FROM pg_control_system())";
    let first = c.try_sql(q).unwrap_or_default();
    let mut lag = None;
    let refreshed = {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Ok(row) = c.try_sql(q) {
                if !row.is_empty() && row.split('|').next() != first.split('|').next() {
                    lag = row.split('|').nth(1).and_then(|v| v.parse::<f64>().ok());
                    break true;
                }
            }
            if std::time::Instant::now() > until {
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    assert!(
        refreshed,
        "the lease worker did not refresh its claim within 20 s"
    );
    lag.expect("a lag")
}

/// Whether the lease worker sees the clock that libfaketime gives this server's backends. On
/// PostgreSQL 16 and later it must (the test fails otherwise); on 15 libfaketime does not
/// reach the processes the postmaster forks from its signal handlers, the lease worker among
/// them, so a clock test there would move only half a server: it says so and is skipped.
pub fn worker_sees_the_clock(c: &Cluster) -> bool {
    let lag = worker_clock_lag_s(c);
    if lag.abs() < 1.5 {
        return true;
    }
    let major = pg_major();
    assert!(
        major < 16,
        "on PostgreSQL {major} the lease worker's clock is {lag:.1} s away from the backends'"
    );
    eprintln!(
        "SKIPPED on PostgreSQL {major}: libfaketime does not reach the lease worker there (its clock is {lag:.1} s away from the backends'), so this clock test would move half a server"
    );
    false
}
