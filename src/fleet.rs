//! The fleet check's glue (the rule itself is `core::fleet`): this server's claim in the table
//! `_snowflake.claims`, which logical replication carries between servers, refreshed by the lease
//! worker; and the error `snowflake_nextval()` raises while another live server claims our pair.
//!
//! The table lives beside the lease in `snowflake.database`. Only the server writes it (and the
//! replication that brings the peers' rows): PUBLIC has no privilege on the schema or the table.

use crate::config;
use crate::core::fleet::{conflict, Claim};
use crate::core::time::{unix_ms_to_pg_timestamp, Clock, SystemClock};
use crate::errors;
use crate::shmem::GENERATOR;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;

/// Created by the lease worker with the lease, in the same transaction.
pub const CLAIMS_DDL: &str = "
    DO $$ BEGIN
        IF to_regclass('_snowflake.node_token') IS NULL THEN
            EXECUTE format('CREATE SEQUENCE _snowflake.node_token AS bigint MINVALUE 1 START %s',
                           1 + (random() * 4e18)::bigint);
            COMMENT ON SEQUENCE _snowflake.node_token IS
              'snowflake: this server''s node token (see _snowflake.claims). Do not copy it to another server.';
        END IF;
    END $$;
    CREATE TABLE IF NOT EXISTS _snowflake.claims (
        system_identifier bigint PRIMARY KEY,
        node_token bigint NOT NULL,
        datacenter_id integer NOT NULL,
        worker_id integer NOT NULL,
        last_seen timestamptz NOT NULL
    );
    COMMENT ON TABLE _snowflake.claims IS
      'snowflake: which server (by system identifier) generates with which datacenter and worker ID; replicate it with your data';
    REVOKE ALL ON SCHEMA _snowflake FROM PUBLIC;
    REVOKE ALL ON TABLE _snowflake.claims FROM PUBLIC;
    REVOKE ALL ON SEQUENCE _snowflake.node_token FROM PUBLIC;";

/// The system identifier of this cluster: kept across restarts and crashes, and inherited by a
/// physical standby, so a promoted standby continues its primary's claim.
pub fn system_identifier() -> i64 {
    // pg_control_system() shows the same unsigned value cast to bigint.
    unsafe { pg_sys::GetSystemIdentifier() as i64 }
}

/// Writes this server's claim, reads the others' on its pair, and sets or clears the refusal.
/// `seen` is the conflict of the previous refresh, so that the start and the end of a conflict
/// are logged once each.
pub fn refresh(seen: Option<Claim>) -> Option<Claim> {
    let me = system_identifier();
    let node = config::node();
    let (dc, w) = (node.datacenter(), node.worker());
    let (token, claims) = BackgroundWorker::transaction(|| {
        let token = Spi::get_one::<i64>("SELECT last_value FROM _snowflake.node_token")
            .expect("read the node token")
            .unwrap_or(0);
        // Delete and insert rather than update: a peer that subscribed after our row was made
        // (copy_data = false) has no row to update, and would never learn of us. Our earlier
        // incarnations' claims (before a pg_upgrade) go too, on every peer.
        Spi::run(&format!(
            "SET LOCAL synchronous_commit = off;
             DELETE FROM _snowflake.claims WHERE system_identifier = {me} OR node_token = {token};
             INSERT INTO _snowflake.claims VALUES ({me}, {token}, {dc}, {w}, now());"
        ))
        .expect("write this server's claim");
        let claims = Spi::connect(|client| {
            client
                .select(
                    &format!(
                        "SELECT system_identifier, (extract(epoch FROM last_seen) * 1000)::bigint, node_token
                           FROM _snowflake.claims
                          WHERE datacenter_id = {dc} AND worker_id = {w} AND system_identifier <> {me}"
                    ),
                    None,
                    &[],
                )
                .expect("read the claims")
                .map(|row| Claim {
                    system_identifier: row.get::<i64>(1).ok().flatten().unwrap_or(0),
                    node_token: row.get::<i64>(3).ok().flatten().unwrap_or(0),
                    datacenter: dc,
                    worker: w,
                    last_seen_unix_ms: row.get::<i64>(2).ok().flatten().unwrap_or(0),
                })
                .collect::<Vec<_>>()
        });
        (token, claims)
    });
    let found = conflict(
        me,
        token,
        dc,
        w,
        &claims,
        SystemClock.now_unix_ms(),
        config::claim_expiry_ms(),
    );
    {
        let mut g = GENERATOR.exclusive();
        g.state.refused = found.is_some();
        g.conflict = found.unwrap_or(NO_CLAIM);
    }
    match (seen, found) {
        (None, Some(c)) => warning!(
            "snowflake datacenter_id {dc} and worker_id {w} are also claimed by the server with system identifier {}: snowflake_nextval() refuses until that claim is gone",
            c.system_identifier
        ),
        (Some(_), None) => log!(
            "snowflake datacenter_id {dc} and worker_id {w} are no longer claimed by another server: snowflake_nextval() issues IDs again"
        ),
        _ => {}
    }
    found
}

/// What `Shared::conflict` holds while there is none.
pub const NO_CLAIM: Claim = Claim {
    system_identifier: 0,
    node_token: 0,
    datacenter: 0,
    worker: 0,
    last_seen_unix_ms: 0,
};

pub fn last_seen(c: &Claim) -> Option<TimestampWithTimeZone> {
    TimestampWithTimeZone::try_from(unix_ms_to_pg_timestamp(c.last_seen_unix_ms)).ok()
}

/// The error of `snowflake_nextval()` while another live server claims our pair.
pub fn refuse() -> ! {
    let node = config::node();
    let other = GENERATOR.share().conflict().unwrap_or(NO_CLAIM);
    let seen = last_seen(&other)
        .map(|t| t.to_string())
        .unwrap_or_else(|| format!("{} ms after 1970", other.last_seen_unix_ms));
    errors::node_claimed(
        node.datacenter(),
        node.worker(),
        other.system_identifier,
        &seen,
        config::claim_expiry_ms() / 1000,
    )
}
