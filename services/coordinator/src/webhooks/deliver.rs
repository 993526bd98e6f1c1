//! Sending one announcement to one hook: a signed POST, retried with
//! backoff (1 s, doubling, at most 5 min apart) until it is answered 2xx
//! or an hour has passed since the first try. Never on the caller's path:
//! each delivery is its own task, at most [`MAX_SENDING`] POSTs at once and
//! [`MAX_PENDING`] deliveries (retries waiting included) in all; one over
//! that is dropped and counted. What happened is kept per hook: the
//! outcome counts and the last [`RECENT`] deliveries.

use super::announce::{self, Announcement};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// POSTs in flight at once.
pub const MAX_SENDING: usize = 16;
/// Deliveries not yet done (sending or waiting to retry).
pub const MAX_PENDING: usize = 1000;
/// Deliveries kept per hook for `webhook list`.
pub const RECENT: usize = 10;
/// How long one POST may take.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY_GAP: Duration = Duration::from_secs(300);

/// Where a delivery goes.
#[derive(Debug, Clone)]
pub struct Target {
    pub hook_id: String,
    pub url: String,
    pub format: String,
    pub secret: String,
}

/// One delivery as `webhook list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub id: String,
    pub event: String,
    pub training_id: Option<String>,
    pub first_try: DateTime<Utc>,
    pub attempts: u32,
    /// `delivered`, `retrying`, `failed` or `dropped`.
    pub outcome: &'static str,
    /// The last answer: `HTTP 200`, `HTTP 503`, or the error.
    pub last_answer: String,
}

/// What a hook's deliveries came to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookStatus {
    pub delivered: u64,
    /// Given up after an hour of retries.
    pub failed: u64,
    /// Not sent: too many deliveries pending.
    pub dropped: u64,
    /// Newest last.
    pub recent: VecDeque<DeliveryRecord>,
}

/// Every hook's status, and the machinery deliveries share.
#[derive(Clone)]
pub struct Deliveries {
    client: reqwest::Client,
    sending: Arc<Semaphore>,
    pending: Arc<AtomicUsize>,
    hooks: Arc<Mutex<HashMap<String, HookStatus>>>,
    /// How long to keep retrying (an hour; shorter in tests).
    retry_for: Duration,
    pub retries: Arc<AtomicU64>,
    /// Delivered, failed, dropped: across hooks, removed ones included.
    outcomes: Arc<[AtomicU64; 3]>,
}

impl Default for Deliveries {
    fn default() -> Self {
        Self::new(Duration::from_secs(3600))
    }
}

impl Deliveries {
    pub fn new(retry_for: Duration) -> Self {
        Self {
            client: crate::http::client(POST_TIMEOUT),
            sending: Arc::new(Semaphore::new(MAX_SENDING)),
            pending: Arc::new(AtomicUsize::new(0)),
            hooks: Arc::default(),
            retry_for,
            retries: Arc::default(),
            outcomes: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HookStatus>> {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A hook's status (default for one that sent nothing yet).
    pub fn status(&self, hook_id: &str) -> HookStatus {
        self.lock().get(hook_id).cloned().unwrap_or_default()
    }

    /// Forgets hooks that no longer exist (the map stays as big as the hooks).
    pub fn retain(&self, hook_ids: &[String]) {
        self.lock().retain(|id, _| hook_ids.contains(id));
    }

    /// Outcome totals since this coordinator started: (delivered,
    /// failed, dropped).
    pub fn totals(&self) -> (u64, u64, u64) {
        let [d, f, x] = &*self.outcomes;
        (
            d.load(Ordering::Relaxed),
            f.load(Ordering::Relaxed),
            x.load(Ordering::Relaxed),
        )
    }

    fn record(&self, hook_id: &str, record: DeliveryRecord) {
        let mut hooks = self.lock();
        let status = hooks.entry(hook_id.to_string()).or_default();
        let outcome = match record.outcome {
            "delivered" => Some((&mut status.delivered, 0)),
            "failed" => Some((&mut status.failed, 1)),
            "dropped" => Some((&mut status.dropped, 2)),
            _ => None,
        };
        if let Some((count, i)) = outcome {
            *count += 1;
            self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        }
        match status.recent.iter_mut().find(|r| r.id == record.id) {
            Some(kept) => *kept = record,
            None => {
                status.recent.push_back(record);
                while status.recent.len() > RECENT {
                    status.recent.pop_front();
                }
            }
        }
    }

    /// Starts delivering `a` to `target` in its own task.
    pub fn send(&self, a: &Announcement, target: Target) {
        let id = format!("dlv-{}", uuid::Uuid::new_v4().simple());
        let mut record = DeliveryRecord {
            id: id.clone(),
            event: a.event.to_string(),
            training_id: a.training_id.clone(),
            first_try: Utc::now(),
            attempts: 0,
            outcome: "retrying",
            last_answer: String::new(),
        };
        if self.pending.fetch_add(1, Ordering::SeqCst) >= MAX_PENDING {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            record.outcome = "dropped";
            record.last_answer = format!("not sent: {MAX_PENDING} deliveries pending");
            tracing::warn!(hook = %target.hook_id, event = a.event, "webhook delivery dropped: too many pending");
            self.record(&target.hook_id, record);
            return;
        }
        let body = announce::body(a, &target.format, &id);
        let this = self.clone();
        tokio::spawn(async move {
            this.deliver(target, body, record).await;
            this.pending.fetch_sub(1, Ordering::SeqCst);
        });
    }

    async fn deliver(&self, target: Target, body: Vec<u8>, mut record: DeliveryRecord) {
        let signature = announce::signature(&target.secret, &body);
        let started = Instant::now();
        let mut gap = FIRST_RETRY;
        loop {
            record.attempts += 1;
            let answer = {
                let _permit = self.sending.acquire().await;
                self.client
                    .post(&target.url)
                    .header("Content-Type", "application/json")
                    .header(announce::EVENT_HEADER, &record.event)
                    .header(announce::DELIVERY_HEADER, &record.id)
                    .header(announce::SIGNATURE_HEADER, &signature)
                    .body(body.clone())
                    .send()
                    .await
            };
            let (ok, said) = match answer {
                Ok(r) => (
                    r.status().is_success(),
                    format!("HTTP {}", r.status().as_u16()),
                ),
                Err(e) => (false, crate::http::describe(&e)),
            };
            record.last_answer = said;
            if ok {
                record.outcome = "delivered";
                self.record(&target.hook_id, record);
                return;
            }
            if started.elapsed() + gap > self.retry_for {
                tracing::warn!(hook = %target.hook_id, delivery = %record.id, attempts = record.attempts, answer = %record.last_answer, "webhook delivery failed for good");
                record.outcome = "failed";
                self.record(&target.hook_id, record);
                return;
            }
            tracing::info!(hook = %target.hook_id, delivery = %record.id, attempts = record.attempts, answer = %record.last_answer, retry_in_ms = gap.as_millis() as u64, "webhook delivery failed; retrying");
            self.record(&target.hook_id, record.clone());
            self.retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(gap).await;
            gap = (gap * 2).min(MAX_RETRY_GAP);
        }
    }
}
