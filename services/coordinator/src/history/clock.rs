//! Wall-clock time behind a trait, so retention can be driven by tests.

use chrono::{DateTime, Utc};
use std::sync::Mutex;

/// Where retention reads "now" from.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct FakeClock {
    now: Mutex<DateTime<Utc>>,
}

impl FakeClock {
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(now),
        }
    }

    pub fn set(&self, now: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }

    pub fn advance(&self, by: chrono::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told() {
        let t0 = DateTime::from_timestamp(1_000, 0).unwrap();
        let clock = FakeClock::new(t0);
        assert_eq!(clock.now(), t0);
        clock.advance(chrono::Duration::seconds(90));
        assert_eq!(clock.now(), t0 + chrono::Duration::seconds(90));
        clock.set(t0);
        assert_eq!(clock.now(), t0);
    }
}
