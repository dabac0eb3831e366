//! `make package` builds a .deb per major; its files, put into a clean copy of the server's
//! installation (no files of ours, no Rust toolchain involved), must be all a server needs.

mod common;
use common::{bindir, pg_config, pg_major, run, Cluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn find_deb(major: u32) -> PathBuf {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let version = env!("CARGO_PKG_VERSION");
    let want = format!("postgresql-{major}-snowflake_{version}_");
    fs::read_dir(&target)
        .expect("target/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(&want) && name.ends_with(".deb")
        })
        .unwrap_or_else(|| {
            panic!("no {want}*.deb under target/: run `make package PG_MAJOR={major}` first")
        })
}

/// The directories a server's installation consists of: its prefix, its share directory, and
/// any private libraries its programs load (a relocatable build keeps libpq and readline beside
/// itself, found through a relative rpath; Debian's load only system libraries).
fn installation(bin: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![
        bin.parent().unwrap().to_path_buf(),
        PathBuf::from(pg_config("--sharedir")),
    ];
    let walreceiver = PathBuf::from(pg_config("--pkglibdir")).join("libpqwalreceiver.so");
    for program in [bin.join("postgres"), bin.join("psql"), walreceiver] {
        for line in run(Command::new("ldd").arg(&program)).lines() {
            let Some(lib) = line.split("=> ").nth(1).and_then(|r| r.split(" (").next()) else {
                continue;
            };
            let dir = fs::canonicalize(Path::new(lib).parent().unwrap()).unwrap();
            let system = ["/lib", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"]
                .iter()
                .any(|s| dir.starts_with(s) && !dir.starts_with("/usr/lib/postgresql"));
            if !system {
                dirs.push(dir);
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    // Keep only the outermost of nested directories: a prefix holds its share directory.
    let all = dirs.clone();
    dirs.retain(|d| !all.iter().any(|o| o != d && d.starts_with(o)));
    dirs
}

fn under(root: &Path, abs: &Path) -> PathBuf {
    root.join(abs.strip_prefix("/").unwrap())
}

#[test]
fn the_deb_installs_into_a_clean_layout_and_works() {
    let major = pg_major();
    let deb = find_deb(major);
    let depends = run(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Depends"));
    assert!(
        depends.contains(&format!("postgresql-{major}")),
        "{depends}"
    );
    // The library's own needs, from its symbols: a glibc at least as new as it was linked with
    // (an older distribution's apt then refuses the package instead of a server that cannot start).
    assert!(depends.contains("libc6 (>= 2."), "{depends}");
    // Where Debian's and PGDG's postgresql-NN look for extensions.
    let contents = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    assert!(
        contents
            .lines()
            .next()
            .is_some_and(|root| root.starts_with("drwxr-xr-x root/root") && root.ends_with(" ./")),
        "the package's root entry is not 0755 root:root:\n{contents}"
    );
    let lib_dir = format!("/usr/lib/postgresql/{major}/lib");
    let ext_dir = format!("/usr/share/postgresql/{major}/extension");
    let mut expected = vec![
        format!("{lib_dir}/snowflake.so"),
        format!("{ext_dir}/snowflake.control"),
        format!("{ext_dir}/snowflake--{}.sql", env!("CARGO_PKG_VERSION")),
    ];
    // Every released version's script and every upgrade script.
    for f in fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("sql")).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().to_string();
        expected.push(format!("{ext_dir}/{name}"));
    }
    for f in expected {
        assert!(
            contents.contains(&format!(".{f}")),
            "{f} is not in the package:\n{contents}"
        );
    }

    // A copy of the server's installation (its programs find lib/ and share/ relative to
    // themselves) with every snowflake file removed...
    let real_bin = bindir();
    let root = std::env::temp_dir().join(format!("snowflake-pkg-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    for dir in installation(&real_bin) {
        let dest = under(&root, &dir);
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        run(Command::new("cp").arg("-a").arg(&dir).arg(&dest));
    }
    let pkglib = under(&root, Path::new(&pg_config("--pkglibdir")));
    let extension = under(
        &root,
        &Path::new(&pg_config("--sharedir")).join("extension"),
    );
    for dir in [&pkglib, &extension] {
        for f in fs::read_dir(dir).unwrap() {
            let p = f.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snowflake")
            {
                fs::remove_file(p).unwrap();
            }
        }
    }
    // ...and the package's files put where that server looks for them. For Debian's server
    // these are the very paths dpkg installs to.
    let unpacked = root.join("deb");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked));
    for (from, to) in [(&lib_dir, &pkglib), (&ext_dir, &extension)] {
        for f in fs::read_dir(under(&unpacked, Path::new(from))).unwrap() {
            let p = f.unwrap().path();
            fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
    assert!(pkglib.join("snowflake.so").exists());
    run(Command::new("chmod").args(["-R", "a+rX"]).arg(&root));

    let new_bin = under(&root, &real_bin);
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
