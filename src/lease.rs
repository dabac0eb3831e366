//! The lease worker: persists the generator's high-water mark through WAL, which keeps
//! [the lease rule](crate::core::lease) (a lease is durable before any ID under it is issued).
//!
//! The mark is a plain PostgreSQL sequence, `_snowflake.lease_ms` in the database named by
//! `snowflake.database`, holding Unix milliseconds, beside `_snowflake.epoch_ms`, the epoch it was
//! written under. `setval` is WAL-logged and its transaction's commit flushes that WAL, so the
//! mark survives crashes and reaches streaming standbys (and a synchronous standby before the
//! commit returns). The worker
//!
//! 1. starts when the server accepts writes (after crash recovery, or when a standby is promoted),
//! 2. refuses to use a `_snowflake` schema or object that no superuser owns,
//! 3. reads the persisted mark and raises the generator's floor above it,
//! 4. keeps a lease ahead of issued time while IDs are being issued: writes `setval`, commits
//!    (flushed), and only then lets backends issue IDs up to it.
//!
//! Backends never wait for it on the common path: they compare against the lease in shared
//! memory, and wake the worker only when a burst or a pause has used the lease up.
//!
//! **Trust.** The worker runs as the bootstrap superuser in a database that an ordinary role may
//! own. Nothing that role controls may change what it does: its session pins every setting that
//! the database's or a role's defaults could use against it ([`crate::session`]), every statement
//! names its functions and operators with their schema, and it uses only objects a superuser owns.

use crate::config;
use crate::core::citus::{check_group, pair_of_group, GroupBeyond, GroupCheck};
use crate::core::layout::Node;
use crate::core::lease::OutsideMark;
use crate::core::time::{Clock, SystemClock};
use crate::core::worker::{AtStart, GateEnd, MarkBelowClaim, Settings, Todo, Worker};
use crate::errors;
use crate::generator::{DatabaseTrust, ForeignObject, PairState, GENERATOR};
use crate::session::{connect, forget_database_settings, handle_signals, nap, reload_if_asked};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

pub const SCHEMA: &str = "_snowflake";

/// How often the worker looks again at a `_snowflake` object it refused.
pub const FOREIGN_RECHECK: Duration = Duration::from_secs(2);

pub fn register() {
    BackgroundWorkerBuilder::new("snowflake lease")
        .set_type("snowflake lease")
        .set_library("snowflake")
        .set_function("snowflake_lease_worker_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

/// Every relation of `_snowflake`, and the schema itself, whose owner is not a superuser. The
/// schema and everything the worker uses are created by the worker, as superuser: someone else's
/// could be lowered, dropped or changed under it.
const FOREIGN_SQL: &str = "
    SELECT o.kind, pg_catalog.encode(pg_catalog.convert_to(o.name, 'UTF8'), 'escape'),
           pg_catalog.encode(pg_catalog.convert_to(r.rolname::pg_catalog.text, 'UTF8'), 'escape')
      FROM (SELECT 'schema'::pg_catalog.text AS kind, n.nspname::pg_catalog.text AS name,
                   n.nspowner AS owner
              FROM pg_catalog.pg_namespace n
             WHERE n.nspname OPERATOR(pg_catalog.=) '_snowflake'
            UNION ALL
            SELECT c.relkind::pg_catalog.text,
                   pg_catalog.concat(n.nspname, '.', c.relname), c.relowner
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
             WHERE n.nspname OPERATOR(pg_catalog.=) '_snowflake') o
      JOIN pg_catalog.pg_authid r ON r.oid OPERATOR(pg_catalog.=) o.owner
     WHERE NOT r.rolsuper
     ORDER BY 1 DESC, 2";

/// The first `_snowflake` object no superuser owns, as ("schema _snowflake", owner). Names come as
/// ASCII (other bytes escaped, `\ooo`) whatever the database's encoding: a Rust string must be
/// UTF-8, and a LATIN1 name would otherwise stop the worker.
fn foreign_object() -> Option<(String, String)> {
    Spi::connect(|client| {
        client
            .select(FOREIGN_SQL, Some(1), &[])
            .expect("look for objects that no superuser owns")
            .next()
            .map(|row| {
                let text = |i| row.get::<String>(i).ok().flatten().unwrap_or_default();
                let kind = match text(1).as_str() {
                    "schema" => "schema",
                    "S" => "sequence",
                    "r" => "table",
                    "i" => "index",
                    "v" => "view",
                    _ => "relation",
                };
                (format!("{kind} {}", text(2)), text(3))
            })
    })
}

/// Waits, refusing ID generation, while `_snowflake` holds an object no superuser owns.
/// Returns whether it waited.
fn wait_while_foreign_objects() -> bool {
    let mut warned = false;
    loop {
        let found = BackgroundWorker::transaction(foreign_object);
        let mut g = GENERATOR.exclusive();
        match found {
            None => {
                if g.foreign.get().is_some() {
                    g.foreign = ForeignObject::NONE;
                    g.state.set_refused(false);
                    drop(g);
                    log!("snowflake: the objects of schema {SCHEMA} are owned by superusers again; the lease worker continues");
                }
                return warned;
            }
            Some((what, owner)) => {
                g.foreign = ForeignObject::new(&what, &owner);
                g.state.set_refused(true);
                drop(g);
                if !warned {
                    warning!(
                        "snowflake lease worker refuses {what} in database \"{}\": it is owned by role \"{owner}\", not by a superuser; snowflake_nextval() refuses until it is",
                        config::database()
                    );
                    warned = true;
                }
            }
        }
        nap(FOREIGN_RECHECK);
    }
}

/// Who owns the database the worker is connected to (as ASCII, other bytes escaped, as in
/// `FOREIGN_SQL`), whether that role is a superuser, and whether a lease was written there: a sequence `_snowflake.lease_ms` that a superuser owns and that holds a
/// mark. A schema alone is no lease: its owner can make and drop one, and the worker would then
/// make its own there. Shared catalogs first; `to_regclass` and the sequence last.
const DATABASE_OWNER_SQL: &str = "
    SELECT pg_catalog.encode(pg_catalog.convert_to(r.rolname::pg_catalog.text, 'UTF8'), 'escape'),
           r.rolsuper,
           COALESCE((SELECT o.rolsuper FROM pg_catalog.pg_class c
                       JOIN pg_catalog.pg_authid o ON o.oid OPERATOR(pg_catalog.=) c.relowner
                      WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('_snowflake.lease_ms')
                        AND c.relkind OPERATOR(pg_catalog.=) 'S'), false)
      FROM pg_catalog.pg_database d
      JOIN pg_catalog.pg_authid r ON r.oid OPERATOR(pg_catalog.=) d.datdba
     WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()";

/// Whether the superuser's `_snowflake.lease_ms` holds a mark (checked only once the query above
/// found it: reading someone else's relation of that name would run nothing, but could wait).
const LEASE_WRITTEN_SQL: &str =
    "SELECT last_value OPERATOR(pg_catalog.>) 0 FROM _snowflake.lease_ms";

/// What the worker makes of the owner of `snowflake.database`, and that owner's name.
///
/// The owner of a database may lock, vacuum, reindex, rename and drop what lives in it, its
/// catalogs included (a `VACUUM FULL` of a catalog the worker reads, queued behind a transaction
/// the owner keeps open, stops the worker as long as she likes), and every ID of the server waits
/// for the worker. No list of those levers is ever complete, so the boundary is the database
/// itself: the worker keeps its lease only in a database a superuser owns. A lease that an
/// earlier release put into a database another role owns (their docs said so) is still used,
/// with a WARNING at every start, so that an upgrade does not stop IDs without warning.
fn database_trust() -> (DatabaseTrust, String) {
    let (owner, superuser, has_lease) = BackgroundWorker::transaction(read_trust);
    let trust = match (superuser, has_lease) {
        (true, _) => DatabaseTrust::Superuser,
        (false, true) => DatabaseTrust::Tolerated,
        (false, false) => DatabaseTrust::Refused,
    };
    (trust, owner)
}

/// `DATABASE_OWNER_SQL` and `LEASE_WRITTEN_SQL`, in the caller's transaction: (owner, whether a
/// superuser, whether a superuser's lease was written there).
fn read_trust() -> (String, bool, bool) {
    let (owner, superuser, ours) = Spi::connect(|client| {
        let (owner, superuser, ours) = client
            .select(DATABASE_OWNER_SQL, Some(1), &[])
            .expect("read the owner of the lease database")
            .first()
            .get_three::<String, bool, bool>()
            .expect("read the owner of the lease database");
        (
            owner.unwrap_or_default(),
            superuser.unwrap_or(false),
            ours.unwrap_or(false),
        )
    });
    let written = !superuser
        && ours
        && Spi::get_one::<bool>(LEASE_WRITTEN_SQL)
            .expect("read the lease")
            .unwrap_or(false);
    (owner, superuser, written)
}

/// Records the owner of `snowflake.database` for `snowflake_node()`, and says once per change
/// when a role other than a superuser owns it. Returns what the worker made of it.
fn note_database_owner(said: &mut Option<(DatabaseTrust, String)>) -> DatabaseTrust {
    let (trust, owner) = database_trust();
    let database = config::database();
    {
        let mut g = GENERATOR.exclusive();
        g.database_owner = ForeignObject::new(&database, &owner);
        g.database_trust = trust;
        // Refused only while no lease is there yet, so only before the first one is written.
        if trust == DatabaseTrust::Refused {
            g.state.set_refused(true);
        } else if said
            .as_ref()
            .is_some_and(|(t, _)| *t == DatabaseTrust::Refused)
        {
            g.state.set_refused(false);
        }
    }
    let seen = Some((trust, owner.clone()));
    if *said == seen {
        return trust;
    }
    match trust {
        DatabaseTrust::Superuser if said.is_some() => log!(
            "snowflake: database \"{database}\" (snowflake.database) is owned by superuser \"{owner}\" now; the lease worker trusts it"
        ),
        DatabaseTrust::Tolerated => errors::report(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_WARNING,
            format!("database \"{database}\" named by snowflake.database is owned by role \"{owner}\", not by a superuser"),
            Some("Its owner can lock, vacuum, rename or drop what the lease worker needs there, and so stop every ID of this server. The lease that an earlier release wrote there is still used; a later release will refuse it, as this one refuses such a database that holds no lease yet.".into()),
            Some(&untrusted_database_hint(&database)),
        ),
        DatabaseTrust::Refused => warning!(
            "snowflake lease worker refuses database \"{database}\" (snowflake.database): it is owned by role \"{owner}\", not by a superuser; snowflake_nextval() refuses until a superuser owns it"
        ),
        _ => {}
    }
    *said = seen;
    trust
}

/// What to do about a lease database that a role other than a superuser owns.
pub fn untrusted_database_hint(database: &str) -> String {
    format!(
        "Set snowflake.database to a database that a superuser owns (the default, postgres) and restart, carrying the mark as \"Moving snowflake.database\" in docs/operations.md says; or give this one to a superuser (ALTER DATABASE \"{database}\" OWNER TO a superuser)."
    )
}

/// Waits, refusing ID generation, while `snowflake.database` is refused.
fn wait_while_untrusted_database(said: &mut Option<(DatabaseTrust, String)>) {
    while note_database_owner(said) == DatabaseTrust::Refused {
        nap(FOREIGN_RECHECK);
    }
}

/// A random node token (see [`crate::core::fleet`]), from PostgreSQL's strong random source.
fn random_token() -> i64 {
    // Positive and above the sequence's MINVALUE 1.
    (crate::generator::strong_random() & ((1 << 62) - 1)) | 1
}

/// The MAXVALUE this server gives the mark's two sequences: `i64::MAX` less its system
/// identifier's low 62 bits, so no other server's is the same, and still far above any mark
/// (Unix ms) or epoch.
///
/// PostgreSQL 19 copies sequences from one server to another: a publication `FOR ALL SEQUENCES`
/// (which takes every sequence of its database, with no exception) and a subscription to it set
/// the subscriber's sequences to the publisher's values at `CREATE SUBSCRIPTION` and at each
/// `ALTER SUBSCRIPTION ... REFRESH SEQUENCES`, lower or higher, with their `is_called`. Another
/// server's mark copied here would be taken for a floor from outside: IDs would jump to that
/// server's lease (and to a refusal, if its clock or its epoch is ahead), and a lower one would be
/// what a restart reads. PostgreSQL copies only between sequences of the same definition (type,
/// START, INCREMENT, MINVALUE, MAXVALUE, CYCLE; `sequencesync.c`), and reports the others to the
/// subscription as mismatched, retrying them. So the mark is never copied in while its MAXVALUE
/// is this server's own. (Not START: a schema-only restore makes a sequence hold its START, and
/// a mark must never be made up.) The sequences are made with it, on every major (pg_upgrade
/// carries the definition, and gives the new cluster a new system identifier); `node_token` has
/// a random START since it was made. A MAXVALUE that is not ours (made before 1.6.0, restored from
/// another server's dump, or carried by pg_upgrade) is made ours by `own_maxima` on 19.
fn own_max() -> i64 {
    i64::MAX - (crate::fleet::system_identifier() & ((1 << 62) - 1))
}

/// On 19, where sequences replicate: gives the mark's sequences this server's MAXVALUE where they
/// have another, in a transaction of its own, as an attempt that may fail. `ALTER SEQUENCE`
/// takes a lock (`SHARE ROW EXCLUSIVE`) that any role holding the sequence open can keep it
/// waiting for (a `nextval` on its OID takes one before the privilege check, `pg_sequences`
/// another, from 18), as can 19's own sequence synchronisation of a batch, and a superuser's
/// event trigger may refuse DDL: so it waits at most 100 ms, any error is logged and skipped,
/// and the next start tries again. IDs never wait for it; the mark is only exposed to a copy
/// while the MAXVALUE is not ours, as it was before.
#[cfg(feature = "pg19")]
fn own_maxima() {
    let outcome = BackgroundWorker::transaction(|| {
        let plpgsql = Spi::get_one::<bool>(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname OPERATOR(pg_catalog.=) 'plpgsql')",
        )
        .expect("look for PL/pgSQL")
        .unwrap_or(false);
        let mut changed = Vec::new();
        let max_of = |name: &str| {
            Spi::get_one::<i64>(&format!(
                "SELECT s.seqmax FROM pg_catalog.pg_sequence s
                  WHERE s.seqrelid OPERATOR(pg_catalog.=) '{SCHEMA}.{name}'::pg_catalog.regclass"
            ))
            .expect("read the sequence's MAXVALUE")
        };
        for name in ["lease_ms", "epoch_ms"] {
            let own = own_max();
            if max_of(name) == Some(own) {
                continue;
            }
            if !plpgsql {
                return Err(format!("{SCHEMA}.{name} has another server's MAXVALUE, and PL/pgSQL, which the worker changes it with, is not in this database"));
            }
            Spi::run("SET LOCAL lock_timeout = '100ms'").expect("set lock_timeout");
            // The block is a subtransaction: its error is caught, and nothing of it remains.
            Spi::run(&format!(
                "DO $own_max$ BEGIN
                     ALTER SEQUENCE {SCHEMA}.{name} MAXVALUE {own};
                 EXCEPTION WHEN OTHERS THEN
                     RAISE LOG 'snowflake lease worker: could not give {SCHEMA}.{name} this server''s MAXVALUE (%: %); the next start tries again', SQLSTATE, SQLERRM;
                 END $own_max$"
            ))
            .expect("give the sequence its MAXVALUE");
            // Changed, unless the block caught an error (which it logged).
            if max_of(name) == Some(own) {
                changed.push(name);
            }
        }
        Ok(changed)
    });
    match outcome {
        Ok(changed) if !changed.is_empty() => log!(
            "snowflake lease worker: gave {} this server's MAXVALUE, so that PostgreSQL's sequence replication never copies another server's mark over them",
            changed.iter().map(|n| format!("{SCHEMA}.{n}")).collect::<Vec<_>>().join(" and ")
        ),
        Ok(_) => {}
        Err(why) => warning!("snowflake lease worker: {why}; a subscription to FOR ALL SEQUENCES of another server could copy its mark here"),
    }
}

/// What the worker keeps in `_snowflake`, each with the statements that make it: run only
/// where it is missing, so that a normal start changes no schema and takes no lock stronger
/// than reading needs (a `CREATE ... IF NOT EXISTS` or `COMMENT` would take one on every start,
/// and wait for anyone who holds the object).
fn missing_objects_ddl(token: i64) -> Vec<String> {
    let exists = |sql: &str| {
        Spi::get_one::<bool>(sql)
            .expect("look for the worker's objects")
            .unwrap_or(false)
    };
    let relation = |name: &str| {
        exists(&format!(
            "SELECT pg_catalog.to_regclass('{SCHEMA}.{name}') IS NOT NULL"
        ))
    };
    let column = |name: &str| {
        exists(&format!(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
                             WHERE attrelid OPERATOR(pg_catalog.=) '{SCHEMA}.claims'::pg_catalog.regclass
                               AND attname OPERATOR(pg_catalog.=) '{name}' AND NOT attisdropped)"
        ))
    };
    let mut ddl = Vec::new();
    if !exists(&format!(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) '{SCHEMA}')"
    )) {
        ddl.push(format!("CREATE SCHEMA {SCHEMA}"));
        ddl.push(format!("REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC"));
    }
    let mut sequence = |name: &str, create: String, comment: String| {
        if !relation(name) {
            ddl.push(create);
            ddl.push(comment);
            ddl.push(format!(
                "REVOKE ALL ON SEQUENCE {SCHEMA}.{name} FROM PUBLIC"
            ));
        }
    };
    sequence(
        "lease_ms",
        format!("CREATE SEQUENCE {SCHEMA}.lease_ms AS bigint MINVALUE 0 MAXVALUE {} START 0", own_max()),
        format!("COMMENT ON SEQUENCE {SCHEMA}.lease_ms IS 'snowflake: Unix ms up to which IDs may have been issued by this server. Do not drop or lower it.'"),
    );
    sequence(
        "epoch_ms",
        format!("CREATE SEQUENCE {SCHEMA}.epoch_ms AS bigint MINVALUE -1 MAXVALUE {} START -1", own_max()),
        format!("COMMENT ON SEQUENCE {SCHEMA}.epoch_ms IS 'snowflake: the epoch (Unix ms) that {SCHEMA}.lease_ms was written under; -1 if none. Do not change it.'"),
    );
    sequence(
        "node_token",
        format!("CREATE SEQUENCE {SCHEMA}.node_token AS bigint MINVALUE 1 START {token}"),
        format!("COMMENT ON SEQUENCE {SCHEMA}.node_token IS 'snowflake: a random number naming this installation in {SCHEMA}.claims (informative: a server is known by its system identifier)'"),
    );
    if !relation("citus_group") {
        ddl.push(format!(
            "CREATE TABLE {SCHEMA}.citus_group (
                 only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
                 group_id bigint NOT NULL,
                 recorded_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now())"
        ));
        ddl.push(format!("COMMENT ON TABLE {SCHEMA}.citus_group IS 'snowflake: the Citus group this node took its pair from (snowflake.pair_source); a node whose group changes stops. Delete the row only as docs/multi-writer.md says.'"));
        ddl.push(format!(
            "REVOKE ALL ON TABLE {SCHEMA}.citus_group FROM PUBLIC"
        ));
    }
    if !relation("claims") {
        ddl.push(crate::fleet::CLAIMS_DDL.into());
        ddl.push(format!("COMMENT ON TABLE {SCHEMA}.claims IS 'snowflake: which server (by system identifier) generates with which datacenter and worker ID, and the highest ID it may have issued; replicate it with your data'"));
        ddl.push(format!("REVOKE ALL ON TABLE {SCHEMA}.claims FROM PUBLIC"));
    } else {
        // 1.2.0 made the table without these.
        if !column("lease_id") {
            ddl.push(format!(
                "ALTER TABLE {SCHEMA}.claims ADD COLUMN lease_id bigint NOT NULL DEFAULT 0"
            ));
        }
        if !column("retired") {
            ddl.push(format!(
                "ALTER TABLE {SCHEMA}.claims ADD COLUMN retired boolean NOT NULL DEFAULT false"
            ));
        }
        // 1.6.0: the pairs a server left, with its last ID on each.
        if !column("left_pairs") {
            ddl.push(format!(
                "ALTER TABLE {SCHEMA}.claims ADD COLUMN left_pairs bigint[] NOT NULL DEFAULT '{{}}'"
            ));
        }
    }
    ddl
}

/// Creates what is missing (as superuser, so it is ours) and reads the mark, its epoch, and the
/// timestamp field of the last lease recorded in this server's own claim (0 if none).
fn create_and_read_mark() -> AtStart {
    let token = random_token();
    BackgroundWorker::transaction(|| {
        // Looked at again in the transaction that creates: the database may have been given to
        // another role since the worker trusted it (the error restarts the worker, which then
        // refuses the database).
        if let (owner, false, false) = read_trust() {
            error!(
                "snowflake lease worker: database \"{}\" is owned by role \"{owner}\" now, not by a superuser",
                config::database()
            );
        }
        let ddl = missing_objects_ddl(token);
        for statement in &ddl {
            Spi::run(statement).unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        if !ddl.is_empty() {
            log!("snowflake lease worker created what was missing of schema {SCHEMA} in database \"{}\"", config::database());
        }
        // Someone may have made `_snowflake` between the check and the CREATE that then failed or
        // took it: look again, and use nothing of it if so (the error rolls back, the worker
        // restarts and refuses it).
        if let Some((what, owner)) = foreign_object() {
            error!("snowflake lease worker: {what} was made by role \"{owner}\" while the worker started");
        }
        let (mark_unix_ms, recorded_epoch_ms) = read_mark();
        AtStart {
            mark_unix_ms,
            recorded_epoch_ms,
            own_claim: crate::fleet::own_claim(),
            left_pairs: crate::fleet::own_left_pairs(),
        }
    })
}

/// The persisted mark (Unix ms) and the epoch it was written under, in the caller's transaction.
fn read_mark() -> (i64, Option<i64>) {
    let mark = Spi::get_one::<i64>(&format!("SELECT last_value FROM {SCHEMA}.lease_ms"))
        .expect("read the lease sequence")
        .unwrap_or(0);
    let epoch = Spi::get_one::<i64>(&format!("SELECT last_value FROM {SCHEMA}.epoch_ms"))
        .expect("read the epoch sequence")
        .filter(|&e| e >= 0);
    (mark, epoch)
}

/// Renews the lease as `worker` plans it ([`crate::core::worker::Worker::renew_read`]): in one
/// transaction, reads the highest ID another server may have issued on our pair (see
/// [`crate::core::fleet::handover_floor`]) and the mark, so that no lease is ever written without
/// having looked, then writes the lease and records it in this server's claim; grants it once
/// the commit has returned and, where it waits for synchronous standbys, they have confirmed it
/// (a cancel or a terminate ends PostgreSQL's wait, not ours: [`crate::syncrep`]).
fn renew(worker: &mut Worker, settings: &Settings, now_ms: u64) {
    // An error in the transaction ends the worker, and the protocol's state with it.
    let mut protocol = AssertUnwindSafe(&mut *worker);
    let (plan, written, version) = BackgroundWorker::transaction(move || {
        // The commit must be flushed (and, with a synchronous standby, received there) before
        // any ID uses the lease, whatever the server's default is.
        Spi::run("SET LOCAL synchronous_commit = on").expect("set synchronous_commit");
        let handover = crate::fleet::handover_floor(settings.node);
        let (mark, recorded) = read_mark();
        let plan = protocol.renew_read(
            SystemClock.now_unix_ms(),
            handover,
            mark,
            recorded,
            settings,
            &mut GENERATOR.exclusive().state,
        );
        let Some(write) = plan.write else {
            return (plan, None, (None, None));
        };
        // The mark never goes down: not below a value written by someone else, nor below the
        // worker's own if someone lowered it. A value found that stands for later IDs than ours
        // (counted from the epoch beside it, -1 for none) is kept with that epoch; otherwise the
        // greater of ours is written with our epoch: `LeaseWrite::keeps_found` and `written`,
        // which this statement must match. What the write found (the mark and its epoch, read in
        // the scan, before the target list sets them) is returned: a value set since the look
        // is a floor (rule 4). (GREATEST and CASE are syntax, not functions on the search_path.)
        let (written, found, found_epoch) = Spi::get_three_with_args::<i64, i64, i64>(
            "SELECT pg_catalog.setval('_snowflake.lease_ms',
                        CASE WHEN k.keep THEN k.mark ELSE GREATEST($1, $3) END, true),
                    k.mark, k.epoch,
                    CASE WHEN NOT k.keep THEN pg_catalog.setval('_snowflake.epoch_ms', $2, true) END
               FROM (SELECT m.mark, m.epoch,
                            (m.mark OPERATOR(pg_catalog.-)
                               CASE WHEN m.epoch OPERATOR(pg_catalog.<) 0 THEN $2 ELSE m.epoch END)
                            OPERATOR(pg_catalog.>) (GREATEST($1, $3) OPERATOR(pg_catalog.-) $2) AS keep
                       FROM (SELECT l.last_value AS mark, e.last_value AS epoch
                               FROM _snowflake.lease_ms l, _snowflake.epoch_ms e) m) k",
            &[
                write.mark_unix_ms.into(),
                write.epoch_ms.into(),
                write.own_unix_ms.into(),
            ],
        )
        .expect("persist the lease");
        let written = written.unwrap_or(write.mark_unix_ms);
        let found = (
            found.unwrap_or(write.looked_unix_ms),
            found_epoch.filter(|&e| e >= 0),
        );
        let version = crate::fleet::record_lease(write.claim_lease_id, settings.node);
        (plan, Some((written, found)), version)
    });
    if let (Some(write), Some((written, found))) = (plan.write, written) {
        let replicated = crate::syncrep::last_commit_replicated();
        let mut g = GENERATOR.exclusive();
        // What the Citus nodes read follows the lease at once, as the row does (its version stays
        // the refresh's).
        if let Some(c) = version.1.filter(|_| g.own_claim.system_identifier != 0) {
            g.own_claim.lease_id = g.own_claim.lease_id.max(c.lease_id);
        }
        worker.renew_committed(
            now_ms,
            &write,
            written,
            found,
            version.0,
            version.1,
            replicated,
            settings,
            &mut g.state,
        );
        drop(g);
        if !replicated {
            // Committed here only: no ID under this lease until the standbys have it, or a
            // failover to one of them would issue them again.
            errors::report(
                PgLogLevel::WARNING,
                PgSqlErrorCode::ERRCODE_WARNING,
                "snowflake: the lease worker's commit returned before the synchronous standbys confirmed it; no ID is issued under the new lease until they have".into(),
                Some("Its wait for synchronous replication was cancelled or terminated. The worker waits for the standbys itself; a terminate ends it, and a cancel of that wait raises an error.".into()),
                None,
            );
            crate::syncrep::wait_for_last_commit();
            // The mark as it is now, after the confirmation: a restore that lowered it while the
            // commit waited leaves the lease ungranted, and the next renewal writes it back.
            let mark = BackgroundWorker::transaction(read_mark);
            worker.replicated(mark, &mut GENERATOR.exclusive().state);
        }
    }
    // Written, or a mark followed without a write: the errors name its epoch.
    GENERATOR.exclusive().recorded_epoch_ms = worker.recorded_epoch_ms();
    report_outside_mark(plan.mark_unix_ms, plan.found);
    // Confirmed by the standbys of then: still those of now (rule 9)?
    if written.is_some() {
        look_at_standbys(worker);
    }
}

/// Tells the protocol who confirms commits here now (rule 9): if they changed since the last
/// look, the lease is taken back until a renewal they confirmed. Looked at after every nap (a
/// reload wakes the worker) and after every lease commit.
fn look_at_standbys(worker: &mut Worker) {
    let seen = crate::syncrep::standbys_now();
    let before = worker.standbys().cloned();
    let changed = worker.standbys_seen(seen.clone(), &mut GENERATOR.exclusive().state);
    if let (true, Some(before)) = (changed, before) {
        log!(
            "snowflake: the synchronous standbys changed (synchronous_standby_names '{}', synchronous walsenders {:?}; before: '{}', {:?}); no ID is issued until they have confirmed a lease",
            seen.names,
            seen.pids,
            before.names,
            before.pids
        );
    }
}

/// What to do about a mark that someone other than the lease worker lowered.
const LOWERED_MARK_HINT: &str = "Leave _snowflake out of dumps and restores (pg_dump --exclude-schema=_snowflake); raise a floor with snowflake_set_floor(), never with setval.";

/// Says what the worker found in the mark that it did not write, once the transaction that
/// answered it has its statements behind it.
fn report_outside_mark(mark: i64, found: Option<OutsideMark>) {
    match found {
        Some(OutsideMark { lowered: true, .. }) => errors::report(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_WARNING,
            format!("snowflake: the persisted mark {SCHEMA}.lease_ms was lowered to {mark} by someone other than the lease worker; the worker wrote its own back"),
            Some("A restore of a dump that includes schema _snowflake, or a setval on it, lowers the mark; after a restart with the clock behind, IDs issued before could repeat. IDs go above both values.".into()),
            Some(LOWERED_MARK_HINT),
        ),
        Some(OutsideMark { lowered: false, .. }) => log!(
            "snowflake: the persisted mark {SCHEMA}.lease_ms was raised to {mark} from outside; IDs go above it"
        ),
        None => {}
    }
}

/// Reads the mark again between renewals ([`crate::core::worker::Worker::mark_read`]): a value
/// someone else wrote is a floor at once, and a lowered one is written back at once, not at the
/// next lease (which an idle server may not need for hours, while a restart would start from the
/// lowered value).
fn check_mark(worker: &mut Worker) {
    // An error in the transaction ends the worker, and the protocol's state with it.
    let mut protocol = AssertUnwindSafe(&mut *worker);
    let (mark, check) = BackgroundWorker::transaction(move || {
        let (mark, recorded) = read_mark();
        let check = protocol.mark_read(mark, recorded, &mut GENERATOR.exclusive().state);
        if let Some((own, epoch)) = check.write_back {
            Spi::run("SET LOCAL synchronous_commit = on").expect("set synchronous_commit");
            // With the epoch it was written under (the restore that lowered the mark may have
            // put another epoch, or none, beside it), unless a value that stands for later IDs
            // was set since the look: `core::lease::stands_above`, which this must match.
            Spi::run_with_args(
                "SELECT CASE WHEN NOT k.keep THEN pg_catalog.setval('_snowflake.lease_ms', $1, true) END,
                        CASE WHEN NOT k.keep THEN pg_catalog.setval('_snowflake.epoch_ms', $2, true) END
                   FROM (SELECT (l.last_value OPERATOR(pg_catalog.-)
                                   CASE WHEN e.last_value OPERATOR(pg_catalog.<) 0 THEN $3
                                        ELSE e.last_value END)
                                OPERATOR(pg_catalog.>) ($1 OPERATOR(pg_catalog.-) $2) AS keep
                           FROM _snowflake.lease_ms l, _snowflake.epoch_ms e) k",
                &[own.into(), epoch.into(), config::epoch_ms().into()],
            )
            .expect("write the mark back");
        }
        (mark, check)
    });
    // A mark followed brings its epoch: the errors name it.
    GENERATOR.exclusive().recorded_epoch_ms = worker.recorded_epoch_ms();
    report_outside_mark(mark, check.found);
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn snowflake_lease_worker_main(_arg: pg_sys::Datum) {
    handle_signals();
    let database = config::database();
    let died_connecting = {
        let mut g = GENERATOR.exclusive();
        std::mem::replace(&mut g.connecting, true)
    };
    if died_connecting {
        wait_for_database(&database);
    }
    connect(&database);
    {
        let mut g = GENERATOR.exclusive();
        g.connecting = false;
        g.database_missing = false;
    }
    let reset = forget_database_settings();
    if !crate::session::acts_as_superuser() {
        error!(
            "snowflake lease worker does not run as a superuser in database \"{}\"; it refuses to continue",
            config::database()
        );
    }
    if !reset.is_empty() {
        log!(
            "snowflake lease worker ignores the settings of database \"{}\" and its roles: {}",
            config::database(),
            reset.join(", ")
        );
    }
    {
        let mut g = GENERATOR.exclusive();
        g.worker_latch = unsafe { pg_sys::MyLatch } as usize;
        g.worker_pid = unsafe { pg_sys::MyProcPid };
    }
    // SAFETY: registers a callback with a null argument; it runs once, at exit.
    unsafe { pg_sys::before_shmem_exit(Some(forget_worker), pg_sys::Datum::from(0usize)) };
    let mut database_said = None;
    // Both in turn until neither waited: a foreign schema dropped while the database is refused
    // leaves a database the worker must still refuse (and one given away meanwhile, too).
    loop {
        wait_while_untrusted_database(&mut database_said);
        if !wait_while_foreign_objects() {
            break;
        }
    }

    let epoch = config::epoch_ms();
    let read = create_and_read_mark();
    #[cfg(feature = "pg19")]
    own_maxima();
    let (node, recorded_group) = resolve_pair();
    let (mut worker, below) = {
        let mut g = GENERATOR.exclusive();
        let (worker, below) = Worker::start(epoch, &read, node, &mut g.state);
        g.recorded_epoch_ms = worker.recorded_epoch_ms();
        g.awaiting_claims = worker.gated();
        (worker, below)
    };
    log!(
        "snowflake lease worker started; {}",
        mark_text(read.mark_unix_ms, read.recorded_epoch_ms)
    );
    if let Some(MarkBelowClaim {
        mark_unix_ms,
        claimed_ms,
    }) = below
    {
        errors::report(
            PgLogLevel::WARNING,
            PgSqlErrorCode::ERRCODE_WARNING,
            format!("snowflake: the persisted mark {SCHEMA}.lease_ms ({mark_unix_ms}) is below the last lease this server recorded in its claim"),
            Some(format!("Someone lowered the mark (a restore of a dump that includes schema {SCHEMA}, or a setval on it). IDs go above the claim's lease, {claimed_ms} ms after the epoch.")),
            Some(LOWERED_MARK_HINT),
        );
    }

    look_at_standbys(&mut worker);
    // The protocol decides what to do next ([`crate::core::worker`]); this loop does it.
    let started = Instant::now();
    loop {
        let now_ms = started.elapsed().as_millis() as u64;
        let settings = settings();
        let (todo, lease_before) = {
            let state = GENERATOR.share().state;
            let todo = worker.poll(
                now_ms,
                SystemClock.now_unix_ms(),
                &state,
                settings.max_drift_ms,
            );
            (todo, state.lease())
        };
        match todo {
            Todo::ReadPaths => {
                let readings = crate::fleet::paths_now(now_ms);
                match worker.paths_read(now_ms, &readings) {
                    Some(GateEnd::Stalled { waiting }) => errors::report(
                        PgLogLevel::WARNING,
                        PgSqlErrorCode::ERRCODE_WARNING,
                        format!(
                            "snowflake: no ID is issued until subscriptions {} have brought _snowflake.claims up to date",
                            waiting.join(", ")
                        ),
                        Some(format!(
                            "After a start, IDs wait until each subscription that carries the claims here has applied its publisher's end of WAL, asked of the publisher; for {} s none of these moved towards it (its publisher down or unreachable, still decoding one large transaction, or its apply worker not applying).",
                            crate::core::fleet::CATCH_UP_LIMIT_MS / 1000
                        )),
                        Some(crate::generator::GATE_HINT),
                    ),
                    Some(GateEnd::CaughtUp { unproven }) if !unproven.is_empty() => {
                        errors::report(
                            PgLogLevel::WARNING,
                            PgSqlErrorCode::ERRCODE_WARNING,
                            format!(
                                "snowflake: IDs are issued without waiting for {}, which carry other servers' claims here",
                                unproven.join(", ")
                            ),
                            Some(format!("A subscription disabled, or whose copy of _snowflake.claims was not done, at the start is not waited for, nor a Citus node that did not answer within {} s; a server that took this server's pair meanwhile is seen only once its claim arrives.", crate::core::fleet::CATCH_UP_LIMIT_MS / 1000)),
                            Some("Disable a claims subscription only for a server that is gone for good, and retire its claim."),
                        )
                    }
                    Some(GateEnd::CaughtUp { .. }) | None => {}
                }
                GENERATOR.exclusive().awaiting_claims = worker.gated();
            }
            Todo::Refresh => {
                // The owner may change while the worker runs (its lease is there now, so another
                // owner is tolerated with a WARNING, never a refusal).
                note_database_owner(&mut database_said);
                watch_group(recorded_group);
                check_mark(&mut worker);
                crate::fleet::refresh(&mut worker, &settings, now_ms);
            }
            Todo::ForwardJump(jump) => {
                {
                    let mut g = GENERATOR.exclusive();
                    g.state.record_forward_jump(jump);
                    g.forward_jump_at = crate::generator::monotonic_ms();
                }
                // IDs issued from now on are dated that far ahead if the clock is wrong, and a
                // later correction puts them in the future. Said while it can still be acted on.
                warning!(
                    "snowflake: the system clock jumped forward by {jump} ms; IDs issued from now on carry its time, and if it is wrong they stay ahead of real time after it is corrected (see \"Clock faults\" in docs/operations.md)"
                );
            }
            Todo::ClockBack { steps, ms } => report_clock_back(steps, ms, settings.max_drift_ms),
            Todo::Renew => renew(&mut worker, &settings, now_ms),
            Todo::Nap(ms) => {
                nap(Duration::from_millis(ms));
                reload_if_asked();
                look_at_standbys(&mut worker);
            }
        }
        // A lease granted by this step (a renewal, a held one at a refresh), for the health check.
        if GENERATOR.share().state.lease() > lease_before {
            GENERATOR.exclusive().granted_at = crate::generator::monotonic_ms();
        }
    }
}

/// The persisted mark and its epoch, for the log: timestamps, with the raw values a DBA compares
/// with `_snowflake.lease_ms` and `_snowflake.epoch_ms`; "no mark yet" on a new server.
fn mark_text(mark_unix_ms: i64, recorded_epoch_ms: Option<i64>) -> String {
    use crate::core::time::unix_ms_text;
    if mark_unix_ms <= 0 {
        return format!("no high-water mark yet (a new {SCHEMA}.lease_ms)");
    }
    let under = recorded_epoch_ms.map_or("an epoch that was not recorded".into(), |e| {
        format!("the epoch {} ({e} Unix ms)", unix_ms_text(e))
    });
    format!(
        "persisted high-water mark {} ({mark_unix_ms} Unix ms), written under {under}",
        unix_ms_text(mark_unix_ms)
    )
}

/// The generator saw the clock go back ([`crate::core::worker::Todo::ClockBack`]): said once per
/// step, at most once a minute, with its size, so the log shows when it happened (the 58000 of a
/// call beyond the drift says only that the clock is behind now).
fn report_clock_back(steps: u64, ms: u64, max_drift_ms: u64) {
    let what = if steps == 1 {
        format!("the system clock went back by at least {ms} ms")
    } else {
        format!("the system clock went back {steps} times within a minute, the latest by at least {ms} ms")
    };
    errors::report(
        PgLogLevel::WARNING,
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("snowflake: {what}"),
        Some(format!("snowflake_nextval() saw the clock {ms} ms behind its highest reading. While it is behind by less than snowflake.max_clock_drift ({max_drift_ms} ms), IDs continue from the last one issued, dated ahead of the clock; beyond it snowflake_nextval() fails with 58000 until the clock catches up.")),
        Some("Find what set the clock back (an NTP step, a manual date -s, a virtual machine resumed from a snapshot); see \"Clock faults\" in docs/operations.md."),
    );
}

/// How often a worker waiting for `snowflake.database` to be created looks for it.
pub const DATABASE_RECHECK: Duration = Duration::from_secs(5);

/// The last worker died while it connected to `snowflake.database`: for a database that does
/// not exist PostgreSQL logs `FATAL: database "..." does not exist`, and the postmaster would
/// start the worker again every second (the restart interval is fixed when the worker is
/// registered), a FATAL a second that does not name snowflake. Instead this worker connects to no
/// database (the shared catalogs only, as PostgreSQL's own launchers do), and looks the database
/// up in `pg_database`: missing, it says so once, naming the setting, lets calls fail at once with
/// the same words ([`crate::generator::database_missing`]), and looks again every
/// `DATABASE_RECHECK`; present (created meanwhile, or the last worker died of something else),
/// it exits, and the worker the postmaster starts a second later connects to it. A backend can
/// connect to a database only once, so a worker that looked cannot connect itself.
fn wait_for_database(database: &str) -> ! {
    // SAFETY: first thing in a registered background worker with SPI access: no database, only
    // the shared catalogs.
    unsafe { pg_sys::BackgroundWorkerInitializeConnection(std::ptr::null(), std::ptr::null(), 0) };
    let name = std::ffi::CString::new(database).expect("a database name has no NUL byte");
    let mut said = false;
    loop {
        // SAFETY: a lookup in the shared catalog pg_database, inside a transaction.
        let exists = BackgroundWorker::transaction(|| unsafe {
            pg_sys::get_database_oid(name.as_ptr(), true) != pg_sys::InvalidOid
        });
        if exists {
            {
                let mut g = GENERATOR.exclusive();
                g.connecting = false;
                g.database_missing = false;
            }
            if said {
                log!("snowflake lease worker found database \"{database}\"; it starts again to connect to it");
            }
            // SAFETY: ends this worker with exit code 1, which the postmaster restarts.
            unsafe { pg_sys::proc_exit(1) };
        }
        if !said {
            GENERATOR.exclusive().database_missing = true;
            errors::report(
                PgLogLevel::WARNING,
                PgSqlErrorCode::ERRCODE_WARNING,
                format!("snowflake: database \"{database}\" named by snowflake.database does not exist"),
                Some(format!("The \"snowflake lease\" background worker keeps the high-water mark there: no snowflake ID is issued until it exists. The worker looks for it again every {} s.", DATABASE_RECHECK.as_secs())),
                Some(&crate::generator::database_missing_hint(database)),
            );
            said = true;
        }
        nap(DATABASE_RECHECK);
        reload_if_asked();
    }
}

/// The Citus group recorded in `_snowflake.citus_group`, in the caller's transaction.
fn recorded_group() -> Option<i64> {
    Spi::get_one::<i64>(&format!("SELECT group_id FROM {SCHEMA}.citus_group"))
        .ok()
        .flatten()
}

/// Records the group the pair comes from, durably, before any ID uses it.
fn record_group(group: i64) {
    BackgroundWorker::transaction(|| {
        Spi::run("SET LOCAL synchronous_commit = on").expect("set synchronous_commit");
        Spi::run_with_args(
            &format!("INSERT INTO {SCHEMA}.citus_group (group_id) VALUES ($1)"),
            &[group.into()],
        )
        .expect("record the Citus group");
    });
}

/// Sets where the pair comes from and refuses while that refuses; says each change once.
fn set_pair(state: PairState, said: &mut Option<PairState>) {
    {
        let mut g = GENERATOR.exclusive();
        g.pair = state;
        if state.refuses() {
            g.state.set_refused(true);
        }
    }
    if *said == Some(state) {
        return;
    }
    *said = Some(state);
    let source = config::pair_source().name();
    let database = config::citus_database().unwrap_or_default();
    match state {
        PairState::Unknown => log!("snowflake: snowflake.pair_source is '{source}' and this node is in no Citus cluster yet (database \"{database}\"); snowflake_nextval() refuses until a coordinator adds it"),
        PairState::Untrusted => warning!("snowflake: snowflake.pair_source is '{source}' and the Citus worker refuses the metadata of database \"{database}\"; snowflake_nextval() refuses"),
        PairState::Beyond { group, max } => warning!("snowflake: this node's Citus group {group} is beyond what snowflake.pair_source = '{source}' holds (0 to {max}); snowflake_nextval() refuses"),
        PairState::Changed { recorded, now } => warning!("snowflake: this node's Citus group is {now} now, but its pair came from group {recorded} (recorded in {SCHEMA}.citus_group); snowflake_nextval() refuses"),
        PairState::Group(g) => log!("snowflake: the pair comes from Citus group {g} (snowflake.pair_source = '{source}')"),
        PairState::Configured => {}
    }
}

/// The pair this server issues with, and the Citus group it came from (recorded first, when it
/// is new): the configured pair, or, with `snowflake.pair_source` from Citus, the group's.
/// Waits, refusing, while the group is not known, changed, or beyond what the source holds. A
/// recorded group that Citus has not been asked about yet is used at once: the Citus worker's
/// reads (which the Citus database's owner could stall) never hold up a node that knows its pair.
fn resolve_pair() -> (Node, Option<i64>) {
    let source = config::pair_source();
    if !source.from_citus() {
        return (config::configured_node(), None);
    }
    let datacenter = config::configured_node().datacenter();
    let mut said = None;
    loop {
        let recorded = BackgroundWorker::transaction(recorded_group);
        let (read, _) = crate::citus::group();
        let state = match check_group(recorded, read) {
            GroupCheck::Unknown if crate::citus::problem().is_some() => PairState::Untrusted,
            GroupCheck::Unknown => PairState::Unknown,
            GroupCheck::Changed { recorded, now } => PairState::Changed { recorded, now },
            GroupCheck::Record(group) | GroupCheck::Use(group) => {
                match pair_of_group(source, group, datacenter) {
                    Err(GroupBeyond { group, max }) => PairState::Beyond { group, max },
                    Ok(node) => {
                        if recorded.is_none() {
                            record_group(group);
                        }
                        let refused_for_pair = GENERATOR.share().pair.refuses();
                        set_pair(PairState::Group(group), &mut said);
                        let mut g = GENERATOR.exclusive();
                        g.node_bits = node.bits();
                        // Only the refusal the pair itself set (another one stays).
                        if refused_for_pair {
                            g.state.set_refused(false);
                        }
                        return (node, Some(group));
                    }
                }
            }
        };
        set_pair(state, &mut said);
        nap(Duration::from_secs(1));
        reload_if_asked();
    }
}

/// At every refresh: a group that Citus changed under a running node refuses (from then on,
/// and at every start, until a DBA lets the node take the new one).
fn watch_group(recorded: Option<i64>) {
    let Some(recorded) = recorded else {
        return;
    };
    if let GroupCheck::Changed { recorded, now } =
        crate::core::citus::check_group(Some(recorded), crate::citus::group().0)
    {
        let mut said = None;
        if GENERATOR.share().pair != (PairState::Changed { recorded, now }) {
            set_pair(PairState::Changed { recorded, now }, &mut said);
        }
    }
}

/// The settings a step of the protocol reads, as they are now.
fn settings() -> Settings {
    Settings {
        system_identifier: crate::fleet::system_identifier(),
        node: crate::generator::node(),
        max_drift_ms: config::max_clock_drift_ms(),
        claim_expiry_ms: config::claim_expiry_ms(),
    }
}

/// At exit, however the worker ends: backends stop waking its latch, and `snowflake_node()`
/// shows no worker until the next one starts.
#[pg_guard]
unsafe extern "C-unwind" fn forget_worker(_code: i32, _arg: pg_sys::Datum) {
    let mut g = GENERATOR.exclusive();
    if g.worker_pid == unsafe { pg_sys::MyProcPid } {
        g.worker_latch = 0;
    }
}
