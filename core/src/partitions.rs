//! The rules of time partitions on a snowflake key: which bounds are snowflake time bounds, how
//! a bound reads from PostgreSQL's text, and which partitions a cut-off drops. The glue
//! (src/partitions.rs, src/as_owner.rs) reads the catalog and acts; these decide.

use crate::layout::{min_id, MAX_TIMESTAMP, TIMESTAMP_SHIFT};

/// One bound of a range partition as `pg_get_expr` shows it (`'123'`, `123`, `MINVALUE`,
/// `MAXVALUE`): `Some(None)` for an open end, `Some(Some(id))` for a value, `None` for anything
/// else (a bound of several columns, a value that is no bigint).
pub fn parse_bound(text: &str) -> Option<Option<i64>> {
    let t = text.trim().trim_matches('\'');
    match t {
        "MINVALUE" | "MAXVALUE" => Some(None),
        _ => t.parse::<i64>().ok().map(Some),
    }
}

/// Whether a bound is a snowflake time bound: an open end, or the first ID of a millisecond
/// (`snowflake_min_id()` of some time, a multiple of 2^22).
pub fn is_time_bound(bound: Option<i64>) -> bool {
    bound.is_none_or(|id| id >= 0 && id % (1 << TIMESTAMP_SHIFT) == 0)
}

/// The cut-off of `snowflake_drop_partitions(parent, older_than)`: partitions that end at or
/// below it are dropped. `None` when `older_than` is at or before the epoch (no ID is that
/// old); past the layout's last millisecond, every ID. `older_than_unix_ms` is `i64::MIN` for
/// `-infinity` and `i64::MAX` for `infinity`.
pub fn drop_cutoff(older_than_unix_ms: i64, epoch_ms: i64) -> Option<i64> {
    let since = i128::from(older_than_unix_ms) - i128::from(epoch_ms);
    if since <= 0 {
        None
    } else if since > i128::from(MAX_TIMESTAMP) {
        Some(i64::MAX)
    } else {
        min_id(older_than_unix_ms, epoch_ms).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::TWITTER_EPOCH_MS as E;

    #[test]
    fn bounds_read_as_pg_get_expr_writes_them() {
        assert_eq!(parse_bound("'4194304'"), Some(Some(4194304)));
        assert_eq!(parse_bound("-5"), Some(Some(-5)));
        assert_eq!(parse_bound("MINVALUE"), Some(None));
        assert_eq!(parse_bound("MAXVALUE"), Some(None));
        assert_eq!(parse_bound("'1', '2'"), None);
        assert_eq!(parse_bound("'x'"), None);
    }

    #[test]
    fn time_bounds_are_first_ids_of_a_millisecond() {
        assert!(is_time_bound(None));
        assert!(is_time_bound(Some(0)));
        assert!(is_time_bound(Some(3 << 22)));
        assert!(!is_time_bound(Some(1000)));
        assert!(!is_time_bound(Some(-(1 << 22))));
    }

    #[test]
    fn cutoffs() {
        assert_eq!(drop_cutoff(i64::MIN, E), None);
        assert_eq!(drop_cutoff(E, E), None);
        assert_eq!(drop_cutoff(E + 1, E), Some(1 << 22));
        assert_eq!(
            drop_cutoff(E + MAX_TIMESTAMP as i64, E),
            Some((MAX_TIMESTAMP as i64) << 22)
        );
        assert_eq!(drop_cutoff(E + MAX_TIMESTAMP as i64 + 1, E), Some(i64::MAX));
        assert_eq!(drop_cutoff(i64::MAX, E), Some(i64::MAX));
    }
}
