//! snowflake on Citus 14.0.1 (PostgreSQL 16, 17 and 18), built from its pinned source
//! by scripts/citus.sh (once per major) and run as users run it: a coordinator and two workers,
//! each preloading `citus,snowflake` with its own pair, set up with the README's recipe.
//!
//! Every node that receives an INSERT evaluates the row's `DEFAULT snowflake_nextval()` itself
//! before Citus routes the row to a shard, so an ID's worker ID names the node that received the
//! row, whichever node stores it. On 15 and 19 each test says why it does not run.

mod common;
use common::{eventually, pg_major, run_recipes, Cluster};
use std::process::Command;
use std::thread;
use std::time::Duration;

/// Builds Citus into the server under test (a no-op once it is there). On a major that Citus 14
/// does not support, the test fails with the reason: the Makefile's `CANNOT_NN` excludes this
/// file there, and nextest counts its tests as skipped.
fn build_citus() {
    let out = Command::new("scripts/citus.sh")
        .arg(pg_major().to_string())
        .output()
        .unwrap();
    assert!(
        out.status.code() != Some(3),
        "Citus 14.0.1 supports PostgreSQL 16, 17 and 18 only, not {} (the last Citus for 15 was 13.x; none supports 19 yet): the Makefile's CANNOT_{} leaves tests/citus.rs out there",
        pg_major(),
        pg_major()
    );
    assert!(
        out.status.success(),
        "scripts/citus.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A node's postgresql.conf: citus first in the preload list, then snowflake, whose Citus worker
/// runs in the database of the cluster; logical WAL for Citus's shard moves.
const NODE_CONF: &str = "shared_preload_libraries = 'citus,snowflake'
wal_level = logical
max_connections = 100
max_worker_processes = 32
max_replication_slots = 16
max_wal_senders = 16
citus.shard_count = 4
snowflake.claim_expiry = '15s'
snowflake.citus_database = 'postgres'";

/// A Citus node configured with `NODE_CONF` and `extra`, started; with a clock that the test can
/// move (libfaketime) when `faketime`.
fn citus_node(name: &str, extra: &str, faketime: bool) -> Cluster {
    let mut c = Cluster::new(name, &format!("{NODE_CONF}\n{extra}"));
    // Nodes reach each other (and the coordinator itself) through their Unix sockets.
    let dir = c.dir.display().to_string();
    c.conf(&format!("citus.local_hostname = '{dir}'"));
    if faketime {
        c.fake_time(None);
    }
    c.start();
    c
}

/// A Citus node with datacenter 1 and worker `worker`: the coordinator is 0, workers 1, 2, 3.
fn node(name: &str, worker: u32, faketime: bool) -> Cluster {
    citus_node(
        name,
        &format!("snowflake.datacenter_id = 1\nsnowflake.worker_id = {worker}"),
        faketime,
    )
}

/// A Citus node whose pair comes from its Citus group (`pair_source`): nothing else set.
fn derived_node(name: &str, source: &str, extra: &str) -> Cluster {
    derived_node_with_clock(name, source, extra, false)
}

/// `derived_node`, with a clock that the test can move (libfaketime) when `faketime`.
fn derived_node_with_clock(name: &str, source: &str, extra: &str, faketime: bool) -> Cluster {
    citus_node(
        name,
        &format!("snowflake.pair_source = '{source}'\n{extra}"),
        faketime,
    )
}

/// The recipe that makes `coordinator` and `workers` one cluster.
fn set_up(coordinator: &Cluster, workers: &[&Cluster]) {
    run_recipes(
        &["citus-setup"],
        &[
            ("PGUSER", "postgres".into()),
            ("DB", "postgres".into()),
            ("COORDINATOR", host_port(coordinator)),
            (
                "WORKERS",
                workers
                    .iter()
                    .map(|w| host_port(w))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        ],
    );
    // The recipe puts the extension in schema snowflake; the tests call its functions unqualified.
    for c in std::iter::once(coordinator).chain(workers.iter().copied()) {
        c.sql(SEARCH_PATH);
    }
}

/// What the tests' sessions in the Citus database search: the extension is in `snowflake`. Set
/// on each node by itself (Citus refuses a propagated ALTER DATABASE on a worker).
const SEARCH_PATH: &str = "SET citus.enable_ddl_propagation = off; \
    ALTER DATABASE postgres SET search_path = \"$user\", public, snowflake";

/// The recipe that adds `new` to the cluster of `coordinator`.
fn add_node(coordinator: &Cluster, new: &Cluster) {
    run_recipes(
        &["citus-add-node"],
        &[
            ("PGUSER", "postgres".into()),
            ("DB", "postgres".into()),
            ("COORDINATOR", host_port(coordinator)),
            ("NEW", host_port(new)),
        ],
    );
    new.sql(SEARCH_PATH);
}

/// The error of `snowflake_nextval()` on `c`, if it refuses: (SQLSTATE, message).
fn refusal(c: &Cluster) -> Option<(String, String)> {
    c.try_sql("SELECT snowflake_nextval()")
        .err()
        .map(|e| (e.sqlstate, e.message))
}

/// Restarts `c` with a hand-set pair (`ALTER SYSTEM`, over its `pair_source`), or with its
/// configuration's again (`None`).
fn restart_with_pair(c: &mut Cluster, pair: Option<(u32, u32)>) {
    match pair {
        // One statement at a time: ALTER SYSTEM runs in no transaction block.
        Some((dc, w)) => {
            c.sql("ALTER SYSTEM SET snowflake.pair_source = 'config'");
            c.sql(&format!("ALTER SYSTEM SET snowflake.datacenter_id = {dc}"));
            c.sql(&format!("ALTER SYSTEM SET snowflake.worker_id = {w}"));
        }
        None => {
            c.sql("ALTER SYSTEM RESET ALL");
        }
    };
    c.stop("fast");
    c.start();
}

/// Whether `c` refuses because another server claims its pair.
fn duplicate(c: &Cluster) -> bool {
    refusal(c)
        .is_some_and(|(state, m)| state == "55000" && m.contains("also used by another server"))
}

fn host_port(c: &Cluster) -> String {
    format!("{}:{}", c.dir.display(), c.port)
}

/// A coordinator and two workers, running, made into one cluster by the README's recipe.
struct Citus {
    coordinator: Cluster,
    workers: Vec<Cluster>,
}

impl Citus {
    fn new(name: &str, faketime_workers: bool) -> Citus {
        let coordinator = node(&format!("{name}-c"), 0, false);
        let workers: Vec<Cluster> = (1..=2)
            .map(|w| node(&format!("{name}-w{w}"), w, faketime_workers))
            .collect();
        run_recipes(
            &["citus-setup"],
            &[
                ("PGUSER", "postgres".into()),
                ("DB", "postgres".into()),
                ("COORDINATOR", host_port(&coordinator)),
                (
                    "WORKERS",
                    workers.iter().map(host_port).collect::<Vec<_>>().join(" "),
                ),
            ],
        );
        let c = Citus {
            coordinator,
            workers,
        };
        // CREATE EXTENSION on the coordinator made it on every worker, in schema snowflake.
        for n in c.nodes() {
            n.sql(SEARCH_PATH);
            assert_eq!(
                n.sql("SELECT extnamespace::regnamespace FROM pg_extension WHERE extname = 'snowflake'"),
                "snowflake"
            );
            assert_eq!(
                n.sql("SELECT extversion FROM pg_extension WHERE extname = 'snowflake'"),
                env!("CARGO_PKG_VERSION")
            );
        }
        c
    }

    fn nodes(&self) -> Vec<&Cluster> {
        std::iter::once(&self.coordinator)
            .chain(self.workers.iter())
            .collect()
    }
}

/// `via` is the worker ID of the node the client sent the row to (a pgbench variable).
const TABLES: &str = "
    CREATE TABLE by_tenant (tenant int NOT NULL, id bigint NOT NULL DEFAULT snowflake_nextval(),
                            via int NOT NULL, PRIMARY KEY (tenant, id));
    SELECT create_distributed_table('by_tenant', 'tenant');
    CREATE TABLE by_id (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), via int NOT NULL);
    SELECT create_distributed_table('by_id', 'id');";
const INSERTS: &str = "\\set tenant random(1, 100)
INSERT INTO by_tenant (tenant, via) VALUES (:tenant, :via);
INSERT INTO by_id (via) VALUES (:via);
";

/// pgbench with `INSERTS` through each node at once, `transactions` for each of two clients,
/// with `via` naming the node (a pgbench variable).
fn insert_through_every_node(nodes: &[(&Cluster, String)], transactions: u32) {
    let t = transactions.to_string();
    thread::scope(|s| {
        for (n, via) in nodes {
            let t = &t;
            s.spawn(move || {
                n.pgbench_ok(
                    INSERTS,
                    &["-c", "2", "-j", "1", "-t", t, "-D", &format!("via={via}")],
                )
            });
        }
    });
}

/// How many rows of `table` each node received, as `via:count,...`.
fn rows_by_via(c: &Cluster, table: &str) -> String {
    c.sql(&format!(
        "SELECT string_agg(via || ':' || n, ',' ORDER BY via) FROM (SELECT via, count(*) n FROM {table} GROUP BY via) v"
    ))
}

/// No row of `table` matches `wrong` (a condition on `id` and `via`), and no ID repeats.
fn assert_no_row(c: &Cluster, table: &str, wrong: &str, what: &str) {
    assert_eq!(
        c.sql(&format!(
            "SELECT count(*) FILTER (WHERE {wrong}), count(*) - count(DISTINCT id) FROM {table}"
        )),
        "0|0",
        "{table}: {what}, and duplicates"
    );
}

/// Rows whose ID does not carry the worker ID of the node that received them, and duplicates.
fn assert_ids_name_their_node(c: &Cluster, table: &str) {
    assert_no_row(
        c,
        table,
        "via >= 0 AND (snowflake_worker_id(id) <> via OR snowflake_datacenter_id(id) <> 1)",
        "IDs that do not name their node",
    );
}

#[test]
fn every_node_generates_the_ids_of_the_rows_it_receives() {
    build_citus();
    let cluster = Citus::new("citus-routes", false);
    let coord = &cluster.coordinator;
    coord.sql(TABLES);

    // pgbench through the coordinator and directly through each worker, all at once.
    let via: Vec<(&Cluster, String)> = cluster
        .nodes()
        .into_iter()
        .map(|n| (n, n.sql("SHOW snowflake.worker_id")))
        .collect();
    insert_through_every_node(&via, 500);
    for table in ["by_tenant", "by_id"] {
        assert_eq!(rows_by_via(coord, table), "0:1000,1:1000,2:1000");
        assert_ids_name_their_node(coord, table);
    }
    // The rows are spread over both workers' shards, wherever they were received.
    assert_eq!(
        coord.sql("SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = 'by_id'::regclass"),
        "2"
    );

    // COPY through worker 2 and through the coordinator.
    let copy = |n: &Cluster, via: u32| {
        let rows: String = (0..2000).map(|_| format!("{via}\n")).collect();
        n.script(&format!("COPY by_id (via) FROM STDIN;\n{rows}\\.\n"))
            .unwrap();
    };
    copy(&cluster.workers[1], 2);
    copy(coord, 0);
    // INSERT ... SELECT from a series: generated on the node that runs it.
    coord.sql("INSERT INTO by_id (via) SELECT 0 FROM generate_series(1, 5000)");
    cluster.workers[0].sql("INSERT INTO by_id (via) SELECT 1 FROM generate_series(1, 500)");
    assert_eq!(coord.sql("SELECT count(*) FROM by_id"), "12500");
    assert_ids_name_their_node(coord, "by_id");
    assert_ids_name_their_node(coord, "by_tenant");

    // INSERT ... SELECT from another distributed table (through worker 1, and through the
    // coordinator into the source table itself): Citus plans it as "repartition" and runs the
    // SELECT, with the row's defaults, on the nodes that hold the source shards. Those nodes
    // generate the IDs (unique, since each has its own pair), not the one that received the
    // statement: via = -1 marks these rows.
    let from_table = [
        (
            &cluster.workers[0],
            "INSERT INTO by_id (via) SELECT -1 FROM by_tenant WHERE via = 2",
        ),
        (
            coord,
            "INSERT INTO by_tenant (tenant, via) SELECT tenant, -1 FROM by_tenant WHERE via = 1",
        ),
    ];
    for (n, sql) in from_table {
        let plan = n.sql(&format!("EXPLAIN (COSTS OFF) {sql}"));
        assert!(plan.contains("INSERT/SELECT method: repartition"), "{plan}");
        n.sql(sql);
    }
    for table in ["by_id", "by_tenant"] {
        assert_eq!(
            coord.sql(&format!(
                "SELECT count(*), count(DISTINCT id), string_agg(DISTINCT snowflake_worker_id(id)::text, ',') FROM {table} WHERE via = -1"
            )),
            "1000|1000|1,2",
            "{table}: the IDs of INSERT ... SELECT from a distributed table come from the shards' nodes"
        );
    }
    assert_ids_name_their_node(coord, "by_id");
    assert_ids_name_their_node(coord, "by_tenant");
    assert_eq!(coord.sql("SELECT count(*) FROM by_id"), "13500");
    assert_eq!(coord.sql("SELECT count(*) FROM by_tenant"), "4000");

    // A reference table: the row is received by worker 2, its ID generated once there, and the
    // same row is on every node.
    coord.sql(
        "CREATE TABLE ref (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), name text);
         SELECT create_reference_table('ref');",
    );
    cluster.workers[1].sql("INSERT INTO ref (name) VALUES ('a'), ('b'), ('c')");
    assert_eq!(
        coord.sql(
            "SELECT count(*), count(DISTINCT result) FROM run_command_on_placements('ref',
               $$SELECT string_agg(id::text, ',' ORDER BY id) FROM %s$$)"
        ),
        "3|1",
        "three placements (coordinator and two workers), one set of IDs"
    );
    assert_eq!(
        coord.sql("SELECT count(*) FROM ref WHERE snowflake_worker_id(id) = 2"),
        "3"
    );
    for n in cluster.nodes() {
        assert_eq!(n.sql("SELECT count(*) FROM ref"), "3");
    }
}

#[test]
fn time_partitions_of_a_distributed_table_are_made_pruned_and_dropped_across_the_cluster() {
    build_citus();
    let cluster = Citus::new("citus-parts", false);
    let coord = &cluster.coordinator;
    coord.sql(
        "CREATE TABLE events (tenant int NOT NULL, id bigint NOT NULL DEFAULT snowflake_nextval(),
                              payload text, PRIMARY KEY (tenant, id)) PARTITION BY RANGE (id);
         SELECT create_distributed_table('events', 'tenant');",
    );
    let made = coord.sql(
        "SELECT count(*) FROM snowflake_create_partitions('events', now() - interval '10 days', now() + interval '3 days')",
    );
    assert_eq!(made, "13");
    // Every partition is a distributed table with the parent's shards.
    assert_eq!(
        coord.sql(
            "SELECT count(*) FROM pg_dist_partition p JOIN pg_inherits i ON i.inhrelid = p.logicalrelid
              WHERE i.inhparent = 'events'::regclass"
        ),
        "13"
    );
    // Rows of today through every node.
    for n in cluster.nodes() {
        n.sql("INSERT INTO events (tenant, payload) SELECT g % 10, 'x' FROM generate_series(1, 1000) g");
    }
    assert_eq!(coord.sql("SELECT count(*) FROM events"), "3000");

    // One tenant, today: one shard (a single task) and only today's partition.
    let plan = coord.sql(
        "EXPLAIN (COSTS OFF) SELECT count(*) FROM events
          WHERE tenant = 3 AND id >= snowflake_min_id(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
                           AND id < snowflake_min_id(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day')",
    );
    let today = coord.sql("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')");
    assert!(plan.contains("Task Count: 1"), "{plan}");
    let scanned: Vec<&str> = plan.lines().filter(|l| l.contains(" on events_")).collect();
    assert!(
        !scanned.is_empty()
            && scanned
                .iter()
                .all(|l| l.contains(&format!("events_{today}_"))),
        "only today's partition's shard is scanned:\n{plan}"
    );
    assert_eq!(
        coord.sql(
            "SELECT count(*) FROM events
              WHERE tenant = 3 AND id >= snowflake_min_id(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
                           AND id < snowflake_min_id(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day')"
        ),
        "300"
    );

    // Retention: the partitions older than 5 days go on every node.
    let old_shards = "SELECT sum(result::int) FROM run_command_on_all_nodes($$
        SELECT count(*) FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
         WHERE c.relname ~ '^events_[0-9]{8}_[0-9]+$'
           AND c.relname < 'events_' || to_char(now() AT TIME ZONE 'UTC' - interval '5 days', 'YYYYMMDD')$$)";
    assert!(
        coord.sql_i64(old_shards) > 0,
        "the workers hold shards of the old partitions"
    );
    let dropped = coord
        .sql("SELECT count(*) FROM snowflake_drop_partitions('events', now() - interval '5 days')");
    assert_eq!(dropped, "5");
    assert_eq!(
        coord.sql_i64(old_shards),
        0,
        "shards of dropped partitions remain"
    );
    assert_eq!(
        coord.sql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass"),
        "8"
    );
    assert_eq!(coord.sql("SELECT count(*) FROM events"), "3000");
}

#[test]
fn a_node_restarted_with_another_nodes_pair_is_refused_and_the_others_go_on() {
    build_citus();
    // No recipe beyond the set-up: the nodes' Citus workers ask each other for their claims.
    let mut cluster = Citus::new("citus-fleet", false);
    for n in cluster.nodes() {
        assert!(eventually(30, || n
            .try_sql("SELECT snowflake_nextval()")
            .is_ok()));
        assert_eq!(
            n.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
            "t"
        );
    }
    cluster.coordinator.sql(
        "CREATE TABLE by_id (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), via int NOT NULL DEFAULT 0);
         SELECT create_distributed_table('by_id', 'id');",
    );

    // An ordinary role on every node holds the strongest lock on pg_settings (PUBLIC may update
    // the view, so any role may lock it) for longer than the check may take: the nodes' answers
    // must not wait for it.
    let lockers: Vec<std::process::Child> = cluster
        .nodes()
        .iter()
        .map(|n| {
            n.sql("SET citus.enable_ddl_propagation = off; CREATE ROLE mallory LOGIN");
            n.psql_cmd_as("mallory", "postgres")
                .args([
                    "-c",
                    "BEGIN",
                    "-c",
                    "LOCK TABLE pg_catalog.pg_settings IN ACCESS EXCLUSIVE MODE",
                    "-c",
                    "SELECT pg_sleep(90)",
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for n in cluster.nodes() {
        assert!(eventually(10, || {
            n.sql(
            "SELECT count(*) FROM pg_locks WHERE relation = 'pg_catalog.pg_settings'::regclass AND mode = 'AccessExclusiveLock' AND granted"
        ) == "1"
        }));
    }

    // Worker 2 comes back with worker 1's pair: within 30 s it is refused.
    let w2 = &mut cluster.workers[1];
    w2.stop("fast");
    w2.conf("snowflake.worker_id = 1");
    w2.start();
    let started = std::time::Instant::now();
    let refused = |c: &Cluster| {
        c.try_sql("SELECT snowflake_nextval()")
            .err()
            .is_some_and(|e| {
                e.sqlstate == "55000" && e.message.contains("also used by another server")
            })
    };
    assert!(
        eventually(30, || refused(&cluster.workers[1])),
        "worker 2 still generates with worker 1's pair"
    );
    eprintln!("refused after {:.1} s", started.elapsed().as_secs_f64());
    // Both holders of the pair stop (the safe side); the coordinator, whose pair is its own,
    // raises no alarm and keeps inserting into shards on both workers.
    assert!(eventually(30, || refused(&cluster.workers[0])));
    thread::sleep(Duration::from_secs(6));
    let coord = &cluster.coordinator;
    assert_eq!(
        coord.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
        "t"
    );
    coord.sql("INSERT INTO by_id SELECT FROM generate_series(1, 1000)");
    assert_eq!(
        coord.sql("SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE snowflake_worker_id(id) = 0) FROM by_id"),
        "1000|1000|1000"
    );
    assert!(!coord.log().contains("also used by another server"));

    for mut l in lockers {
        let _ = l.kill();
        let _ = l.wait();
    }

    // Its own pair back: both workers generate again.
    let w2 = &mut cluster.workers[1];
    w2.stop("fast");
    w2.conf("snowflake.worker_id = 2");
    w2.start();
    for w in &cluster.workers {
        assert!(
            eventually(30, || w.try_sql("SELECT snowflake_nextval()").is_ok()),
            "a worker still refuses after the pair was fixed"
        );
    }
}

#[test]
fn a_worker_crashed_with_its_clock_set_back_and_a_node_added_with_a_rebalance_keep_every_key() {
    build_citus();
    // Pairs from the Citus groups (worker n is group n): the crash, the clock and the rebalance
    // change nothing of that.
    let coordinator = derived_node("citus-ops-c", "citus", "");
    let workers: Vec<Cluster> = (1..=2)
        .map(|w| derived_node_with_clock(&format!("citus-ops-w{w}"), "citus", "", true))
        .collect();
    set_up(&coordinator, &workers.iter().collect::<Vec<_>>());
    let mut cluster = Citus {
        coordinator,
        workers,
    };
    for n in cluster.nodes() {
        assert!(eventually(30, || refusal(n).is_none()), "{:?}", refusal(n));
    }
    cluster.coordinator.sql(
        "CREATE TABLE by_id (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), via int NOT NULL,
                             phase text NOT NULL DEFAULT 'before');
         SELECT create_distributed_table('by_id', 'id');",
    );

    // Worker 1 crashes (an immediate shutdown, SIGQUIT to its postmaster) while two clients
    // insert through it, and comes back 9 s behind: within the drift (10 s) with the lease it may
    // have written up to 1 s ahead of its last ID (10 s behind refused when the restart took
    // less than the lease's second, as it did once under load).
    thread::scope(|s| {
        let w1 = &cluster.workers[0];
        let clients = s.spawn(move || {
            w1.pgbench(
                "INSERT INTO by_id (via) VALUES (1);\n",
                &["-c", "2", "-j", "1", "-T", "8"],
            )
        });
        thread::sleep(Duration::from_secs(3));
        let pid = w1.postmaster_pid();
        assert!(Command::new("kill")
            .args(["-QUIT", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        assert!(
            eventually(30, || !w1.data.join("postmaster.pid").exists()),
            "worker 1 did not go down"
        );
        let out = clients.join().unwrap();
        assert!(!out.status.success(), "the clients saw no crash");
    });
    let w1 = &mut cluster.workers[0];
    w1.set_fake_offset("-9s");
    w1.start();
    let before_max = cluster
        .coordinator
        .sql_i64("SELECT max(id) FROM by_id WHERE snowflake_worker_id(id) = 1");
    assert!(before_max > 0, "worker 1 inserted before its crash");
    assert!(
        common::worker_sees_the_clock(&cluster.workers[0]),
        "16+: every process of worker 1 sees its clock"
    );
    cluster.workers[0].pgbench_ok(
        "INSERT INTO by_id (via, phase) VALUES (1, 'after');\n",
        &["-c", "2", "-j", "1", "-t", "500"],
    );
    assert_eq!(
        cluster.coordinator.sql(&format!(
            "SELECT count(*), count(*) FILTER (WHERE id > {before_max}) FROM by_id WHERE phase = 'after'"
        )),
        "1000|1000",
        "after the crash with the clock back, worker 1 issues above its old maximum"
    );

    // A third worker joins and the shards are rebalanced while rows keep arriving.
    let w3 = derived_node("citus-ops-w3", "citus", "");
    let fingerprint =
        "SELECT count(*), md5(string_agg(id || ':' || via, ',' ORDER BY id)) FROM by_id";
    let before = cluster.coordinator.sql(fingerprint);
    let coord = &cluster.coordinator;
    add_node(coord, &w3);
    assert!(
        eventually(30, || refusal(&w3).is_none()),
        "{:?}",
        refusal(&w3)
    );
    thread::scope(|s| {
        let h = s.spawn(|| {
            coord.pgbench_ok(
                "INSERT INTO by_id (via, phase) VALUES (0, 'rebalance');\n",
                &["-c", "2", "-j", "1", "-T", "8"],
            )
        });
        coord.sql("SELECT rebalance_table_shards()");
        h.join().unwrap();
    });
    assert!(
        coord.sql_i64(&format!(
            "SELECT count(*) FROM citus_shards WHERE table_name = 'by_id'::regclass AND nodeport = {}",
            w3.port
        )) > 0,
        "the rebalance moved shards to the new worker"
    );
    assert_eq!(
        coord.sql(&format!("{fingerprint} WHERE phase <> 'rebalance'")),
        before,
        "keys changed in the rebalance"
    );
    assert_ids_carry_their_group(coord, "by_id");
    // Rows through the new worker carry its pair.
    w3.sql("INSERT INTO by_id (via, phase) SELECT 3, 'w3' FROM generate_series(1, 100)");
    assert_ids_carry_their_group(coord, "by_id");
}

/// Rows whose ID does not carry the Citus group of the node that received them (`via`), under
/// `pair_source = 'citus'` (datacenter = group / 32, worker = group % 32), and duplicates.
fn assert_ids_carry_their_group(c: &Cluster, table: &str) {
    assert_no_row(
        c,
        table,
        "snowflake_datacenter_id(id) * 32 + snowflake_worker_id(id) <> via",
        "IDs that do not carry their node's group",
    );
}

#[test]
fn pairs_come_from_citus_groups_a_node_added_needs_nothing_more_and_a_changed_group_stops() {
    build_citus();
    let coordinator = derived_node("citus-groups-c", "citus", "");
    let w1 = derived_node("citus-groups-w1", "citus", "");
    let w2 = derived_node("citus-groups-w2", "citus", "");
    set_up(&coordinator, &[&w1, &w2]);
    let nodes = [&coordinator, &w1, &w2];
    for (n, group) in nodes.iter().zip(0..) {
        n.wait_for(
            "SELECT pair_source, datacenter_id, worker_id FROM snowflake_node()",
            &format!("citus group {group}|0|{group}"),
            30,
        );
        assert!(
            eventually(30, || refusal(n).is_none()),
            "node of group {group} does not issue: {:?}",
            refusal(n)
        );
    }
    coordinator.sql(TABLES);
    let via: Vec<(&Cluster, String)> = nodes
        .iter()
        .zip(0..)
        .map(|(n, g)| (*n, format!("{g}")))
        .collect();
    insert_through_every_node(&via, 300);
    for table in ["by_tenant", "by_id"] {
        assert_eq!(rows_by_via(&coordinator, table), "0:600,1:600,2:600");
        assert_ids_carry_their_group(&coordinator, table);
    }

    // A third worker, configured like the others: refused until a coordinator adds it, then it
    // issues with its group, with no other step.
    let mut w3 = derived_node("citus-groups-w3", "citus", "");
    w3.sql("CREATE EXTENSION citus");
    w3.sql("CREATE SCHEMA snowflake; CREATE EXTENSION snowflake SCHEMA snowflake");
    w3.sql(SEARCH_PATH);
    assert_eq!(
        w3.sql("SELECT pair_source FROM snowflake_node()"),
        "citus (no group yet)"
    );
    let (state, message) = refusal(&w3).expect("a node in no cluster refuses");
    assert_eq!(state, "55000");
    assert!(message.contains("not in a Citus cluster yet"), "{message}");
    w3.sql("DROP EXTENSION snowflake");
    add_node(&coordinator, &w3);
    assert!(
        eventually(30, || refusal(&w3).is_none()),
        "the added node does not issue: {:?}",
        refusal(&w3)
    );
    w3.sql("INSERT INTO by_id (via) SELECT 3 FROM generate_series(1, 200)");
    assert_ids_carry_their_group(&coordinator, "by_id");

    // Restarted with a hand-set pair that worker 1's group holds, and no recipe: refused within
    // 30 s, and so is worker 1 (the safe side); the others raise no alarm.
    restart_with_pair(&mut w3, Some((0, 1)));
    assert!(eventually(30, || duplicate(&w3)), "{:?}", refusal(&w3));
    assert!(eventually(30, || duplicate(&w1)), "{:?}", refusal(&w1));
    for n in [&coordinator, &w2] {
        assert!(refusal(n).is_none());
    }
    restart_with_pair(&mut w3, None);
    for n in [&w1, &w3] {
        assert!(eventually(30, || refusal(n).is_none()), "{:?}", refusal(n));
    }
    assert_eq!(
        w3.sql("SELECT pair_source FROM snowflake_node()"),
        "citus group 3"
    );
    let before = coordinator.sql_i64("SELECT max(id) FROM by_id WHERE via = 3");

    // Removed and added again, it has a new group: it stops rather than switch pairs, at once and
    // after a restart, until a DBA lets it take the new group; its IDs then go on above its old
    // ones, and the others never raised an alarm.
    coordinator.sql(&format!(
        "SELECT citus_remove_node('{}', {})",
        w3.dir.display(),
        w3.port
    ));
    add_node(&coordinator, &w3);
    let changed = |c: &Cluster| {
        refusal(c).is_some_and(|(state, m)| {
            state == "55000" && m.contains("Citus group changed from 3 to 4")
        })
    };
    assert!(eventually(30, || changed(&w3)), "{:?}", refusal(&w3));
    w3.stop("fast");
    w3.start();
    assert!(eventually(30, || changed(&w3)), "{:?}", refusal(&w3));
    assert_eq!(
        w3.sql("SELECT pair_source FROM snowflake_node()"),
        "citus group 3 (group changed to 4)"
    );
    w3.sql("DELETE FROM _snowflake.citus_group");
    w3.stop("fast");
    w3.start();
    assert!(
        eventually(30, || refusal(&w3).is_none()),
        "{:?}",
        refusal(&w3)
    );
    // The claim it states keeps the pair it left, with the last ID it may have issued there (the
    // floor for whoever takes that pair): the form's name and seven fields, then the pairs left.
    let claim = w3.sql("SHOW snowflake.fleet_claim");
    let left: Vec<i64> = claim
        .split(' ')
        .skip(8)
        .map(|w| w.parse().unwrap())
        .collect();
    // (Pair 1 is there too, from its hand-set spell above, on which it issued nothing.)
    let on_3: Vec<i64> = left
        .iter()
        .copied()
        .filter(|&id| w3.sql_i64(&format!("SELECT snowflake_worker_id({id})")) == 3)
        .collect();
    assert_eq!(on_3.len(), 1, "{claim}");
    assert!(on_3[0] >= before, "{claim}: below {before}");
    w3.sql("INSERT INTO by_id (via) SELECT 4 FROM generate_series(1, 200)");
    assert_eq!(
        coordinator.sql_i64(&format!(
            "SELECT count(*) FROM by_id WHERE via = 4 AND id > {before}"
        )),
        200
    );
    assert_ids_carry_their_group(&coordinator, "by_id");
    for n in [&coordinator, &w2] {
        assert!(!n.log().contains("also used by another server"));
    }
}

#[test]
fn groups_beyond_what_each_pair_source_holds_are_refused() {
    build_citus();
    let coordinator = derived_node("citus-limits-c", "citus", "");
    set_up(&coordinator, &[]);
    let restart_groups_at = |n: i64| {
        coordinator.sql(&format!(
            "ALTER SEQUENCE pg_catalog.pg_dist_groupid_seq RESTART {n}"
        ))
    };
    let beyond = |c: &Cluster, group: i64| {
        eventually(30, || {
            refusal(c).is_some_and(|(state, m)| {
                state == "55000" && m.contains(&format!("Citus group {group} is beyond"))
            })
        })
    };
    // The last group a source holds issues with its pair; the next one is refused. Both nodes
    // stay up: a node of the cluster that is down would fail the next citus_add_node.
    let limit = |source: &str, extra: &str, last_group: i64, pair: &str| {
        restart_groups_at(last_group);
        let last = derived_node(&format!("citus-limits-{last_group}"), source, extra);
        add_node(&coordinator, &last);
        assert!(
            eventually(30, || refusal(&last).is_none()),
            "{:?}",
            refusal(&last)
        );
        assert_eq!(
            last.sql("SELECT snowflake_datacenter_id(snowflake_nextval()), snowflake_worker_id(snowflake_nextval())"),
            pair
        );
        let past = derived_node(&format!("citus-limits-{}", last_group + 1), source, extra);
        add_node(&coordinator, &past);
        assert!(beyond(&past, last_group + 1), "{:?}", refusal(&past));
        (last, past)
    };
    // 'citus_in_datacenter': the configured datacenter, the group as the worker, 0 to 31.
    let _up = limit(
        "citus_in_datacenter",
        "snowflake.datacenter_id = 5",
        31,
        "5|31",
    );
    // 'citus': the whole pair, 0 to 1023.
    let (_last, past) = limit("citus", "", 1023, "31|31");
    assert_eq!(
        past.sql("SELECT pair_source FROM snowflake_node()"),
        "citus (group 1024 out of range)"
    );
}

/// Sends `signal` to a node's postmaster and every process it started.
fn signal_node(c: &Cluster, signal: &str) {
    let pid = c.postmaster_pid().to_string();
    let children = String::from_utf8(
        Command::new("pgrep")
            .args(["-P", &pid])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for p in std::iter::once(pid.as_str()).chain(children.split_whitespace()) {
        Command::new("kill").args([signal, p]).status().unwrap();
    }
}

#[test]
fn a_node_that_cannot_be_reached_does_not_look_like_a_node_that_left() {
    build_citus();
    let coordinator = derived_node("citus-reach-c", "citus", "");
    let w1 = derived_node("citus-reach-w1", "citus", "");
    let mut w2 = derived_node("citus-reach-w2", "citus", "");
    set_up(&coordinator, &[&w1, &w2]);
    for n in [&coordinator, &w1, &w2] {
        assert!(eventually(30, || refusal(n).is_none()), "{:?}", refusal(n));
    }
    // Worker 2 takes worker 1's pair by hand: both refuse.
    restart_with_pair(&mut w2, Some((0, 1)));
    assert!(eventually(30, || duplicate(&w1)), "{:?}", refusal(&w1));
    // Worker 2 freezes (every process stopped: it can no longer answer). Its claim stops
    // changing, as a node's that left would; but a node that does not answer may still issue,
    // so worker 1 keeps refusing well past the claim expiry (15 s here), and the coordinator,
    // whose pair is its own, goes on.
    signal_node(&w2, "-STOP");
    thread::sleep(Duration::from_secs(35));
    let still = refusal(&w1);
    signal_node(&w2, "-CONT");
    assert!(
        still
            .as_ref()
            .is_some_and(|(s, m)| s == "55000" && m.contains("also used by another server")),
        "worker 1 took the unreachable node for one that left: {still:?}"
    );
    assert!(refusal(&coordinator).is_none());
    // Worker 2 gets its own pair back: worker 1 issues again.
    restart_with_pair(&mut w2, None);
    for n in [&w1, &w2] {
        assert!(eventually(30, || refusal(n).is_none()), "{:?}", refusal(n));
    }
}

#[test]
fn a_physical_copy_of_a_node_started_beside_it_issues_nothing() {
    build_citus();
    let coordinator = derived_node("citus-copy-c", "citus", "");
    let w1 = derived_node("citus-copy-w1", "citus", "");
    set_up(&coordinator, &[&w1]);
    assert!(
        eventually(30, || refusal(&w1).is_none()),
        "{:?}",
        refusal(&w1)
    );
    // A pg_basebackup of worker 1, started and promoted beside it (never added to the cluster):
    // it has worker 1's system identifier, recorded group and metadata, and asks worker 1 like
    // any node. Worker 1's answer carries another instance than its own: a copy.
    let mut copy = Cluster::standby_of(&w1, "citus-copy-w1copy");
    let dir = copy.dir.display().to_string();
    copy.conf(&format!("citus.local_hostname = '{dir}'"));
    copy.start();
    copy.promote();
    let mut answers = Vec::new();
    let refused = eventually(30, || {
        let r = refusal(&copy);
        answers.push(r.clone());
        r.is_some_and(|(state, m)| state == "55000" && m.contains("physical copy of this server"))
    });
    assert!(refused, "the copy was not refused: {answers:?}");
    assert!(
        answers.iter().all(Option::is_some),
        "the copy issued IDs before it was refused: {answers:?}"
    );
    assert_eq!(
        copy.sql("SELECT pair_source FROM snowflake_node()"),
        "citus group 1"
    );
    assert!(refusal(&w1).is_none());
}
