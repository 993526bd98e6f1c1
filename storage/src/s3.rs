//! S3 through object_store. [`config`] is the one client builder (every
//! part that reads or writes S3 builds its clients there). The blocking
//! operations below serve the rank: one client per bucket, driven by one
//! small tokio runtime that the rank's threads block on (the training loop
//! and the data reader are plain threads), each operation checked against
//! the object-storage prefixes open to the rank's team.

use super::Blob;
use cohort_spec::location::s3_uri;
use cohort_spec::prefixes::S3Prefixes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::{Arc, Mutex, OnceLock};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cohort-s3")
            .enable_all()
            .build()
            .expect("build the object storage runtime")
    })
}

/// Run `f` to completion on the storage runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// `Ok` when this rank may touch `key` of `bucket` (or every key under it):
/// the object-storage prefixes its agent opened to its team
/// (`COHORT_S3_PREFIXES`, read once); unset, any. Every operation below
/// checks, so no object outside them is read, listed, written or deleted.
pub fn allowed(bucket: &str, key: &str) -> Result<(), String> {
    process_prefixes()?
        .check(bucket, key)
        .map_err(|e| format!("DATA_OUTSIDE_ROOTS: {e}"))
}

/// This process's prefixes (`COHORT_S3_PREFIXES`, read once).
fn process_prefixes() -> Result<S3Prefixes, String> {
    static PREFIXES: OnceLock<Result<S3Prefixes, String>> = OnceLock::new();
    PREFIXES.get_or_init(S3Prefixes::from_env).clone()
}

/// An S3 client for `bucket`, configured from `env` (AWS_* variables, a
/// team's env file) when given, else from this process's AWS_* environment.
/// S3-compatible servers (MinIO, moto, Ceph: an endpoint is given) take
/// path-style requests.
pub fn config(bucket: &str, env: Option<&[(String, String)]>) -> Result<AmazonS3, String> {
    let mut builder = match env {
        None => AmazonS3Builder::from_env(),
        Some(vars) => vars
            .iter()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .filter_map(|(k, v)| Some((k.to_ascii_lowercase().parse().ok()?, v)))
            .fold(AmazonS3Builder::new(), |b, (key, value)| {
                b.with_config(key, value)
            }),
    };
    let given = |name: &str| match env {
        None => std::env::var_os(name).is_some(),
        Some(vars) => vars.iter().any(|(k, _)| k == name),
    };
    if given("AWS_ENDPOINT_URL") || given("AWS_ENDPOINT") {
        builder = builder.with_virtual_hosted_style_request(false);
    }
    builder
        .with_bucket_name(bucket)
        .build()
        .map_err(|e| format!("{}: cannot configure S3: {e}", s3_uri(bucket, "")))
}

/// This process's client for `bucket` (built once, from its environment).
pub fn bucket(bucket: &str) -> Result<Arc<AmazonS3>, String> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<AmazonS3>>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(Default::default);
    let mut clients = clients.lock().expect("clients lock");
    if let Some(c) = clients.get(bucket) {
        return Ok(c.clone());
    }
    let client = Arc::new(config(bucket, None)?);
    clients.insert(bucket.to_string(), client.clone());
    Ok(client)
}

fn to_io(e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => {
            io::Error::new(io::ErrorKind::NotFound, e.to_string())
        }
        e => io::Error::other(e.to_string()),
    }
}

/// One object, read by ranges.
pub struct S3Blob {
    store: Arc<AmazonS3>,
    path: ObjectPath,
    name: String,
    len: u64,
}

impl S3Blob {
    /// An object whose size is known (from a listing).
    pub fn new(store: Arc<AmazonS3>, bucket: &str, key: &str, len: u64) -> Self {
        Self {
            store,
            path: ObjectPath::from(key),
            name: s3_uri(bucket, key),
            len,
        }
    }

    /// An object by name: its size from a HEAD request.
    pub fn open(bucket_name: &str, key: &str) -> io::Result<Self> {
        allowed(bucket_name, key).map_err(io::Error::other)?;
        let store = bucket(bucket_name).map_err(io::Error::other)?;
        let meta = block_on(store.head(&ObjectPath::from(key))).map_err(to_io)?;
        Ok(Self::new(store, bucket_name, key, meta.size))
    }
}

impl Blob for S3Blob {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn remote(&self) -> bool {
        true
    }

    /// One GET per range, fetched concurrently (object_store merges ranges
    /// closer than 1 MiB into one request).
    fn read_ranges(&self, ranges: &[(u64, usize)], out: &mut [u8]) -> io::Result<()> {
        let wanted: Vec<std::ops::Range<u64>> = ranges
            .iter()
            .map(|&(offset, len)| offset..offset + len as u64)
            .collect();
        let parts = block_on(self.store.get_ranges(&self.path, &wanted)).map_err(to_io)?;
        let mut at = 0;
        for (part, &(_, len)) in parts.iter().zip(ranges) {
            if part.len() != len {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: short read ({} of {len} bytes)", self.name, part.len()),
                ));
            }
            out[at..at + len].copy_from_slice(part);
            at += len;
        }
        Ok(())
    }
}

/// One bucket with the client and the prefixes of whoever works in it:
/// this process's (the rank's: its AWS_* environment and
/// `COHORT_S3_PREFIXES`), or a team's (the agent keeping a team program's
/// checkpoints: that team's env file and prefixes, never the agent's own
/// credentials). Every operation checks its key against the prefixes.
pub struct Bucket {
    store: Arc<AmazonS3>,
    name: String,
    prefixes: S3Prefixes,
}

impl Bucket {
    /// The bucket as a team reaches it: a client from its AWS_* variables.
    pub fn for_team(
        name: &str,
        env: &[(String, String)],
        prefixes: S3Prefixes,
    ) -> Result<Self, String> {
        Ok(Self {
            store: Arc::new(config(name, Some(env))?),
            name: name.to_string(),
            prefixes,
        })
    }

    /// The bucket as this process reaches it (one client per bucket).
    pub fn process(name: &str) -> Result<Self, String> {
        Ok(Self {
            store: bucket(name)?,
            name: name.to_string(),
            prefixes: process_prefixes()?,
        })
    }

    fn allowed(&self, key: &str) -> Result<(), String> {
        self.prefixes
            .check(&self.name, key)
            .map_err(|e| format!("DATA_OUTSIDE_ROOTS: {e}"))
    }

    /// (key, size) of the objects directly under `prefix` (a "directory"),
    /// or of every object under it with `recursive`, sorted by key.
    pub fn list(&self, prefix: &str, recursive: bool) -> Result<Vec<(String, u64)>, String> {
        self.allowed(prefix.trim_end_matches('/'))?;
        let dir = ObjectPath::from(prefix.trim_end_matches('/'));
        let prefix_opt = (!prefix.trim_end_matches('/').is_empty()).then_some(&dir);
        let err =
            |e: object_store::Error| format!("{}: cannot list: {e}", s3_uri(&self.name, prefix));
        let mut found: Vec<(String, u64)> = if recursive {
            block_on(
                self.store
                    .list(prefix_opt)
                    .map_ok(|m| (m.location.to_string(), m.size))
                    .try_collect(),
            )
            .map_err(err)?
        } else {
            block_on(self.store.list_with_delimiter(prefix_opt))
                .map_err(err)?
                .objects
                .into_iter()
                .map(|m| (m.location.to_string(), m.size))
                .collect()
        };
        found.sort();
        Ok(found)
    }

    /// Upload `source` (any size: multipart, 8 MiB parts) to `key`.
    pub fn upload(&self, key: &str, mut source: impl Read) -> Result<(), String> {
        self.allowed(key)?;
        let path = ObjectPath::from(key);
        let err =
            |e: &dyn std::fmt::Display| format!("{}: cannot upload: {e}", s3_uri(&self.name, key));
        block_on(async {
            let upload = self.store.put_multipart(&path).await.map_err(|e| err(&e))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, 8 << 20);
            let mut buf = vec![0u8; 8 << 20];
            loop {
                let n = source.read(&mut buf).map_err(|e| err(&e))?;
                if n == 0 {
                    break;
                }
                writer.wait_for_capacity(4).await.map_err(|e| err(&e))?;
                writer.write(&buf[..n]);
            }
            writer.finish().await.map_err(|e| err(&e))?;
            Ok(())
        })
    }

    /// Put a small object in one request.
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), String> {
        self.allowed(key)?;
        block_on(
            self.store
                .put(&ObjectPath::from(key), PutPayload::from(bytes)),
        )
        .map(|_| ())
        .map_err(|e| format!("{}: cannot write: {e}", s3_uri(&self.name, key)))
    }

    /// A whole (small) object, or `None` when there is none at `key`.
    pub fn get_if_present(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.allowed(key)?;
        let got = block_on(async {
            let got = self.store.get(&ObjectPath::from(key)).await?;
            got.bytes().await
        });
        match got {
            Ok(b) => Ok(Some(b.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(format!("{}: cannot read: {e}", s3_uri(&self.name, key))),
        }
    }

    /// Stream an object into `sink`, a part at a time.
    pub fn download(&self, key: &str, sink: &mut impl io::Write) -> Result<(), String> {
        self.allowed(key)?;
        let err =
            |e: &dyn std::fmt::Display| format!("{}: cannot read: {e}", s3_uri(&self.name, key));
        block_on(async {
            let got = self
                .store
                .get(&ObjectPath::from(key))
                .await
                .map_err(|e| err(&e))?;
            let mut stream = got.into_stream();
            while let Some(part) = stream.next().await {
                let part = part.map_err(|e| err(&e))?;
                sink.write_all(&part).map_err(|e| err(&e))?;
            }
            Ok(())
        })
    }

    pub fn delete(&self, key: &str) -> Result<(), String> {
        self.allowed(key)?;
        block_on(self.store.delete(&ObjectPath::from(key)))
            .map_err(|e| format!("{}: cannot delete: {e}", s3_uri(&self.name, key)))
    }
}

/// This process's [`Bucket::list`].
pub fn list(
    bucket_name: &str,
    prefix: &str,
    recursive: bool,
) -> Result<Vec<(String, u64)>, String> {
    Bucket::process(bucket_name)?.list(prefix, recursive)
}

/// This process's [`Bucket::upload`].
pub fn upload(bucket_name: &str, key: &str, source: impl Read) -> Result<(), String> {
    Bucket::process(bucket_name)?.upload(key, source)
}

/// This process's [`Bucket::put`].
pub fn put(bucket_name: &str, key: &str, bytes: Vec<u8>) -> Result<(), String> {
    Bucket::process(bucket_name)?.put(key, bytes)
}

/// This process's [`Bucket::get_if_present`].
pub fn get_if_present(bucket_name: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
    Bucket::process(bucket_name)?.get_if_present(key)
}

/// This process's [`Bucket::download`].
pub fn download(bucket_name: &str, key: &str, sink: &mut impl io::Write) -> Result<(), String> {
    Bucket::process(bucket_name)?.download(key, sink)
}

/// This process's [`Bucket::delete`].
pub fn delete(bucket_name: &str, key: &str) -> Result<(), String> {
    Bucket::process(bucket_name)?.delete(key)
}
