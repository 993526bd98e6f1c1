//! What recent token lookups found, kept a short while so a busy client is
//! not one database read per call, and bounded whatever clients send:
//! at most [`CAPACITY`] entries (unknown tokens included), each trusted for
//! [`TTL`], so a revoked or expired token stops working within it.

use super::super::persistence::tokens::TokenRecord;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a lookup is trusted: revocation takes effect within this.
pub const TTL: Duration = Duration::from_secs(2);
/// Entries kept at most; the oldest goes first.
pub const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
struct Inner {
    /// By secret hash: what the database said (None: no such token), and when.
    entries: HashMap<String, (Option<TokenRecord>, Instant)>,
    /// Insertion order, for eviction.
    order: VecDeque<String>,
}

#[derive(Debug, Default)]
pub struct TokenCache {
    inner: Mutex<Inner>,
}

impl TokenCache {
    /// A lookup younger than [`TTL`]: `Some(None)` is a known-unknown token.
    pub fn get(&self, hash: &str, now: Instant) -> Option<Option<TokenRecord>> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (found, at) = inner.entries.get(hash)?;
        (now.duration_since(*at) < TTL).then(|| found.clone())
    }

    pub fn put(&self, hash: String, found: Option<TokenRecord>, now: Instant) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.entries.insert(hash.clone(), (found, now)).is_none() {
            inner.order.push_back(hash);
        }
        while inner.entries.len() > CAPACITY {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            inner.entries.remove(&oldest);
        }
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_expire_and_the_cache_stays_bounded() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        cache.put("a".into(), None, t0);
        assert_eq!(cache.get("a", t0 + Duration::from_secs(1)), Some(None));
        assert_eq!(cache.get("a", t0 + TTL), None, "stale after the TTL");
        for i in 0..CAPACITY + 10 {
            cache.put(format!("k{i}"), None, t0);
        }
        assert_eq!(cache.len(), CAPACITY);
        assert_eq!(cache.get("k0", t0), None, "the oldest went first");
        assert!(cache.get(&format!("k{}", CAPACITY + 9), t0).is_some());
    }
}
