//! The README's client recipes, run as written against a real server: psycopg 3, SQLAlchemy 2,
//! Django 5 and node-postgres, installed from PyPI and npm into a cache of the tests' own.

mod common;
use common::{readme_recipe, run, Cluster};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The versions the README names.
const PYTHON_PACKAGES: &[&str] = &[
    "psycopg[binary]==3.3.9",
    "SQLAlchemy==2.0.58",
    "Django==5.2.19",
];
const NODE_PACKAGES: &[&str] = &["pg@8.23.1"];

fn cache() -> PathBuf {
    std::env::var_os("SNOWFLAKE_CLIENT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/snowflake-clients")
        })
}

/// Installs what is missing, one test at a time: the tests of this file share the cache, and
/// each runs in a process of its own (cargo-nextest), so the lock is a file's.
fn install_lock() -> std::fs::File {
    std::fs::create_dir_all(cache()).unwrap();
    let f = std::fs::File::create(cache().join("install.lock")).unwrap();
    f.lock().unwrap();
    f
}

fn python() -> PathBuf {
    let _one = install_lock();
    let venv = cache().join("python");
    let marker = venv.join("installed.txt");
    let want = PYTHON_PACKAGES.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(want.as_str()) {
        let _ = std::fs::remove_dir_all(&venv);
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .args(PYTHON_PACKAGES));
        std::fs::write(&marker, &want).unwrap();
    }
    venv.join("bin/python")
}

fn node_modules() -> PathBuf {
    let _one = install_lock();
    let dir = cache().join("node");
    let marker = dir.join("installed.txt");
    let want = NODE_PACKAGES.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(want.as_str()) {
        std::fs::create_dir_all(&dir).unwrap();
        run(Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .args(NODE_PACKAGES));
        std::fs::write(&marker, &want).unwrap();
    }
    dir.join("node_modules")
}

fn server() -> &'static Cluster {
    static S: OnceLock<Cluster> = OnceLock::new();
    common::shared_cluster(&S, || {
        let mut c = Cluster::new("clients", "");
        c.start();
        c.sql("CREATE EXTENSION snowflake");
        c
    })
}

/// Runs a recipe with `program` and libpq's environment pointing at the server.
fn run_recipe(program: &PathBuf, recipe: &str, ext: &str, env: &[(&str, PathBuf)]) -> Vec<String> {
    let c = server();
    let path = c.dir.join(format!("{recipe}.{ext}"));
    std::fs::write(&path, readme_recipe(recipe)).unwrap();
    let mut cmd = Command::new(program);
    cmd.arg(&path)
        .env("PGHOST", &c.dir)
        .env("PGPORT", c.port.to_string())
        .env("PGUSER", "postgres")
        .env("PGDATABASE", "postgres");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd).lines().map(str::to_string).collect()
}

/// An ID from a client's output: above 2^53 (where a double would round it) and in `table`.
fn check_id(text: &str, table: &str) -> i64 {
    let id: i64 = text
        .parse()
        .unwrap_or_else(|_| panic!("not an ID: {text:?}"));
    assert!(
        id > 1 << 53,
        "{id} is below 2^53: the test would not see rounding"
    );
    assert_eq!(
        server().sql(&format!("SELECT count(*) FROM {table} WHERE id = {id}")),
        "1",
        "{id} is not in {table}: the client changed it"
    );
    id
}

#[test]
fn psycopg_reads_the_generated_key_exactly() {
    let out = run_recipe(&python(), "client-psycopg", "py", &[]);
    check_id(&out[0], "orders");
}

#[test]
fn sqlalchemy_gets_the_server_default_key_through_returning() {
    let out = run_recipe(&python(), "client-sqlalchemy", "py", &[]);
    let ids: Vec<&str> = out[0].split(' ').collect();
    let (a, b) = (check_id(ids[0], "sa_orders"), check_id(ids[1], "sa_orders"));
    assert!(b > a);
    // The column is the extension's default, not a sequence SQLAlchemy made.
    assert_eq!(
        server().sql("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'sa_orders'::regclass"),
        "snowflake_nextval()"
    );
}

#[test]
fn django_sets_pk_after_save_and_sends_it_as_a_string() {
    let out = run_recipe(&python(), "client-django", "py", &[]);
    let id = check_id(&out[0], "django_orders");
    assert_eq!(out[1], format!("{{\"id\": \"{id}\", \"item\": \"book\"}}"));
    assert_eq!(
        server().sql("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'django_orders'::regclass"),
        "snowflake_nextval()"
    );
}

#[test]
fn node_postgres_keeps_ids_as_strings_or_bigint() {
    let modules = node_modules();
    let out = run_recipe(
        &PathBuf::from("node"),
        "client-node",
        "js",
        &[("NODE_PATH", modules)],
    );
    let first: Vec<&str> = out[0].split(' ').collect();
    assert_eq!(first[0], "string", "{out:?}");
    let id = check_id(first[1], "js_orders");
    assert_eq!(first[2], format!("{{\"id\":\"{id}\",\"item\":\"book\"}}"));
    assert_eq!(out[1], format!("bigint {id} true"));
}
