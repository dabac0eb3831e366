//! The documents keep their promises: the README's Quick start works as written, every recipe
//! is run by a test, every link between the documents resolves (file and heading), every place
//! a message of the code points at exists, the reference lists every SQLSTATE the code raises,
//! and its settings table says what the server defines.

mod common;
use common::{as_owner, bindir, doc_files, readme_recipe, Cluster};
use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file of the project: the README, docs/, and the contributors' CONTRIBUTING,
/// CHANGELOG, ARCHITECTURE, DESIGN and the benchmark's bench/README.md.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = doc_files();
    files.extend(
        [
            "CONTRIBUTING.md",
            "CHANGELOG.md",
            "ARCHITECTURE.md",
            "DESIGN.md",
            "bench/README.md",
        ]
        .map(|f| root().join(f)),
    );
    files
}

/// The text outside fenced code blocks (a `#` line in a shell block is no heading, and a
/// `](...)` in code is no link).
fn prose(text: &str) -> String {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match &fence {
            Some(f) if t.starts_with(f.as_str()) && t.trim_end() == f => fence = None,
            Some(_) => {}
            None if t.starts_with("```") => {
                fence = Some(t.chars().take_while(|&c| c == '`').collect());
            }
            None => out.push(line),
        }
    }
    out.join("\n")
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-` and `_`), spaces to
/// hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for h in headings(text) {
        let slug: String = h
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The headings of a document, as written.
fn headings(text: &str) -> Vec<String> {
    prose(text)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| h.trim_start_matches('#'))
        .filter(|h| h.starts_with(' '))
        .map(|h| h.trim().to_string())
        .collect()
}

/// The targets of the inline links `[text](target)` of a document's prose.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_link_between_the_documents_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = fs::read_to_string(&file).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            checked += 1;
            if target.is_empty() {
                broken.push(format!("{}: an empty link", file.display()));
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !dest.exists() {
                broken.push(format!("{}: {target}: no such file", file.display()));
                continue;
            }
            if let Some(a) = anchor {
                let dtext = fs::read_to_string(&dest).unwrap_or_default();
                if !anchors(&dtext).contains(a) {
                    broken.push(format!("{}: {target}: no such heading", file.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short_and_starts_with_the_quick_start() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.len() <= 16 * 1024,
        "README.md is {} bytes",
        readme.len()
    );
    // The Quick start comes first and installs before it configures: the package, built on a
    // build host and installed on the server, then `make install` on the server as the second
    // way; its configuration and SQL follow within the first 6 KB.
    let quick = readme.find("## Quick start").expect("a Quick start");
    let package = readme
        .find("make package")
        .expect("the Quick start builds a package");
    let apt = readme.find("apt-get install ./").expect("and installs it");
    let install = readme
        .find("make install")
        .expect("make install as the second way");
    let configure = readme.find("<!-- recipe: quick-start-configure ").unwrap();
    let end = readme.find("<!-- recipe: quick-start ").unwrap() + 1000;
    assert!(
        quick < package && package < apt && apt < install && install < configure,
        "the Quick start's order: package {package}, apt-get {apt}, make install {install}, configure {configure}"
    );
    assert!(
        quick < 2 * 1024 && end < 6 * 1024,
        "the Quick start starts at byte {quick} and ends at byte {end}"
    );
    for must in ["make demo", "make test", "LICENSE"] {
        assert!(readme.contains(must), "README.md does not mention {must}");
    }
    assert!(root().join("LICENSE").exists());
}

/// The user docs (README.md and docs/) stay within issue 52's budget: at most 9,000 words of
/// prose and a median sentence of at most 18 words, as `scripts/doc-words` counts them (its
/// header says what counts as a word and where a sentence ends).
#[test]
fn the_user_docs_stay_short() {
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/doc-words"))
        .arg("--check")
        .output()
        .expect("python3 runs scripts/doc-words");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_recipe_is_run_by_a_test() {
    let mut tests = String::new();
    for e in fs::read_dir(root().join("tests")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            tests.push_str(&fs::read_to_string(p).unwrap());
        }
    }
    let mut names = Vec::new();
    for file in doc_files() {
        let text = fs::read_to_string(&file).unwrap();
        for part in text.split("<!-- recipe: ").skip(1) {
            let name = part.split(' ').next().unwrap();
            names.push(name.to_string());
            // The block is there, and the marker's name is unique across the documents.
            readme_recipe(name);
        }
    }
    assert!(names.len() > 20, "only {} recipes found", names.len());
    let unused: Vec<_> = names
        .iter()
        .filter(|n| !tests.contains(&format!("\"{n}\"")))
        .collect();
    assert!(unused.is_empty(), "recipes no test runs: {unused:?}");
}

/// No recipe can hang: a loop that waits is bounded (`for ... in $(seq N)`, as the mesh
/// recipes' `await` is) and fails naming what it waited for; none loops `until` or `while` a
/// condition, which may never come (1.6.0's mesh-add waited for every subscription of the
/// database, forever on PostgreSQL 19 beside one `FOR ALL SEQUENCES`).
#[test]
fn no_recipe_waits_without_a_bound() {
    for file in doc_files() {
        let text = fs::read_to_string(&file).unwrap();
        for part in text.split("<!-- recipe: ").skip(1) {
            let name = part.split(' ').next().unwrap();
            for line in readme_recipe(name).lines() {
                let code = line.split(" #").next().unwrap().trim_start();
                assert!(
                    !(code.starts_with("until ") || code.starts_with("while ")),
                    "recipe {name} waits with no bound: {line}"
                );
            }
        }
    }
}

/// The extension's source: Rust and SQL under src/.
/// ARCHITECTURE.md's table of the glue's layers is true: no module of `src/` names a module of a
/// higher layer in its code (doc comments aside), so the glue has no import cycle (1.7.0's
/// generator named the lease worker's hint, tying four modules into one).
#[test]
fn the_glue_imports_only_downwards() {
    let arch = fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut layer = HashMap::new();
    for line in arch.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Ok(n) = cells[1].parse::<u32>() else {
            continue;
        };
        for module in cells[2].split(',') {
            layer.insert(module.trim().trim_matches('`').to_string(), n);
        }
    }
    assert!(layer.len() >= 15, "{layer:?}");
    let mut upward = Vec::new();
    for entry in fs::read_dir(root().join("src")).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_string_lossy().to_string();
        let (Some(&own), Some("rs")) = (
            layer.get(&module),
            path.extension().and_then(|e| e.to_str()),
        ) else {
            continue;
        };
        let text = fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for part in line.split("crate::").skip(1) {
                let dep: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if layer.get(&dep).is_some_and(|&l| l > own) {
                    upward.push(format!(
                        "src/{module}.rs:{}: {module} ({own}) names {dep} ({})",
                        i + 1,
                        layer[&dep]
                    ));
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports upwards:\n{}", upward.join("\n"));
}

fn source_files() -> Vec<PathBuf> {
    let mut sources = Vec::new();
    for dir in ["src", "core/src"] {
        for e in fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs" || x == "sql") {
                sources.push(p);
            }
        }
    }
    sources
}

/// `see "Heading" in docs/file.md` in a message must name a heading of that file.
#[test]
fn places_the_messages_point_at_exist() {
    let mut found = 0;
    let mut bad = Vec::new();
    for p in source_files() {
        let text = fs::read_to_string(&p).unwrap().replace("\\\"", "\"");
        assert!(
            !text.contains("in the README"),
            "{} points at the README; messages name a file of docs/",
            p.display()
        );
        for (i, _) in text.match_indices("\" in docs/") {
            let start = text[..i].rfind('"').unwrap() + 1;
            let heading = &text[start..i];
            let file: String = text[i + 5..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
                .collect();
            let file = file.trim_end_matches('.');
            found += 1;
            match fs::read_to_string(root().join(file)) {
                Ok(doc) if headings(&doc).iter().any(|h| h == heading) => {}
                Ok(_) => bad.push(format!(
                    "{}: \"{heading}\" is no heading of {file}",
                    p.display()
                )),
                Err(_) => bad.push(format!("{}: {file} does not exist", p.display())),
            }
        }
    }
    assert!(
        found >= 3,
        "only {found} references found: is the parser right?"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Every SQLSTATE the code raises, by PostgreSQL's names (ERRCODE_... in Rust, condition names
/// in PL/pgSQL), is a row of the reference's error table.
#[test]
fn the_reference_lists_every_sqlstate_the_code_raises() {
    let header = Path::new(&common::pg_config("--includedir-server")).join("utils/errcodes.h");
    let mut codes: HashMap<String, String> = HashMap::new();
    for line in fs::read_to_string(&header).unwrap().lines() {
        // #define ERRCODE_SYSTEM_ERROR MAKE_SQLSTATE('5','8','0','0','0')
        let mut w = line.split_whitespace();
        if let (Some("#define"), Some(name), Some(v)) = (w.next(), w.next(), w.next()) {
            if let Some(args) = v.strip_prefix("MAKE_SQLSTATE(") {
                let code: String = args.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
                codes.insert(name.to_string(), code);
            }
        }
    }
    assert!(
        codes.len() > 200,
        "{} has {} codes",
        header.display(),
        codes.len()
    );
    let mut raised = BTreeSet::new();
    let mut unknown = Vec::new();
    for p in source_files() {
        let text = fs::read_to_string(&p).unwrap();
        let mut names: Vec<String> = Vec::new();
        for (i, _) in text.match_indices("ERRCODE_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            names.push(name);
        }
        for (i, m) in text.match_indices("ERRCODE = '") {
            let cond: String = text[i + m.len()..]
                .chars()
                .take_while(|c| *c != '\'')
                .collect();
            names.push(format!("ERRCODE_{}", cond.to_uppercase()));
        }
        for n in names {
            // PL/pgSQL's names of the transaction-rollback class (serialization_failure) are
            // ERRCODE_T_R_... in errcodes.h.
            let rollback = n.replacen("ERRCODE_", "ERRCODE_T_R_", 1);
            match codes.get(&n).or_else(|| codes.get(&rollback)) {
                Some(c) => {
                    raised.insert(c.clone());
                }
                None => unknown.push(format!("{}: {n}", p.display())),
            }
        }
    }
    assert!(unknown.is_empty(), "unknown condition names: {unknown:?}");
    assert!(raised.len() >= 10, "only {raised:?} found");
    let reference = fs::read_to_string(root().join("docs/reference.md")).unwrap();
    let missing: Vec<_> = raised
        .iter()
        .filter(|c| !reference.contains(&format!("| `{c}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "SQLSTATEs the code raises that docs/reference.md's error table lacks: {missing:?}"
    );
}

/// The first string literal of `text` (Rust's escapes `\"` and `\\` undone), and where it ends.
fn first_literal(text: &str) -> Option<(String, usize)> {
    let start = text.find('"')? + 1;
    let mut out = String::new();
    let mut chars = text[start..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, e)) = chars.next() {
                    out.push(e);
                }
            }
            '"' => return Some((out, start + i + 1)),
            c => out.push(c),
        }
    }
    None
}

/// The primary message of every error the extension raises with a SQLSTATE of its own (not its
/// WARNINGs, nor the lease worker's own log lines), with where it is raised:
/// - in Rust, the argument right after an `ERRCODE_...` when it is a string literal or a
///   `format!` of one; where it is not (a message another function builds, such as PostgreSQL's
///   words for a setting out of range), it is not checked here. The text functions' messages are
///   `CodecError`'s `Display` in core/src/codec.rs, read from there, and the messages a `match`
///   chooses (`=> (format!("...")`: the Citus pair's refusals, the guard's) are read too;
/// - in PL/pgSQL, the `MESSAGE` of every `RAISE EXCEPTION`.
fn raised_messages() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in source_files() {
        let text = fs::read_to_string(&p).unwrap();
        let name = p.strip_prefix(root()).unwrap().display().to_string();
        if name.ends_with(".sql") {
            for (i, _) in text.match_indices("RAISE EXCEPTION") {
                let stmt = &text[i..i + text[i..].find(';').unwrap()];
                if let Some(m) = stmt.find("MESSAGE = ") {
                    let quoted = &stmt[m..];
                    let start = quoted.find('\'').unwrap() + 1;
                    let mut msg = String::new();
                    let mut rest = quoted[start..].chars().peekable();
                    while let Some(c) = rest.next() {
                        if c == '\'' {
                            if rest.peek() == Some(&'\'') {
                                rest.next();
                                msg.push('\'');
                                continue;
                            }
                            break;
                        }
                        msg.push(c);
                    }
                    out.push((name.clone(), msg));
                }
            }
            continue;
        }
        if name == "core/src/codec.rs" {
            let body = &text[text.find("impl fmt::Display for CodecError").unwrap()..];
            let body = &body[..body.find("\n}\n").unwrap()];
            for (i, _) in body.match_indices("write!(") {
                if let Some((msg, _)) = first_literal(&body[i..]) {
                    out.push((name.clone(), msg));
                }
            }
            continue;
        }
        for (i, _) in text.match_indices("ERRCODE_") {
            let code: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            if code == "ERRCODE_WARNING" {
                continue;
            }
            // The statement: up to its `;`, the end of its function, or the next code.
            let rest = &text[i + code.len()..];
            let end = [rest.find(';'), rest.find("\n}\n"), rest.find("ERRCODE_")]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(rest.len());
            // The message is the argument right after the code: a literal, or `format!` of one.
            let arg = rest[..end]
                .trim_start()
                .trim_start_matches(',')
                .trim_start();
            let arg = arg.strip_prefix("format!(").unwrap_or(arg).trim_start();
            if arg.starts_with('"') {
                let (msg, _) = first_literal(arg).unwrap();
                out.push((name.clone(), msg));
            }
        }
        // A message chosen by a `match` and raised as a variable: each arm's tuple starts with
        // it (`=> (format!("...")` or `=> ("...".to_string()`).
        for (i, _) in text.match_indices("=> (") {
            let arm = text[i + 4..].trim_start();
            let arm = arm.strip_prefix("format!(").unwrap_or(arm).trim_start();
            if arm.starts_with('"') {
                let (msg, _) = first_literal(arm).unwrap();
                if msg.starts_with(|c: char| c.is_lowercase()) {
                    out.push((name.clone(), msg));
                }
            }
        }
    }
    out
}

/// Every primary message the code raises is in the reference's error table, as written: each
/// stretch of it between two placeholders (`{...}` in Rust, `%s` and `%I` in PL/pgSQL) that has
/// a word in it appears in the Errors section.
#[test]
fn the_reference_lists_every_error_message_the_code_raises() {
    let reference = fs::read_to_string(root().join("docs/reference.md")).unwrap();
    let errors = reference
        .split_once("\n## Errors\n")
        .expect("docs/reference.md has a ## Errors section")
        .1;
    let messages = raised_messages();
    assert!(
        messages.len() >= 40,
        "only {} messages found: is the parser right? {messages:?}",
        messages.len()
    );
    let mut missing = Vec::new();
    for (file, msg) in &messages {
        let mut fixed = msg.clone();
        for placeholder in ["%s", "%I", "%L"] {
            fixed = fixed.replace(placeholder, "\u{0}");
        }
        let mut parts = Vec::new();
        let mut rest = fixed.as_str();
        while let Some(open) = rest.find('{') {
            parts.push(&rest[..open]);
            rest = &rest[open + rest[open..].find('}').map_or(1, |c| c + 1)..];
        }
        parts.push(rest);
        for part in parts.iter().flat_map(|p| p.split('\u{0}')) {
            let part = part.trim();
            if part.chars().filter(|c| c.is_alphanumeric()).count() >= 4 && !errors.contains(part) {
                missing.push(format!("{file}: \"{part}\" of \"{msg}\""));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "messages the code raises that docs/reference.md's error table lacks:\n{}",
        missing.join("\n")
    );
}

/// The deployment checklist of docs/operations.md, as written: on a server set up as the Quick
/// start says, every check it can judge is `t`; the pair and the epoch show their values; a
/// server that kept the default pair fails its check.
#[test]
fn the_deployment_checklist_works_as_written() {
    let rows = |c: &Cluster| -> HashMap<String, (String, String)> {
        let out = c
            .script(&readme_recipe("checklist"))
            .unwrap_or_else(|e| panic!("the checklist failed: {}", e.raw));
        out.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() == 3).then(|| (f[0].to_string(), (f[1].to_string(), f[2].to_string())))
            })
            .collect()
    };
    let mut c = Cluster::new(
        "checklist",
        "snowflake.datacenter_id = 1\nsnowflake.worker_id = 7",
    );
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    c.sql("SELECT snowflake_nextval()");
    let got = rows(&c);
    assert_eq!(got.len(), 10, "{got:?}");
    for (item, (value, ok)) in &got {
        assert!(
            ok == "t" || ok.is_empty(),
            "checklist item {item} is not ok on a server set up as documented: {value} {ok}"
        );
    }
    assert_eq!(got["pair set"].0, "1/7");
    assert_eq!(
        got["epoch"].0,
        c.sql("SELECT epoch::text FROM snowflake_node()")
    );
    assert_eq!(got["lease database owned by a superuser"].0, "postgres");
    // A server that kept the default pair, and a schema others may create in, fail their checks.
    let mut d = Cluster::new("checklist-default", "");
    d.start();
    d.sql("CREATE ROLE eve; GRANT CREATE ON SCHEMA public TO eve; CREATE EXTENSION snowflake");
    let got = rows(&d);
    assert_eq!(got["pair set"], ("0/0".to_string(), "f".to_string()));
    assert_eq!(
        got["roles that may create in that schema"],
        ("eve".to_string(), "f".to_string())
    );
}

/// The Quick start, as a new user runs it: the configuration written and the server restarted
/// by the shell block, then the SQL block; on a cluster with its configuration in its data
/// directory (restarted by pg_ctl), and on a Debian-style one (conf.d/, pg_ctlcluster).
#[test]
fn the_quick_start_works_as_written() {
    let mut c = Cluster::with_preload("quick-start", "", false);
    c.start();
    quick_start_on(&c);
}

/// On a cluster laid out as Debian's: made by pg_createcluster where the server under test is
/// Debian's, else the same layout made by initdb (`Cluster::debian_style`). It already preloads
/// another library, which the recipe keeps, and another file of conf.d/ sets a worker ID, which
/// the recipe's file overrides; postgresql.conf is left alone.
#[test]
fn the_quick_start_works_as_written_on_a_debian_style_cluster() {
    let mut c = Cluster::debian_style(
        &bindir(),
        "quick-start-debian",
        // PL/pgSQL: a library every build has (19 built from source has no contrib).
        "shared_preload_libraries = 'plpgsql'\nsnowflake.worker_id = 30",
        false,
    );
    c.start();
    quick_start_on(&c);
    assert_eq!(c.sql("SHOW shared_preload_libraries"), "plpgsql, snowflake");
    // Run again (another pair, or a DBA unsure it ran): the library is listed once.
    configure(&c);
    assert_eq!(c.sql("SHOW shared_preload_libraries"), "plpgsql, snowflake");
    let written = fs::read_to_string(c.conf_dir.join("conf.d/snowflake.conf")).unwrap();
    assert!(written.contains("snowflake.worker_id = 7"), "{written}");
    let main = fs::read_to_string(c.conf_dir.join("postgresql.conf")).unwrap();
    assert!(
        !main
            .lines()
            .any(|l| l.starts_with("snowflake.") || l.starts_with("shared_preload_libraries")),
        "postgresql.conf changed"
    );
}

/// Issue 58: where `public` is open to everyone (14's default, which pg_upgrade keeps), eve
/// plants a stand-in for every function and operator that the configure recipe's queries name,
/// `public.concat_ws(text, text, text)` among them (in 1.7.0 it beat pg_catalog's variadic one
/// and made her a superuser). The recipe as written runs none of them, and still works.
#[test]
fn the_quick_start_runs_nothing_planted_where_public_is_open() {
    let mut c = Cluster::with_preload("quick-start-open", "", false);
    c.start();
    c.sql("CREATE ROLE eve LOGIN; GRANT CREATE ON SCHEMA public TO PUBLIC");
    let traps = common::recipe_traps(&[&readme_recipe("quick-start-configure")], "public", "eve");
    common::plant_as(&c, "eve", "postgres", &traps);
    assert_eq!(
        c.sql("SELECT to_regprocedure('public.concat_ws(text, text, text)') IS NOT NULL"),
        "t",
        "the stand-in was not planted"
    );
    let printed = quick_start_on(&c);
    assert!(!printed.contains(common::TRAP_RAN), "{printed}");
    assert_eq!(
        c.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'eve'"),
        "f",
        "the configure recipe ran eve's code as superuser:\n{printed}"
    );
}

/// Runs `cmd` in `c`'s directory with no input, its output to the file `name` there (not a pipe:
/// a server it restarts keeps that open); its exit status and what it printed.
fn run_in(c: &Cluster, name: &str, cmd: &mut Command) -> (std::process::ExitStatus, String) {
    let out = fs::File::create(c.dir.join(name)).unwrap();
    let status = cmd
        .current_dir(&c.dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .status()
        .unwrap();
    (status, fs::read_to_string(c.dir.join(name)).unwrap())
}

/// The Quick start's shell block, run as written against `c`; what it printed.
fn configure(c: &Cluster) -> String {
    let path = format!("{}:{}", bindir().display(), std::env::var("PATH").unwrap());
    let mut configure = as_owner(Path::new("env"));
    configure
        .arg(format!("PGHOST={}", c.dir.display()))
        .arg(format!("PGPORT={}", c.port))
        .args(["PGUSER=postgres", "PGDATABASE=postgres"])
        .arg(format!("PATH={path}"))
        .args(["bash", "-e", "-c", &readme_recipe("quick-start-configure")]);
    let (status, printed) = run_in(c, "quick-start.out", &mut configure);
    assert!(
        status.success(),
        "the Quick start's configuration failed:\n{printed}"
    );
    // A cluster of Debian's (config in /etc/postgresql): the recipe does not restart it (as
    // postgres, postgresql-common refuses that for a cluster systemd runs), it prints the
    // cluster, and the restart recipe runs as root with that cluster for "15 main". What this
    // cannot show: systemd (none runs here), so pg_ctlcluster restarts the server itself rather
    // than through systemctl, and its refusal as postgres is not seen either.
    let debian = printed
        .lines()
        .find_map(|l| l.strip_prefix("As root: pg_ctlcluster "))
        .and_then(|l| l.strip_suffix(" restart"));
    assert_eq!(
        debian.is_some(),
        c.conf_dir.starts_with("/etc/postgresql"),
        "{printed}"
    );
    if let Some(cluster) = debian {
        let recipe = readme_recipe("quick-start-restart");
        assert!(recipe.contains("pg_ctlcluster 15 main restart"), "{recipe}");
        let mut restart = Command::new("bash");
        restart.args(["-e", "-c", &recipe.replace("15 main", cluster)]);
        let (status, restarted) = run_in(c, "quick-start-restart.out", &mut restart);
        assert!(status.success(), "the restart failed:\n{restarted}");
    }
    printed
}

/// The Quick start on `c`, checked; what its shell block printed.
fn quick_start_on(c: &Cluster) -> String {
    let printed = configure(c);
    // The check printed no file that overrides the recipe's lines, and the restart sent no
    // server log to the calling shell: the restarted server logs to the cluster's log file
    // (Debian's) or to the one the recipe gives pg_ctl.
    assert!(
        !printed.contains(".conf") && !printed.contains("LOG:"),
        "the Quick start printed:\n{printed}"
    );
    let log = if c.debian.is_some() {
        c.log()
    } else {
        fs::read_to_string(c.data.join("server.log")).unwrap_or_default()
    };
    assert!(
        log.contains("database system is shut down") || c.debian.is_none(),
        "{log}"
    );
    assert!(
        log.rsplit("database system is shut down")
            .next()
            .is_some_and(|after| after.contains("ready to accept connections")),
        "the restarted server's log is not in its log file:\n{log}"
    );
    let lines: Vec<String> = c
        .script(&readme_recipe("quick-start"))
        .unwrap_or_else(|e| panic!("the Quick start's SQL failed: {}", e.raw))
        .lines()
        .map(String::from)
        .collect();
    // The new ID, its decoded parts (the pair the configuration set), and the row found by time.
    assert_eq!(lines.len(), 3, "{lines:?}");
    let id: i64 = lines[0].parse().unwrap();
    let decoded: Vec<&str> = lines[1].split('|').collect();
    assert_eq!(&decoded[1..3], ["1", "7"], "{lines:?}");
    assert_eq!(lines[2], format!("{id}|book"));
    assert!(c
        .sql("SHOW shared_preload_libraries")
        .ends_with("snowflake"));
    printed
}

/// The extension at 1.4.0 with a view on `snowflake_node()`, updated to 1.5.0 (which keeps that
/// function as `snowflake_node_1_4()` outside the extension for the view), the view then dropped.
const KEPT_1_4: &str = "CREATE EXTENSION snowflake VERSION '1.4.0' SCHEMA snowflake;
     CREATE VIEW node AS SELECT * FROM snowflake.snowflake_node();
     ALTER EXTENSION snowflake UPDATE TO '1.5.0'; DROP VIEW node";

/// The removal procedure: the query finds the column whose default calls snowflake, the
/// recipe switches it and drops the extension, new keys continue above the old ones, and the
/// server starts without the library.
#[test]
fn the_removal_recipe_frees_the_tables_and_the_server() {
    let mut c = Cluster::new("removal", "snowflake.worker_id = 3");
    c.start();
    // In the schema the recipe names (see docs/security.md).
    // Installed at 1.4.0 with a view on snowflake_node(), which the update to 1.5.0 keeps as
    // snowflake_node_1_4() outside the extension; the view goes, the function stays.
    c.sql(&format!(
        "CREATE SCHEMA snowflake; {KEPT_1_4}; ALTER EXTENSION snowflake UPDATE"
    ));
    c.sql(
        "CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake.snowflake_nextval(), item text);
         CREATE TABLE notes (id bigint PRIMARY KEY, body text);
         INSERT INTO orders (item) SELECT 'old' FROM generate_series(1, 3);",
    );
    let max_old = c.sql_i64("SELECT max(id) FROM orders");
    assert_eq!(c.sql_err("DROP EXTENSION snowflake").sqlstate, "2BP01");
    // Only a snowflake default is replaced.
    let e = c.sql_err("SELECT snowflake.snowflake_unadopt('notes')");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    let out = c
        .script(&readme_recipe("removal"))
        .unwrap_or_else(|e| panic!("the removal recipe failed: {}", e.raw));
    assert_eq!(out.lines().next(), Some("public.orders|id"), "{out}");
    assert_eq!(
        c.sql("SELECT count(*) FROM pg_extension WHERE extname = 'snowflake'"),
        "0"
    );
    // Nothing of it is left: installing it again at 1.4.0 and updating works (1.5.0's recipe
    // left snowflake_node_1_4() behind, and that update then failed).
    assert_eq!(
        c.sql("SELECT count(*) FROM pg_proc WHERE proname LIKE 'snowflake%'"),
        "0"
    );
    c.sql(&format!(
        "{KEPT_1_4}; DROP EXTENSION snowflake; DROP FUNCTION snowflake.snowflake_node_1_4()"
    ));
    let new = c.sql_i64("INSERT INTO orders (item) VALUES ('new') RETURNING id");
    assert!(new > max_old, "{new} is not above {max_old}");
    assert_eq!(
        c.sql("SELECT attidentity FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'id'"),
        "d"
    );
    // Step 2: the library out of shared_preload_libraries, and the server starts without it.
    c.stop("fast");
    let conf = c.data.join("postgresql.conf");
    let text = fs::read_to_string(&conf).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("shared_preload_libraries") && !l.starts_with("snowflake."))
        .collect();
    fs::write(&conf, kept.join("\n") + "\n").unwrap();
    c.start();
    assert_eq!(c.sql("SELECT count(*) FROM orders"), "4");
    // Step 4 keeps `_snowflake` while the pair may be used again: the server preloads it again
    // later, its clock 30 s behind, and issues above every ID it issued before.
    c.stop("fast");
    c.conf("shared_preload_libraries = 'snowflake'\nsnowflake.worker_id = 3\nsnowflake.max_clock_drift = '60s'");
    c.fake_time(Some("-30s"));
    c.start();
    if common::worker_sees_the_clock(&c) {
        c.sql("CREATE EXTENSION snowflake SCHEMA snowflake");
        let again = c.sql_i64("SELECT snowflake.snowflake_nextval()");
        assert!(again > max_old, "{again} is not above {max_old}");
    }
}

/// The partitions example: ten days made (3 back, today, 6 ahead), a second call makes none,
/// and the query and the retention call run.
#[test]
fn the_partitions_example_works_as_written() {
    let mut c = Cluster::new("partitions-example", "snowflake.worker_id = 2");
    c.start();
    c.sql("CREATE EXTENSION snowflake");
    let out = c
        .script(&readme_recipe("partitions"))
        .unwrap_or_else(|e| panic!("the partitions example failed: {}", e.raw));
    assert_eq!(
        out.lines().filter(|l| l.starts_with("events_")).count(),
        10,
        "{out}"
    );
    assert_eq!(
        c.sql("SELECT count(*) FROM snowflake_create_partitions('events', now() - interval '3 days', now() + interval '7 days')"),
        "0"
    );
    assert_eq!(
        c.sql("SELECT count(*) FROM snowflake_partitions('events')"),
        "10"
    );
}

/// The JSON example gives the ID as a string, all 19 digits of it.
#[test]
fn the_json_example_sends_ids_as_strings() {
    let mut c = Cluster::new("json-example", "snowflake.worker_id = 4");
    c.start();
    let id = c.sql(
        "CREATE EXTENSION snowflake;
         CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), item text);
         INSERT INTO orders (item) VALUES ('book') RETURNING id",
    );
    let out = c
        .script(&readme_recipe("json"))
        .unwrap_or_else(|e| panic!("the JSON example failed: {}", e.raw));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].contains(&format!("\"id\" : \"{id}\"")), "{out}");
    assert!(lines[1].contains(&format!("\"id\": \"{id}\"")), "{out}");
}

/// The rows of the reference's settings table: setting, type and range, default, context (each
/// cell without its backticks).
fn reference_settings() -> Vec<Vec<String>> {
    let text = fs::read_to_string(root().join("docs/reference.md")).unwrap();
    let table = text
        .split_once("\n## Settings\n")
        .expect("docs/reference.md has a ## Settings section")
        .1;
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .take(4)
                .map(|cell| cell.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

/// The reference's settings table says what the server defines: the same names, and for each its
/// default, its bounds where the table writes them as `min..max`, and when a change takes effect
/// (postmaster: "restart", sighup: "reload"), as `pg_settings` shows them. A time is compared
/// as PostgreSQL reads it, in the setting's unit.
#[test]
fn the_reference_lists_the_settings_the_server_defines() {
    let mut c = Cluster::new("settings-table", "");
    c.start();
    let server: HashMap<String, Vec<String>> = c
        .sql("SELECT name, boot_val, coalesce(unit, ''), context, coalesce(min_val, ''), coalesce(max_val, '') FROM pg_settings WHERE name LIKE 'snowflake.%'")
        .lines()
        .map(|l| {
            let f: Vec<String> = l.split('|').map(String::from).collect();
            (f[0].clone(), f[1..].to_vec())
        })
        .collect();
    // A value of the table in the setting's unit, read by the server ("10s" in ms is 10000).
    let in_unit = |value: &str, unit: &str| -> f64 {
        match unit {
            "" => value.parse().unwrap_or(f64::NAN),
            "ms" => c
                .sql(&format!(
                    "SELECT extract(epoch FROM interval '{value}') * 1000"
                ))
                .parse()
                .unwrap(),
            other => panic!("no conversion to {other} here"),
        }
    };
    let docs = reference_settings();
    let mut wrong = Vec::new();
    for row in &docs {
        let (name, range, default, context) = (&row[0], &row[1], &row[2], &row[3]);
        let Some(s) = server.get(name) else {
            wrong.push(format!(
                "{name}: in the reference, not defined by the server"
            ));
            continue;
        };
        let (boot, unit, pg_context, min, max) = (&s[0], &s[1], &s[2], &s[3], &s[4]);
        let same = |doc: &str, pg: &str| {
            doc == pg || (!min.is_empty() && in_unit(doc, unit) == pg.parse::<f64>().unwrap())
        };
        if !same(default, boot) {
            wrong.push(format!(
                "{name}: default {default} in the reference, {boot} {unit} on the server"
            ));
        }
        let restart_or_reload = match pg_context.as_str() {
            "postmaster" => "restart",
            "sighup" => "reload",
            other => other,
        };
        if context != restart_or_reload {
            wrong.push(format!(
                "{name}: context {context} in the reference, {pg_context} on the server"
            ));
        }
        // "integer 0..31", "time, 15s..1d (ms if no unit)": the bounds.
        if let Some((lo, hi)) = range
            .split_whitespace()
            .find_map(|w| w.trim_end_matches(',').split_once(".."))
        {
            if !same(lo, min) || !same(hi, max) {
                wrong.push(format!(
                    "{name}: range {lo}..{hi} in the reference, {min}..{max} {unit} on the server"
                ));
            }
        }
    }
    for name in server.keys() {
        if !docs.iter().any(|row| &row[0] == name) {
            wrong.push(format!(
                "{name}: defined by the server, missing from the reference"
            ));
        }
    }
    assert!(
        docs.len() >= 7,
        "the settings table was not found: {docs:?}"
    );
    assert!(
        wrong.is_empty(),
        "docs/reference.md's settings table and pg_settings disagree:\n{}",
        wrong.join("\n")
    );
}

/// Every figure of docs/performance.md comes from bench/results: the page's tables are what
/// bench/render.py renders from the results' JSON, so a table edited by hand, or results
/// re-measured without re-rendering, fail here.
#[test]
fn the_performance_page_shows_the_benchmark_results() {
    let out = std::process::Command::new("python3")
        .arg(root().join("bench/render.py"))
        .arg("--check")
        .output()
        .expect("python3 runs bench/render.py");
    assert!(
        out.status.success(),
        "docs/performance.md differs from bench/results (run python3 bench/render.py):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
