//! The fleet check's glue (the rule itself is [`crate::core::fleet`]): this server's claim in the table
//! `_snowflake.claims`, which logical replication carries between servers, refreshed by the lease
//! worker; and the error `snowflake_nextval()` raises while another live server claims our pair.
//!
//! The table lives beside the lease in `snowflake.database`. Only the server writes it (and the
//! replication that brings the peers' rows, and a DBA retiring a server): PUBLIC has no privilege
//! on the schema or the table. Every statement here runs as superuser in a database an ordinary
//! role may own, so each names its functions and operators with their schema (see [`crate::lease`]).

use crate::config;
use crate::core::fleet::{Claim, LeftPair, PathEvent, PathReading};
use crate::core::layout::Node;
use crate::core::time::{pg_timestamp_to_unix_ms, unix_ms_to_pg_timestamp};
use crate::core::worker::{Refreshed, Settings, Worker};
use crate::errors;
use crate::generator::GENERATOR;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// Created by the lease worker with the lease, in the same transaction ([`crate::lease`]).
pub const CLAIMS_DDL: &str = "
    CREATE TABLE _snowflake.claims (
        system_identifier bigint PRIMARY KEY,
        node_token bigint NOT NULL,
        datacenter_id integer NOT NULL,
        worker_id integer NOT NULL,
        last_seen pg_catalog.timestamptz NOT NULL,
        lease_id bigint NOT NULL DEFAULT 0,
        retired boolean NOT NULL DEFAULT false,
        left_pairs bigint[] NOT NULL DEFAULT '{}'
    )";

/// The system identifier of this cluster: kept across restarts and crashes, and inherited by a
/// physical standby, so a promoted standby continues its primary's claim.
pub fn system_identifier() -> i64 {
    // pg_control_system() shows the same unsigned value cast to bigint.
    unsafe { pg_sys::GetSystemIdentifier() as i64 }
}

fn node_token() -> i64 {
    Spi::get_one::<i64>("SELECT last_value FROM _snowflake.node_token")
        .expect("read the node token")
        .unwrap_or(0)
}

/// Every claim, ours included, inside the caller's transaction.
fn read_claims() -> Vec<Claim> {
    Spi::connect(|client| {
        client
            .select(
                "SELECT system_identifier, xmin::pg_catalog.text::pg_catalog.int8, datacenter_id, worker_id,
                        last_seen, lease_id, retired
                   FROM _snowflake.claims",
                None,
                &[],
            )
            .expect("read the claims")
            .map(|row| Claim {
                system_identifier: row.get::<i64>(1).ok().flatten().unwrap_or(0),
                version: row.get::<i64>(2).ok().flatten().unwrap_or(0),
                datacenter: row.get::<i32>(3).ok().flatten().unwrap_or(-1) as u32,
                worker: row.get::<i32>(4).ok().flatten().unwrap_or(-1) as u32,
                last_seen_unix_ms: unix_ms(row.get::<TimestampWithTimeZone>(5).ok().flatten()),
                lease_id: row.get::<i64>(6).ok().flatten().unwrap_or(0),
                retired: row.get::<bool>(7).ok().flatten().unwrap_or(false),
            })
            .collect::<Vec<_>>()
    })
}

/// A claim's `last_seen` in Unix ms: -infinity (or NULL) is long expired; +infinity never expires.
fn unix_ms(seen: Option<TimestampWithTimeZone>) -> i64 {
    seen.map_or(i64::MIN, |t| {
        let us: i64 = t.into();
        pg_timestamp_to_unix_ms(us).unwrap_or(if us > 0 { i64::MAX } else { i64::MIN })
    })
}

/// The pairs the servers of the claims left (`left_pairs`), inside the caller's transaction.
fn read_left_pairs() -> Vec<LeftPair> {
    Spi::connect(|client| {
        client
            .select(
                "SELECT c.system_identifier, l.id
                   FROM _snowflake.claims c CROSS JOIN LATERAL pg_catalog.unnest(c.left_pairs) AS l(id)",
                None,
                &[],
            )
            .expect("read the pairs the claims left")
            .filter_map(|row| {
                Some(LeftPair {
                    system_identifier: row.get::<i64>(1).ok().flatten()?,
                    last_id: row.get::<i64>(2).ok().flatten()?,
                })
            })
            .collect()
    })
}

/// A write of this server's own claim, as `RETURNING last_seen, lease_id` gives it back: its
/// stamp, for [`crate::core::fleet::CopyWatch::wrote`].
const RETURNING_STAMP: &str = "RETURNING last_seen, lease_id";

/// Runs a statement that writes this server's own claim and returns its stamp
/// (`RETURNING_STAMP`), inside the caller's transaction; `None` when it wrote no row.
fn write_own_claim(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> Option<Claim> {
    Spi::connect_mut(|client| {
        client
            .update(sql, None, args)
            .expect("write this server's claim")
            .next()
            .map(|row| Claim {
                last_seen_unix_ms: unix_ms(row.get::<TimestampWithTimeZone>(1).ok().flatten()),
                lease_id: row.get::<i64>(2).ok().flatten().unwrap_or(0),
                ..Claim::NONE
            })
    })
}

/// The highest ID another server may have issued on our pair (see [`crate::core::fleet::handover_floor`]),
/// inside the caller's transaction.
pub fn handover_floor(node: Node) -> Option<i64> {
    let claims = read_claims();
    crate::core::fleet::handover_floor(
        system_identifier(),
        node.datacenter(),
        node.worker(),
        &claims,
        &read_left_pairs(),
    )
}

/// Writes the last ID of a lease into this server's own claim, in the transaction that persists
/// the lease ([`crate::lease`]): so the claim's `lease_id` is, at every moment, at least every ID
/// this server has issued, and retiring a server copies it from its own claim (docs/multi-writer.md,
/// "Retiring a node") with no arithmetic of the superuser's own. Before the first refresh since
/// the claims table was made there is no row, and the refresh writes it.
/// The row also gets this server's pair (the lease's): a restore that put back an older row of
/// ours on another pair must not reach the peers through this write.
/// Returns this server's own claim as it was before (for
/// [`crate::core::fleet::CopyWatch::observe`]) and the stamp of the row written (for
/// [`crate::core::fleet::CopyWatch::wrote`]), if there was one.
pub fn record_lease(lease_id: i64, node: Node) -> (Option<Claim>, Option<Claim>) {
    let before = own_claim();
    let written = write_own_claim(
        &format!(
            "UPDATE _snowflake.claims SET lease_id = GREATEST(lease_id, $2),
                    datacenter_id = $3, worker_id = $4
              WHERE system_identifier OPERATOR(pg_catalog.=) $1 {RETURNING_STAMP}"
        ),
        &[
            system_identifier().into(),
            lease_id.into(),
            (node.datacenter() as i32).into(),
            (node.worker() as i32).into(),
        ],
    );
    (before, written)
}

/// This server's own claim, inside the caller's transaction.
pub fn own_claim() -> Option<Claim> {
    let me = system_identifier();
    read_claims()
        .into_iter()
        .find(|c| c.system_identifier == me)
}

/// The pairs this server left, as its own claim carries them, inside the caller's transaction.
pub fn own_left_pairs() -> Vec<i64> {
    Spi::get_one_with_args::<Vec<i64>>(
        "SELECT left_pairs FROM _snowflake.claims WHERE system_identifier OPERATOR(pg_catalog.=) $1",
        &[system_identifier().into()],
    )
    .ok()
    .flatten()
    .unwrap_or_default()
}

/// The subscriptions of this database that carry `_snowflake.claims` here, or may: one that lists
/// no table at all here (after pg_upgrade from before 17, which drops those rows, or made with
/// `connect = false`) is watched too, its table state unknown (`'?'`), and what their apply
/// workers are doing (`read_paths`). Only a superuser's subscription can carry them: the apply
/// worker writes as the subscription's owner (or, from 16, as the table's owner, if the
/// subscription's owner may become it), and `_snowflake.claims` is a superuser's. A role given
/// `pg_create_subscription` (16 and later) and CREATE on this database could otherwise make the
/// start's gate wait for a publisher it chose, or have the worker connect where it says. Some
/// columns differ by major: from 16 a subscription may have parallel
/// apply workers, told apart from its leader by `leader_pid`, and from 17 each worker says what it
/// is (`worker_type`), which 19 needs: its sequence synchronisation worker has no relation and no
/// leader either. 19 counts the errors of copying tables and of copying sequences apart; a
/// sequence that fails to copy stops nothing that carries the claims, so only the tables' count.
#[cfg(not(feature = "pg19"))]
const APPLY_ERRORS: &str = "(SELECT t.apply_error_count OPERATOR(pg_catalog.+) t.sync_error_count
                               FROM pg_catalog.pg_stat_subscription_stats t
                              WHERE t.subid OPERATOR(pg_catalog.=) s.oid)";
#[cfg(feature = "pg19")]
const APPLY_ERRORS: &str =
    "(SELECT t.apply_error_count OPERATOR(pg_catalog.+) t.sync_table_error_count
                               FROM pg_catalog.pg_stat_subscription_stats t
                              WHERE t.subid OPERATOR(pg_catalog.=) s.oid)";
#[cfg(feature = "pg15")]
const LEADER_ONLY: &str = "";
// Before 16 a subscription takes every change its publisher has, whatever its origin.
#[cfg(feature = "pg15")]
const RELAYS: &str = "true";
#[cfg(not(feature = "pg15"))]
const RELAYS: &str = "s.suborigin OPERATOR(pg_catalog.<>) 'none'";
#[cfg(feature = "pg16")]
const LEADER_ONLY: &str = "AND w.leader_pid IS NULL";
#[cfg(not(any(feature = "pg15", feature = "pg16")))]
const LEADER_ONLY: &str = "AND w.worker_type OPERATOR(pg_catalog.=) 'apply'";

fn paths_sql() -> String {
    format!(
        "SELECT pg_catalog.encode(pg_catalog.convert_to(s.subname::pg_catalog.text, 'UTF8'), 'escape'),
                s.subenabled, w.pid,
                (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) w.last_msg_receipt_time)
                   OPERATOR(pg_catalog.*) 1000::pg_catalog.float8)::pg_catalog.int8,
                {APPLY_ERRORS}, r.srsubstate::pg_catalog.text,
                (w.latest_end_lsn OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.int8,
                {RELAYS}
           FROM pg_catalog.pg_subscription s
           LEFT JOIN pg_catalog.pg_subscription_rel r
             ON r.srsubid OPERATOR(pg_catalog.=) s.oid
            AND r.srrelid OPERATOR(pg_catalog.=) '_snowflake.claims'::pg_catalog.regclass
           LEFT JOIN pg_catalog.pg_stat_subscription w
             ON w.subid OPERATOR(pg_catalog.=) s.oid AND w.relid IS NULL AND w.pid IS NOT NULL {LEADER_ONLY}
          WHERE s.subdbid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
            AND (SELECT a.rolsuper FROM pg_catalog.pg_authid a
                  WHERE a.oid OPERATOR(pg_catalog.=) s.subowner)
            AND (r.srsubid IS NOT NULL
                 OR NOT EXISTS (SELECT FROM pg_catalog.pg_subscription_rel x
                                 WHERE x.srsubid OPERATOR(pg_catalog.=) s.oid))
          ORDER BY 1"
    )
}

/// The readings of `paths_sql()`, inside the caller's transaction.
fn read_paths() -> Vec<PathReading> {
    Spi::connect(|client| {
        client
            .select(&paths_sql(), None, &[])
            .expect("read the subscriptions that carry the claims")
            .map(|row| PathReading {
                subscription: row.get::<String>(1).ok().flatten().unwrap_or_default(),
                enabled: row.get::<bool>(2).ok().flatten().unwrap_or(false),
                apply_pid: row.get::<i32>(3).ok().flatten(),
                silent_ms: row.get::<i64>(4).ok().flatten().map(|ms| ms.max(0) as u64),
                errors: row.get::<i64>(5).ok().flatten(),
                table_state: row
                    .get::<String>(6)
                    .ok()
                    .flatten()
                    .and_then(|s| s.chars().next())
                    .unwrap_or('?'),
                end_lsn: row.get::<i64>(7).ok().flatten(),
                publisher_end: None,
                limited: false,
                relays: row.get::<bool>(8).ok().flatten().unwrap_or(true),
            })
            .collect()
    })
}

/// The paths as they are now, in a transaction of their own, for the start's gate
/// ([`crate::core::fleet::CatchUp`]): the subscriptions, each with its publisher's end of WAL
/// asked of the publisher (until one answer, which the gate keeps), and the Citus nodes (see
/// [`crate::citus::peers`]).
pub fn paths_now(now_ms: u64) -> Vec<PathReading> {
    let mut paths = BackgroundWorker::transaction(|| {
        let mut paths = read_paths();
        for p in paths.iter_mut().filter(|p| p.enabled) {
            let (answer, last_ask) = ASKED.with(|a| {
                a.borrow()
                    .get(&p.subscription)
                    .copied()
                    .unwrap_or((None, None))
            });
            p.publisher_end = answer;
            // Once a second at most: each ask is a connection (and a walsender) there.
            if answer.is_none() && last_ask.is_none_or(|t| now_ms.saturating_sub(t) >= 1000) {
                p.publisher_end = publisher_end(&p.subscription);
                ASKED.with(|a| {
                    a.borrow_mut()
                        .insert(p.subscription.clone(), (p.publisher_end, Some(now_ms)))
                });
            }
        }
        paths
    });
    paths.extend(crate::citus::peers(now_ms, system_identifier()).paths);
    paths
}

thread_local! {
    /// The publishers' answers, by subscription, in this life of the worker, and when each was
    /// last asked (the worker's monotonic ms).
    #[allow(clippy::type_complexity)]
    static ASKED: std::cell::RefCell<std::collections::HashMap<String, (Option<i64>, Option<u64>)>> =
        Default::default();
}

/// The end of WAL of the publisher of subscription `name` (of this database), asked over the
/// subscription's own connection string, as its apply worker connects (a logical replication
/// connection, which also runs SQL): `None` if it cannot be reached or does not answer. Inside
/// the caller's transaction. The connection waits on the network, never holding a lock of ours,
/// and stays interruptible (a shutdown or a `pg_terminate_backend()` ends it).
fn publisher_end(name: &str) -> Option<i64> {
    // Whether the connection must authenticate with a password, as PostgreSQL's apply worker
    // decides it for the same subscription (16 and later): a subscription owned by a role that
    // is not a superuser, with `password_required` (the default), must not borrow this
    // server's own credentials (trust or peer on this host, a `.pgpass` of the OS user,
    // Kerberos) for a connection its owner chose. On 15 only superusers own subscriptions.
    #[cfg(feature = "pg15")]
    const SQL: &str = "SELECT s.subconninfo, false FROM pg_catalog.pg_subscription s";
    #[cfg(not(feature = "pg15"))]
    const SQL: &str = "SELECT s.subconninfo, s.subpasswordrequired AND NOT a.rolsuper
                         FROM pg_catalog.pg_subscription s
                         JOIN pg_catalog.pg_authid a ON a.oid OPERATOR(pg_catalog.=) s.subowner";
    let (conninfo, must_use_password) = Spi::get_two_with_args::<String, bool>(
        &format!(
            "{SQL}
              WHERE s.subdbid OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                      WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                AND pg_catalog.encode(pg_catalog.convert_to(s.subname::pg_catalog.text, 'UTF8'), 'escape')
                    OPERATOR(pg_catalog.=) $1"
        ),
        &[name.into()],
    )
    .ok()?;
    let conninfo = conninfo?;
    let must_use_password = must_use_password.unwrap_or(true);
    // A publisher that accepts the connection and never answers must not hold the worker (and
    // its gate's WARNING) for the system's TCP timeout.
    let conninfo = if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        let sep = if conninfo.contains('?') { '&' } else { '?' };
        format!("{conninfo}{sep}connect_timeout=5")
    } else {
        format!("{conninfo} connect_timeout=5")
    };
    let conninfo = std::ffi::CString::new(conninfo).ok()?;
    // SAFETY: PostgreSQL's own walreceiver library, loaded as the apply workers load it; its
    // functions report failures in their results (`err`, `status`), not as errors.
    unsafe {
        pg_sys::load_file(c"libpqwalreceiver".as_ptr(), false);
        let f = pg_sys::WalReceiverFunctions.as_ref()?;
        let mut err: *mut std::ffi::c_char = std::ptr::null_mut();
        let app = c"snowflake lease worker".as_ptr();
        // 16 added must_use_password, 17 whether the connection is a replication one: from 17
        // it is an ordinary one, which needs no walsender of the publisher (its subscribers'
        // apply workers may hold them all); before, a logical replication connection, which
        // needs one spare.
        #[cfg(feature = "pg15")]
        let conn = {
            let _ = must_use_password;
            f.walrcv_connect?(conninfo.as_ptr(), true, app, &mut err)
        };
        #[cfg(feature = "pg16")]
        let conn = f.walrcv_connect?(conninfo.as_ptr(), true, must_use_password, app, &mut err);
        #[cfg(not(any(feature = "pg15", feature = "pg16")))]
        let conn = f.walrcv_connect?(
            conninfo.as_ptr(),
            false,
            false,
            must_use_password,
            app,
            &mut err,
        );
        if conn.is_null() {
            return None;
        }
        let mut types = [pg_sys::INT8OID];
        let res = f.walrcv_exec?(
            conn,
            // A publisher that is a standby (logical decoding on a standby, 16 and later) has
            // no flush position of its own: what it has replayed is what it can send.
            c"SELECT ((CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_flush_lsn() END) OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.int8".as_ptr(),
            1,
            types.as_mut_ptr(),
        );
        let mut end = None;
        if !res.is_null() && (*res).status == pg_sys::WalRcvExecStatus::WALRCV_OK_TUPLES {
            let slot =
                pg_sys::MakeSingleTupleTableSlot((*res).tupledesc, &pg_sys::TTSOpsMinimalTuple);
            if pg_sys::tuplestore_gettupleslot((*res).tuplestore, true, false, slot) {
                pg_sys::slot_getsomeattrs_int(slot, 1);
                if !*(*slot).tts_isnull {
                    end = Some((*(*slot).tts_values).value() as i64);
                }
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
        }
        if let Some(disconnect) = f.walrcv_disconnect {
            disconnect(conn);
        }
        end
    }
}

/// Writes this server's claim, reads the others' on its pair, and gives both to the protocol
/// ([`crate::core::worker::Worker::refreshed`]), which sets or clears the refusal; says what it
/// concluded. `now_ms` is the worker's monotonic clock.
pub fn refresh(worker: &mut Worker, settings: &Settings, now_ms: u64) {
    let me = settings.system_identifier;
    let node = settings.node;
    let (dc, w) = (node.datacenter(), node.worker());
    // An error in the transaction ends the worker, and the protocol's state with it.
    let mut protocol = std::panic::AssertUnwindSafe(&mut *worker);
    let read = BackgroundWorker::transaction(move || {
        Spi::run("SET LOCAL synchronous_commit = off").expect("set synchronous_commit");
        // Our own row as it is now, before we write it again: a version we did not write came
        // from another server with our system identifier (see [`crate::core::fleet::CopyWatch`]).
        let own = own_claim();
        // The highest ID we may have issued, and the pairs we left (the old pair joins them, with
        // the last ID we may have issued there, if we moved: a floor for its next holder).
        let (lease_id, left) = {
            let state = GENERATOR.share().state;
            protocol.claim_row(own.as_ref(), &own_left_pairs(), node, &state)
        };
        let token = node_token();
        // Delete and insert rather than update: a peer that subscribed after our row was made
        // (copy_data = false) has no row to update, and would never learn of us. Only our own
        // row: a claim of another system identifier is another server's, whatever its token.
        // The claim's lease_id never goes down (see `record_lease`).
        let written = write_own_claim(
            &format!(
                "WITH old AS (DELETE FROM _snowflake.claims
                               WHERE system_identifier OPERATOR(pg_catalog.=) $1 RETURNING lease_id)
                 INSERT INTO _snowflake.claims
                        (system_identifier, node_token, datacenter_id, worker_id, last_seen, lease_id,
                         retired, left_pairs)
                 VALUES ($1, $2, $3, $4, pg_catalog.now(),
                         GREATEST($5, (SELECT pg_catalog.max(old.lease_id) FROM old)), false, $6)
                 {RETURNING_STAMP}"
            ),
            &[
                me.into(),
                token.into(),
                (dc as i32).into(),
                (w as i32).into(),
                lease_id.into(),
                left.clone().into(),
            ],
        )
        .expect("the claim written");
        let stated = Claim {
            system_identifier: me,
            datacenter: dc,
            worker: w,
            version: written.last_seen_unix_ms,
            ..written
        };
        (
            Refreshed {
                own_before: own,
                written,
                claims: read_claims(),
                left_pairs: read_left_pairs(),
                paths: read_paths(),
            },
            stated,
            left,
        )
    });
    let (mut read, stated, left) = read;
    // The other Citus nodes' claims, as the Citus worker last asked them: judged by the same
    // rule as the rows replication brings, each node a path.
    let peers = crate::citus::peers(now_ms, me);
    read.claims.extend(peers.claims);
    read.left_pairs.extend(peers.left_pairs);
    read.paths.extend(peers.paths);
    let view = {
        let mut g = GENERATOR.exclusive();
        let view =
            worker.refreshed_with_copies(now_ms, read, &peers.copies, settings, &mut g.state);
        g.conflict = view.conflict.unwrap_or(Claim::NONE);
        g.claims_stale = view.claims_stale;
        g.paths_stale = view.paths_stale;
        g.refreshed_at = crate::generator::monotonic_ms();
        // The pair's own refusal (a Citus group not known or changed) stands whatever the claims say.
        if g.pair.refuses() {
            g.state.set_refused(true);
        }
        // What other Citus nodes read in `snowflake.fleet_claim`: the row just committed (its
        // `last_seen`, a new value at every refresh, is the version they watch).
        g.own_claim = stated;
        let keep = &left[left.len().saturating_sub(g.own_left.len())..];
        g.own_left[..keep.len()].copy_from_slice(keep);
        g.own_left_len = keep.len() as u32;
        view
    };
    for event in view.events {
        match event {
            PathEvent::Broke { subscription, why } => warning!(
                "snowflake: subscription \"{subscription}\" carries _snowflake.claims to this server and is not applying: {why}; other servers' claims may be out of date, so until it has applied again for {} s no claim on datacenter_id {dc} and worker_id {w} expires",
                crate::core::fleet::MIN_EXPIRY_MS / 1000
            ),
            PathEvent::Recovered { subscription } => log!(
                "snowflake: subscription \"{subscription}\" applies _snowflake.claims again"
            ),
            // What the operator can do differs: 15 has no `origin` option, so every subscription
            // may relay and only retiring helps; 16 and later can subscribe directly.
            PathEvent::Relays { subscription } if cfg!(feature = "pg15") => log!(
                "snowflake: subscription \"{subscription}\" carries _snowflake.claims and may relay other servers' claims, so no claim on datacenter_id {dc} and worker_id {w} expires here while it exists; retire a server that leaves"
            ),
            PathEvent::Relays { subscription } => log!(
                "snowflake: subscription \"{subscription}\" carries _snowflake.claims with origin = any, so no claim on datacenter_id {dc} and worker_id {w} expires here while it exists; subscribe directly to each server whose claims it brings, then set origin = none"
            ),
        }
    }
    if let Some(c) = view.copy_announced {
        copy_warning(dc, w, &c);
    }
    match (view.before, view.conflict) {
        (None, Some(c)) if c.system_identifier == me => warning!(
            "snowflake datacenter_id {dc} and worker_id {w} are also used by another server with this server's own system identifier {me} (a physical copy): snowflake_nextval() refuses until its claims stop arriving"
        ),
        (None, Some(c)) => warning!(
            "snowflake datacenter_id {dc} and worker_id {w} are also claimed by the server with system identifier {}: snowflake_nextval() refuses until that claim is gone",
            c.system_identifier
        ),
        (Some(_), None) => log!(
            "snowflake datacenter_id {dc} and worker_id {w} are no longer claimed by another server: snowflake_nextval() issues IDs again"
        ),
        _ => {}
    }
}

pub fn last_seen(c: &Claim) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(c.last_seen_unix_ms)).ok()
}

/// The error of `snowflake_nextval()` while another live server claims our pair.
pub fn refuse() -> ! {
    let node = crate::generator::node();
    let (other, stale) = {
        let g = GENERATOR.share();
        (g.conflict().unwrap_or(Claim::NONE), g.claims_stale)
    };
    let seen = last_seen(&other)
        .map(|t| t.to_string())
        .unwrap_or_else(|| format!("{} ms after 1970", other.last_seen_unix_ms));
    if other.system_identifier == system_identifier() {
        copy_claimed(
            node.datacenter(),
            node.worker(),
            other.system_identifier,
            &seen,
            config::claim_expiry_ms() / 1000,
        )
    }
    node_claimed(
        node.datacenter(),
        node.worker(),
        other.system_identifier,
        &seen,
        config::claim_expiry_ms() / 1000,
        stale,
    )
}

// The errors of this module (reported through [`crate::errors::raise`]).

/// Another live server claims our (datacenter, worker): issuing would repeat its IDs.
fn node_claimed(
    datacenter: u32,
    worker: u32,
    other_system_identifier: i64,
    other_last_seen: &str,
    expiry_s: u64,
    claims_stale: bool,
) -> ! {
    // Which server it is, and the UPDATE that retires it, only for those who may see system
    // identifiers (docs/security.md, "Status queries"): others read the rest and ask them.
    let other = if errors::sees_server() {
        format!("The server with system identifier {other_system_identifier}")
    } else {
        "Another server (snowflake_node() names it to pg_monitor)".to_string()
    };
    let retire = if errors::sees_server() {
        format!("UPDATE _snowflake.claims SET retired = true WHERE system_identifier = {other_system_identifier}")
    } else {
        "UPDATE _snowflake.claims SET retired = true WHERE system_identifier = <the one snowflake_node() names>".to_string()
    };
    let stale = if claims_stale {
        " Claims may be out of date here: a subscription that carries _snowflake.claims to this server is not applying, or relays claims from third servers (origin = any), and the server log names it; a server whose claims stop arriving cannot be told from one that left, so no claim expires while that lasts."
    } else {
        ""
    };
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake datacenter_id {datacenter} and worker_id {worker} are also used by another server"
        ),
        Some(format!(
            "{other} claimed them, last seen at {other_last_seen}; two servers with one pair generate the same IDs, so this server generates none until that claim is gone.{stale}"
        )),
        Some(&format!(
            "Give one of the two servers another snowflake.worker_id (or datacenter_id) and restart it. If the other server no longer runs, {}, or retire it now (it stays as the floor for this pair): {retire}.",
            if claims_stale && cfg!(feature = "pg15") {
                // 15 has no origin = none: a relaying path can only be ended, not made direct.
                "its claim does not expire while a path is not applying or relays (on PostgreSQL 15 every subscription may relay): repair a path that is not applying".to_string()
            } else if claims_stale {
                "its claim does not expire while a path is not applying or relays: repair the path (for one that relays, first subscribe directly to every server whose claims it brings, then set origin = none: a claim that no path brings any more expires)".to_string()
            } else {
                format!("its claim expires once this server has seen it unchanged for {expiry_s} s")
            }
        )),
    )
}

/// The claim of another server with this server's own system identifier arrived here (see
/// [`crate::core::fleet::CopyWatch`]): said once per sighting, whatever pair it is on.
fn copy_warning(datacenter: u32, worker: u32, copy: &Claim) {
    let same = copy.datacenter == datacenter && copy.worker == worker;
    errors::report(
        PgLogLevel::WARNING,
        PgSqlErrorCode::ERRCODE_WARNING,
        format!(
            "snowflake: another server with this server's system identifier {} writes claims that reach this server",
            copy.system_identifier
        ),
        Some(format!(
            "A version of this server's own row in _snowflake.claims that this server did not write arrived, with datacenter_id {} and worker_id {}: only a physical copy of this server (a pg_basebackup or snapshot started beside it, a standby promoted while it runs) writes that row.{}",
            copy.datacenter,
            copy.worker,
            if same {
                " It uses this server's pair, so both issue the same IDs: this server refuses."
            } else {
                " The fleet check cannot tell the two apart (each overwrites the other's claim)."
            }
        )),
        Some("Stop the copy, or stop it from writing: a copy that must write needs a new system identifier (a new cluster made by initdb, filled by pg_dump or logical replication) and its own pair."),
    );
}

/// A physical copy of this server uses its pair (see [`crate::core::fleet::CopyWatch`]).
fn copy_claimed(
    datacenter: u32,
    worker: u32,
    system_identifier: i64,
    last_seen: &str,
    expiry_s: u64,
) -> ! {
    errors::raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowflake datacenter_id {datacenter} and worker_id {worker} are also used by a physical copy of this server"
        ),
        Some(format!(
            "Another server with this server's own system identifier {system_identifier} wrote its claim on this pair, last seen at {last_seen}: a pg_basebackup or snapshot started beside this server, or a standby promoted while it runs. Both would issue the same IDs, so this server generates none until that server's claims have stopped arriving for {expiry_s} s, and not while a subscription that brings claims here is not applying or relays claims (origin = any): this server cannot tell then whether the copy stopped."
        )),
        Some("Stop the copy; then, if a subscription here is not applying or relays claims, restart this server. A copy that must write needs a new system identifier (a new cluster made by initdb, filled by pg_dump or logical replication) and its own pair."),
    )
}
