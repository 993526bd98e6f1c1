use super::*;

fn sampler(n: i64, world: i64, rank: i64, batch: i64) -> DistributedSampler {
    DistributedSampler {
        num_samples: n,
        world_size: world,
        rank,
        seed: 7,
        batch_size: batch,
        accumulation: 1,
    }
}

/// Sample ids of one rank's batch, as training reads them.
fn batch_ids(s: &DistributedSampler, order: &mut EpochOrder, batch: i64) -> Vec<u64> {
    s.batch_positions(batch)
        .map(|p| order.sample_at(p))
        .collect()
}

#[test]
fn feistel_is_a_permutation_for_every_size() {
    for n in [1u64, 2, 3, 7, 64, 1000, 4097] {
        let f = Feistel::new(n, 42);
        let mut seen: Vec<u64> = (0..n).map(|i| f.apply(i)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
    }
    let (a, b) = (Feistel::new(1000, 1), Feistel::new(1000, 2));
    assert!((0..1000).filter(|&i| a.apply(i) != b.apply(i)).count() > 900);
}

#[test]
fn chunks_never_cross_segments() {
    let t = ChunkTable::new([10, 0, 3, 8], 4);
    assert_eq!(t.chunks(), 3 + 1 + 2);
    let chunks: Vec<(u64, u64)> = (0..t.chunks()).map(|c| t.chunk(c)).collect();
    assert_eq!(chunks, [(0, 4), (4, 4), (8, 2), (10, 3), (13, 4), (17, 4)]);
    assert_eq!(t.rows(), 21);
}

#[test]
fn every_sample_at_least_once_per_epoch_and_fewer_than_a_step_twice() {
    // Uneven segments, a window of 3 chunks, world sizes that do and don't divide.
    let table = ChunkTable::new([50, 7, 63], 8);
    let n = table.rows() as i64;
    for world in [1, 2, 3, 4] {
        let mut seen = vec![0; n as usize];
        let mut steps = vec![];
        for rank in 0..world {
            let s = sampler(n, world, rank, 16);
            steps.push(s.steps_per_epoch());
            let mut order = EpochOrder::new(&table, s.seed, 3, 3);
            for b in 0..s.steps_per_epoch() {
                for id in batch_ids(&s, &mut order, b) {
                    seen[id as usize] += 1;
                }
            }
        }
        let extra: i32 = seen.iter().map(|&c| c - 1).sum();
        assert!(seen.iter().all(|&c| c >= 1), "world {world}: {seen:?}");
        let global = 16 * world as i32;
        assert_eq!(
            extra,
            global * steps[0] as i32 - n as i32,
            "world {world}: whole steps, the last one completed by wrapping"
        );
        assert!(extra < global, "world {world}: {extra} padding samples");
        assert!(
            steps.windows(2).all(|w| w[0] == w[1]),
            "equal steps per rank"
        );
    }
}

/// The ids optimizer step `step` reads over all ranks and micro-batches
/// (micro-batch major, then rank), as a run of `world` ranks at micro-batch
/// `batch` and `accumulation` reads them.
fn step_ids(table: &ChunkTable, n: i64, split: (i64, i64, i64), step: i64) -> Vec<u64> {
    let (world, batch, accumulation) = split;
    let ranks: Vec<DistributedSampler> = (0..world)
        .map(|rank| DistributedSampler {
            accumulation,
            ..sampler(n, world, rank, batch)
        })
        .collect();
    let mut out = Vec::new();
    for m in 0..accumulation {
        let (epoch, b) = ranks[0].position(step * accumulation + m);
        let mut order = EpochOrder::new(table, 7, epoch as u64, 2);
        for s in &ranks {
            assert_eq!(s.position(step * accumulation + m), (epoch, b));
            out.extend(batch_ids(s, &mut order, b));
        }
    }
    out
}

#[test]
fn a_step_reads_the_same_samples_at_every_split_of_the_global_batch() {
    // G = 48 split as (ranks, micro-batch, accumulation); data sets that
    // G divides and that it does not, over three epochs.
    let splits = [
        (1, 48, 1),
        (2, 24, 1),
        (2, 12, 2),
        (4, 12, 1),
        (3, 8, 2),
        (4, 4, 3),
    ];
    for n in [96i64, 100, 130] {
        let table = ChunkTable::new([n as u64 / 2, n as u64 - n as u64 / 2], 8);
        let steps = 3 * (n + 47) / 48;
        for step in 0..steps {
            let fixed = step_ids(&table, n, splits[0], step);
            assert_eq!(fixed.len(), 48);
            for split in &splits[1..] {
                assert_eq!(
                    step_ids(&table, n, *split, step),
                    fixed,
                    "n {n}, step {step}, split {split:?}"
                );
            }
        }
    }
}

#[test]
fn epochs_shuffle_differently_and_deterministically() {
    let table = ChunkTable::new([1000], 16);
    let s = sampler(1000, 2, 1, 10);
    let ids = |epoch| {
        let mut o = EpochOrder::new(&table, s.seed, epoch, 8);
        (0..s.steps_per_epoch())
            .flat_map(|b| batch_ids(&s, &mut o, b))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(1), ids(1));
    assert_ne!(ids(1), ids(2));
    assert_eq!(s.position(250), (5, 0), "50 steps of 20 an epoch");
}

#[test]
fn one_rank_at_2b_covers_what_two_ranks_at_b_cover() {
    let table = ChunkTable::new([40, 24], 8);
    let one = sampler(64, 1, 0, 8);
    let (r0, r1) = (sampler(64, 2, 0, 4), sampler(64, 2, 1, 4));
    let mut o = EpochOrder::new(&table, 7, 0, 2);
    for batch in 0..one.steps_per_epoch() {
        let a = batch_ids(&one, &mut o, batch);
        let mut b = batch_ids(&r0, &mut o, batch);
        b.extend(batch_ids(&r1, &mut o, batch));
        assert_eq!(a, b, "batch {batch}: the same samples in the same order");
    }
}

#[test]
fn a_window_mixes_its_chunks() {
    // 4 chunks of 32 per window: a batch of 16 draws from several chunks.
    let table = ChunkTable::new([4096], 32);
    let s = sampler(4096, 1, 0, 16);
    let mut o = EpochOrder::new(&table, 1, 0, 4);
    let ids = batch_ids(&s, &mut o, 0);
    let chunks: std::collections::BTreeSet<u64> = ids.iter().map(|i| i / 32).collect();
    assert!(chunks.len() >= 3, "{ids:?}");
}

#[test]
fn a_windows_positions_are_the_ranks_positions_in_it() {
    let table = ChunkTable::new([50, 7, 63], 8);
    let n = table.rows() as i64;
    for world in [1, 2, 3] {
        for rank in 0..world {
            let s = sampler(n, world, rank, 16);
            let order = EpochOrder::new(&table, s.seed, 0, 3);
            let mut all: Vec<u64> = (0..s.steps_per_epoch())
                .flat_map(|b| s.batch_span(b))
                .filter(|&p| p < n as u64) // the padding is read directly
                .collect();
            all.sort_unstable();
            all.dedup();
            let mut windows = Vec::new();
            let mut w = 0;
            while order.window_range(w).start < n as u64 {
                windows.extend(s.positions_in(order.window_range(w)));
                w += 1;
                if order.window_range(w - 1).end >= n as u64 {
                    break;
                }
            }
            windows.sort_unstable();
            assert_eq!(windows, all, "world {world} rank {rank}");
        }
    }
}
