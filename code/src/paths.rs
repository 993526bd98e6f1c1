//! Lexical path rules shared by packing and unpacking: archive paths are
//! relative, `/`-separated, UTF-8, with only normal components.

/// The longest path (or symlink target) the archive carries, in bytes.
pub(crate) const MAX_PATH_BYTES: usize = 4096;

/// The longest single path component, in bytes.
pub(crate) const MAX_NAME_BYTES: usize = 255;

/// Whether the symlink at `link_path` (relative to the root, `/`-separated)
/// with the relative `target` resolves, lexically from the link's directory,
/// to a path inside the root. Absolute targets never do.
pub(crate) fn link_stays_inside(link_path: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let mut depth = link_path.split('/').filter(|c| !c.is_empty()).count();
    // The link's own name is not a directory it resolves from.
    depth = depth.saturating_sub(1);
    for component in target.split('/') {
        match component {
            "" | "." => {}
            ".." if depth == 0 => return false,
            ".." => depth -= 1,
            _ => depth += 1,
        }
    }
    true
}

/// Validates an entry path read from an archive and returns it normalised
/// (empty components dropped, so a directory's trailing `/` goes), or why
/// it is refused.
pub(crate) fn archive_path(bytes: &[u8]) -> Result<String, &'static str> {
    let text = std::str::from_utf8(bytes).map_err(|_| "its name is not UTF-8")?;
    if text.starts_with('/') {
        return Err("it is an absolute path");
    }
    if text.len() > MAX_PATH_BYTES {
        return Err("its path is longer than 4096 bytes");
    }
    let mut parts = Vec::new();
    for component in text.split('/').filter(|c| !c.is_empty()) {
        if component == "." || component == ".." {
            return Err("it has a `.` or `..` component");
        }
        if component.len() > MAX_NAME_BYTES {
            return Err("a component of its path is longer than 255 bytes");
        }
        parts.push(component);
    }
    if parts.is_empty() {
        return Err("its path is empty");
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_inside_and_outside() {
        assert!(link_stays_inside("l", "a/b"));
        assert!(link_stays_inside("d/l", ".."));
        assert!(link_stays_inside("d/l", "../x"));
        assert!(link_stays_inside("d/e/l", "./../../x"));
        assert!(link_stays_inside("l", "a/../b"));
        assert!(!link_stays_inside("l", ".."));
        assert!(!link_stays_inside("l", "../outside"));
        assert!(!link_stays_inside("d/l", "../../x"));
        assert!(!link_stays_inside("l", "a/../../x"));
        assert!(!link_stays_inside("l", "/etc"));
    }

    #[test]
    fn archive_paths() {
        assert_eq!(archive_path(b"a/b").as_deref(), Ok("a/b"));
        assert_eq!(archive_path(b"dir/").as_deref(), Ok("dir"));
        assert_eq!(archive_path(b"a//b").as_deref(), Ok("a/b"));
        assert!(archive_path(b"../evil").is_err());
        assert!(archive_path(b"a/../b").is_err());
        assert!(archive_path(b"./a").is_err());
        assert!(archive_path(b"/abs").is_err());
        assert!(archive_path(b"").is_err());
        assert!(archive_path(b"\xff").is_err());
        assert!(archive_path("x".repeat(256).as_bytes()).is_err());
        assert!(archive_path("a/".repeat(2049).as_bytes()).is_err());
    }
}
