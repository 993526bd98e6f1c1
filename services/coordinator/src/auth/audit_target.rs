//! What a handler's denial was about, for its audit row only.
//!
//! The auth layer writes the audit row of a call a handler refused, but only
//! the handler knows what the call named (a training, a team) and whose it
//! is. A handler attaches both to its Status as metadata; the layer takes
//! them off the response before it leaves, so the caller, who may not see
//! that resource, never learns its team.

use tonic::metadata::MetadataValue;

const TARGET: &str = "cohort-audit-target";
const TARGET_TEAM: &str = "cohort-audit-target-team";

/// Marks `status` as a denial of `target`, which belongs to `team` (empty:
/// none, or unknown).
pub fn attach(status: &mut tonic::Status, target: &str, team: &str) {
    for (key, value) in [(TARGET, target), (TARGET_TEAM, team)] {
        if let Ok(value) = MetadataValue::try_from(value) {
            status.metadata_mut().insert(key, value);
        }
    }
}

/// Takes the target and its team off a response's headers (both empty when
/// the handler named none).
pub fn take(headers: &mut http::HeaderMap) -> (String, String) {
    let mut take = |key: &str| {
        headers
            .remove(key)
            .and_then(|v| v.to_str().ok().map(str::to_string))
            .unwrap_or_default()
    };
    let target = take(TARGET);
    (target, take(TARGET_TEAM))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_carries_its_target_to_the_layer_and_no_further() {
        // As a handler refuses another team's training: through the table.
        let status = tonic::Status::from(crate::error::ApiError::NotYours {
            what: "training t-1".into(),
            caller_team: "nlp".into(),
            owner: "vision".into(),
        });
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        let response = status.into_http::<tonic::body::Body>();
        let mut headers = response.headers().clone();
        assert_eq!(
            take(&mut headers),
            ("training t-1".to_string(), "vision".to_string())
        );
        assert!(headers.get(TARGET).is_none() && headers.get(TARGET_TEAM).is_none());
        assert_eq!(take(&mut headers), (String::new(), String::new()));
    }
}
