//! One disclosure rule for the status functions (issue 58, docs/security.md "Status queries"):
//! any role sees what decoding IDs needs; what names this server and its surroundings (the
//! system identifier, a claim conflict's other server, the lease database's owner and trust,
//! `snowflake_health()`, `snowflake.fleet_claim`) only a role with the privileges of
//! `pg_monitor`, or a superuser. The columns stay, NULL for the others.

mod common;
use common::{eventually, Cluster};

/// What each role sees of `snowflake_node()`: the public columns, then the restricted ones.
const NODE: &str = "SELECT datacenter_id, worker_id, epoch IS NOT NULL, max_clock_drift_ms, \
     last_timestamp IS NOT NULL, lease_until IS NOT NULL, pair_set, pair_source, \
     '/', system_identifier, claim_conflict_with, claim_conflict_seen, \
     lease_database_owner, lease_database_trusted FROM snowflake_node()";

#[test]
fn a_role_without_pg_monitor_sees_the_pair_and_not_the_server() {
    let mut c = Cluster::new(
        "disclosure",
        "snowflake.datacenter_id = 1\nsnowflake.worker_id = 2\nsnowflake.max_clock_drift = '10s'",
    );
    c.start();
    c.sql(
        "CREATE EXTENSION snowflake; \
         CREATE ROLE eve LOGIN; \
         CREATE ROLE monitor LOGIN IN ROLE pg_monitor; \
         CREATE ROLE lazy LOGIN NOINHERIT IN ROLE pg_monitor; \
         SELECT snowflake_nextval()",
    );
    // The lease worker has looked at its database once its owner is known.
    assert!(eventually(30, || c.sql(
        "SELECT lease_database_owner IS NOT NULL FROM snowflake_node()"
    ) == "t"));
    let sysid = c.sql("SELECT system_identifier FROM pg_control_system()");
    let public = "1|2|t|10000|t|t|t|config|/|";
    let full = format!("{public}{sysid}|||postgres|t");
    let hidden = format!("{public}||||");
    let as_role = |role: &str, sql: &str| {
        c.try_sql_as(role, sql)
            .unwrap_or_else(|e| panic!("{role}: {sql}\n{}", e.raw))
    };

    assert_eq!(c.sql(NODE), full, "a superuser");
    assert_eq!(as_role("monitor", NODE), full, "a member of pg_monitor");
    assert_eq!(as_role("eve", NODE), hidden, "a role with CONNECT only");
    // A member that does not inherit pg_monitor's privileges has them after SET ROLE only.
    assert_eq!(as_role("lazy", NODE), hidden, "a NOINHERIT member");
    assert_eq!(
        as_role("lazy", &format!("SET ROLE pg_monitor; {NODE}")),
        full,
        "a NOINHERIT member after SET ROLE"
    );

    // eve still decodes and dates IDs, and reads the counters.
    assert_eq!(
        as_role(
            "eve",
            "SELECT snowflake_worker_id(snowflake_nextval()), ids_issued > 0 FROM snowflake_stats()"
        ),
        "2|t"
    );
    // What is for pg_monitor as a whole: health, the horizon (pg_read_all_stats, which
    // pg_monitor has), and the claim setting, which holds the system identifier.
    for sql in [
        "SELECT count(*) FROM snowflake_health()",
        "SELECT snowflake_horizon()",
        "SHOW snowflake.fleet_claim",
    ] {
        let e = c
            .try_sql_as("eve", sql)
            .expect_err(&format!("eve: {sql} is refused"));
        assert_eq!(e.sqlstate, "42501", "eve: {sql}: {}", e.raw);
        as_role("monitor", sql);
    }
    assert_eq!(
        as_role(
            "eve",
            "SELECT count(*) FROM pg_settings WHERE name = 'snowflake.fleet_claim'"
        ),
        "0"
    );
    assert!(
        eventually(30, || as_role("monitor", "SHOW snowflake.fleet_claim")
            .contains(&sysid)),
        "the claim names this server: {}",
        as_role("monitor", "SHOW snowflake.fleet_claim")
    );

    // A refused call names the server that claims the pair too, and the UPDATE that retires
    // it, to those who may see system identifiers only (a fresh read of issue 58 found eve
    // reading it there).
    // (system_identifier, node_token, datacenter_id, worker_id, last_seen): this server's pair.
    c.sql("INSERT INTO _snowflake.claims VALUES (12345, 1, 1, 2, now())");
    let refusal = |role: &str| c.try_sql_as(role, "SELECT snowflake_nextval()").err();
    assert!(
        eventually(10, || refusal("eve").is_some()),
        "the claim was not seen"
    );
    let e = refusal("eve").unwrap();
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(!e.raw.contains("12345"), "eve: {}", e.raw);
    assert!(e.raw.contains("snowflake_node() names"), "eve: {}", e.raw);
    for role in ["postgres", "monitor"] {
        let e = refusal(role).expect("refused");
        assert!(
            e.raw.contains("system_identifier = 12345"),
            "{role}: {}",
            e.raw
        );
    }
}
