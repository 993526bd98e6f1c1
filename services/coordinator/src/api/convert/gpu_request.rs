//! A training's GPU request from and to its protobuf message: the message
//! is checked here (a bad value names its field of CreateTraining).

use crate::model::{GpuRequest, GpuSelection, InvalidGpuRequest};
use cohort_proto::v1;

impl TryFrom<Option<v1::GpuRequest>> for GpuRequest {
    type Error = InvalidGpuRequest;

    fn try_from(request: Option<v1::GpuRequest>) -> Result<Self, InvalidGpuRequest> {
        use v1::gpu_request::Selection;
        let Some(request) = request else {
            return Ok(GpuRequest::default());
        };
        let invalid = |field, reason: &str| InvalidGpuRequest {
            field,
            reason: reason.to_string(),
        };
        let selection = match request.selection {
            None => GpuSelection::Auto { max_gpus: 0 },
            Some(Selection::Auto(a)) => GpuSelection::Auto {
                max_gpus: u32::try_from(a.max_gpus)
                    .map_err(|_| invalid("gpus.auto.max_gpus", "must be >= 0"))?,
            },
            Some(Selection::Count(n)) => match u32::try_from(n) {
                Ok(count) if count >= 1 => GpuSelection::Count { count },
                _ => return Err(invalid("gpus.count", "must be >= 1")),
            },
            Some(Selection::GpuIds(list)) => {
                if list.ids.is_empty() {
                    return Err(invalid("gpus.gpu_ids.ids", "give at least one GPU id"));
                }
                let mut seen = std::collections::HashSet::new();
                if let Some(dup) = list.ids.iter().find(|id| !seen.insert(id.as_str())) {
                    return Err(InvalidGpuRequest {
                        field: "gpus.gpu_ids.ids",
                        reason: format!("GPU {dup} is listed twice"),
                    });
                }
                GpuSelection::Ids { ids: list.ids }
            }
        };
        Ok(GpuRequest {
            selection,
            queue: request.queue.unwrap_or(true),
        })
    }
}

impl From<&GpuRequest> for v1::GpuRequest {
    fn from(request: &GpuRequest) -> Self {
        use v1::gpu_request::{Auto, GpuIds, Selection};
        let selection = match &request.selection {
            GpuSelection::Auto { max_gpus } => Selection::Auto(Auto {
                max_gpus: *max_gpus as i32,
            }),
            GpuSelection::Count { count } => Selection::Count(*count as i32),
            GpuSelection::Ids { ids } => Selection::GpuIds(GpuIds { ids: ids.clone() }),
        };
        v1::GpuRequest {
            selection: Some(selection),
            queue: Some(request.queue),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::gpu_request::{GpuIds, Selection};

    #[test]
    fn proto_round_trip_and_checks() {
        let req = GpuRequest {
            selection: GpuSelection::Ids {
                ids: vec!["GPU-a".into(), "GPU-b".into()],
            },
            queue: false,
        };
        let proto = v1::GpuRequest::from(&req);
        assert_eq!(GpuRequest::try_from(Some(proto)).unwrap(), req);
        assert_eq!(GpuRequest::try_from(None).unwrap(), GpuRequest::default());

        let dup = v1::GpuRequest {
            selection: Some(Selection::GpuIds(GpuIds {
                ids: vec!["x".into(), "x".into()],
            })),
            queue: None,
        };
        assert_eq!(
            GpuRequest::try_from(Some(dup)).unwrap_err().field,
            "gpus.gpu_ids.ids"
        );
        let zero = v1::GpuRequest {
            selection: Some(Selection::Count(0)),
            queue: None,
        };
        assert_eq!(
            GpuRequest::try_from(Some(zero)).unwrap_err().field,
            "gpus.count"
        );
    }
}
