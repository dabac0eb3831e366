//! The documents' recipes: the block after a `<!-- recipe: NAME -->` marker in README.md or docs/,
//! and running shell recipes as a user pastes them.

use super::{bindir, Cluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// README shell blocks as one script, in order, as a user pastes them into one shell. The test
/// stops at the first failing command; a user's shell need not, so the blocks have no `set -e`.
pub fn readme_script(blocks: &[&str]) -> String {
    let mut script = vec!["set -e".to_string()];
    script.extend(blocks.iter().map(|b| readme_recipe(b)));
    script.join("\n")
}

/// How long a recipe may run before `run_recipes` stops it: no recipe may hang (each of its
/// waits is bounded and fails naming what it waited for).
pub const RECIPE_LIMIT_S: u64 = 600;

/// Runs README blocks as one bash script, with the server's programs first on PATH and `vars`
/// in the environment; panics with the output when it fails, else returns its trimmed stdout.
pub fn run_recipes(blocks: &[&str], vars: &[(&str, String)]) -> String {
    run_recipes_within(blocks, vars, RECIPE_LIMIT_S)
}

/// Runs README blocks as `run_recipes` does, and returns how they ended (a recipe that must
/// refuse).
pub fn try_recipes(blocks: &[&str], vars: &[(&str, String)], secs: u64) -> Output {
    let path = format!("{}:{}", bindir().display(), std::env::var("PATH").unwrap());
    Command::new("timeout")
        .args(["--kill-after=10", &secs.to_string(), "bash", "-c"])
        .arg(readme_script(blocks))
        .env("PATH", path)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap()
}

/// `run_recipes`, stopped (and failed) if it has not ended within `secs` seconds.
pub fn run_recipes_within(blocks: &[&str], vars: &[(&str, String)], secs: u64) -> String {
    let out = try_recipes(blocks, vars, secs);
    assert!(
        out.status.code() != Some(124),
        "README recipes {blocks:?} did not end within {secs} s:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "README recipes {blocks:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs an SQL recipe of the docs as written, with psql's `-v old_mark=...`, as superuser.
pub fn run_sql_recipe(c: &Cluster, recipe: &str, old_mark: i64) {
    let path = c.dir.join("recipe.sql");
    std::fs::write(&path, readme_recipe(recipe)).unwrap();
    let out = c
        .psql_cmd("postgres")
        .args(["-v", &format!("old_mark={old_mark}"), "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{recipe}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The connection URIs of `nodes`, space-separated (the recipes' NODES).
pub fn uris(nodes: &[&Cluster]) -> String {
    nodes.iter().map(|c| c.uri()).collect::<Vec<_>>().join(" ")
}

/// The documents that hold recipes: README.md and every file in docs/.
pub fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The block that follows `<!-- recipe: NAME -->` in README.md or a file of docs/, exactly as a
/// user reads it. A name is unique across the documents.
pub fn readme_recipe(name: &str) -> String {
    // `<!-- recipe: NAME -->` or `<!-- recipe: NAME (a note) -->`
    let marker = format!("<!-- recipe: {name} ");
    let found: Vec<(PathBuf, String)> = doc_files()
        .into_iter()
        .map(|p| (p.clone(), fs::read_to_string(&p).unwrap()))
        .filter(|(_, text)| text.contains(&marker))
        .collect();
    assert!(
        found.len() == 1 && found[0].1.matches(&marker).count() == 1,
        "recipe {name}: {} documents hold {marker} (one must, once)",
        found.len()
    );
    let after = found[0].1.split_once(&marker).unwrap().1;
    // The next fenced block, whatever its language (sh, sql), indented or not (inside a list).
    let mut lines = after
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("```"));
    let fence = lines.next().expect("a fenced block after the marker");
    let indent = &fence[..fence.len() - fence.trim_start().len()];
    let close = format!("{indent}```");
    let mut body = Vec::new();
    for line in lines {
        if line == close {
            return body.join("\n");
        }
        body.push(line.strip_prefix(indent).unwrap_or(line));
    }
    panic!("the block of recipe {name} does not end")
}

/// Words that precede a parenthesis in SQL without being a function's name.
const NOT_FUNCTIONS: &[&str] = &[
    "select",
    "from",
    "where",
    "in",
    "exists",
    "values",
    "as",
    "and",
    "or",
    "not",
    "on",
    "table",
    "returning",
    "greatest",
    "least",
    "coalesce",
    "nullif",
    "cast",
    "case",
    "when",
    "then",
    "else",
    "end",
    "interval",
    "over",
    "filter",
    "array",
    "row",
    "any",
    "all",
    "set",
    "into",
    "with",
    "using",
    "default",
    "join",
    "by",
    "seq",
    "do",
    "if",
    "for",
    "until",
    "while",
    "extract",
];

/// The functions a recipe calls, each with the number of arguments it passes: every word
/// followed by `(` (the last part of a qualified name), minus SQL's own words.
pub fn called_functions(recipe: &str) -> Vec<(String, usize)> {
    let bytes = recipe.as_bytes();
    let mut found = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if b != b'(' {
            continue;
        }
        let mut start = i;
        while start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            start -= 1;
        }
        let name = recipe[start..i].to_ascii_lowercase();
        if name.is_empty()
            || name.as_bytes()[0].is_ascii_digit()
            || NOT_FUNCTIONS.contains(&name.as_str())
        {
            continue;
        }
        // Arguments: top-level commas up to the matching parenthesis, outside string literals
        // (`concat_ws(', ', ...)` has three; `''` inside one toggles twice).
        let (mut depth, mut commas, mut empty, mut quoted) = (0, 0, true, false);
        for &c in &bytes[i + 1..] {
            if c == b'\'' {
                quoted = !quoted;
                empty = false;
                continue;
            }
            if quoted {
                continue;
            }
            match c {
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                b',' if depth == 0 => commas += 1,
                c if !c.is_ascii_whitespace() => empty = false,
                _ => {}
            }
        }
        let arity = if empty { 0 } else { commas + 1 };
        if !found.contains(&(name.clone(), arity)) {
            found.push((name, arity));
        }
    }
    found
}

/// The operators a recipe uses (of those SQL writes between values).
pub fn used_operators(recipe: &str) -> Vec<String> {
    let ops = [
        "<<", ">>", "||", "<>", "<=", ">=", "!~", "|", "=", "<", ">", "+", "-", "*", "/", "%", "&",
        "~",
    ];
    let mut text = recipe.to_string();
    let mut found = Vec::new();
    // LIKE is the operator ~~.
    if text.to_ascii_uppercase().contains(" LIKE ") {
        found.push("~~".to_string());
    }
    for op in ops {
        if text.contains(op) {
            found.push(op.to_string());
            text = text.replace(op, " ");
        }
    }
    found
}

/// The tables a recipe names as `'schema.table'::regclass`.
pub fn named_tables(recipe: &str) -> Vec<String> {
    recipe
        .split("'::regclass")
        .filter_map(|before| before.rsplit('\'').next())
        .filter(|t| t.contains('.') && !t.contains(char::is_whitespace))
        .map(str::to_string)
        .collect::<Vec<_>>()
        .into_iter()
        .fold(Vec::new(), |mut v, t| {
            if !v.contains(&t) {
                v.push(t);
            }
            v
        })
}

/// What every stand-in says (a WARNING, which reaches the caller's stderr even when its statement
/// is rolled back) when it runs, before it tries to make its planter a superuser: the harness
/// fails on it whoever ran it, a superuser or a monitoring role.
pub const TRAP_RAN: &str = "snowflake-test trap planted by";

/// Argument types the stand-ins are made for.
const TRAP_TYPES: &[&str] = &[
    "bigint",
    "integer",
    "text",
    "numeric",
    "regclass",
    "name",
    "boolean",
    "timestamptz",
    "interval",
    "oid",
    // What an untyped literal is until it is resolved (PostgreSQL refuses most of these; the
    // planting goes on without them).
    "unknown",
];

/// SQL, to be run by `role` (who must be able to create in `schema`), that plants stand-ins for
/// everything `recipes` resolve by name: for every function they call, one of each signature
/// pg_catalog has for that name and one for each argument type of [`TRAP_TYPES`] at the arity
/// called; for every operator they use, one for each pair of those types. Each stand-in makes
/// `role` a superuser when a superuser runs it (`schema.escalate_ROLE()`), and then answers as
/// the real one would for its types (NULL or its first argument), so that a recipe that picks
/// it up goes on and the test sees what happened.
pub fn recipe_traps(recipes: &[&str], schema: &str, role: &str) -> String {
    let text = recipes.join("\n");
    let mut names: Vec<(String, usize)> = called_functions(&text);
    names.retain(|(n, _)| n != &format!("escalate_{role}"));
    let fns = names
        .iter()
        .map(|(n, a)| format!("({}, {a})", sql_literal(n)))
        .collect::<Vec<_>>()
        .join(", ");
    let ops = used_operators(&text)
        .iter()
        .map(|o| sql_literal(o))
        .collect::<Vec<_>>()
        .join(", ");
    let types = TRAP_TYPES
        .iter()
        .map(|t| sql_literal(t))
        .collect::<Vec<_>>()
        .join(", ");
    let escalate = format!("{schema}.escalate_{role}");
    format!(
        r#"
CREATE FUNCTION {escalate}() RETURNS boolean LANGUAGE plpgsql AS $e$
  BEGIN RAISE WARNING '{TRAP_RAN} {role} ran as %', current_user;
  ALTER ROLE {role} SUPERUSER; RETURN true; EXCEPTION WHEN OTHERS THEN RETURN true; END $e$;
GRANT EXECUTE ON FUNCTION {escalate}() TO PUBLIC;
DO $plant$
DECLARE
    f record; sig record; t text; l text; r text; o text; n int := 0;
    body text;
BEGIN
    FOR f IN SELECT * FROM (VALUES {fns}) AS v(name, arity) LOOP
        -- pg_catalog's own signatures of this name.
        FOR sig IN SELECT pg_catalog.pg_get_function_identity_arguments(p.oid) AS args,
                          pg_catalog.format_type(p.prorettype, NULL) AS ret
                     FROM pg_catalog.pg_proc p
                    WHERE p.proname OPERATOR(pg_catalog.=) f.name
                      AND p.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
                      AND p.prokind OPERATOR(pg_catalog.=) 'f' AND NOT p.proretset
                      AND NOT EXISTS (SELECT FROM pg_catalog.pg_type y
                                       WHERE y.oid OPERATOR(pg_catalog.=) ANY (p.proargtypes::pg_catalog.oid[] OPERATOR(pg_catalog.||) p.prorettype)
                                         AND y.typtype OPERATOR(pg_catalog.=) 'p') LOOP
            BEGIN
                EXECUTE pg_catalog.format('CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE sql AS %L',
                    '{schema}', f.name, sig.args, sig.ret,
                    pg_catalog.format('SELECT {escalate}(); SELECT NULL::%s', sig.ret));
                n := n OPERATOR(pg_catalog.+) 1;
            EXCEPTION WHEN OTHERS THEN NULL;
            END;
        END LOOP;
        -- One for each type, at the arity called.
        FOREACH t IN ARRAY ARRAY[{types}] LOOP
            BEGIN
                IF f.arity OPERATOR(pg_catalog.=) 0 THEN
                    EXECUTE pg_catalog.format('CREATE FUNCTION %I.%I() RETURNS bigint LANGUAGE sql AS %L',
                        '{schema}', f.name, 'SELECT {escalate}(); SELECT NULL::bigint');
                ELSE
                    EXECUTE pg_catalog.format('CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE sql AS %L',
                        '{schema}', f.name,
                        pg_catalog.array_to_string(pg_catalog.array_fill(t, ARRAY[f.arity]), ', '), t,
                        'SELECT {escalate}(); SELECT $1');
                END IF;
                n := n OPERATOR(pg_catalog.+) 1;
            EXCEPTION WHEN OTHERS THEN NULL;
            END;
            -- And a variadic one of each type, which any arity of one or more may match.
            BEGIN
                EXECUTE pg_catalog.format('CREATE FUNCTION %I.%I(VARIADIC %s[]) RETURNS %s LANGUAGE sql AS %L',
                    '{schema}', f.name, t, t, 'SELECT {escalate}(); SELECT $1[1]');
                n := n OPERATOR(pg_catalog.+) 1;
            EXCEPTION WHEN OTHERS THEN NULL;
            END;
        END LOOP;
    END LOOP;
    FOREACH o IN ARRAY ARRAY[{ops}]::text[] LOOP
        FOREACH l IN ARRAY ARRAY[{types}] LOOP
            FOREACH r IN ARRAY ARRAY[{types}] LOOP
                BEGIN
                    IF o OPERATOR(pg_catalog.=) ANY (ARRAY['=', '<>', '<', '>', '<=', '>=']) THEN
                        body := 'SELECT {escalate}()';
                        EXECUTE pg_catalog.format('CREATE FUNCTION %I.%I(%s, %s) RETURNS boolean LANGUAGE sql AS %L',
                            '{schema}', 'op_' OPERATOR(pg_catalog.||) pg_catalog.md5(o OPERATOR(pg_catalog.||) l OPERATOR(pg_catalog.||) r), l, r, body);
                    ELSE
                        body := 'SELECT {escalate}(); SELECT $1';
                        EXECUTE pg_catalog.format('CREATE FUNCTION %I.%I(%s, %s) RETURNS %s LANGUAGE sql AS %L',
                            '{schema}', 'op_' OPERATOR(pg_catalog.||) pg_catalog.md5(o OPERATOR(pg_catalog.||) l OPERATOR(pg_catalog.||) r), l, r, l, body);
                    END IF;
                    EXECUTE pg_catalog.format('CREATE OPERATOR %I.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %I.%I)',
                        '{schema}', o, l, r, '{schema}', 'op_' OPERATOR(pg_catalog.||) pg_catalog.md5(o OPERATOR(pg_catalog.||) l OPERATOR(pg_catalog.||) r));
                    n := n OPERATOR(pg_catalog.+) 1;
                EXCEPTION WHEN OTHERS THEN NULL;
                END;
            END LOOP;
        END LOOP;
    END LOOP;
    RAISE NOTICE 'planted % stand-ins in %', n, '{schema}';
END
$plant$;
"#
    )
}

/// Runs `sql` (stand-ins, as [`recipe_traps`] and [`overload_traps`] write them) as `role` in
/// `db`; panics with psql's errors if it fails.
pub fn plant_as(c: &Cluster, role: &str, db: &str, sql: &str) {
    let out = c.psql_cmd_as(role, db).arg("-c").arg(sql).output().unwrap();
    assert!(
        out.status.success(),
        "{role} could not plant: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SQL, run by a table's owner `role`, that gives each table a partial index whose predicate and
/// an index whose expression call that owner's IMMUTABLE function, which makes `role` a superuser
/// when a superuser plans a query on the table.
pub fn table_traps(tables: &[String], schema: &str, role: &str) -> String {
    // (An IMMUTABLE SQL function over a VOLATILE one: PostgreSQL refuses ALTER ROLE inside a
    // function that is not VOLATILE, but not in one it calls.)
    let mut sql = format!(
        "CREATE FUNCTION {schema}.table_escalate_{role}() RETURNS boolean LANGUAGE plpgsql AS $t$
           BEGIN RAISE WARNING '{TRAP_RAN} {role} ran as %', current_user;
           ALTER ROLE {role} SUPERUSER; RETURN true; EXCEPTION WHEN OTHERS THEN RETURN true; END $t$;
         CREATE FUNCTION {schema}.table_trap_{role}() RETURNS boolean LANGUAGE sql IMMUTABLE
           AS 'SELECT {schema}.table_escalate_{role}()';
         CREATE FUNCTION {schema}.table_trap_{role}_int() RETURNS bigint LANGUAGE sql IMMUTABLE
           AS 'SELECT CASE WHEN {schema}.table_escalate_{role}() THEN 0::bigint END';\n"
    );
    for t in tables {
        sql.push_str(&format!(
            "CREATE INDEX ON {t} (id) WHERE {schema}.table_trap_{role}();
             CREATE INDEX ON {t} ((id OPERATOR(pg_catalog.+) {schema}.table_trap_{role}_int()));\n"
        ));
    }
    sql
}

fn sql_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The names of the recipes whose marker says that `test_file` runs them
/// (`<!-- recipe: NAME (run as written by tests/x.rs ...) -->`).
pub fn recipes_run_by(test_file: &str) -> Vec<String> {
    let mut names = Vec::new();
    for path in doc_files() {
        let text = fs::read_to_string(&path).unwrap();
        for marker in text.split("<!-- recipe: ").skip(1) {
            let Some((head, _)) = marker.split_once("-->") else {
                continue;
            };
            if head.contains(test_file) {
                if let Some(name) = head.split_whitespace().next() {
                    names.push(name.to_string());
                }
            }
        }
    }
    names.sort();
    names
}

/// A fenced block of the documents: where it is, its language (`sh`, `sql`, or empty), the
/// recipe its marker names (the last line before the fence that is not blank), and its text.
#[derive(Clone, Debug)]
pub struct DocBlock {
    pub file: String,
    pub line: usize,
    pub lang: String,
    pub recipe: Option<String>,
    /// The marker's note, after the name: who runs it, which test.
    pub note: String,
    pub body: String,
}

/// Every fenced block of README.md and docs/, in the documents' order.
pub fn doc_blocks() -> Vec<DocBlock> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    doc_files()
        .iter()
        .flat_map(|p| {
            let name = p.strip_prefix(root).unwrap().display().to_string();
            blocks_of(&name, &fs::read_to_string(p).unwrap())
        })
        .collect()
}

/// The fenced blocks of one document's `text` (see [`DocBlock`]).
pub fn blocks_of(file: &str, text: &str) -> Vec<DocBlock> {
    let mut blocks = Vec::new();
    let mut prev: Option<&str> = None;
    #[allow(clippy::type_complexity)]
    let mut open: Option<(usize, String, String, Option<(String, String)>, Vec<&str>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((start, indent, lang, recipe, mut body)) = open.take() {
            if line == format!("{indent}```") {
                let (recipe, note) = recipe.map_or((None, String::new()), |(r, n)| (Some(r), n));
                blocks.push(DocBlock {
                    file: file.to_string(),
                    line: start,
                    lang,
                    recipe,
                    note,
                    body: body.join("\n"),
                });
                prev = None;
            } else {
                body.push(line.strip_prefix(indent.as_str()).unwrap_or(line));
                open = Some((start, indent, lang, recipe, body));
            }
            continue;
        }
        if let Some(lang) = trimmed.strip_prefix("```") {
            let indent = line[..line.len() - trimmed.len()].to_string();
            let recipe = prev
                .and_then(|p| p.trim().strip_prefix("<!-- recipe: "))
                .and_then(|r| r.split_once(' ').or(Some((r, ""))))
                .map(|(name, note)| {
                    (
                        name.to_string(),
                        note.trim_end_matches("-->").trim().to_string(),
                    )
                });
            open = Some((i + 1, indent, lang.trim().to_string(), recipe, Vec::new()));
        } else if !trimmed.is_empty() {
            prev = Some(line);
        }
    }
    blocks
}

/// A block's text without its comments (SQL's `--` and a shell's `#` at a word's start),
/// for finding what it calls rather than what it explains.
pub fn without_comments(block: &DocBlock) -> String {
    let mark = if block.lang == "sql" { "--" } else { "#" };
    block
        .body
        .lines()
        .map(|l| {
            let cut = l
                .match_indices(mark)
                .find(|(i, _)| mark == "--" || *i == 0 || l.as_bytes()[i - 1] == b' ')
                .map_or(l.len(), |(i, _)| i);
            &l[..cut]
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What pins the search_path of a shell recipe's psql calls: this in the environment of the
/// call (on its line) or exported before it (in the block, or in an earlier shell block of the
/// same document, which the docs ask to paste into the same shell first).
pub const PINNED_PATH: &str = "search_path=pg_catalog,pg_temp";

/// The psql calls of the documents' shell blocks that run with the caller's search_path:
/// `file:line: text` of each. A superuser's psql that resolves a name where another role can
/// create runs that role's function as the superuser (issue 58: the README's `concat_ws`).
pub fn unpinned_psql_calls(blocks: &[DocBlock]) -> Vec<String> {
    let mut found = Vec::new();
    let mut exported: Option<String> = None; // the document whose shell exported the pin
    for b in blocks
        .iter()
        .filter(|b| ["sh", "bash", "shell"].contains(&b.lang.as_str()))
    {
        if exported.as_deref() != Some(b.file.as_str()) {
            exported = None;
        }
        let text = without_comments(b);
        for (i, line) in text.lines().enumerate() {
            let export = line.trim_start().starts_with("export PGOPTIONS=");
            if export && line.contains(PINNED_PATH) {
                exported = Some(b.file.clone());
            } else if export {
                exported = None;
            }
            if calls_psql(line) && exported.is_none() && !pinned_on_line(line) {
                found.push(format!("{}:{}: {}", b.file, b.line + 1 + i, line.trim()));
            }
        }
    }
    found
}

/// Whether a shell line runs psql (a word `psql`, or a path ending in `/psql`, in a command's place).
fn calls_psql(line: &str) -> bool {
    let bytes = line.as_bytes();
    line.match_indices("psql").any(|(i, _)| {
        let before = if i == 0 { b' ' } else { bytes[i - 1] };
        let after = bytes.get(i + 4).copied().unwrap_or(b' ');
        b" \t(|;&/\"'`".contains(&before) && b" \t\"')".contains(&after)
    })
}

/// Whether the psql call on `line` has the pinned path in its environment (`PGOPTIONS=...`
/// before it on the line).
fn pinned_on_line(line: &str) -> bool {
    line.split("psql")
        .next()
        .is_some_and(|before| before.contains("PGOPTIONS=") && before.contains(PINNED_PATH))
}

/// An extension function as installed: its name, its IN argument types, its OUT parameters
/// (`OUT name type, ...`), its return type (with SETOF) and how many IN arguments have defaults.
pub struct ExtFn {
    pub name: String,
    pub ins: Vec<String>,
    pub outs: String,
    pub ret: String,
    pub defaults: usize,
}

/// Every function of the extension installed in `db`.
pub fn extension_functions(c: &Cluster, db: &str) -> Vec<ExtFn> {
    let rows = c
        .try_sql_in(
            db,
            "SET search_path = pg_catalog; \
             SELECT p.proname, \
                    coalesce((SELECT string_agg(format_type(u.t, NULL), ';' ORDER BY u.o) \
                                FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY u(t, o)), ''), \
                    coalesce((SELECT string_agg(format('OUT %I %s', u.n, format_type(u.t, NULL)), ', ' ORDER BY u.o) \
                                FROM unnest(p.proallargtypes, p.proargmodes, p.proargnames) WITH ORDINALITY u(t, m, n, o) \
                               WHERE u.m IN ('o', 't')), ''), \
                    CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END || format_type(p.prorettype, NULL), \
                    p.pronargdefaults \
               FROM pg_proc p \
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake' \
              ORDER BY 1, 2",
        )
        .unwrap();
    let fns: Vec<ExtFn> = rows
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            ExtFn {
                name: f[0].to_string(),
                ins: f[1]
                    .split(';')
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect(),
                outs: f[2].to_string(),
                ret: f[3].to_string(),
                defaults: f[4].parse().unwrap(),
            }
        })
        .collect();
    assert!(
        fns.len() > 30 && fns.iter().any(|f| f.name == "snowflake_drop_partitions"),
        "{rows}"
    );
    fns
}

/// The kinds of stand-ins [`overload_traps`] plants.
#[derive(Clone, Copy, PartialEq)]
pub enum Traps {
    /// What a call with a loose type prefers: `text` in each argument's place, every argument
    /// `text`, and `unknown` where PostgreSQL takes it, at every arity a call may use.
    Loose,
    /// What makes a call ambiguous in the extension's own schema, and wins in a schema before it:
    /// one more argument with a default, and each argument that has a default left out.
    Ambiguous,
    /// The extension's own signatures (in another schema than the extension's), and each with
    /// the arguments that have defaults left out: where they come before the extension's schema
    /// on the search_path, these are what an unqualified call finds. (`Ambiguous`'s one more
    /// argument would make these ambiguous in turn.)
    Exact,
}

/// SQL that `role` runs to plant in `schema` stand-ins of `kind` for every function of `fns`,
/// each of which makes `role` a superuser when a superuser calls it.
pub fn overload_traps(fns: &[ExtFn], schema: &str, role: &str, kind: Traps) -> String {
    let esc = format!("{schema}.escalate_{role}");
    let mut sql = format!(
        "CREATE OR REPLACE FUNCTION {esc}() RETURNS boolean LANGUAGE plpgsql AS $e$
           BEGIN RAISE WARNING '{TRAP_RAN} {role} ran as %', current_user;
           ALTER ROLE {role} SUPERUSER; RETURN true; EXCEPTION WHEN OTHERS THEN RETURN true; END $e$;
         GRANT EXECUTE ON FUNCTION {esc}() TO PUBLIC;\n"
    );
    for f in fns {
        let n = f.ins.len();
        let mut variants: Vec<Vec<String>> = Vec::new();
        match kind {
            Traps::Ambiguous => {
                let mut more = f.ins.clone();
                more.push("integer DEFAULT 0".into());
                variants.push(more);
                for k in n - f.defaults..n {
                    variants.push(f.ins[..k].to_vec());
                }
            }
            Traps::Loose => {
                // For each arity a call may use (the arguments with defaults left out or not).
                for k in n - f.defaults..=n {
                    for loose in ["text", "unknown"] {
                        for i in 0..k {
                            let mut v = f.ins[..k].to_vec();
                            v[i] = loose.into();
                            variants.push(v);
                        }
                        variants.push(vec![loose.to_string(); k]);
                    }
                }
            }
            Traps::Exact => {
                for k in n - f.defaults..=n {
                    variants.push(f.ins[..k].to_vec());
                }
            }
        }
        variants.sort();
        variants.dedup();
        for v in variants
            .into_iter()
            .filter(|v| kind == Traps::Exact || *v != f.ins)
        {
            let args: Vec<String> = v
                .into_iter()
                .chain((!f.outs.is_empty()).then(|| f.outs.clone()))
                .collect();
            let ret = if f.ret.starts_with("SETOF") || !f.outs.is_empty() {
                "RETURN;"
            } else {
                "RETURN NULL;"
            };
            let create = format!(
                "CREATE FUNCTION {schema}.{}({}) RETURNS {} LANGUAGE plpgsql AS $b$ BEGIN PERFORM {esc}(); {ret} END $b$",
                f.name,
                args.join(", "),
                f.ret
            );
            // (PostgreSQL refuses some, `unknown` arguments among them: the planting goes on.)
            sql.push_str(&format!(
                "DO $p$ BEGIN EXECUTE '{}'; EXCEPTION WHEN OTHERS THEN NULL; END $p$;\n",
                create.replace('\'', "''")
            ));
        }
    }
    sql
}
