//! The alerts active now and the live feed of raises and resolutions.
//!
//! The active set and the broadcast are updated under one lock, so a watcher
//! that takes [`AlertHub::subscribe`] gets the active alerts and a receiver
//! positioned exactly after them: nothing missed, nothing twice.

use super::settings::AlertSettings;
use crate::model::Alert;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// Alert events buffered per watcher before it is told it lagged.
pub const ALERT_BUFFER: usize = 256;

struct Inner {
    /// Active alerts by id.
    active: BTreeMap<String, Alert>,
    feed: broadcast::Sender<Arc<Alert>>,
}

/// Shared by the alert task (which publishes) and WatchAlerts and /metrics
/// (which read). Cheap to clone.
#[derive(Clone)]
pub struct AlertHub {
    inner: Arc<Mutex<Inner>>,
    settings: Arc<AlertSettings>,
    raised: Arc<AtomicU64>,
}

impl std::fmt::Debug for AlertHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertHub").finish_non_exhaustive()
    }
}

impl Default for AlertHub {
    fn default() -> Self {
        Self::new(AlertSettings::default())
    }
}

impl AlertHub {
    pub fn new(settings: AlertSettings) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                active: BTreeMap::new(),
                feed: broadcast::channel(ALERT_BUFFER).0,
            })),
            settings: Arc::new(settings),
            raised: Arc::new(AtomicU64::new(0)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The rules' settings (the alert task evaluates with these).
    pub fn settings(&self) -> &AlertSettings {
        &self.settings
    }

    /// Adds an alert that was active before a restart, telling no one.
    pub fn adopt(&self, alert: Alert) {
        if alert.is_active() {
            self.lock().active.insert(alert.id.clone(), alert);
        }
    }

    /// Records a raise (no `resolve_time`) or a resolution and tells every watcher.
    pub fn publish(&self, alert: Alert) {
        let mut inner = self.lock();
        if alert.is_active() {
            self.raised.fetch_add(1, Ordering::Relaxed);
            inner.active.insert(alert.id.clone(), alert.clone());
        } else {
            inner.active.remove(&alert.id);
        }
        // No watcher is not an error.
        let _ = inner.feed.send(Arc::new(alert));
    }

    /// The alerts active now, oldest first.
    pub fn active(&self) -> Vec<Alert> {
        let mut all: Vec<Alert> = self.lock().active.values().cloned().collect();
        all.sort_by(|a, b| (a.raise_time, &a.id).cmp(&(b.raise_time, &b.id)));
        all
    }

    /// How many alerts were raised since start.
    pub fn raised_total(&self) -> u64 {
        self.raised.load(Ordering::Relaxed)
    }

    /// The active alerts and a receiver of every change after them.
    pub fn subscribe(&self) -> (Vec<Alert>, broadcast::Receiver<Arc<Alert>>) {
        let inner = self.lock();
        let rx = inner.feed.subscribe();
        let mut active: Vec<Alert> = inner.active.values().cloned().collect();
        drop(inner);
        active.sort_by(|a, b| (a.raise_time, &a.id).cmp(&(b.raise_time, &b.id)));
        (active, rx)
    }
}
