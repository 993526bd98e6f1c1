//! Refused calls cost no database write each. A flood of calls with a bad
//! token (or of calls a role may not make) would otherwise be a flood of
//! audit rows: one write per refusal, on the leader's one writer. Denials
//! are counted per caller, method, code and target for the current minute:
//! the first of a minute is written at once (so a single refusal shows up
//! in the audit log as before), the rest are written as one row when the
//! minute is over ("and N more like it in the minute"). At most
//! [`MAX_KEYS`] keys are kept; past that, denials of new keys are counted
//! together and written as one row. Rows still counted when the process
//! stops are logged, not written.

use crate::model::AuditEntry;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Distinct (caller, method, code, target) kept per minute.
pub const MAX_KEYS: usize = 4096;
/// The window denials of one key are folded into.
pub const WINDOW: Duration = Duration::from_secs(60);

type Key = (String, String, String, String, String);

fn key(e: &AuditEntry) -> Key {
    (
        format!("{}:{}", e.actor_kind, e.actor),
        e.actor_team.clone(),
        e.method.clone(),
        e.code.clone(),
        e.target.clone(),
    )
}

struct Counted {
    first: AuditEntry,
    since: Instant,
    more: u64,
}

#[derive(Default)]
struct Inner {
    counts: HashMap<Key, Counted>,
    /// Denials of keys that found the map full, since `overflow_since`.
    overflow: u64,
    overflow_since: Option<Instant>,
}

/// The denials of the current minute.
#[derive(Default)]
pub struct Denials {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Denials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Denials")
    }
}

impl Denials {
    /// Counts `entry`. Returns what to write now: the entry itself when it
    /// is the first of its key in the window (with the folded row of the
    /// key's last window, when that one is over). Other keys' windows are
    /// left to [`Denials::flush`], so a refusal costs one map look-up.
    pub fn count(&self, entry: AuditEntry, now: Instant) -> Vec<AuditEntry> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let k = key(&entry);
        if let Some(c) = inner.counts.get_mut(&k) {
            if now.duration_since(c.since) < WINDOW {
                c.more += 1;
                return Vec::new();
            }
            let over = std::mem::replace(
                c,
                Counted {
                    first: entry.clone(),
                    since: now,
                    more: 0,
                },
            );
            return folded(over).into_iter().chain([entry]).collect();
        }
        if inner.counts.len() >= MAX_KEYS {
            inner.overflow += 1;
            inner.overflow_since.get_or_insert(now);
            return Vec::new();
        }
        inner.counts.insert(
            k,
            Counted {
                first: entry.clone(),
                since: now,
                more: 0,
            },
        );
        vec![entry]
    }

    /// The folded rows of windows over by `now` (for a periodic flush).
    pub fn flush(&self, now: Instant) -> Vec<AuditEntry> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Self::expired(&mut inner, now)
    }

    fn expired(inner: &mut Inner, now: Instant) -> Vec<AuditEntry> {
        let mut rows = Vec::new();
        inner.counts.retain(|_, c| {
            if now.duration_since(c.since) < WINDOW {
                return true;
            }
            rows.extend(folded(Counted {
                first: c.first.clone(),
                since: c.since,
                more: c.more,
            }));
            false
        });
        if let Some(since) = inner.overflow_since {
            if now.duration_since(since) >= WINDOW {
                let mut row =
                    AuditEntry::ok(&crate::model::Principal::Anonymous, "cohort.v1/*", "", "")
                        .with("MANY", "");
                row.detail = format!(
                    "{} refused calls of more than {MAX_KEYS} distinct callers and methods in a minute",
                    inner.overflow
                );
                rows.push(row);
                inner.overflow = 0;
                inner.overflow_since = None;
            }
        }
        rows
    }
}

/// The row a window's repeats are written as, if it had any.
fn folded(c: Counted) -> Option<AuditEntry> {
    (c.more > 0).then(|| {
        let mut row = c.first;
        row.detail = format!(
            "and {} more like it in the minute after the first: {}",
            c.more, row.detail
        );
        row
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Principal;

    fn denial(actor: &str) -> AuditEntry {
        AuditEntry::ok(
            &Principal::Anonymous,
            "cohort.v1.TrainingService/ListTrainings",
            "",
            "",
        )
        .with("UNAUTHENTICATED", format!("unknown token {actor}"))
    }

    #[test]
    fn a_flood_is_one_row_now_and_one_a_minute_later() {
        let d = Denials::default();
        let t0 = Instant::now();
        assert_eq!(
            d.count(denial("x"), t0).len(),
            1,
            "the first is written at once"
        );
        for i in 1..1000 {
            assert!(d
                .count(denial("x"), t0 + Duration::from_millis(i))
                .is_empty());
        }
        assert!(d.flush(t0 + Duration::from_secs(30)).is_empty());
        let later = d.flush(t0 + WINDOW);
        assert_eq!(later.len(), 1);
        assert!(
            later[0].detail.starts_with("and 999 more like it"),
            "{}",
            later[0].detail
        );
        assert!(d.flush(t0 + WINDOW * 2).is_empty());
        // A new minute starts over.
        assert_eq!(d.count(denial("x"), t0 + WINDOW * 2).len(), 1);
    }

    #[test]
    fn the_keys_are_bounded() {
        let d = Denials::default();
        let t0 = Instant::now();
        for i in 0..MAX_KEYS {
            let mut e = denial("x");
            e.target = format!("t{i}");
            assert_eq!(d.count(e, t0).len(), 1);
        }
        for i in 0..500 {
            let mut e = denial("x");
            e.target = format!("beyond{i}");
            assert!(d.count(e, t0).is_empty(), "counted, not written");
        }
        let rows = d.flush(t0 + WINDOW);
        assert_eq!(
            rows.len(),
            1,
            "the keys had no repeats; the overflow is one row"
        );
        assert!(
            rows[0].detail.starts_with("500 refused calls"),
            "{}",
            rows[0].detail
        );
    }
}
