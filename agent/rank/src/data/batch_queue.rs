//! The background reader: a thread that forms the batches of the steps to
//! come, in order, into a bounded queue of `data.prefetch_batches`, so reading
//! overlaps the training step. Batches stay in the stored element type; on
//! CUDA they are pinned, so the copy to the device can be asynchronous.

use super::error::ReadError;
use super::source::Source;
use crate::data::sampler::{ChunkTable, DistributedSampler, EpochOrder};
use crate::error::RankError;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tch::{Device, Tensor};

/// What the reader needs to know of the run.
pub struct Schedule {
    pub sampler: DistributedSampler,
    pub table: ChunkTable,
    pub window_chunks: u64,
    pub start_step: i64,
    pub total_steps: i64,
    pub depth: usize,
    /// Pin batches for this CUDA device.
    pub pin_for: Option<Device>,
}

/// A micro-batch read: its step, its rows, and the digest parts of its
/// sample ids ([`super::digest`]).
type Read = (i64, Tensor, [f64; 2]);

/// A micro-batch on the host, how long it was waited for, and the digest
/// parts of its sample ids.
pub type HostBatch = (Tensor, Duration, [f64; 2]);

pub struct BatchQueue {
    rx: Receiver<Result<Read, ReadError>>,
    handle: Option<JoinHandle<()>>,
}

impl BatchQueue {
    pub fn spawn(mut source: Source, d_in: usize, s: Schedule) -> Self {
        let (tx, rx) = sync_channel(s.depth);
        let handle = std::thread::Builder::new()
            .name("cohort-data".into())
            .spawn(move || {
                let kind = source.elem().kind();
                let row_bytes = d_in * source.elem().size();
                let mut current: Option<(i64, EpochOrder)> = None;
                let ahead = source.reads_ahead();
                // The highest window of the current epoch asked for, and
                // the highest one received.
                let (mut requested, mut received): (Option<u64>, Option<u64>) = (None, None);
                for step in s.start_step..s.total_steps {
                    let (epoch, batch) = s.sampler.position(step);
                    if current.as_ref().is_none_or(|(e, _)| *e != epoch) {
                        let order = EpochOrder::new(
                            &s.table,
                            s.sampler.seed,
                            epoch as u64,
                            s.window_chunks,
                        );
                        current = Some((epoch, order));
                        (requested, received) = (None, None);
                    }
                    let order = &mut current.as_mut().expect("set above").1;
                    if ahead {
                        // The padding past the end is read directly.
                        let span = s.sampler.batch_span(batch);
                        let end = span.end.min(s.sampler.num_samples as u64);
                        if span.start < end {
                            let (first, last) =
                                (order.window_of(span.start), order.window_of(end - 1));
                            // Ask for every window this batch needs and one
                            // more, so the next is read while this one
                            // trains; then wait for those this batch needs.
                            let ahead = (last + 1).min(order.windows() - 1);
                            let ask = requested.map_or(first, |w| (w + 1).max(first));
                            let wait = received.map_or(first, |w| (w + 1).max(first));
                            let mut work = || -> Result<(), ReadError> {
                                for w in ask..=ahead {
                                    let ids: Vec<u64> = s
                                        .sampler
                                        .positions_in(order.window_range(w))
                                        .into_iter()
                                        .map(|p| order.sample_at(p))
                                        .collect();
                                    source.request_window((epoch as u64, w), ids)?;
                                    requested = Some(w);
                                }
                                for w in wait..=last {
                                    source.await_window((epoch as u64, w))?;
                                    received = Some(w);
                                }
                                Ok(())
                            };
                            if let Err(e) = work() {
                                let _ = tx.send(Err(e));
                                return;
                            }
                        }
                    }
                    let ids: Vec<u64> = s
                        .sampler
                        .batch_positions(batch)
                        .map(|p| order.sample_at(p))
                        .collect();
                    let mut bytes = vec![0u8; ids.len() * row_bytes];
                    let digest = super::digest::parts(&ids);
                    let made = source.fill(&ids, d_in, &mut bytes).map(|()| {
                        let t =
                            Tensor::from_data_size(&bytes, &[ids.len() as i64, d_in as i64], kind);
                        match s.pin_for {
                            Some(device) => (step, t.pin_memory(device), digest),
                            None => (step, t, digest),
                        }
                    });
                    let failed = made.is_err();
                    if tx.send(made).is_err() || failed {
                        return;
                    }
                }
            })
            .expect("spawn the data reader thread");
        Self {
            rx,
            handle: Some(handle),
        }
    }

    /// The next step's batch (on the host), how long this call waited, and
    /// the digest parts of its sample ids.
    pub fn next(&mut self, step: i64) -> Result<HostBatch, RankError> {
        let started = Instant::now();
        match self.rx.recv() {
            Ok(Ok((got, batch, ids))) => {
                debug_assert_eq!(got, step, "batches arrive in step order");
                Ok((batch, started.elapsed(), ids))
            }
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(RankError::Internal(format!(
                "the data reader stopped before step {step}"
            ))),
        }
    }
}

impl Drop for BatchQueue {
    fn drop(&mut self) {
        // Unblock a reader waiting on a full queue, then let it end.
        let (_, rx) = sync_channel(1);
        drop(std::mem::replace(&mut self.rx, rx));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
