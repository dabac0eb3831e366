//! `make package` builds a .deb per major; its files, put into a clean copy of the server's
//! installation (no files of ours, no Rust toolchain involved), must be all a server needs. The
//! package is a Debian package a DBA can install: a revision and a maintainer, the licence in
//! DEP-5 form, a changelog, the library stripped (its symbols in the -dbgsym package), no path
//! of the build machine in any file, and lintian clean.

mod common;
use common::{bindir, find_target_file, pg_config, pg_major, run, Cluster};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `target/postgresql-NN-snowflake[-dbgsym]_<version>-<revision>_<arch>.deb` (`suffix` is
/// `""` or `"-dbgsym"`); one only, so that an old revision left beside it is noticed.
fn find_deb_of(major: u32, suffix: &str) -> PathBuf {
    find_target_file(
        &format!("postgresql-{major}-snowflake{suffix}_{VERSION}-"),
        ".deb",
        &format!("make package PG_MAJOR={major}"),
    )
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
}

/// Every regular file under `dir`, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
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

/// The GNU build ID of an ELF file, as `readelf -n` prints it (the name of its debug file).
fn build_id(elf: &Path) -> String {
    run(Command::new("readelf").arg("-n").arg(elf))
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("the library has a build ID")
        .trim()
        .to_string()
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
    let build_id = build_id(&so);

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

/// Every file under `dir` that names a path of the build machine (`"file: n x path"`): compressed
/// files are read as what they hold, a .gz file and an ELF file's compressed debug sections.
fn build_paths_in(dir: &Path) -> Vec<String> {
    let needles = build_paths();
    let mut found = Vec::new();
    for f in files_under(dir) {
        let mut bytes = fs::read(&f).unwrap();
        if f.extension().is_some_and(|e| e == "gz") {
            bytes = gunzip(&f).into_bytes();
        } else if bytes.starts_with(b"\x7fELF") {
            let plain = dir.with_extension("decompressed.elf");
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
                    f.strip_prefix(dir).unwrap().display()
                ));
            }
        }
    }
    found
}

#[test]
fn no_file_of_the_packages_names_a_path_of_the_build_machine() {
    let major = pg_major();
    for deb in [find_deb(major), find_deb_of(major, "-dbgsym")] {
        let files = Unpacked::new(&deb, "paths");
        let found = build_paths_in(&files.0);
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
        format!("/usr/share/doc/postgresql-{major}-snowflake/examples/snowflake.rules.yml"),
        format!("/usr/share/doc/postgresql-{major}-snowflake/examples/snowflake.rules.test.yml"),
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

    let unpacked = Unpacked::new(&deb, "install");
    let copy = ServerCopy::new("deb");
    copy.put(&unpacked.path(&lib_dir), &unpacked.path(&ext_dir));
    copy.load_and_update("package");
}

/// A copy of the server's installation (its programs find lib/ and share/ relative to
/// themselves) with every snowflake file removed, for a package's files to be put where that
/// server looks for them. Removed when dropped.
struct ServerCopy {
    root: PathBuf,
    pkglib: PathBuf,
    extension: PathBuf,
}

impl ServerCopy {
    fn new(test: &str) -> ServerCopy {
        let real_bin = bindir();
        let root =
            std::env::temp_dir().join(format!("snowflake-pkg-{test}-{}", std::process::id()));
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
        ServerCopy {
            root,
            pkglib,
            extension,
        }
    }

    /// The files of a package's library and extension directories, put where the copy looks.
    /// For Debian's server these are the very paths dpkg installs to.
    fn put(&self, lib: &Path, extension: &Path) {
        for (from, to) in [(lib, &self.pkglib), (extension, &self.extension)] {
            for f in fs::read_dir(from).unwrap() {
                let p = f.unwrap().path();
                fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
            }
        }
        assert!(self.pkglib.join("snowflake.so").exists());
        run(Command::new("chmod").args(["-R", "a+rX"]).arg(&self.root));
    }

    /// A server of the copy preloads the library, creates the extension of this version, and
    /// updates another database's from 1.0.0.
    fn load_and_update(&self, name: &str) {
        let new_bin = under(&self.root, &bindir());
        let mut c = Cluster::of(&new_bin, name, "snowflake.worker_id = 12", true);
        c.start();
        let out = c.sql(
            "CREATE EXTENSION snowflake; SELECT (snowflake_decode(snowflake_nextval())).worker_id, \
             (SELECT extversion FROM pg_extension WHERE extname = 'snowflake'), \
             (SELECT setting FROM pg_settings WHERE name = 'dynamic_library_path')",
        );
        assert_eq!(out, format!("12|{}|$libdir", env!("CARGO_PKG_VERSION")));
        let libdir = run(Command::new(new_bin.join("pg_config")).arg("--pkglibdir"));
        assert!(
            libdir.trim().starts_with(self.root.to_str().unwrap()),
            "the copy must load its own libraries: {libdir}"
        );
        c.sql("CREATE DATABASE up");
        c.try_sql_in(
            "up",
            "CREATE EXTENSION snowflake VERSION '1.0.0'; ALTER EXTENSION snowflake UPDATE",
        )
        .unwrap();
    }
}

impl Drop for ServerCopy {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

// ---- The RPM (make rpm): PGDG's layout under /usr/pgsql-NN.

/// `target/snowflake_NN[-debuginfo]-<version>-<release>.<arch>.rpm`, one only.
fn find_rpm_of(major: u32, suffix: &str) -> PathBuf {
    find_target_file(
        &format!("snowflake_{major}{suffix}-{VERSION}-"),
        ".rpm",
        &format!("make rpm PG_MAJOR={major}"),
    )
}

fn rpm_query(rpm: &Path, args: &[&str]) -> String {
    run(Command::new("rpm").arg("-qp").args(args).arg(rpm))
}

/// One field of `rpm -qip` ("Name        : snowflake_16").
fn rpm_info(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {name} in rpm -qip:\n{info}"))
}

/// The RPM's files, unpacked into a scratch root by rpm itself (removed when dropped).
fn rpm_unpacked(rpm: &Path, test: &str) -> Unpacked {
    let dir = std::env::temp_dir().join(format!("snowflake-rpm-{test}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    // Into an empty root with a database of its own: no dependency is there to be checked.
    run(Command::new("rpm")
        .arg("--root")
        .arg(&dir)
        .args(["-i", "--nodeps", "--noscripts", "--nosignature"])
        .arg(rpm));
    let _ = fs::remove_dir_all(dir.join("var"));
    let _ = fs::remove_dir_all(dir.join("usr/lib/sysimage"));
    Unpacked(dir)
}

#[test]
fn the_rpm_has_pgdg_s_layout_its_requires_and_fields() {
    let major = pg_major();
    let rpm = find_rpm_of(major, "");
    let info = rpm_query(&rpm, &["-i"]);
    let name = format!("snowflake_{major}");
    assert_eq!(rpm_info(&info, "Name"), name);
    assert_eq!(rpm_info(&info, "Version"), VERSION);
    let release = rpm_info(&info, "Release");
    assert!(
        release.starts_with(|c: char| c.is_ascii_digit())
            && release
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.~".contains(c)),
        "Release {release}"
    );
    let arch = rpm_info(&info, "Architecture");
    assert_eq!(
        rpm.file_name().unwrap().to_string_lossy(),
        format!("{name}-{VERSION}-{release}.{arch}.rpm")
    );
    // The licence of what the package holds: this project's, and the linked crates' (each).
    let license = rpm_info(&info, "License");
    assert!(license.starts_with("MIT AND "), "License: {license}");
    for (_, l) in linked_crates(major) {
        // "A OR B" may be written "B OR A".
        let mut terms: Vec<&str> = l.split(" OR ").collect();
        let forward = terms.join(" OR ");
        terms.reverse();
        assert!(
            license.contains(&forward) || license.contains(&terms.join(" OR ")),
            "License {license} does not name a crate's {l}"
        );
    }
    let packager = rpm_info(&info, "Packager");
    assert!(
        packager.ends_with('>') && packager.contains(" <") && packager.contains('@'),
        "Packager {packager}"
    );
    assert!(
        rpm_info(&info, "Summary").contains(&format!("PostgreSQL {major}")),
        "{info}"
    );
    // PGDG's server of this major, and the library's own needs (its symbols: glibc).
    let requires = rpm_query(&rpm, &["--requires"]);
    assert!(
        requires
            .lines()
            .any(|l| l.trim() == format!("postgresql{major}-server")),
        "{requires}"
    );
    assert!(requires.contains("libc.so.6(GLIBC_2."), "{requires}");
    // A changelog entry for this version and release, by the packager.
    let changelog = rpm_query(&rpm, &["--changelog"]);
    let first = changelog.lines().next().unwrap_or_default();
    assert!(
        first.starts_with('*') && first.ends_with(&format!("{packager} - {VERSION}-{release}")),
        "{changelog}"
    );

    // Where PGDG's postgresqlNN-server looks: /usr/pgsql-NN/lib and share/extension.
    let list = rpm_query(&rpm, &["-l"]);
    let files: Vec<&str> = list.lines().collect();
    let prefix = format!("/usr/pgsql-{major}");
    let mut expected = vec![
        format!("{prefix}/lib/snowflake.so"),
        format!("{prefix}/share/extension/snowflake.control"),
        format!("{prefix}/share/extension/snowflake--{VERSION}.sql"),
        format!("/usr/share/doc/{name}/README.md"),
        format!("/usr/share/licenses/{name}/LICENSE"),
    ];
    for f in fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("sql")).unwrap() {
        let f = f.unwrap().file_name().to_string_lossy().to_string();
        expected.push(format!("{prefix}/share/extension/{f}"));
    }
    for f in &expected {
        assert!(
            files.contains(&f.as_str()),
            "{f} is not in the RPM:\n{list}"
        );
    }
    for f in &files {
        assert!(
            [
                format!("{prefix}/lib/"),
                format!("{prefix}/share/extension/"),
                format!("/usr/share/doc/{name}"),
                format!("/usr/share/licenses/{name}"),
            ]
            .iter()
            .any(|p| f.starts_with(p.as_str())),
            "{f}: not where PGDG's server or the package's documents go"
        );
    }
    let doc = rpm_query(&rpm, &["-d"]);
    assert!(
        doc.contains(&format!("/usr/share/doc/{name}/README.md")),
        "{doc}"
    );
    let licences = rpm_query(&rpm, &["-L"]);
    assert!(
        licences.contains(&format!("/usr/share/licenses/{name}/LICENSE")),
        "{licences}"
    );

    // The library stripped; its symbols in the -debuginfo package, by build ID.
    let unpacked = rpm_unpacked(&rpm, "layout");
    let so = unpacked.path(&format!("{prefix}/lib/snowflake.so"));
    let shipped = sections(&so);
    for s in [" .symtab ", " .debug_", " .comment "] {
        assert!(!shipped.contains(s), "snowflake.so has {s}:\n{shipped}");
    }
    let build_id = build_id(&so);
    let debuginfo = find_rpm_of(major, "-debuginfo");
    assert_eq!(
        rpm_query(&debuginfo, &["--requires"])
            .lines()
            .filter(|l| !l.starts_with("rpmlib("))
            .collect::<Vec<_>>(),
        [format!("{name} = {VERSION}-{release}")]
    );
    assert_eq!(
        rpm_query(&debuginfo, &["-l"]).trim(),
        format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &build_id[..2],
            &build_id[2..]
        )
    );
}

#[test]
fn no_file_of_the_rpms_names_a_path_of_the_build_machine() {
    let major = pg_major();
    for rpm in [find_rpm_of(major, ""), find_rpm_of(major, "-debuginfo")] {
        let files = rpm_unpacked(&rpm, "paths");
        let mut found = build_paths_in(&files.0);
        // Nor does the header: its fields, changelog, requires and provides.
        let header = rpm_query(
            &rpm,
            &["-i", "--changelog", "--requires", "--provides", "--scripts"],
        );
        for n in build_paths() {
            if header.contains(&n) {
                found.push(format!("the header: {n}"));
            }
        }
        assert!(
            found.is_empty(),
            "{} names the build machine:\n{}",
            rpm.display(),
            found.join("\n")
        );
    }
}

#[test]
fn the_rpm_installs_into_a_scratch_root_and_a_server_loads_it() {
    let major = pg_major();
    let rpm = find_rpm_of(major, "");
    let unpacked = rpm_unpacked(&rpm, "install");
    let prefix = format!("/usr/pgsql-{major}");
    let copy = ServerCopy::new("rpm");
    copy.put(
        &unpacked.path(&format!("{prefix}/lib")),
        &unpacked.path(&format!("{prefix}/share/extension")),
    );
    copy.load_and_update("rpm");
}

// ---- The licences of the Rust crates linked into the library, in both packages.

/// `(name-version, licence)` of every crate the library links for this major: cargo tree's
/// normal dependencies of the workspace's `snowflake`, without proc-macro crates (they run in
/// the compiler) and without the workspace's own crates (LICENSE's).
fn linked_crates(major: u32) -> Vec<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = run(Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--quiet", "--locked", "-e", "normal,no-proc-macro"])
        .args([
            "--prefix",
            "none",
            "--format",
            "{p}|{l}",
            "--no-default-features",
        ])
        .args(["--features", &format!("pg{major}"), "-p", "snowflake"]));
    let mut crates: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let (p, l) = l.trim_end_matches(" (*)").split_once('|')?;
            let mut words = p.split_whitespace();
            let (name, version) = (words.next()?, words.next()?.trim_start_matches('v'));
            // The workspace's own crates name their path: "snowflake v1.7.0 (/...)".
            (!p.contains(" (/")).then(|| (format!("{name}-{version}"), l.replace('/', " OR ")))
        })
        .collect();
    crates.sort();
    crates.dedup();
    assert!(
        crates.len() > 20,
        "cargo tree found {} crates:\n{out}",
        crates.len()
    );
    crates
}

/// The crate's licence files as it ships them, in cargo's registry.
fn registry_licence_files(crate_dir: &str) -> Vec<PathBuf> {
    let home = std::env::var("CARGO_HOME")
        .unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap()));
    let src = Path::new(&home).join("registry/src");
    let dir = fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path().join(crate_dir))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| panic!("{crate_dir} is not in {}", src.display()));
    let mut files = Vec::new();
    for e in fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().to_uppercase();
        if [
            "LICENSE",
            "LICENCE",
            "COPYING",
            "UNLICENSE",
            "COPYRIGHT",
            "NOTICE",
        ]
        .iter()
        .any(|w| n.starts_with(w))
        {
            if p.is_dir() {
                files.extend(files_under(&p));
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_linked_crate_s_licence_is_in_both_packages() {
    let major = pg_major();
    let deb = Unpacked::new(&find_deb(major), "crates");
    let copyright = fs::read_to_string(deb.path(&format!(
        "/usr/share/doc/postgresql-{major}-snowflake/copyright"
    )))
    .unwrap();
    let rpm = rpm_unpacked(&find_rpm_of(major, ""), "crates");
    let rpm_licences = rpm.path(&format!("/usr/share/licenses/snowflake_{major}/crates"));
    let mut missing = Vec::new();
    for (krate, licence) in linked_crates(major) {
        // The .deb: a DEP-5 paragraph of its own, with its licence and each text it ships.
        let head = format!("\nFiles: cargo-registry/{krate}/*\n");
        let Some(at) = copyright.find(&head) else {
            missing.push(format!("{krate}: no paragraph in the .deb's copyright"));
            continue;
        };
        let paragraph = &copyright[at + 1..];
        let paragraph = &paragraph[..paragraph.find("\n\n").map_or(paragraph.len(), |e| e + 1)];
        let dep5 = licence
            .replace("MIT", "Expat")
            .replace(" OR ", " or ")
            .replace(" AND ", " and ");
        if !paragraph.contains(&format!("\nLicense: {dep5}\n")) {
            missing.push(format!("{krate}: not License: {dep5}"));
        }
        let files = registry_licence_files(&krate);
        for f in &files {
            let text = fs::read_to_string(f).unwrap();
            let apache =
                text.contains("Apache License") && text.contains("Version 2.0, January 2004");
            let dep5_text: String = text
                .trim_end()
                .lines()
                .map(|l| {
                    let l = l.trim_end();
                    if l.trim().is_empty() {
                        " .\n".to_string()
                    } else {
                        format!(" {l}\n")
                    }
                })
                .collect();
            let referred = apache && paragraph.contains("/usr/share/common-licenses/Apache-2.0");
            if !referred && !paragraph.contains(&dep5_text) {
                missing.push(format!(
                    "{krate}: the text of {} is not in the .deb's copyright",
                    f.display()
                ));
            }
            // The RPM: the file itself, word for word.
            let name = f
                .strip_prefix(f.ancestors().find(|a| a.ends_with(&krate)).unwrap())
                .unwrap()
                .to_string_lossy()
                .replace('/', "-");
            match fs::read_to_string(rpm_licences.join(&krate).join(&name)) {
                Ok(t) if t == text => {}
                _ => missing.push(format!("{krate}: {name} is not in the RPM's licences")),
            }
        }
        if files.is_empty() {
            // None shipped (pgrx's crates): the MIT text under its authors, in both.
            if !(licence == "MIT" && paragraph.contains("Permission is hereby granted")) {
                missing.push(format!(
                    "{krate}: ships no licence file, and the .deb has no MIT text for it"
                ));
            }
            if !rpm_licences.join(&krate).join("LICENSE-MIT").is_file() {
                missing.push(format!("{krate}: no LICENSE-MIT in the RPM's licences"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

// ---- Reproducible: the same commit gives the same packages (issue 63).

/// cargo-pgrx writes the extension's script in one of several valid orders of its dependency
/// graph, another from run to run; `make package` writes it again in the order of
/// tools/sql-order. Here that tool rebuilds pgrx's graph from the packaged library's schema
/// section 50 times with its edges added in shuffled orders (as cargo-pgrx's random HashMap
/// seeds do): the orders must differ without the sort (else this test could not see the
/// defect), give one script with it, and that script must be the packaged one, in the .deb and
/// in the RPM alike. Two whole builds compared byte for byte: `make reproducible`.
#[test]
fn the_packaged_script_is_in_the_one_order_of_its_graph() {
    let major = pg_major();
    let deb = Unpacked::new(&find_deb(major), "sql-order");
    let library = deb.path(&format!("/usr/lib/postgresql/{major}/lib/snowflake.so"));
    let script = deb.path(&format!(
        "/usr/share/postgresql/{major}/extension/snowflake--{VERSION}.sql"
    ));
    let section = deb.0.join("pgrxsc.bin");
    run(Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.pgrxsc"])
        .arg(&library)
        .arg(&section));
    assert!(
        fs::metadata(&section).unwrap().len() > 0,
        "{} has no .pgrxsc section (pgrx's schema)",
        library.display()
    );
    let workspace = env!("CARGO_MANIFEST_DIR");
    let out = run(Command::new(format!("{workspace}/scripts/cargo"))
        .current_dir(workspace)
        .env_remove("RUSTFLAGS")
        .env_remove("CFLAGS")
        .args(["run", "--quiet", "-p", "snowflake-sql-order", "--"])
        .arg(&section)
        .arg("snowflake.control")
        .arg(VERSION)
        .arg(&script)
        .args(["--check", "50"]));
    // "50 shuffled edge orders: 1 script sorted, N distinct unsorted"
    let unsorted: usize = out
        .trim()
        .strip_suffix(" distinct unsorted")
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("snowflake-sql-order said: {out}"));
    assert!(
        unsorted > 1,
        "the shuffled edge orders all gave one script without the sort: this test cannot see an \
         unsorted generation ({out})"
    );
    let rpm = rpm_unpacked(&find_rpm_of(major, ""), "sql-order");
    let rpm_script = rpm.path(&format!(
        "/usr/pgsql-{major}/share/extension/snowflake--{VERSION}.sql"
    ));
    assert!(
        fs::read(&rpm_script).unwrap() == fs::read(&script).unwrap(),
        "the RPM's {} is not the .deb's",
        rpm_script.display()
    );
}

// ---- The .deb in Debian's own PostgreSQL 15: dpkg, pg_createcluster, an upgrade, a removal.

/// Debian's system, seen through a private mount namespace whose /usr, /etc and /var are
/// overlays of the real ones (their writes go to a scratch directory) and whose /run/postgresql
/// is its own: dpkg installs and removes packages there, pg_createcluster makes clusters there,
/// and nothing of it reaches the machine, whose Debian server the rest of the suite (and
/// `make install`) uses meanwhile. Dropping it stops its servers and removes it all, whatever
/// the test did.
struct DebianRoot {
    holder: std::process::Child,
    dir: PathBuf,
    clusters: Vec<String>,
}

impl DebianRoot {
    fn new(test: &str) -> DebianRoot {
        let dir =
            std::env::temp_dir().join(format!("snowflake-debian-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        // A process that only holds the namespace; every command enters it with nsenter.
        let holder = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "infinity"])
            .spawn()
            .unwrap_or_else(|e| panic!("unshare: {e}"));
        let root = DebianRoot {
            holder,
            dir,
            clusters: Vec::new(),
        };
        let mut mounts = String::from("set -e\n");
        for top in ["usr", "etc", "var"] {
            let d = root.dir.join(top);
            mounts += &format!(
                "mkdir -p {d}/upper {d}/work\nmount -t overlay overlay -o lowerdir=/{top},upperdir={d}/upper,workdir={d}/work /{top}\n",
                d = d.display()
            );
        }
        mounts += "mkdir -p /run/postgresql\nmount -t tmpfs -o mode=2775 tmpfs /run/postgresql\nchown postgres:postgres /run/postgresql\n";
        // This root starts without any snowflake: files `make install` put into the server
        // and a package someone installed are gone (in the overlay only).
        mounts += "if dpkg -s postgresql-15-snowflake >/dev/null 2>&1; then dpkg --purge postgresql-15-snowflake >/dev/null; fi\n\
                   rm -f /usr/lib/postgresql/15/lib/snowflake.so /usr/share/postgresql/15/extension/snowflake*\n";
        // unshare may not have made the namespace yet: nsenter enters it once it is there.
        let mut tries = 0;
        while fs::read_link(format!("/proc/{}/ns/mnt", root.holder.id()))
            .ok()
            .as_ref()
            == fs::read_link("/proc/self/ns/mnt").ok().as_ref()
        {
            tries += 1;
            assert!(tries < 500, "unshare made no mount namespace");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        root.sh(&mounts);
        root
    }

    /// A shell command inside the namespace, as root; its output (stdout and stderr together).
    fn try_sh(&self, script: &str) -> (bool, String) {
        let out = Command::new("nsenter")
            .arg("--target")
            .arg(self.holder.id().to_string())
            .args([
                "--mount",
                "--",
                "bash",
                "-c",
                &format!("exec 2>&1\n{script}"),
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    }

    fn sh(&self, script: &str) -> String {
        let (ok, out) = self.try_sh(script);
        assert!(ok, "in Debian's root:\n{script}\n-> {out}");
        out
    }

    /// SQL through psql as postgres, in this root's cluster (its socket in /run/postgresql).
    fn sql(&self, port: u16, sql: &str) -> String {
        self.sh(&format!(
            "runuser -u postgres -- psql -XAtq -v ON_ERROR_STOP=1 -h /run/postgresql -p {port} -d postgres <<'SQL'\n{sql}\nSQL"
        ))
        .trim()
        .to_string()
    }
}

impl Drop for DebianRoot {
    fn drop(&mut self) {
        for c in &self.clusters {
            let _ = self.try_sh(&format!(
                "pg_ctlcluster --skip-systemctl-redirect 15 {c} stop -m immediate; pg_dropcluster 15 {c}"
            ));
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
        // The overlays went with the namespace's last process.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Whether this clone is shallow (it lacks the previous release's commit).
fn shallow_clone() -> bool {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--is-shallow-repository"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

#[test]
fn the_deb_installs_upgrades_and_removes_in_debian_s_postgresql_15() {
    let major = pg_major();
    if major != 15 {
        eprintln!(
            "Debian 12's own server is 15; this is PostgreSQL {major}'s suite: nothing to do"
        );
        return;
    }
    for tool in [
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/bin/pg_createcluster",
    ] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: Debian's postgresql-15 (scripts/deps.sh installs it)"
        );
    }
    let new = find_deb(15);
    let previous = common::target_dir().join(format!(
        "previous/postgresql-15-snowflake_1.6.0_{}.deb",
        field(&new, "Architecture")
    ));
    if !previous.exists() && shallow_clone() {
        eprintln!(
            "SKIPPED: this shallow clone cannot build {} (make previous-package)",
            previous.display()
        );
        return;
    }
    assert!(
        previous.exists(),
        "{}: run `make previous-package PG_MAJOR=15` first",
        previous.display()
    );
    let mut debian = DebianRoot::new("upgrade");
    let name = format!("snowflake{}", std::process::id());
    let port = 20000 + (std::process::id() % 10000) as u16;

    // The previous release's package, and a cluster that preloads it.
    debian.sh(&format!("dpkg -i {}", previous.display()));
    debian.clusters.push(name.clone());
    debian.sh(&format!(
        "pg_createcluster 15 {name} -p {port} >/dev/null\n\
         cat > /etc/postgresql/15/{name}/conf.d/snowflake.conf <<'EOF'\n\
         shared_preload_libraries = 'snowflake'\n\
         snowflake.datacenter_id = 1\n\
         snowflake.worker_id = 7\n\
         listen_addresses = ''\n\
         EOF\n\
         pg_ctlcluster --skip-systemctl-redirect 15 {name} start"
    ));
    let before = debian.sql(
        port,
        "CREATE EXTENSION snowflake;\n\
         CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), v int);\n\
         INSERT INTO t (v) SELECT g FROM generate_series(1, 1000) g;\n\
         SELECT extversion || '|' || (SELECT max(id) FROM t) FROM pg_extension WHERE extname = 'snowflake';",
    );
    let (version, old_max) = before.split_once('|').unwrap();
    assert_eq!(version, "1.6.0");
    let old_max: i64 = old_max.parse().unwrap();

    // This build's package over it: dpkg upgrades the files; the cluster, restarted, loads the
    // new library and the extension's objects are updated in place.
    let out = debian.sh(&format!("dpkg -i {}", new.display()));
    assert!(out.contains("Preparing to unpack"), "{out}");
    assert_eq!(
        debian.sh("dpkg-query -W -f '${Version} ${Status}' postgresql-15-snowflake"),
        format!("{} install ok installed", field(&new, "Version"))
    );
    debian.sh(&format!(
        "pg_ctlcluster --skip-systemctl-redirect 15 {name} restart"
    ));
    let after = debian.sql(
        port,
        &format!(
            "ALTER EXTENSION snowflake UPDATE;\n\
             INSERT INTO t (v) SELECT g FROM generate_series(1001, 2000) g;\n\
             SELECT extversion, (SELECT count(*) FROM t WHERE v > 1000), \
                    (SELECT count(*) FROM t WHERE v > 1000 AND id > {old_max}) \
             FROM pg_extension WHERE extname = 'snowflake';"
        ),
    );
    // The 1,000 IDs issued after the upgrade all lie above every ID issued before it.
    assert_eq!(after, format!("{VERSION}|1000|1000"));

    // Removed while the cluster still preloads it: the package says which file names it, and
    // leaves the DBA's configuration alone.
    let removed = debian.sh("dpkg -r postgresql-15-snowflake");
    let conf = format!("/etc/postgresql/15/{name}/conf.d/snowflake.conf");
    assert!(
        removed.contains(&conf) && removed.contains("shared_preload_libraries"),
        "dpkg -r says nothing of {conf}:\n{removed}"
    );
    assert!(
        debian
            .sh(&format!("cat {conf}"))
            .contains("shared_preload_libraries = 'snowflake'"),
        "the package edited the DBA's configuration"
    );
    debian.sh("dpkg --purge postgresql-15-snowflake");
    let left = debian.sh(
        "dpkg-query -W -f '${Status}' postgresql-15-snowflake 2>/dev/null || true; echo\n\
         ls /usr/lib/postgresql/15/lib/snowflake* /usr/share/postgresql/15/extension/snowflake* \
            /usr/share/doc/postgresql-15-snowflake 2>/dev/null || true",
    );
    assert!(
        left.trim().is_empty() || left.trim() == "unknown ok not-installed",
        "left after dpkg --purge:\n{left}"
    );
    // As the note says: a restart with the library still preloaded fails...
    let (started, log) = debian.try_sh(&format!(
        "pg_ctlcluster --skip-systemctl-redirect 15 {name} restart"
    ));
    assert!(
        !started,
        "the server started without its preloaded library:\n{log}"
    );
    // ...and starts once the DBA takes it out of shared_preload_libraries.
    debian.sh(&format!(
        "rm {conf}\npg_ctlcluster --skip-systemctl-redirect 15 {name} start"
    ));
    assert_eq!(debian.sql(port, "SELECT count(*) FROM t;"), "2000");
}
