//! The pre-flight clock check: the node prints its clock (`KB_PF_CLOCK <unix seconds>`,
//! `date +%s`) in the probe, and the control host compares it with its own clock at the
//! probe's send and at its receipt. The node read its clock somewhere in between, so only
//! a difference the round trip cannot explain counts.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Finding, FindingId};
use crate::utc::rfc3339;

/// How far the node's clock may be off the control host's before it is a finding. A
/// join's certificates and token are checked against clocks (the node's for cloudcore's
/// certificate and its own, cloudcore's for the token's expiry), with no leeway; a minute
/// is far more than NTP-kept clocks ever differ by and far less than a clock that was
/// never set (a board without an RTC starts at its build date or 1970).
pub const CLOCK_SKEW_LIMIT_SECS: u64 = 60;

/// The node's clock as the probe printed it, in unix seconds.
pub fn node_clock(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix("KB_PF_CLOCK ")
            .and_then(|t| t.trim().parse().ok())
    })
}

/// By how much the node's clock `node` (whole seconds, as `date +%s` truncates) is off
/// a control-host clock that read `sent` before the probe was sent and `received` after
/// its answer came: positive when the node is ahead, negative when it is behind, 0 when
/// the node read its clock within the window. The node's instant lies in
/// `[node, node + 1)` on its own clock and in `[sent, received]` on ours; the skew is the
/// least distance between the two, in whole seconds.
pub fn skew_secs(node: u64, sent: SystemTime, received: SystemTime) -> i64 {
    let secs = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let (sent, received) = (secs(sent), secs(received).max(secs(sent)));
    let (lo, hi) = (node as f64, node as f64 + 1.0);
    if hi < sent {
        -((sent - hi) as i64)
    } else if lo > received {
        (lo - received) as i64
    } else {
        0
    }
}

/// The `clock_skew` finding, when the probe's `output` names a node clock more than
/// [`CLOCK_SKEW_LIMIT_SECS`] off the control host's between `sent` and `received`.
pub fn finding(output: &str, sent: SystemTime, received: SystemTime) -> Option<Finding> {
    let node = node_clock(output)?;
    let skew = skew_secs(node, sent, received);
    if skew.unsigned_abs() <= CLOCK_SKEW_LIMIT_SECS {
        return None;
    }
    let unix = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let direction = if skew > 0 { "ahead" } else { "behind" };
    Some(Finding {
        id: FindingId::ClockSkew,
        detail: format!(
            "the node's clock said {}, the control host's {} when the probe ran: the node is {} s {direction}, more than {CLOCK_SKEW_LIMIT_SECS} s",
            rfc3339(node),
            rfc3339(unix(sent)),
            skew.unsigned_abs()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    #[test]
    fn the_clock_line_is_read_and_others_are_not() {
        assert_eq!(
            node_clock("KB_PF bash_missing x\nKB_PF_CLOCK 1700000000\nKB_PF_DONE\n"),
            Some(1_700_000_000)
        );
        assert_eq!(node_clock("KB_PF_CLOCK soon\nKB_PF_DONE\n"), None);
        assert_eq!(node_clock("KB_PF_DONE\n"), None);
    }

    /// A node that read its clock during the round trip is not off at all, however long
    /// the round trip took; outside it, only the part the round trip cannot explain counts.
    #[test]
    fn the_round_trip_is_allowed_for() {
        let (sent, received) = (at(1000.4), at(1009.9));
        // date +%s truncates: 1000 means 1000.0 to 1000.99..., which overlaps 1000.4.
        assert_eq!(skew_secs(1000, sent, received), 0);
        assert_eq!(skew_secs(1009, sent, received), 0);
        assert_eq!(skew_secs(1005, sent, received), 0);
        // Ahead: 1100 is 90.1 s past the receipt.
        assert_eq!(skew_secs(1100, sent, received), 90);
        // Behind: 900 + 1 is 99.4 s before the send.
        assert_eq!(skew_secs(900, sent, received), -99);
        // A receipt the control host's clock put before the send (it was stepped back)
        // counts as the send.
        assert_eq!(skew_secs(1000, at(1000.4), at(990.0)), 0);
    }

    #[test]
    fn past_the_limit_is_a_finding_naming_both_clocks_and_the_difference() {
        let (sent, received) = (at(1_700_000_000.2), at(1_700_000_001.5));
        let limit = CLOCK_SKEW_LIMIT_SECS;
        let line = |t: u64| format!("KB_PF_CLOCK {t}\nKB_PF_DONE\n");
        // Exactly the limit (once the round trip is allowed for) is not a finding.
        assert_eq!(finding(&line(1_700_000_001 + limit), sent, received), None);
        assert_eq!(
            finding(&line(1_700_000_000 - limit - 1), sent, received),
            None
        );
        let ahead = finding(&line(1_700_000_301), sent, received).unwrap();
        assert_eq!(ahead.id, FindingId::ClockSkew);
        assert_eq!(
            ahead.detail,
            "the node's clock said 2023-11-14T22:18:21Z, the control host's 2023-11-14T22:13:20Z when the probe ran: the node is 299 s ahead, more than 60 s"
        );
        let behind = finding(&line(1_600_000_000), sent, received).unwrap();
        assert!(
            behind
                .detail
                .ends_with("the node is 99999999 s behind, more than 60 s"),
            "{}",
            behind.detail
        );
        // No clock line (a probe cut off before it): nothing here; the probe's own
        // finding says it stopped short.
        assert_eq!(finding("KB_PF_DONE\n", sent, received), None);
    }
}
