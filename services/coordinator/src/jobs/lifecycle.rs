//! The job lifecycle as OpenTelemetry spans, in the trace of the call that
//! created the training (its `traceparent` is stored with the training, so
//! this works across coordinator restarts):
//!
//! - `training.queued`: from creation (or the restart) to placement;
//! - `training.attempt`: one attempt, from placement to its end (success,
//!   failure, restart or cancel), the parent of:
//!   - `training.start`: placement until every rank has started; its context
//!     goes to the agents in StartRanks, whose `agent.start_ranks` spans are
//!     its children;
//!   - `training.first_step`: all ranks started until the first progress report.
//!
//! Spans are built with the OpenTelemetry API (they need explicit start
//! times and outlive any one call). Without an exporting tracer provider
//! they are no-ops and the carriers sent to agents stay empty.

use crate::model::Training;
use cohort_observe::propagation;
use opentelemetry::global::{self, BoxedSpan, BoxedTracer};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use std::collections::HashMap;
use std::time::SystemTime;

const TRACER: &str = "cohort-coordinator";
const START: &str = "training.start";
const FIRST_STEP: &str = "training.first_step";

fn tracer() -> BoxedTracer {
    global::tracer(TRACER)
}

/// The open spans of one training's current attempt.
pub(super) struct AttemptSpans {
    attempt: i32,
    /// `training.attempt`, the parent of the phases.
    attempt_span: BoxedSpan,
    /// The phase under way ([`START`] or [`FIRST_STEP`]) and its name.
    phase: Option<BoxedSpan>,
    phase_name: Option<&'static str>,
    attributes: Vec<KeyValue>,
}

impl AttemptSpans {
    fn context(&self) -> Context {
        Context::new().with_remote_span_context(self.attempt_span.span_context().clone())
    }

    fn open_phase(&mut self, name: &'static str) -> &BoxedSpan {
        let span = tracer()
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(self.attributes.clone())
            .start_with_context(&tracer(), &self.context());
        self.phase_name = Some(name);
        self.phase.insert(span)
    }

    fn end_phase(&mut self, attribute: Option<KeyValue>) {
        if let Some(mut phase) = self.phase.take() {
            if let Some(attribute) = attribute {
                phase.set_attribute(attribute);
            }
            phase.end();
        }
        self.phase_name = None;
    }

    fn close(mut self, status: Status) {
        if let Some(mut phase) = self.phase.take() {
            phase.set_status(status.clone());
            phase.end();
        }
        self.attempt_span.set_status(status);
        self.attempt_span.end();
    }
}

impl AttemptSpans {
    /// `training` was just placed (its attempt is the new one). Ends the
    /// wait, opens the attempt and its start phase; returns them and the
    /// trace context for the agents (empty when not tracing).
    pub fn placed(
        training: &Training,
        waited_since: SystemTime,
        agents: usize,
    ) -> (Self, HashMap<String, String>) {
        let parent = training
            .trace_context
            .as_deref()
            .map(propagation::from_traceparent)
            .unwrap_or_default();
        let attributes = vec![
            KeyValue::new("training.id", training.id.clone()),
            KeyValue::new("training.attempt", i64::from(training.attempt)),
            KeyValue::new("training.world_size", i64::from(training.world_size)),
            KeyValue::new("training.agents", agents as i64),
        ];
        let tracer = tracer();
        let mut queued = tracer
            .span_builder("training.queued")
            .with_start_time(waited_since)
            .with_attributes(attributes.clone())
            .start_with_context(&tracer, &parent);
        queued.end();
        let attempt_span = tracer
            .span_builder("training.attempt")
            .with_attributes(attributes.clone())
            .start_with_context(&tracer, &parent);
        let mut spans = AttemptSpans {
            attempt: training.attempt,
            attempt_span,
            phase: None,
            phase_name: None,
            attributes,
        };
        let start = spans.open_phase(START).span_context().clone();
        let carrier = propagation::inject_span_context(&start);
        (spans, carrier)
    }

    /// Every rank of `attempt` has started.
    pub fn running(&mut self, attempt: i32) {
        if self.attempt == attempt && self.phase_name == Some(START) {
            self.end_phase(None);
            self.open_phase(FIRST_STEP);
        }
    }

    /// A progress report of `attempt` arrived: the first ends `training.first_step`.
    pub fn progressed(&mut self, attempt: i32, step: i64) {
        if self.attempt == attempt && self.phase_name == Some(FIRST_STEP) {
            self.end_phase(Some(KeyValue::new("training.step", step)));
        }
    }

    /// The attempt ended: successfully, or not (failure, restart, cancel,
    /// lost placement, a newer attempt) with `why`.
    pub fn ended(self, succeeded: bool, why: &str) {
        let status = if succeeded {
            Status::Ok
        } else {
            Status::error(why.to_string())
        };
        self.close(status);
    }
}
