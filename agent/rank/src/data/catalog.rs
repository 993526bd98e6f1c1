//! The data set behind `data.files.paths`: every entry resolved to shards
//! (files, directories, glob patterns; `file://` or plain paths), each
//! shard's header read once, and the rows laid end to end in entry order.
//!
//! The catalog keeps one small record per shard and per *segment* (a run of
//! rows that a read chunk never crosses: a whole dense shard, or one parquet
//! row group), never the rows themselves.

use super::elem::Elem;
use super::shard::{Format, Selector, Shard};
use cohort_spec::config::FileData;
use cohort_spec::location::Location;
use cohort_spec::roots::DataRoots;
use cohort_storage::s3::{self, S3Blob};
use cohort_storage::{Blob, LocalBlob};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows of one segment, and where they start in the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub shard: u32,
    /// Index of the segment within its shard (the parquet row group).
    pub index: u32,
    /// First row of the segment within its shard.
    pub shard_row: u64,
    pub rows: u64,
    /// First row of the segment in the whole data set.
    pub first: u64,
}

pub struct Catalog {
    pub shards: Vec<Shard>,
    pub segments: Vec<Segment>,
    pub rows: u64,
    pub d_in: u64,
    /// The type batches are formed in (the shards' common type).
    pub elem: Elem,
}

/// A shard file found for an entry, not yet opened.
type ShardFile = (Arc<dyn Blob>, Format);

fn data_err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Catalog {
    /// Resolve, open and check every shard against `d_in`. The first problem
    /// is returned naming the file.
    pub fn open(cfg: &FileData, d_in: i64) -> Result<Self, String> {
        let mut files: Vec<ShardFile> = Vec::new();
        for entry in &cfg.paths {
            files.extend(resolve(entry)?);
        }
        let sel = Selector {
            tensor: cfg.tensor.as_deref(),
            column: cfg.column.as_deref(),
            d_in: d_in as u64,
        };
        let mut shards = Vec::with_capacity(files.len());
        for (blob, format) in files {
            let name = blob.name().to_string();
            let shard = Shard::open(blob, format, sel).map_err(|e| data_err(&name, e))?;
            if shard.rows() == 0 {
                return Err(data_err(&name, "has no rows"));
            }
            if shard.d_in() != d_in as u64 {
                return Err(data_err(
                    &name,
                    format!("rows have {} values but model.d_in is {d_in}", shard.d_in()),
                ));
            }
            shards.push(shard);
        }
        let elem = Elem::common(shards.iter().map(Shard::elem)).ok_or("no shards")?;
        let mut segments = Vec::new();
        let mut first = 0u64;
        for (s, shard) in shards.iter().enumerate() {
            let mut shard_row = 0;
            for (index, rows) in shard.segments().into_iter().enumerate() {
                if rows == 0 {
                    continue;
                }
                segments.push(Segment {
                    shard: s as u32,
                    index: index as u32,
                    shard_row,
                    rows,
                    first,
                });
                shard_row += rows;
                first += rows;
            }
        }
        Ok(Self {
            shards,
            segments,
            rows: first,
            d_in: d_in as u64,
            elem,
        })
    }

    /// The segment holding data-set row `row` (< `self.rows`).
    pub fn segment_of(&self, row: u64) -> usize {
        self.segments.partition_point(|s| s.first <= row) - 1
    }

    pub fn row_bytes(&self) -> usize {
        self.d_in as usize * self.elem.size()
    }
}

/// One `paths` entry to its shard files, in order.
fn resolve(entry: &str) -> Result<Vec<ShardFile>, String> {
    match Location::parse(entry)? {
        Location::Local(path) => resolve_local(entry, &path.to_string_lossy()),
        Location::S3 { bucket, key } => resolve_s3(entry, &bucket, &key),
    }
}

const NO_SHARDS: &str = "no .npy, .safetensors or .parquet file";
/// Starts the message of a shard refused for lying outside the data roots.
const DATA_OUTSIDE_ROOTS: &str = "DATA_OUTSIDE_ROOTS";

/// An object, a directory (the shards directly under the prefix) or a glob
/// pattern over keys.
fn resolve_s3(entry: &str, bucket: &str, key: &str) -> Result<Vec<ShardFile>, String> {
    // Outside the team's prefixes: refused before anything is listed.
    s3::allowed(bucket, cohort_spec::prefixes::checked_key(key)).map_err(|e| data_err(entry, e))?;
    let store = s3::bucket(bucket).map_err(|e| data_err(entry, e))?;
    let shard = |k: &str, len: u64| -> Option<ShardFile> {
        let format = Format::of(k)?;
        let blob = S3Blob::new(store.clone(), bucket, k, len);
        Some((Arc::new(blob) as Arc<dyn Blob>, format))
    };
    if let Some(first) = key.find(['*', '?', '[']) {
        let pattern = glob::Pattern::new(key).map_err(|e| data_err(entry, e))?;
        let dir = &key[..key[..first].rfind('/').map_or(0, |i| i + 1)];
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..Default::default()
        };
        let found: Vec<ShardFile> = s3::list(bucket, dir, true)?
            .into_iter()
            .filter(|(k, _)| pattern.matches_with(k, options))
            .filter_map(|(k, len)| shard(&k, len))
            .collect();
        if found.is_empty() {
            return Err(data_err(entry, format!("the pattern matches {NO_SHARDS}")));
        }
        return Ok(found);
    }
    if !key.ends_with('/') && Format::of(key).is_some() {
        let blob = S3Blob::open(bucket, key).map_err(|e| data_err(entry, e))?;
        let format = Format::of(key).expect("checked");
        return Ok(vec![(Arc::new(blob) as Arc<dyn Blob>, format)]);
    }
    let found: Vec<ShardFile> = s3::list(bucket, key, false)?
        .into_iter()
        .filter_map(|(k, len)| shard(&k, len))
        .collect();
    if found.is_empty() {
        return Err(data_err(entry, format!("the prefix holds {NO_SHARDS}")));
    }
    Ok(found)
}

fn resolve_local(entry: &str, path: &str) -> Result<Vec<ShardFile>, String> {
    // The agent's data roots: every file, once its pattern or directory is
    // expanded and its links resolved, must lie under one.
    let roots = DataRoots::from_env().map_err(|e| data_err(entry, e))?;
    let local = |p: PathBuf, format| -> Result<ShardFile, String> {
        let name = p.display().to_string();
        roots
            .check(&name, Path::new("."))
            .map_err(|e| data_err(entry, format!("{DATA_OUTSIDE_ROOTS}: {e}")))?;
        let blob = LocalBlob::open(p).map_err(|e| data_err(&name, e))?;
        Ok((Arc::new(blob) as Arc<dyn Blob>, format))
    };
    // The shard files among `paths`, sorted; none is an error saying `what`.
    let shards = |paths: Vec<Result<PathBuf, String>>, what: &str| {
        let mut found = Vec::new();
        for p in paths {
            let p = p.map_err(|e| data_err(entry, e))?;
            if p.is_file() && shard_format(&p).is_some() {
                found.push(p);
            }
        }
        found.sort();
        if found.is_empty() {
            return Err(data_err(entry, format!("{what} {NO_SHARDS}")));
        }
        Ok(found)
    };
    let found: Vec<PathBuf> = if path.contains(['*', '?', '[']) {
        let matches = glob::glob(path).map_err(|e| data_err(entry, e))?;
        shards(
            matches.map(|m| m.map_err(|e| e.to_string())).collect(),
            "the pattern matches",
        )?
    } else if Path::new(path).is_dir() {
        let listing = std::fs::read_dir(path).map_err(|e| data_err(entry, e))?;
        shards(
            listing
                .map(|i| i.map(|i| i.path()).map_err(|e| e.to_string()))
                .collect(),
            "the directory holds",
        )?
    } else {
        let p = PathBuf::from(path);
        if shard_format(&p).is_none() {
            let why = if p.exists() {
                "is not a .npy, .safetensors or .parquet file"
            } else {
                "no such file or directory"
            };
            return Err(data_err(entry, why));
        }
        vec![p]
    };
    found
        .into_iter()
        .map(|p| {
            let format = shard_format(&p).expect("filtered");
            local(p, format)
        })
        .collect()
}

fn shard_format(p: &Path) -> Option<Format> {
    Format::of(&p.file_name()?.to_string_lossy())
}
