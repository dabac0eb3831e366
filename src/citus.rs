//! The Citus worker's glue (the rules are [`crate::core::citus`]): a background worker in
//! `snowflake.citus_database` that reads this node's Citus group and asks every primary node of
//! the cluster for its claim over Citus's own connections; and `snowflake.fleet_claim`, the
//! setting in which this node states its own claim for the others to ask.
//!
//! **Trust.** The Citus database is often owned by the application's role. The worker runs there
//! as the bootstrap superuser with the same session as the lease worker (every setting of the
//! database and its roles forgotten, `search_path` pinned, operators qualified), reads only
//! Citus's catalogs in `pg_catalog` (which a superuser owns, checked), and holds nothing that ID
//! generation waits for: the lease worker uses the group recorded in `_snowflake` at once, and a
//! worker that is stalled (a lock its catalogs wait for, a node that does not answer) only keeps
//! every claim it has seen live ([`crate::core::citus::NodeAnswers`]). Its statements have a
//! `statement_timeout`, so a stalled read ends, and the worker starts again.
//!
//! What the other nodes answer is read from `pg_settings`, restricted to a setting of context
//! `internal`: no session, database or role can set one, so a database owner there can no more
//! fake a claim than change the server's version.

use crate::config;
use crate::core::citus::{claim_text, parse_claim, NodeAnswer, NodeAnswers, Stated, Whose};
use crate::core::fleet::{Claim, LeftPair, PathReading};
use crate::generator::GENERATOR;
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, pg_sys};
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::time::Duration;

/// Nodes the worker keeps answers of: as many as the layout has pairs.
pub const MAX_NODES: usize = 1024;
/// Pairs left that one node's answer carries (a node that moved more often keeps its newest).
const MAX_LEFT: usize = 16;
/// How often the worker asks.
const ASK_EVERY: Duration = Duration::from_millis(crate::core::fleet::REFRESH_MS);

/// One node's last answer, in shared memory.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Slot {
    name: [u8; NAME_BYTES],
    answers: u64,
    failing: bool,
    has_claim: bool,
    claim: Claim,
    instance: i64,
    left_len: u32,
    left: [i64; MAX_LEFT],
}

/// A node's `host:port` as a slot keeps it (the names are ASCII).
const NAME_BYTES: usize = 256;

/// `name` as a slot keeps it: at most `NAME_BYTES - 1` bytes, so that a longer name is found
/// again as it was kept.
fn fit(name: &str) -> &str {
    &name[..name.len().min(NAME_BYTES - 1)]
}

impl Slot {
    const EMPTY: Slot = Slot {
        name: [0; NAME_BYTES],
        answers: 0,
        failing: false,
        has_claim: false,
        claim: Claim::NONE,
        instance: 0,
        left_len: 0,
        left: [0; MAX_LEFT],
    };

    fn name(&self) -> String {
        let end = self.name.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

/// What the Citus worker found, for the lease worker.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct CitusShared {
    /// The worker, while it runs (0 otherwise).
    pub worker_pid: i32,
    /// Rounds it completed since the server started.
    pub rounds: u64,
    /// This node's group, -1 while it is in no cluster (or not read yet).
    pub group: i64,
    /// Whether the last look found Citus in the database, and how many looks there were.
    pub citus_present: bool,
    pub looks: u64,
    /// Why the worker cannot read the cluster, if it cannot (an object no superuser owns).
    pub problem: crate::generator::ForeignObject,
    count: u32,
    nodes: [Slot; MAX_NODES],
}

impl Default for CitusShared {
    fn default() -> Self {
        CitusShared {
            worker_pid: 0,
            rounds: 0,
            group: -1,
            citus_present: false,
            looks: 0,
            problem: crate::generator::ForeignObject::NONE,
            count: 0,
            nodes: [Slot::EMPTY; MAX_NODES],
        }
    }
}

// SAFETY: plain old data.
unsafe impl PGRXSharedMemory for CitusShared {}

pub static CITUS: PgLwLock<CitusShared> = unsafe { PgLwLock::new(c"snowflake_citus") };

/// Defines `snowflake.fleet_claim`, and requests the segment when `snowflake.citus_database` is
/// set; only while shared_preload_libraries is processed.
pub fn init() {
    define_claim_setting();
    if enabled() {
        pg_shmem_init!(CITUS);
    }
}

/// Registers the worker when `snowflake.citus_database` is set.
pub fn register() {
    if !enabled() {
        return;
    }
    BackgroundWorkerBuilder::new("snowflake citus")
        .set_type("snowflake citus")
        .set_library("snowflake")
        .set_function("snowflake_citus_worker_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Whether a Citus worker runs on this server (`snowflake.citus_database` is set).
pub fn enabled() -> bool {
    config::citus_database().is_some()
}

static mut FLEET_CLAIM: *mut c_char = std::ptr::null_mut();

/// `snowflake.fleet_claim`: this server's claim as [`claim_text`] states it, read-only (context
/// `internal`), shown by a hook from shared memory. Empty until the lease worker has written a
/// claim (and on a standby, which claims nothing).
fn define_claim_setting() {
    // SAFETY: defines a setting while shared_preload_libraries is processed, with a static
    // variable PostgreSQL owns from now on and a hook that only reads shared memory.
    unsafe {
        pg_sys::DefineCustomStringVariable(
            c"snowflake.fleet_claim".as_ptr(),
            c"This server's claim on its datacenter and worker ID, as other Citus nodes read it (read-only).".as_ptr(),
            c"Set by the server itself: system identifier, pair, version, lease and pairs left.".as_ptr(),
            &raw mut FLEET_CLAIM,
            c"".as_ptr(),
            pg_sys::GucContext::PGC_INTERNAL,
            // Shown to superusers and pg_read_all_settings (so pg_monitor) only: it holds the
            // system identifier, which snowflake_node() shows to those only (docs/security.md).
            (pg_sys::GUC_NOT_IN_SAMPLE | pg_sys::GUC_DISALLOW_IN_FILE | pg_sys::GUC_SUPERUSER_ONLY)
                as i32,
            None,
            None,
            Some(show_claim),
        );
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn show_claim() -> *const c_char {
    let text = {
        let g = GENERATOR.share();
        if g.own_claim.system_identifier == 0 {
            String::new()
        } else {
            let left = &g.own_left[..(g.own_left_len as usize).min(g.own_left.len())];
            claim_text(&g.own_claim, g.instance, left)
        }
    };
    // palloc'd in the caller's context, as PostgreSQL's own show hooks return static or
    // short-lived text.
    let c = CString::new(text).unwrap_or_default();
    unsafe { pg_sys::pstrdup(c.as_ptr()) }
}

/// The query each node answers: its claim, from a setting of context `internal` only. Through
/// the function under `pg_settings`, not the view: every role may lock the view (PUBLIC may
/// UPDATE it), and a lock held there would stall every node's ask into that database.
const ASK: &str = "SELECT s.setting FROM pg_catalog.pg_show_all_settings() s WHERE s.name OPERATOR(pg_catalog.=) 'snowflake.fleet_claim' AND s.context OPERATOR(pg_catalog.=) 'internal'";

/// Whether Citus is installed here, and the first of the objects the worker uses that no
/// superuser owns (as "relation pg_catalog.pg_dist_node (owner)").
const CITUS_OBJECTS_SQL: &str = "
    SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL
       AND pg_catalog.to_regclass('pg_catalog.pg_dist_node') IS NOT NULL
       AND pg_catalog.to_regprocedure('pg_catalog.master_run_on_worker(text[],integer[],text[],boolean)') IS NOT NULL,
           (SELECT pg_catalog.concat(o.what, ' (owned by ',
                     pg_catalog.encode(pg_catalog.convert_to(r.rolname::pg_catalog.text, 'UTF8'), 'escape'), ')')
              FROM (SELECT 'table pg_catalog.' OPERATOR(pg_catalog.||) c.relname AS what, c.relowner AS owner
                      FROM pg_catalog.pg_class c
                     WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                             pg_catalog.to_regclass('pg_catalog.pg_dist_local_group'),
                             pg_catalog.to_regclass('pg_catalog.pg_dist_node')]::pg_catalog.oid[])
                    UNION ALL
                    SELECT 'function pg_catalog.master_run_on_worker', p.proowner
                      FROM pg_catalog.pg_proc p
                     WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('pg_catalog.master_run_on_worker(text[],integer[],text[],boolean)')) o
              JOIN pg_catalog.pg_authid r ON r.oid OPERATOR(pg_catalog.=) o.owner
             WHERE NOT r.rolsuper
             LIMIT 1)";

/// This node's group, if the cluster's metadata lists it as an active primary (a worker that no
/// coordinator added yet has group 0 and is listed nowhere).
const GROUP_SQL: &str = "
    SELECT l.groupid::pg_catalog.int8
      FROM pg_catalog.pg_dist_local_group l
     WHERE EXISTS (SELECT FROM pg_catalog.pg_dist_node n
                    WHERE n.groupid OPERATOR(pg_catalog.=) l.groupid AND n.isactive
                      AND n.noderole::pg_catalog.text OPERATOR(pg_catalog.=) 'primary')";

/// Every primary node (a disabled one too: it may still run), as `host:port`, with its answer (both ASCII, other bytes escaped:
/// an error message in a LATIN1 database may hold any byte).
const NODES_SQL: &str = "
    SELECT pg_catalog.encode(pg_catalog.convert_to(
               r.node_name OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) r.node_port::pg_catalog.text,
               'UTF8'), 'escape'),
           r.success, pg_catalog.encode(pg_catalog.convert_to(r.result, 'UTF8'), 'escape')
      FROM (SELECT pg_catalog.array_agg(n.nodename::pg_catalog.text ORDER BY n.nodeid) AS names,
                   pg_catalog.array_agg(n.nodeport ORDER BY n.nodeid) AS ports,
                   pg_catalog.array_agg($1::pg_catalog.text ORDER BY n.nodeid) AS asks
              FROM pg_catalog.pg_dist_node n
             WHERE n.noderole::pg_catalog.text OPERATOR(pg_catalog.=) 'primary'
            HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0) a
     CROSS JOIN LATERAL pg_catalog.master_run_on_worker(a.names, a.ports, a.asks, true) r";

/// What one round found: first the node's own group (published at once), then the answers (a
/// node that holds its answer back holds only them).
struct Round {
    present: bool,
    group: Option<i64>,
    problem: Option<String>,
}

/// The answers of the nodes: (`host:port`, whether the ask succeeded, the answer or the error).
type Answers = Vec<(String, bool, String)>;

fn read_group() -> Round {
    Spi::connect(|client| {
        let first = client
            .select(CITUS_OBJECTS_SQL, Some(1), &[])
            .expect("look for Citus")
            .first()
            .get_two::<bool, String>()
            .expect("look for Citus");
        let (present, problem) = (first.0.unwrap_or(false), first.1);
        if !present || problem.is_some() {
            return Round {
                present,
                group: None,
                problem,
            };
        }
        let group = client
            .select(GROUP_SQL, Some(1), &[])
            .expect("read the node's group")
            .next()
            .and_then(|row| row.get::<i64>(1).ok().flatten());
        Round {
            present,
            group,
            problem: None,
        }
    })
}

fn read_answers() -> Answers {
    Spi::connect(|client| {
        client
            .select(NODES_SQL, None, &[ASK.into()])
            .expect("ask the nodes for their claims")
            .map(|row| {
                (
                    row.get::<String>(1).ok().flatten().unwrap_or_default(),
                    row.get::<bool>(2).ok().flatten().unwrap_or(false),
                    row.get::<String>(3).ok().flatten().unwrap_or_default(),
                )
            })
            .collect()
    })
}

/// Publishes the node's group, and whether Citus is there to ask.
fn publish_group(round: &Round) {
    let mut g = CITUS.exclusive();
    g.group = round.group.unwrap_or(-1);
    g.citus_present = round.present;
    g.looks += 1;
    g.problem = match &round.problem {
        Some(p) => crate::generator::ForeignObject::new(p, ""),
        None => crate::generator::ForeignObject::NONE,
    };
}

/// Publishes a round's answers: each node's (a node no longer listed is dropped; one whose ask
/// failed, or that answered with no claim after it had stated one, keeps its last claim and
/// counts as failing). `None`: nothing could be asked (no Citus, or metadata not trusted), and
/// every node counts as failing, its claim kept.
fn publish(answers: Option<Answers>) {
    let mut g = CITUS.exclusive();
    g.rounds += 1;
    let Some(answers) = answers else {
        let count = g.count as usize;
        for slot in &mut g.nodes[..count] {
            slot.failing = true;
        }
        return;
    };
    let before: Vec<Slot> = g.nodes[..g.count as usize].to_vec();
    let mut count = 0;
    for (name, success, result) in answers.iter().take(MAX_NODES) {
        let name = fit(name);
        let mut slot = before
            .iter()
            .find(|s| s.name() == name)
            .copied()
            .unwrap_or_else(|| {
                let mut s = Slot::EMPTY;
                s.name[..name.len()].copy_from_slice(name.as_bytes());
                s
            });
        slot.failing = !success;
        if *success {
            slot.answers += 1;
            match parse_claim(result) {
                Some(Stated {
                    claim,
                    instance,
                    left_pairs: left,
                }) => {
                    slot.has_claim = true;
                    slot.claim = claim;
                    slot.instance = instance;
                    let keep = &left[left.len().saturating_sub(MAX_LEFT)..];
                    slot.left_len = keep.len() as u32;
                    slot.left[..keep.len()].copy_from_slice(keep);
                }
                // A server that restarted states no claim until its lease worker has written one:
                // what it stated before stays, unproven, until then.
                None if slot.has_claim => slot.failing = true,
                None => slot.left_len = 0,
            }
        }
        g.nodes[count] = slot;
        count += 1;
    }
    g.count = count as u32;
}

/// This node's group as the Citus worker last read it (`None`: in no cluster, or not read yet),
/// and whether it has read at all.
pub fn group() -> (Option<i64>, u64) {
    if !enabled() {
        return (None, 0);
    }
    let g = CITUS.share();
    ((g.group >= 0).then_some(g.group), g.rounds)
}

/// What the Citus worker has found so far: whether it has looked at the database, and whether
/// Citus was there then (for the messages of a node with no group).
pub fn found() -> (bool, bool) {
    if !enabled() {
        return (false, false);
    }
    let g = CITUS.share();
    (g.looks > 0, g.citus_present)
}

/// Why the Citus worker cannot read the cluster (an object no superuser owns), if it cannot.
pub fn problem() -> Option<String> {
    if !enabled() {
        return None;
    }
    CITUS.share().problem.get().map(|(what, _)| what)
}

thread_local! {
    /// The lease worker's watch of the nodes' answers.
    static ANSWERS: RefCell<NodeAnswers> = RefCell::new(NodeAnswers::default());
}

/// What the Citus nodes' answers hold for the lease worker ([`peers`]).
#[derive(Default)]
pub struct Peers {
    /// The other servers' claims, and the pairs they left.
    pub claims: Vec<Claim>,
    pub left_pairs: Vec<LeftPair>,
    /// Claims that another server states under this server's system identifier: copies.
    pub copies: Vec<Claim>,
    /// One path per node, and one for the Citus worker itself (caught up once it completed a
    /// round after the lease worker's first look).
    pub paths: Vec<PathReading>,
}

/// The Citus nodes' answers at `now_ms`, by the lease worker's monotonic clock, for this server
/// (system identifier `me`): its own answer is left out, by its instance.
pub fn peers(now_ms: u64, me: i64) -> Peers {
    if !enabled() {
        return Peers::default();
    }
    let instance = GENERATOR.share().instance;
    let (pid, rounds, answers) = {
        let g = CITUS.share();
        let answers: Vec<NodeAnswer> = g.nodes[..g.count as usize]
            .iter()
            .map(|s| NodeAnswer {
                node: s.name(),
                answers: s.answers,
                claim: s.has_claim.then(|| Stated {
                    claim: s.claim,
                    instance: s.instance,
                    left_pairs: s.left[..s.left_len as usize].to_vec(),
                }),
                failing: s.failing,
            })
            .collect();
        (g.worker_pid, g.rounds, answers)
    };
    let pid = (pid != 0).then_some(pid);
    let mut paths = ANSWERS.with(|a| a.borrow_mut().readings(now_ms, &answers, pid));
    paths.push(PathReading {
        subscription: "the Citus worker".into(),
        enabled: true,
        apply_pid: pid,
        silent_ms: Some(0),
        errors: None,
        table_state: 'r',
        end_lsn: (rounds > 0).then_some(rounds as i64),
        // Asked directly: any round since the worker started is fresh.
        publisher_end: Some(1),
        limited: true,
        relays: false,
    });
    let mut peers = Peers {
        paths,
        ..Peers::default()
    };
    for stated in answers.into_iter().filter_map(|n| n.claim) {
        match stated.whose(me, instance) {
            Whose::Own => {}
            Whose::Copy => peers.copies.push(stated.claim),
            Whose::Other => {
                let c = stated.claim;
                peers.claims.push(c);
                peers
                    .left_pairs
                    .extend(stated.left_pairs.into_iter().map(|last_id| LeftPair {
                        system_identifier: c.system_identifier,
                        last_id,
                    }));
            }
        }
    }
    peers
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_citus_worker_main(_arg: pg_sys::Datum) {
    crate::session::handle_signals();
    let database = config::citus_database().expect("registered only when it is set");
    crate::session::connect(&database);
    let reset = crate::session::forget_database_settings();
    if !crate::session::acts_as_superuser() {
        error!("snowflake citus worker does not run as a superuser in database \"{database}\"; it refuses to continue");
    }
    if !reset.is_empty() {
        log!(
            "snowflake citus worker ignores the settings of database \"{database}\" and its roles: {}",
            reset.join(", ")
        );
    }
    // Citus gives up on a node it cannot reach within this, well within a round's limit.
    crate::session::set_for_session(c"citus.node_connection_timeout", c"5s");
    CITUS.exclusive().worker_pid = unsafe { pg_sys::MyProcPid };
    // SAFETY: registers a callback with a null argument; it runs once, at exit.
    unsafe { pg_sys::before_shmem_exit(Some(forget_citus_worker), pg_sys::Datum::from(0usize)) };
    log!("snowflake citus worker started in database \"{database}\"");
    let mut said: Option<(Option<i64>, Option<String>)> = None;
    loop {
        let round = within_limit(|| BackgroundWorker::transaction(read_group));
        publish_group(&round);
        let seen = (round.group, round.problem.clone());
        if said.as_ref() != Some(&seen) {
            match (&seen.0, &seen.1) {
                (_, Some(p)) => warning!("snowflake citus worker refuses the Citus metadata of database \"{database}\": {p} is not owned by a superuser"),
                (Some(g), None) => log!("snowflake: this node is Citus group {g}"),
                (None, None) => log!("snowflake: this node is in no Citus cluster yet (database \"{database}\")"),
            }
            said = Some(seen);
        }
        let answers = (round.present && round.problem.is_none())
            .then(|| within_limit(|| BackgroundWorker::transaction(read_answers)));
        publish(answers);
        // The lease worker may be waiting for the group.
        crate::generator::wake_worker();
        crate::session::nap(ASK_EVERY);
        crate::session::reload_if_asked();
    }
}

/// How long one round may take: a round that a lock or a node stalls ends with an error, and the
/// worker starts again.
const ROUND_LIMIT_MS: i32 = 20_000;

/// Runs `f` under a statement timeout of `ROUND_LIMIT_MS`. A background worker's SPI statements
/// get no `statement_timeout` of their own (only a client's statements arm it), so the timer is
/// armed here: at expiry it cancels whatever the worker waits for, as for a client.
fn within_limit<T>(f: impl FnOnce() -> T) -> T {
    // The timeouts PostgreSQL registers for every process with a database connection
    // (utils/timeout.h); STATEMENT_TIMEOUT is the fourth in every supported major.
    const STATEMENT_TIMEOUT: std::ffi::c_uint = 3;
    unsafe extern "C-unwind" {
        fn enable_timeout_after(id: std::ffi::c_uint, delay_ms: std::ffi::c_int);
        fn disable_timeout(id: std::ffi::c_uint, keep_indicator: bool);
    }
    // SAFETY: PostgreSQL's own timer calls, for a timeout registered at connection.
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, ROUND_LIMIT_MS) };
    let result = f();
    unsafe { disable_timeout(STATEMENT_TIMEOUT, false) };
    result
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_citus_worker(_code: i32, _arg: pg_sys::Datum) {
    let mut g = CITUS.exclusive();
    if g.worker_pid == unsafe { pg_sys::MyProcPid } {
        g.worker_pid = 0;
    }
}
