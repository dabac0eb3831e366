//! Citus-native pairs and claims: a node's pair from its Citus group, and the fleet check's claims
//! carried by Citus's own connections instead of a replication mesh.
//!
//! **The pair.** Citus numbers each node group from the coordinator's `pg_dist_groupid_seq`
//! (the coordinator is group 0) and never gives a number twice: a node removed and added again
//! gets a new one. So the group is a pair no other node of the cluster holds, and a node needs
//! nothing in its configuration but where the pair comes from ([`PairSource`]):
//!
//! * `citus`: the group is the whole 10 bits of the pair (datacenter = group / 32, worker =
//!   group % 32): groups 0 to 1023, one cluster.
//! * `citus_in_datacenter`: the configured datacenter names the cluster and the group is the
//!   worker: groups 0 to 31, for up to 32 clusters that exchange data.
//!
//! A group beyond what the source holds is refused, never wrapped: wrapping would give two
//! groups one pair.
//!
//! **The group is kept.** The lease worker records the group the first time it uses it and
//! compares it at every start and refresh ([`check_group`]): a node whose group changed (removed
//! and added again, or started from another node's backup) stops instead of switching pairs
//! silently; a DBA who has checked why lets it take the new group.
//!
//! **Claims through Citus.** Every node states its claim in a setting that only the server
//! itself can set (`snowflake.fleet_claim`, read through `pg_settings`), whose text is
//! [`claim_text`]. A node's Citus worker asks every primary node of the cluster for it over
//! Citus's own connections, and the lease worker judges the answers with the fleet rule of
//! [`crate::fleet`], as it judges rows that replication brings: a claim is live while it changes
//! here. Each node is a *path* ([`NodeAnswers`]): a node that stops answering cannot be told
//! from a node that left, so no claim expires while one does not answer.

use crate::fleet::{Claim, PathReading};
use crate::layout::{Node, MAX_DATACENTER, MAX_WORKER};

/// Where a server's datacenter and worker ID come from (`snowflake.pair_source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PairSource {
    /// `snowflake.datacenter_id` and `snowflake.worker_id`.
    Config,
    /// The Citus group, all 10 bits.
    Citus,
    /// `snowflake.datacenter_id`, and the Citus group as the worker ID.
    CitusInDatacenter,
}

impl PairSource {
    /// The setting's values, in the order the docs name them.
    pub const NAMES: [&'static str; 3] = ["config", "citus", "citus_in_datacenter"];

    pub fn parse(text: &str) -> Option<PairSource> {
        match text.trim().to_ascii_lowercase().as_str() {
            "config" => Some(PairSource::Config),
            "citus" => Some(PairSource::Citus),
            "citus_in_datacenter" => Some(PairSource::CitusInDatacenter),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Whether the pair comes from the Citus group.
    pub fn from_citus(self) -> bool {
        self != PairSource::Config
    }

    /// The highest group this source can turn into a pair.
    pub fn max_group(self) -> i64 {
        match self {
            PairSource::Config => -1,
            PairSource::Citus => i64::from((MAX_DATACENTER + 1) * (MAX_WORKER + 1) - 1),
            PairSource::CitusInDatacenter => i64::from(MAX_WORKER),
        }
    }
}

/// A group the pair source cannot turn into a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupBeyond {
    pub group: i64,
    pub max: i64,
}

/// The pair of Citus group `group` under `source` (`datacenter` is the configured one, used by
/// `citus_in_datacenter` only). Distinct groups give distinct pairs.
pub fn pair_of_group(source: PairSource, group: i64, datacenter: u32) -> Result<Node, GroupBeyond> {
    let max = source.max_group();
    if !(0..=max).contains(&group) {
        return Err(GroupBeyond { group, max });
    }
    let workers = i64::from(MAX_WORKER) + 1;
    let node = match source {
        PairSource::Config => unreachable!("no group is in range of the config source"),
        PairSource::Citus => Node::new(group / workers, group % workers),
        PairSource::CitusInDatacenter => Node::new(datacenter.into(), group),
    };
    Ok(node.expect("a group in range gives a pair in range"))
}

/// What the lease worker makes of the group recorded in `_snowflake` and the one Citus says now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupCheck {
    /// Nothing recorded and nothing read: the node is not in a Citus cluster yet (or its Citus
    /// worker has not read it yet).
    Unknown,
    /// Nothing recorded; Citus gives this group: record it (durably) before using it.
    Record(i64),
    /// The recorded group, which Citus confirms or has not been asked about yet (at start, the
    /// recorded group is used at once: IDs wait for no read of Citus's catalogs).
    Use(i64),
    /// Citus gives another group than the one recorded: refused.
    Changed { recorded: i64, now: i64 },
}

/// [`GroupCheck`] of the recorded group and the group read now (`None`: not in a cluster, or not
/// read yet).
pub fn check_group(recorded: Option<i64>, read: Option<i64>) -> GroupCheck {
    match (recorded, read) {
        (None, None) => GroupCheck::Unknown,
        (None, Some(g)) => GroupCheck::Record(g),
        (Some(r), Some(g)) if r != g => GroupCheck::Changed {
            recorded: r,
            now: g,
        },
        (Some(r), _) => GroupCheck::Use(r),
    }
}

/// The version of [`claim_text`]'s form.
const CLAIM_FORM: &str = "snowflake-claim-1";

/// A claim as the node states it in `snowflake.fleet_claim`: the form's name, then system
/// identifier, datacenter, worker, version (a number that changes at every refresh of the
/// node's claim), lease ID, last refresh (Unix ms by the node's clock, shown to people only), the
/// server's instance (a random number drawn at every start of the server: a physical copy shares
/// its original's system identifier, never its instance), and the last IDs of the pairs it left,
/// separated by spaces. Plain ASCII, so that it reads the same in a database of any encoding.
pub fn claim_text(c: &Claim, instance: i64, left_pairs: &[i64]) -> String {
    let mut t = format!(
        "{CLAIM_FORM} {} {} {} {} {} {} {instance}",
        c.system_identifier, c.datacenter, c.worker, c.version, c.lease_id, c.last_seen_unix_ms
    );
    for id in left_pairs {
        t.push_str(&format!(" {id}"));
    }
    t
}

/// A claim a node stated ([`claim_text`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stated {
    pub claim: Claim,
    pub instance: i64,
    pub left_pairs: Vec<i64>,
}

/// What a node's claim is to this server (system identifier `me`, instance `instance`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whose {
    /// This server's own answer (it is a node of the cluster too).
    Own,
    /// Another server with this server's system identifier: a physical copy of it, or its
    /// original.
    Copy,
    /// Another server's.
    Other,
}

impl Stated {
    pub fn whose(&self, me: i64, instance: i64) -> Whose {
        match (
            self.claim.system_identifier == me,
            self.instance == instance,
        ) {
            (true, true) => Whose::Own,
            (true, false) => Whose::Copy,
            (false, _) => Whose::Other,
        }
    }
}

/// The claim of [`claim_text`]; `None` for anything else (an empty text: a node whose lease
/// worker has not written a claim yet; another form: a release that states it otherwise).
pub fn parse_claim(text: &str) -> Option<Stated> {
    let mut words = text.split(' ');
    if words.next()? != CLAIM_FORM {
        return None;
    }
    let mut n = || words.next()?.parse::<i64>().ok();
    let system_identifier = n()?;
    let datacenter = u32::try_from(n()?).ok()?;
    let worker = u32::try_from(n()?).ok()?;
    let (version, lease_id, last_seen_unix_ms, instance) = (n()?, n()?, n()?, n()?);
    Node::new(datacenter.into(), worker.into()).ok()?;
    let left_pairs = words
        .map(|w| w.parse::<i64>().ok())
        .collect::<Option<Vec<_>>>()?;
    Some(Stated {
        claim: Claim {
            system_identifier,
            datacenter,
            worker,
            last_seen_unix_ms,
            version,
            lease_id,
            retired: false,
        },
        instance,
        left_pairs,
    })
}

/// One node of the Citus cluster as this node's Citus worker last asked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAnswer {
    /// `host:port`, as `pg_dist_node` names it.
    pub node: String,
    /// How many times it has answered since this node's Citus worker started.
    pub answers: u64,
    /// Its last answer's claim (`None`: no claim, e.g. no snowflake there).
    pub claim: Option<Stated>,
    /// Whether its last ask failed (it could not be reached, or the ask failed there).
    pub failing: bool,
}

/// Watches the nodes as paths: when each last answered, by the lease worker's monotonic clock.
///
/// A node's answers are its path's messages: a node whose answers stopped (unreachable, or this
/// node's own Citus worker stopped) is silent, and [`crate::fleet::PathWatch`] then keeps every
/// claim live, as it does while a subscription does not apply.
#[derive(Clone, Debug, Default)]
pub struct NodeAnswers {
    /// (node, answers, when the count last changed here)
    seen: Vec<(String, u64, u64)>,
}

impl NodeAnswers {
    /// The path readings of `nodes` at `now_ms` (a monotonic clock). `worker_pid` is this node's
    /// Citus worker (`None` while none runs: every path is then silent and has no reader).
    pub fn readings(
        &mut self,
        now_ms: u64,
        nodes: &[NodeAnswer],
        worker_pid: Option<i32>,
    ) -> Vec<PathReading> {
        let mut next = Vec::with_capacity(nodes.len());
        let readings = nodes
            .iter()
            .map(|n| {
                let prev = self.seen.iter().find(|s| s.0 == n.node);
                let since = match prev {
                    Some(&(_, answers, since)) if answers == n.answers => Some(since),
                    // A new answer (or the worker restarted and counts again).
                    _ if n.answers > 0 && !n.failing => Some(now_ms),
                    _ => prev.map(|p| p.2),
                };
                next.push((n.node.clone(), n.answers, since.unwrap_or(u64::MAX)));
                PathReading {
                    subscription: format!("Citus node {}", n.node),
                    enabled: true,
                    apply_pid: worker_pid,
                    silent_ms: since
                        .filter(|&s| s != u64::MAX && !n.failing)
                        .map(|s| now_ms.saturating_sub(s)),
                    errors: None,
                    table_state: 'r',
                    end_lsn: (n.answers > 0).then_some(n.answers as i64),
                    // Asked directly: any answer since the worker started is fresh.
                    publisher_end: Some(1),
                    limited: true,
                    relays: false,
                }
            })
            .collect();
        self.seen = next;
        readings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{PathWatch, MIN_EXPIRY_MS};

    #[test]
    fn distinct_groups_give_distinct_pairs_up_to_each_sources_limit() {
        let mut seen = std::collections::HashSet::new();
        for g in 0..=1023 {
            let n = pair_of_group(PairSource::Citus, g, 0).unwrap();
            assert!(seen.insert(n.bits()), "group {g} repeats a pair");
            assert_eq!(i64::from(n.datacenter() * 32 + n.worker()), g);
        }
        assert_eq!(
            pair_of_group(PairSource::Citus, 1024, 0),
            Err(GroupBeyond {
                group: 1024,
                max: 1023
            })
        );
        let n = pair_of_group(PairSource::CitusInDatacenter, 31, 7).unwrap();
        assert_eq!((n.datacenter(), n.worker()), (7, 31));
        assert_eq!(
            pair_of_group(PairSource::CitusInDatacenter, 32, 7),
            Err(GroupBeyond { group: 32, max: 31 })
        );
        for source in [PairSource::Citus, PairSource::CitusInDatacenter] {
            assert!(pair_of_group(source, -1, 0).is_err());
        }
        assert!(pair_of_group(PairSource::Config, 0, 0).is_err());
    }

    #[test]
    fn the_setting_names_its_sources() {
        for name in PairSource::NAMES {
            assert_eq!(PairSource::parse(name).unwrap().name(), name);
        }
        assert_eq!(PairSource::parse(" Citus "), Some(PairSource::Citus));
        assert_eq!(PairSource::parse("group"), None);
    }

    #[test]
    fn a_recorded_group_is_used_at_once_and_a_changed_one_refused() {
        assert_eq!(check_group(None, None), GroupCheck::Unknown);
        assert_eq!(check_group(None, Some(3)), GroupCheck::Record(3));
        assert_eq!(check_group(Some(3), None), GroupCheck::Use(3));
        assert_eq!(check_group(Some(3), Some(3)), GroupCheck::Use(3));
        assert_eq!(
            check_group(Some(3), Some(5)),
            GroupCheck::Changed {
                recorded: 3,
                now: 5
            }
        );
    }

    fn claim(version: i64) -> Claim {
        Claim {
            system_identifier: -7_311_234_567_890,
            datacenter: 1,
            worker: 31,
            last_seen_unix_ms: 1_800_000_000_123,
            version,
            lease_id: 1 << 40,
            retired: false,
        }
    }

    #[test]
    fn a_claim_reads_back_as_it_was_stated() {
        let c = claim(9);
        let stated = |instance, left_pairs: Vec<i64>| Stated {
            claim: c,
            instance,
            left_pairs,
        };
        assert_eq!(
            parse_claim(&claim_text(&c, 77, &[])),
            Some(stated(77, vec![]))
        );
        let left = vec![5, 1 << 33];
        assert_eq!(
            parse_claim(&claim_text(&c, -3, &left)),
            Some(stated(-3, left))
        );
        for bad in [
            "",
            "snowflake-claim-2 1 1 1 1 1 1 1",
            "snowflake-claim-1 1 1 1 1 1 1",
            "snowflake-claim-1 1 32 1 1 1 1 1",
            "snowflake-claim-1 1 1 -1 1 1 1 1",
            "snowflake-claim-1 1 1 1 1 1 1 1 x",
        ] {
            assert_eq!(parse_claim(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_claim_of_this_servers_system_identifier_from_another_instance_is_a_copy() {
        let c = claim(1);
        let me = c.system_identifier;
        let s = parse_claim(&claim_text(&c, 5, &[])).unwrap();
        assert_eq!(s.whose(me, 5), Whose::Own);
        assert_eq!(s.whose(me, 6), Whose::Copy);
        assert_eq!(s.whose(me + 1, 5), Whose::Other);
    }

    fn answer(node: &str, answers: u64, failing: bool) -> NodeAnswer {
        NodeAnswer {
            node: node.into(),
            answers,
            claim: None,
            failing,
        }
    }

    #[test]
    fn a_node_that_stops_answering_keeps_every_claim_live() {
        let mut answers = NodeAnswers::default();
        let mut paths = PathWatch::default();
        let mut t = 0;
        let mut step = |n: u64, failing: bool, t: u64| {
            let r = answers.readings(t, &[answer("w1:5432", n, failing)], Some(42));
            paths.observe(t, r);
            paths.claims_may_be_stale(t)
        };
        // Answering every 5 s: proven once it has answered for the smallest expiry.
        for n in 1..=4 {
            t += 5_000;
            step(n, false, t);
        }
        assert!(!step(5, false, t + 5_000));
        t += 5_000;
        // It stops answering (the ask fails, or the answers stop coming): stale at once when the
        // ask fails, and when it is silent for the smallest expiry.
        assert!(step(5, true, t + 5_000));
        let mut silent = NodeAnswers::default();
        let mut watch = PathWatch::default();
        let mut u = 0;
        for n in 1..=5 {
            u += 5_000;
            watch.observe(
                u,
                silent.readings(u, &[answer("w1:5432", n, false)], Some(1)),
            );
        }
        assert!(!watch.claims_may_be_stale(u));
        u += MIN_EXPIRY_MS;
        watch.observe(
            u,
            silent.readings(u, &[answer("w1:5432", 5, false)], Some(1)),
        );
        assert!(watch.claims_may_be_stale(u), "a silent node is no proof");
    }

    #[test]
    fn a_node_never_answered_and_no_citus_worker_are_no_proof() {
        let mut answers = NodeAnswers::default();
        let mut paths = PathWatch::default();
        for t in [0, 5_000, 10_000, 15_000, 20_000, 25_000] {
            paths.observe(
                t,
                answers.readings(t, &[answer("w1:5432", 0, true)], Some(1)),
            );
        }
        assert!(paths.claims_may_be_stale(25_000));
        let mut answers = NodeAnswers::default();
        let mut paths = PathWatch::default();
        for (t, n) in [(0, 1), (5_000, 2), (10_000, 3), (15_000, 4), (20_000, 5)] {
            paths.observe(t, answers.readings(t, &[answer("w1:5432", n, false)], None));
        }
        assert!(paths.claims_may_be_stale(20_000));
    }
}
