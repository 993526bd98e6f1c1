//! `cohort-sim forecast-cost`: what one estimate refresh costs the
//! coordinator on a large fleet with a long queue — one scheduling pass
//! (with pending reasons, as the coordinator's) and one forecast (the
//! policy run forward until every waiting training has started) over the
//! same snapshot. The snapshot comes from the simulator itself: generated
//! jobs all submitted at once, the fleet filled by the
//! policy's own pass, the rest queued, a minute and a half on so every
//! running training's pace is known.

use crate::engine::{Engine, Settings};
use crate::fleet::FleetSpec;
use crate::generate::{generate, Spec};
use crate::scenario::{quotas, shares, PolicyRun};
use cohort_coordinator::policy::{forecast, pass, Estimate, Horizon, Policy};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Debug, Clone)]
pub struct CostSpec {
    pub agents: u32,
    pub gpus_per_agent: u32,
    pub queued: usize,
    pub seed: u64,
    pub repeat: usize,
}

/// What it measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cost {
    pub agents: u32,
    pub gpus: u32,
    pub running: usize,
    pub queued: usize,
    /// Build time of the snapshot (not part of a refresh).
    pub setup_s: f64,
    /// One pass with pending reasons, each repetition.
    pub pass_ms: Vec<f64>,
    /// One forecast, each repetition.
    pub forecast_s: Vec<f64>,
    pub forecast_passes: usize,
    pub starts_known: usize,
    pub starts_unknown: usize,
}

pub fn measure(spec: &CostSpec) -> Result<Cost, String> {
    let fleet = FleetSpec::parse(&format!("{}x{}", spec.agents, spec.gpus_per_agent))?;
    let gpus = fleet.gpus();
    let began = Instant::now();
    // Enough jobs to fill the fleet (at least one GPU each) and queue `queued` more.
    let mut trace = generate(&Spec {
        jobs: spec.queued + gpus as usize,
        seed: spec.seed,
        teams: 4,
        urgent_fraction: 0.1,
        fleet_gpus: gpus,
        load: 1.25,
        expected_fraction: 1.0,
        expected_noise: 0.25,
    });
    // All at once: one pass fills the fleet, the rest queue.
    for t in &mut trace {
        t.submit_s = 0.0;
    }
    let run = PolicyRun::parse("sharing", Duration::from_secs(600))?;
    let teams: BTreeSet<String> = trace.iter().map(|t| t.team.clone()).collect();
    let quotas = quotas(&[], &teams, gpus);
    let guarantees: HashMap<String, u32> = quotas
        .iter()
        .map(|(t, s)| (t.clone(), s.guarantee.unwrap_or(0)))
        .collect();
    let settings = Settings {
        estimate_every_s: None,
        ..Settings::default()
    };
    let engine = Engine::new(
        &trace,
        fleet.view(),
        shares(&run, &quotas),
        guarantees,
        &run,
        &settings,
    );
    let mut snapshot = engine.snapshot_at(90.0);
    // Keep `queued` of the waiting trainings, submitted a millisecond
    // apart in trace order over the last seconds (as a queue is; equal
    // submit times are a tie only ids break).
    snapshot.waiting.sort_by(|a, b| a.job.id.cmp(&b.job.id));
    snapshot.waiting.truncate(spec.queued);
    let now = snapshot.now;
    let n = snapshot.waiting.len() as i64;
    for (i, w) in snapshot.waiting.iter_mut().enumerate() {
        w.job.create_time = now - chrono::Duration::milliseconds(n - i as i64);
    }
    if snapshot.waiting.len() < spec.queued {
        return Err(format!(
            "only {} trainings queued: the fleet took the rest",
            snapshot.waiting.len()
        ));
    }
    let setup_s = began.elapsed().as_secs_f64();
    let coordinator = Policy {
        reasons: true,
        ..run.policy.clone()
    };
    let mut cost = Cost {
        agents: spec.agents,
        gpus,
        running: snapshot.running.len(),
        queued: snapshot.waiting.len(),
        setup_s,
        pass_ms: Vec::new(),
        forecast_s: Vec::new(),
        forecast_passes: 0,
        starts_known: 0,
        starts_unknown: 0,
    };
    for _ in 0..spec.repeat.max(1) {
        let mut s = snapshot.clone();
        let t = Instant::now();
        let d = pass(&mut s, &coordinator);
        cost.pass_ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(d);
        let s = snapshot.clone();
        let t = Instant::now();
        let f = forecast(s, &run.policy, settings.half_life, Horizon::default());
        cost.forecast_s.push(t.elapsed().as_secs_f64());
        cost.forecast_passes = f.passes;
        cost.starts_known = f
            .starts
            .values()
            .filter(|e| matches!(e, Estimate::At(_)))
            .count();
        cost.starts_unknown = f.starts.len() - cost.starts_known;
    }
    Ok(cost)
}

/// The figures, for a person.
pub fn table(c: &Cost) -> String {
    let list = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "fleet: {} agents, {} GPUs; {} trainings running, {} queued (snapshot built in {:.1} s)\n\
         one scheduling pass (with pending reasons): {} ms\n\
         one forecast ({} passes; {} starts estimated, {} without): {} s\n",
        c.agents,
        c.gpus,
        c.running,
        c.queued,
        c.setup_s,
        list(&c.pass_ms, 1),
        c.forecast_passes,
        c.starts_known,
        c.starts_unknown,
        list(&c.forecast_s, 2),
    )
}
