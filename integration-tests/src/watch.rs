//! Following a training through WatchTraining.

use cohort_proto::v1;
use cohort_proto::v1::training_event::Event;
use cohort_proto::v1::training_service_client::TrainingServiceClient;
use std::time::Duration;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// Everything one WatchTraining call returned.
#[derive(Debug, Default, Clone)]
pub struct Watched {
    pub events: Vec<v1::TrainingEvent>,
    /// Whether the stream ended on its own (after the final state change).
    pub ended: bool,
}

impl Watched {
    /// The state changes, in order, as (from, to).
    pub fn state_changes(&self) -> Vec<(v1::training::State, v1::training::State)> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::StateChange(c)) => Some((c.from(), c.to())),
                _ => None,
            })
            .collect()
    }

    /// The step each attempt started from (its `started` event), in order.
    pub fn start_steps(&self) -> Vec<i64> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Started(s)) => Some(s.start_step),
                _ => None,
            })
            .collect()
    }

    /// The `resized` events, in order.
    pub fn resizes(&self) -> Vec<&v1::ResizedEvent> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Resized(r)) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The progress events, in order.
    pub fn progress(&self) -> Vec<v1::ProgressEvent> {
        self.events
            .iter()
            .filter_map(|e| match &e.event {
                Some(Event::Progress(p)) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// The state the last state change went to, if any.
    pub fn final_state(&self) -> Option<v1::training::State> {
        self.state_changes().last().map(|(_, to)| *to)
    }

    /// The sequence number of the last event (0 if none).
    pub fn last_sequence(&self) -> u64 {
        self.events.iter().map(|e| e.sequence).max().unwrap_or(0)
    }
}

/// Watches training `id` from `after_sequence` until the stream ends, the
/// stream fails, `stop` says so for an event, or `timeout` passes (which
/// panics: a watch that never ends is a failure). Per-rank events are left out.
pub async fn watch_until(
    client: &mut TrainingServiceClient<Channel>,
    id: &str,
    after_sequence: u64,
    timeout: Duration,
    stop: impl FnMut(&v1::TrainingEvent) -> bool,
) -> Result<Watched, tonic::Status> {
    let request = v1::WatchTrainingRequest {
        id: id.to_string(),
        after_sequence,
        include_rank_stats: false,
        max_points: 0,
    };
    watch_request(client, request, timeout, stop).await
}

/// [`watch_until`] for any WatchTrainingRequest.
pub async fn watch_request(
    client: &mut TrainingServiceClient<Channel>,
    request: v1::WatchTrainingRequest,
    timeout: Duration,
    mut stop: impl FnMut(&v1::TrainingEvent) -> bool,
) -> Result<Watched, tonic::Status> {
    let id = request.id.clone();
    let mut stream = client.watch_training(request).await?.into_inner();
    let mut watched = Watched::default();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "WatchTraining {id} did not end within {timeout:?}; got {} events, last: {:?}",
                    watched.events.len(),
                    watched.events.last()
                )
            });
        match next {
            None => {
                watched.ended = true;
                return Ok(watched);
            }
            Some(Err(status)) => return Err(status),
            Some(Ok(event)) => {
                let done = stop(&event);
                watched.events.push(event);
                if done {
                    return Ok(watched);
                }
            }
        }
    }
}

/// Watches training `id` from the start until its stream ends.
pub async fn watch_to_end(
    client: &mut TrainingServiceClient<Channel>,
    id: &str,
    timeout: Duration,
) -> Watched {
    watch_until(client, id, 0, timeout, |_| false)
        .await
        .unwrap_or_else(|s| panic!("WatchTraining {id} failed: {s:?}"))
}

/// Watches training `id` from the start until its stream ends, per-rank
/// events included: every stored event, so the sequence has no gap.
pub async fn watch_everything(
    client: &mut TrainingServiceClient<Channel>,
    id: &str,
    timeout: Duration,
) -> Watched {
    let request = v1::WatchTrainingRequest {
        id: id.to_string(),
        after_sequence: 0,
        include_rank_stats: true,
        max_points: 0,
    };
    watch_request(client, request, timeout, |_| false)
        .await
        .unwrap_or_else(|s| panic!("WatchTraining {id} failed: {s:?}"))
}
