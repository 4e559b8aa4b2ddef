//! Timestamps in UTC for run ids and messages, written by humantime. A leaf: it depends on
//! nothing else in the crate.

use std::time::{Duration, UNIX_EPOCH};

/// The last second RFC 3339 can write (its years have four digits).
const LAST_WRITABLE: u64 = 253_402_300_799;

/// `2026-08-06T14:58:26Z` for unix seconds. A time past the year 9999, which only a
/// nonsensical token expiry can name, reads `9999-12-31T23:59:59Z or later`.
pub fn rfc3339(unix_secs: u64) -> String {
    if unix_secs > LAST_WRITABLE {
        return format!("{} or later", rfc3339(LAST_WRITABLE));
    }
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix_secs)).to_string()
}

/// `20260806T145826Z`: the same instant in RFC 3339's basic form, which sorts like the
/// time and holds no `:`, for file names.
pub fn compact(unix_secs: u64) -> String {
    rfc3339(unix_secs.min(LAST_WRITABLE)).replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_in_utc_to_the_second() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (946_684_799, "1999-12-31T23:59:59Z"),
            (951_782_400 + 86_399, "2000-02-29T23:59:59Z"),
            (1_707_295_705, "2024-02-07T08:48:25Z"),
            (1_786_028_306, "2026-08-06T14:58:26Z"),
            (1_796_000_523, "2026-11-30T01:02:03Z"),
            (2_147_483_648, "2038-01-19T03:14:08Z"),
            (4_107_542_400, "2100-03-01T00:00:00Z"),
            (LAST_WRITABLE, "9999-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(secs), text, "{secs}");
        }
    }

    #[test]
    fn times_past_the_year_9999_are_bounded() {
        assert_eq!(rfc3339(LAST_WRITABLE + 1), "9999-12-31T23:59:59Z or later");
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59Z or later");
        assert_eq!(compact(u64::MAX), "99991231T235959Z");
    }

    #[test]
    fn compact_is_the_basic_form() {
        assert_eq!(compact(0), "19700101T000000Z");
        assert_eq!(compact(1_796_000_523), "20261130T010203Z");
    }
}
