//! The coordinators' member set as the CLI learns it. Every answer of a
//! coordinator carries `cohort-members` (every coordinator's `--advertise`
//! URL); the CLI keeps the last set it saw for the `--coordinator` list it
//! was given, in its cache directory, and on its next run dials those
//! members after the given ones when none of those answers. So a user who
//! configured one coordinator still reaches the cluster once that one is
//! gone, as agents do.

use std::path::PathBuf;
use std::sync::Mutex;
use std::task::{Context, Poll};
use tonic::codegen::{http, BoxFuture, Service};

/// The response metadata the coordinators send (see the coordinator's
/// `leader::gate::MEMBERS_HEADER`).
const MEMBERS_HEADER: &str = "cohort-members";
/// Members kept at most (a cluster has a handful of coordinators).
const MAX_MEMBERS: usize = 16;

/// The member set of the last answer that carried one.
static LEARNED: Mutex<Option<Vec<String>>> = Mutex::new(None);

/// The member set this run learned, if any answer carried one.
pub fn learned() -> Option<Vec<String>> {
    LEARNED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn parse(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty() && u.len() < 512)
        .take(MAX_MEMBERS)
        .map(str::to_string)
        .collect()
}

/// A channel that notes the member set of every answer.
#[derive(Debug, Clone)]
pub struct Learn<S> {
    inner: S,
}

impl<S> Learn<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S, B, R> Service<http::Request<B>> for Learn<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let response = inner.call(request).await?;
            if let Some(value) = response
                .headers()
                .get(MEMBERS_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                let members = parse(value);
                if !members.is_empty() {
                    *LEARNED.lock().unwrap_or_else(|p| p.into_inner()) = Some(members);
                }
            }
            Ok(response)
        })
    }
}

/// Where the member set learned for the `--coordinator` list `given` is
/// kept: `$COHORT_CACHE_DIR`, else `$XDG_CACHE_HOME/cohort`, else
/// `~/.cache/cohort`; one file per list.
fn cache_file(given: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("COHORT_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("cohort")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/cohort")))?;
    // FNV-1a: stable across runs and builds (std's hasher is not).
    let hash = given.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Some(dir.join(format!("members-{hash:016x}")))
}

/// The members learned earlier for `given` (none when never, or unreadable).
pub fn load(given: &str) -> Vec<String> {
    cache_file(given)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|text| parse(&text.lines().collect::<Vec<_>>().join(",")))
        .unwrap_or_default()
}

/// Keeps this run's member set for `given`'s next run, when it learned one
/// that differs from what was kept. A failure to write is only logged: the
/// command itself succeeded.
pub fn save(given: &str) {
    let Some(members) = learned() else {
        return;
    };
    if members == load(given) {
        return;
    }
    let Some(file) = cache_file(given) else {
        return;
    };
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&file, members.join("\n") + "\n"));
    if let Err(e) = written {
        tracing::debug!(file = %file.display(), error = %e, "cannot keep the coordinators' member set");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_set_is_kept_per_coordinator_list() {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("COHORT_CACHE_DIR", dir.path());
        assert!(load("http://a:1").is_empty());
        *LEARNED.lock().unwrap() = Some(parse("http://a:1, http://b:2,,http://c:3"));
        save("http://a:1");
        assert_eq!(
            load("http://a:1"),
            ["http://a:1", "http://b:2", "http://c:3"]
        );
        assert!(load("http://other:1").is_empty(), "another cluster's list");
        assert_eq!(parse(&vec!["http://x:1"; 40].join(",")).len(), MAX_MEMBERS);
    }
}
