//! A training's GPU request from and to its protobuf message: the message
//! is checked here (a bad value names its field of CreateTraining).

use crate::model::{GpuRequest, GpuSelection, InvalidGpuRequest};
use cohort_proto::v1;

impl TryFrom<Option<v1::GpuRequest>> for GpuRequest {
    type Error = InvalidGpuRequest;

    fn try_from(request: Option<v1::GpuRequest>) -> Result<Self, InvalidGpuRequest> {
        let Some(request) = request else {
            return Ok(GpuRequest::default());
        };
        let invalid = |field, reason: &str| InvalidGpuRequest {
            field,
            reason: reason.to_string(),
        };
        let range = match (request.min_count, request.max_count) {
            (None, None) => None,
            (Some(min), Some(max)) => Some(range(min, max)?),
            (None, Some(_)) => {
                return Err(invalid("gpus.min_count", "give min_count with max_count"))
            }
            (Some(_), None) => {
                return Err(invalid("gpus.max_count", "give max_count with min_count"))
            }
        };
        let selection = match (request.selection, range) {
            (None, Some(range)) => range,
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "gpus.min_count",
                    "a range (min_count, max_count) is its own selection: leave count, auto and gpu_ids unset",
                ))
            }
            (selection, None) => fixed(selection)?,
        };
        Ok(GpuRequest {
            selection,
            queue: request.queue.unwrap_or(true),
        })
    }
}

/// `min_count..=max_count`, every size of it (the config narrows it to the
/// sizes that split its global batch).
fn range(min: i32, max: i32) -> Result<GpuSelection, InvalidGpuRequest> {
    let limit = cohort_spec::elastic::MAX_WORLD_SIZE as i32;
    if !(1..=limit).contains(&min) {
        return Err(InvalidGpuRequest {
            field: "gpus.min_count",
            reason: format!("must be in 1..={limit}"),
        });
    }
    if !(min..=limit).contains(&max) {
        return Err(InvalidGpuRequest {
            field: "gpus.max_count",
            reason: format!("must be in min_count ({min})..={limit}"),
        });
    }
    Ok(GpuSelection::Range {
        min: min as u32,
        max: max as u32,
        sizes: (min as u32..=max as u32).collect(),
    })
}

/// A fixed selection: auto (the default), a count or ids.
fn fixed(selection: Option<v1::gpu_request::Selection>) -> Result<GpuSelection, InvalidGpuRequest> {
    use v1::gpu_request::Selection;
    let invalid = |field, reason: &str| InvalidGpuRequest {
        field,
        reason: reason.to_string(),
    };
    Ok(match selection {
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
    })
}

impl From<&GpuRequest> for v1::GpuRequest {
    fn from(request: &GpuRequest) -> Self {
        use v1::gpu_request::{Auto, GpuIds, Selection};
        let (selection, range) = match &request.selection {
            GpuSelection::Auto { max_gpus } => (
                Some(Selection::Auto(Auto {
                    max_gpus: *max_gpus as i32,
                })),
                None,
            ),
            GpuSelection::Count { count } => (Some(Selection::Count(*count as i32)), None),
            GpuSelection::Ids { ids } => {
                (Some(Selection::GpuIds(GpuIds { ids: ids.clone() })), None)
            }
            GpuSelection::Range { min, max, .. } => (None, Some((*min as i32, *max as i32))),
        };
        v1::GpuRequest {
            selection,
            queue: Some(request.queue),
            min_count: range.map(|r| r.0),
            max_count: range.map(|r| r.1),
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
            ..Default::default()
        };
        assert_eq!(
            GpuRequest::try_from(Some(dup)).unwrap_err().field,
            "gpus.gpu_ids.ids"
        );
        let zero = v1::GpuRequest {
            selection: Some(Selection::Count(0)),
            queue: None,
            ..Default::default()
        };
        assert_eq!(
            GpuRequest::try_from(Some(zero)).unwrap_err().field,
            "gpus.count"
        );
    }

    #[test]
    fn a_range_is_its_own_selection_and_round_trips() {
        let range = |min, max| v1::GpuRequest {
            min_count: min,
            max_count: max,
            ..Default::default()
        };
        let req = GpuRequest::try_from(Some(range(Some(2), Some(4)))).unwrap();
        assert_eq!(
            req.selection,
            GpuSelection::Range {
                min: 2,
                max: 4,
                sizes: vec![2, 3, 4]
            }
        );
        let back = v1::GpuRequest::from(&req);
        assert_eq!(
            (back.min_count, back.max_count, back.selection),
            (Some(2), Some(4), None)
        );
        let field = |r| GpuRequest::try_from(Some(r)).unwrap_err().field;
        assert_eq!(field(range(Some(0), Some(4))), "gpus.min_count");
        assert_eq!(field(range(Some(4), Some(2))), "gpus.max_count");
        assert_eq!(field(range(Some(2), Some(2000))), "gpus.max_count");
        assert_eq!(field(range(None, Some(2))), "gpus.min_count");
        assert_eq!(field(range(Some(2), None)), "gpus.max_count");
        let both = v1::GpuRequest {
            selection: Some(Selection::Count(2)),
            ..range(Some(2), Some(4))
        };
        assert_eq!(field(both), "gpus.min_count");
    }
}
