//! The per-connection request-rate limit: a token bucket that refills `per_second` tokens a second up to
//! `burst`; each request takes one, and a request that finds none is answered with the protocol's throttling
//! error (docs/security.md "Limits against abuse").

use std::time::Instant;

use crate::limits::Rate;

/// One connection's bucket.
#[derive(Debug)]
pub struct TokenBucket {
    rate: Rate,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            tokens: f64::from(rate.burst),
            refilled: Instant::now(),
        }
    }

    /// Takes a token if there is one at `now`.
    pub fn take_at(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens =
            (self.tokens + elapsed * self.rate.per_second).min(f64::from(self.rate.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_beyond_the_bucket_is_refused_and_the_bucket_refills_at_the_rate() {
        let mut bucket = TokenBucket::new(Rate {
            per_second: 10.0,
            burst: 3,
        });
        let start = Instant::now();
        assert!((0..3).all(|_| bucket.take_at(start)));
        assert!(!bucket.take_at(start));
        assert!(!bucket.take_at(start + Duration::from_millis(50)));
        assert!(bucket.take_at(start + Duration::from_millis(150)));
        // Never more than the burst, however long the connection was quiet.
        let later = start + Duration::from_secs(3600);
        assert!((0..3).all(|_| bucket.take_at(later)));
        assert!(!bucket.take_at(later));
    }
}
