//! The shape of an archive being unpacked, kept in memory as a tree of
//! path components: it refuses entries that would collide with or lie under
//! earlier ones, and at the end creates the symlinks and makes every
//! directory read-only.

use std::collections::HashMap;
use std::fs::{self, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::CodeError;

/// What an archive path holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// A directory created for the entries under it, with no entry of its own.
    ImplicitDir,
    Dir,
    File,
    Symlink(Box<str>),
}

#[derive(Debug)]
struct Node {
    kind: NodeKind,
    children: HashMap<Box<str>, Node>,
}

impl Node {
    fn new(kind: NodeKind) -> Self {
        Self {
            kind,
            children: HashMap::new(),
        }
    }
}

/// Every path seen so far, as a tree rooted at the destination.
#[derive(Debug)]
pub(crate) struct Layout {
    root: Node,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            root: Node::new(NodeKind::Dir),
        }
    }
}

impl Layout {
    /// Records an entry at the validated, `/`-separated `path`. Returns how
    /// many directories it implies that did not exist yet, or why the entry
    /// is refused (a duplicate, under a file or symlink, over a directory).
    pub(crate) fn insert(&mut self, path: &str, kind: NodeKind) -> Result<u64, String> {
        let (parents, name) = path.rsplit_once('/').unwrap_or(("", path));
        let mut node = &mut self.root;
        let mut created = 0;
        let mut walked = 0;
        for part in parents.split('/').filter(|p| !p.is_empty()) {
            walked += part.len() + usize::from(walked > 0);
            let child = node.children.entry(part.into()).or_insert_with(|| {
                created += 1;
                Node::new(NodeKind::ImplicitDir)
            });
            let above = path.get(..walked).unwrap_or(path);
            match child.kind {
                NodeKind::File => return Err(format!("it lies under the file {above}")),
                NodeKind::Symlink(_) => return Err(format!("it lies under the symlink {above}")),
                NodeKind::Dir | NodeKind::ImplicitDir => node = child,
            }
        }
        match node.children.get_mut(name) {
            None => {
                node.children.insert(name.into(), Node::new(kind));
                Ok(created)
            }
            Some(existing) if existing.kind == NodeKind::ImplicitDir && kind == NodeKind::Dir => {
                existing.kind = NodeKind::Dir;
                Ok(created)
            }
            Some(existing) if existing.kind == NodeKind::ImplicitDir => {
                Err("it would replace a directory that earlier entries lie in".into())
            }
            Some(_) => Err("it is a duplicate entry".into()),
        }
    }

    /// Creates the recorded symlinks, then makes every directory (`dest`
    /// included) read-only, children before parents. Files were made
    /// read-only as they were written.
    pub(crate) fn finish(&self, dest: &Path) -> Result<(), CodeError> {
        let mut full = dest.to_path_buf();
        finish_dir(&self.root, dest, &mut full)
    }
}

fn finish_dir(node: &Node, dest: &Path, full: &mut PathBuf) -> Result<(), CodeError> {
    for (name, child) in &node.children {
        full.push(&**name);
        match &child.kind {
            NodeKind::Symlink(target) => std::os::unix::fs::symlink(&**target, &*full)
                .map_err(|e| CodeError::io(relative(dest, full), e))?,
            NodeKind::Dir | NodeKind::ImplicitDir => finish_dir(child, dest, full)?,
            NodeKind::File => {}
        }
        full.pop();
    }
    fs::set_permissions(&*full, Permissions::from_mode(0o555))
        .map_err(|e| CodeError::io(relative(dest, full), e))
}

fn relative(dest: &Path, full: &Path) -> String {
    match full.strip_prefix(dest) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
        _ => dest.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_collisions() {
        let mut layout = Layout::default();
        assert_eq!(layout.insert("a/b/c", NodeKind::File), Ok(2));
        assert_eq!(layout.insert("a", NodeKind::Dir), Ok(0));
        assert!(layout.insert("a", NodeKind::Dir).is_err());
        assert!(layout.insert("a/b/c", NodeKind::File).is_err());
        assert!(layout.insert("a/b", NodeKind::File).is_err());
        let err = layout.insert("a/b/c/d", NodeKind::File).unwrap_err();
        assert!(err.contains("under the file a/b/c"), "{err}");
        assert_eq!(layout.insert("l", NodeKind::Symlink("a".into())), Ok(0));
        let err = layout.insert("l/x", NodeKind::File).unwrap_err();
        assert!(err.contains("under the symlink l"), "{err}");
        assert!(layout.insert("l", NodeKind::Dir).is_err());
    }
}
