//! Opaque page tokens (AIP-158): the position after the last item of a page,
//! hex-encoded so clients treat it as a blob. Not a secret, not a signature:
//! a token that does not decode is INVALID_ARGUMENT.

use crate::api::error::ApiError;
use crate::persistence::TrainingCursor;
use chrono::DateTime;
use cohort_proto::error::Reason;
use tonic::Status;

/// Items per page of a listing when the request leaves `page_size` 0.
const DEFAULT_PAGE_SIZE: i64 = 100;
/// The most items per page of a listing (a larger `page_size` is capped).
const MAX_PAGE_SIZE: i64 = 1000;

/// The items per page a request's `page_size` asks for (AIP-158: 0 means
/// the default, more than the maximum means the maximum).
pub(crate) fn page_size(raw: i32) -> Result<i64, Status> {
    match raw {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n < 0 => Err(ApiError::field("page_size", "must be >= 0").into()),
        n => Ok(i64::from(n).min(MAX_PAGE_SIZE)),
    }
}

/// Hex of `bytes` (what every page token is on the wire).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex token; `None` when it is not hex.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The token of the page after `cursor`.
pub fn encode_training_cursor(cursor: &TrainingCursor) -> String {
    let text = format!("t1:{}:{}", cursor.create_time.timestamp_micros(), cursor.id);
    hex(text.as_bytes())
}

/// The cursor a token names; `None` for an empty token (the first page).
pub fn decode_training_cursor(token: &str) -> Result<Option<TrainingCursor>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid = not_ours;
    let text = unhex(token)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(invalid)?;
    let mut parts = text.splitn(3, ':');
    let (Some("t1"), Some(micros), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    let create_time = micros
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .ok_or_else(invalid)?;
    Ok(Some(TrainingCursor {
        create_time,
        id: id.to_string(),
    }))
}

/// The token of a page after the item whose key is `key`, for listings of
/// kind `kind` (`k1` names, `a1` audit ids...).
pub fn encode_key(kind: &str, key: &str) -> String {
    hex(format!("{kind}:{key}").as_bytes())
}

/// INVALID_ARGUMENT (INVALID_PAGE_TOKEN) for a token this server did not issue.
fn not_ours() -> Status {
    ApiError::field_with(
        Reason::InvalidPageToken,
        "page_token",
        "not a token this server issued",
    )
    .into()
}

/// The key a token of kind `kind` names; `None` for an empty token.
pub fn decode_key(kind: &str, token: &str) -> Result<Option<String>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    unhex(token)
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|t| t.strip_prefix(&format!("{kind}:")).map(str::to_string))
        .map(Some)
        .ok_or_else(not_ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let cursor = TrainingCursor {
            create_time: DateTime::from_timestamp_micros(1_763_800_000_123_456).unwrap(),
            id: "trn-abc".into(),
        };
        let token = encode_training_cursor(&cursor);
        assert_eq!(decode_training_cursor(&token).unwrap(), Some(cursor));
        assert_eq!(decode_training_cursor("").unwrap(), None);
        for bad in ["zz", "abc", &hex(b"t2:1:x"), &hex(b"t1:nope:x")] {
            let err = decode_training_cursor(bad).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn keyed_tokens_round_trip_and_refuse_other_kinds() {
        let t = encode_key("k1", "ci-bot");
        assert_eq!(decode_key("k1", &t).unwrap().as_deref(), Some("ci-bot"));
        assert_eq!(decode_key("k1", "").unwrap(), None);
        assert!(decode_key("a1", &t).is_err());
        assert!(decode_key("k1", "zz").is_err());
    }
}
