//! A directory of entries, each a directory of files written together: on
//! a file system or under an S3 prefix, with one API. An entry is staged in
//! a local directory, then published whole: renamed into place on a file
//! system (fsynced first), uploaded file by file in the order given on S3
//! (the last file marks the entry complete). A reader sees an entry only
//! once every file it looks for is there.

use super::local::{failed, sync};
use super::s3;
use cohort_spec::location::{join_key, Location};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Dir {
    at: Location,
}

/// An entry being written: its files go into [`Staged::path`], then
/// [`Dir::publish`] makes it visible.
#[derive(Debug)]
pub struct Staged {
    name: String,
    path: PathBuf,
}

impl Staged {
    /// The local directory to write the entry's files into.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A file of an entry, on the local file system: in place for a local
/// directory, else a downloaded copy removed when this is dropped.
#[derive(Debug)]
pub struct Fetched {
    path: PathBuf,
    copy: bool,
}

impl Fetched {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        if self.copy {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl Dir {
    /// The directory at `at`. For S3, `at` must lie within the prefixes
    /// open to this process ([`s3::allowed`]).
    pub fn open(at: Location) -> Result<Self, String> {
        if let Location::S3 { bucket, key } = &at {
            s3::allowed(bucket, key)?;
        }
        Ok(Self { at })
    }

    /// Where entry `name` is: a path, or an `s3://` URI.
    pub fn location_of(&self, name: &str) -> String {
        self.at.join(name).to_string()
    }

    /// The names of the entries that hold every one of `files`, by name
    /// (hidden names, entries being staged, left out).
    pub fn complete(&self, files: &[&str]) -> Result<Vec<String>, String> {
        match &self.at {
            Location::Local(root) => {
                let Ok(entries) = fs::read_dir(root) else {
                    return Ok(Vec::new());
                };
                let mut names: Vec<String> = entries
                    .flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .filter(|e| files.iter().all(|f| e.path().join(f).is_file()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                Ok(names)
            }
            Location::S3 { bucket, key } => {
                let prefix = join_key(key, "");
                let mut held: BTreeMap<String, usize> = BTreeMap::new();
                for (object, _) in s3::list(bucket, &prefix, true)? {
                    let rest = object
                        .strip_prefix(prefix.as_str())
                        .unwrap_or(&object)
                        .trim_start_matches('/');
                    if let Some((entry, file)) = rest.split_once('/') {
                        if files.contains(&file) && !entry.starts_with('.') {
                            *held.entry(entry.to_string()).or_default() += 1;
                        }
                    }
                }
                Ok(held
                    .into_iter()
                    .filter(|(_, n)| *n == files.len())
                    .map(|(name, _)| name)
                    .collect())
            }
        }
    }

    /// The bytes of a small `file` of entry `name`; `None` when it is not
    /// there (or, on a file system, cannot be read).
    pub fn read(&self, name: &str, file: &str) -> Result<Option<Vec<u8>>, String> {
        match self.at.join(name).join(file) {
            Location::Local(path) => Ok(fs::read(path).ok()),
            Location::S3 { bucket, key } => s3::get_if_present(&bucket, &key),
        }
    }

    /// `file` of entry `name` as a local file; a copy is made in `scratch`
    /// when the entry is not on this file system.
    pub fn fetch(&self, name: &str, file: &str, scratch: &Path) -> Result<Fetched, String> {
        match self.at.join(name).join(file) {
            Location::Local(path) => Ok(Fetched { path, copy: false }),
            Location::S3 { bucket, key } => {
                fs::create_dir_all(scratch).map_err(|e| failed("create", scratch, e))?;
                let path = scratch.join(format!(".restore-{name}-{file}"));
                let fetched = Fetched { path, copy: true };
                let mut out = fs::File::create(&fetched.path)
                    .map_err(|e| failed("create", &fetched.path, e))?;
                s3::download(&bucket, &key, &mut out)?;
                Ok(fetched)
            }
        }
    }

    /// A fresh local directory to write entry `name` into: beside the
    /// entries (hidden, so no reader takes it for one) on a file system,
    /// in `scratch` for S3.
    pub fn stage(&self, name: &str, scratch: &Path) -> Result<Staged, String> {
        let path = match &self.at {
            Location::Local(root) => root.join(format!(".{name}.tmp-{}", std::process::id())),
            Location::S3 { .. } => scratch.join(format!(".upload-{name}")),
        };
        if path.exists() {
            fs::remove_dir_all(&path).map_err(|e| failed("remove", &path, e))?;
        }
        fs::create_dir_all(&path).map_err(|e| failed("create", &path, e))?;
        Ok(Staged {
            name: name.to_string(),
            path,
        })
    }

    /// Make a staged entry visible, replacing one of the same name; `files`
    /// in the order they are published (the last marks it complete).
    /// Returns where it is.
    pub fn publish(&self, staged: Staged, files: &[&str]) -> Result<String, String> {
        let at = self.location_of(&staged.name);
        match &self.at {
            Location::Local(root) => {
                for file in files {
                    sync(&staged.path.join(file))?;
                }
                let target = root.join(&staged.name);
                if target.exists() {
                    fs::remove_dir_all(&target).map_err(|e| failed("replace", &target, e))?;
                }
                fs::rename(&staged.path, &target).map_err(|e| failed("rename", &target, e))?;
                sync(root)?;
            }
            Location::S3 { bucket, key } => {
                let uploaded = files.iter().try_for_each(|file| {
                    let path = staged.path.join(file);
                    let source = fs::File::open(&path).map_err(|e| failed("read", &path, e))?;
                    s3::upload(
                        bucket,
                        &join_key(&join_key(key, &staged.name), file),
                        source,
                    )
                });
                let _ = fs::remove_dir_all(&staged.path);
                uploaded?;
            }
        }
        Ok(at)
    }

    /// Remove entry `name`; on S3 its `files` in the order given (the one
    /// that marks it complete first).
    pub fn remove(&self, name: &str, files: &[&str]) -> Result<(), String> {
        match self.at.join(name) {
            Location::Local(path) => {
                fs::remove_dir_all(&path).map_err(|e| failed("prune", &path, e))
            }
            Location::S3 { bucket, key } => files
                .iter()
                .try_for_each(|file| s3::delete(&bucket, &join_key(&key, file))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_seen_once_published_whole_and_replaced_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(Location::Local(tmp.path().join("root"))).unwrap();
        assert_eq!(dir.complete(&["a", "b"]).unwrap(), Vec::<String>::new());
        let staged = dir.stage("step-1", tmp.path()).unwrap();
        fs::write(staged.path().join("a"), b"1").unwrap();
        fs::write(staged.path().join("b"), b"2").unwrap();
        assert!(
            dir.complete(&["a", "b"]).unwrap().is_empty(),
            "not yet published"
        );
        let at = dir.publish(staged, &["a", "b"]).unwrap();
        assert_eq!(at, tmp.path().join("root/step-1").display().to_string());
        assert_eq!(dir.complete(&["a", "b"]).unwrap(), ["step-1"]);
        assert_eq!(dir.read("step-1", "b").unwrap().unwrap(), b"2");
        assert_eq!(dir.read("step-1", "c").unwrap(), None);
        let fetched = dir.fetch("step-1", "a", tmp.path()).unwrap();
        assert_eq!(fs::read(fetched.path()).unwrap(), b"1");
        drop(fetched);
        assert!(
            tmp.path().join("root/step-1/a").is_file(),
            "a file in place stays"
        );

        let again = dir.stage("step-1", tmp.path()).unwrap();
        fs::write(again.path().join("a"), b"3").unwrap();
        dir.publish(again, &["a"]).unwrap();
        assert_eq!(dir.complete(&["a", "b"]).unwrap(), Vec::<String>::new());
        assert_eq!(dir.complete(&["a"]).unwrap(), ["step-1"]);
        dir.remove("step-1", &["a"]).unwrap();
        assert!(dir.complete(&["a"]).unwrap().is_empty());
    }
}
