//! The SQL API against a real cluster: the shared test vectors, the generator, time ranges on the
//! primary key, and every error with its SQLSTATE.

mod common;
use common::Cluster;
use snowflake_core::layout::TEST_VECTORS;
use std::sync::OnceLock;

/// One server for the read-only checks of this file (datacenter 17, worker 25).
fn server() -> &'static Cluster {
    static S: OnceLock<Cluster> = OnceLock::new();
    common::shared_cluster(&S, || {
        let mut c = Cluster::new(
            "api",
            "snowflake.datacenter_id = 17\nsnowflake.worker_id = 25",
        );
        c.start();
        c.sql("CREATE EXTENSION snowflake");
        c
    })
}

#[test]
fn decode_and_compose_match_the_shared_vectors() {
    let s = server();
    // Two vectors as text, as a user reads them: the brief's, and the last ID there is.
    assert_eq!(
        s.sql("SET timezone = 'UTC'; SELECT created_at FROM snowflake_decode(910499571847892992)"),
        "2017-09-20 13:43:08.849+00"
    );
    assert_eq!(
        s.sql("SET timezone = 'UTC'; SELECT created_at FROM snowflake_decode(9223372036854775807)"),
        "2080-07-10 17:30:30.208+00"
    );
    for (id, unix_ms, dc, w, seq) in TEST_VECTORS {
        let ts = format!("to_timestamp({unix_ms}::numeric / 1000)");
        let got = s.sql(&format!(
            "SELECT created_at = {ts}, datacenter_id, worker_id, sequence FROM snowflake_decode({id})"
        ));
        assert_eq!(got, format!("t|{dc}|{w}|{seq}"), "decode {id}");
        let back = s.sql_i64(&format!("SELECT snowflake_compose({ts}, {dc}, {w}, {seq})"));
        assert_eq!(back, id, "compose {ts}");
        let field = s.sql(&format!(
            "SELECT (snowflake_decode({id})).created_at = snowflake_timestamp({id})"
        ));
        assert_eq!(field, "t");
    }
}

#[test]
fn nextval_increases_strictly_and_carries_the_node() {
    let s = server();
    let out = s.sql(
        "SELECT bool_and(id > prev), count(*), min(dc), max(dc), min(w), max(w), \
                max(abs(extract(epoch FROM now() - ts))) < 60 \
         FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev, (snowflake_decode(id)).datacenter_id AS dc, \
                      (snowflake_decode(id)).worker_id AS w, snowflake_timestamp(id) AS ts \
               FROM (SELECT n, snowflake_nextval() AS id FROM generate_series(1, 20000) n) x) y",
    );
    assert_eq!(out, "t|20000|17|17|25|25|t");
}

#[test]
fn time_range_query_is_a_primary_key_range_scan() {
    let s = server();
    s.sql(
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), at timestamptz NOT NULL DEFAULT clock_timestamp());
         INSERT INTO events (at) SELECT clock_timestamp() FROM generate_series(1, 5000);
         ANALYZE events",
    );
    let plan = s.sql(
        "SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT * FROM events \
         WHERE id BETWEEN snowflake_min_id(now() - interval '1 hour') AND snowflake_max_id(now())",
    );
    assert!(
        plan.contains("Index Scan using events_pkey")
            || plan.contains("Bitmap Index Scan on events_pkey"),
        "{plan}"
    );
    assert!(plan.contains("Index Cond: ((id >= "), "{plan}");
    // The range finds exactly the rows created in it, judged by their own timestamps.
    let out = s.sql(
        "WITH b AS (SELECT at FROM events ORDER BY id OFFSET 2000 LIMIT 1) \
         SELECT (SELECT count(*) FROM events WHERE id >= snowflake_min_id((SELECT at FROM b))) = \
                (SELECT count(*) FROM events WHERE date_trunc('milliseconds', snowflake_timestamp(id)) >= date_trunc('milliseconds', (SELECT at FROM b)))",
    );
    assert_eq!(out, "t");
    let bounds = s.sql(
        "SELECT snowflake_min_id('2017-09-20 13:43:08.849+00') <= 910499571847892992, \
                snowflake_max_id('2017-09-20 13:43:08.849+00') >= 910499571847892992, \
                snowflake_max_id('2017-09-20 13:43:08.848+00') < 910499571847892992, \
                snowflake_min_id('2017-09-20 13:43:08.850+00') > 910499571847892992",
    );
    assert_eq!(bounds, "t|t|t|t");
}

#[test]
fn bad_input_gets_a_clear_error_with_its_sqlstate() {
    let s = server();
    let cases = [
        ("SELECT * FROM snowflake_decode(-1)", "22023"),
        ("SELECT snowflake_timestamp(-9223372036854775808)", "22023"),
        ("SELECT snowflake_worker_id(-5)", "22023"),
        ("SELECT snowflake_compose(now(), 32, 0, 0)", "22023"),
        ("SELECT snowflake_compose(now(), 0, -1, 0)", "22023"),
        ("SELECT snowflake_compose(now(), 0, 0, 4096)", "22023"),
        (
            "SELECT snowflake_min_id('2010-11-04 01:42:54.656+00')",
            "22008",
        ),
        (
            "SELECT snowflake_max_id('2080-07-10 17:30:30.209+00')",
            "22008",
        ),
        ("SELECT snowflake_compose('1969-01-01', 0, 0, 0)", "22008"),
        ("SELECT snowflake_min_id('infinity')", "22008"),
        ("SELECT snowflake_max_id('-infinity')", "22008"),
    ];
    for (sql, code) in cases {
        let e = s.sql_err(sql);
        assert_eq!(e.sqlstate, code, "{sql}: {}", e.raw);
        assert!(
            e.message.chars().next().unwrap().is_lowercase() && !e.message.ends_with('.'),
            "style: {}",
            e.message
        );
        assert!(!e.detail.is_empty(), "{sql} has no DETAIL");
    }
    // NULL in, NULL out; and the server is still there.
    assert_eq!(
        s.sql("SELECT snowflake_decode(NULL) IS NULL, snowflake_min_id(NULL) IS NULL"),
        "t|t"
    );
}

#[test]
fn the_loaded_module_names_itself_and_its_version() {
    let c = server();
    if common::pg_major() >= 18 {
        assert_eq!(
            c.sql("SELECT module_name, version FROM pg_get_loaded_modules() WHERE file_name = 'snowflake.so'"),
            format!("snowflake|{}", env!("CARGO_PKG_VERSION"))
        );
    } else {
        // Before 18 a magic block has no name or version, and nothing lists loaded modules.
        let e = c.sql_err("SELECT * FROM pg_get_loaded_modules()");
        assert_eq!(e.sqlstate, "42883", "{}", e.raw);
    }
}

/// The servers this suite and the benchmark run are production-like builds: with OpenSSL, whose
/// generator `gen_random_uuid()` (and 18's `uuidv7()`) use, instead of a read of /dev/urandom per
/// call, which would handicap the UUIDs the benchmark compares against.
#[test]
fn the_server_under_test_is_an_openssl_build() {
    let c = server();
    assert_eq!(c.sql("SHOW ssl_library"), "OpenSSL");
    assert_eq!(
        c.sql("SELECT count(DISTINCT gen_random_uuid()) FROM generate_series(1, 1000)"),
        "1000"
    );
}

#[test]
fn custom_epoch_is_used_by_every_function() {
    let mut c = Cluster::new("epoch", "snowflake.epoch = '2015-01-01 00:00:00+00'");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    assert_eq!(c.sql("SELECT snowflake_min_id('2015-01-01 00:00:00+00'), snowflake_max_id('2015-01-01 00:00:00+00')"), "0|4194303");
    let out = c.sql(
        "SELECT abs(extract(epoch FROM snowflake_timestamp(snowflake_nextval()) - now())) < 60, \
                snowflake_nextval() > snowflake_min_id(now() - interval '1 minute')",
    );
    assert_eq!(out, "t|t");
    assert_eq!(c.sql("SHOW snowflake.epoch"), "2015-01-01 00:00:00+00");
    assert_eq!(
        c.sql_err("SELECT snowflake_min_id('2014-12-31 23:59:59+00')")
            .sqlstate,
        "22008"
    );
}

#[test]
fn without_preload_nextval_is_a_clear_error_and_the_session_survives() {
    let mut c = Cluster::with_preload("nopreload", "", false);
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    // Same session: the error, then ordinary work (a FATAL or a panic would end the session).
    let out = c.script("SELECT snowflake_nextval();");
    let e = out.expect_err("nextval must fail without preload");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(e.hint.contains("shared_preload_libraries"), "{}", e.raw);
    let survived = c.script(
        "\\set ON_ERROR_STOP 0\nSELECT snowflake_nextval();\n\\set ON_ERROR_STOP 1\nSELECT 'alive', snowflake_worker_id(910499571847892992);",
    );
    assert_eq!(survived.unwrap(), "alive|25");
    // Only this session is left (the scripts' backends exit after their psql does, so wait).
    c.wait_for(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
        "1",
        30,
    );
}

fn refuses_to_start(conf: &str, expected: &str) {
    let mut c = Cluster::new("badconf", conf);
    let log = c.try_start().expect_err("the server must refuse to start");
    assert!(
        log.contains("FATAL") && log.contains(expected),
        "expected {expected:?} in:\n{log}"
    );
}

#[test]
fn out_of_range_worker_id_stops_the_server_at_start() {
    refuses_to_start(
        "snowflake.worker_id = 32",
        "32 is outside the valid range for parameter \"snowflake.worker_id\" (0 .. 31)",
    );
}

#[test]
fn bad_settings_stop_the_server_at_start() {
    refuses_to_start(
        "snowflake.datacenter_id = -1",
        "-1 is outside the valid range for parameter \"snowflake.datacenter_id\" (0 .. 31)",
    );
    refuses_to_start(
        "snowflake.datacenter_id = 'abc'",
        "invalid value for parameter \"snowflake.datacenter_id\": \"abc\"",
    );
    refuses_to_start(
        "snowflake.epoch = 'tomorrow'",
        "invalid value for parameter \"snowflake.epoch\": \"tomorrow\"",
    );
    // Before 1970 (its 41 bits would also have ended in 2019): every call would fail with 22008.
    refuses_to_start(
        "snowflake.epoch = '1950-01-01'",
        "it must not be before 1970",
    );
    // An epoch whose 41 bits run past PostgreSQL's last timestamp: 1.5.0 started, and wrapped
    // every timestamp to 1969 or raised XX000.
    for epoch in ["9223372036854775807", "9224318016000000"] {
        refuses_to_start(
            &format!("snowflake.epoch = '{epoch}'"),
            "run past PostgreSQL's last timestamp",
        );
    }
    refuses_to_start(
        "snowflake.max_clock_drift = '0'",
        "outside the valid range for parameter \"snowflake.max_clock_drift\"",
    );
    // No database: 1.6.0 started, and its lease worker failed to connect once a second.
    refuses_to_start(
        "snowflake.database = ''",
        "invalid value for parameter \"snowflake.database\": \"\"",
    );
    // An integer in ms: the bounds in its unit, as PostgreSQL writes them.
    refuses_to_start(
        "snowflake.claim_expiry = '1s'",
        "1000 ms is outside the valid range for parameter \"snowflake.claim_expiry\" (15000 ms .. 86400000 ms)",
    );
}

/// The settings are parsed by PostgreSQL's own parsers with their unit flags, so a value means
/// what PostgreSQL means by it: a fraction of any of its time units (an integer setting rounds
/// it), a hexadecimal integer; and a unit PostgreSQL does not know stops the server with
/// PostgreSQL's message and its HINT.
#[test]
fn settings_are_parsed_as_postgresql_parses_them() {
    let settings = "SELECT string_agg(name || '=' || setting || coalesce(' ' || unit, ''), ', ' ORDER BY name) FROM pg_settings WHERE name IN ('snowflake.max_clock_drift', 'snowflake.claim_expiry', 'snowflake.worker_id')";
    let mut c = Cluster::new(
        "units",
        "snowflake.max_clock_drift = '1.5min'\nsnowflake.claim_expiry = '1.5min'\nsnowflake.worker_id = '0x1F'",
    );
    c.start();
    assert_eq!(
        c.sql(settings),
        "snowflake.claim_expiry=90000 ms, snowflake.max_clock_drift=90000 ms, snowflake.worker_id=31"
    );
    assert_eq!(c.sql("SHOW snowflake.claim_expiry"), "90s");
    c.sql("CREATE EXTENSION snowflake");
    assert_eq!(
        c.sql("SELECT max_clock_drift_ms, worker_id FROM snowflake_node()"),
        "90000|31"
    );
    // What PostgreSQL itself says of a unit it does not know, for a setting in ms of its own.
    let own = c.sql_err("SET statement_timeout = '5 parsecs'");
    assert_eq!(own.sqlstate, "22023", "{}", own.raw);
    assert!(
        own.hint.starts_with("Valid units for this parameter are"),
        "{}",
        own.raw
    );

    // An integer setting in ms rounds a fraction of a unit to the nearest ms: 20000.6 ms.
    c.stop("fast");
    c.conf("snowflake.claim_expiry = '20.0006s'");
    c.start();
    assert_eq!(c.sql("SHOW snowflake.claim_expiry"), "20001ms");

    c.stop("fast");
    for (setting, value) in [
        ("max_clock_drift", "5 parsecs"),
        ("claim_expiry", "1.5 fortnights"),
    ] {
        c.conf(&format!("snowflake.{setting} = '{value}'"));
        let log = c.try_start().expect_err("the server must refuse to start");
        let message =
            format!("FATAL:  invalid value for parameter \"snowflake.{setting}\": \"{value}\"");
        let hint = format!("HINT:  {}", own.hint);
        assert!(
            log.contains(&message) && log.contains(&hint),
            "expected {message:?} and {hint:?} in:\n{log}"
        );
        c.conf(&format!("snowflake.{setting} = '10s'"));
    }
}

#[test]
fn a_misspelled_setting_stops_the_server_and_names_itself() {
    // PostgreSQL alone would warn and run as worker 0: how two servers come to share a pair.
    let mut c = Cluster::new("typo", "snowflake.workerid = 7");
    let log = c.try_start().expect_err("the server must refuse to start");
    assert!(
        log.contains("FATAL")
            && log.contains("unrecognized configuration parameter \"snowflake.workerid\"")
            && log.contains("Did you mean \"snowflake.worker_id\"?"),
        "{log}"
    );
}

#[test]
fn an_epoch_later_than_the_clock_keeps_the_server_up_and_refuses_ids_until_it_passes() {
    // A machine without a hardware clock boots at 1970 until NTP sets it: the epoch then lies in
    // the future. The server must run (other databases, other extensions); IDs wait.
    let mut c = Cluster::new("future-epoch", "snowflake.epoch = '2999-01-01'");
    c.start();
    assert!(
        c.log()
            .contains("snowflake.epoch \"2999-01-01\" is later than the system clock"),
        "{}",
        c.log()
    );
    c.sql("CREATE EXTENSION snowflake");
    let e = c.sql_err("SELECT snowflake_nextval()");
    assert_eq!(e.sqlstate, "58000", "{}", e.raw);
    assert!(
        e.message.contains("reads before snowflake.epoch")
            && e.detail.contains("ms before the epoch"),
        "{}",
        e.raw
    );
    assert!(
        e.hint.contains("once the clock passes the epoch"),
        "{}",
        e.raw
    );
    // The pure functions work, with that epoch.
    assert_eq!(
        c.sql("SELECT snowflake_timestamp(0) = '2999-01-01 00:00:00+00'"),
        "t"
    );
    assert_eq!(c.sql("SELECT errors > 0 FROM snowflake_stats()"), "t");
}

#[test]
fn a_server_whose_pair_nobody_set_warns_once_and_says_so() {
    // Two servers left on the default pair (0, 0) issue the same IDs. A server whose
    // snowflake.datacenter_id and snowflake.worker_id no source set starts (a single server needs
    // no pair), warns once in the log, and snowflake_node() says so in every backend.
    const WARNING: &str = "WARNING:  snowflake.datacenter_id and snowflake.worker_id are not set";
    let node = "SELECT datacenter_id, worker_id, pair_set FROM snowflake_node()";
    let mut c = Cluster::new("default-pair", "");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    assert_eq!(c.sql(node), "0|0|f");
    let log = c.log();
    assert_eq!(log.matches(WARNING).count(), 1, "{log}");
    assert!(
        log.contains("DETAIL:  Both settings are at their defaults, so this server's pair is (0, 0). Two servers with the same pair can issue the same IDs.")
            && log.contains("HINT:  Set snowflake.datacenter_id and snowflake.worker_id in postgresql.conf to a pair that no other server uses, and restart. A single server can ignore this."),
        "{log}"
    );

    // Either setting set by any source, even to 0, is a choice: no warning, and pair_set says so.
    // postgresql.auto.conf (ALTER SYSTEM):
    c.sql("ALTER SYSTEM SET snowflake.worker_id = 0");
    c.stop("fast");
    c.start();
    assert_eq!(c.sql(node), "0|0|t");
    // The command line:
    c.sql("ALTER SYSTEM RESET snowflake.worker_id");
    c.stop("fast");
    c.options = "-c snowflake.datacenter_id=0".into();
    c.start();
    assert_eq!(c.sql(node), "0|0|t");
    assert_eq!(c.log().matches(WARNING).count(), 1, "{}", c.log());
    // Nothing set again: it warns again.
    c.stop("fast");
    c.options.clear();
    c.start();
    assert_eq!(c.sql(node), "0|0|f");
    assert_eq!(c.log().matches(WARNING).count(), 2, "{}", c.log());

    // postgresql.conf, both at 0:
    let mut d = Cluster::new(
        "chosen-pair",
        "snowflake.datacenter_id = 0\nsnowflake.worker_id = 0",
    );
    d.start();
    d.sql("CREATE EXTENSION snowflake");
    assert_eq!(d.sql(node), "0|0|t");
    assert!(!d.log().contains("are not set"), "{}", d.log());
}

#[test]
fn sixteen_pgbench_clients_insert_320000_rows_without_a_duplicate() {
    let mut c = Cluster::new("pgbench", "max_connections = 40\nsnowflake.worker_id = 3");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int)");
    c.pgbench_ok(
        "INSERT INTO t (v) VALUES (1);\n",
        &["-c", "16", "-j", "2", "-t", "20000"],
    );
    assert_eq!(c.sql("SELECT count(*), count(DISTINCT id), min(snowflake_worker_id(id)), max(snowflake_worker_id(id)) FROM t"), "320000|320000|3|3");
}

#[test]
fn three_million_rows_in_one_statement() {
    let mut c = Cluster::new("bulk", "");
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)");
    c.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 3000000) g");
    // Ordered by insertion, IDs must be strictly increasing (the PK already proves uniqueness).
    let out = c.sql(
        "SELECT count(*), count(*) FILTER (WHERE id <= prev) FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM t) x",
    );
    assert_eq!(out, "3000000|0");
}

#[test]
fn parallel_workers_share_the_one_generator() {
    let mut c = Cluster::new(
        "parallel",
        "max_worker_processes = 8\nmax_parallel_workers_per_gather = 4",
    );
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE TABLE src AS SELECT g FROM generate_series(1, 400000) g; ANALYZE src");
    // The IDs really come from parallel workers as well as the leader.
    let plan = c
        .script(
            "SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;\n\
             EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) CREATE TABLE ids AS SELECT snowflake_nextval() AS id FROM src;",
        )
        .unwrap();
    let launched: u32 = plan
        .lines()
        .find_map(|l| l.trim().strip_prefix("Workers Launched: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a parallel plan:\n{plan}"));
    assert!(launched > 0, "no parallel worker ran:\n{plan}");
    assert_eq!(
        c.sql("SELECT count(*), count(DISTINCT id) FROM ids"),
        "400000|400000"
    );
}

/// The short text forms: fixed width, round trip, string order = numeric order over the whole
/// range (0 and the maximum included), the declared properties, and 22P02 naming the character.
#[test]
fn short_text_forms_sort_like_the_number_and_name_bad_characters() {
    let s = server();
    // The README's recipe, as written.
    let out = s.script(&common::readme_recipe("short-forms")).unwrap();
    assert!(out.contains("15G63YLn9Ae|0S8NYH5E27400"), "{out}");
    assert!(
        out.contains("910499571847892992|910499571847892992|910499571847892992"),
        "{out}"
    );
    assert_eq!(
        s.sql("SELECT snowflake_to_base62(0), snowflake_to_base32(0), snowflake_to_base62(9223372036854775807), snowflake_to_base32(9223372036854775807)"),
        "00000000000|0000000000000|AzL8n0Y58m7|7ZZZZZZZZZZZZ"
    );
    // 20,000 values spread over the whole range, both ends and neighbours included: sorted as
    // strings (byte order) they come in numeric order, and each parses back.
    let checks = s.sql(
        "WITH v AS (
           SELECT DISTINCT x FROM (
             SELECT (random() * 9223372036854775807)::numeric::bigint AS x FROM generate_series(1, 10000)
             UNION ALL SELECT (random() * 4294967296)::bigint FROM generate_series(1, 5000)
             UNION ALL SELECT unnest(ARRAY[0, 1, 61, 62, 63, 31, 32, 33, 9223372036854775806, 9223372036854775807])
             UNION ALL SELECT snowflake_nextval() FROM generate_series(1, 5000)) r),
         f AS (SELECT x, snowflake_to_base62(x) COLLATE \"C\" AS b62, snowflake_to_base32(x) COLLATE \"C\" AS b32 FROM v)
         SELECT count(*) >= 19000,
                bool_and(length(b62) = 11 AND length(b32) = 13),
                bool_and(snowflake_from_base62(b62) = x AND snowflake_from_base32(b32) = x),
                bool_and(snowflake_from_base32(lower(b32)) = x),
                (SELECT array_agg(x ORDER BY b62) = array_agg(x ORDER BY x) FROM f),
                (SELECT array_agg(x ORDER BY b32) = array_agg(x ORDER BY x) FROM f)
         FROM f",
    );
    assert_eq!(checks, "t|t|t|t|t|t");
    // IMMUTABLE STRICT PARALLEL SAFE, so usable in indexes and parallel plans; NULL gives NULL.
    assert_eq!(
        s.sql("SELECT string_agg(DISTINCT provolatile::text || proisstrict::text || proparallel::text, ',') FROM pg_proc \
               WHERE proname IN ('snowflake_to_base62', 'snowflake_from_base62', 'snowflake_to_base32', 'snowflake_from_base32')"),
        "itrues"
    );
    assert_eq!(
        s.sql("SELECT snowflake_to_base62(NULL) IS NULL AND snowflake_from_base32(NULL) IS NULL"),
        "t"
    );
    // Bad input: 22P02 naming the character and its position, 22003 beyond bigint.
    for (sql, code, says) in [
        (
            "SELECT snowflake_from_base62('15G63YLn9A-')",
            "22P02",
            "invalid character \"-\" at position 11 of a base62 snowflake ID",
        ),
        (
            "SELECT snowflake_from_base32('0S8NYH5E274U0')",
            "22P02",
            "invalid character \"U\" at position 12 of a Crockford base32 snowflake ID",
        ),
        (
            "SELECT snowflake_from_base32('0S8NYH5E2740')",
            "22P02",
            "a Crockford base32 snowflake ID has 13 characters, not 12",
        ),
        (
            "SELECT snowflake_from_base62('15G63YLn9Ae0')",
            "22P02",
            "a base62 snowflake ID has 11 characters, not 12",
        ),
        (
            "SELECT snowflake_from_base62('zzzzzzzzzzz')",
            "22003",
            "base62 value is out of range for type bigint",
        ),
        (
            "SELECT snowflake_from_base32('8000000000000')",
            "22003",
            "Crockford base32 value is out of range for type bigint",
        ),
        (
            "SELECT snowflake_to_base62(-1)",
            "22023",
            "invalid snowflake ID -1",
        ),
        (
            "SELECT snowflake_from_base32(repeat('-', 20) || '0000000000001')",
            "22P02",
            "has at most 26 characters with its hyphens, not 33 bytes",
        ),
    ] {
        let e = s.sql_err(sql);
        assert_eq!(e.sqlstate, code, "{sql}: {}", e.raw);
        assert!(e.message.contains(says), "{sql}: {}", e.raw);
    }
    // In a LATIN1 and an SQL_ASCII database, a character outside ASCII is 22P02 naming its byte
    // (1.4.0 gave XX000, a caught panic of the UTF-8 conversion).
    for (db, encoding, byte) in [
        ("latin1", "LATIN1", "0xE9"),
        ("sqlascii", "SQL_ASCII", "0xC3"),
    ] {
        s.sql(&format!("CREATE DATABASE {db} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"));
        s.try_sql_in(db, "CREATE EXTENSION snowflake").unwrap();
        for f in [
            "snowflake_from_base62('0é000000000')",
            "snowflake_from_base32('0é00000000000')",
        ] {
            // The client speaks UTF-8, which the server converts into the database's encoding.
            let out = s
                .psql_cmd(db)
                .env("PGCLIENTENCODING", "UTF8")
                .arg("-c")
                .arg(format!("SELECT {f}"))
                .output()
                .unwrap();
            assert!(
                !out.status.success(),
                "{db}: a non-ASCII character was accepted"
            );
            let e = common::parse_error(&String::from_utf8_lossy(&out.stderr));
            assert_eq!(e.sqlstate, "22P02", "{db}: {f}: {}", e.raw);
            assert!(
                e.message
                    .contains(&format!("byte {byte}, not ASCII) at position 2")),
                "{db}: {f}: {}",
                e.raw
            );
        }
        assert_eq!(
            s.try_sql_in(db, "SELECT snowflake_from_base62('15G63YLn9Ae'), snowflake_from_base32('0s8n-yh5e-27400')").unwrap(),
            "910499571847892992|910499571847892992"
        );
    }
    // Crockford's case rules: lower case, I/L as 1, O as 0, hyphens ignored.
    assert_eq!(
        s.sql("SELECT snowflake_from_base32('000000000000i') = 1 AND snowflake_from_base32('000000000000L') = 1 \
               AND snowflake_from_base32('oooo-oooo-ooooo') = 0 AND snowflake_from_base32('0s8n-yh5e-27400') = 910499571847892992"),
        "t"
    );
}

/// A value of `snowflake.epoch` that would stop the next start is refused when it is set, with
/// the DETAIL that start would give (1.5.0 took it, and the next restart failed); a good one is
/// taken, and the server starts with it.
#[test]
fn alter_system_refuses_an_epoch_that_would_stop_the_next_start() {
    let mut c = Cluster::new("epoch-alter-system", "snowflake.worker_id = 4");
    c.start();
    for (value, detail) in [
        ("garbage", "is not a timestamp"),
        ("1950-01-01 00:00:00+00", "must not be before 1970"),
        (
            "9223372036854775807",
            "run past PostgreSQL's last timestamp",
        ),
    ] {
        let e = c.sql_err(&format!("ALTER SYSTEM SET snowflake.epoch = '{value}'"));
        assert_eq!(e.sqlstate, "22023", "{value}: {}", e.raw);
        assert!(
            e.message
                .contains("invalid value for parameter \"snowflake.epoch\""),
            "{value}: {}",
            e.raw
        );
        assert!(e.detail.contains(detail), "{value}: {}", e.raw);
        assert!(e.hint.contains("past UTC timestamp"), "{value}: {}", e.raw);
    }
    c.sql("ALTER SYSTEM SET snowflake.epoch = '2015-01-01 00:00:00+00'");
    c.stop("fast");
    c.start();
    assert_eq!(c.sql("SHOW snowflake.epoch"), "2015-01-01 00:00:00+00");
    // A bad value written into the file by hand: a reload logs it and keeps the server as it is.
    c.conf("snowflake.epoch = 'garbage'");
    c.sql("SELECT pg_reload_conf()");
    assert!(common::eventually(10, || c.log().contains(
        "invalid value for parameter \"snowflake.epoch\": \"garbage\""
    )));
    assert_eq!(c.sql("SHOW snowflake.epoch"), "2015-01-01 00:00:00+00");
}

/// Issue 49, items 3 to 6: what 1.6.0 got wrong at the edges of unadopt, the settings and the
/// errors.
#[test]
fn issue_49_unadopt_settings_and_errors() {
    let mut c = Cluster::new("issue49-edges", "snowflake.worker_id = 3");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    // 3: a partitioned table's partitions keep a default after unadopt on every major (15 and 16
    // give the identity to the parent only), drawn from the same sequence.
    c.sql("CREATE TABLE pe (id bigint DEFAULT snowflake_nextval(), v text) PARTITION BY RANGE (id);
           SELECT count(*) FROM snowflake_create_partitions('pe', now() - interval '1 day', now() + interval '1 day');
           INSERT INTO pe (v) VALUES ('before')");
    let part =
        c.sql("SELECT partition FROM snowflake_partitions('pe') ORDER BY from_id DESC LIMIT 1");
    let max = c.sql_i64("SELECT snowflake_unadopt('pe')");
    let direct = c.sql_i64(&format!(
        "INSERT INTO {part} (v) VALUES ('direct') RETURNING id"
    ));
    let parent = c.sql_i64("INSERT INTO pe (v) VALUES ('parent') RETURNING id");
    assert!(direct > max && parent > direct, "{max} {direct} {parent}");
    // 4: a nullable key is made NOT NULL where no key is NULL; a NULL key is refused, and
    // nothing is changed.
    c.sql("CREATE TABLE nk (id bigint DEFAULT snowflake_nextval(), v text); INSERT INTO nk (v) VALUES ('a')");
    assert!(c.sql_i64("SELECT snowflake_unadopt('nk')") > 0);
    assert_eq!(
        c.sql("SELECT attnotnull, attidentity FROM pg_attribute WHERE attrelid = 'nk'::regclass AND attname = 'id'"),
        "t|d"
    );
    c.sql("CREATE TABLE nn (id bigint DEFAULT snowflake_nextval(), v text); INSERT INTO nn (id, v) VALUES (NULL, 'a')");
    let e = c.sql_err("SELECT snowflake_unadopt('nn')");
    assert_eq!(e.sqlstate, "23502", "{}", e.raw);
    assert!(
        e.message.contains("has NULL keys") && e.hint.contains("UPDATE"),
        "{}",
        e.raw
    );
    assert_eq!(
        c.sql("SELECT attnotnull, attidentity = '' FROM pg_attribute WHERE attrelid = 'nn'::regclass AND attname = 'id'"),
        "f|t"
    );
    // 5: a pair source the next start would refuse is refused when it is set.
    let e = c.sql_err("ALTER SYSTEM SET snowflake.pair_source = 'nonsense'");
    assert_eq!(e.sqlstate, "22023", "{}", e.raw);
    assert!(e.detail.contains("config"), "{}", e.raw);
    c.sql("ALTER SYSTEM SET snowflake.pair_source = 'config'");
    c.sql("ALTER SYSTEM RESET snowflake.pair_source");
    // 6: a missing relation is 42P01; a floor too far ahead speaks of a floor, not of keys.
    let e = c.sql_err("SELECT * FROM snowflake_partitions(0)");
    assert_eq!(e.sqlstate, "42P01", "{}", e.raw);
    let e = c.sql_err("SELECT snowflake_set_floor(9223372036854775807)");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(
        e.message.starts_with("floor 9223372036854775807 is above"),
        "{}",
        e.raw
    );
}

/// A refusal at start-up names the file and line that set the bad value, as PostgreSQL recorded
/// them (1.6.0's HINT said "Fix the setting in postgresql.conf (or postgresql.auto.conf)" for a
/// value in `conf.d/snowflake.conf`), and the command line for `-c`.
#[test]
fn a_refusal_at_start_names_the_file_and_line_of_the_setting() {
    let mut c = Cluster::new("conf-line", "include_dir = 'conf.d'");
    let dir = c.data.join("conf.d");
    let file = dir.join("snowflake.conf");
    let refused = |c: &mut Cluster, text: &str, expected: &[String]| {
        std::fs::write(&file, text).unwrap();
        let log = c.try_start().expect_err("the server must refuse to start");
        for e in expected {
            assert!(log.contains(e.as_str()), "expected {e:?} in:\n{log}");
        }
    };
    std::fs::create_dir_all(&dir).unwrap();
    let at = |line: u32| format!("at line {line} of \"{}\"", file.display());
    refused(
        &mut c,
        "# snowflake\n\nsnowflake.worker_id = 32\n",
        &[format!(
            "HINT:  Fix it {} and start the server again.",
            at(3)
        )],
    );
    refused(
        &mut c,
        "snowflake.track_horizon = maybe\n",
        &[format!("HINT:  Use on or off {} and start", at(1))],
    );
    refused(
        &mut c,
        "\nsnowflake.workerid = 7\n",
        &[format!(
            "HINT:  Did you mean \"snowflake.worker_id\"? Fix it {} and start",
            at(2)
        )],
    );
    // A time in ms out of range: the bounds as integers (PostgreSQL's %g gave 2.19902e+12).
    refused(
        &mut c,
        "snowflake.max_clock_drift = '50ms'\n",
        &[
            "50 ms is outside the valid range for parameter \"snowflake.max_clock_drift\" (100 ms .. 2199023255551 ms)".to_string(),
            format!("HINT:  Fix it {} and start the server again.", at(1)),
        ],
    );
    // A pair from Citus without its database, or beside a pair setting it replaces: the place
    // of each setting (1.6.0 said "in postgresql.conf").
    refused(
        &mut c,
        "snowflake.pair_source = 'citus'\n",
        &[format!(
            "HINT:  Set snowflake.citus_database to that database beside snowflake.pair_source (set {}), and start the server again.",
            at(1)
        )],
    );
    refused(
        &mut c,
        "snowflake.pair_source = 'citus'\nsnowflake.citus_database = 'postgres'\nsnowflake.worker_id = 3\n",
        &[format!("HINT:  Remove snowflake.worker_id {} (with ALTER SYSTEM RESET", at(3))],
    );
    // A unit PostgreSQL does not know: its HINT stays, the place is in the DETAIL.
    refused(
        &mut c,
        "snowflake.max_clock_drift = '5 parsecs'\n",
        &[format!("It is set {}.", at(1))],
    );
    std::fs::write(&file, "").unwrap();
    c.options = "-c snowflake.worker_id=40".into();
    let log = c.try_start().expect_err("the server must refuse to start");
    assert!(
        log.contains("HINT:  Fix it on the server's command line and start the server again."),
        "{log}"
    );
}
