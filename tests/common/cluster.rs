//! A real cluster of the server under test: initdb, postgresql.conf, start and stop (crashes
//! included), a fake clock, psql and pgbench against it, standbys.

use super::{
    as_owner, bindir, eventually, is_root, major_of, owner_runs, parse_error, run, PgError,
};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct Cluster {
    /// The server's programs: the major under test unless made with `Cluster::of`.
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    pub env: HashMap<String, String>,
    /// Options for the server's command line (`pg_ctl -o`), e.g. "-c snowflake.worker_id=3".
    pub options: String,
    /// The file `conf` appends to: the data directory's postgresql.conf, or in a Debian-style
    /// cluster `conf.d/00-tests.conf` of its configuration directory (read before any file a
    /// recipe writes there, such as `conf.d/snowflake.conf`).
    pub conf_file: PathBuf,
    /// The configuration directory: the data directory, or outside it in a Debian-style cluster.
    pub conf_dir: PathBuf,
    /// Debian's (version, name) of a cluster made by `pg_createcluster`, dropped with it.
    pub debian: Option<(u32, String)>,
    running: bool,
}

impl Cluster {
    /// initdb a new cluster with the extension preloaded and `extra` lines in postgresql.conf.
    pub fn new(name: &str, extra: &str) -> Cluster {
        Self::with_preload(name, extra, true)
    }

    pub fn with_preload(name: &str, extra: &str, preload: bool) -> Cluster {
        Self::of(&bindir(), name, extra, preload)
    }

    /// A new cluster of the server whose programs are in `bin`.
    pub fn of(bin: &Path, name: &str, extra: &str, preload: bool) -> Cluster {
        let (dir, port) = Self::new_dir(name);
        let data = dir.join("data");
        initdb(bin, &data);
        let mut c = Cluster::at(bin, dir, data, port);
        c.conf(&format!(
            "{}\nfsync = off\nmax_connections = 40\nshared_buffers = 64MB\nlog_min_messages = warning\n{}\n{extra}\n",
            c.address_conf(),
            if preload { "shared_preload_libraries = 'snowflake'" } else { "" },
        ));
        c
    }

    /// A cluster directory with no data directory yet, for a tool that makes one (pg_upgrade).
    pub fn empty(bin: &Path, name: &str) -> Cluster {
        let (dir, port) = Self::new_dir(name);
        let data = dir.join("data");
        Cluster::at(bin, dir, data, port)
    }

    /// Adds this cluster's own port and socket directory to postgresql.conf.
    pub fn conf_address(&mut self) {
        let addr = self.address_conf();
        self.conf(&addr);
    }

    fn at(bin: &Path, dir: PathBuf, data: PathBuf, port: u16) -> Cluster {
        Cluster {
            bin: bin.to_path_buf(),
            dir,
            conf_file: data.join("postgresql.conf"),
            conf_dir: data.clone(),
            data,
            port,
            env: HashMap::new(),
            options: String::new(),
            debian: None,
            running: false,
        }
    }

    /// A cluster laid out as Debian's are: the configuration in a directory of its own, outside
    /// the data directory, whose postgresql.conf ends with `include_dir = 'conf.d'`. Made by
    /// Debian's `pg_createcluster` (config in /etc/postgresql/NN/NAME) where `bin` is Debian's
    /// server (/usr/lib/postgresql/NN/bin) and this runs as root; else (a PyPI or source build,
    /// which pg_createcluster cannot use) the same layout by initdb, under the cluster's own
    /// directory, started with `-c config_file=...` as pg_ctlcluster starts Debian's. `extra`
    /// and the harness's lines go to conf.d/00-tests.conf.
    pub fn debian_style(bin: &Path, name: &str, extra: &str, preload: bool) -> Cluster {
        drop_stale_debian_clusters();
        let (dir, port) = Self::new_dir(name);
        let data = dir.join("data");
        let mut c = Cluster::at(bin, dir.clone(), data.clone(), port);
        let debian_major = bin
            .to_str()
            .and_then(|b| b.strip_prefix("/usr/lib/postgresql/"))
            .and_then(|b| b.strip_suffix("/bin"))
            .and_then(|m| m.parse::<u32>().ok())
            .filter(|_| is_root() && Path::new("/usr/bin/pg_createcluster").exists());
        if let Some(major) = debian_major {
            // Unique among parallel tests and runs: the test process's id and the directory's
            // counter (drop_stale_debian_clusters removes those of processes that are gone).
            let cluster = format!(
                "sf-{}",
                dir.file_name().unwrap().to_str().unwrap().replace('_', "-")
            );
            let out = Command::new("pg_createcluster")
                .args(["-u", "postgres", "-p", &port.to_string(), "-e", "UTF8"])
                .args(["--locale=C", "--start-conf=manual", "-d"])
                .arg(&data)
                .arg("-s")
                .arg(&dir)
                .arg("-l")
                .arg(c.log_path())
                .args([
                    &major.to_string(),
                    &cluster,
                    "--",
                    "-A",
                    "trust",
                    "--no-sync",
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "pg_createcluster failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            c.conf_dir = PathBuf::from(format!("/etc/postgresql/{major}/{cluster}"));
            c.debian = Some((major, cluster));
        } else {
            initdb(bin, &data);
            c.conf_dir = dir.join("etc");
            fs::create_dir_all(c.conf_dir.join("conf.d")).unwrap();
            for f in ["postgresql.conf", "pg_hba.conf", "pg_ident.conf"] {
                fs::rename(data.join(f), c.conf_dir.join(f)).unwrap();
            }
            let conf = c.conf_dir.join("postgresql.conf");
            let mut text = fs::read_to_string(&conf).unwrap();
            text.push_str(&format!(
                "data_directory = '{d}'\nhba_file = '{e}/pg_hba.conf'\nident_file = '{e}/pg_ident.conf'\n\
                 include_dir = 'conf.d'\n",
                d = data.display(),
                e = c.conf_dir.display()
            ));
            fs::write(&conf, text).unwrap();
            if is_root() {
                run(Command::new("chown")
                    .args(["-R", "postgres:postgres"])
                    .arg(&c.conf_dir));
            }
        }
        // Started as pg_ctlcluster starts it; pg_ctl restart reuses these options.
        c.options = format!(
            "-c config_file={}",
            c.conf_dir.join("postgresql.conf").display()
        );
        c.conf_file = c.conf_dir.join("conf.d/00-tests.conf");
        c.conf(&format!(
            "{}\nfsync = off\nmax_connections = 40\nshared_buffers = 64MB\nlog_min_messages = warning\n{}\n{extra}\n",
            c.address_conf(),
            if preload { "shared_preload_libraries = 'snowflake'" } else { "" },
        ));
        if is_root() {
            run(Command::new("chown")
                .arg("postgres:postgres")
                .arg(&c.conf_file));
        }
        c
    }

    fn address_conf(&self) -> String {
        format!(
            "port = {}\nunix_socket_directories = '{}'\nlisten_addresses = ''",
            self.port,
            self.dir.display()
        )
    }

    /// A streaming standby of `primary` (pg_basebackup -R), not yet started.
    pub fn standby_of(primary: &Cluster, name: &str) -> Cluster {
        let (dir, port) = Self::new_dir(name);
        let data = dir.join("data");
        let primary_port = primary.port.to_string();
        owner_runs(
            &primary.bin.join("pg_basebackup"),
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-h".as_ref(),
                primary.dir.as_os_str(),
                "-p".as_ref(),
                primary_port.as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-R".as_ref(),
                "-X".as_ref(),
                "stream".as_ref(),
                "--no-sync".as_ref(),
                // Not spread over checkpoint_completion_target (minutes, with dirty buffers).
                "--checkpoint=fast".as_ref(),
            ],
        );
        let mut c = Cluster::at(&primary.bin, dir, data, port);
        let addr = c.address_conf();
        c.conf(&addr);
        c
    }

    /// Runs the server under libfaketime; `spec` is FAKETIME's syntax ("-10s"), or None to read
    /// the offset from the file `faketime_file()`, so that it can change while the server runs.
    pub fn fake_time(&mut self, spec: Option<&str>) {
        let lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
        assert!(Path::new(lib).exists(), "libfaketime is not installed");
        self.env.insert("LD_PRELOAD".into(), lib.into());
        // PostgreSQL's timeouts and latches use the monotonic clock: leave it alone.
        self.env
            .insert("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into());
        match spec {
            Some(s) => {
                self.env.insert("FAKETIME".into(), s.into());
            }
            None => {
                self.set_fake_offset("+0s");
                self.env.insert(
                    "FAKETIME_TIMESTAMP_FILE".into(),
                    self.faketime_file().display().to_string(),
                );
                // Re-read on every clock call, so a step takes effect at once in every process.
                self.env.insert("FAKETIME_NO_CACHE".into(), "1".into());
            }
        }
    }

    pub fn faketime_file(&self) -> PathBuf {
        self.dir.join("faketime.rc")
    }

    pub fn set_fake_offset(&self, spec: &str) {
        fs::write(self.faketime_file(), format!("{spec}\n")).unwrap();
    }

    /// How far the server's clock is from ours, in seconds (negative: behind).
    pub fn clock_offset_s(&self) -> f64 {
        let theirs: f64 = self
            .sql("SELECT extract(epoch FROM clock_timestamp())")
            .parse()
            .unwrap();
        let ours = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        theirs - ours
    }

    fn new_dir(name: &str) -> (PathBuf, u16) {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = PathBuf::from(
            std::env::var("SNOWFLAKE_TEST_DIR").unwrap_or_else(|_| "/tmp/snowflake-tests".into()),
        );
        fs::create_dir_all(&root).unwrap();
        let _ = Command::new("chmod").arg("1777").arg(&root).status();
        let dir = root.join(format!("{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        if is_root() {
            assert!(Command::new("chown")
                .arg("postgres:postgres")
                .arg(&dir)
                .status()
                .unwrap()
                .success());
        }
        // The socket lives in the cluster's own directory, so the port only has to be unique
        // among this run's clusters (it also seeds the shared memory key).
        let port = 30000 + (std::process::id() % 500) as u16 * 50 + (n % 50) as u16;
        (dir, port)
    }

    /// Appends lines to postgresql.conf (later lines win).
    pub fn conf(&mut self, lines: &str) {
        let path = self.conf_file.clone();
        let mut s = fs::read_to_string(&path).unwrap_or_default();
        s.push_str(lines);
        s.push('\n');
        fs::write(&path, s).unwrap();
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn pg_ctl(&self) -> Command {
        let mut c = as_owner(&self.bin.join("pg_ctl"));
        c.arg("-D").arg(&self.data);
        c
    }

    /// Starts the server; Err(log) when it refuses to start.
    pub fn try_start(&mut self) -> Result<(), String> {
        let mut cmd = if self.env.is_empty() {
            self.pg_ctl()
        } else {
            // runuser resets the environment; pass ours through `env`.
            let mut c = if is_root() {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--", "env"]);
                c
            } else {
                Command::new("env")
            };
            for (k, v) in &self.env {
                c.arg(format!("{k}={v}"));
            }
            c.arg(self.bin.join("pg_ctl")).arg("-D").arg(&self.data);
            c
        };
        if !self.options.is_empty() {
            cmd.arg("-o").arg(&self.options);
        }
        let out = cmd
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", "60", "start"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.success() {
            self.running = true;
            Ok(())
        } else {
            Err(self.log())
        }
    }

    pub fn start(&mut self) {
        if let Err(log) = self.try_start() {
            panic!("server did not start:\n{log}");
        }
    }

    /// Stops with the given mode: "fast" (clean) or "immediate" (a crash: no shutdown checkpoint).
    pub fn stop(&mut self, mode: &str) {
        let out = self
            .pg_ctl()
            .args(["-w", "-m", mode, "stop"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.running = false;
    }

    pub fn psql_cmd(&self, db: &str) -> Command {
        self.psql_cmd_as("postgres", db)
    }

    pub fn psql_cmd_as(&self, user: &str, db: &str) -> Command {
        let mut c = Command::new(self.bin.join("psql"));
        c.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
        ])
        .arg("-h")
        .arg(&self.dir)
        .args(["-p", &self.port.to_string(), "-U", user, "-d", db])
        .env("PGOPTIONS", "-c client_min_messages=warning");
        c
    }

    /// Runs SQL (one or more statements) in one session; Ok(output) or the first error.
    pub fn try_sql(&self, sql: &str) -> Result<String, PgError> {
        self.try_sql_in("postgres", sql)
    }

    pub fn try_sql_in(&self, db: &str, sql: &str) -> Result<String, PgError> {
        let out = self.psql_cmd(db).arg("-c").arg(sql).output().unwrap();
        result(out)
    }

    /// Runs SQL in `db` with the timeouts a database's settings may set switched off for this
    /// session (the client's options win over them): a test's own statements in a database whose
    /// owner set `statement_timeout = '1ms'` must not time out on a loaded machine.
    pub fn try_sql_in_untimed(&self, db: &str, sql: &str) -> Result<String, PgError> {
        let out = self
            .psql_cmd(db)
            .env(
                "PGOPTIONS",
                "-c client_min_messages=warning -c statement_timeout=0 -c lock_timeout=0 -c idle_in_transaction_session_timeout=0",
            )
            .arg("-c")
            .arg(sql)
            .output()
            .unwrap();
        result(out)
    }

    /// Runs SQL as another role.
    pub fn try_sql_as(&self, user: &str, sql: &str) -> Result<String, PgError> {
        result(
            self.psql_cmd_as(user, "postgres")
                .arg("-c")
                .arg(sql)
                .output()
                .unwrap(),
        )
    }

    /// One of the server's client programs (pg_dump, pg_restore, ...) connected to it as
    /// `postgres`: arguments that name the database or files follow.
    pub fn tool(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres"]);
        c
    }

    /// Runs a whole script file-style (statements separated by newlines, meta-commands allowed).
    pub fn script(&self, sql: &str) -> Result<String, PgError> {
        let path = self.dir.join(format!(
            "script-{}.sql",
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        fs::write(&path, format!("\\set VERBOSITY verbose\n{sql}\n")).unwrap();
        let out = self
            .psql_cmd("postgres")
            .arg("-f")
            .arg(&path)
            .output()
            .unwrap();
        result(out)
    }

    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("SQL failed: {sql}\n{}", e.raw))
    }

    /// Expects an error and returns it.
    pub fn sql_err(&self, sql: &str) -> PgError {
        match self.try_sql(sql) {
            Ok(out) => panic!("expected an error from {sql}, got {out}"),
            Err(e) => e,
        }
    }

    pub fn sql_i64(&self, sql: &str) -> i64 {
        let out = self.sql(sql);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a number from {sql}: {out:?}"))
    }

    /// pgbench against this cluster, with a custom script.
    pub fn pgbench(&self, script: &str, args: &[&str]) -> Output {
        let path = self.dir.join(format!(
            "bench-{}.sql",
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        fs::write(&path, script).unwrap();
        Command::new(self.bin.join("pgbench"))
            .args(["-n", "-h"])
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres"])
            .args(args)
            .arg("-f")
            .arg(&path)
            .arg("postgres")
            .output()
            .unwrap()
    }

    pub fn promote(&mut self) {
        let out = self.pg_ctl().args(["-w", "promote"]).output().unwrap();
        assert!(
            out.status.success(),
            "promote: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A libpq connection string for this server, as a subscription's CONNECTION.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.display(),
            self.port
        )
    }

    /// The same as a URI (no spaces), for shell recipes.
    pub fn uri(&self) -> String {
        format!(
            "postgresql:///postgres?host={}&port={}&user=postgres",
            self.dir.display(),
            self.port
        )
    }

    /// Polls `sql` until it returns `expected`, for at most `secs` seconds.
    pub fn wait_for(&self, sql: &str, expected: &str, secs: u64) {
        if !eventually(secs, || self.try_sql(sql).as_deref() == Ok(expected)) {
            panic!("{sql} still gives {:?}, not {expected}", self.try_sql(sql));
        }
    }

    /// pgbench that must exit cleanly with no failed transaction; returns its report.
    pub fn pgbench_ok(&self, script: &str, args: &[&str]) -> String {
        let out = self.pgbench(script, args);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "pgbench failed:\n{text}");
        assert!(
            text.contains("number of failed transactions: 0 "),
            "pgbench had failures:\n{text}"
        );
        text
    }

    /// The walsender that serves `application_name` (a standby's `cluster_name`, a
    /// subscription's name), and a way to signal it: "-STOP" makes its peer lag, "-CONT" lets it
    /// go on, "-KILL" ends it unheard.
    pub fn walsender(&self, application_name: &str) -> impl Fn(&str) {
        let pid = self.sql_i64(&format!(
            "SELECT pid FROM pg_stat_replication WHERE application_name = '{application_name}'"
        ));
        move |sig: &str| {
            let ok = Command::new("kill")
                .args([sig, &pid.to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill {sig} {pid}");
        }
    }

    pub fn postmaster_pid(&self) -> i32 {
        fs::read_to_string(self.data.join("postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }
}

fn result(out: Output) -> Result<String, PgError> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(parse_error(&String::from_utf8_lossy(&out.stderr)))
    }
}

/// Clusters kept in statics (shared by the tests of one file) are never dropped: they are
/// stopped and removed when the test process exits.
static AT_EXIT: std::sync::Mutex<Vec<(PathBuf, PathBuf, PathBuf)>> =
    std::sync::Mutex::new(Vec::new());

extern "C" fn stop_shared_clusters() {
    if let Ok(list) = AT_EXIT.lock() {
        for (bin, dir, data) in list.iter() {
            let _ = as_owner(&bin.join("pg_ctl"))
                .arg("-D")
                .arg(data)
                .args(["-w", "-m", "immediate", "stop"])
                .output();
            if std::env::var_os("SNOWFLAKE_KEEP_CLUSTERS").is_none() {
                let _ = fs::remove_dir_all(dir);
            }
        }
    }
}

/// A cluster shared by the tests of one file, made once by `make` and stopped at exit.
pub fn shared_cluster(
    cell: &'static std::sync::OnceLock<Cluster>,
    make: impl FnOnce() -> Cluster,
) -> &'static Cluster {
    cell.get_or_init(|| {
        let c = make();
        let mut list = AT_EXIT.lock().unwrap();
        if list.is_empty() {
            // SAFETY: registering a plain extern "C" function with no captured state.
            unsafe { libc::atexit(stop_shared_clusters) };
        }
        list.push((c.bin.clone(), c.dir.clone(), c.data.clone()));
        c
    })
}

/// 18's initdb enables data checksums by default, earlier ones do not; pg_upgrade needs both
/// sides alike, so every cluster here is made without them.
fn no_checksums(bin: &Path) -> Vec<&'static std::ffi::OsStr> {
    let version = String::from_utf8(
        Command::new(bin.join("initdb"))
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    if major_of(version.trim_start_matches("initdb (PostgreSQL) ")) >= 18 {
        vec![std::ffi::OsStr::new("--no-data-checksums")]
    } else {
        vec![]
    }
}

/// Drops the Debian clusters (`sf-NAME-PID-N`) that a test process made and did not drop
/// because it was killed (a timeout): its process id is no longer running.
fn drop_stale_debian_clusters() {
    let Ok(versions) = fs::read_dir("/etc/postgresql") else {
        return;
    };
    for v in versions.flatten() {
        let Ok(clusters) = fs::read_dir(v.path()) else {
            continue;
        };
        for c in clusters.flatten() {
            let name = c.file_name().to_string_lossy().to_string();
            let Some(rest) = name.strip_prefix("sf-") else {
                continue;
            };
            let parts: Vec<&str> = rest.rsplitn(3, '-').collect();
            let Some(pid) = parts.get(1).and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = Command::new("pg_dropcluster")
                    .args(["--stop", &v.file_name().to_string_lossy(), &name])
                    .output();
                let _ = fs::remove_dir_all(c.path());
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            let _ = self
                .pg_ctl()
                .args(["-w", "-m", "immediate", "stop"])
                .output();
        }
        // Debian's clusters are dropped even when the test failed: their configuration is
        // outside the test's directory (a copy of it stays there for inspection).
        if let Some((major, name)) = &self.debian {
            if std::thread::panicking() {
                let _ = Command::new("cp")
                    .arg("-r")
                    .arg(&self.conf_dir)
                    .arg(self.dir.join("etc"))
                    .status();
            }
            let _ = Command::new("pg_dropcluster")
                .args(["--stop", &major.to_string(), name])
                .output();
            // pg_dropcluster leaves the files it did not make (conf.d/*.conf).
            let _ = fs::remove_dir_all(&self.conf_dir);
        }
        if std::env::var_os("SNOWFLAKE_KEEP_CLUSTERS").is_none() && !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// initdb, as the servers' user, of a cluster in `data` with the server whose programs are in
/// `bin`: trust, superuser `postgres`, UTF8 and the C locale, no sync, no checksums.
fn initdb(bin: &Path, data: &Path) {
    owner_runs(
        &bin.join("initdb"),
        &[
            &no_checksums(bin)[..],
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--locale=C".as_ref(),
            ],
        ]
        .concat(),
    );
}
