//! `make package` builds a .deb; installed into a clean copy of PostgreSQL's directory layout
//! (no files of ours, no Rust toolchain involved), it must be all a server needs.

mod common;
use common::{bindir, Cluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn find_deb() -> PathBuf {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let version = env!("CARGO_PKG_VERSION");
    fs::read_dir(&target)
        .expect("target/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("postgresql-")
                && name.contains(&format!("-snowflake_{version}_"))
                && name.ends_with(".deb")
        })
        .unwrap_or_else(|| {
            panic!("no .deb of version {version} under target/: run `make package` first")
        })
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn the_deb_installs_into_a_clean_layout_and_works() {
    let deb = find_deb();
    let depends = run(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Depends"));
    assert!(depends.contains("postgresql-15"), "{depends}");

    // A copy of Debian's PostgreSQL layout (binaries find lib/ and share/ relative to
    // themselves) with every snowflake file removed, then the package unpacked into it.
    let real_bin = bindir();
    let pg_lib = real_bin.parent().unwrap().to_path_buf(); // /usr/lib/postgresql/15
    let share =
        PathBuf::from(run(Command::new(real_bin.join("pg_config")).arg("--sharedir")).trim());
    let root = std::env::temp_dir().join(format!("snowflake-pkg-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    for dir in [&pg_lib, &share] {
        let dest = root.join(dir.strip_prefix("/").unwrap());
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        run(Command::new("cp").arg("-a").arg(dir).arg(&dest));
    }
    for f in fs::read_dir(
        root.join(share.strip_prefix("/").unwrap())
            .join("extension"),
    )
    .unwrap()
    {
        let p = f.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("snowflake")
        {
            fs::remove_file(p).unwrap();
        }
    }
    let so = root
        .join(pg_lib.strip_prefix("/").unwrap())
        .join("lib/snowflake.so");
    let _ = fs::remove_file(&so);
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    assert!(so.exists(), "the package has no snowflake.so");
    run(Command::new("chmod").args(["-R", "a+rX"]).arg(&root));

    let new_bin = root.join(real_bin.strip_prefix("/").unwrap());
    // SAFETY (of the global): this test binary has this one test.
    std::env::set_var("SNOWFLAKE_TEST_BINDIR", &new_bin);
    let mut c = Cluster::new("package", "snowflake.worker_id = 12");
    c.start();
    let out = c.sql(
        "CREATE EXTENSION snowflake; SELECT (snowflake_decode(snowflake_nextval())).worker_id, \
         (SELECT extversion FROM pg_extension WHERE extname = 'snowflake'), \
         (SELECT setting FROM pg_settings WHERE name = 'dynamic_library_path')",
    );
    assert_eq!(out, format!("12|{}|$libdir", env!("CARGO_PKG_VERSION")));
    let libdir = run(Command::new(new_bin.join("pg_config")).arg("--pkglibdir"));
    assert!(
        libdir.trim().starts_with(root.to_str().unwrap()),
        "the copy must load its own libraries: {libdir}"
    );
    c.sql("CREATE DATABASE up");
    c.try_sql_in(
        "up",
        "CREATE EXTENSION snowflake VERSION '1.0.0'; ALTER EXTENSION snowflake UPDATE",
    )
    .unwrap();
    drop(c);
    let _ = fs::remove_dir_all(&root);
}
