//! Where data and checkpoints live, the one parser of their URIs: a local
//! (or shared) file system path, given plain or as `file://`, or
//! S3-compatible object storage, `s3://bucket/prefix`. Every part that
//! reads a location from a config, a flag or a report parses it here.

use std::path::PathBuf;

/// The schemes a location may carry (a plain path carries none).
pub const SCHEMES: [&str; 2] = ["file://", "s3://"];

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
                    "{uri}: scheme {scheme}:// is not one of {}",
                    SCHEMES.join(", ")
                ));
            }
        }
        Ok(Location::Local(PathBuf::from(
            uri.strip_prefix("file://").unwrap_or(uri),
        )))
    }

    /// The object `key` of `bucket`.
    pub fn s3(bucket: &str, key: &str) -> Self {
        Location::S3 {
            bucket: bucket.to_string(),
            key: key.to_string(),
        }
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

    /// Whether it names object storage.
    pub fn is_object_storage(&self) -> bool {
        matches!(self, Location::S3 { .. })
    }

    /// The local path, for a location on the file system.
    pub fn local(&self) -> Option<&std::path::Path> {
        match self {
            Location::Local(p) => Some(p),
            Location::S3 { .. } => None,
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

/// How object `key` of `bucket` is named in messages and reports.
pub fn s3_uri(bucket: &str, key: &str) -> String {
    Location::s3(bucket, key).to_string()
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
            Location::s3("b", "acts/x/")
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
        let e = Location::parse("gs://b/x").unwrap_err();
        assert_eq!(e, "gs://b/x: scheme gs:// is not one of file://, s3://");
        let l = Location::parse("s3://b/runs/").unwrap().join("t1");
        assert_eq!(l.to_string(), "s3://b/runs/t1");
        assert_eq!(
            Location::parse("s3://b").unwrap().join("t1").to_string(),
            "s3://b/t1"
        );
        assert_eq!(s3_uri("b", "k/x"), "s3://b/k/x");
        assert!(Location::parse("s3://b/k").unwrap().is_object_storage());
        assert_eq!(
            Location::parse("/a").unwrap().local(),
            Some(std::path::Path::new("/a"))
        );
    }
}
