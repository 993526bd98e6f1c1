//! Token secrets: 256 random bits, shown once, kept only as their SHA-256.

use sha2::{Digest, Sha256};

/// What every secret starts with (so a leaked one is easy to find and name).
pub const PREFIX: &str = "cohort_";

/// A new secret: the prefix and 64 hex digits of 256 bits from the OS.
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{PREFIX}{hex}"))
}

/// The SHA-256 of a secret, hex: what the database keeps and looks up by.
pub fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_256_random_bits_kept_as_a_hash() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), PREFIX.len() + 64);
        assert!(a.starts_with(PREFIX));
        assert_eq!(hash(&a).len(), 64);
        assert_ne!(hash(&a), hash(&b));
        // the well-known SHA-256 of "abc"
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
