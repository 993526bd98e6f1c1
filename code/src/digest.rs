//! SHA-256 digests as lowercase hex: the archive's content address.

use sha2::{Digest as _, Sha256};

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut digest = Digest::new();
    digest.update(bytes);
    digest.finish()
}

/// Whether `s` is exactly 64 characters of lowercase hex (`[0-9a-f]`):
/// the one check, cohort-spec's (the config's snapshots use it too).
pub use cohort_spec::code::is_sha256_hex;

/// A streaming SHA-256 whose result is lowercase hex.
#[derive(Clone, Default)]
pub struct Digest(Sha256);

impl Digest {
    /// An empty digest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `bytes` into the digest.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of everything fed so far, as 64 lowercase hex characters.
    pub fn finish(self) -> String {
        to_hex(&self.0.finalize())
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digest(sha256)")
    }
}

fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn streaming_matches_one_shot() {
        let mut d = Digest::new();
        d.update(b"a");
        d.update(b"bc");
        assert_eq!(d.finish(), sha256_hex(b"abc"));
    }

    #[test]
    fn hex_check() {
        assert!(is_sha256_hex(&sha256_hex(b"x")));
        assert!(!is_sha256_hex(&"A".repeat(64)));
        assert!(!is_sha256_hex(&"a".repeat(63)));
        assert!(!is_sha256_hex(&"a".repeat(65)));
        assert!(!is_sha256_hex(&"g".repeat(64)));
    }
}
