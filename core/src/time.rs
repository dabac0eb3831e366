//! Time conversions the SQL layer needs, kept free of pgrx: parsing the `snowflake.epoch`
//! setting, PostgreSQL timestamps (µs since 2000-01-01) to Unix milliseconds, and the clock.

/// Milliseconds between the Unix epoch and PostgreSQL's (2000-01-01 00:00:00 UTC).
pub const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// The first Unix millisecond past PostgreSQL's last timestamp (294276 AD: its `END_TIMESTAMP`,
/// 9223371331200000000 us after 2000-01-01).
pub const PG_END_UNIX_MS: i64 = 9_223_371_331_200_000 + PG_EPOCH_UNIX_MS;

/// The latest epoch whose whole 41-bit range PostgreSQL's timestamps hold: every ID of it has a
/// timestamp, and no sum of an epoch and a snowflake timestamp overflows.
pub const LATEST_EPOCH_UNIX_MS: i64 = PG_END_UNIX_MS - 1 - crate::layout::MAX_TIMESTAMP as i64;

/// Where the clock comes from: injected so that the policy is tested with any clock.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_unix_ms(&self) -> i64;
}

/// The real wall clock, `clock_gettime(CLOCK_REALTIME)` (libfaketime can move it in tests).
/// Called directly rather than through `SystemTime`, whose `Result` and `Duration` arithmetic
/// cost more than the vDSO call itself on the hot path.
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now_unix_ms(&self) -> i64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and a valid out-pointer; CLOCK_REALTIME cannot fail.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
    }
}

/// A PostgreSQL `timestamptz` (µs since 2000-01-01 UTC) as whole Unix milliseconds, rounding
/// down so that a timestamp falls in the millisecond that contains it. `None` for ±infinity.
pub fn pg_timestamp_to_unix_ms(us: i64) -> Option<i64> {
    if us == i64::MIN || us == i64::MAX {
        return None;
    }
    Some(us.div_euclid(1000) + PG_EPOCH_UNIX_MS)
}

/// Unix milliseconds as a PostgreSQL `timestamptz`; every millisecond an ID can carry fits.
pub fn unix_ms_to_pg_timestamp(ms: i64) -> i64 {
    (ms - PG_EPOCH_UNIX_MS) * 1000
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day counted from 1970-01-01 (the inverse of `days_from_civil`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Unix milliseconds as a UTC timestamp in PostgreSQL's ISO output, for log lines:
/// `2026-11-27 05:12:01.123+00`.
pub fn unix_ms_text(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = civil_from_days(days);
    let (h, min, sec, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{sec:02}.{milli:03}+00")
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses the `snowflake.epoch` setting into Unix milliseconds. Accepted forms:
/// an integer number of milliseconds since 1970 (`1288834974657`), a date (`2015-01-01`, UTC),
/// or a date and time with an optional fraction and zone
/// (`2015-01-01 00:00:00+00`, `2015-01-01T00:00:00.5Z`, `2015-01-01 02:00+02:00`);
/// without a zone the time is UTC, never the server's local zone, so that the epoch cannot
/// change with `timezone`.
pub fn parse_epoch(text: &str) -> Result<i64, String> {
    let s = text.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map_err(|_| format!("\"{s}\" is too large"));
    }
    let bad = || {
        format!("\"{s}\" is not a timestamp such as \"2015-01-01 00:00:00+00\" or milliseconds since 1970")
    };
    let num = |part: &str, len: usize| -> Result<i64, String> {
        if part.len() == len && part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (date, rest) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], s[i + 1..].trim_start()),
        None => (s, ""),
    };
    let mut dp = date.split('-');
    let (y, m, d) = match (dp.next(), dp.next(), dp.next(), dp.next()) {
        (Some(y), Some(m), Some(d), None) => (num(y, 4)?, num(m, 2)?, num(d, 2)?),
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(bad());
    }
    let mut ms = days_from_civil(y, m, d) * 86_400_000;
    if rest.is_empty() {
        return Ok(ms);
    }
    // Split the time from its zone: the zone starts at 'Z', "UTC", '+' or '-'.
    let zpos = rest
        .find(['Z', 'z', '+', '-', ' ', 'U', 'u'])
        .unwrap_or(rest.len());
    let (time, zone) = (&rest[..zpos], rest[zpos..].trim());
    let (hms, frac) = match time.split_once('.') {
        Some((a, b)) => (a, b),
        None => (time, ""),
    };
    let mut tp = hms.split(':');
    let (h, mi, sec) = match (tp.next(), tp.next(), tp.next(), tp.next()) {
        (Some(h), Some(mi), None, None) => (num(h, 2)?, num(mi, 2)?, 0),
        (Some(h), Some(mi), Some(sec), None) => (num(h, 2)?, num(mi, 2)?, num(sec, 2)?),
        _ => return Err(bad()),
    };
    if h > 23 || mi > 59 || sec > 59 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let frac_ms = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0, |a, b| a * 10 + i64::from(b - b'0'));
    ms += ((h * 60 + mi) * 60 + sec) * 1000 + frac_ms;
    let offset_min = match zone {
        "" | "Z" | "z" | "UTC" | "utc" | "GMT" => 0,
        z if z.starts_with('+') || z.starts_with('-') => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            let (oh, om) = match digits.len() {
                2 => (num(&digits, 2)?, 0),
                4 => (num(&digits[..2], 2)?, num(&digits[2..], 2)?),
                _ => return Err(bad()),
            };
            if oh > 15 || om > 59 {
                return Err(bad());
            }
            sign * (oh * 60 + om)
        }
        _ => return Err(bad()),
    };
    Ok(ms - offset_min * 60_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::TWITTER_EPOCH_MS;

    #[test]
    fn unix_ms_read_as_utc_timestamps_and_back() {
        assert_eq!(unix_ms_text(0), "1970-01-01 00:00:00.000+00");
        assert_eq!(unix_ms_text(TWITTER_EPOCH_MS), "2010-11-04 01:42:54.657+00");
        assert_eq!(
            unix_ms_text(1_795_741_346_773),
            "2026-11-27 01:02:26.773+00"
        );
        assert_eq!(unix_ms_text(951_782_400_000), "2000-02-29 00:00:00.000+00");
        assert_eq!(unix_ms_text(-1), "1969-12-31 23:59:59.999+00");
        for ms in [
            0,
            1,
            TWITTER_EPOCH_MS,
            4_102_444_800_123,
            253_402_300_799_999,
        ] {
            assert_eq!(parse_epoch(&unix_ms_text(ms)), Ok(ms), "{ms}");
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_epoch("1288834974657"), Ok(TWITTER_EPOCH_MS));
        assert_eq!(
            parse_epoch("2010-11-04 01:42:54.657+00"),
            Ok(TWITTER_EPOCH_MS)
        );
        assert_eq!(
            parse_epoch("2010-11-04T01:42:54.657Z"),
            Ok(TWITTER_EPOCH_MS)
        );
        assert_eq!(
            parse_epoch("2010-11-04 02:42:54.657+01:00"),
            Ok(TWITTER_EPOCH_MS)
        );
        assert_eq!(
            parse_epoch("2010-11-03 20:42:54.657-0500"),
            Ok(TWITTER_EPOCH_MS)
        );
        assert_eq!(parse_epoch(" 2015-01-01 "), Ok(1_420_070_400_000));
        assert_eq!(
            parse_epoch("2015-01-01 00:00:00 UTC"),
            Ok(1_420_070_400_000)
        );
        assert_eq!(parse_epoch("1970-01-01"), Ok(0));
        assert_eq!(parse_epoch("2000-02-29 00:00"), Ok(951_782_400_000));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "",
            "yesterday",
            "2015-13-01",
            "2015-02-29",
            "2015-01-01 25:00",
            "2015-01-01 00:00:00+99",
            "2015/01/01",
            "-5",
            "99999999999999999999",
        ] {
            assert!(parse_epoch(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn system_clock_agrees_with_std() {
        let std_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((SystemClock.now_unix_ms() - std_ms).abs() < 1000);
    }

    #[test]
    fn pg_timestamps_round_down_to_their_millisecond() {
        assert_eq!(pg_timestamp_to_unix_ms(0), Some(PG_EPOCH_UNIX_MS));
        assert_eq!(pg_timestamp_to_unix_ms(1999), Some(PG_EPOCH_UNIX_MS + 1));
        assert_eq!(pg_timestamp_to_unix_ms(-1), Some(PG_EPOCH_UNIX_MS - 1));
        assert_eq!(pg_timestamp_to_unix_ms(i64::MAX), None);
        assert_eq!(pg_timestamp_to_unix_ms(i64::MIN), None);
        assert_eq!(unix_ms_to_pg_timestamp(PG_EPOCH_UNIX_MS + 5), 5000);
    }
}
