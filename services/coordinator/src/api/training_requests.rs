//! What TrainingService's requests must hold before anything is read or
//! written: CreateTraining's fields and labels, ListTrainings' filters.

use super::error::ApiError;
use crate::model::{label_key_ok, label_value_ok, AuditEntry, GpuRequest, JobState, Principal};
use crate::persistence::NewTraining;
use crate::policy::PriorityClasses;
use cohort_proto::error::Reason;
use cohort_proto::v1;
use cohort_spec::Workload;
use std::collections::{BTreeMap, HashMap};
use tonic::Status;

/// Restarts allowed when CreateTraining does not say.
pub const DEFAULT_MAX_RESTARTS: i32 = 3;
/// Longest accepted request_id.
pub const MAX_REQUEST_ID_LEN: usize = 128;
/// Labels a training may carry.
pub const MAX_LABELS: usize = 16;

const CREATE: &str = "cohort.v1.TrainingService/CreateTraining";

/// The priority and class a CreateTraining request asks for: its class's
/// value (the default class when it names none and gives no bare
/// priority), or the bare priority without a class.
pub(crate) fn priority_of(
    classes: &PriorityClasses,
    class: &str,
    priority: i32,
) -> Result<(i32, String), ApiError> {
    if class.is_empty() {
        return Ok(if priority == 0 {
            let default = classes.default_class();
            (default.value, default.name.clone())
        } else {
            (priority, String::new())
        });
    }
    let Some(c) = classes.get(class) else {
        return Err(ApiError::field(
            "priority_class",
            format!(
                "no priority class {class:?}; the classes are {}",
                classes.names()
            ),
        ));
    };
    if priority != 0 && priority != c.value {
        return Err(ApiError::field(
            "priority",
            format!(
                "class {} sets priority {}; leave priority unset",
                c.name, c.value
            ),
        ));
    }
    Ok((c.value, c.name.clone()))
}

/// Refuses a priority above `team`'s highest class `cap`.
pub fn check_cap(
    classes: &PriorityClasses,
    team: &str,
    cap: Option<&str>,
    priority: i32,
    class: &str,
) -> Result<(), ApiError> {
    let Some(max) = cap.and_then(|c| classes.get(c)) else {
        return Ok(());
    };
    if priority <= max.value {
        return Ok(());
    }
    Err(ApiError::PriorityClassNotAllowed {
        team: team.to_string(),
        class: if class.is_empty() {
            format!("priority {priority}")
        } else {
            class.to_string()
        },
        value: priority,
        max: max.name.clone(),
        max_value: max.value,
    })
}

/// A create's request_id (at most [`MAX_REQUEST_ID_LEN`]) and its
/// required config, checked (CreateTraining's and CreateSweep's).
pub(crate) fn checked_key_and_config(
    request_id: &str,
    config: Option<v1::TrainingConfig>,
) -> Result<Workload, Status> {
    if request_id.len() > MAX_REQUEST_ID_LEN {
        return Err(ApiError::field(
            "request_id",
            format!("at most {MAX_REQUEST_ID_LEN} characters"),
        )
        .into());
    }
    let config =
        config.ok_or_else(|| ApiError::field_with(Reason::InvalidConfig, "config", "required"))?;
    Ok(Workload::try_from(config).map_err(ApiError::from)?)
}

/// Checks a CreateTraining request of `who`; nothing is written when this fails.
pub fn validate_create(
    who: &Principal,
    classes: &PriorityClasses,
    req: v1::CreateTrainingRequest,
) -> Result<NewTraining, Status> {
    let config = checked_key_and_config(&req.request_id, req.config)?;
    let gpu_request = GpuRequest::try_from(req.gpus)
        .and_then(|r| r.for_workload(&config))
        .map_err(ApiError::from)?;
    let labels = checked_labels("labels", req.labels)?;
    let max_restarts = req.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS);
    if max_restarts < 0 {
        return Err(ApiError::field("max_restarts", "must be >= 0").into());
    }
    let (priority, priority_class) = priority_of(classes, &req.priority_class, req.priority)?;
    Ok(NewTraining {
        request_id: Some(req.request_id).filter(|r| !r.is_empty()),
        display_name: req.display_name,
        config,
        gpu_request,
        priority,
        priority_class,
        borrow: req.borrow.unwrap_or(true),
        max_restarts,
        trace_context: None,
        team: who.team().to_string(),
        creator: who.actor().1,
        labels,
        audit: Some(AuditEntry::ok(who, CREATE, "", who.team())),
        max_queued: None,
    })
}

pub fn state_filter(raw: &[i32]) -> Result<Vec<JobState>, Status> {
    raw.iter()
        .map(|&n| {
            v1::training::State::try_from(n)
                .ok()
                .and_then(|s| JobState::try_from(s).ok())
                .ok_or_else(|| {
                    ApiError::field("states", format!("{n} is not a training state")).into()
                })
        })
        .collect()
}

/// Checks labels (of a create, or a filter), naming the first bad one.
fn checked_labels(
    field: &str,
    labels: HashMap<String, String>,
) -> Result<BTreeMap<String, String>, Status> {
    if labels.len() > MAX_LABELS {
        return Err(ApiError::field(field, format!("at most {MAX_LABELS} labels")).into());
    }
    let labels: BTreeMap<String, String> = labels.into_iter().collect();
    for (key, value) in &labels {
        if !label_key_ok(key) {
            return Err(ApiError::field(
                format!("{field}[{key}]"),
                "a key is 1-63 of a-z, 0-9, '.', '_', '-', '/', starting with a letter or digit",
            )
            .into());
        }
        if !label_value_ok(value) {
            return Err(ApiError::field(
                format!("{field}[{key}]"),
                "a value is 1-128 of A-Z, a-z, 0-9, '.', '_', '-', '+', ':', '/', '@'",
            )
            .into());
        }
    }
    Ok(labels)
}

/// The longest config ParseTrainingConfig reads.
pub const MAX_CONFIG_TEXT: usize = 1 << 20;

/// ParseTrainingConfig: the text read as the CLI reads a config file.
pub fn parse_config(req: v1::ParseTrainingConfigRequest) -> Result<v1::TrainingConfig, Status> {
    use v1::parse_training_config_request::Format;
    if req.text.len() > MAX_CONFIG_TEXT {
        return Err(ApiError::field("text", format!("at most {MAX_CONFIG_TEXT} bytes")).into());
    }
    let format = Format::try_from(req.format)
        .map_err(|_| ApiError::field("format", format!("{} is not a format", req.format)))?;
    let workload = match format {
        Format::Unspecified | Format::Toml => Workload::from_toml(&req.text),
        Format::Json => Workload::from_json(&req.text),
    }
    .map_err(ApiError::from)?;
    let unpacked = workload
        .program()
        .and_then(|p| p.program.code.as_ref())
        .is_some_and(|c| c.snapshot().is_none());
    if unpacked {
        return Err(ApiError::from(cohort_spec::ConfigError::Invalid {
            field: "program.code".into(),
            reason: "a directory is packed and uploaded by the client (cohort train submit does); the API takes the snapshot UploadCode made".into(),
        })
        .into());
    }
    Ok(v1::TrainingConfig::from(&workload))
}

/// ListTrainings' label filter.
pub fn label_filter(labels: HashMap<String, String>) -> Result<Vec<(String, String)>, Status> {
    Ok(checked_labels("labels", labels)?.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: &str, value: &str) -> HashMap<String, String> {
        HashMap::from([(key.to_string(), value.to_string())])
    }

    #[test]
    fn configs_are_read_as_the_cli_reads_them() {
        let toml = "[model]\nd_in = 8\narchitecture = \"topk\"\nk = 4\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n";
        let config = parse_config(v1::ParseTrainingConfigRequest {
            text: toml.into(),
            format: 0,
        })
        .unwrap();
        assert_eq!(config.model.unwrap().k, Some(4));
        let json = r#"{"model": {"d_in": 8}, "optim": {"batch_size": 4, "steps": 5}, "data": {"synthetic": {"num_samples": 64}}}"#;
        let config = parse_config(v1::ParseTrainingConfigRequest {
            text: json.into(),
            format: 2,
        })
        .unwrap();
        assert_eq!(config.model.unwrap().d_in, 8);
        let bad = parse_config(v1::ParseTrainingConfigRequest {
            text: "[model]\nd_in = 0\n".into(),
            format: 1,
        })
        .unwrap_err();
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
        let odd = parse_config(v1::ParseTrainingConfigRequest {
            text: String::new(),
            format: 9,
        })
        .unwrap_err();
        assert_eq!(odd.code(), tonic::Code::InvalidArgument);
        let huge = parse_config(v1::ParseTrainingConfigRequest {
            text: "#".repeat(MAX_CONFIG_TEXT + 1),
            format: 1,
        })
        .unwrap_err();
        assert_eq!(huge.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn sweep_labels_are_accepted() {
        for (k, v) in [
            ("sweep", "k-lr"),
            ("model.k", "32"),
            ("optim.learning_rate", "3e-4"),
            ("team/x", "a:b@c+d"),
        ] {
            assert!(checked_labels("labels", one(k, v)).is_ok(), "{k}={v}");
        }
    }

    #[test]
    fn bad_labels_are_refused_by_name() {
        for (k, v) in [
            ("", "x"),
            ("Upper", "x"),
            (".dot", "x"),
            ("k", ""),
            ("k", "a b"),
            ("k", "é"),
        ] {
            let err = checked_labels("labels", one(k, v)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{k}={v}");
        }
        let many: HashMap<String, String> =
            (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(checked_labels("labels", many).is_err());
    }
}
