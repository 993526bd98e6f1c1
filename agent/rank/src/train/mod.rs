//! The data-parallel training loop: open the data (headers only, training
//! and validation), rendezvous, agree on the start state (rank 0's, or its
//! newest usable checkpoint), then step: micro-batches from the background
//! reader, forward and backward in the compute dtype, one coalesced
//! all-reduce of the gradients (with the step's losses and which latents
//! fired), a check that every rank decides the same on, clipping, and
//! identical Adam updates of the f32 master weights everywhere; validation,
//! checkpoints and progress from rank 0.

mod buckets;
mod device;
mod fault;
mod metrics;
mod reduce;
mod save;
mod start;
mod step;
mod validate;

use crate::checkpoint::Store;
use crate::data::batch_queue::{BatchQueue, Schedule as ReadSchedule};
use crate::data::sampler::{ChunkTable, DistributedSampler};
use crate::data::source::Source;
use crate::dist::{GroupOptions, ProcessGroup};
use crate::error::RankError;
use crate::launch::Launch;
use crate::model::{kind_of, Adam, Sae, Schedule, Shape};
use crate::report::{device_memory, resident_bytes, Reporter};
use crate::state::{DeadLatents, Numerics, TrainState};
use cohort_spec::config::{Dtype, TrainingConfig};
use cohort_spec::progress::{Progress, ProgressLine};
pub use device::{backend_for, select_device};
use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};
use step::StepReport;
use tch::{Device, Kind, Tensor};
use validate::ValidationSet;

/// A line for the rank's log: on stdout, where any line that is not a
/// progress line is a log line (the agent keeps it, WatchLogs shows it);
/// stderr stays for what went wrong. Never fails the rank: once the agent
/// is gone, so is the reader.
fn log_line(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "cohort-rank: {text}");
}

/// Time spent in one logging window, summed over its steps.
#[derive(Default)]
struct Window {
    steps: i64,
    samples: i64,
    compute: Duration,
    comm: Duration,
    data_wait: Duration,
    total: Duration,
}

impl Window {
    fn add(&mut self, report: &StepReport) {
        self.steps += 1;
        self.samples += report.rows;
        self.comm += report.comm;
        self.data_wait += report.wait;
        self.compute += report.elapsed.saturating_sub(report.comm + report.wait);
        self.total += report.elapsed;
    }
}

/// What the steps of this run add up to.
struct Ran {
    /// Samples of all ranks.
    samples: i64,
    /// The loss of the last logged step.
    last_loss: f64,
}

pub struct Trainer<'a> {
    launch: &'a Launch,
    cfg: &'a TrainingConfig,
    run_dir: &'a Path,
    checkpoints: Store,
    device: Device,
    /// The compute dtype.
    kind: Kind,
    f16: bool,
    group: Option<ProcessGroup>,
    state: TrainState,
    schedule: Schedule,
    /// The data source until the reader thread takes it.
    source: Option<Source>,
    table: ChunkTable,
    /// Over micro-batches: optimizer step s reads micro-batches
    /// s x accumulation .. (s + 1) x accumulation.
    sampler: DistributedSampler,
    accumulation: i64,
    total_steps: i64,
    validation: Option<ValidationSet>,
    /// The lowest validation loss so far (rank 0: the one `best/` holds).
    best_loss: Option<f64>,
    last_progress: Option<ProgressLine>,
    last_validation: Option<ProgressLine>,
    /// Batches read ahead of their step (the b_dec mean), used first.
    held: VecDeque<crate::data::batch_queue::HostBatch>,
    out: Reporter,
    /// `COHORT_FAULT_PREEMPT_AT_STEP`: the step after which a notice is
    /// injected on this rank.
    preempt_fault: Option<i64>,
}

impl<'a> Trainer<'a> {
    /// Open the data, then form the group (data errors surface before anyone waits).
    pub fn new(
        launch: &'a Launch,
        cfg: &'a TrainingConfig,
        run_dir: &'a Path,
    ) -> Result<Self, RankError> {
        fault::injected_oom(
            cfg.optim.batch_size,
            std::env::var(fault::OOM_FAULT).ok().as_deref(),
        )?;
        if let Some(global) = cfg.optim.global_batch {
            let split = cfg.optim.batch_size * launch.world_size * cfg.optim.accumulation_steps;
            if split != global {
                return Err(RankError::Config(cohort_spec::ConfigError::Invalid {
                    field: "optim.global_batch".to_string(),
                    reason: format!(
                        "{global}, but batch_size {} x {} ranks x accumulation_steps {} is {split} \
                         (the coordinator derives the split for each world size)",
                        cfg.optim.batch_size, launch.world_size, cfg.optim.accumulation_steps
                    ),
                }));
            }
        }
        let device = select_device(cfg.runtime.device)?;
        let kind = kind_of(cfg.model.dtype);
        let f16 = cfg.model.dtype == Dtype::F16;
        let source = crate::data::open(cfg)?;
        let validation = ValidationSet::open(cfg, launch)?;
        let table = ChunkTable::new(source.segment_rows(), cfg.data.shuffle_chunk as u64);
        let sampler = DistributedSampler {
            num_samples: source.rows() as i64,
            world_size: launch.world_size,
            rank: launch.rank,
            seed: cfg.optim.seed,
            batch_size: cfg.optim.batch_size,
            accumulation: cfg.optim.accumulation_steps,
        };
        let accumulation = cfg.optim.accumulation_steps;
        let total_steps = match (cfg.optim.steps, cfg.optim.epochs) {
            (Some(steps), _) => steps,
            (None, Some(epochs)) => epochs * sampler.steps_per_epoch(),
            (None, None) => unreachable!("validated config has steps or epochs"),
        };
        let backend = backend_for(device, cfg.runtime.backend, launch.world_size)?;
        let group = if launch.world_size > 1 {
            Some(ProcessGroup::join(&GroupOptions {
                backend,
                master_addr: &launch.master_addr,
                master_port: launch.master_port,
                rank: launch.rank,
                world_size: launch.world_size,
                rendezvous_timeout: Duration::from_secs_f64(cfg.runtime.rendezvous_timeout_s),
                collective_timeout: Duration::from_secs_f64(cfg.runtime.collective_timeout_s),
            })?)
        } else {
            None
        };
        let shape = Shape::of(cfg);
        let sae = Sae::new(shape, device, cfg.optim.seed);
        let adam = Adam::new(&cfg.optim, &sae.params);
        let state = TrainState {
            sae,
            adam,
            step: 0,
            numerics: Numerics::new(f16),
            dead: DeadLatents::new(shape.d_sae, cfg.model.dead_window_samples, device),
        };
        let checkpoints = Store::new(cfg.checkpoint.storage.as_deref(), run_dir)?;
        Ok(Self {
            launch,
            cfg,
            run_dir,
            checkpoints,
            device,
            kind,
            f16,
            group,
            state,
            schedule: Schedule::new(cfg, total_steps),
            source: Some(source),
            table,
            sampler,
            accumulation,
            total_steps,
            validation,
            best_loss: None,
            last_progress: None,
            last_validation: None,
            held: VecDeque::new(),
            out: Reporter::new(launch.rank),
            preempt_fault: fault::injected_preemption(
                launch.rank,
                std::env::var(fault::PREEMPT_FAULT).ok().as_deref(),
            ),
        })
    }

    fn global_batch(&self) -> i64 {
        self.cfg.optim.batch_size * self.launch.world_size * self.accumulation
    }

    fn world(&self) -> f64 {
        self.launch.world_size as f64
    }

    /// Sum `tensors` in place across ranks (nothing to do alone).
    fn allreduce(&self, tensors: &mut [&mut Tensor]) -> Result<(), RankError> {
        match &self.group {
            Some(group) => group.allreduce_sum(tensors, true),
            None => Ok(()),
        }
    }

    /// Hand the data source to a reader thread that prepares the
    /// micro-batches of steps `from..total_steps`.
    fn batches(&mut self, from: i64) -> Result<BatchQueue, RankError> {
        let source = self
            .source
            .take()
            .ok_or_else(|| RankError::Internal("the data source was taken twice".into()))?;
        let schedule = ReadSchedule {
            sampler: self.sampler.clone(),
            table: self.table.clone(),
            window_chunks: crate::data::window_chunks(self.cfg),
            start_step: from * self.accumulation,
            total_steps: self.total_steps * self.accumulation,
            depth: self.cfg.data.prefetch_batches as usize,
            pin_for: self.device.is_cuda().then_some(self.device),
        };
        Ok(BatchQueue::spawn(
            source,
            self.cfg.model.d_in as usize,
            schedule,
        ))
    }

    /// Micro-batch `micro`: one read ahead, or the reader's next.
    fn next_batch(
        &mut self,
        micro: i64,
        batches: &mut BatchQueue,
    ) -> Result<crate::data::batch_queue::HostBatch, RankError> {
        match self.held.pop_front() {
            Some(batch) => Ok(batch),
            None => batches.next(micro),
        }
    }

    /// A host batch on the training device in the compute dtype: copied in
    /// its stored type (asynchronously from pinned memory on CUDA), then
    /// converted there.
    fn to_device(&self, host: &Tensor) -> Tensor {
        host.to_device_(self.device, host.kind(), true, false)
            .to_kind(self.kind)
    }

    /// Train to the configured number of steps; a failed collective is
    /// reported as such before the error ends the rank.
    pub fn run(mut self) -> Result<(), RankError> {
        let result = self.train();
        if let Err(RankError::PeerLost(message)) = &result {
            self.out.emit(&ProgressLine::CollectiveError {
                rank: self.launch.rank,
                step: self.state.step,
                message: message.clone(),
            });
        }
        result
    }

    fn train(&mut self) -> Result<(), RankError> {
        let (start_step, resumed) = self.synchronise_start()?;
        let begun = Instant::now();
        self.announce(start_step, resumed);
        let mut batches = self.batches(start_step.min(self.total_steps - 1))?;
        if !resumed {
            self.init_b_dec(&mut batches)?;
        }
        let Some(ran) = self.run_steps(start_step, &mut batches)? else {
            // Stopped on a preemption notice, its checkpoint written.
            return Ok(());
        };
        let mut last_loss = ran.last_loss;
        if self.state.numerics.nonfinite_run > 0 {
            // The last steps were skipped: no final state to stand behind.
            return Err(self.diverged(self.total_steps, last_loss, f64::NAN));
        }
        if self.total_steps > start_step
            || (self.launch.is_leader() && self.checkpoints.latest()?.is_none())
        {
            self.save_checkpoint(self.total_steps)?;
        }
        if start_step >= self.total_steps {
            // Resumed at the last step: nothing ran, so measure the loss the
            // final parameters give on the last step's first micro-batch.
            let (host, _, _) = batches.next((self.total_steps - 1) * self.accumulation)?;
            last_loss = self.evaluate(&host)?;
        }
        drop(batches);
        self.finish(begun, last_loss, ran.samples)
    }

    /// The Started line and this rank's log line about what it runs.
    fn announce(&mut self, start_step: i64, resumed: bool) {
        self.out.leader(&ProgressLine::Started {
            world_size: self.launch.world_size,
            device: format!("{:?}", self.device).to_lowercase(),
            total_steps: self.total_steps,
            start_step,
            global_batch: self.global_batch(),
            parameters: self.cfg.parameter_count(),
        });
        log_line(format_args!(
            "rank {} of {} on {} ({}): steps {start_step} to {}{}",
            self.launch.rank,
            self.launch.world_size,
            format!("{:?}", self.device).to_lowercase(),
            self.group.as_ref().map_or("no group", |g| g.backend_name()),
            self.total_steps,
            if resumed {
                ", resumed from a checkpoint"
            } else {
                ""
            }
        ));
    }

    /// Steps `start_step..total_steps`, with their progress lines,
    /// validations and checkpoints. `None` when a preemption notice
    /// stopped them (after the notice's checkpoint).
    fn run_steps(
        &mut self,
        start_step: i64,
        batches: &mut BatchQueue,
    ) -> Result<Option<Ran>, RankError> {
        let log_every = self.cfg.runtime.log_every_steps;
        let every = self.cfg.checkpoint.every_steps;
        let mut window = Window::default();
        let mut ran = Ran {
            samples: 0,
            last_loss: f64::NAN,
        };
        for step in start_step..self.total_steps {
            let done = step + 1;
            let logged =
                done % log_every == 0 || done == start_step + 1 || done == self.total_steps;
            if self.preempt_fault == Some(step) {
                crate::preempt::notice();
            }
            let report = self.step(step, batches, logged)?;
            window.add(&report);
            ran.samples += report.rows;
            if logged {
                log_line(format_args!(
                    "rank {}: step {done}/{} in {:.1} ms",
                    self.launch.rank,
                    self.total_steps,
                    report.elapsed.as_secs_f64() * 1e3
                ));
                ran.last_loss = report.loss;
                self.report(done, &report, &window);
                window = Window::default();
            }
            if self.cfg.validates_at(done, self.total_steps) {
                self.validate(done)?;
            }
            if every > 0 && done % every == 0 && done != self.total_steps {
                self.save_checkpoint(done)?;
            }
            if report.preempted && done < self.total_steps {
                self.stop_on_notice(done, every)?;
                return Ok(None);
            }
        }
        Ok(Some(ran))
    }

    /// The RankFinished and Finished lines, then the barrier nobody leaves
    /// before everyone is done.
    fn finish(&mut self, begun: Instant, last_loss: f64, samples: i64) -> Result<(), RankError> {
        let checksum = self.state.sae.checksum();
        let wall = begun.elapsed().as_secs_f64();
        log_line(format_args!(
            "rank {} finished step {} in {wall:.1} s",
            self.launch.rank, self.total_steps
        ));
        self.out.emit(&ProgressLine::RankFinished {
            rank: self.launch.rank,
            step: self.total_steps,
            param_checksum: checksum.clone(),
        });
        self.out.leader(&ProgressLine::Finished {
            step: self.total_steps,
            loss: last_loss,
            param_checksum: checksum,
            wall_time_s: wall,
            mean_samples_per_sec: if wall > 0.0 {
                samples as f64 / wall
            } else {
                0.0
            },
        });
        if let Some(group) = &self.group {
            // Nobody leaves (and tears down the store) before everyone is done.
            group.barrier()?;
        }
        Ok(())
    }

    /// A notice was heard (by some rank) during step `done`: rank 0 writes
    /// the checkpoint of that step (unless it just did), everyone waits for
    /// it, and every rank ends PREEMPTED.
    fn stop_on_notice(&mut self, done: i64, every: i64) -> Result<(), RankError> {
        if !(every > 0 && done % every == 0) {
            self.save_checkpoint(done)?;
        }
        log_line(format_args!(
            "rank {}: preemption notice: stopped after step {done}, its checkpoint written",
            self.launch.rank
        ));
        if let Some(group) = &self.group {
            // Nobody leaves (and tears down the store) before rank 0 wrote it.
            group.barrier()?;
        }
        Err(RankError::Preempted(format!(
            "a notice came: stopped after step {done} of {}, resumable from its checkpoint",
            self.total_steps
        )))
    }

    /// The error that ends a diverged run, after rank 0 said so.
    fn diverged(&self, step: i64, loss: f64, grad_norm: f64) -> RankError {
        let n = &self.state.numerics;
        let learning_rate = self.schedule.lr(step.saturating_sub(1).max(0));
        self.out.leader(&ProgressLine::Diverged {
            step,
            nonfinite_steps: n.nonfinite_run,
            loss,
            grad_norm,
            learning_rate,
        });
        RankError::Diverged(format!(
            "{} non-finite steps in a row up to step {step} (optim.max_nonfinite_steps = {}; learning rate {learning_rate:e})",
            n.nonfinite_run, self.cfg.optim.max_nonfinite_steps
        ))
    }

    /// The loss (mse + l1 term, averaged across ranks) of the current
    /// parameters on each rank's `host` batch.
    fn evaluate(&self, host: &Tensor) -> Result<f64, RankError> {
        let x = self.to_device(host);
        let mut stats = tch::no_grad(|| {
            let f = self.state.sae.forward(&x, self.kind, None);
            Tensor::stack(&[f.mse, f.l1], 0).to_kind(Kind::Float)
        });
        self.allreduce(&mut [&mut stats])?;
        stats /= self.world();
        let v = Vec::<f64>::try_from(stats.to_kind(Kind::Double).to_device(Device::Cpu))?;
        Ok(v[0] + self.schedule.l1(self.total_steps - 1) * v[1])
    }

    fn report(&mut self, step: i64, r: &StepReport, w: &Window) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / w.steps.max(1) as f64;
        let secs = w.total.as_secs_f64();
        let metrics = r.metrics.unwrap_or_default();
        let progress = ProgressLine::Progress(Progress {
            step,
            total_steps: self.total_steps,
            epoch: self.sampler.position((step - 1) * self.accumulation).0,
            loss: r.loss,
            mse: r.mse,
            l1: r.l1,
            samples_per_sec: if secs > 0.0 {
                w.samples as f64 / secs
            } else {
                0.0
            },
            step_time_ms: ms(w.total),
            aux: r.aux,
            learning_rate: r.learning_rate,
            grad_norm: r.grad_norm,
            l0: metrics.l0,
            explained_variance: metrics.explained_variance,
            dead_fraction: self.state.dead.count() as f64 / self.cfg.d_sae() as f64,
            samples_digest: r
                .metrics
                .map(|m| crate::data::digest::digest(m.ids))
                .unwrap_or_default(),
            nonfinite_steps: self.state.numerics.nonfinite_total,
            loss_scale: self.state.numerics.loss_scale,
            data_wait_ms: ms(w.data_wait),
        });
        self.out.leader(&progress);
        self.last_progress = Some(progress);
        let (memory_bytes, memory_kind) = device_memory(self.device);
        self.out.emit(&ProgressLine::RankStats {
            rank: self.launch.rank,
            step,
            step_time_ms: ms(w.total),
            compute_ms: ms(w.compute),
            comm_ms: ms(w.comm),
            memory_bytes,
            data_wait_ms: ms(w.data_wait),
            memory_kind: memory_kind.into(),
            host_memory_bytes: resident_bytes(),
        });
    }
}
