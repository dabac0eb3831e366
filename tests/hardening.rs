//! Every SQL function fed random and extreme inputs through a real server: each call gives the
//! answer the pure core computes, or a clear error with the right SQLSTATE, never a crash; and
//! the functions carry the volatility, strictness and parallel-safety labels they should.

mod common;
use common::Cluster;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use snowflake::core::layout::{self, LayoutError, TWITTER_EPOCH_MS};

/// Runs each query in its own subtransaction and returns its result as text, or its SQLSTATE.
const PROBE: &str = "CREATE FUNCTION probe(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    EXECUTE q INTO r;
    RETURN coalesce(r, 'NULL');
EXCEPTION WHEN OTHERS THEN
    RETURN 'ERROR ' || SQLSTATE;
END $$";

fn expected<T: ToString>(r: Result<T, LayoutError>) -> String {
    match r {
        Ok(v) => v.to_string(),
        Err(LayoutError::BeforeEpoch { .. } | LayoutError::PastEnd { .. }) => "ERROR 22008".into(),
        Err(_) => "ERROR 22023".into(),
    }
}

/// A timestamptz literal for Unix milliseconds (exact, unlike to_timestamp's float).
fn ts(ms: i64) -> String {
    format!("('epoch'::timestamptz + {ms}::bigint * interval '1 millisecond')")
}

/// Evaluates all (query, expected) pairs in one round trip and reports every mismatch.
fn check(c: &Cluster, cases: &[(String, String)]) {
    let values = cases
        .iter()
        .map(|(q, _)| format!("({})", quote(q)))
        .collect::<Vec<_>>()
        .join(",");
    // Too long for a command line: through a script file.
    let out = c
        .script(&format!(
            "SELECT string_agg(probe(q), E'\\n' ORDER BY n) FROM (SELECT row_number() OVER () n, q FROM (VALUES {values}) v(q)) x;"
        ))
        .unwrap_or_else(|e| panic!("the probe query itself failed: {}", e.raw));
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), cases.len());
    let bad: Vec<String> = cases
        .iter()
        .zip(got)
        .filter(|((_, want), got)| want != got)
        .map(|((q, want), got)| format!("{q}: want {want}, got {got}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn id_cases(id: i64) -> Vec<(String, String)> {
    let parts = layout::decompose(id);
    vec![
        (
            format!("SELECT (extract(epoch FROM snowflake_timestamp({id})) * 1000)::bigint::text"),
            expected(layout::unix_ms_of(id, TWITTER_EPOCH_MS)),
        ),
        (
            format!("SELECT snowflake_datacenter_id({id})::text"),
            expected(parts.map(|p| p.datacenter)),
        ),
        (
            format!("SELECT snowflake_worker_id({id})::text"),
            expected(parts.map(|p| p.worker)),
        ),
        (
            format!("SELECT snowflake_sequence({id})::text"),
            expected(parts.map(|p| p.sequence)),
        ),
        (
            format!("SELECT (snowflake_decode({id})).sequence::text"),
            expected(parts.map(|p| p.sequence)),
        ),
    ]
}

fn time_cases(ms: i64, dc: i32, w: i32, seq: i32) -> Vec<(String, String)> {
    let e = TWITTER_EPOCH_MS;
    let compose = layout::ms_since_epoch(ms, e)
        .and_then(|m| layout::compose(m, dc.into(), w.into(), seq.into()));
    vec![
        (
            format!("SELECT snowflake_min_id({})::text", ts(ms)),
            expected(layout::min_id(ms, e)),
        ),
        (
            format!("SELECT snowflake_max_id({})::text", ts(ms)),
            expected(layout::max_id(ms, e)),
        ),
        (
            format!(
                "SELECT snowflake_compose({}, {dc}, {w}, {seq})::text",
                ts(ms)
            ),
            expected(compose),
        ),
    ]
}

#[test]
fn random_and_extreme_inputs_get_an_answer_or_a_clear_error_never_a_crash() {
    let mut c = Cluster::new("harden", "");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    c.sql(PROBE);
    let started = c.sql("SELECT pg_postmaster_start_time()");

    let mut cases = Vec::new();
    for id in [
        i64::MIN,
        i64::MIN + 1,
        -4194304,
        -1,
        0,
        1,
        4095,
        4096,
        4194303,
        4194304,
        i64::MAX - 1,
        i64::MAX,
    ] {
        cases.extend(id_cases(id));
    }
    // PostgreSQL's own limits (4713 BC, 294276 AD), the epoch and the end of 41 bits.
    let end = TWITTER_EPOCH_MS + layout::MAX_TIMESTAMP as i64;
    let pg_min = -210_866_803_200_000;
    let pg_max = 9_224_318_015_999_999;
    for ms in [
        pg_min,
        -1,
        0,
        TWITTER_EPOCH_MS - 1,
        TWITTER_EPOCH_MS,
        TWITTER_EPOCH_MS + 1,
        end - 1,
        end,
        end + 1,
        pg_max,
    ] {
        for (dc, w, seq) in [
            (0, 0, 0),
            (31, 31, 4095),
            (32, 0, 0),
            (0, -1, 0),
            (0, 0, 4096),
            (i32::MIN, i32::MAX, i32::MIN),
        ] {
            cases.extend(time_cases(ms, dc, w, seq));
        }
    }
    for f in ["snowflake_min_id", "snowflake_max_id"] {
        for inf in ["infinity", "-infinity"] {
            cases.push((format!("SELECT {f}('{inf}')::text"), "ERROR 22008".into()));
        }
    }
    cases.push((
        "SELECT snowflake_compose('infinity', 0, 0, 0)::text".into(),
        "ERROR 22008".into(),
    ));
    for f in [
        "snowflake_timestamp(NULL)",
        "snowflake_decode(NULL)",
        "snowflake_min_id(NULL)",
        "snowflake_compose(now(), NULL, 0, 0)",
    ] {
        cases.push((format!("SELECT {f}::text"), "NULL".into()));
    }
    check(&c, &cases);

    // Random inputs, as property tests: 300 IDs and 300 (time, fields) tuples.
    let mut runner = TestRunner::new(Config::default());
    let mut cases = Vec::new();
    let ids = any::<i64>();
    let times = (pg_min..pg_max, -2i32..40, -2i32..40, -10i32..4200);
    for _ in 0..300 {
        cases.extend(id_cases(ids.new_tree(&mut runner).unwrap().current()));
        let (ms, dc, w, seq) = times.new_tree(&mut runner).unwrap().current();
        cases.extend(time_cases(ms, dc, w, seq));
    }
    check(&c, &cases);

    assert_eq!(
        c.sql("SELECT pg_postmaster_start_time()"),
        started,
        "the server restarted"
    );
    assert!(
        !c.log().contains("terminated by signal"),
        "a backend crashed:\n{}",
        c.log()
    );
}

#[test]
fn functions_carry_the_right_labels() {
    let mut c = Cluster::new("labels", "");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    let got = c.sql(
        "SELECT string_agg(format('%s %s %s %s', p.oid::regprocedure, p.provolatile, p.proisstrict, p.proparallel), E'\\n' \
                ORDER BY p.oid::regprocedure::text) \
         FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
         JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake'",
    );
    // volatility (i immutable, s stable, v volatile), strict, parallel (s safe, r restricted, u unsafe)
    let want = "\
_snowflake_adopt_lock(regclass,name) v t u
_snowflake_adopt_switch(regclass,name) v t u
_snowflake_create_partitions(regclass,timestamp with time zone[],bigint[]) v t u
_snowflake_drop_partitions(regclass,oid[]) v t u
_snowflake_max_key(regclass,name,boolean) v t u
_snowflake_partition_steps(regclass,timestamp with time zone,timestamp with time zone,interval,timestamp with time zone,timestamp with time zone) v t u
snowflake_adopt(regclass,name) v t u
snowflake_advance_horizon() v t r
snowflake_compose(timestamp with time zone,integer,integer,integer) i t s
snowflake_create_partitions(regclass,timestamp with time zone,timestamp with time zone,interval) v t u
snowflake_datacenter_id(bigint) i t s
snowflake_decode(bigint) i t s
snowflake_drop_partitions(regclass,timestamp with time zone) v t u
snowflake_from_base32(text) i t s
snowflake_from_base62(text) i t s
snowflake_guard() v f u
snowflake_horizon() v t r
snowflake_horizon_holders() v t r
snowflake_max_id(timestamp with time zone) i t s
snowflake_min_id(timestamp with time zone) i t s
snowflake_nextval() v t s
snowflake_node() v t s
snowflake_partitions(regclass) s t s
snowflake_sequence(bigint) i t s
snowflake_set_floor(bigint) v t u
snowflake_set_floor_from(regclass,name) v t u
snowflake_stats() v t s
snowflake_timestamp(bigint) i t s
snowflake_to_base32(bigint) i t s
snowflake_to_base62(bigint) i t s
snowflake_unadopt(regclass,name) v t u
snowflake_worker_id(bigint) i t s";
    assert_eq!(got, want);
}

/// Text of every byte and of any size, in every server encoding, at every function that takes
/// text (and the partition helpers' arguments): each call answers or raises a clear error whose
/// DETAIL quotes a bounded prefix of the input, and the server never restarts. (1.5.0 quoted the
/// whole input with each byte escaped: 270 million bytes overran the 1 GB allocation limit while
/// the error was built, aborting the backend and restarting every process.)
#[test]
fn text_of_any_byte_and_size_never_takes_the_server_down() {
    let mut c = Cluster::new("fuzz-text", "snowflake.worker_id = 9");
    c.start();
    let started = c.sql("SELECT pg_postmaster_start_time()");
    let mut runner = TestRunner::new(Config::default());
    for (db, encoding) in [
        ("u8", "UTF8"),
        ("l1", "LATIN1"),
        ("sa", "SQL_ASCII"),
        ("ej", "EUC_JP"),
    ] {
        c.sql(&format!("CREATE DATABASE {db} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"));
        c.try_sql_in(db, "CREATE EXTENSION snowflake").unwrap();
        c.try_sql_in(db, PROBE).unwrap();
        // Every byte the encoding holds as text (a single byte where it is a character, as the
        // encoding's own bytes otherwise), alone and inside a valid form.
        let mut inputs: Vec<String> = (1u32..=255)
            .map(|b| format!("convert_from(decode(lpad(to_hex({b}), 2, '0'), 'hex'), 'SQL_ASCII')"))
            .collect();
        let strings = proptest::collection::vec(any::<u8>(), 0..40);
        for _ in 0..200 {
            let bytes = strings.new_tree(&mut runner).unwrap().current();
            let hex: String = bytes
                .iter()
                .map(|b| format!("{b:02x}"))
                .filter(|h| h != "00")
                .collect();
            inputs.push(format!("convert_from(decode('{hex}', 'hex'), 'SQL_ASCII')"));
        }
        let mut queries = Vec::new();
        for input in &inputs {
            for f in ["snowflake_from_base62", "snowflake_from_base32"] {
                queries.push(format!("SELECT {f}({input})::text"));
                queries.push(format!("SELECT {f}('0' || {input} || '00000000000')::text"));
            }
        }
        // Outside SQL_ASCII, an invalid byte sequence is PostgreSQL's own 22021 at convert_from,
        // which is no snowflake answer: only the server's survival and the DETAIL's size matter.
        let values = queries
            .iter()
            .map(|q| format!("({})", quote(q)))
            .collect::<Vec<_>>()
            .join(",");
        // Too long for a command line: through a script file.
        let path = c.dir.join(format!("fuzz-{db}.sql"));
        std::fs::write(
            &path,
            format!("SELECT count(*) FILTER (WHERE r NOT LIKE 'ERROR 22P02' AND r NOT LIKE 'ERROR 22021' AND r NOT LIKE 'ERROR 22003' AND r !~ '^[0-9]+$') FROM (SELECT probe(q) r FROM (VALUES {values}) v(q)) x;"),
        )
        .unwrap();
        let run = c.psql_cmd(db).arg("-f").arg(&path).output().unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let out = String::from_utf8_lossy(&run.stdout).trim().to_string();
        assert_eq!(
            out, "0",
            "in {encoding}: answers other than an ID, 22P02, 22003 or 22021"
        );
    }
    // The reported inputs, and sizes past them, in UTF8: the error is 22P02 with a DETAIL of a
    // few dozen bytes, however large the input.
    c.sql("CREATE EXTENSION snowflake");
    for (f, input) in [
        ("snowflake_from_base32", "repeat(chr(1), 270000000)"),
        ("snowflake_from_base62", "repeat(chr(1), 270000000)"),
        ("snowflake_from_base62", "repeat('é', 135000000)"),
        ("snowflake_from_base32", "repeat('0', 100000000)"),
    ] {
        let e = c.sql_err(&format!("SELECT {f}({input})"));
        assert_eq!(e.sqlstate, "22P02", "{f}({input}): {}", e.raw);
        assert!(
            e.detail.len() < 200 && e.message.len() < 200,
            "{f}({input}): {}",
            e.raw
        );
    }
    assert_eq!(
        c.sql("SELECT pg_postmaster_start_time()"),
        started,
        "the server restarted"
    );
    assert!(
        !c.log().contains("terminated by signal"),
        "a backend crashed:\n{}",
        c.log()
    );
}
