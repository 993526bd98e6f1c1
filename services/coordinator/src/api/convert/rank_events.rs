//! A rank's progress line as a WatchTraining event, field for field: one
//! arm per kind of line, the longer ones in a function of their own (each
//! called only for its kind; another kind gives `None`).

use cohort_proto::v1;
use cohort_proto::v1::training_event::Event;
use cohort_spec::progress::ProgressLine;

/// The event a rank's line is shown as; `None` for the lines that are no
/// event (a sign of life during a long validation).
pub(super) fn rank_event(line: &ProgressLine) -> Option<Event> {
    Some(match line {
        ProgressLine::Started { .. } => started(line)?,
        ProgressLine::Progress(p) => Event::Progress(super::progress_event(p.clone())),
        ProgressLine::RankStats { .. } => rank_stats(line)?,
        ProgressLine::Checkpoint { step, path, best } => Event::Checkpoint(v1::Checkpoint {
            step: *step,
            path: path.clone(),
            best: *best,
            ..Default::default()
        }),
        ProgressLine::Validation { .. } => validation(line)?,
        ProgressLine::Diverged { .. } => diverged(line)?,
        ProgressLine::Validating { .. } => return None,
        ProgressLine::CheckpointRejected { step, path, reason } => {
            Event::CheckpointRejected(v1::CheckpointRejected {
                step: *step,
                path: path.clone(),
                reason: reason.clone(),
            })
        }
        ProgressLine::CollectiveError {
            rank,
            step,
            message,
        } => Event::CollectiveError(v1::CollectiveError {
            rank: *rank as i32,
            step: *step,
            message: message.clone(),
        }),
        ProgressLine::Finished { .. } => finished(line)?,
        ProgressLine::Metrics(m) => Event::ProgramProgress(v1::ProgramProgress {
            step: m.step,
            total_steps: m.total_steps,
            loss: m.loss,
            metrics: m.metrics.clone().into_iter().collect(),
            finished: m.finished,
        }),
        ProgressLine::RankFinished {
            rank,
            step,
            param_checksum,
        } => Event::RankFinished(v1::RankFinished {
            rank: *rank as i32,
            step: *step,
            param_checksum: param_checksum.clone(),
        }),
    })
}

fn started(line: &ProgressLine) -> Option<Event> {
    let ProgressLine::Started {
        world_size,
        device,
        total_steps,
        start_step,
        global_batch,
        parameters,
    } = line
    else {
        return None;
    };
    Some(Event::Started(v1::TrainingStarted {
        world_size: *world_size as i32,
        device: device.clone(),
        total_steps: *total_steps,
        start_step: *start_step,
        global_batch: *global_batch,
        parameters: *parameters,
    }))
}

fn rank_stats(line: &ProgressLine) -> Option<Event> {
    let ProgressLine::RankStats {
        rank,
        step,
        step_time_ms,
        compute_ms,
        comm_ms,
        memory_bytes,
        data_wait_ms,
        memory_kind,
        host_memory_bytes,
    } = line
    else {
        return None;
    };
    Some(Event::RankStats(v1::RankStats {
        rank: *rank as i32,
        step: *step,
        step_time_ms: *step_time_ms,
        compute_ms: *compute_ms,
        comm_ms: *comm_ms,
        memory_bytes: *memory_bytes,
        data_wait_ms: *data_wait_ms,
        memory_kind: memory_kind.clone(),
        host_memory_bytes: *host_memory_bytes,
    }))
}

fn validation(line: &ProgressLine) -> Option<Event> {
    let ProgressLine::Validation {
        step,
        loss,
        mse,
        l0,
        explained_variance,
        dead_fraction,
        samples,
        best,
    } = *line
    else {
        return None;
    };
    Some(Event::Validation(v1::ValidationEvent {
        step,
        loss,
        mse,
        l0,
        explained_variance,
        dead_fraction,
        samples,
        best,
    }))
}

fn diverged(line: &ProgressLine) -> Option<Event> {
    let ProgressLine::Diverged {
        step,
        nonfinite_steps,
        loss,
        grad_norm,
        learning_rate,
    } = *line
    else {
        return None;
    };
    Some(Event::Diverged(v1::DivergedEvent {
        step,
        nonfinite_steps,
        loss,
        grad_norm,
        learning_rate,
    }))
}

fn finished(line: &ProgressLine) -> Option<Event> {
    let ProgressLine::Finished {
        step,
        loss,
        param_checksum,
        wall_time_s,
        mean_samples_per_sec,
    } = line
    else {
        return None;
    };
    Some(Event::Finished(v1::TrainingFinished {
        step: *step,
        loss: *loss,
        param_checksum: param_checksum.clone(),
        wall_time_s: *wall_time_s,
        mean_samples_per_sec: *mean_samples_per_sec,
    }))
}
