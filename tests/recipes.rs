//! Everything the docs tell a superuser or a monitoring role to run, found in the documents
//! themselves and run against traps derived from what it calls (issue 58). A recipe added to the
//! docs is covered here without a new test: its shell calls must pin the search_path, and its
//! SQL runs where another role planted a stand-in for every function and operator it names.

mod common;

use common::{
    blocks_of, called_functions, doc_blocks, doc_files, extension_functions, overload_traps,
    plant_as, readme_recipe, recipe_traps, unpinned_psql_calls, used_operators, without_comments,
    Cluster, DocBlock, ExtFn, Traps, TRAP_RAN,
};
use std::fs;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every psql call of a shell block runs with `search_path = pg_catalog, pg_temp`: the README's
/// configure recipe once ran `concat_ws` as the superuser with the caller's path, and a role that
/// may create in `public` (14's default, kept by pg_upgrade) answered it with her own.
#[test]
fn every_psql_call_of_a_shell_block_pins_the_search_path() {
    let unpinned = unpinned_psql_calls(&doc_blocks());
    assert!(
        unpinned.is_empty(),
        "psql calls with the caller's search_path (pin it: PGOPTIONS=\"-c search_path=pg_catalog,pg_temp\"):\n{}",
        unpinned.join("\n")
    );
}

/// The inline code of the prose (a sentence, a table's cell) that runs a query with psql is a
/// command a reader runs too, as superuser as often as not: pinned like a shell block's (1.7.0's
/// checklist gave `psql -d DB -XAtc "SELECT ... FROM snowflake_node()"`, the caller's path).
#[test]
fn no_psql_query_in_the_prose_runs_with_the_callers_path() {
    let mut unpinned = Vec::new();
    for path in doc_files() {
        let text = fs::read_to_string(&path).unwrap();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            // The odd pieces between backticks are the inline code spans.
            for span in line.split('`').skip(1).step_by(2) {
                let query = span.contains("psql ")
                    && span.split_whitespace().any(|w| {
                        w == "--command"
                            || (w.starts_with('-') && !w.starts_with("--") && w.contains('c'))
                    });
                if !fenced && query && !span.contains("search_path=pg_catalog,pg_temp") {
                    unpinned.push(format!("{}:{}: {span}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(unpinned.is_empty(), "{}", unpinned.join("\n"));
}

/// The check above finds what it is for, on mutants of the README: the configure recipe's
/// query function without its pin, a psql call added to the recipe, and an export that pins
/// only another document's shell.
#[test]
fn the_pin_check_finds_an_unpinned_call() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let clean = blocks_of("README.md", &readme);
    assert!(unpinned_psql_calls(&clean).is_empty());
    let q = r#"q() { PGOPTIONS="-c search_path=pg_catalog,pg_temp" psql -XAtc "$1"; }"#;
    assert!(
        readme.contains(q),
        "the configure recipe's query function changed"
    );
    let unpinned = readme.replace(q, r#"q() { psql -XAtc "$1"; }"#);
    assert_eq!(
        unpinned_psql_calls(&blocks_of("README.md", &unpinned)).len(),
        1,
        "the pin removed from the query function"
    );
    let added = readme.replace(
        "# Restart this server only.",
        "psql -XAtc \"SELECT concat_ws(', ', 'a', 'b')\"\n# Restart this server only.",
    );
    let found = unpinned_psql_calls(&blocks_of("README.md", &added));
    assert!(
        found.len() == 1 && found[0].contains("concat_ws"),
        "{found:?}"
    );
    // A pin exported in another document's shell does not reach this one.
    let other = "```sh\nexport PGOPTIONS=\"-c search_path=pg_catalog,pg_temp\"\n```\n";
    let mut blocks = blocks_of("docs/other.md", other);
    blocks.extend(blocks_of("README.md", &added));
    assert_eq!(unpinned_psql_calls(&blocks).len(), 1);
    // Nor a path of another role's schema.
    let public = readme.replace(
        q,
        r#"q() { PGOPTIONS="-c search_path=public" psql -XAtc "$1"; }"#,
    );
    assert_eq!(
        unpinned_psql_calls(&blocks_of("README.md", &public)).len(),
        1
    );
}

/// Whether a block runs SQL: an SQL block, or a shell block that calls psql.
fn runs_sql(b: &DocBlock) -> bool {
    b.lang == "sql" || (b.lang == "sh" && without_comments(b).contains("psql"))
}

/// Every block that runs SQL calling a function or an operator is a recipe, so that a test runs
/// it as written (`every_recipe_is_run_by_a_test` in tests/docs.rs) and, if it is SQL, the
/// harness below runs it against traps. A block that calls nothing (`ALTER EXTENSION ... UPDATE`)
/// resolves no name another role could plant.
#[test]
fn every_block_that_calls_a_function_or_operator_is_a_recipe() {
    let blocks = doc_blocks();
    assert!(blocks.len() > 40, "only {} blocks found", blocks.len());
    let loose: Vec<String> = blocks
        .iter()
        .filter(|b| runs_sql(b) && b.recipe.is_none())
        .filter(|b| {
            let text = without_comments(b);
            !called_functions(&text).is_empty() || !used_operators(&text).is_empty()
        })
        .map(|b| format!("{}:{}", b.file, b.line))
        .collect();
    assert!(
        loose.is_empty(),
        "blocks that run SQL without a recipe marker (<!-- recipe: NAME (run as written by ...) -->):\n{}",
        loose.join("\n")
    );
}

/// The recipes no other test runs: here they must also do their work (no error), wherever the
/// superuser runs them (`extension-search-path` names a role `app` and a database `appdb`).
const RUN_HERE_ONLY: &[&str] = &["check-settings", "extension-search-path"];

/// What a recipe's marker says of one that an application's role runs where the extension is on
/// its path (the docs' `CREATE TABLE ... DEFAULT snowflake_nextval()`), or that a superuser runs
/// only in a database a superuser owns (docs/security.md): run here only there.
const SUPERUSERS_DATABASE_ONLY: &[&str] = &["an application's", "in a database a superuser owns"];

/// What a recipe's marker says of one the monitoring role runs (run here as that role only).
const MONITORS: &str = "as the monitoring role";

/// The SQL recipes of the docs, in the documents' order, with `removal` (which drops the
/// extension) last: each name, text and whether it is an application's.
fn sql_recipes() -> Vec<(String, String, bool)> {
    let mut recipes: Vec<(String, String, bool)> = doc_blocks()
        .into_iter()
        .filter(|b| b.lang == "sql")
        .filter(|b| !b.note.contains(MONITORS))
        .filter_map(|b| {
            let app = SUPERUSERS_DATABASE_ONLY.iter().any(|p| b.note.contains(p));
            b.recipe.map(|name| (name, b.body, app))
        })
        .collect();
    recipes.sort_by_key(|(name, _, _)| name == "removal");
    assert!(
        recipes.len() > 25
            && recipes.last().unwrap().0 == "removal"
            && recipes.iter().filter(|r| r.2).count() >= 6,
        "{} SQL recipes",
        recipes.len()
    );
    recipes
}

/// The SQL the monitoring role runs: the health check of the docs, and every query of the
/// exporter's query file.
fn monitor_queries() -> Vec<(String, String)> {
    let mut queries = vec![("monitor-check".to_string(), readme_recipe("monitor-check"))];
    let file =
        fs::read_to_string(root().join("monitoring/prometheus-postgres-exporter.yaml")).unwrap();
    let lines: Vec<&str> = file.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("query:") else {
            continue;
        };
        let rest = rest.trim();
        let sql = if rest == "|" {
            lines[i + 1..]
                .iter()
                .take_while(|l| l.starts_with("    "))
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            rest.trim_matches('\'').replace("''", "'")
        };
        queries.push((format!("exporter query at line {}", i + 1), sql));
    }
    assert!(queries.len() >= 3, "{queries:?}");
    queries
}

/// Runs `sql` as `role` in `db` as psql runs a file (going on after an error unless the recipe
/// stops itself), with the variables the recipes read set; what it wrote to stderr.
fn run_as(c: &Cluster, role: &str, db: &str, name: &str, sql: &str) -> String {
    let path = c.dir.join("recipe.sql");
    fs::write(&path, sql).unwrap();
    let out = c
        .psql_cmd_as(role, db)
        .args([
            "-v",
            "ON_ERROR_STOP=0",
            "-v",
            "old_mark=0",
            "-v",
            "last_seen=-1",
        ])
        .arg("-f")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    if err.contains(TRAP_RAN) {
        eprintln!("{name}, run by {role} in {db}, ran another role's code:\n{err}");
        FOUND
            .lock()
            .unwrap()
            .push(format!("{name} as {role} in {db}"));
    }
    err
}

/// What ran another role's code: `recipe as role in database`.
static FOUND: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn is_superuser(c: &Cluster, role: &str) -> String {
    c.sql(&format!(
        "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = '{role}'"
    ))
}

/// Plants, as `role` in `db`, in each of `schemas`: stand-ins with the shapes of every function
/// of the extension (`fns`: its own signatures, and loosely typed ones), then for every function
/// and operator of `texts`.
fn plant(c: &Cluster, role: &str, db: &str, schemas: &[&str], fns: &[ExtFn], texts: &[&str]) {
    for schema in schemas {
        let sql = [Traps::Exact, Traps::Loose]
            .iter()
            .map(|&k| overload_traps(fns, schema, role, k))
            .collect::<String>()
            + &recipe_traps(texts, schema, role).replace(
                &format!("CREATE FUNCTION {schema}.escalate_{role}"),
                &format!("CREATE OR REPLACE FUNCTION {schema}.escalate_{role}"),
            );
        plant_as(c, role, db, &sql);
    }
}

/// Every SQL recipe of the docs, run as written by a superuser, and what the monitoring role
/// runs, run as that role: in a database a superuser owns whose `public` everyone may create in
/// (14's default, kept by pg_upgrade), where eve planted stand-ins for every function and
/// operator the texts name (of pg_catalog's signatures, of every common type at the arity
/// called, and variadic); and in a database mallory owns, where she planted the same in her
/// `public` and in a schema named after the superuser, where every recipe but an application's
/// ([`SUPERUSERS_DATABASE_ONLY`]) runs too. No stand-in runs, whoever runs the recipe.
/// Recipes may fail here for want of their context (tables, nodes): what matters is that nothing
/// planted answers a call.
#[test]
fn every_recipe_a_superuser_or_monitor_runs_runs_nothing_planted() {
    let mut c = Cluster::new("recipes-traps", "snowflake.worker_id = 11");
    c.start();
    let recipes = sql_recipes();
    let monitor = monitor_queries();
    let texts: Vec<&str> = recipes
        .iter()
        .map(|(_, t, _)| t.as_str())
        .chain(monitor.iter().map(|(_, t)| t.as_str()))
        .collect();
    c.sql(
        "CREATE ROLE eve LOGIN; CREATE ROLE mallory LOGIN; \
         CREATE ROLE monitor LOGIN IN ROLE pg_monitor; CREATE ROLE app LOGIN",
    );
    for db in ["open", "mallorys OWNER mallory", "appdb"] {
        c.sql(&format!("CREATE DATABASE {db}"));
    }
    // A superuser's database with `public` open: the quick start makes the extension there.
    c.try_sql_in(
        "open",
        "GRANT CREATE ON SCHEMA public TO PUBLIC; CREATE EXTENSION snowflake",
    )
    .unwrap();
    let fns = extension_functions(&c, "open");
    plant(&c, "eve", "open", &["public"], &fns, &texts);
    // mallory's database: her `public` and "$user" schema of the superuser, then the extension
    // in a schema a superuser makes (docs/security.md).
    c.try_sql_in("mallorys", "SET ROLE mallory; CREATE SCHEMA postgres")
        .unwrap();
    plant(
        &c,
        "mallory",
        "mallorys",
        &["public", "postgres"],
        &fns,
        &texts,
    );
    c.try_sql_in(
        "mallorys",
        "CREATE SCHEMA snowflake; GRANT USAGE ON SCHEMA snowflake TO PUBLIC; \
         CREATE EXTENSION snowflake SCHEMA snowflake",
    )
    .unwrap();
    for db in ["open", "mallorys"] {
        assert_eq!(
            c.try_sql_in(
                db,
                "SELECT count(*) > 100 FROM pg_catalog.pg_proc WHERE proowner IN ('eve'::regrole, 'mallory'::regrole)"
            )
            .unwrap(),
            "t",
            "the stand-ins were not planted in {db}"
        );
    }

    for db in ["open", "mallorys"] {
        // The monitor first (the recipes end with the extension's removal).
        run_as(
            &c,
            "postgres",
            db,
            "monitor-path",
            &readme_recipe("monitor-path"),
        );
        let path = c
            .try_sql_in(db, "SELECT pg_catalog.array_to_string(setconfig, ',') FROM pg_catalog.pg_db_role_setting s JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase WHERE d.datname = pg_catalog.current_database() AND s.setrole = 'monitor'::regrole")
            .unwrap();
        let schema = if db == "open" { "public" } else { "snowflake" };
        assert_eq!(path, format!("search_path=pg_catalog, {schema}"), "in {db}");
        for (name, sql) in &monitor {
            let err = run_as(&c, "monitor", db, name, sql);
            assert!(!err.contains("ERROR"), "{name} as monitor in {db}:\n{err}");
        }
        for (name, sql, app) in &recipes {
            if *app && db == "mallorys" {
                continue;
            }
            let err = run_as(&c, "postgres", db, name, sql);
            if RUN_HERE_ONLY.contains(&name.as_str()) {
                assert!(!err.contains("ERROR"), "recipe {name} in {db}:\n{err}");
            }
            for role in ["eve", "mallory"] {
                if is_superuser(&c, role) == "t" {
                    FOUND
                        .lock()
                        .unwrap()
                        .push(format!("{name} in {db} made {role} superuser"));
                    c.sql(&format!("ALTER ROLE {role} NOSUPERUSER"));
                }
            }
        }
    }
    let found = FOUND.lock().unwrap();
    assert!(
        found.is_empty(),
        "recipes that ran another role's code:\n{}",
        found.join("\n")
    );
}
