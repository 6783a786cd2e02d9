//! Points in time that a flag or a model argument puts ahead. A duration
//! from the user can be anything up to u64::MAX seconds, and an instant
//! past what the clock holds would panic, so these saturate: "never" is a
//! century away.

use std::time::{Duration, Instant};

/// Far enough ahead never to come, near enough for any clock to hold.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `wait` after `start`, or a century after it when that is further.
pub fn after(start: Instant, wait: Duration) -> Instant {
    start.checked_add(wait.min(NEVER)).unwrap_or(start)
}

/// `after`, on tokio's clock.
pub fn after_tokio(start: tokio::time::Instant, wait: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(after(start.into_std(), wait))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_duration_gives_an_instant() {
        let now = Instant::now();
        assert!(after(now, Duration::from_secs(u64::MAX)) > now + Duration::from_secs(3600));
        assert_eq!(
            after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
    }
}
