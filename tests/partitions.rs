//! Time partitions on the snowflake key: snowflake_create_partitions / snowflake_drop_partitions,
//! run-time pruning on `id >= snowflake_min_id(...)`, and the README's pg_partman recipe.

mod common;
use common::{readme_recipe, Cluster};
use std::sync::OnceLock;

fn server() -> &'static Cluster {
    static S: OnceLock<Cluster> = OnceLock::new();
    common::shared_cluster(&S, || {
        let mut c = Cluster::new("partitions", "snowflake.worker_id = 9\ntimezone = 'UTC'");
        c.start();
        c.sql("CREATE EXTENSION snowflake");
        c
    })
}

/// Midnight UTC of today, as the server sees it, as a timestamptz literal.
fn today(c: &Cluster) -> String {
    c.sql("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'")
}

fn partition_names(c: &Cluster, parent: &str) -> Vec<String> {
    c.sql(&format!(
        "SELECT partition FROM snowflake_partitions('{parent}') ORDER BY from_id"
    ))
    .lines()
    .map(String::from)
    .collect()
}

#[test]
fn create_route_prune_and_drop_daily_partitions() {
    let c = server();
    c.sql("CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), payload text) PARTITION BY RANGE (id)");
    let t0 = today(c);
    let create = format!(
        "SELECT partition FROM snowflake_create_partitions('events', '{t0}'::timestamptz - interval '3 days', '{t0}'::timestamptz + interval '2 days') AS partition ORDER BY 1"
    );
    let made: Vec<String> = c.sql(&create).lines().map(String::from).collect();
    let day = |offset: i32| {
        c.sql(&format!(
            "SELECT 'events_' || to_char('{t0}'::timestamptz + {offset} * interval '1 day', 'YYYYMMDD')"
        ))
    };
    let expected: Vec<String> = (-3..2).map(day).collect();
    assert_eq!(made, expected);
    assert_eq!(c.sql(&create), "", "a second call created partitions again");
    assert_eq!(partition_names(c, "events"), expected);

    // Bounds are snowflake_min_id() of each midnight: contiguous, and the times say so.
    assert_eq!(
        c.sql(&format!(
            "SELECT from_ts = '{t0}'::timestamptz - interval '3 days', to_ts - from_ts, \
                    from_id = snowflake_min_id(from_ts), to_id = snowflake_min_id(to_ts) \
             FROM snowflake_partitions('events') ORDER BY from_id LIMIT 1"
        )),
        "t|1 day|t|t"
    );

    // Rows composed for 3 and 2 days ago, and one generated now, each land in their UTC day.
    c.sql(
        "INSERT INTO events VALUES (snowflake_compose(now() - interval '3 days', 0, 9, 1), 'three days ago'),
                                   (snowflake_compose(now() - interval '2 days', 0, 9, 2), 'two days ago');
         INSERT INTO events (payload) VALUES ('now')",
    );
    assert_eq!(
        c.sql(
            "SELECT count(*), count(*) FILTER (WHERE tableoid::regclass::text = \
             'events_' || to_char(snowflake_timestamp(id), 'YYYYMMDD')) FROM events"
        ),
        "3|3"
    );

    // The last day's rows: run-time pruning (now() is only known at execution) leaves yesterday,
    // today and tomorrow, 3 of the 5 partitions.
    let plan = c.sql(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) \
         SELECT * FROM events WHERE id >= snowflake_min_id(now() - interval '1 day')",
    );
    // Partitions whose scan ran (an index's own scan line names the index, `..._pkey`).
    let mut scanned: Vec<&str> = plan
        .lines()
        .filter(|l| !l.contains("never executed"))
        .filter_map(|l| l.split(" on ").nth(1)?.split(' ').next())
        .filter(|t| t.starts_with("events_") && !t.ends_with("_pkey"))
        .collect();
    scanned.dedup();
    assert_eq!(scanned.len(), 3, "{plan}");
    assert!(plan.contains("Subplans Removed: 2"), "{plan}");

    // Beyond the last partition: PostgreSQL's own error, and nothing is inserted.
    let e = c.sql_err("INSERT INTO events VALUES (snowflake_compose(now() + interval '3 days', 0, 9, 0), 'too late')");
    assert_eq!(e.sqlstate, "23514", "{}", e.raw);
    assert!(e.message.contains("no partition of relation"), "{}", e.raw);

    // Everything before yesterday's midnight: exactly the two oldest, today's rows stay.
    let dropped = c.sql(&format!(
        "SELECT * FROM snowflake_drop_partitions('events', '{t0}'::timestamptz - interval '1 day')"
    ));
    // Schema-qualified: the names of tables that no longer exist cannot be resolved later.
    assert_eq!(dropped, format!("public.{}\npublic.{}", day(-3), day(-2)));
    assert_eq!(partition_names(c, "events"), expected[2..].to_vec());
    assert_eq!(c.sql("SELECT payload FROM events"), "now");
}

#[test]
fn arguments_at_any_time_of_day_mean_whole_days() {
    let c = server();
    c.sql("CREATE TABLE days_t (id bigint PRIMARY KEY DEFAULT snowflake_nextval()) PARTITION BY RANGE (id)");
    // "Three days ago to two days ahead" from now(): the same five days as from midnights.
    let made = c.sql(
        "SELECT string_agg(p::text, ',' ORDER BY p::text) FROM \
         snowflake_create_partitions('days_t', now() - interval '3 days', now() + interval '2 days') p",
    );
    let expected = c.sql(
        "SELECT string_agg('days_t_' || to_char(d, 'YYYYMMDD'), ',' ORDER BY d) FROM \
         generate_series(date_trunc('day', now()) - interval '3 days', date_trunc('day', now()) + interval '1 day', interval '1 day') d",
    );
    assert_eq!(made, expected);
    let plan = c.sql(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) \
         SELECT * FROM days_t WHERE id >= snowflake_min_id(now() - interval '1 day')",
    );
    assert!(plan.contains("Subplans Removed: 2"), "{plan}");
    // A range inside one step still makes that step.
    c.sql("CREATE TABLE one_t (id bigint PRIMARY KEY) PARTITION BY RANGE (id)");
    assert_eq!(
        c.sql("SELECT count(*) FROM snowflake_create_partitions('one_t', now(), now())"),
        "1"
    );
}

#[test]
fn drop_never_takes_a_partition_that_can_hold_a_newer_id() {
    let c = server();
    c.sql("CREATE TABLE keep_t (id bigint PRIMARY KEY) PARTITION BY RANGE (id)");
    let t0 = today(c);
    c.sql(&format!(
        "SELECT count(*) FROM snowflake_create_partitions('keep_t', '{t0}'::timestamptz - interval '2 days', '{t0}')"
    ));
    // A cut in the middle of yesterday keeps yesterday: it holds IDs after the cut.
    let dropped = c.sql(&format!(
        "SELECT count(*) FROM snowflake_drop_partitions('keep_t', '{t0}'::timestamptz - interval '12 hours')"
    ));
    assert_eq!(dropped, "1");
    // A cut exactly at a bound drops the partition below it, not the one starting there.
    let dropped = c.sql(&format!(
        "SELECT count(*) FROM snowflake_drop_partitions('keep_t', '{t0}'::timestamptz - interval '1 day')"
    ));
    assert_eq!(dropped, "0");
    assert_eq!(partition_names(c, "keep_t").len(), 1);
}

#[test]
fn sub_day_steps_are_named_by_minute() {
    let c = server();
    c.sql("CREATE TABLE hourly (id bigint PRIMARY KEY DEFAULT snowflake_nextval()) PARTITION BY RANGE (id)");
    let t0 = today(c);
    let made = c.sql(&format!(
        "SELECT string_agg(p::text, ',' ORDER BY p::text) FROM snowflake_create_partitions('hourly', '{t0}'::timestamptz + interval '90 minutes', '{t0}'::timestamptz + interval '7 hours', '3 hours') p"
    ));
    let d = c.sql(&format!("SELECT to_char('{t0}'::timestamptz, 'YYYYMMDD')"));
    // 01:30 rounds down to 00:00 and 07:00 to 06:00: the steps of 00:00 and 03:00.
    assert_eq!(made, format!("hourly_{d}_0000,hourly_{d}_0300"));
    assert_eq!(
        c.sql("SELECT DISTINCT to_ts - from_ts FROM snowflake_partitions('hourly')"),
        "03:00:00"
    );
}

#[test]
fn bad_parents_and_steps_are_clear_errors_and_nothing_is_half_made() {
    let c = server();
    c.sql(
        "CREATE TABLE plain_t (id bigint PRIMARY KEY);
         CREATE TABLE list_t (id bigint) PARTITION BY LIST (id);
         CREATE TABLE text_t (k text) PARTITION BY RANGE (k);
         CREATE TABLE two_t (a bigint, b bigint) PARTITION BY RANGE (a, b);
         CREATE TABLE steps_t (id bigint) PARTITION BY RANGE (id);",
    );
    let e =
        c.sql_err("SELECT snowflake_create_partitions('plain_t', now(), now() + interval '1 day')");
    assert_eq!(e.sqlstate, "42809", "{}", e.raw);
    assert!(e.message.contains("is not a partitioned table") && !e.hint.is_empty());
    for t in ["list_t", "text_t", "two_t"] {
        let e = c.sql_err(&format!(
            "SELECT snowflake_create_partitions('{t}', now(), now() + interval '1 day')"
        ));
        assert_eq!(e.sqlstate, "42809", "{t}: {}", e.raw);
        assert!(e.message.contains("one bigint column"), "{}", e.raw);
        assert!(e.detail.starts_with("Its partition key is"), "{}", e.raw);
    }
    let e = c.sql_err("SELECT snowflake_drop_partitions('plain_t', now())");
    assert_eq!(e.sqlstate, "42809", "{}", e.raw);
    for step in [
        "1 month",
        "1 year",
        "90 seconds",
        "0",
        "-1 day",
        "1 day 30 seconds",
    ] {
        let e = c.sql_err(&format!(
            "SELECT snowflake_create_partitions('steps_t', now(), now() + interval '3 days', '{step}')"
        ));
        assert_eq!(e.sqlstate, "22023", "{step}: {}", e.raw);
        assert!(e.message.contains("invalid partition step"), "{}", e.raw);
    }
    // A range that overlaps a partition with other bounds: PostgreSQL's error, and the
    // partitions made before it in the same call are gone too.
    c.sql("CREATE TABLE steps_t_odd PARTITION OF steps_t FOR VALUES FROM (snowflake_min_id(date_trunc('day', now()) + interval '2 days 1 hour')) TO (snowflake_min_id(date_trunc('day', now()) + interval '2 days 2 hours'))");
    let e = c.sql_err(
        "SELECT snowflake_create_partitions('steps_t', date_trunc('day', now()), date_trunc('day', now()) + interval '3 days')",
    );
    assert_eq!(e.sqlstate, "42P17", "{}", e.raw);
    assert!(e.message.contains("would overlap"), "{}", e.raw);
    assert_eq!(
        partition_names(c, "steps_t"),
        vec!["steps_t_odd".to_string()]
    );
    // Before the epoch: the clear error of snowflake_min_id.
    let e = c.sql_err("SELECT snowflake_create_partitions('steps_t', '2001-01-01', '2001-01-03')");
    assert_eq!(e.sqlstate, "22008", "{}", e.raw);
}

#[test]
fn the_readme_pg_partman_recipe_premakes_routes_and_retires() {
    let mut c = Cluster::new("partman", "snowflake.worker_id = 2\ntimezone = 'UTC'");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    let available = c.sql("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_partman'");
    if available == "0" {
        // Debian packages pg_partman for its own 15 only; the 16 and 18 here come from PyPI.
        assert_ne!(
            common::pg_major(),
            15,
            "pg_partman is missing: scripts/deps.sh installs postgresql-15-partman"
        );
        eprintln!("pg_partman is not packaged for this server: recipe not run on this major");
        return;
    }
    c.script(&readme_recipe("pg_partman"))
        .unwrap_or_else(|e| panic!("the README's pg_partman recipe failed: {}", e.raw));
    // On an empty table premaking counts from the start partition: 4 days. Rows of now and of
    // two days ago, then maintenance, which premakes from the newest ID.
    assert_eq!(
        c.sql("SELECT count(*) FROM snowflake_partitions('events')"),
        "4"
    );
    // (A script, not one `psql -c`: the procedure commits, which a multi-statement -c forbids.)
    c.script(
        "INSERT INTO events (payload) VALUES ('now');
         INSERT INTO events VALUES (snowflake_compose(now() - interval '2 days', 0, 2, 7), 'two days ago');
         CALL partman.run_maintenance_proc();",
    )
    .unwrap();
    // Each row is in the partition whose range holds its time.
    assert_eq!(
        c.sql(
            "SELECT count(*) FROM events e JOIN snowflake_partitions('events') p ON p.partition = e.tableoid \
             WHERE snowflake_timestamp(e.id) >= p.from_ts AND snowflake_timestamp(e.id) < p.to_ts"
        ),
        "2"
    );
    // Three days back, today, three days ahead, each one day of IDs starting at the epoch's time
    // of day (01:42:54.657 UTC with Twitter's epoch), and the default partition.
    let days = c.sql(
        "SELECT count(*), count(*) FILTER (WHERE to_ts - from_ts = interval '1 day'), \
                count(DISTINCT from_ts::time), min(from_ts::time), \
                bool_and(from_id % 362387865600000 = 0), \
                max(to_ts) > now() + interval '3 days', min(from_ts) <= now() - interval '3 days' \
         FROM snowflake_partitions('events')",
    );
    assert_eq!(days, "7|7|1|01:42:54.657|t|t|t");
    assert_eq!(
        c.sql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass"),
        "8",
        "seven day partitions and events_default"
    );
    // Retention counts from the newest ID: with one day kept, everything ending before
    // yesterday's same time goes, and the newest rows stay.
    c.script(
        "UPDATE partman.part_config SET retention = '362387865600000' WHERE parent_table = 'public.events';
         CALL partman.run_maintenance_proc();",
    )
    .unwrap();
    let left = c.sql(
        "SELECT bool_and(to_ts >= now() - interval '1 day' - interval '1 day'), min(from_ts) > now() - interval '3 days' \
         FROM snowflake_partitions('events')",
    );
    assert_eq!(left, "t|t");
    assert_eq!(c.sql("SELECT string_agg(payload, ',') FROM events"), "now");
}

#[test]
fn retention_refuses_a_table_whose_partitions_are_not_snowflake_time_ranges() {
    let c = server();
    // A bigserial table partitioned by key ranges: every bound is "before" any time's min_id.
    c.sql(
        "CREATE TABLE legacy (id bigserial PRIMARY KEY) PARTITION BY RANGE (id);
         CREATE TABLE legacy_1 PARTITION OF legacy FOR VALUES FROM (1) TO (1000);
         CREATE TABLE legacy_2 PARTITION OF legacy FOR VALUES FROM (1000) TO (2000);",
    );
    let e = c.sql_err("SELECT snowflake_drop_partitions('legacy', now() - interval '90 days')");
    assert_eq!(e.sqlstate, "42809", "{}", e.raw);
    assert!(
        e.message.contains("does not have snowflake time bounds")
            && e.detail.contains("FROM (1) TO (1000)")
            && e.hint.contains("nothing was dropped"),
        "{}",
        e.raw
    );
    assert_eq!(partition_names(c, "legacy"), vec!["legacy_1", "legacy_2"]);
    // One odd partition among snowflake ones is enough to refuse the whole call.
    c.sql("CREATE TABLE mixed (id bigint PRIMARY KEY) PARTITION BY RANGE (id)");
    let t0 = today(c);
    c.sql(&format!(
        "SELECT count(*) FROM snowflake_create_partitions('mixed', '{t0}'::timestamptz - interval '3 days', '{t0}')"
    ));
    c.sql("CREATE TABLE mixed_odd PARTITION OF mixed FOR VALUES FROM (5) TO (7)");
    let e = c.sql_err(&format!(
        "SELECT snowflake_drop_partitions('mixed', '{t0}')"
    ));
    assert_eq!(e.sqlstate, "42809", "{}", e.raw);
    assert_eq!(partition_names(c, "mixed").len(), 4);
    c.sql("DROP TABLE mixed_odd");
    assert_eq!(
        c.sql(&format!(
            "SELECT count(*) FROM snowflake_drop_partitions('mixed', '{t0}')"
        )),
        "3"
    );
}

#[test]
fn long_parent_names_keep_every_partition_name_distinct() {
    let c = server();
    let t0 = today(c);
    // 60 ASCII characters, and 40 two-byte ones (80 bytes): both past 63 bytes with the date.
    for parent in ["p".repeat(60), "ä".repeat(31)] {
        c.sql(&format!(
            "CREATE TABLE \"{parent}\" (id bigint PRIMARY KEY) PARTITION BY RANGE (id)"
        ));
        let made = c.sql(&format!(
            "SELECT count(*) FROM snowflake_create_partitions('\"{parent}\"', '{t0}'::timestamptz - interval '2 days', '{t0}'::timestamptz + interval '1 day')"
        ));
        assert_eq!(made, "3", "{parent}");
        // (In a second statement: the one that made them does not see them in pg_class.)
        let names = c.sql(&format!(
            "SELECT count(DISTINCT c.relname), bool_and(octet_length(c.relname) <= 63), \
                    bool_and(c.relname::text ~ '_[0-9]{{8}}$') \
               FROM snowflake_partitions('\"{parent}\"') p JOIN pg_class c ON c.oid = p.partition"
        ));
        assert_eq!(names, "3|t|t", "{parent}");
    }
    // Another parent with the same first 54 characters would get the same shortened names: its
    // partitions are named with _1, with a WARNING naming the other table (1.7.0's first cut
    // failed with 42P07 and made nothing).
    let twin = format!("{}{}", "p".repeat(54), "q".repeat(6));
    c.sql(&format!(
        "CREATE TABLE \"{twin}\" (id bigint PRIMARY KEY) PARTITION BY RANGE (id)"
    ));
    let out = c
        .psql_cmd("postgres")
        .arg("-c")
        .arg(format!(
            "SELECT count(*) FROM snowflake_create_partitions('\"{twin}\"', '{t0}'::timestamptz - interval '2 days', '{t0}')"
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");
    assert!(
        err.matches("WARNING").count() == 2
            && err.contains("is taken by a relation that is not its partition")
            && err.contains("shortened"),
        "{err}"
    );
    let names = c.sql(&format!(
        "SELECT count(*), bool_and(c.relname::text ~ '_[0-9]{{8}}_1$'), bool_and(octet_length(c.relname) <= 63) \
           FROM snowflake_partitions('\"{twin}\"') p JOIN pg_class c ON c.oid = p.partition"
    ));
    assert_eq!(names, "2|t|t");
}

/// A small deterministic generator, so that a failure names a reproducible case.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Names as users write them: long, quoted, mixed case, with spaces, quotes and multibyte
/// characters, in schemas named the same way.
fn random_name(r: &mut Lcg) -> String {
    const PIECES: [&str; 16] = [
        "a", "Z", "x", "Events", "_", " ", "\"", "'", "é", "✓", "9", "-", ".", "Ü", "ordErs", "%",
    ];
    let len = 1 + r.next(70);
    let mut s = String::new();
    while s.chars().count() < len {
        s.push_str(PIECES[r.next(PIECES.len())]);
    }
    // PostgreSQL truncates identifiers to 63 bytes itself (with a NOTICE): keep what it keeps.
    while s.len() > 63 {
        s.pop();
    }
    s
}

#[test]
fn partition_helpers_take_any_table_name_and_nobody_elses_table() {
    let c = server();
    let t0 = today(c);
    let mut r = Lcg(20261123);
    for i in 0..25 {
        let (schema, table) = (random_name(&mut r), random_name(&mut r));
        let q = |s: &str| format!("$q${s}$q$");
        let target = format!("format('%I.%I', {}, {})::regclass", q(&schema), q(&table));
        let setup = c.script(&format!(
            "SET client_min_messages = warning;
             SELECT format('CREATE SCHEMA IF NOT EXISTS %I', {s}) \\gexec
             SELECT format('CREATE TABLE %I.%I (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int) PARTITION BY RANGE (id)', {s}, {t}) \\gexec",
            s = q(&schema),
            t = q(&table)
        ));
        assert!(
            setup.is_ok(),
            "case {i} {schema:?}.{table:?}: {:?}",
            setup.err()
        );
        let made = c.sql(&format!(
            "SELECT count(*) FROM snowflake_create_partitions({target}, '{t0}'::timestamptz - interval '2 days', '{t0}'::timestamptz + interval '1 day')"
        ));
        assert_eq!(made, "3", "case {i} {schema:?}.{table:?}");
        let made = c.sql(&format!(
            "SELECT count(DISTINCT c.relname), bool_and(i.inhparent = {target}), \
                    bool_and(c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = {target})), \
                    bool_and(octet_length(c.relname) <= 63 AND c.relname::text ~ '_[0-9]{{8}}$') \
               FROM snowflake_partitions({target}) p \
               JOIN pg_class c ON c.oid = p.partition JOIN pg_inherits i ON i.inhrelid = p.partition"
        ));
        assert_eq!(made, "3|t|t|t", "case {i} {schema:?}.{table:?}");
        // Rows route, the listing sees them, retention drops the two old days by their names.
        c.script(&format!(
            "SELECT format('INSERT INTO %s (n) VALUES (1)', {target}) \\gexec"
        ))
        .unwrap();
        assert_eq!(
            c.sql(&format!(
                "SELECT count(*) FROM snowflake_partitions({target})"
            )),
            "3",
            "case {i}"
        );
        let old = c.sql(&format!(
            "SELECT string_agg(partition::text, ',' ORDER BY to_id) FROM snowflake_partitions({target}) WHERE to_ts <= '{t0}'"
        ));
        let dropped = c.sql(&format!(
            "SELECT count(*), string_agg(d, ',') FROM snowflake_drop_partitions({target}, '{t0}') d"
        ));
        assert_eq!(dropped, format!("2|{old}"), "case {i} {schema:?}.{table:?}");
        assert_eq!(
            c.sql(&format!(
                "SELECT count(*) FROM snowflake_partitions({target})"
            )),
            "1"
        );
    }

    // Someone else's table: the caller's own rights apply (no SECURITY DEFINER), so an
    // ordinary role can neither add partitions to it nor drop them.
    c.sql("CREATE ROLE fuzz_other LOGIN; GRANT USAGE ON SCHEMA public TO fuzz_other");
    c.sql("CREATE TABLE theirs (id bigint PRIMARY KEY) PARTITION BY RANGE (id)");
    c.sql(&format!(
        "SELECT count(*) FROM snowflake_create_partitions('theirs', '{t0}'::timestamptz - interval '2 days', '{t0}')"
    ));
    for call in [
        format!("SELECT snowflake_create_partitions('theirs', '{t0}'::timestamptz + interval '5 days', '{t0}'::timestamptz + interval '6 days')"),
        format!("SELECT snowflake_drop_partitions('theirs', '{t0}')"),
    ] {
        let e = c.try_sql_as("fuzz_other", &call).expect_err(&call);
        assert_eq!(e.sqlstate, "42501", "{call}: {}", e.raw);
    }
    assert_eq!(partition_names(c, "theirs").len(), 2);
}

/// The documented daily job (partitions premade a week ahead, 90 days kept), run for every day of
/// a year from sessions in time zones with daylight-saving changes both ways, half-hour and
/// southern ones, and from the first days of a young epoch: it never fails, every partition is a
/// whole UTC day, and the bounds are those of UTC midnights (1.5.0 made a 25-hour partition in
/// New York in the autumn, then failed every day with a false 42P07; in the spring it failed at
/// once, and Lord Howe moved the bounds to 00:30 UTC).
#[test]
fn the_daily_job_never_fails_in_any_time_zone() {
    // A young epoch: the job's first 90 days ask to drop partitions older than the epoch.
    let mut c = Cluster::new(
        "partitions-tz",
        "snowflake.worker_id = 9\nsnowflake.epoch = '2025-01-10 00:00:00+00'",
    );
    c.start();
    c.sql(
        "CREATE EXTENSION snowflake; CREATE TABLE ev (id bigint NOT NULL) PARTITION BY RANGE (id)",
    );
    let zones = [
        "America/New_York",
        "Europe/London",
        "Australia/Lord_Howe",
        "UTC",
        "Asia/Kolkata",
        "America/St_Johns",
        "Pacific/Chatham",
    ];
    // One statement per simulated day, in one session per zone.
    let mut script = String::new();
    for day in 0..400 {
        let zone = zones[day % zones.len()];
        script.push_str(&format!(
            "SET TimeZone = '{zone}';
             SELECT count(*) FROM snowflake_create_partitions('ev', timestamptz '2025-01-10 13:37:00+00' + interval '{day} days', timestamptz '2025-01-10 13:37:00+00' + interval '{day} days' + interval '7 days');
             SELECT count(*) FROM snowflake_drop_partitions('ev', timestamptz '2025-01-10 13:37:00+00' + interval '{day} days' - interval '90 days');\n"
        ));
    }
    c.script(&script)
        .unwrap_or_else(|e| panic!("the daily job failed: {}", e.raw));
    // Every partition is one whole UTC day, from midnight to midnight.
    assert_eq!(
        c.sql("SET TimeZone = 'UTC'; SELECT count(*), bool_and(to_ts - from_ts = interval '24 hours'), bool_and(from_ts = date_trunc('day', from_ts)) FROM snowflake_partitions('ev')"),
        "97|t|t"
    );
}

/// Infinity and times past the layout are refused before any work, and a cut-off outside the
/// layout drops nothing (before the epoch) or every bounded partition (past its end); a
/// temporary parent is refused with its reason. (1.5.0 ran until cancelled for `infinity`,
/// returned nothing for a `from_ts` of `-infinity`, and raised 22008 for a cut-off before the
/// epoch, which rolled back the daily job's create too.)
#[test]
fn ranges_outside_the_layout_are_refused_before_any_work() {
    let c = server();
    c.sql("CREATE TABLE far (id bigint NOT NULL) PARTITION BY RANGE (id)");
    for (from, to) in [
        ("now()", "'infinity'"),
        ("'-infinity'", "now()"),
        ("'infinity'", "'infinity'"),
        ("now()", "'2080-07-11 00:00:00+00'"),
        ("'2010-11-03 00:00:00+00'", "now()"),
    ] {
        let e = c.sql_err(&format!(
            "SELECT snowflake_create_partitions('far', {from}, {to})"
        ));
        assert_eq!(e.sqlstate, "22008", "{from} .. {to}: {}", e.raw);
        assert_eq!(
            c.sql("SELECT count(*) FROM snowflake_partitions('far')"),
            "0"
        );
    }
    // More steps than one call makes.
    let e = c.sql_err(
        "SELECT snowflake_create_partitions('far', now(), now() + interval '20 years', '1 hour')",
    );
    assert_eq!(e.sqlstate, "54000", "{}", e.raw);
    c.sql("SELECT snowflake_create_partitions('far', now(), now() + interval '3 days')");
    for cutoff in [
        "'-infinity'",
        "'1999-01-01 00:00:00+00'",
        "'2010-11-04 01:42:54.657+00'",
    ] {
        assert_eq!(
            c.sql(&format!(
                "SELECT count(*) FROM snowflake_drop_partitions('far', {cutoff})"
            )),
            "0",
            "{cutoff}"
        );
    }
    assert_eq!(
        c.sql("SELECT count(*) FROM snowflake_drop_partitions('far', 'infinity')"),
        "3"
    );
    let e = c.sql_err("CREATE TEMPORARY TABLE tmp_ev (id bigint NOT NULL) PARTITION BY RANGE (id); SELECT snowflake_create_partitions('tmp_ev', now(), now() + interval '1 day')");
    assert_eq!(e.sqlstate, "0A000", "{}", e.raw);
}

/// The query that finds partitions 1.5.0 made off UTC midnight finds one made so (by hand here,
/// with the bounds of a 25-hour day in New York) and none of 1.6.0's.
#[test]
fn the_query_for_partitions_off_utc_finds_them() {
    let mut c = Cluster::new("partitions-off-utc", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE events (id bigint NOT NULL) PARTITION BY RANGE (id)");
    c.sql("SELECT snowflake_create_partitions('events', '2026-10-01 00:00:00+00', '2026-10-05 00:00:00+00')");
    c.sql("CREATE TABLE events_20261101 PARTITION OF events FOR VALUES FROM (snowflake_min_id('2026-11-01 04:00:00+00')) TO (snowflake_min_id('2026-11-02 05:00:00+00'))");
    let out = c.script(&readme_recipe("partitions-off-utc")).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    // (Named with its schema: the recipe's search_path is pg_catalog's only.)
    assert!(out.starts_with("public.events_20261101|"), "{out}");
}

/// A table named with bytes that are no UTF-8 in a SQL_ASCII database gets its partitions (1.6.0's
/// first cut converted the name to UTF-8 for its messages, and failed with 22021), and a
/// partition key of a megabyte is quoted by a prefix (every call logged all of it).
#[test]
fn odd_names_and_huge_keys_get_bounded_answers() {
    let mut c = Cluster::new("partitions-odd", "snowflake.worker_id = 9");
    c.start();
    c.sql("CREATE DATABASE sa ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
    let odd = "(SELECT oid FROM pg_class WHERE relname = repeat(convert_from('\\xe9', 'SQL_ASCII'), 40))::regclass";
    // One statement a call: psql before 15 prints only the last result of several.
    let sa = |sql: &str| {
        c.try_sql_in("sa", sql)
            .unwrap_or_else(|e| panic!("{sql}: {}", e.raw))
    };
    sa("CREATE EXTENSION snowflake");
    sa("DO $$BEGIN EXECUTE format('CREATE TABLE %I (id bigint NOT NULL) PARTITION BY RANGE (id)', repeat(convert_from('\\xe9', 'SQL_ASCII'), 40)); END$$");
    assert_eq!(
        sa(&format!("SELECT count(*) FROM snowflake_create_partitions({odd}, now(), now() + interval '2 days')")),
        "2"
    );
    assert_eq!(
        sa(&format!(
            "SELECT count(*) FROM snowflake_drop_partitions({odd}, 'infinity')"
        )),
        "2"
    );
    c.sql("CREATE EXTENSION snowflake");
    c.sql("DO $$BEGIN EXECUTE format('CREATE TABLE huge (id bigint NOT NULL) PARTITION BY RANGE ((id + length(%L)))', repeat('x', 1000000)); END$$");
    let e =
        c.sql_err("SELECT snowflake_create_partitions('huge', now(), now() + interval '1 day')");
    assert_eq!(e.sqlstate, "42809", "{}", &e.raw[..e.raw.len().min(300)]);
    assert!(e.detail.len() < 200, "a DETAIL of {} bytes", e.detail.len());
}

/// In a database whose default is `standard_conforming_strings = off` (a legacy setting, and one
/// a database's owner may set), partitions are read, made and dropped as elsewhere. The bounds
/// were parsed with a pattern whose backslashes that setting ate: `snowflake_partitions()` saw
/// none, a second create failed on an overlap, and retention dropped nothing, silently (a fresh
/// read of issue 58).
#[test]
fn partitions_work_where_strings_are_not_standard_conforming() {
    let c = server();
    c.sql("CREATE DATABASE legacy_strings");
    let set = "ALTER DATABASE legacy_strings SET standard_conforming_strings = off";
    if common::pg_major() >= 19 {
        // 19 no longer has the setting's `off`: the case cannot arise there.
        let e = c.sql_err(set);
        assert_eq!(e.sqlstate, "0A000", "{}", e.raw);
        return;
    }
    c.sql(set);
    let run = |sql: &str| {
        c.try_sql_in("legacy_strings", sql)
            .unwrap_or_else(|e| panic!("{sql}: {}", e.raw))
    };
    assert_eq!(run("SHOW standard_conforming_strings"), "off");
    run("CREATE EXTENSION snowflake; \
         CREATE TABLE ev (id bigint PRIMARY KEY DEFAULT snowflake_nextval()) PARTITION BY RANGE (id)");
    let t0 = today(c);
    let create = format!(
        "SELECT count(*) FROM snowflake_create_partitions('ev'::regclass, \
           '{t0}'::timestamptz - interval '3 days', '{t0}'::timestamptz + interval '2 days')"
    );
    assert_eq!(run(&create), "5");
    assert_eq!(run(&create), "0", "a second call made partitions again");
    assert_eq!(
        run("SELECT count(*) FROM snowflake_partitions('ev'::regclass)"),
        "5"
    );
    assert_eq!(
        run(&format!(
            "SELECT count(*) FROM snowflake_drop_partitions('ev'::regclass, '{t0}'::timestamptz - interval '1 day')"
        )),
        "2"
    );
}
