//! The data-parallel training loop: open the data (headers only), rendezvous,
//! agree on the start state (rank 0's parameters, or its newest checkpoint),
//! then step: a batch from the background reader, forward, backward, one
//! coalesced all-reduce of the gradients (and the step's losses), identical
//! Adam updates everywhere, checkpoints and progress from rank 0.

use crate::checkpoint::{self, Manifest, SamplerState, Store};
use crate::data::prefetch::{Prefetcher, Schedule};
use crate::data::source::Source;
use crate::dist::{Backend, GroupOptions, ProcessGroup};
use crate::error::RankError;
use crate::launch::Launch;
use crate::model::{kind_of, Adam, Losses, Sae};
use crate::report::{resident_bytes, Reporter};
use crate::sampler::{ChunkTable, DistributedSampler};
use cohort_spec::config::{AllreduceMode, Device as DeviceChoice, TrainingConfig};
use cohort_spec::progress::ProgressLine;
use std::path::Path;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

/// Choose the device from the config and what this process can see.
pub fn select_device(choice: DeviceChoice) -> Result<Device, RankError> {
    let cuda = tch::Cuda::is_available();
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Auto if cuda => Ok(Device::Cuda(0)),
        DeviceChoice::Auto => Ok(Device::Cpu),
        DeviceChoice::Cuda if cuda => Ok(Device::Cuda(0)),
        DeviceChoice::Cuda => Err(RankError::Launch(
            "runtime.device is \"cuda\" but this process sees no CUDA device".into(),
        )),
    }
}

fn backend_for(device: Device) -> Backend {
    if device.is_cuda() && cfg!(cohort_nccl) {
        Backend::Nccl
    } else {
        // gloo carries CPU tensors, and CUDA tensors through host copies.
        Backend::Gloo
    }
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

pub struct Trainer<'a> {
    launch: &'a Launch,
    cfg: &'a TrainingConfig,
    run_dir: &'a Path,
    checkpoints: Store,
    device: Device,
    kind: Kind,
    group: Option<ProcessGroup>,
    sae: Sae,
    adam: Adam,
    /// The data source until the reader thread takes it.
    source: Option<Source>,
    table: ChunkTable,
    sampler: DistributedSampler,
    total_steps: i64,
    out: Reporter,
}

impl<'a> Trainer<'a> {
    /// Open the data, then form the group (data errors surface before anyone waits).
    pub fn new(
        launch: &'a Launch,
        cfg: &'a TrainingConfig,
        run_dir: &'a Path,
    ) -> Result<Self, RankError> {
        let device = select_device(cfg.runtime.device)?;
        let kind = kind_of(cfg.model.dtype);
        let d_in = cfg.model.d_in;
        let source = crate::data::open(cfg)?;
        let table = ChunkTable::new(source.segment_rows(), cfg.data.shuffle_chunk as u64);
        let sampler = DistributedSampler {
            num_samples: source.rows() as i64,
            world_size: launch.world_size,
            rank: launch.rank,
            seed: cfg.optim.seed,
            batch_size: cfg.optim.batch_size,
        };
        let total_steps = match (cfg.optim.steps, cfg.optim.epochs) {
            (Some(steps), _) => steps,
            (None, Some(epochs)) => epochs * sampler.steps_per_epoch(),
            (None, None) => unreachable!("validated config has steps or epochs"),
        };
        let group = if launch.world_size > 1 {
            Some(ProcessGroup::join(&GroupOptions {
                backend: backend_for(device),
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
        let sae = Sae::new(
            d_in,
            cfg.d_sae(),
            cfg.model.l1_coefficient,
            kind,
            device,
            cfg.optim.seed,
        );
        let adam = Adam::new(&cfg.optim, &sae.params);
        let checkpoints = Store::new(cfg.checkpoint.storage.as_deref(), run_dir)?;
        Ok(Self {
            launch,
            cfg,
            run_dir,
            checkpoints,
            device,
            kind,
            group,
            sae,
            adam,
            source: Some(source),
            table,
            sampler,
            total_steps,
            out: Reporter::new(launch.rank),
        })
    }

    fn global_batch(&self) -> i64 {
        self.cfg.optim.batch_size * self.launch.world_size
    }

    /// Agree on where to start: rank 0 loads its newest checkpoint (if any) and
    /// broadcasts parameters, optimizer state and step to everyone.
    fn synchronise_start(&mut self) -> Result<i64, RankError> {
        let mut resumed = 0i64;
        if self.launch.is_leader() {
            if let Some(found) = self.checkpoints.latest()? {
                self.check_sampler(&found.manifest)?;
                self.checkpoints
                    .restore(&found, self.run_dir, &mut self.sae, &mut self.adam)?;
                resumed = 1;
                eprintln!(
                    "cohort-rank: resuming from {} (step {})",
                    found.location, found.manifest.step
                );
            }
        }
        let Some(group) = &self.group else {
            return Ok(self.adam.step);
        };
        let mut header = Tensor::from_slice(&[resumed, self.adam.step]).to_device(self.device);
        group.broadcast(&mut [&mut header], 0)?;
        let header =
            Vec::<i64>::try_from(header.to_device(Device::Cpu)).map_err(RankError::from)?;
        let mut tensors: Vec<&mut Tensor> = self.sae.params.iter_mut().collect();
        if header[0] == 1 {
            tensors.extend(self.adam.m.iter_mut());
            tensors.extend(self.adam.v.iter_mut());
        }
        tch::no_grad(|| group.broadcast(&mut tensors, 0))?;
        self.adam.step = header[1];
        Ok(header[1])
    }

    /// Backward pass and gradient averaging. With `overlap` (and a group), the
    /// decoder's gradients are computed first and all-reduced while the
    /// encoder's are computed: d(loss)/dz is taken with the decoder's
    /// gradients, and the encoder's follow from the surrogate sum(z * dz),
    /// whose gradient is exactly the chain rule through z.
    fn backward_and_reduce(
        &self,
        losses: Losses,
    ) -> Result<(Vec<Tensor>, Tensor, Duration), RankError> {
        let stats =
            Tensor::stack(&[losses.mse.detach(), losses.l1.detach()], 0).to_kind(Kind::Float);
        let (Some(group), AllreduceMode::Overlap) = (&self.group, self.cfg.runtime.allreduce)
        else {
            let grads = Tensor::run_backward(&[&losses.total], &self.sae.params, false, false);
            return self.reduce(grads, stats);
        };
        let p = &self.sae.params;
        let dec = Tensor::run_backward(&[&losses.total], &[&p[2], &p[3], &losses.z], true, false);
        let dz = dec[2].detach();
        let flat = |ts: &[&Tensor]| {
            let parts: Vec<Tensor> = ts
                .iter()
                .map(|t| t.flatten(0, -1).to_kind(Kind::Float))
                .collect();
            Tensor::cat(&parts, 0)
        };
        let mut bucket_dec = flat(&[&dec[0], &dec[1]]);
        let started = Instant::now();
        let pending_dec = group.allreduce_start(&mut bucket_dec)?;
        let mut comm = started.elapsed();
        let surrogate = (&losses.z * &dz).sum(Kind::Float);
        let enc = Tensor::run_backward(&[&surrogate], &[&p[0], &p[1]], false, false);
        let mut bucket_enc = flat(&[&enc[0], &enc[1], &stats]);
        let started = Instant::now();
        let pending_enc = group.allreduce_start(&mut bucket_enc)?;
        pending_dec.wait()?;
        pending_enc.wait()?;
        comm += started.elapsed();
        let world = self.launch.world_size as f64;
        let unflatten = |bucket: Tensor, like: &[&Tensor]| -> Vec<Tensor> {
            let sizes: Vec<i64> = like.iter().map(|t| t.numel() as i64).collect();
            (bucket / world)
                .split_with_sizes(&sizes, 0)
                .into_iter()
                .zip(like)
                .map(|(part, t)| part.view_as(t))
                .collect()
        };
        let mut enc = unflatten(bucket_enc, &[&enc[0], &enc[1], &stats]);
        let stats = enc.pop().expect("stats part");
        let dec = unflatten(bucket_dec, &[&dec[0], &dec[1]]);
        let grads = enc.into_iter().chain(dec).collect();
        Ok((grads, stats, comm))
    }

    /// Average gradients and the step's [mse, l1] across ranks. Returns the
    /// averaged gradients, the averaged losses and the time spent communicating.
    fn reduce(
        &self,
        grads: Vec<Tensor>,
        losses: Tensor,
    ) -> Result<(Vec<Tensor>, Tensor, Duration), RankError> {
        let Some(group) = &self.group else {
            return Ok((grads, losses, Duration::ZERO));
        };
        let world = self.launch.world_size as f64;
        match self.cfg.runtime.allreduce {
            AllreduceMode::Flat | AllreduceMode::Overlap => {
                let mut parts: Vec<Tensor> = grads
                    .iter()
                    .map(|g| g.flatten(0, -1).to_kind(Kind::Float))
                    .collect();
                parts.push(losses);
                let mut flat = Tensor::cat(&parts, 0);
                let started = Instant::now();
                group.allreduce_sum(&mut [&mut flat], true)?;
                let comm = started.elapsed();
                let flat = flat / world;
                let sizes: Vec<i64> = parts.iter().map(|p| p.numel() as i64).collect();
                let mut pieces = flat.split_with_sizes(&sizes, 0);
                let losses = pieces.pop().expect("losses piece");
                let grads = pieces
                    .into_iter()
                    .zip(&grads)
                    .map(|(p, g)| p.view_as(g))
                    .collect();
                Ok((grads, losses, comm))
            }
            AllreduceMode::PerParam => {
                let mut grads: Vec<Tensor> =
                    grads.into_iter().map(|g| g.to_kind(Kind::Float)).collect();
                let mut losses = losses;
                let started = Instant::now();
                {
                    let mut all: Vec<&mut Tensor> = grads.iter_mut().collect();
                    all.push(&mut losses);
                    group.allreduce_sum(&mut all, false)?;
                }
                let comm = started.elapsed();
                let grads = grads.into_iter().map(|g| g / world).collect();
                Ok((grads, losses / world, comm))
            }
        }
    }

    /// A checkpoint resumes exactly only over the data set it was written
    /// over, read in the same order.
    fn check_sampler(&self, manifest: &Manifest) -> Result<(), RankError> {
        let Some(saved) = &manifest.sampler else {
            return Ok(());
        };
        let now = self.sampler_state(manifest.step);
        if saved.num_samples != now.num_samples {
            return Err(RankError::Data(format!(
                "the data set now has {} samples, but checkpoint step {} was written over {}: resuming would not read the same samples",
                now.num_samples, manifest.step, saved.num_samples
            )));
        }
        Ok(())
    }

    fn sampler_state(&self, step: i64) -> SamplerState {
        let (epoch, batch) = self.sampler.position(step);
        SamplerState {
            epoch,
            batch,
            num_samples: self.sampler.num_samples,
            seed: self.sampler.seed,
            shuffle_chunk: self.cfg.data.shuffle_chunk,
            shuffle_buffer: self.cfg.data.shuffle_buffer,
        }
    }

    /// Hand the data source to a reader thread that prepares the batches of
    /// steps `from..total_steps`.
    fn batches(&mut self, from: i64) -> Result<Prefetcher, RankError> {
        let source = self
            .source
            .take()
            .ok_or_else(|| RankError::Internal("the data source was taken twice".into()))?;
        let schedule = Schedule {
            sampler: self.sampler.clone(),
            table: self.table.clone(),
            window_chunks: crate::data::window_chunks(self.cfg),
            start_step: from,
            total_steps: self.total_steps,
            depth: self.cfg.data.prefetch_batches as usize,
            pin_for: self.device.is_cuda().then_some(self.device),
        };
        Ok(Prefetcher::spawn(
            source,
            self.cfg.model.d_in as usize,
            schedule,
        ))
    }

    /// A host batch on the training device in the compute dtype: copied in
    /// its stored type (asynchronously from pinned memory on CUDA), then
    /// converted there.
    fn to_device(&self, host: &Tensor) -> Tensor {
        host.to_device_(self.device, host.kind(), true, false)
            .to_kind(self.kind)
    }

    fn manifest(&self, step: i64) -> Manifest {
        Manifest {
            format: checkpoint::FORMAT.into(),
            step,
            epoch: self.sampler.position(step).0,
            world_size: self.launch.world_size,
            global_batch: self.global_batch(),
            d_in: self.cfg.model.d_in,
            d_sae: self.cfg.d_sae(),
            dtype: format!("{:?}", self.cfg.model.dtype).to_lowercase(),
            param_checksum: self.sae.checksum(),
            files: vec!["state.safetensors".into()],
            architecture: "relu".into(),
            k: None,
            apply_b_dec_to_input: false,
            sampler: Some(self.sampler_state(step)),
        }
    }

    fn save_checkpoint(&self, step: i64) -> Result<(), RankError> {
        if !self.launch.is_leader() {
            return Ok(());
        }
        let path =
            self.checkpoints
                .save(self.run_dir, &self.sae, &self.adam, &self.manifest(step))?;
        self.checkpoints.prune(self.cfg.checkpoint.keep as usize)?;
        self.out.emit(&ProgressLine::Checkpoint { step, path });
        Ok(())
    }

    /// Train to the configured number of steps.
    pub fn run(mut self) -> Result<(), RankError> {
        let start_step = self.synchronise_start()?;
        let begun = Instant::now();
        let device_name = format!("{:?}", self.device).to_lowercase();
        self.out.leader(&ProgressLine::Started {
            world_size: self.launch.world_size,
            device: device_name,
            total_steps: self.total_steps,
            start_step,
            global_batch: self.global_batch(),
            parameters: self.cfg.parameter_count(),
        });
        let log_every = self.cfg.runtime.log_every_steps;
        let every = self.cfg.checkpoint.every_steps;
        let mut window = Window::default();
        let mut batches = self.batches(start_step.min(self.total_steps - 1))?;
        let mut samples_total = 0i64;
        let mut last_loss = f64::NAN;
        for step in start_step..self.total_steps {
            let step_started = Instant::now();
            let (epoch, _) = self.sampler.position(step);
            let (host, wait) = batches.next(step)?;
            let x = self.to_device(&host);
            let losses = self.sae.losses(&x);
            let (grads, stats, comm) = self.backward_and_reduce(losses)?;
            self.adam.step(&mut self.sae.params, &grads);
            let done = step + 1;
            let rows = host.size()[0] * self.launch.world_size;
            let elapsed = step_started.elapsed();
            window.steps += 1;
            window.samples += rows;
            window.comm += comm;
            window.data_wait += wait;
            window.compute += elapsed.saturating_sub(comm).saturating_sub(wait);
            window.total += elapsed;
            samples_total += rows;

            if done % log_every == 0 || done == start_step + 1 || done == self.total_steps {
                let stats =
                    Vec::<f64>::try_from(stats.to_kind(Kind::Double).to_device(Device::Cpu))?;
                let (mse, l1) = (stats[0], stats[1]);
                last_loss = mse + self.cfg.model.l1_coefficient * l1;
                self.report(done, epoch, mse, l1, &window);
                window = Window::default();
            }
            if every > 0 && done % every == 0 && done != self.total_steps {
                self.save_checkpoint(done)?;
            }
        }
        if self.total_steps > start_step
            || (self.launch.is_leader() && self.checkpoints.latest()?.is_none())
        {
            self.save_checkpoint(self.total_steps)?;
        }
        if start_step >= self.total_steps {
            // Resumed at the last step: nothing ran, so measure the loss the
            // final parameters give on the last step's batch.
            let (host, _) = batches.next(self.total_steps - 1)?;
            last_loss = self.evaluate(&host)?;
        }
        drop(batches);
        let checksum = self.sae.checksum();
        let wall = begun.elapsed().as_secs_f64();
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
                samples_total as f64 / wall
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

    /// The loss (mse + l1 term, averaged across ranks) of the current
    /// parameters on each rank's `host` batch.
    fn evaluate(&self, host: &Tensor) -> Result<f64, RankError> {
        let x = self.to_device(host);
        let mut stats = tch::no_grad(|| {
            let l = self.sae.losses(&x);
            Tensor::stack(&[l.mse, l.l1], 0).to_kind(Kind::Float)
        });
        if let Some(group) = &self.group {
            group.allreduce_sum(&mut [&mut stats], false)?;
            stats /= self.launch.world_size as f64;
        }
        let v = Vec::<f64>::try_from(stats.to_kind(Kind::Double).to_device(Device::Cpu))?;
        Ok(v[0] + self.cfg.model.l1_coefficient * v[1])
    }

    fn report(&self, step: i64, epoch: i64, mse: f64, l1: f64, w: &Window) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / w.steps.max(1) as f64;
        let secs = w.total.as_secs_f64();
        self.out.leader(&ProgressLine::Progress {
            step,
            total_steps: self.total_steps,
            epoch,
            loss: mse + self.cfg.model.l1_coefficient * l1,
            mse,
            l1,
            samples_per_sec: if secs > 0.0 {
                w.samples as f64 / secs
            } else {
                0.0
            },
            step_time_ms: ms(w.total),
        });
        self.out.emit(&ProgressLine::RankStats {
            rank: self.launch.rank,
            step,
            step_time_ms: ms(w.total),
            compute_ms: ms(w.compute),
            comm_ms: ms(w.comm),
            memory_bytes: resident_bytes(),
            data_wait_ms: ms(w.data_wait),
        });
    }
}
