//! `make package` builds a .deb per major; its files, put into a clean copy of the server's
//! installation (no files of ours, no Rust toolchain involved), must be all a server needs. The
//! package is a Debian package a DBA can install: a revision and a maintainer, the licence in
//! DEP-5 form, a changelog, the library stripped (its symbols in the -dbgsym package), no path
//! of the build machine in any file, and lintian clean.

mod common;
use common::{bindir, pg_config, pg_major, run, Cluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `target/postgresql-NN-snowflake[-dbgsym]_<version>-<revision>_<arch>.deb` (`suffix` is
/// `""` or `"-dbgsym"`); one only, so that an old revision left beside it is noticed.
fn find_deb_of(major: u32, suffix: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let want = format!("postgresql-{major}-snowflake{suffix}_{VERSION}-");
    let found: Vec<PathBuf> = fs::read_dir(&target)
        .expect("target/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(&want) && name.ends_with(".deb")
        })
        .collect();
    match found.as_slice() {
        [one] => one.clone(),
        [] => panic!("no {want}*.deb under target/: run `make package PG_MAJOR={major}` first"),
        more => panic!("more than one {want}*.deb under target/ (remove the old): {more:?}"),
    }
}

fn find_deb(major: u32) -> PathBuf {
    find_deb_of(major, "")
}

fn field(deb: &Path, name: &str) -> String {
    run(Command::new("dpkg-deb").arg("-f").arg(deb).arg(name))
        .trim()
        .to_string()
}

/// The package's files, unpacked into a directory of their own (removed when dropped).
struct Unpacked(PathBuf);

impl Unpacked {
    fn new(deb: &Path, test: &str) -> Unpacked {
        let dir = std::env::temp_dir().join(format!("snowflake-deb-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir));
        Unpacked(dir)
    }

    fn path(&self, abs: &str) -> PathBuf {
        self.0.join(abs.trim_start_matches('/'))
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut dirs = vec![self.0.clone()];
        while let Some(d) = dirs.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let t = e.file_type().unwrap();
                if t.is_dir() {
                    dirs.push(e.path());
                } else if t.is_file() {
                    out.push(e.path());
                }
            }
        }
        out.sort();
        out
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn gunzip(path: &Path) -> String {
    run(Command::new("gzip").arg("-dc").arg(path))
}

/// gzip -n: no file name and no time stamp in the header, so the same input gives the same bytes.
fn assert_gzip_n(path: &Path) {
    let gz = fs::read(path).unwrap();
    assert_eq!(gz[..3], [0x1f, 0x8b, 8], "{} is not gzip", path.display());
    assert_eq!(
        gz[3] & 0x08,
        0,
        "{} names its source file (gzip without -n)",
        path.display()
    );
    assert_eq!(
        gz[4..8],
        [0, 0, 0, 0],
        "{} has a time stamp (gzip without -n)",
        path.display()
    );
}

#[test]
fn the_package_has_a_revision_a_maintainer_and_its_fields() {
    let major = pg_major();
    let deb = find_deb(major);
    let version = field(&deb, "Version");
    let revision = version
        .strip_prefix(&format!("{VERSION}-"))
        .unwrap_or_else(|| panic!("Version {version} is not {VERSION}-<revision>"));
    assert!(
        revision.starts_with(|c: char| c.is_ascii_digit())
            && revision
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.~".contains(c)),
        "Version {version}: {revision} is not a Debian revision"
    );
    let name = deb.file_name().unwrap().to_string_lossy().to_string();
    let arch = field(&deb, "Architecture");
    assert_eq!(
        name,
        format!("postgresql-{major}-snowflake_{version}_{arch}.deb")
    );
    let maintainer = field(&deb, "Maintainer");
    let (who, address) = maintainer
        .strip_suffix('>')
        .and_then(|m| m.split_once(" <"))
        .unwrap_or_else(|| panic!("Maintainer {maintainer:?} is not 'Name <address>'"));
    assert!(!who.trim().is_empty(), "{maintainer}");
    let (user, host) = address
        .split_once('@')
        .unwrap_or_else(|| panic!("Maintainer {maintainer:?}: no address"));
    assert!(
        !user.is_empty() && host.contains('.') && !host.contains("localhost"),
        "Maintainer {maintainer:?}: not the form of a mail address off this machine"
    );
    assert_eq!(field(&deb, "Section"), "database");
    assert_eq!(field(&deb, "Priority"), "optional");
    assert!(field(&deb, "Installed-Size").parse::<u64>().unwrap() > 0);
    // The -dbgsym package is of the same version, and needs exactly this one.
    let dbgsym = find_deb_of(major, "-dbgsym");
    assert_eq!(field(&dbgsym, "Version"), version);
    assert_eq!(
        field(&dbgsym, "Depends"),
        format!("postgresql-{major}-snowflake (= {version})")
    );
}

#[test]
fn the_package_ships_the_mit_licence_in_dep5_and_a_changelog() {
    let major = pg_major();
    let deb = find_deb(major);
    let files = Unpacked::new(&deb, "doc");
    let doc = format!("/usr/share/doc/postgresql-{major}-snowflake");
    let copyright = fs::read_to_string(files.path(&format!("{doc}/copyright")))
        .unwrap_or_else(|e| panic!("{doc}/copyright: {e}"));
    assert!(
        copyright.starts_with(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        ),
        "not DEP-5:\n{copyright}"
    );
    let license =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("LICENSE")).unwrap();
    let holder = license
        .lines()
        .find_map(|l| l.strip_prefix("Copyright (c) "))
        .expect("LICENSE names its holder");
    let stanza = format!("Files: *\nCopyright: {holder}\nLicense: Expat\n");
    assert!(
        copyright.contains(&stanza),
        "no {stanza:?} in:\n{copyright}"
    );
    // The MIT licence's text, word for word, as DEP-5 writes it (indented, "." for a blank line).
    let text: String = license
        .lines()
        .skip_while(|l| !l.starts_with("Permission is hereby granted"))
        .map(|l| {
            if l.is_empty() {
                " .\n".to_string()
            } else {
                format!(" {l}\n")
            }
        })
        .collect();
    assert!(text.len() > 900, "LICENSE has no MIT permission notice");
    assert!(
        copyright.contains(&format!("\nLicense: Expat\n{text}")),
        "the MIT licence of LICENSE is not in the copyright file:\n{copyright}"
    );
    // DEP-5 parses as deb822: every line of a paragraph is a field or a continuation.
    for line in copyright.lines() {
        assert!(
            line.is_empty() || line.starts_with(' ') || line.contains(": "),
            "not a deb822 line: {line:?}"
        );
    }

    let version = field(&deb, "Version");
    let changelog = files.path(&format!("{doc}/changelog.Debian.gz"));
    assert_gzip_n(&changelog);
    let changelog = gunzip(&changelog);
    let first = changelog.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("postgresql-{major}-snowflake ({version}) "))
            && first.contains("; urgency="),
        "not a Debian changelog entry for {version}:\n{changelog}"
    );
    let trailer = format!(" -- {}  ", field(&deb, "Maintainer"));
    assert!(
        changelog.lines().any(|l| l.starts_with(&trailer)),
        "no trailer {trailer:?}:\n{changelog}"
    );
    // dpkg-parsechangelog reads it as dpkg does.
    let parsed = files.0.join("changelog");
    fs::write(&parsed, &changelog).unwrap();
    let parsed = run(Command::new("dpkg-parsechangelog").arg("-l").arg(&parsed));
    assert!(
        parsed.contains(&format!("\nVersion: {version}\n")),
        "{parsed}"
    );
    // The upstream changelog, whose newest section is this version's.
    let upstream = files.path(&format!("{doc}/changelog.gz"));
    assert_gzip_n(&upstream);
    assert!(gunzip(&upstream).contains(&format!("\n## {VERSION}")));
}

fn sections(elf: &Path) -> String {
    run(Command::new("readelf").args(["-S", "-W"]).arg(elf))
}

#[test]
fn the_library_is_stripped_and_its_symbols_are_in_the_dbgsym_package() {
    let major = pg_major();
    let files = Unpacked::new(&find_deb(major), "strip");
    let so = files.path(&format!("/usr/lib/postgresql/{major}/lib/snowflake.so"));
    let shipped = sections(&so);
    for name in [" .symtab ", " .debug_", " .comment "] {
        assert!(
            !shipped.contains(name),
            "snowflake.so has {name}:\n{shipped}"
        );
    }
    assert!(shipped.contains(" .gnu_debuglink "), "{shipped}");
    // What the server looks up in it is still there.
    let dynsym = run(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(&so));
    for symbol in ["Pg_magic_func", "_PG_init", "snowflake_nextval_wrapper"] {
        assert!(
            dynsym.contains(&format!(" {symbol}\n")),
            "no {symbol} in .dynsym"
        );
    }
    let notes = run(Command::new("readelf").arg("-n").arg(&so));
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("snowflake.so has a build ID")
        .trim()
        .to_string();

    let dbgsym = find_deb_of(major, "-dbgsym");
    assert_eq!(field(&dbgsym, "Build-Ids"), build_id);
    let debug = Unpacked::new(&dbgsym, "strip-dbgsym");
    let file = debug.path(&format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    ));
    assert!(
        file.exists(),
        "{} is not in {}",
        file.display(),
        dbgsym.display()
    );
    let symbols = run(Command::new("readelf").args(["-s", "-W"]).arg(&file));
    assert!(
        symbols.contains("snowflake_nextval"),
        "the .debug file has no symbol table"
    );
}

/// The paths of the build machine a file could name: the workspace (and its target directory),
/// another target directory, cargo's and rustup's homes, the builder's home. (The build maps them
/// to `/usr/src/...`, which a file may name.)
fn build_paths() -> Vec<String> {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut needles = vec![
        env!("CARGO_MANIFEST_DIR").to_string(),
        std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{home}/.cargo")),
        std::env::var("RUSTUP_HOME").unwrap_or_else(|_| format!("{home}/.rustup")),
        "/.cargo/".into(),
        "/.rustup/".into(),
    ];
    if let Ok(target) = std::env::var("CARGO_TARGET_DIR") {
        needles.push(target);
    }
    if home.len() > 1 {
        needles.push(format!("{home}/"));
    }
    needles
}

#[test]
fn no_file_of_the_packages_names_a_path_of_the_build_machine() {
    let major = pg_major();
    let needles = build_paths();
    for deb in [find_deb(major), find_deb_of(major, "-dbgsym")] {
        let files = Unpacked::new(&deb, "paths");
        let mut found = Vec::new();
        for f in files.files() {
            // Compressed files are read as what they hold: a .gz file, and an ELF file's
            // compressed debug sections (the .debug file's).
            let mut bytes = fs::read(&f).unwrap();
            if f.extension().is_some_and(|e| e == "gz") {
                bytes = gunzip(&f).into_bytes();
            } else if bytes.starts_with(b"\x7fELF") {
                let plain = files.0.join("decompressed.elf");
                run(Command::new("objcopy")
                    .arg("--decompress-debug-sections")
                    .arg(&f)
                    .arg(&plain));
                bytes = fs::read(&plain).unwrap();
                fs::remove_file(&plain).unwrap();
            }
            for n in &needles {
                let hits = bytes
                    .windows(n.len())
                    .filter(|w| *w == n.as_bytes())
                    .count();
                if hits > 0 {
                    found.push(format!(
                        "{}: {hits} x {n}",
                        f.strip_prefix(&files.0).unwrap().display()
                    ));
                }
            }
        }
        assert!(
            found.is_empty(),
            "{} names the build machine:\n{}",
            deb.display(),
            found.join("\n")
        );
    }
}

#[test]
fn lintian_finds_no_error_or_warning() {
    let major = pg_major();
    let debs = [find_deb(major), find_deb_of(major, "-dbgsym")];
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--display-level", ">=warning"])
        .args(&debs)
        .output()
        .unwrap_or_else(|e| {
            panic!("lintian: {e} (scripts/deps.sh test, which make test-major runs, installs it)")
        });
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    let bad: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
        .collect();
    assert!(
        out.status.success() && bad.is_empty(),
        "lintian ({}):\n{report}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Every override the package carries says why, in a comment right above it.
    let files = Unpacked::new(&debs[0], "lintian");
    let overrides = fs::read_to_string(files.path(&format!(
        "/usr/share/lintian/overrides/postgresql-{major}-snowflake"
    )))
    .unwrap_or_default();
    let mut reason = false;
    for line in overrides.lines() {
        if line.starts_with('#') {
            reason = true;
        } else if line.trim().is_empty() {
            reason = false;
        } else {
            assert!(reason, "lintian override without a reason above it: {line}");
        }
    }
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
        // tests/monitoring.rs runs the exporter with it.
        format!("/usr/share/doc/postgresql-{major}-snowflake/examples/prometheus-postgres-exporter.yaml"),
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
    // SAFETY (of the global): no other test of this binary starts a server.
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
