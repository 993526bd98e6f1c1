//! Which checkpoints a restarted attempt may resume from.
//!
//! The coordinator records a checkpoint only while the attempt that wrote it
//! is the training's current one. When it places a later attempt it names
//! those (attempt, step) pairs; the agent hands them to every rank in
//! [`PUBLISHED_ENV`], and the rank resumes only from a checkpoint on that
//! list (or one without an attempt, written before checkpoints carried
//! theirs). A checkpoint a superseded attempt wrote after it was superseded
//! — a partitioned host that came back, a rank that missed its stop — is
//! never on the list, so no later attempt resumes from it.
//!
//! The value is `attempt:step` pairs separated by commas (`1:400,1:300`);
//! empty when nothing was published. Unset (a rank started by hand) means no
//! restriction.

/// The environment variable that carries the published checkpoints.
pub const PUBLISHED_ENV: &str = "COHORT_PUBLISHED_CHECKPOINTS";

/// The most pairs a value may carry.
pub const MAX_PUBLISHED: usize = 1024;

/// The published (attempt, step) pairs, as the coordinator recorded them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published(Vec<(i64, i64)>);

impl Published {
    pub fn new(pairs: impl IntoIterator<Item = (i64, i64)>) -> Self {
        Self(pairs.into_iter().take(MAX_PUBLISHED).collect())
    }

    /// Parses [`PUBLISHED_ENV`]'s value.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if pairs.len() == MAX_PUBLISHED {
                return Err(format!("more than {MAX_PUBLISHED} published checkpoints"));
            }
            let (attempt, step) = item
                .split_once(':')
                .ok_or_else(|| format!("{item:?} is not attempt:step"))?;
            let attempt = attempt
                .parse()
                .map_err(|_| format!("{item:?}: the attempt is not a number"))?;
            let step = step
                .parse()
                .map_err(|_| format!("{item:?}: the step is not a number"))?;
            pairs.push((attempt, step));
        }
        Ok(Self(pairs))
    }

    /// From the environment: `None` when [`PUBLISHED_ENV`] is unset.
    pub fn from_env() -> Result<Option<Self>, String> {
        match std::env::var(PUBLISHED_ENV) {
            Ok(value) => Self::parse(&value)
                .map(Some)
                .map_err(|e| format!("{PUBLISHED_ENV}: {e}")),
            Err(_) => Ok(None),
        }
    }

    /// Whether a checkpoint of `attempt` (None: one written before
    /// checkpoints carried their attempt) at `step` may be resumed from by
    /// an attempt that was given this list.
    pub fn allows(&self, attempt: Option<i64>, step: i64) -> bool {
        match attempt {
            None => true,
            Some(a) => self.0.contains(&(a, step)),
        }
    }

    /// The (attempt, step) pairs.
    pub fn pairs(&self) -> &[(i64, i64)] {
        &self.0
    }

    /// The value of [`PUBLISHED_ENV`].
    pub fn to_env(&self) -> String {
        self.0
            .iter()
            .map(|(a, s)| format!("{a}:{s}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_allows_only_what_was_published() {
        let p = Published::new([(1, 400), (2, 450)]);
        assert_eq!(p.to_env(), "1:400,2:450");
        assert_eq!(Published::parse(&p.to_env()).unwrap(), p);
        assert!(p.allows(Some(1), 400));
        assert!(p.allows(Some(2), 450));
        // A superseded attempt's later checkpoint, and a step the
        // coordinator never recorded for that attempt.
        assert!(!p.allows(Some(1), 500));
        assert!(!p.allows(Some(2), 400));
        assert!(p.allows(None, 999), "an old checkpoint without an attempt");
        assert_eq!(Published::parse("").unwrap(), Published::default());
        assert!(!Published::default().allows(Some(1), 1));
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in ["1", "a:1", "1:b", "1:2:3"] {
            assert!(Published::parse(bad).is_err(), "{bad}");
        }
        let many = (0..=MAX_PUBLISHED)
            .map(|i| format!("1:{i}"))
            .collect::<Vec<_>>();
        assert!(Published::parse(&many.join(",")).is_err());
    }
}
