//! Real PostgreSQL clusters for the SQL tests: each test starts its own with `initdb` and
//! `pg_ctl` (as the `postgres` user when run as root, since initdb refuses root), talks to it with
//! `psql` over a private Unix socket, and removes it when dropped.
#![allow(dead_code, unused_imports)]

mod clock;
mod cluster;
mod recipes;
pub use clock::*;
pub use cluster::*;
pub use recipes::*;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The pg_config of the server under test (`make test-major` sets PG_CONFIG).
fn pg_config_path() -> String {
    std::env::var("PG_CONFIG").unwrap_or_else(|_| "/usr/bin/pg_config".into())
}

/// Runs a command that must succeed; its standard output (both outputs in the panic if not).
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// One answer of the server's pg_config, e.g. `pg_config("--sharedir")`.
pub fn pg_config(arg: &str) -> String {
    pg_config_of(&pg_config_path(), arg)
}

pub fn pg_config_of(pg_config: &str, arg: &str) -> String {
    let out = Command::new(pg_config)
        .arg(arg)
        .output()
        .unwrap_or_else(|e| panic!("{pg_config} does not run: {e}"));
    assert!(out.status.success(), "{pg_config} {arg} failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The major version of the server under test ("PostgreSQL 16.14" -> 16).
pub fn pg_major() -> u32 {
    major_of(&pg_config("--version"))
}

pub fn major_of(version: &str) -> u32 {
    version
        .trim_start_matches("PostgreSQL ")
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("not a PostgreSQL version: {version}"))
}

pub fn bindir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SNOWFLAKE_TEST_BINDIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from(pg_config("--bindir"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// A command run as the cluster's owner.
pub fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs one of PostgreSQL's programs as the cluster owner and insists that it succeeds.
fn owner_runs(program: &Path, args: &[&std::ffi::OsStr]) {
    let out = as_owner(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} failed: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An error as psql reports it with VERBOSITY verbose.
#[derive(Debug, Clone, PartialEq)]
pub struct PgError {
    pub sqlstate: String,
    pub message: String,
    pub detail: String,
    pub hint: String,
    pub raw: String,
}

pub fn parse_error(stderr: &str) -> PgError {
    let mut e = PgError {
        sqlstate: String::new(),
        message: String::new(),
        detail: String::new(),
        hint: String::new(),
        raw: stderr.to_string(),
    };
    for line in stderr.lines() {
        let line = line.trim_start_matches("psql:").trim();
        if let Some(i) = line.find("ERROR:  ").or_else(|| line.find("FATAL:  ")) {
            if e.sqlstate.is_empty() {
                let rest = &line[i + 8..];
                let (code, msg) = rest.split_once(": ").unwrap_or(("", rest));
                e.sqlstate = code.to_string();
                e.message = msg.to_string();
            }
        } else if let Some(d) = line.strip_prefix("DETAIL:  ") {
            e.detail = d.to_string();
        } else if let Some(h) = line.strip_prefix("HINT:  ") {
            e.hint = h.to_string();
        }
    }
    e
}

/// Cargo's target directory, where `make package` and `make rpm` put the packages:
/// `$CARGO_TARGET_DIR` (relative to the workspace) where it is set, else `target/`.
pub fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace.join(dir),
        _ => workspace.join("target"),
    }
}

/// The one file of the target directory whose name starts with `prefix` and ends with `ext`, made
/// by `make` (`made_by`, for the message); one only, so that an old revision left beside it is
/// noticed.
pub fn find_target_file(prefix: &str, ext: &str, made_by: &str) -> PathBuf {
    let target = target_dir();
    let found: Vec<PathBuf> = std::fs::read_dir(&target)
        .unwrap_or_else(|e| panic!("{}: {e}: run `{made_by}` first", target.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(prefix) && name.ends_with(ext)
        })
        .collect();
    match found.as_slice() {
        [one] => one.clone(),
        [] => panic!(
            "no {prefix}*{ext} under {}: run `{made_by}` first",
            target.display()
        ),
        more => panic!(
            "more than one {prefix}*{ext} under {} (remove the old): {more:?}",
            target.display()
        ),
    }
}

/// `target/postgresql-NN-snowflake_<version>-<revision>_<arch>.deb`, made by `make package`.
pub fn find_deb_file(major: u32) -> PathBuf {
    find_target_file(
        &format!(
            "postgresql-{major}-snowflake_{}-",
            env!("CARGO_PKG_VERSION")
        ),
        ".deb",
        &format!("make package PG_MAJOR={major}"),
    )
}
