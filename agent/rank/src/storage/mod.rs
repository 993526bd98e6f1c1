//! Where data and checkpoints live: a local (or shared) file system path,
//! given plain or as `file://`, or S3-compatible object storage,
//! `s3://bucket/prefix`. S3 endpoint and credentials come from the standard
//! AWS environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
//! AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP), which the agent hands
//! to its ranks; they are never written anywhere by cohort.

pub mod s3;

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    S3 { bucket: String, key: String },
}

impl Location {
    pub fn parse(uri: &str) -> Result<Self, String> {
        if let Some(rest) = uri.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(format!("{uri}: names no bucket (s3://bucket/prefix)"));
            }
            return Ok(Location::S3 {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        if let Some((scheme, _)) = uri.split_once("://") {
            if scheme != "file" {
                return Err(format!(
                    "{uri}: scheme {scheme}:// is not one of file://, s3://"
                ));
            }
        }
        Ok(Location::Local(PathBuf::from(
            uri.strip_prefix("file://").unwrap_or(uri),
        )))
    }

    /// The location `name` below this one.
    pub fn join(&self, name: &str) -> Self {
        match self {
            Location::Local(p) => Location::Local(p.join(name)),
            Location::S3 { bucket, key } => Location::S3 {
                bucket: bucket.clone(),
                key: join_key(key, name),
            },
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

/// `prefix/name`, with exactly one slash between (none when prefix is empty).
pub fn join_key(prefix: &str, name: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        assert_eq!(
            Location::parse("s3://b/acts/x/").unwrap(),
            Location::S3 {
                bucket: "b".into(),
                key: "acts/x/".into()
            }
        );
        assert_eq!(
            Location::parse("file:///d/a.npy").unwrap(),
            Location::Local("/d/a.npy".into())
        );
        assert_eq!(
            Location::parse("rel/a").unwrap(),
            Location::Local("rel/a".into())
        );
        assert!(Location::parse("s3://").is_err());
        assert!(Location::parse("gs://b/x").is_err());
        let l = Location::parse("s3://b/runs/").unwrap().join("t1");
        assert_eq!(l.to_string(), "s3://b/runs/t1");
        assert_eq!(
            Location::parse("s3://b").unwrap().join("t1").to_string(),
            "s3://b/t1"
        );
    }
}
