//! Requests and tokens per minute (`--judge-rpm`, `--judge-tpm`), shared by
//! every worker of a run: `governor`'s rate limiters (GCRA; a full minute's
//! budget may go at once, then it refills evenly), waited on by sleeping,
//! as the workers are plain threads.

use std::num::NonZeroU32;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// The budgets of one judge endpoint.
pub(crate) struct Limiter {
    requests: Option<DefaultDirectRateLimiter>,
    tokens: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
    clock: DefaultClock,
}

impl Limiter {
    /// Budgets of `rpm` requests and `tpm` tokens per minute (none: no limit).
    pub(crate) fn new(rpm: Option<u32>, tpm: Option<u32>) -> Limiter {
        let per_minute = |n: u32| NonZeroU32::new(n).map(|n| (Quota::per_minute(n), n));
        Limiter {
            requests: rpm
                .and_then(per_minute)
                .map(|(q, _)| RateLimiter::direct(q)),
            tokens: tpm
                .and_then(per_minute)
                .map(|(q, n)| (RateLimiter::direct(q), n)),
            clock: DefaultClock::default(),
        }
    }

    /// Waits until one request of about `tokens` tokens fits both budgets,
    /// then spends it. A request larger than a whole minute's tokens waits
    /// for a full minute's budget.
    pub(crate) fn acquire(&self, tokens: u32) {
        if let Some((limiter, per_minute)) = &self.tokens {
            let n = NonZeroU32::new(tokens.clamp(1, per_minute.get())).expect("at least 1");
            while let Ok(Err(not_until)) = limiter.check_n(n) {
                std::thread::sleep(not_until.wait_time_from(self.clock.now()));
            }
        }
        if let Some(limiter) = &self.requests {
            while let Err(not_until) = limiter.check() {
                std::thread::sleep(not_until.wait_time_from(self.clock.now()));
            }
        }
    }
}

/// A random factor in [0.5, 1.5) for retry backoff, so that workers that
/// failed together do not retry together.
pub(crate) fn jitter() -> f64 {
    0.5 + rand::random::<f64>()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn no_budget_never_waits() {
        let limiter = Limiter::new(None, None);
        let start = Instant::now();
        for _ in 0..1000 {
            limiter.acquire(1_000_000);
        }
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_spent_token_budget_waits_for_its_refill() {
        // 6,000 tokens a minute: the first 6,000 go at once, the next 100
        // refill in 1 s.
        let limiter = Limiter::new(None, Some(6_000));
        let start = Instant::now();
        limiter.acquire(6_000);
        assert!(start.elapsed() < Duration::from_millis(500));
        limiter.acquire(100);
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_spent_request_budget_waits_for_its_refill() {
        // 120 a minute: one every 0.5 s once the burst is spent.
        let limiter = Limiter::new(Some(120), None);
        for _ in 0..120 {
            limiter.acquire(1);
        }
        let start = Instant::now();
        limiter.acquire(1);
        assert!(
            start.elapsed() >= Duration::from_millis(400),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn jitter_stays_in_its_range_and_varies() {
        let draws: Vec<f64> = (0..100).map(|_| jitter()).collect();
        assert!(draws.iter().all(|j| (0.5..1.5).contains(j)));
        assert!(draws.iter().any(|&j| j != draws[0]));
    }
}
