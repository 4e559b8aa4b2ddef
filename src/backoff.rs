//! The delay before a retry, shared by connection retries (pipeline) and download retries
//! (stage). A leaf: it depends on nothing else in the crate.

use std::time::Duration;

/// The delay before retry number `attempt` (1 for the first retry): `base`, `2 * base`,
/// `4 * base`... (at most `64 * base`), times a random factor between 0.5 and 1.5, so
/// that nodes or runs that failed together do not retry in lockstep.
pub fn backoff(base: Duration, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(6);
    base.saturating_mul(factor).mul_f64(0.5 + fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base_with_jitter_around_it() {
        let base = Duration::from_secs(1);
        for _ in 0..50 {
            for (attempt, nominal) in [(1, 1.0), (2, 2.0), (3, 4.0), (7, 64.0), (20, 64.0)] {
                let delay = backoff(base, attempt).as_secs_f64();
                assert!(
                    delay >= nominal * 0.5 && delay <= nominal * 1.5,
                    "{attempt}: {delay}"
                );
            }
        }
        assert_eq!(backoff(Duration::ZERO, 3), Duration::ZERO);
    }

    #[test]
    fn retries_that_start_together_spread_out() {
        let delays: std::collections::HashSet<Duration> = (0..20)
            .map(|_| backoff(Duration::from_secs(1), 1))
            .collect();
        assert!(delays.len() > 1, "{delays:?}");
    }
}
