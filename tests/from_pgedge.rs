//! docs/from-pgedge.md, run as written: tables move from pgEdge's extension (also named
//! `snowflake`), built from its public source by scripts/pgedge.sh into a private copy of the
//! server under test, to this one, on a cluster laid out as Debian's. Every existing ID stays,
//! the old IDs decode to pgEdge's node and time, and new IDs are above them. The database and
//! its tables belong to another role, who has planted stand-ins for what the recipes call.

mod common;
use common::{as_owner, bindir, readme_recipe, recipe_traps, run, Cluster};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The bin directory of the server under test's copy with pgEdge's extension installed; `None`
/// where its pinned source cannot be had (no tarball given or cached, and GitHub unreachable: a
/// machine without internet access), unless `SNOWFLAKE_PGEDGE_REQUIRED` is set. The project may
/// not carry another project's source, so a CI machine without GitHub skips this one test, and
/// says so.
fn pgedge_bindir() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pgedge.sh");
    let source = Command::new(&script).arg("--source").output().unwrap();
    if !source.status.success() {
        let why = String::from_utf8_lossy(&source.stderr);
        assert!(
            std::env::var_os("SNOWFLAKE_PGEDGE_REQUIRED").is_none(),
            "pgEdge's source is required: {why}"
        );
        eprintln!("SKIPPED: pgEdge's snowflake 2.6.0 source is not available here:\n{why}");
        return None;
    }
    let pg_config = bindir().join("pg_config");
    Some(PathBuf::from(
        run(Command::new(script).arg(pg_config)).trim(),
    ))
}

/// Runs a shell recipe as the server's operating-system user, in the cluster's directory, with
/// psql connecting to it as a superuser and DB naming the database `app`.
fn run_as_owner(c: &Cluster, recipe: &str) {
    let path = format!("{}:{}", c.bin.display(), std::env::var("PATH").unwrap());
    let db = format!(
        "postgresql:///app?host={}&port={}&user=postgres",
        c.dir.display(),
        c.port
    );
    let out = as_owner(Path::new("env"))
        .arg(format!("PGHOST={}", c.dir.display()))
        .arg(format!("PGPORT={}", c.port))
        .args(["PGUSER=postgres", "PGDATABASE=postgres"])
        .arg(format!("PATH={path}"))
        .arg(format!("DB={db}"))
        .args(["bash", "-e", "-c", &readme_recipe(recipe)])
        .current_dir(&c.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the recipe {recipe} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn app_sql(c: &Cluster, user: &str, sql: &str) -> String {
    let out = c
        .psql_cmd_as(user, "app")
        .arg("-c")
        .arg(format!("SET search_path = pg_catalog, pg_temp; {sql}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn tables_move_from_pgedges_extension_keeping_their_ids() {
    // pgEdge's node 70 is the pair (2, 6).
    // Laid out as Debian's (conf.d/), where the recipe writes its settings.
    let Some(pgedge) = pgedge_bindir() else {
        return;
    };
    let mut c = Cluster::debian_style(
        &pgedge,
        "from-pgedge",
        "snowflake.node = 70\nsnowflake.max_clock_drift = '60s'",
        false,
    );
    c.start();
    c.sql("CREATE ROLE app LOGIN");
    c.sql("CREATE DATABASE app OWNER app");
    app_sql(&c, "postgres", "CREATE EXTENSION snowflake");
    assert_eq!(
        app_sql(
            &c,
            "postgres",
            "SELECT extversion FROM pg_extension WHERE extname = 'snowflake'"
        ),
        "2.6.0",
        "not pgEdge's extension"
    );
    app_sql(
        &c,
        "app",
        "CREATE TABLE public.orders (id bigserial PRIMARY KEY, item text);
         CREATE TABLE public.events (id bigserial PRIMARY KEY, order_id bigint REFERENCES public.orders, body text);",
    );
    app_sql(
        &c,
        "postgres",
        "SELECT snowflake.convert_sequence_to_snowflake('public.orders_id_seq');
         SELECT snowflake.convert_sequence_to_snowflake('public.events_id_seq');",
    );
    app_sql(
        &c,
        "app",
        "INSERT INTO public.orders (item) SELECT 'old' FROM generate_series(1, 1000);
         INSERT INTO public.events (order_id, body) SELECT id, 'old' FROM public.orders;",
    );
    let fingerprint =
        "SELECT count(*), max(id), md5(string_agg(id::text, ',' ORDER BY id)) FROM public.orders";
    let before = app_sql(&c, "postgres", fingerprint);
    let events_before = app_sql(
        &c,
        "postgres",
        "SELECT md5(string_agg(id || ':' || order_id, ',' ORDER BY id)) FROM public.events",
    );
    // pgEdge's own reading of its largest ID: node and time (ms since 1970).
    let old_max: i64 = app_sql(&c, "postgres", "SELECT max(id) FROM public.orders")
        .parse()
        .unwrap();
    let pgedge_view = app_sql(
        &c,
        "postgres",
        &format!("SELECT snowflake.get_node({old_max}) || '|' || round(snowflake.get_epoch({old_max}) * 1000)"),
    );
    assert!(pgedge_view.starts_with("70|"), "{pgedge_view}");
    // The database's owner plants stand-ins for everything the recipes call.
    let recipes = [
        readme_recipe("from-pgedge"),
        readme_recipe("from-pgedge-adopt"),
    ];
    let texts: Vec<&str> = recipes.iter().map(String::as_str).collect();
    app_sql(&c, "app", &recipe_traps(&texts, "public", "app"));

    run_as_owner(&c, "from-pgedge");
    // Step 2: the server's own extension files swapped for this project's (the server under
    // test has them), and a start: it would refuse pgEdge's snowflake.node.
    // Its clock 10 s behind pgEdge's: the new IDs are above the old ones by the floor, not by
    // the clock (where libfaketime reaches the lease worker: 16 and later).
    c.stop("fast");
    c.bin = bindir();
    c.fake_time(Some("-10s"));
    c.start();
    if !common::worker_sees_the_clock(&c) {
        c.stop("fast");
        c.env.clear();
        c.start();
    }
    let written = std::fs::read_to_string(c.conf_dir.join("conf.d/snowflake.conf")).unwrap();
    assert!(written.contains("snowflake.worker_id = 6"), "{written}");
    run_as_owner(&c, "from-pgedge-adopt");

    assert_eq!(
        app_sql(&c, "postgres", fingerprint),
        before,
        "the IDs changed"
    );
    assert_eq!(
        app_sql(
            &c,
            "postgres",
            "SELECT md5(string_agg(id || ':' || order_id, ',' ORDER BY id)) FROM public.events"
        ),
        events_before
    );
    // The old IDs decode as pgEdge read them: node 70 is (2, 6), the same millisecond.
    assert_eq!(
        app_sql(
            &c,
            "postgres",
            &format!("SELECT d.datacenter_id * 32 + d.worker_id || '|' || round(extract(epoch FROM d.created_at) * 1000)
                      FROM snowflake.snowflake_decode({old_max}) d"),
        ),
        pgedge_view
    );
    // New rows, inserted by the owner, are above every old ID and carry the same node.
    app_sql(
        &c,
        "app",
        "INSERT INTO public.orders (item) SELECT 'new' FROM generate_series(1, 1000);
         INSERT INTO public.events (order_id, body) SELECT id, 'new' FROM public.orders WHERE item = 'new';",
    );
    assert_eq!(
        app_sql(
            &c,
            "postgres",
            &format!(
                "SELECT count(*) FILTER (WHERE id <= {old_max}), count(*) FILTER (WHERE snowflake.snowflake_datacenter_id(id) = 2 AND snowflake.snowflake_worker_id(id) = 6)
                   FROM public.orders WHERE item = 'new'"
            )
        ),
        "0|1000"
    );
    assert_eq!(
        app_sql(&c, "postgres", "SELECT count(*) FROM public.events e WHERE body = 'new' AND e.id <= (SELECT max(id) FROM public.events WHERE body = 'old')"),
        "0"
    );
    assert_eq!(
        c.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'"),
        "f",
        "a stand-in of the database's owner ran as superuser"
    );
}
