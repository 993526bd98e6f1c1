//! What a training's label may be (CreateTrainingRequest.labels, and the
//! labels a sweep gives its trials).

/// A key: 1-63 of a-z, 0-9, '.', '_', '-', '/', starting with a letter or digit.
pub fn label_key_ok(key: &str) -> bool {
    (1..=63).contains(&key.len())
        && key.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c))
}

/// A value: 1-128 of A-Z, a-z, 0-9, '.', '_', '-', '+', ':', '/', '@'.
pub fn label_value_ok(value: &str) -> bool {
    (1..=128).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+:/@".contains(c))
}
