//! The documents' recipes: the block after a `<!-- recipe: NAME -->` marker in README.md or docs/,
//! and running shell recipes as a user pastes them.

use super::{bindir, Cluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// README shell blocks as one script, in order, as a user pastes them into one shell. The test
/// stops at the first failing command; a user's shell need not, so the blocks have no `set -e`.
pub fn readme_script(blocks: &[&str]) -> String {
    let mut script = vec!["set -e".to_string()];
    script.extend(blocks.iter().map(|b| readme_recipe(b)));
    script.join("\n")
}

/// Runs README blocks as one bash script, with the server's programs first on PATH and `vars`
/// in the environment; panics with the output when it fails, else returns its trimmed stdout.
pub fn run_recipes(blocks: &[&str], vars: &[(&str, String)]) -> String {
    let path = format!("{}:{}", bindir().display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg("-c")
        .arg(readme_script(blocks))
        .env("PATH", path)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "README recipes {blocks:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
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
