//! Many writers, one dataset: two-way logical replication (`origin = none`, PostgreSQL 16+), the
//! README's recipes for a mesh of writers (set up, add a node, retire one), and the fleet check
//! that refuses IDs while another server claims the same datacenter and worker ID.

mod common;
use common::{bindir, eventually, pg_major, run_recipes, run_recipes_within, uris, Cluster};
use std::thread;
use std::time::Duration;

const LOGICAL: &str = "wal_level = logical
max_worker_processes = 24
max_logical_replication_workers = 12
max_replication_slots = 12
max_wal_senders = 12
snowflake.claim_expiry = '15s'";

/// `origin` is the worker ID of the server where the row was inserted.
const TABLE: &str = "CREATE EXTENSION snowflake; \
    CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), \
                    origin int NOT NULL DEFAULT current_setting('snowflake.worker_id')::int, payload text)";
const INSERT: &str = "INSERT INTO t (payload) VALUES ('x');\n";

fn node(name: &str, datacenter: u32, worker: u32) -> Cluster {
    Cluster::new(
        name,
        &format!(
            "{LOGICAL}\nsnowflake.datacenter_id = {datacenter}\nsnowflake.worker_id = {worker}"
        ),
    )
}

fn subscribe(subscriber: &Cluster, publisher: &Cluster, name: &str) {
    subscriber.sql(&format!(
        "CREATE SUBSCRIPTION {name} CONNECTION '{}' PUBLICATION pub WITH (origin = none, copy_data = false)",
        publisher.conninfo()
    ));
}

fn fingerprint(c: &Cluster) -> String {
    c.sql("SELECT count(*) || ' ' || md5(coalesce(string_agg(id || ':' || origin, ',' ORDER BY id), '')) FROM t")
}

/// Every node ends with the same rows.
fn converge(nodes: &[&Cluster], secs: u64) {
    let same = eventually(secs, || {
        let f: Vec<String> = nodes.iter().map(|c| fingerprint(c)).collect();
        f.windows(2).all(|w| w[0] == w[1])
    });
    let now: Vec<String> = nodes.iter().map(|c| fingerprint(c)).collect();
    assert!(same, "the nodes did not converge within {secs} s: {now:?}");
}

/// No duplicate key anywhere, and no logical replication conflict on the user's data. (The one
/// allowed: 17+ logs `delete_missing` or `update_missing` for a claim a new peer had not seen yet:
/// the refresh replaces the row, and each lease updates its `lease_id`.)
fn assert_no_conflicts(c: &Cluster) {
    for line in c.log().lines() {
        assert!(
            !line.contains("duplicate key"),
            "in {}: {line}",
            c.dir.display()
        );
        if line.contains("conflict") {
            assert!(
                line.contains("_snowflake.claims")
                    && (line.contains("delete_missing") || line.contains("update_missing")),
                "a replication conflict in {}: {line}",
                c.dir.display()
            );
        }
    }
}

/// The same pgbench insert load on every node at once; each must finish with no failure.
fn write_on_all(nodes: &[&Cluster], args: &[&str]) {
    thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|c| s.spawn(move || c.pgbench_ok(INSERT, args)))
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

/// Each row's ID carries the worker ID of the server that inserted it.
fn assert_rows_carry_their_node(c: &Cluster) {
    assert_eq!(
        c.sql("SELECT count(*) FROM t WHERE snowflake_worker_id(id) <> origin"),
        "0"
    );
}

/// PostgreSQL 15 has no `origin` option: changes would echo between two subscribers forever, so
/// only fan-in (tests/durability.rs) is possible there.
fn origin_none_is_refused_before_16() {
    let mut c = node("origin-15", 1, 1);
    c.start();
    let e = c.sql_err("CREATE SUBSCRIPTION s CONNECTION 'host=/nonexistent' PUBLICATION p WITH (connect = false, origin = none)");
    assert!(e.message.contains("origin"), "{}", e.raw);
}

#[test]
fn two_servers_write_both_ways_through_a_crash_with_the_clock_set_back() {
    if pg_major() < 16 {
        return origin_none_is_refused_before_16();
    }
    let mut a = node("two-a", 1, 1);
    let mut b = node("two-b", 1, 2);
    b.fake_time(None);
    a.start();
    b.start();
    for c in [&a, &b] {
        c.sql(TABLE);
        c.sql("CREATE PUBLICATION pub FOR TABLE t");
    }
    subscribe(&a, &b, "sub_from_b");
    subscribe(&b, &a, "sub_from_a");
    let bench = ["-c", "4", "-j", "2", "-t", "500"];
    write_on_all(&[&a, &b], &bench);
    // B crashes while A writes, comes back with its clock 3 s behind, and writes again.
    let b_max = b.sql_i64("SELECT max(id) FROM t WHERE origin = 2");
    thread::scope(|s| {
        let ha = s.spawn(|| a.pgbench_ok(INSERT, &["-c", "2", "-j", "1", "-T", "8"]));
        thread::sleep(Duration::from_secs(1));
        b.stop("immediate");
        b.set_fake_offset("-3s");
        b.start();
        assert!(b.clock_offset_s() < -2.5, "B's clock is not behind");
        assert!(
            common::worker_sees_the_clock(&b),
            "16+ only: the worker must see B's clock"
        );
        b.pgbench_ok(INSERT, &bench);
        ha.join().unwrap();
    });
    converge(&[&a, &b], 60);
    assert_eq!(
        b.sql(&format!(
            "SELECT count(*), count(*) FILTER (WHERE id > {b_max}) FROM t WHERE origin = 2"
        )),
        "4000|2000",
        "B's IDs after the crash are above its IDs before it"
    );
    for c in [&a, &b] {
        assert_rows_carry_their_node(c);
        assert_no_conflicts(c);
    }
}

/// Runs README recipes in one shell, as a user pastes them, with `vars` set.
const CLAIMS_SEEN: &str = "SELECT string_agg(datacenter_id || '/' || worker_id, ',' ORDER BY datacenter_id, worker_id) FROM _snowflake.claims WHERE NOT retired";

/// `mallory` may create in `public` of the database the recipes work in (the lease database, which
/// a superuser owns, and here the application's too) and has planted stand-ins for everything
/// the mesh recipes name (derived from their text): functions of every name they call and
/// operators for what they combine, each of which makes her a superuser.
fn plant_owner_traps(c: &Cluster) {
    c.sql("CREATE ROLE mallory LOGIN; GRANT CREATE ON SCHEMA public TO mallory");
    let recipes: Vec<String> = [
        "mesh-functions",
        "mesh",
        "mesh-add",
        "mesh-retire",
        "fan-in",
    ]
    .iter()
    .map(|r| common::readme_recipe(r))
    .collect();
    let texts: Vec<&str> = recipes.iter().map(String::as_str).collect();
    let out = c
        .psql_cmd_as("mallory", "postgres")
        .arg("-c")
        .arg(common::recipe_traps(&texts, "public", "mallory"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rows of one (datacenter, worker) pair.
fn max_of_pair(c: &Cluster, datacenter: u32, worker: u32) -> i64 {
    c.sql_i64(&format!(
        "SELECT max(id) FROM t WHERE snowflake_datacenter_id(id) = {datacenter} AND snowflake_worker_id(id) = {worker}"
    ))
}

/// The fan-in recipe, as written, on every major (15 has no `origin = none`): two spokes write,
/// the hub receives their rows (those written before the recipe too) and their claims, and
/// nothing flows back. On Debian-style clusters (`Cluster::debian_style`: pg_createcluster
/// where the server is Debian's), whose hub's database has the owner's stand-ins planted.
#[test]
fn fan_in_with_the_recipe_on_debian_style_clusters() {
    let debian = |name: &str, datacenter: u32, worker: u32| {
        Cluster::debian_style(
            &bindir(),
            name,
            &format!(
                "{LOGICAL}\nsnowflake.datacenter_id = {datacenter}\nsnowflake.worker_id = {worker}"
            ),
            true,
        )
    };
    let mut a = debian("fanin-a", 1, 1);
    let mut b = debian("fanin-b", 1, 2);
    let mut hub = debian("fanin-hub", 2, 1);
    for c in [&mut a, &mut b, &mut hub] {
        c.start();
        c.sql(TABLE);
    }
    plant_owner_traps(&hub);
    a.sql("INSERT INTO t (payload) SELECT 'before' FROM generate_series(1, 100)");
    run_recipes(
        &["mesh-functions", "fan-in"],
        &[
            ("HUB", hub.uri()),
            ("SPOKES", uris(&[&a, &b])),
            ("TABLES", "public.t".to_string()),
        ],
    );
    write_on_all(&[&a, &b], &["-c", "2", "-j", "1", "-t", "300"]);
    hub.wait_for("SELECT count(*) FROM t", "1300", 60);
    assert_eq!(
        hub.sql("SET search_path = pg_catalog; SELECT string_agg(origin::text || ':' || n, ',' ORDER BY origin) FROM (SELECT origin, count(*) n FROM public.t GROUP BY 1) x"),
        "1:700,2:600"
    );
    assert_rows_carry_their_node(&hub);
    // The hub sees the spokes' claims, and no conflict; nothing came back to the spokes.
    hub.wait_for(
        &format!("SET search_path = pg_catalog; {CLAIMS_SEEN}"),
        "1/1,1/2,2/1",
        15,
    );
    assert_eq!(
        hub.sql("SELECT claim_conflict_with IS NULL FROM public.snowflake_node()"),
        "t"
    );
    assert_eq!(a.sql("SELECT count(*) FROM t"), "700");
    assert_eq!(a.sql(CLAIMS_SEEN), "1/1");
    assert_eq!(
        hub.sql(
            "SET search_path = pg_catalog; SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"
        ),
        "f"
    );
    assert_no_conflicts(&hub);
}

/// The replication recipes: every psql call runs with `search_path` pinned (mesh-functions and
/// fan-in export it before their first call; the mesh recipes run after mesh-functions, in its
/// shell), and none sets `run_as_owner` or `password_required` (16+ applies rows as the table's
/// owner; a superuser owns the subscriptions).
#[test]
fn the_replication_recipes_pin_the_path_and_leave_apply_as_the_table_owner() {
    const PIN: &str = "export PGOPTIONS=\"-c search_path=pg_catalog,pg_temp\"";
    for name in [
        "mesh-functions",
        "mesh",
        "mesh-add",
        "mesh-retire",
        "fan-in",
    ] {
        let text = common::readme_recipe(name);
        for option in ["run_as_owner", "password_required"] {
            assert!(!text.contains(option), "recipe {name} sets {option}");
        }
        let first_psql = text.find("psql ").unwrap_or(text.len());
        if ["mesh-functions", "fan-in"].contains(&name) {
            assert!(
                text.find(PIN).is_some_and(|at| at < first_psql),
                "recipe {name}: {PIN} before its first psql call"
            );
        }
        assert_eq!(
            text.matches("PGOPTIONS").count(),
            text.matches(PIN).count(),
            "recipe {name} sets PGOPTIONS otherwise than {PIN}"
        );
    }
}

/// alice owns the hub's table, with an `ENABLE ALWAYS` trigger (her function) that tries to make
/// her a superuser and records whom it ran as. Before 16 the hub applies rows as a superuser, the
/// subscriptions' owner: the fan-in recipe refuses, creating nothing and naming her table and her
/// function; the table given to a superuser, it still names her function; the trigger dropped, it
/// runs. On 16 and later it runs as written, and her trigger runs as alice.
#[test]
fn fan_in_never_runs_a_table_owners_code_as_a_superuser() {
    let mut spoke = node("owner-spoke", 1, 1);
    let mut hub = node("owner-hub", 2, 1);
    for c in [&mut spoke, &mut hub] {
        c.start();
        c.sql(TABLE);
    }
    hub.sql("CREATE ROLE alice LOGIN; GRANT CREATE ON SCHEMA public TO alice; ALTER TABLE public.t OWNER TO alice");
    hub.try_sql_as(
        "alice",
        "CREATE TABLE public.ran_as (who name, superuser boolean);
         CREATE FUNCTION public.escalate() RETURNS trigger LANGUAGE plpgsql AS $f$
           BEGIN
             BEGIN ALTER ROLE alice SUPERUSER; EXCEPTION WHEN OTHERS THEN NULL; END;
             INSERT INTO public.ran_as SELECT current_user, r.rolsuper
               FROM pg_catalog.pg_roles r WHERE r.rolname = current_user;
             RETURN NEW;
           END $f$;
         CREATE TRIGGER escalate BEFORE INSERT ON public.t FOR EACH ROW EXECUTE FUNCTION public.escalate();
         ALTER TABLE public.t ENABLE ALWAYS TRIGGER escalate",
    )
    .unwrap();
    let vars = [
        ("HUB", hub.uri()),
        ("SPOKES", uris(&[&spoke])),
        ("TABLES", "public.t".to_string()),
    ];
    let alice_super = || hub.sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'alice'");
    let created = || {
        format!(
            "{} publications on the spoke, {} subscriptions on the hub",
            spoke.sql("SELECT count(*) FROM pg_publication"),
            hub.sql("SELECT count(*) FROM pg_subscription")
        )
    };
    if pg_major() < 16 {
        let refused = |names: &[&str], not: &[&str]| {
            let out = common::try_recipes(&["mesh-functions", "fan-in"], &vars, 120);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "the fan-in recipe ran: {err}");
            assert!(
                err.contains("fan-in stopped before creating anything"),
                "{err}"
            );
            for name in names {
                assert!(err.contains(name), "{name} is not named: {err}");
            }
            for name in not {
                assert!(!err.contains(name), "{name} is named: {err}");
            }
            assert_eq!(
                created(),
                "0 publications on the spoke, 0 subscriptions on the hub"
            );
        };
        refused(
            &[
                "table public.t, owner alice",
                "function public.escalate(), owner alice",
            ],
            &[],
        );
        hub.sql("ALTER TABLE public.t OWNER TO postgres");
        refused(
            &["function public.escalate(), owner alice"],
            &["table public.t"],
        );
        // The owner of a table's schema could swap the table for her own after the check (a
        // fresh read of issue 58): `public` of a database she owns, or a schema given to her.
        hub.sql("ALTER DATABASE postgres OWNER TO alice");
        refused(&["schema public, owner alice"], &["table public.t"]);
        hub.sql("ALTER DATABASE postgres OWNER TO postgres; ALTER SCHEMA public OWNER TO alice");
        refused(&["schema public, owner alice"], &["table public.t"]);
        hub.sql("ALTER SCHEMA public OWNER TO pg_database_owner");
        hub.sql("DROP TRIGGER escalate ON public.t");
    }
    run_recipes(&["mesh-functions", "fan-in"], &vars);
    assert_eq!(
        created(),
        "2 publications on the spoke, 2 subscriptions on the hub"
    );
    spoke.sql("INSERT INTO t (payload) VALUES ('x')");
    hub.wait_for("SELECT count(*) FROM public.t", "1", 60);
    if pg_major() >= 16 {
        hub.wait_for("SELECT count(*) FROM public.ran_as", "1", 60);
        assert_eq!(
            hub.sql("SELECT who || ' ' || superuser FROM public.ran_as"),
            "alice false",
            "alice's trigger ran as alice, no superuser"
        );
        assert_eq!(
            hub.sql("SELECT count(*) FROM pg_subscription WHERE subrunasowner OR NOT subpasswordrequired"),
            "0"
        );
    } else {
        assert_eq!(hub.sql("SELECT count(*) FROM public.ran_as"), "0");
    }
    assert_eq!(alice_super(), "f", "alice became a superuser");
}

#[test]
fn three_writers_with_the_readme_recipes_add_and_retire_a_node() {
    if pg_major() < 16 {
        return origin_none_is_refused_before_16();
    }
    let mut n1 = node("mesh-1", 1, 1);
    let mut n2 = node("mesh-2", 1, 2);
    let mut n3 = node("mesh-3", 2, 1);
    n2.fake_time(None);
    for c in [&mut n1, &mut n2, &mut n3] {
        c.start();
        c.sql(TABLE);
    }
    let tables = ("TABLES", "public.t".to_string());
    run_recipes(
        &["mesh-functions", "mesh"],
        &[("NODES", uris(&[&n1, &n2, &n3])), tables.clone()],
    );

    let bench = ["-c", "2", "-j", "1", "-t", "300"];
    write_on_all(&[&n1, &n2, &n3], &bench);
    // n2 crashes and comes back 3 s behind; everyone writes again.
    n2.stop("immediate");
    n2.set_fake_offset("-3s");
    n2.start();
    assert!(
        common::worker_sees_the_clock(&n2),
        "16+ only: the worker must see n2's clock"
    );
    write_on_all(&[&n1, &n2, &n3], &bench);
    converge(&[&n1, &n2, &n3], 60);
    assert_eq!(n1.sql("SELECT count(*) FROM t"), "3600");
    // Every node knows every node's claim, and none refuses.
    for c in [&n1, &n2, &n3] {
        c.wait_for(CLAIMS_SEEN, "1/1,1/2,2/1", 15);
        assert_eq!(
            c.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
            "t"
        );
    }

    // The claims have a path of their own: the owner of n3's table adds a trigger that raises
    // on every replicated row, which stops n3's subscriptions for the tables, and n3 still
    // receives the claims of n1 and n2 (refreshed every 5 s) and does not warn of them.
    n3.sql("CREATE ROLE tabowner LOGIN; GRANT CREATE ON SCHEMA public TO tabowner; ALTER TABLE t OWNER TO tabowner");
    n3.try_sql_as(
        "tabowner",
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$; \
         CREATE TRIGGER boom BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION boom(); \
         ALTER TABLE t ENABLE ALWAYS TRIGGER boom",
    )
    .unwrap();
    let log_before = n3.log().len();
    n1.sql(INSERT);
    let since = n3.sql("SELECT now()");
    assert!(
        eventually(30, || n3.log().contains("boom")),
        "the trigger did not stop n3's apply"
    );
    n3.wait_for(
        &format!("SELECT count(*) FROM _snowflake.claims WHERE last_seen > '{since}'::timestamptz + interval '6 s' \
                  AND system_identifier <> (SELECT system_identifier FROM pg_control_system())"),
        "2",
        30,
    );
    let log = n3.log()[log_before..].to_string();
    assert!(
        !log.contains("carries _snowflake.claims to this server and is not applying"),
        "a claims path of n3 was reported broken:\n{log}"
    );
    n3.try_sql_as("tabowner", "DROP TRIGGER boom ON t").unwrap();
    n3.sql("ALTER TABLE t OWNER TO postgres");
    converge(&[&n1, &n2, &n3], 60);

    // A fourth node joins (writes paused): it copies the rows, then everyone writes. Its clock
    // runs 90 s ahead, and so do its IDs.
    let mut n4 = node("mesh-4", 2, 2);
    n4.fake_time(Some("+90s"));
    n4.start();
    n4.sql(TABLE);
    run_recipes(
        &["mesh-functions", "mesh-add"],
        &[
            ("NEW", n4.uri()),
            ("NODES", uris(&[&n1, &n2, &n3])),
            tables.clone(),
        ],
    );
    n4.wait_for(
        "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'",
        "0",
        60,
    );
    write_on_all(&[&n1, &n2, &n3, &n4], &bench);
    converge(&[&n1, &n2, &n3, &n4], 60);
    assert_eq!(n4.sql("SELECT count(*) FROM t"), "6001");
    assert!(common::worker_sees_the_clock(&n4), "16+ only");
    let n4_max = max_of_pair(&n4, 2, 2);
    // (its IDs are dated by its clock: 90 s ahead of the others')
    assert!(
        n1.sql_i64(&format!(
            "SELECT extract(epoch FROM snowflake_timestamp({n4_max}) - now())::int"
        )) >= 60
    );

    // n4 moves to (2, 3) first (as a conflict's HINT suggests): its subscriptions, and its
    // peers' subscriptions from it, keep the names of (2, 2), and the retire recipe still finds
    // them (1.5.0's named them after the current pair and stopped at the first).
    n4.conf("snowflake.worker_id = 3");
    n4.stop("fast");
    n4.start();
    n4.wait_for("SELECT worker_id FROM snowflake_node()", "3", 10);
    n4.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    let n4_sysid = sysid(&n4);
    for c in [&n1, &n2, &n3] {
        c.wait_for(
            &format!(
                "SELECT worker_id FROM _snowflake.claims WHERE system_identifier = {n4_sysid}"
            ),
            "3",
            20,
        );
    }

    // The owner of the replicated database has prepared it: a search_path that puts their own
    // current_setting() and bigint `=` (which the recipes' psql calls use) before pg_catalog's.
    // The recipes run as superuser and must not run them.
    for c in [&n1, &n2, &n3, &n4] {
        plant_owner_traps(c);
    }
    // n4 retires: its subscriptions and slots go, and its claim stays as a tombstone everywhere.
    run_recipes(
        &["mesh-functions", "mesh-retire"],
        &[
            ("OLD", n4.uri()),
            ("NODES", uris(&[&n1, &n2, &n3, &n4])),
            tables,
        ],
    );
    // (Read with pg_catalog alone on the path, then the stand-ins go: this test's own queries
    // are written for a trusted path, and some would pick them up.)
    for c in [&n1, &n2, &n3, &n4] {
        assert_eq!(
            c.sql("SET search_path = pg_catalog; SELECT rolsuper FROM pg_roles WHERE rolname = 'mallory'"),
            "f",
            "a README recipe ran code another role planted"
        );
        c.sql("DROP OWNED BY mallory");
    }
    for c in [&n1, &n2, &n3] {
        assert_eq!(
            c.sql("SELECT count(*) FROM pg_replication_slots"),
            "4",
            "slots of the two remaining peers, for their tables and for their claims"
        );
        c.wait_for(CLAIMS_SEEN, "1/1,1/2,2/1", 15);
        c.pgbench_ok(INSERT, &["-c", "1", "-t", "100"]);
    }
    converge(&[&n1, &n2, &n3], 60);
    for c in [&n1, &n2, &n3] {
        assert_eq!(
            c.sql(&format!("SELECT retired, worker_id FROM _snowflake.claims WHERE system_identifier = {n4_sysid}")),
            "t|3"
        );
        // The tombstone carries its last ID on the pair it left.
        assert!(
            c.sql_i64(&format!(
                "SELECT max(x) FROM _snowflake.claims, unnest(left_pairs) x \
                  WHERE system_identifier = {n4_sysid} AND (snowflake_decode(x)).worker_id = 2"
            )) >= n4_max,
            "the tombstone is below an ID the retired server issued on (2, 2)"
        );
    }

    // Its pair goes to a new server at once, whose clock is right: n4's last IDs lie up to 90 s
    // ahead of it, and it continues above them (its drift of 180 s lets it issue that far ahead).
    let mut n5 = node("mesh-5", 2, 2);
    n5.conf("snowflake.max_clock_drift = '180s'");
    n5.start();
    n5.sql(TABLE);
    run_recipes(
        &["mesh-functions", "mesh-add"],
        &[
            ("NEW", n5.uri()),
            ("NODES", uris(&[&n1, &n2, &n3])),
            ("TABLES", "public.t".to_string()),
        ],
    );
    n5.wait_for(
        "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate <> 'r'",
        "0",
        60,
    );
    // Still ahead of n5's clock, so that the check below can fail.
    assert_eq!(
        n5.sql(&format!("SELECT snowflake_timestamp({n4_max}) > now()")),
        "t"
    );
    n5.sql("INSERT INTO t (payload) SELECT 'n5' FROM generate_series(1, 200)");
    assert_eq!(
        n5.sql(&format!(
            "SELECT count(*), bool_and(id > {n4_max}) FROM t WHERE payload = 'n5'"
        )),
        "200|t",
        "the new holder of n4's pair issued below n4's IDs"
    );
    assert_eq!(
        n5.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
        "t"
    );
    converge(&[&n1, &n2, &n3, &n5], 60);
    for c in [&n1, &n2, &n3, &n4, &n5] {
        assert_rows_carry_their_node(c);
        assert_no_conflicts(c);
    }
}

/// `snowflake_nextval()` on `c` refuses, naming the pair.
fn refuses(c: &Cluster) -> bool {
    match c.try_sql("SELECT snowflake_nextval()") {
        Err(e) => {
            assert_eq!(e.sqlstate, "55000", "{}", e.raw);
            assert!(
                e.message.contains("worker_id 5") && e.message.contains("datacenter_id 1"),
                "{}",
                e.raw
            );
            assert!(
                e.detail.contains("system identifier") && !e.hint.is_empty(),
                "{}",
                e.raw
            );
            true
        }
        Ok(_) => false,
    }
}

fn sysid(c: &Cluster) -> String {
    c.sql("SELECT system_identifier FROM pg_control_system()")
}

/// Waits until `c`'s lease worker has rewritten its own claim (in database `db`) `secs` or more
/// after this call, by `c`'s clock: it has read the other claims that late too. This is what
/// "well past a claim's expiry" means to the worker, and it holds however slow the machine is
/// (a fixed sleep did not). Fails after `secs` + 30 s. Not for a server whose clock libfaketime
/// moves on 15, where the worker does not see it.
fn worker_looked_after(c: &Cluster, db: &str, secs: u64) {
    let since = c.try_sql_in(db, "SELECT now()").unwrap();
    let q = format!(
        "SELECT count(*) FROM _snowflake.claims WHERE system_identifier = {} \
           AND last_seen >= '{since}'::timestamptz + interval '{secs} s'",
        sysid(c)
    );
    assert!(
        eventually(secs + 30, || c.try_sql_in(db, &q).as_deref() == Ok("1")),
        "the lease worker did not rewrite its claim {secs} s after {since}:\n{}",
        c.log()
    );
}

#[test]
fn two_servers_with_one_worker_id_both_refuse_until_one_is_gone() {
    let mut a = node("dup-a", 1, 5);
    let mut b = node("dup-b", 1, 5);
    for c in [&mut a, &mut b] {
        c.start();
        c.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
    }
    for c in [&a, &b] {
        c.sql("CREATE PUBLICATION pub FOR ALL TABLES");
    }
    if pg_major() >= 16 {
        subscribe(&a, &b, "sub_from_b");
        subscribe(&b, &a, "sub_from_a");
        assert!(
            eventually(30, || refuses(&a) && refuses(&b)),
            "no refusal within 30 s"
        );
    } else {
        // 15: one way only (no `origin = none`), so only the subscriber can see the other.
        b.sql(&format!(
            "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
            a.conninfo()
        ));
        assert!(eventually(30, || refuses(&b)), "no refusal within 30 s");
        assert!(
            !refuses(&a),
            "the publisher cannot see the subscriber's claim"
        );
    }
    assert_eq!(
        b.sql("SELECT claim_conflict_with::text, claim_conflict_seen IS NOT NULL FROM snowflake_node()"),
        format!("{}|t", sysid(&a))
    );
    let warnings = b.log().matches("are also claimed by the server").count();
    assert_eq!(warnings, 1, "one WARNING when the conflict starts");

    // A goes away and a DBA retires its claim on B, as the HINT says: B issues again by itself.
    let a_sysid = sysid(&a);
    a.stop("fast");
    let e = b.sql_err("SELECT snowflake_nextval()");
    let retire =
        format!("UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {a_sysid}");
    assert!(e.hint.contains(&retire), "{}", e.raw);
    b.sql(&retire);
    assert!(eventually(15, || !refuses(&b)), "B did not resume");
    assert_eq!(
        b.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
        "t"
    );
    assert!(b.log().contains("no longer claimed by another server"));
}

#[test]
fn a_claim_expires_ordinary_users_cannot_write_claims_and_restarts_are_no_conflict() {
    let mut c = node("claims", 1, 5);
    c.start();
    c.sql("CREATE EXTENSION snowflake; CREATE ROLE app LOGIN");
    // The server's own claim, under its system identifier.
    c.wait_for("SELECT count(*) FROM _snowflake.claims", "1", 10);
    assert_eq!(
        c.sql("SELECT system_identifier::text FROM _snowflake.claims"),
        sysid(&c)
    );
    // An ordinary user can neither add, change nor remove a claim.
    for sql in [
        "INSERT INTO _snowflake.claims VALUES (1, 1, 1, 5, now())",
        "UPDATE _snowflake.claims SET worker_id = 6",
        "DELETE FROM _snowflake.claims",
        "SELECT setval('_snowflake.node_token', 1)",
    ] {
        let e = c.try_sql_as("app", sql).expect_err(sql);
        assert_eq!(e.sqlstate, "42501", "{sql}: {}", e.raw);
    }
    assert_eq!(c.sql("SELECT snowflake_nextval() > 0"), "t");

    // A claim on our pair from a server that stops refreshing it: refused, then it expires
    // (snowflake.claim_expiry = 15 s) and IDs resume by themselves.
    c.sql("INSERT INTO _snowflake.claims VALUES (12345, 1, 1, 5, now())");
    assert!(eventually(10, || refuses(&c)), "the claim was not seen");
    assert_eq!(
        c.sql("SELECT claim_conflict_with FROM snowflake_node()"),
        "12345"
    );
    assert!(eventually(30, || !refuses(&c)), "the claim did not expire");
    assert_eq!(
        c.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
        "t"
    );

    // After a restart the server has not watched that claim: it cannot know from a time another
    // server wrote whether that server left, so the claim holds IDs back until it has been seen
    // unchanged for the expiry. Retiring it ends that at once.
    c.stop("fast");
    c.start();
    assert!(
        eventually(10, || refuses(&c)),
        "an unwatched claim was taken for expired"
    );
    assert!(
        eventually(40, || !refuses(&c)),
        "the claim did not expire after a restart"
    );
    c.sql("UPDATE _snowflake.claims SET retired = true WHERE system_identifier = 12345");

    // The same server after a crash and a clean restart: its own claim is no conflict.
    for mode in ["immediate", "fast"] {
        c.stop(mode);
        c.start();
        c.wait_for(
            "SELECT count(*) FROM _snowflake.claims WHERE last_seen > now() - interval '5 s'",
            "1",
            10,
        );
        // Each start takes the pair over from the tombstone (DESIGN.md, invariant 1 of "Where
        // the next holder looks"): its floor at the clock plus max_clock_drift, its lease a
        // lease beyond. A restart within that lease starts above the drift: 58000 until the
        // clock has caught up, within a lease.
        assert!(eventually(5, || c
            .try_sql("SELECT snowflake_nextval()")
            .map_or_else(|e| e.sqlstate != "58000", |_| true)));
        assert!(!refuses(&c));
    }
}

/// The fleet check fails safe when the path that carries the claims stops: claims replicated
/// with a user table in one subscription (as a publication of the tables and the claims, or `FOR
/// ALL TABLES`, has it), and the table's owner on the subscriber adds a trigger that raises. The
/// subscriber's copy of the other server's claim then stops changing; it must stay a conflict,
/// not expire (snowflake.claim_expiry = 15 s here), and the server must say why.
#[test]
fn a_claims_path_that_stops_applying_keeps_the_conflict() {
    let mut a = node("path-a", 1, 5);
    let mut b = node("path-b", 1, 5);
    for c in [&mut a, &mut b] {
        c.start();
        c.sql(TABLE);
        c.sql("CREATE ROLE tabowner LOGIN; GRANT CREATE ON SCHEMA public TO tabowner; ALTER TABLE t OWNER TO tabowner");
    }
    a.sql("CREATE PUBLICATION pub FOR TABLE t, _snowflake.claims");
    b.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
        a.conninfo()
    ));
    assert!(eventually(30, || refuses(&b)), "no refusal within 30 s");
    b.try_sql_as(
        "tabowner",
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$; \
         CREATE TRIGGER boom BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION boom(); \
         ALTER TABLE t ENABLE ALWAYS TRIGGER boom",
    )
    .unwrap();
    // A issues (it cannot see B's claim: one way only), and its row stops B's apply.
    a.sql(INSERT);
    assert!(
        eventually(30, || b.log().contains("boom")),
        "B's apply did not fail"
    );
    // Well past the claim's expiry, B still refuses, and says why.
    worker_looked_after(&b, "postgres", 20);
    let e = b
        .try_sql("SELECT snowflake_nextval()")
        .expect_err("B issued IDs on a pair whose other holder's claims stopped arriving");
    assert!(refuses(&b));
    assert!(e.detail.contains("not applying"), "{}", e.raw);
    assert!(
        b.log()
            .contains("subscription \"sub_from_a\" carries _snowflake.claims to this server and is not applying"),
        "{}",
        b.log()
    );

    // The trigger goes: the path applies again, A is still live, and B still refuses, now on
    // A's fresh claim.
    b.try_sql_as("tabowner", "DROP TRIGGER boom ON t").unwrap();
    assert!(
        eventually(30, || b.log().contains("applies _snowflake.claims again")),
        "{}",
        b.log()
    );
    assert!(refuses(&b));
    let e = b.sql_err("SELECT snowflake_nextval()");
    assert!(!e.detail.contains("not applying"), "{}", e.raw);
    // A stops for good: its claim expires once the path has been proven and the expiry passed
    // (a stopped publisher breaks the path again: B needs a DBA to retire the claim then).
    let a_sysid = sysid(&a);
    a.stop("fast");
    b.sql(&format!(
        "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {a_sysid}"
    ));
    assert!(eventually(15, || !refuses(&b)), "B did not resume");
}

/// A server's identity is its system identifier: a new server whose lease database was made from
/// a schema dump of a running one (its `_snowflake` objects, the node token among them) is another
/// server, and the pair they share is a conflict (1.4.0 took the other's live claim for its own
/// past, deleted it, and both issued).
#[test]
fn a_server_made_from_a_schema_dump_of_another_is_another_server() {
    let mut a = node("copy-a", 1, 5);
    a.start();
    a.sql(TABLE);
    a.sql("SELECT snowflake_nextval(); CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    let dump = std::process::Command::new(common::bindir().join("pg_dump"))
        .args(["-s", "-h"])
        .arg(&a.dir)
        .args(["-p", &a.port.to_string(), "-U", "postgres", "postgres"])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dump = String::from_utf8(dump.stdout).unwrap();
    assert!(
        dump.contains("CREATE SEQUENCE _snowflake.node_token"),
        "{dump}"
    );

    let mut b = node("copy-b", 1, 5);
    b.start();
    b.sql("CREATE EXTENSION snowflake");
    b.sql("CREATE DATABASE app");
    let path = b.dir.join("schema.sql");
    std::fs::write(&path, &dump).unwrap();
    let out = b.psql_cmd("app").arg("-f").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    b.sql("ALTER SYSTEM SET snowflake.database = 'app'");
    b.stop("fast");
    b.start();
    b.wait_for("SELECT snowflake_nextval() > 0", "t", 20);
    let token = "SELECT last_value FROM _snowflake.node_token";
    assert_eq!(
        b.try_sql_in("app", token).unwrap(),
        a.sql(token),
        "the copy carried the token"
    );
    b.try_sql_in(
        "app",
        &format!(
            "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = true)",
            a.conninfo()
        ),
    )
    .unwrap();
    assert!(
        eventually(30, || refuses(&b)),
        "B did not see A's claim as another server's"
    );
    // B never removed A's claim: it is still there after B's next refresh.
    worker_looked_after(&b, "app", 1);
    assert_eq!(
        b.try_sql_in(
            "app",
            &format!(
                "SELECT count(*) FROM _snowflake.claims WHERE system_identifier = {}",
                sysid(&a)
            )
        )
        .unwrap(),
        "1"
    );
    assert!(refuses(&b));
}

/// A claim's liveness is this server's own observation: a peer whose clock is two minutes behind
/// (its claims carry times that look long expired here) is live as long as its claim keeps
/// changing. Fan-in, so only the subscriber can see the other (1.4.0 let it issue).
#[test]
fn a_peer_with_a_clock_far_behind_is_still_live() {
    let mut a = node("skew-a", 1, 5);
    a.fake_time(Some("-120s"));
    let mut b = node("skew-b", 1, 5);
    for c in [&mut a, &mut b] {
        c.start();
        c.sql(TABLE);
    }
    if !common::worker_sees_the_clock(&a) {
        return;
    }
    a.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    b.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
        a.conninfo()
    ));
    // A's claim arrives with a time two minutes in B's past (claim_expiry is 15 s here).
    b.wait_for(
        &format!("SELECT count(*) FROM _snowflake.claims WHERE system_identifier = {} AND last_seen < now() - interval '100 s'", sysid(&a)),
        "1",
        30,
    );
    assert!(
        eventually(30, || refuses(&b)),
        "B issued on a pair a live server holds"
    );
    // Well past the expiry, A is still live.
    worker_looked_after(&b, "postgres", 20);
    assert!(refuses(&b));
    // A stops: its claim stops changing, and (once the path is seen failing and then retired)
    // B issues again.
    let a_sysid = sysid(&a);
    a.stop("fast");
    b.sql(&format!(
        "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {a_sysid}"
    ));
    assert!(eventually(15, || !refuses(&b)), "B did not resume");
}

/// A subscription that carries the claims, made again with `copy_data = true` (PostgreSQL's
/// default): its copy of the claims table fails on the rows the table already holds (a duplicate
/// key), and until the copy is done the apply worker skips every change of the table, while it
/// runs and receives as if all were well. The other server's claim must not expire meanwhile.
#[test]
fn a_claims_copy_that_never_finishes_keeps_the_conflict() {
    let mut a = node("copy-path-a", 1, 5);
    let mut b = node("copy-path-b", 1, 5);
    for c in [&mut a, &mut b] {
        c.start();
        c.sql(TABLE);
    }
    a.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    let subscribe = |copy: bool| {
        b.sql(&format!(
            "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = {copy})",
            a.conninfo()
        ))
    };
    subscribe(false);
    assert!(eventually(30, || refuses(&b)), "no refusal within 30 s");
    b.sql("DROP SUBSCRIPTION sub_from_a");
    subscribe(true);
    // Well past the claim's expiry after the new subscription began.
    worker_looked_after(&b, "postgres", 20);
    assert_ne!(
        b.sql("SELECT srsubstate FROM pg_subscription_rel"),
        "r",
        "the copy finished: this test no longer shows what it is for"
    );
    assert!(
        refuses(&b),
        "B issued while its copy of the claims was not ready"
    );
    assert!(
        b.log()
            .contains("its copy of _snowflake.claims is not ready")
            || b.log().contains("copy errors"),
        "{}",
        b.log()
    );
}

/// A subscription that lists no tables (pg_upgrade before 17 drops its rows in
/// `pg_subscription_rel` and leaves it disabled; `connect = false` never makes them) may carry
/// the claims: it is watched, and while it does not apply no claim on this pair expires (1.5.0
/// saw only subscriptions with a row for the claims, and let the other holder's claim expire 15 s
/// after a restart, with no WARNING).
#[test]
fn a_subscription_that_lists_no_tables_is_still_watched() {
    let mut a = node("norel-a", 1, 5);
    let mut b = node("norel-b", 1, 5);
    for c in [&mut a, &mut b] {
        c.start();
        c.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
    }
    a.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    b.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
        a.conninfo()
    ));
    assert!(eventually(30, || refuses(&b)), "no refusal within 30 s");
    // As pg_upgrade from 15 or 16 leaves it: disabled, and no table listed.
    b.sql("ALTER SUBSCRIPTION sub_from_a DISABLE");
    b.sql("DELETE FROM pg_subscription_rel WHERE srsubid = (SELECT oid FROM pg_subscription WHERE subname = 'sub_from_a')");
    b.stop("fast");
    b.start();
    // Well past the claim's expiry (15 s), B still refuses, and says why.
    worker_looked_after(&b, "postgres", 20);
    assert!(
        refuses(&b),
        "B issued IDs while the path from the other holder was not applying"
    );
    assert!(
        b.log().contains("subscription \"sub_from_a\" carries _snowflake.claims to this server and is not applying"),
        "{}",
        b.log()
    );
}

/// A subscription that an ordinary role owns cannot carry the claims (its apply worker cannot
/// write `_snowflake.claims`): a role given `pg_create_subscription` and CREATE on the lease
/// database (16 and later) cannot make the start's gate wait for a publisher it chose.
#[test]
fn a_subscription_an_ordinary_role_owns_is_no_claims_path() {
    if pg_major() < 16 {
        return; // only superusers own subscriptions
    }
    let mut x = node("nonsuper-sub", 1, 5);
    x.start();
    x.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
    // A publisher that accepts the connection and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    x.sql("CREATE ROLE mallory LOGIN; GRANT pg_create_subscription TO mallory; GRANT CREATE ON DATABASE postgres TO mallory");
    x.try_sql_as(
        "mallory",
        &format!(
            "CREATE SUBSCRIPTION s_mallory CONNECTION 'host=127.0.0.1 port={port} user=postgres password=x dbname=postgres connect_timeout=600' \
             PUBLICATION p WITH (connect = false); ALTER SUBSCRIPTION s_mallory ENABLE"
        ),
    )
    .unwrap();
    x.stop("fast");
    x.start();
    // The gate has nothing to wait for: IDs again as soon as the worker has its lease.
    assert!(
        eventually(20, || x.try_sql("SELECT snowflake_nextval()").is_ok()),
        "the start's gate waited for an ordinary role's subscription:\n{}",
        x.log()
    );
    assert!(
        !x.log().contains("no ID is issued until subscriptions"),
        "{}",
        x.log()
    );
    drop(silent);
}

/// From 17 the start's question to a publisher is an ordinary connection: it needs no walsender
/// there, which its subscribers' apply workers may hold all of (15 and 16's walreceiver library
/// makes only replication connections: there a publisher needs one spare).
#[test]
fn the_gates_question_to_a_publisher_takes_no_walsender() {
    if pg_major() < 17 {
        return;
    }
    let mut x = node("ask-x", 1, 5);
    let mut y = node("ask-y", 1, 6);
    for c in [&mut x, &mut y] {
        c.start();
        c.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
    }
    y.conf("log_connections = on");
    y.stop("fast");
    y.start();
    y.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    x.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_y CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
        y.conninfo()
    ));
    x.stop("fast");
    x.start();
    let asked = |c: &Cluster| {
        c.log()
            .lines()
            .filter(|l| l.contains("application_name=snowflake lease worker"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(30, || !asked(&y).is_empty()),
        "X's lease worker never asked Y:\n{}",
        x.log()
    );
    assert!(
        eventually(30, || x.try_sql("SELECT snowflake_nextval()").is_ok()),
        "{}",
        x.log()
    );
    for line in asked(&y) {
        assert!(!line.contains("replication connection"), "{line}");
    }
}

/// A physical copy started beside its original (here a standby promoted while its primary runs)
/// keeps the original's system identifier and pair. Subscribed to the original's claims, it finds
/// versions of its own row that it did not write, proof of a copy: it refuses and says so (1.5.0
/// ignored such rows, and both issued the same IDs), until the copy's claims stop arriving.
#[test]
fn a_physical_copy_that_sees_its_original_refuses() {
    let mut a = node("phys-a", 1, 5);
    a.start();
    a.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval(); CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    let mut c = Cluster::standby_of(&a, "phys-copy");
    c.start();
    c.wait_for("SELECT pg_is_in_recovery()", "t", 30);
    c.promote();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    assert_eq!(sysid(&c), sysid(&a));
    c.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
        a.conninfo()
    ));
    assert!(
        eventually(30, || refuses(&c)),
        "the copy did not refuse within 30 s"
    );
    let e = c.sql_err("SELECT snowflake_nextval()");
    assert!(e.message.contains("physical copy"), "{}", e.raw);
    assert_eq!(
        c.sql("SELECT claim_conflict_with = system_identifier FROM snowflake_node()"),
        "t"
    );
    assert_eq!(
        c.log()
            .matches("another server with this server's system identifier")
            .count(),
        1,
        "one WARNING when the copy is first seen"
    );
    // The path goes (dropped with its slot): once no claim of the original has arrived for the
    // expiry (15 s), the copy issues again.
    c.sql("DROP SUBSCRIPTION sub_from_a");
    assert!(eventually(40, || !refuses(&c)), "the copy did not resume");
}

/// The same seen from the original, the copy's clock 6 s behind: the copy's claims carry times
/// older than the original's last write (a check that took every stamp older than that for an
/// earlier write of its own missed the copy, and both issued the same IDs), but later than the
/// original's start.
#[test]
fn a_physical_copy_whose_clock_is_behind_is_seen_by_its_original() {
    let mut a = node("phys-behind-a", 1, 5);
    a.start();
    a.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval(); CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    // The original has run for longer than the copy's clock is behind.
    thread::sleep(Duration::from_secs(8));
    let mut c = Cluster::standby_of(&a, "phys-behind-copy");
    c.fake_time(Some("-6s"));
    c.start();
    c.wait_for("SELECT pg_is_in_recovery()", "t", 30);
    c.promote();
    c.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    a.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_copy CONNECTION '{}' PUBLICATION pub WITH (copy_data = false)",
        c.conninfo()
    ));
    assert!(
        eventually(30, || refuses(&a)),
        "the original did not see its copy within 30 s"
    );
    let e = a.sql_err("SELECT snowflake_nextval()");
    assert!(e.message.contains("physical copy"), "{}", e.raw);
}

/// A server that moves to another pair leaves its claim on the old pair as a tombstone with the
/// last ID it issued there: the server that takes that pair next continues above it (1.5.0
/// replaced the claim, and the next holder, its clock behind the first one's IDs, repeated them).
#[test]
fn a_pair_moved_away_from_keeps_its_floor() {
    let mut a = node("move-a", 1, 5);
    a.conf("snowflake.max_clock_drift = '1h'");
    a.start();
    a.sql("CREATE EXTENSION snowflake; CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    // A's IDs run 20 s ahead of the clock, as a server whose clock ran ahead leaves them.
    let floor = a.sql_i64("SELECT snowflake_max_id(now() + interval '20 s')");
    a.sql(&format!("SELECT snowflake_set_floor({floor})"));
    let last_on_5 = a.sql_i64(
        "SELECT max(x) FROM (SELECT snowflake_nextval() AS x FROM generate_series(1, 1000)) s",
    );
    // A moves to worker_id 6 (the later line wins).
    a.conf("snowflake.worker_id = 6");
    a.stop("fast");
    a.start();
    a.wait_for("SELECT snowflake_nextval() > 0", "t", 30);
    // B takes (1, 5), with the claims copied from A first.
    let mut b = node("move-b", 1, 5);
    b.conf("snowflake.max_clock_drift = '1h'");
    b.start();
    b.sql("CREATE EXTENSION snowflake");
    b.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = true)",
        a.conninfo()
    ));
    b.wait_for(
        &format!(
            "SELECT count(*) > 0 FROM _snowflake.claims WHERE system_identifier = {} AND worker_id = 6",
            sysid(&a)
        ),
        "t",
        30,
    );
    let first = b.sql_i64("SELECT snowflake_nextval()");
    assert!(
        first > last_on_5,
        "B's first ID {first} on (1, 5) is not above A's last there, {last_on_5}"
    );
    assert_eq!(
        b.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
        "t"
    );
}

/// A server that comes back after another took its pair issues nothing before its claims paths
/// have brought the claims up to date: its own table holds only what arrived before it stopped
/// (1.5.0 read those, issued at once, and refused only at its next refresh, 5 s later: about
/// 6,000 IDs equal to the new holder's). Up to date means as far as the publisher's end of WAL,
/// asked of the publisher: 1.6.0 took the first keepalive for it, which on 15 reports where the
/// slot starts, and a path that lagged behind the publisher's bulk writes let IDs through after
/// 15 s. While the publisher cannot be reached, nothing is issued at all.
#[test]
fn a_server_back_after_its_pair_was_taken_issues_nothing_before_fresh_claims() {
    let mut x = node("back-x", 1, 5);
    let mut y = node("back-y", 1, 6);
    for c in [&mut x, &mut y] {
        c.start();
        c.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
    }
    y.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    x.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_y CONNECTION '{}' PUBLICATION pub WITH (copy_data = true)",
        y.conninfo()
    ));
    x.wait_for(
        &format!(
            "SELECT count(*) FROM _snowflake.claims WHERE system_identifier = {}",
            sysid(&y)
        ),
        "1",
        30,
    );
    // X stops; Y takes (1, 5) meanwhile (its slot keeps the change for X).
    x.stop("fast");
    y.conf("snowflake.worker_id = 5");
    y.stop("fast");
    y.start();
    y.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)");
    // X comes back while Y cannot be reached: it waits for the path (and says so) instead of
    // issuing from the claims it had, however long that lasts.
    y.stop("fast");
    x.start();
    let not_ready = |c: &Cluster| match c.try_sql("SELECT snowflake_nextval()") {
        Err(e) => {
            assert_eq!(e.sqlstate, "55000", "{}", e.raw);
            assert!(e.detail.contains("publisher's end of WAL"), "{}", e.raw);
            assert!(e.hint.contains("ALTER SUBSCRIPTION"), "{}", e.raw);
        }
        Ok(id) => panic!("X issued {id} on (1, 5) before its claims were up to date"),
    };
    not_ready(&x);
    assert!(
        eventually(60, || x.log().contains(
            "no ID is issued until subscriptions sub_from_y have brought"
        )),
        "{}",
        x.log()
    );
    not_ready(&x);
    // Y is back: once its claim arrives, X refuses on it.
    y.start();
    assert!(eventually(40, || refuses(&x)), "X did not see Y's claim");

    // Again, with Y reachable but its claim behind a backlog of writes in its database (the
    // walsender decodes them before it reaches the claim): X waits while the path moves, past
    // the 15 s that 1.6.0 allowed, and issues nothing before the claim.
    y.conf("snowflake.worker_id = 6");
    y.stop("fast");
    y.start();
    y.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)");
    x.wait_for(
        &format!(
            "SELECT worker_id FROM _snowflake.claims WHERE system_identifier = {}",
            sysid(&y)
        ),
        "6",
        40,
    );
    x.stop("fast");
    // About 180 MB of WAL (rows below the size that TOAST compresses).
    y.sql("CREATE TABLE bulk AS SELECT g, pg_catalog.repeat('x', 1800) AS pad FROM generate_series(1, 100000) g");
    y.conf("snowflake.worker_id = 5");
    y.stop("fast");
    y.start();
    y.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)");
    x.start();
    let mut issued = 0;
    assert!(
        eventually(120, || {
            match x.try_sql("SELECT snowflake_nextval()") {
                Ok(_) => issued += 1,
                Err(e) if e.detail.contains("publisher's end of WAL") => {}
                Err(_) => return refuses(&x),
            }
            false
        }),
        "X never saw Y's claim:\n{}",
        x.log()
    );
    assert_eq!(issued, 0, "X issued on (1, 5) before Y's claim arrived");
}

/// A new version of a server's own claim that carries its own stamp is no physical copy: a DBA
/// who runs the HINT's `retired = true` on the running server itself rewrites the row, and so
/// does a table rewrite (a version-only check took either for a copy and refused forever).
#[test]
fn a_rewrite_of_a_servers_own_claim_is_no_copy() {
    let mut x = node("own-rewrite", 1, 5);
    x.start();
    x.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
    // Between refreshes, several times: each rewrite is followed by a refresh that reads it.
    for _ in 0..3 {
        x.sql(&format!(
            "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {}",
            sysid(&x)
        ));
        x.sql("SELECT count(snowflake_nextval()) FROM generate_series(1, 1000)");
        worker_looked_after(&x, "postgres", 0);
    }
    assert_eq!(
        x.sql("SELECT claim_conflict_with IS NULL, snowflake_nextval() > 0 FROM snowflake_node()"),
        "t|t"
    );
    assert!(
        !x.log().contains("this server's system identifier"),
        "{}",
        x.log()
    );
}

/// Claims relayed A → B → C (subscriptions with `origin = any`, the only kind before 16): when
/// B stops receiving A's claims, C sees A's claim stop changing while its own path from B applies.
/// A still runs on C's pair: C must not let its claim expire (1.5.0 did after the expiry, and
/// issued A's IDs), and says why.
#[test]
fn a_claim_relayed_through_another_server_never_expires_by_silence() {
    let mut a = node("relay-a", 1, 5);
    let mut b = node("relay-b", 1, 6);
    let mut c = node("relay-c", 1, 5);
    for s in [&mut a, &mut b, &mut c] {
        s.start();
        s.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
        s.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    }
    let any = if pg_major() >= 16 {
        ", origin = any"
    } else {
        ""
    };
    for (to, from, name) in [(&b, &a, "sub_from_a"), (&c, &b, "sub_from_b")] {
        to.sql(&format!(
            "CREATE SUBSCRIPTION {name} CONNECTION '{}' PUBLICATION pub WITH (copy_data = false{any})",
            from.conninfo()
        ));
    }
    assert!(eventually(40, || refuses(&c)), "A's claim did not reach C");
    assert_eq!(
        c.sql("SELECT claim_conflict_with::text FROM snowflake_node()"),
        sysid(&a)
    );
    // The LOG line says only what applies to the running major (15 has no origin option).
    let relays = if pg_major() >= 16 {
        "subscription \"sub_from_b\" carries _snowflake.claims with origin = any, so no claim on datacenter_id 1 and worker_id 5 expires here while it exists; subscribe directly"
    } else {
        "subscription \"sub_from_b\" carries _snowflake.claims and may relay other servers' claims, so no claim on datacenter_id 1 and worker_id 5 expires here while it exists; retire a server that leaves"
    };
    assert!(c.log().contains(relays), "{}", c.log());
    assert!(
        !c.log().contains(if pg_major() >= 16 {
            "retire a server that leaves"
        } else {
            "origin = none"
        }),
        "the LOG line speaks of another major: {}",
        c.log()
    );
    // B's path from A stops; A runs on. Well past the expiry (15 s here), C still refuses.
    b.sql("ALTER SUBSCRIPTION sub_from_a DISABLE");
    worker_looked_after(&c, "postgres", 20);
    a.sql("SELECT snowflake_nextval()");
    let e = c
        .try_sql("SELECT snowflake_nextval()")
        .expect_err("C issued on the pair of a server that runs, whose claim came relayed");
    assert_eq!(e.sqlstate, "55000", "{}", e.raw);
    assert!(e.detail.contains("relays claims"), "{}", e.raw);
    // Retiring the claim still works.
    c.sql(&format!(
        "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {}",
        sysid(&a)
    ));
    assert!(eventually(15, || !refuses(&c)), "C did not resume");
}

/// A peer that retires a stopped server's claim (as the conflict HINT says) sends back a version
/// of that server's own row with a stamp of its earlier life: when the server is back and has
/// written its claim again, that version arriving is no physical copy (1.6.0's first try took
/// it for one and refused for a minute, and again at every hiccup of a claims path).
#[test]
fn a_claim_retired_by_a_peer_while_its_server_was_down_is_no_copy() {
    if pg_major() < 16 {
        return origin_none_is_refused_before_16();
    }
    let mut x = node("retired-x", 1, 5);
    let mut y = node("retired-y", 1, 6);
    for c in [&mut x, &mut y] {
        c.start();
        c.sql("CREATE EXTENSION snowflake; SELECT snowflake_nextval()");
        c.sql("CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    }
    subscribe(&x, &y, "sub_from_y");
    subscribe(&y, &x, "sub_from_x");
    let x_sysid = sysid(&x);
    y.wait_for(
        &format!("SELECT count(*) FROM _snowflake.claims WHERE system_identifier = {x_sysid}"),
        "1",
        30,
    );
    // The retired version reaches X only after X has written its claim again.
    x.sql("ALTER SUBSCRIPTION sub_from_y DISABLE");
    x.stop("fast");
    y.sql(&format!(
        "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {x_sysid}"
    ));
    x.start();
    let start = x.sql("SELECT now()");
    x.wait_for(
        &format!("SELECT count(*) FROM _snowflake.claims WHERE system_identifier = {x_sysid} AND last_seen > '{start}'"),
        "1",
        20,
    );
    x.sql("ALTER SUBSCRIPTION sub_from_y ENABLE");
    // Two refreshes later, X issues, and said nothing of a copy.
    worker_looked_after(&x, "postgres", 6);
    assert!(!refuses(&x), "{}", x.log());
    assert!(
        !x.log()
            .contains("another server with this server's system identifier"),
        "{}",
        x.log()
    );
}

/// The state of each of `_snowflake`'s sequences in B's subscriptions (19 lists sequences there):
/// `name:state`, `-` for none, in name order.
fn snowflake_sequences_seen_by_subscription(b: &Cluster) -> String {
    b.sql(
        "SELECT string_agg(c.relname || ':' || coalesce(r.srsubstate::text, '-'), ',' ORDER BY c.relname)
           FROM pg_class c
           LEFT JOIN pg_subscription_rel r ON r.srrelid = c.oid
          WHERE c.relnamespace = '_snowflake'::regnamespace AND c.relkind = 'S'",
    )
}

/// PostgreSQL 19 copies every sequence of a database `FOR ALL SEQUENCES` publishes onto its
/// subscribers (at CREATE SUBSCRIPTION and at each REFRESH SEQUENCES), lower or higher. The mark
/// and its epoch are never copied (each server gives them a MAXVALUE of its own, and PostgreSQL
/// copies only between sequences of one definition): a lower mark copied in would be what a crash
/// restarts from, a higher mark under an earlier epoch a jump and a refusal the server did not
/// earn. The user's own sequence is copied, so the synchronisation did run. The subscription
/// that copies the sequences carries the claims too, and the fleet check still tells the two
/// servers apart.
#[test]
fn sequences_copied_from_another_server_never_reach_the_mark() {
    assert!(
        pg_major() >= 19,
        "sequences are replicated from PostgreSQL 19 on: the Makefile's CANNOT_{} leaves this test out",
        pg_major()
    );
    // A: an epoch a day before B's, and (later) a clock an hour ahead.
    let mut a = Cluster::new(
        "seq-a",
        &format!("{LOGICAL}\nsnowflake.datacenter_id = 1\nsnowflake.worker_id = 1\nsnowflake.epoch = '2010-11-03 01:42:54.657+00'"),
    );
    let mut b = node("seq-b", 1, 2);
    a.fake_time(None);
    b.fake_time(None);
    a.start();
    b.start();
    for c in [&a, &b] {
        c.sql("CREATE EXTENSION snowflake; CREATE SEQUENCE app_seq");
    }
    a.sql("SELECT setval('app_seq', 4242)");
    // A has issued nothing yet: its mark is 0, below anything B wrote.
    b.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)");
    b.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 20000) g");
    let b_mark = b.sql_i64("SELECT last_value FROM _snowflake.lease_ms");
    let b_epoch = b.sql_i64("SELECT last_value FROM _snowflake.epoch_ms");
    assert!(
        b_mark > 0 && a.sql_i64("SELECT last_value FROM _snowflake.lease_ms") == 0,
        "B's mark must be above A's"
    );
    // B's mark sequences made like A's (as a restore of A's dump, or 1.5.0's, would make them),
    // while an ordinary role holds them open: the worker, restarted, issues at once and leaves
    // them for its next start, which makes them B's own.
    let max_of = |c: &Cluster| {
        c.sql("SELECT string_agg(seqmax::text, ',' ORDER BY seqrelid::regclass::text) FROM pg_sequence WHERE seqrelid IN ('_snowflake.lease_ms'::regclass, '_snowflake.epoch_ms'::regclass)")
    };
    let a_maxima = max_of(&a);
    let (a_epoch_max, a_lease_max) = a_maxima.split_once(',').unwrap();
    b.sql(&format!("ALTER SEQUENCE _snowflake.epoch_ms MAXVALUE {a_epoch_max}; ALTER SEQUENCE _snowflake.lease_ms MAXVALUE {a_lease_max}; CREATE ROLE mallory LOGIN"));
    assert_eq!(max_of(&b), a_maxima);
    let mut mallory = b
        .psql_cmd_as("mallory", "postgres")
        .arg("-c")
        .arg("BEGIN; SELECT count(*) FROM pg_sequences; SELECT pg_sleep(25); COMMIT")
        .spawn()
        .unwrap();
    b.wait_for(
        "SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'mallory' AND l.relation = '_snowflake.lease_ms'::regclass AND l.granted",
        "t",
        20,
    );
    let restart_worker = |b: &Cluster, secs: u64| {
        let since = b.sql("SELECT now()");
        b.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'snowflake lease'");
        b.wait_for(
            &format!("SELECT EXISTS (SELECT FROM _snowflake.claims WHERE last_seen > '{since}')"),
            "t",
            secs,
        );
    };
    // Back within 10 s, while the role holds them for 25.
    restart_worker(&b, 10);
    assert!(
        b.log().contains("could not give _snowflake."),
        "the worker did not say why it left the MAXVALUE:\n{}",
        b.log()
    );
    assert!(
        !b.log().contains("this server's MAXVALUE, so that"),
        "the worker said it changed what it left"
    );
    b.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 10) g");
    assert_eq!(max_of(&b), a_maxima);
    assert!(mallory.wait().unwrap().success());
    restart_worker(&b, 30);
    assert_ne!(
        max_of(&b),
        a_maxima,
        "the worker did not make the MAXVALUEs B's own"
    );
    assert!(b
        .log()
        .contains("gave _snowflake.lease_ms and _snowflake.epoch_ms this server's MAXVALUE"));

    a.sql("CREATE PUBLICATION claims FOR TABLE _snowflake.claims; CREATE PUBLICATION seqs FOR ALL SEQUENCES");
    // The user's sequence held for 12 s: 19's sequence synchronisation worker waits for it, listed
    // in pg_stat_subscription beside the apply worker, through two of the fleet check's looks.
    let mut holder = b
        .psql_cmd("postgres")
        .arg("-c")
        .arg("BEGIN; ALTER SEQUENCE app_seq INCREMENT 1; SELECT pg_sleep(12); COMMIT")
        .spawn()
        .unwrap();
    b.wait_for(
        "SELECT count(*) > 0 FROM pg_locks WHERE relation = 'app_seq'::regclass AND granted",
        "t",
        20,
    );
    b.sql(&format!(
        "CREATE SUBSCRIPTION s CONNECTION '{}' PUBLICATION claims, seqs",
        a.conninfo()
    ));
    b.wait_for(
        "SELECT count(*) FROM pg_stat_subscription WHERE worker_type = 'sequence synchronization'",
        "1",
        20,
    );
    assert!(holder.wait().unwrap().success());
    b.wait_for("SELECT last_value FROM app_seq", "4242", 60);
    // Copied: the user's sequence. Not copied: the mark and its epoch (never ready).
    let states = snowflake_sequences_seen_by_subscription(&b);
    assert_eq!(
        states, "epoch_ms:i,lease_ms:i,node_token:i",
        "the subscription copied the mark"
    );
    assert!(b.sql_i64("SELECT last_value FROM _snowflake.lease_ms") >= b_mark);
    assert_eq!(
        b.sql_i64("SELECT last_value FROM _snowflake.epoch_ms"),
        b_epoch
    );

    // B crashes and comes back with its clock 5 s behind: nothing at or below its maximum.
    let b_max = b.sql_i64("SELECT max(id) FROM t");
    b.stop("immediate");
    b.set_fake_offset("-5s");
    b.start();
    assert!(b.clock_offset_s() < -4.0, "B's clock is not behind");
    assert!(
        common::worker_sees_the_clock(&b),
        "19: the worker must see B's clock"
    );
    b.sql("INSERT INTO t (n) SELECT g FROM generate_series(20001, 22000) g");
    assert_eq!(
        b.sql(&format!(
            "SELECT count(*) FROM t WHERE n > 20000 AND id <= {b_max}"
        )),
        "0"
    );
    b.set_fake_offset("+0s");
    // 19's sequence synchronisation worker retries the mark's sequences every 5 s and fails: the
    // subscription that carries the claims still applies, as the fleet check sees it (its
    // refresh reads the paths every 5 s). (Until A's clock jumps below: its walsender then takes
    // the apply worker's silence for a timeout, which is an apply error.)
    thread::sleep(Duration::from_secs(12));
    assert!(
        b.log().matches("sequence synchronization failed").count() >= 2,
        "the sequence synchronisation did not retry:\n{}",
        b.log()
    );
    assert!(
        !b.log().contains("is not applying"),
        "the subscription was taken for broken:\n{}",
        b.log()
    );

    // A issues under its earlier epoch with its clock an hour ahead, and B takes A's sequences
    // again: no jump and no refusal on B, whose mark and epoch stay its own.
    a.set_fake_offset("+3600s");
    a.sql("SELECT snowflake_nextval() FROM generate_series(1, 1000)");
    a.sql("SELECT setval('app_seq', 9999)");
    let b_mark = b.sql_i64("SELECT last_value FROM _snowflake.lease_ms");
    b.sql("ALTER SUBSCRIPTION s REFRESH SEQUENCES");
    b.wait_for("SELECT last_value FROM app_seq", "9999", 60);
    let states = snowflake_sequences_seen_by_subscription(&b);
    assert_eq!(
        states, "epoch_ms:i,lease_ms:i,node_token:i",
        "the subscription copied the mark"
    );
    assert_eq!(
        b.sql_i64("SELECT last_value FROM _snowflake.epoch_ms"),
        b_epoch
    );
    let lead_ms = b.sql_i64(
        "SELECT (extract(epoch FROM (snowflake_decode(snowflake_nextval())).created_at - clock_timestamp()) * 1000)::bigint",
    );
    assert!(
        lead_ms < 5_000,
        "B's IDs jumped {lead_ms} ms ahead of its clock (its mark was {b_mark})"
    );

    // The fleet check through the same subscription: B restarted on A's pair refuses.
    assert_eq!(
        b.sql("SELECT claim_conflict_with IS NULL FROM snowflake_node()"),
        "t"
    );
    b.stop("fast");
    b.conf("snowflake.worker_id = 1");
    b.start();
    assert!(
        eventually(30, || b.try_sql("SELECT snowflake_nextval()").is_err_and(
            |e| e.sqlstate == "55000"
                && b.sql("SELECT claim_conflict_with::text FROM snowflake_node()") == sysid(&a)
        )),
        "B on A's pair does not refuse: {:?}",
        b.try_sql("SELECT snowflake_nextval()")
    );
}

/// The URI of `c`'s database `app` (the application's, apart from `snowflake.database`).
fn app_uri(c: &Cluster) -> String {
    c.uri()
        .replacen("postgresql:///postgres?", "postgresql:///app?", 1)
}

/// The count of `app.t`'s rows by the worker ID that inserted them, `w:n,...`.
fn app_rows_by_origin(c: &Cluster) -> String {
    c.try_sql_in(
        "app",
        "SELECT coalesce(string_agg(origin || ':' || n, ',' ORDER BY origin), '') \
           FROM (SELECT origin, count(*) AS n FROM t GROUP BY origin) x",
    )
    .unwrap()
}

/// On PostgreSQL 19 a subscription `FOR ALL SEQUENCES` lists sequences that never become ready:
/// in `snowflake.database` the mark's three (each server gives them a definition of its own),
/// and in the application's database a sequence each node defines apart (its own START). The
/// new node has both when it joins: `mesh-add` waits only for the copies of the subscriptions it
/// made, so it ends, and the mesh is built both ways (1.6.0's recipe waited for every
/// subscription of the database, forever, with the new node subscribed to the first and no
/// node to it).
#[test]
fn mesh_add_ends_beside_subscriptions_for_all_sequences() {
    assert!(
        pg_major() >= 19,
        "sequences are replicated from PostgreSQL 19 on: the Makefile's CANNOT_{} leaves this test out",
        pg_major()
    );
    let mut n1 = node("seqmesh-1", 1, 1);
    let mut n2 = node("seqmesh-2", 1, 2);
    let mut n3 = node("seqmesh-3", 2, 1);
    for (start, c) in [&mut n1, &mut n2, &mut n3].into_iter().enumerate() {
        c.start();
        c.sql("CREATE DATABASE app");
        c.try_sql_in(
            "app",
            &format!(
                "{TABLE}; CREATE SEQUENCE app_seq INCREMENT 3 START {}",
                start + 1
            ),
        )
        .unwrap();
    }
    let tables = ("TABLES", "public.t".to_string());
    run_recipes(
        &["mesh-functions", "mesh"],
        &[
            ("NODES", format!("{} {}", app_uri(&n1), app_uri(&n2))),
            tables.clone(),
        ],
    );
    // n1 publishes every sequence of both databases, and n3 subscribes to them before it joins.
    for db in ["postgres", "app"] {
        n1.try_sql_in(db, "CREATE PUBLICATION seqs FOR ALL SEQUENCES")
            .unwrap();
        n3.try_sql_in(
            db,
            &format!(
                "CREATE SUBSCRIPTION seqs_{db} CONNECTION '{}' PUBLICATION seqs",
                n1.conninfo()
                    .replace("dbname=postgres", &format!("dbname={db}"))
            ),
        )
        .unwrap();
    }
    // Both have failed to copy what they list, and keep it not ready.
    let seq_errors = |db: &str| {
        n3.try_sql_in(
            db,
            &format!("SELECT sync_seq_error_count > 0 FROM pg_stat_subscription_stats WHERE subname = 'seqs_{db}'"),
        )
    };
    assert!(
        eventually(60, || seq_errors("postgres").as_deref() == Ok("t")
            && seq_errors("app").as_deref() == Ok("t")),
        "the sequence synchronisation did not fail: {:?} {:?}",
        seq_errors("postgres"),
        seq_errors("app")
    );
    assert_eq!(
        snowflake_sequences_seen_by_subscription(&n3),
        "epoch_ms:i,lease_ms:i,node_token:i"
    );
    assert_eq!(
        n3.try_sql_in(
            "app",
            "SELECT string_agg(srrelid::regclass || ':' || srsubstate::text, ',') FROM pg_subscription_rel"
        )
        .unwrap(),
        "app_seq:i"
    );

    run_recipes_within(
        &["mesh-functions", "mesh-add"],
        &[
            ("NEW", app_uri(&n3)),
            ("NODES", format!("{} {}", app_uri(&n1), app_uri(&n2))),
            tables,
        ],
        120,
    );
    // Both ways: every node has every node's claim, and the rows each inserts reach the others.
    for c in [&n1, &n2, &n3] {
        c.wait_for(CLAIMS_SEEN, "1/1,1/2,2/1", 30);
    }
    for c in [&n1, &n2, &n3] {
        c.try_sql_in(
            "app",
            "INSERT INTO t (payload) SELECT 'x' FROM generate_series(1, 10)",
        )
        .unwrap();
    }
    let all = "1:20,2:10";
    assert!(
        eventually(60, || [&n1, &n2, &n3]
            .iter()
            .all(|c| app_rows_by_origin(c) == all)),
        "the rows did not reach every node: {:?}",
        [&n1, &n2, &n3].map(app_rows_by_origin)
    );
    // The sequences' subscriptions are as they were: not ready, and no claims path broken.
    assert_eq!(
        snowflake_sequences_seen_by_subscription(&n3),
        "epoch_ms:i,lease_ms:i,node_token:i"
    );
    for c in [&n1, &n2, &n3] {
        assert!(
            !c.log().contains("is not applying"),
            "a claims path was taken for broken:\n{}",
            c.log()
        );
        assert_no_conflicts(c);
    }
}

/// Issue 59, the hand-over of a lost writer's pair: A (1/5) issues; its claims path to H stalls
/// (its walsender stopped: a network hiccup, nothing in H's log); on A a DBA raises the floor
/// 20 s ahead and A issues 3,000 IDs, all in one renewal H never sees; A is lost. On H the DBA
/// does what multi-writer.md says for a server that is gone: retires its claim, disables the
/// path, and moves H onto 1/5. H issues above every ID A issued (1.7.0 started from its copy of
/// A's claim plus 1 s, 17.5 s below), at the price the docs give: up to `max_clock_drift` ahead.
#[test]
fn a_lost_writers_pair_handed_over_continues_above_every_id_it_issued() {
    let drift = "snowflake.max_clock_drift = '1min'";
    let mut a = node("lost-a", 1, 5);
    a.conf(drift);
    a.start();
    a.sql("CREATE EXTENSION snowflake; CREATE PUBLICATION pub FOR TABLE _snowflake.claims");
    let mut h = node("lost-h", 1, 6);
    h.conf(drift);
    h.start();
    h.sql("CREATE EXTENSION snowflake");
    h.sql(&format!(
        "CREATE SUBSCRIPTION sub_from_a CONNECTION '{}' PUBLICATION pub WITH (copy_data = true)",
        a.conninfo()
    ));
    let a_sysid = sysid(&a);
    let ids = |c: &Cluster, n: u32| -> Vec<i64> {
        c.sql(&format!(
            "SELECT snowflake_nextval() FROM generate_series(1, {n})"
        ))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
    };
    // H has A's claim with a lease of A's.
    let before = ids(&a, 1000);
    h.wait_for(
        &format!(
            "SELECT lease_id >= {} FROM _snowflake.claims WHERE system_identifier = {a_sysid}",
            before[0]
        ),
        "t",
        30,
    );
    // The path stalls.
    let kill = a.walsender("sub_from_a");
    kill("-STOP");
    let seen_by_h = h.sql_i64(&format!(
        "SELECT lease_id FROM _snowflake.claims WHERE system_identifier = {a_sysid}"
    ));
    // The raise, and one renewal's worth of IDs under it.
    a.sql("SELECT snowflake_set_floor(snowflake_max_id(now() + interval '20 s'))");
    let mut issued = before;
    issued.extend(ids(&a, 3000));
    let a_last = *issued.iter().max().unwrap();
    // A is lost with everything H had not received: its walsender dies unheard, then A.
    kill("-KILL");
    a.stop("immediate");
    assert_eq!(
        h.sql_i64(&format!(
            "SELECT lease_id FROM _snowflake.claims WHERE system_identifier = {a_sysid}"
        )),
        seen_by_h,
        "H saw A's claim move after the stall"
    );
    assert!(
        seen_by_h < a_last,
        "the raise was seen by H, nothing to test"
    );
    // The docs' steps for a server that is gone, then H moves onto A's pair.
    h.sql(&format!(
        "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {a_sysid}"
    ));
    h.sql("ALTER SUBSCRIPTION sub_from_a DISABLE");
    h.conf("snowflake.worker_id = 5");
    h.stop("fast");
    h.start();
    assert!(eventually(30, || h
        .try_sql("SELECT snowflake_nextval()")
        .is_ok()));
    let taken = ids(&h, 3000);
    let first = *taken.iter().min().unwrap();
    let issued: std::collections::HashSet<i64> = issued.into_iter().collect();
    let equal = taken.iter().filter(|id| issued.contains(id)).count();
    let ms = |id: i64| id >> 22;
    eprintln!(
        "A's last ID {a_last}, H's copy of A's claim {seen_by_h}, H's first ID on A's pair {first} ({} ms above A's last); equal: {equal}",
        ms(first) - ms(a_last)
    );
    assert_eq!(equal, 0, "{equal} of H's IDs were A's");
    assert!(
        first > a_last,
        "H's first ID {first} on A's pair is {} ms below A's last, {a_last}",
        ms(a_last) - ms(first)
    );
    // The price: no further ahead of H's clock than its max_clock_drift.
    assert_eq!(
        h.sql(&format!(
            "SELECT to_timestamp((({first} >> 22) + 1288834974657) / 1000.0) <= now() + interval '1 min'"
        )),
        "t"
    );
}
