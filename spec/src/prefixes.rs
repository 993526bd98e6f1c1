//! Object-storage prefixes: where a team's ranks may read and write on S3
//! (`cohort-agent --s3-prefix s3://bucket/prefix` for every team,
//! `--team-s3-prefix TEAM=s3://bucket/prefix` for one). The agent hands a
//! rank the prefixes open to its training's team in [`ENV`]; the rank checks
//! its configured locations before it starts and every object it touches.
//! Unset: no limit (an agent given no prefixes keeps the old behaviour).

use crate::location::{s3_uri, Location};

/// The key an `s3://` entry is checked by: a glob pattern by the directory
/// of its literal part, anything else (an object, a prefix) by itself.
pub fn checked_key(key: &str) -> &str {
    match key.find(['*', '?', '[']) {
        Some(i) => key[..i].rsplit_once('/').map_or("", |(dir, _)| dir),
        None => key.trim_end_matches('/'),
    }
}

/// The environment variable that hands the prefixes to ranks (one per line).
pub const ENV: &str = "COHORT_S3_PREFIXES";

/// The prefixes, as (bucket, key prefix without a trailing `/`); `None`:
/// no limit. `Some` of an empty list: no object storage at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Prefixes(Option<Vec<(String, String)>>);

impl S3Prefixes {
    /// No limit.
    pub fn open() -> Self {
        Self(None)
    }

    /// Exactly these `s3://bucket/prefix` URIs (none: no object storage).
    pub fn only(uris: &[String]) -> Result<Self, String> {
        let mut prefixes = Vec::with_capacity(uris.len());
        for uri in uris {
            let Ok(Location::S3 { bucket, key }) = Location::parse(uri) else {
                return Err(format!("{uri}: not an s3://bucket/prefix URI"));
            };
            let key = key.trim_matches('/');
            if key.split('/').any(|part| part == "..") {
                return Err(format!("{uri}: a prefix may not hold `..`"));
            }
            prefixes.push((bucket, key.to_string()));
        }
        Ok(Self(Some(prefixes)))
    }

    /// The prefixes a rank was given ([`ENV`]); unset: no limit.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(ENV) {
            Err(_) => Ok(Self::open()),
            Ok(text) => {
                let uris: Vec<String> = text
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect();
                Self::only(&uris).map_err(|e| format!("{ENV}: {e}"))
            }
        }
    }

    /// The value of [`ENV`] for a rank (`None`: leave it unset).
    pub fn to_env(&self) -> Option<String> {
        self.0.as_ref().map(|p| {
            p.iter()
                .map(|(b, k)| s3_uri(b, k))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    /// Whether any limit applies.
    pub fn is_open(&self) -> bool {
        self.0.is_none()
    }

    /// `Ok` when every `s3://` location of `config` (data, validation,
    /// checkpoint storage) lies under the prefixes.
    pub fn check_config(&self, config: &crate::TrainingConfig) -> Result<(), String> {
        for uri in crate::roots::locations(config) {
            if let Ok(Location::S3 { bucket, key }) = Location::parse(uri) {
                self.check(&bucket, checked_key(&key))?;
            }
        }
        Ok(())
    }

    /// `Ok` when object `key` of `bucket` (or every key under it, for a
    /// listing prefix) lies under one of the prefixes; else why not. A key
    /// holding a `..` segment is refused: stores differ on what it means.
    pub fn check(&self, bucket: &str, key: &str) -> Result<(), String> {
        let Some(prefixes) = &self.0 else {
            return Ok(());
        };
        let key = key.trim_start_matches('/');
        let inside = !key.split('/').any(|part| part == "..")
            && prefixes.iter().any(|(b, p)| {
                b == bucket
                    && (p.is_empty()
                        || key == p
                        || key
                            .strip_prefix(p.as_str())
                            .is_some_and(|r| r.starts_with('/')))
            });
        if inside {
            return Ok(());
        }
        let open: Vec<String> = prefixes.iter().map(|(b, k)| s3_uri(b, k)).collect();
        Err(format!(
            "{} lies outside the object storage open to this team on this agent ({})",
            s3_uri(bucket, key),
            if open.is_empty() {
                "none".to_string()
            } else {
                open.join(", ")
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_under_a_prefix_pass_and_neighbours_do_not() {
        let p = S3Prefixes::only(&["s3://data/team-a/".into(), "s3://ckpt/team-a".into()]).unwrap();
        assert!(p.check("data", "team-a/acts/x.npy").is_ok());
        assert!(p.check("data", "team-a").is_ok());
        assert!(p
            .check(
                "ckpt",
                &format!(
                    "team-a/run-1/step-00000010/{}",
                    crate::checkpoint::MANIFEST_FILE
                )
            )
            .is_ok());
        for (bucket, key) in [
            ("data", "team-ab/x.npy"),
            ("data", "team-b/x.npy"),
            ("data", "team-a/../team-b/x.npy"),
            ("other", "team-a/x.npy"),
        ] {
            let err = p.check(bucket, key).unwrap_err();
            assert!(err.contains("outside the object storage"), "{err}");
        }
        let whole = S3Prefixes::only(&["s3://shared".into()]).unwrap();
        assert!(whole.check("shared", "anything/at/all").is_ok());
        assert!(S3Prefixes::open().check("x", "y").is_ok());
        let none = S3Prefixes::only(&[]).unwrap();
        assert!(none.check("x", "y").unwrap_err().contains("(none)"));
    }

    #[test]
    fn entries_are_checked_by_their_literal_part() {
        assert_eq!(checked_key("team-a/acts/*.npy"), "team-a/acts");
        assert_eq!(checked_key("team-a/acts/"), "team-a/acts");
        assert_eq!(checked_key("team-a/x.npy"), "team-a/x.npy");
        assert_eq!(checked_key("team-*/x"), "");
        let config = crate::TrainingConfig::from_toml(
            "[model]\nd_in = 4\n[optim]\nbatch_size = 1\nsteps = 1\n\
             [data.files]\npaths = [\"s3://data/team-a/acts/*.npy\"]\n\
             [checkpoint]\nstorage = \"s3://ckpt/team-b\"\n",
        )
        .unwrap();
        let a = S3Prefixes::only(&["s3://data/team-a".into(), "s3://ckpt/team-a".into()]).unwrap();
        let err = a.check_config(&config).unwrap_err();
        assert!(err.contains("s3://ckpt/team-b"), "{err}");
        let both =
            S3Prefixes::only(&["s3://data/team-a".into(), "s3://ckpt/team-b".into()]).unwrap();
        assert!(both.check_config(&config).is_ok());
    }

    #[test]
    fn the_environment_form_round_trips() {
        let p = S3Prefixes::only(&["s3://data/team-a/".into(), "s3://b".into()]).unwrap();
        let env = p.to_env().unwrap();
        assert_eq!(env, "s3://data/team-a\ns3://b/");
        let uris: Vec<String> = env.lines().map(str::to_string).collect();
        assert_eq!(S3Prefixes::only(&uris).unwrap(), p);
        assert_eq!(S3Prefixes::open().to_env(), None);
        assert!(S3Prefixes::only(&["gs://x".into()]).is_err());
        assert!(S3Prefixes::only(&["s3:///k".into()]).is_err());
    }
}
