//! The 64-bit ID layout (Twitter's):
//!
//! ```text
//!  63 | 62 ........ 22 | 21 ... 17 | 16 ... 12 | 11 ..... 0
//!   0 | ms since epoch | datacenter |  worker   |  sequence
//!     |     41 bits    |   5 bits   |  5 bits   |  12 bits
//! ```
//!
//! Bit 63 is always zero so that every ID is a positive `bigint`, and the timestamp sits in the
//! most significant bits so that IDs sort by time.

use std::fmt;

pub const TIMESTAMP_BITS: u32 = 41;
pub const DATACENTER_BITS: u32 = 5;
pub const WORKER_BITS: u32 = 5;
pub const SEQUENCE_BITS: u32 = 12;

pub const WORKER_SHIFT: u32 = SEQUENCE_BITS;
pub const DATACENTER_SHIFT: u32 = SEQUENCE_BITS + WORKER_BITS;
pub const TIMESTAMP_SHIFT: u32 = SEQUENCE_BITS + WORKER_BITS + DATACENTER_BITS;

pub const MAX_TIMESTAMP: u64 = (1 << TIMESTAMP_BITS) - 1;
pub const MAX_DATACENTER: u32 = (1 << DATACENTER_BITS) - 1;
pub const MAX_WORKER: u32 = (1 << WORKER_BITS) - 1;
pub const MAX_SEQUENCE: u32 = (1 << SEQUENCE_BITS) - 1;

/// Everything below the timestamp: datacenter, worker and sequence bits.
pub const LOW_BITS_MASK: u64 = (1 << TIMESTAMP_SHIFT) - 1;

/// Twitter's epoch, 2010-11-04 01:42:54.657 UTC, in milliseconds since the Unix epoch.
pub const TWITTER_EPOCH_MS: i64 = 1_288_834_974_657;

/// The fields of one ID. `ms` counts milliseconds since the generator's epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    pub ms: u64,
    pub datacenter: u32,
    pub worker: u32,
    pub sequence: u32,
}

/// Why a value cannot be turned into an ID, or an ID into its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// IDs are never negative: bit 63 is reserved.
    NegativeId(i64),
    /// A field does not fit in its bits.
    FieldOutOfRange {
        field: &'static str,
        value: i64,
        max: u32,
    },
    /// The instant lies before the epoch.
    BeforeEpoch { unix_ms: i64, epoch_ms: i64 },
    /// The instant lies past the last millisecond that 41 bits can hold.
    PastEnd { unix_ms: i64, epoch_ms: i64 },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::NegativeId(id) => write!(f, "snowflake ID {id} is negative"),
            LayoutError::FieldOutOfRange { field, value, max } => {
                write!(f, "{field} {value} is outside the valid range (0 .. {max})")
            }
            LayoutError::BeforeEpoch { .. } => write!(f, "timestamp is before the snowflake epoch"),
            LayoutError::PastEnd { .. } => {
                write!(
                    f,
                    "timestamp is past the last millisecond a snowflake ID can hold"
                )
            }
        }
    }
}

/// The node's datacenter and worker bits, shifted into place once so that the hot path only ORs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Node {
    bits: u64,
}

impl Node {
    pub fn new(datacenter: i64, worker: i64) -> Result<Node, LayoutError> {
        let datacenter = check_field("datacenter_id", datacenter, MAX_DATACENTER)?;
        let worker = check_field("worker_id", worker, MAX_WORKER)?;
        Ok(Node {
            bits: (u64::from(datacenter) << DATACENTER_SHIFT) | (u64::from(worker) << WORKER_SHIFT),
        })
    }

    /// Rebuilds a node from `bits()`; anything outside the node's bits is dropped.
    pub const fn from_bits(bits: u64) -> Node {
        Node {
            bits: bits
                & (((MAX_DATACENTER as u64) << DATACENTER_SHIFT)
                    | ((MAX_WORKER as u64) << WORKER_SHIFT)),
        }
    }

    pub fn datacenter(self) -> u32 {
        ((self.bits >> DATACENTER_SHIFT) & u64::from(MAX_DATACENTER)) as u32
    }

    pub fn worker(self) -> u32 {
        ((self.bits >> WORKER_SHIFT) & u64::from(MAX_WORKER)) as u32
    }

    pub fn bits(self) -> u64 {
        self.bits
    }
}

fn check_field(field: &'static str, value: i64, max: u32) -> Result<u32, LayoutError> {
    if (0..=i64::from(max)).contains(&value) {
        Ok(value as u32)
    } else {
        Err(LayoutError::FieldOutOfRange { field, value, max })
    }
}

/// Builds an ID from already-validated pieces: the hot path's composition.
#[inline]
pub fn assemble(ms: u64, node: Node, sequence: u32) -> i64 {
    debug_assert!(ms <= MAX_TIMESTAMP && sequence <= MAX_SEQUENCE);
    ((ms << TIMESTAMP_SHIFT) | node.bits | u64::from(sequence)) as i64
}

/// Builds an ID from user-supplied fields, checking each one.
pub fn compose(ms: u64, datacenter: i64, worker: i64, sequence: i64) -> Result<i64, LayoutError> {
    let node = Node::new(datacenter, worker)?;
    let sequence = check_field("sequence", sequence, MAX_SEQUENCE)?;
    if ms > MAX_TIMESTAMP {
        return Err(LayoutError::FieldOutOfRange {
            field: "timestamp",
            value: ms as i64,
            max: u32::MAX,
        });
    }
    Ok(assemble(ms, node, sequence))
}

pub fn decompose(id: i64) -> Result<Parts, LayoutError> {
    if id < 0 {
        return Err(LayoutError::NegativeId(id));
    }
    let id = id as u64;
    Ok(Parts {
        ms: id >> TIMESTAMP_SHIFT,
        datacenter: ((id >> DATACENTER_SHIFT) & u64::from(MAX_DATACENTER)) as u32,
        worker: ((id >> WORKER_SHIFT) & u64::from(MAX_WORKER)) as u32,
        sequence: (id & u64::from(MAX_SEQUENCE)) as u32,
    })
}

/// Milliseconds since the Unix epoch of the instant an ID carries.
pub fn unix_ms_of(id: i64, epoch_ms: i64) -> Result<i64, LayoutError> {
    Ok(decompose(id)?.ms as i64 + epoch_ms)
}

/// Converts a Unix-epoch instant to the ID's timestamp field, refusing what 41 bits cannot hold.
pub fn ms_since_epoch(unix_ms: i64, epoch_ms: i64) -> Result<u64, LayoutError> {
    let ms = i128::from(unix_ms) - i128::from(epoch_ms);
    if ms < 0 {
        Err(LayoutError::BeforeEpoch { unix_ms, epoch_ms })
    } else if ms > i128::from(MAX_TIMESTAMP) {
        Err(LayoutError::PastEnd { unix_ms, epoch_ms })
    } else {
        Ok(ms as u64)
    }
}

/// The smallest ID that can carry this millisecond: every ID issued at or after it is `>=`.
pub fn min_id(unix_ms: i64, epoch_ms: i64) -> Result<i64, LayoutError> {
    Ok((ms_since_epoch(unix_ms, epoch_ms)? << TIMESTAMP_SHIFT) as i64)
}

/// The largest ID that can carry this millisecond: every ID issued at or before it is `<=`.
pub fn max_id(unix_ms: i64, epoch_ms: i64) -> Result<i64, LayoutError> {
    Ok(((ms_since_epoch(unix_ms, epoch_ms)? << TIMESTAMP_SHIFT) | LOW_BITS_MASK) as i64)
}

/// Test vectors, computed from the layout with Twitter's epoch and each checked by hand:
/// (id, Unix ms, datacenter, worker, sequence). The core's tests and the SQL tests
/// (tests/sql_api.rs) both check them.
pub const TEST_VECTORS: [(i64, i64, u32, u32, u32); 5] = [
    (910_499_571_847_892_992, 1_505_914_988_849, 17, 25, 0),
    (0, TWITTER_EPOCH_MS, 0, 0, 0),
    (
        i64::MAX,
        TWITTER_EPOCH_MS + MAX_TIMESTAMP as i64,
        31,
        31,
        4095,
    ),
    (4_194_304, TWITTER_EPOCH_MS + 1, 0, 0, 0),
    (135_168, TWITTER_EPOCH_MS, 1, 1, 0),
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn test_vectors_decode_and_compose() {
        for (id, unix_ms, dc, w, seq) in TEST_VECTORS {
            let p = decompose(id).unwrap();
            assert_eq!(
                (p.datacenter, p.worker, p.sequence),
                (dc, w, seq),
                "id {id}"
            );
            assert_eq!(
                unix_ms_of(id, TWITTER_EPOCH_MS).unwrap(),
                unix_ms,
                "id {id}"
            );
            let ms = ms_since_epoch(unix_ms, TWITTER_EPOCH_MS).unwrap();
            assert_eq!(compose(ms, dc.into(), w.into(), seq.into()).unwrap(), id);
        }
    }

    #[test]
    fn negative_ids_and_out_of_range_fields_are_refused() {
        assert_eq!(decompose(-1), Err(LayoutError::NegativeId(-1)));
        assert!(decompose(i64::MIN).is_err());
        assert!(compose(0, 32, 0, 0).is_err());
        assert!(compose(0, 0, -1, 0).is_err());
        assert!(compose(0, 0, 0, 4096).is_err());
        assert!(compose(MAX_TIMESTAMP + 1, 0, 0, 0).is_err());
        assert!(Node::new(0, 32).is_err());
    }

    #[test]
    fn time_range_bounds() {
        let e = TWITTER_EPOCH_MS;
        assert_eq!(min_id(e, e), Ok(0));
        assert_eq!(max_id(e + MAX_TIMESTAMP as i64, e), Ok(i64::MAX));
        assert!(matches!(
            min_id(e - 1, e),
            Err(LayoutError::BeforeEpoch { .. })
        ));
        assert!(matches!(
            max_id(e + MAX_TIMESTAMP as i64 + 1, e),
            Err(LayoutError::PastEnd { .. })
        ));
        assert!(ms_since_epoch(i64::MIN, e).is_err() && ms_since_epoch(i64::MAX, e).is_err());
    }

    proptest! {
        #[test]
        fn compose_decompose_round_trip(ms in 0..=MAX_TIMESTAMP, dc in 0..=31i64, w in 0..=31i64, s in 0..=4095i64) {
            let id = compose(ms, dc, w, s).unwrap();
            prop_assert!(id >= 0);
            let p = decompose(id).unwrap();
            prop_assert_eq!(p, Parts { ms, datacenter: dc as u32, worker: w as u32, sequence: s as u32 });
        }

        #[test]
        fn every_id_of_a_millisecond_lies_within_its_bounds(ms in 0..=MAX_TIMESTAMP, dc in 0..=31i64, w in 0..=31i64, s in 0..=4095i64) {
            let unix = ms as i64 + TWITTER_EPOCH_MS;
            let id = compose(ms, dc, w, s).unwrap();
            prop_assert!(min_id(unix, TWITTER_EPOCH_MS).unwrap() <= id);
            prop_assert!(id <= max_id(unix, TWITTER_EPOCH_MS).unwrap());
            if ms > 0 {
                prop_assert!(max_id(unix - 1, TWITTER_EPOCH_MS).unwrap() < id);
            }
        }

        #[test]
        fn decompose_accepts_every_non_negative_id(id in 0..=i64::MAX) {
            let p = decompose(id).unwrap();
            prop_assert_eq!(compose(p.ms, p.datacenter.into(), p.worker.into(), p.sequence.into()).unwrap(), id);
        }
    }
}
