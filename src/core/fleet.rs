//! The fleet check: two servers that generate with the same datacenter and worker ID issue the
//! same IDs. Every server states a claim, `(datacenter_id, worker_id)` under its PostgreSQL system
//! identifier, in a table that logical replication carries to its peers and that it refreshes
//! while it runs. A server that sees a live claim on its own pair from another system identifier
//! stops issuing until that claim is gone.
//!
//! The system identifier is what makes this free of false alarms: it survives restarts and
//! crashes, and a promoted physical standby inherits it from its primary, so a server never
//! conflicts with its own past or with its predecessor. pg_upgrade makes a new system identifier,
//! so each claim also carries a node token: a random number kept in a sequence, which pg_upgrade
//! and dump/restore carry with the data but logical replication does not. A claim with our token
//! is our own earlier incarnation. A claim that nobody refreshes expires.
//!
//! Each claim also carries the highest ID its server may have issued (`lease_id`, its lease), and
//! a retired server's claim stays as a tombstone (`retired`). A server never issues below the
//! `lease_id` of another server's claim on its own pair, live, expired or retired: a pair handed
//! from one server to another continues above every ID the previous holder issued, however far
//! ahead of the new holder's clock those ran.

/// How often a running server refreshes its claim.
pub const REFRESH_MS: u64 = 5_000;
/// The smallest expiry that still spans three refreshes, so that a peer's claim does not expire
/// between two of its refreshes.
pub const MIN_EXPIRY_MS: u64 = 3 * REFRESH_MS;

/// One row of the claims table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub system_identifier: i64,
    pub node_token: i64,
    pub datacenter: u32,
    pub worker: u32,
    /// When its server last refreshed it, in Unix ms by that server's clock.
    pub last_seen_unix_ms: i64,
    /// The highest ID its server may have issued (from its lease), 0 if unknown.
    pub lease_id: i64,
    /// Retired by a DBA (the retire recipe): never a conflict, but still a floor.
    pub retired: bool,
}

/// Another server's claim on our pair: not ours, and not our own earlier incarnation.
fn others_on_our_pair(
    me: i64,
    my_token: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
) -> impl Iterator<Item = &Claim> {
    claims
        .iter()
        .filter(move |c| c.system_identifier != me && c.node_token != my_token)
        .filter(move |c| c.datacenter == datacenter && c.worker == worker)
}

/// Another server's live claim on our pair, if any: the most recently seen one.
///
/// `now_unix_ms` is our clock; the claim's time is its server's clock, so clock skew between
/// the two shortens or lengthens the expiry by that much.
pub fn conflict(
    me: i64,
    my_token: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
    now_unix_ms: i64,
    expiry_ms: u64,
) -> Option<Claim> {
    others_on_our_pair(me, my_token, datacenter, worker, claims)
        .filter(|c| !c.retired)
        .filter(|c| now_unix_ms.saturating_sub(c.last_seen_unix_ms) < expiry_ms as i64)
        .max_by_key(|c| c.last_seen_unix_ms)
        .copied()
}

/// The highest ID that another server, live, expired or retired, may have issued on our pair:
/// ours must all be above it. `None` when no such claim knows of one.
pub fn handover_floor(
    me: i64,
    my_token: i64,
    datacenter: u32,
    worker: u32,
    claims: &[Claim],
) -> Option<i64> {
    others_on_our_pair(me, my_token, datacenter, worker, claims)
        .map(|c| c.lease_id)
        .filter(|&id| id > 0)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn claim(sysid: i64, dc: u32, w: u32, seen: i64) -> Claim {
        Claim {
            system_identifier: sysid,
            node_token: sysid * 1000,
            datacenter: dc,
            worker: w,
            last_seen_unix_ms: seen,
            lease_id: 0,
            retired: false,
        }
    }

    const NOW: i64 = 1_800_000_000_000;
    const EXPIRY: u64 = 60_000;

    #[test]
    fn own_claims_never_conflict() {
        // A restart, a crash, or a promoted standby: the same system identifier.
        let claims = [claim(42, 1, 5, NOW), claim(42, 1, 5, NOW - 1)];
        assert_eq!(conflict(42, 42_000, 1, 5, &claims, NOW, EXPIRY), None);
    }

    #[test]
    fn an_earlier_incarnation_never_conflicts() {
        // pg_upgrade: a new system identifier, the same node token, and the old claim is fresh.
        let old = Claim {
            system_identifier: 7,
            node_token: 42_000,
            lease_id: 1,
            ..claim(7, 1, 5, NOW - 1_000)
        };
        assert_eq!(conflict(42, 42_000, 1, 5, &[old], NOW, EXPIRY), None);
        assert_eq!(
            handover_floor(42, 42_000, 1, 5, &[old]),
            None,
            "our own mark covers it"
        );
    }

    #[test]
    fn distinct_pairs_never_conflict() {
        let claims: Vec<Claim> = (0..32)
            .flat_map(|dc: u32| {
                (0..32u32).map(move |w| claim(1000 + (dc * 32 + w) as i64, dc, w, NOW))
            })
            .filter(|c| (c.datacenter, c.worker) != (1, 5))
            .collect();
        assert_eq!(conflict(42, 42_000, 1, 5, &claims, NOW, EXPIRY), None);
    }

    #[test]
    fn a_live_claim_on_our_pair_from_another_server_conflicts() {
        let claims = [claim(7, 1, 5, NOW - 10_000), claim(8, 1, 5, NOW - 2_000)];
        assert_eq!(
            conflict(42, 42_000, 1, 5, &claims, NOW, EXPIRY),
            Some(claim(8, 1, 5, NOW - 2_000)),
            "the most recently seen one"
        );
    }

    #[test]
    fn a_claim_expires_after_the_expiry() {
        let claims = [claim(7, 1, 5, NOW - 60_000)];
        assert_eq!(conflict(42, 42_000, 1, 5, &claims, NOW, EXPIRY), None);
        assert!(conflict(42, 42_000, 1, 5, &claims, NOW - 1, EXPIRY).is_some());
        // A peer whose clock runs ahead looks fresh for longer, never the other way round.
        let ahead = [claim(7, 1, 5, NOW + 5_000)];
        assert!(conflict(42, 42_000, 1, 5, &ahead, NOW, EXPIRY).is_some());
    }

    /// A peer that refreshes every REFRESH_MS but misses up to two refreshes in a row (a slow
    /// transaction, a busy disk) stays live at every instant under the smallest expiry allowed.
    #[test]
    fn the_smallest_expiry_outlives_two_missed_refreshes() {
        for missed in 0..=2u64 {
            let last_refresh = NOW - 1;
            let next_refresh = last_refresh + ((missed + 1) * REFRESH_MS) as i64;
            for now in (last_refresh..next_refresh).step_by(7) {
                let claims = [claim(7, 1, 5, last_refresh)];
                assert!(
                    conflict(42, 42_000, 1, 5, &claims, now, MIN_EXPIRY_MS).is_some(),
                    "a peer that missed {missed} refreshes looked expired {} ms after its last",
                    now - last_refresh
                );
            }
        }
    }

    #[test]
    fn a_retired_claim_never_conflicts_but_is_a_floor() {
        let tombstone = Claim {
            lease_id: 9_000_000,
            retired: true,
            ..claim(7, 1, 5, NOW)
        };
        let expired = Claim {
            lease_id: 5_000_000,
            ..claim(8, 1, 5, NOW - 10 * EXPIRY as i64)
        };
        let other_pair = Claim {
            lease_id: 99_000_000,
            ..claim(9, 1, 6, NOW)
        };
        let mine = Claim {
            lease_id: 77_000_000,
            ..claim(42, 1, 5, NOW)
        };
        let claims = [tombstone, expired, other_pair, mine];
        assert_eq!(conflict(42, 42_000, 1, 5, &claims, NOW, EXPIRY), None);
        assert_eq!(handover_floor(42, 42_000, 1, 5, &claims), Some(9_000_000));
        assert_eq!(handover_floor(42, 42_000, 2, 5, &claims), None);
        // A live claim is both: a conflict now, and a floor once it is gone.
        let live = Claim {
            lease_id: 12_000_000,
            ..claim(10, 1, 5, NOW)
        };
        assert!(conflict(42, 42_000, 1, 5, &[live], NOW, EXPIRY).is_some());
        assert_eq!(
            handover_floor(42, 42_000, 1, 5, &[live, tombstone]),
            Some(12_000_000)
        );
    }

    proptest! {
        /// Whatever the claims, a conflict is always someone else's live claim on our pair.
        #[test]
        fn a_conflict_is_always_someone_elses_live_claim_on_our_pair(
            // Ages from 10 s in the future (a peer's clock ahead) to 200 s old: past any expiry
            // drawn below, so both live and expired claims occur.
            rows in proptest::collection::vec((0i64..6, 0u32..3, 0u32..3, -10_000i64..200_000), 0..20),
            me in 0i64..6,
            expiry in 15_000u64..120_000,
        ) {
            let claims: Vec<Claim> = rows.iter().map(|&(s, d, w, age)| claim(s, d, w, NOW - age)).collect();
            let got = conflict(me, me * 1000, 1, 1, &claims, NOW, expiry);
            let expected_any = claims.iter().any(|c| c.system_identifier != me
                && (c.datacenter, c.worker) == (1, 1)
                && NOW - c.last_seen_unix_ms < expiry as i64);
            prop_assert_eq!(got.is_some(), expected_any);
            if let Some(c) = got {
                prop_assert!(c.system_identifier != me);
                prop_assert_eq!((c.datacenter, c.worker), (1, 1));
            }
        }
    }
}
