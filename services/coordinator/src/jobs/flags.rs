//! The coordinator's scheduling flags (docs/scheduling.md): the priority
//! classes, the protection window, fair share's half-life, how often the
//! estimates are recomputed, the elastic cooldown, and the policy's features.

use super::JobSettings;
use crate::policy::{PriorityClass, PriorityClasses};
use cohort_spec::duration::parse_duration;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct SchedulingFlags {
    /// A priority class, NAME=VALUE[:preempting] (repeatable): added to the
    /// defaults low=-100, normal=0 (the default class), high=100:preempting,
    /// urgent=1000:preempting, or replacing the default of its name.
    #[arg(
        long = "priority-class",
        value_name = "NAME=VALUE[:preempting]",
        env = "COHORT_PRIORITY_CLASSES",
        value_delimiter = ','
    )]
    pub priority_classes: Vec<PriorityClass>,
    /// A training that ran less than this is never preempted by priority
    /// (a reclaim of borrowed GPUs ignores it: the guarantee wins).
    #[arg(long, default_value = "10m", value_parser = parse_duration, env = "COHORT_PREEMPTION_MIN_RUNTIME")]
    pub preemption_min_runtime: Duration,
    /// Fair share's half-life: a team's GPU-hours count half after this long.
    #[arg(long, default_value = "7d", value_parser = parse_duration, env = "COHORT_FAIR_SHARE_HALF_LIFE")]
    pub fair_share_half_life: Duration,
    /// How often the start-time estimates are recomputed, at most (a run
    /// that takes long waits twice as long as it took).
    #[arg(long, default_value = "5s", value_parser = parse_duration, env = "COHORT_ESTIMATE_INTERVAL")]
    pub estimate_interval: Duration,
    /// Never preempt by priority (classes still order the queue).
    #[arg(long, env = "COHORT_NO_PREEMPTION")]
    pub no_preemption: bool,
    /// Quotas are hard caps: nothing is borrowed or reclaimed.
    #[arg(long, env = "COHORT_NO_LENDING")]
    pub no_lending: bool,
    /// An elastic training grows at most once this often (counted from
    /// when its current size was placed), so nothing flaps.
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "COHORT_ELASTIC_COOLDOWN")]
    pub elastic_cooldown: Duration,
}

impl SchedulingFlags {
    /// `settings` with these flags applied.
    pub fn apply(&self, settings: JobSettings) -> JobSettings {
        let mut policy = settings.policy;
        policy.min_runtime = self.preemption_min_runtime;
        policy.preemption = !self.no_preemption;
        policy.lending = !self.no_lending;
        policy.elastic_cooldown = self.elastic_cooldown;
        JobSettings {
            policy,
            classes: PriorityClasses::with(self.priority_classes.clone()),
            fair_share_half_life: self.fair_share_half_life,
            estimate_interval: self.estimate_interval,
            ..settings
        }
    }
}
