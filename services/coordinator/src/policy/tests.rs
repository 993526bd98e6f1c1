//! The policy on hand-made snapshots: placement in order, preemption (who,
//! when, never what), reclaim and borrowing, fair share, the oldest
//! training's reservation, and the forecast.

use super::*;
use crate::model::{GpuRequest, GpuSelection};
use chrono::{DateTime, Duration as Span, Utc};
use std::collections::HashMap;
use std::time::Duration;

const GIB: u64 = 1 << 30;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn job(id: &str, team: &str, gpus: u32, priority: i32, preempting: bool) -> Job {
    Job {
        id: id.into(),
        team: team.into(),
        priority,
        class: String::new(),
        preempting,
        borrow: true,
        create_time: t0() - Span::minutes(5),
        request: GpuRequest {
            selection: GpuSelection::Count { count: gpus },
            queue: true,
        },
        need: Need {
            memory: GIB,
            program_dir: None,
        },
        remaining: None,
        grace: Duration::from_secs(60),
        stop_within: Duration::from_secs(30),
        saves_on_notice: true,
        resizable: false,
    }
}

fn waiting(job: Job) -> WaitingJob {
    WaitingJob::submitted(job)
}

/// A snapshot of `hosts` x `gpus` GPUs with `running` placed first
/// (on the first free GPUs, in order) and `queue` waiting.
fn world(hosts: usize, gpus: usize, running: Vec<(Job, i64)>, queue: Vec<Job>) -> Snapshot {
    let mut fleet = FleetView::uniform(hosts, gpus, 80 * GIB);
    let mut held: HashMap<String, i64> = HashMap::new();
    let mut placed = Vec::new();
    for (job, ran_min) in running {
        let free: Vec<String> = fleet
            .candidates
            .iter()
            .filter(|c| c.fits(0))
            .take(job.count())
            .map(|c| c.uuid.clone())
            .collect();
        assert_eq!(free.len(), job.count(), "room for {}", job.id);
        fleet.hold(&free, &snapshot::hold_for(&job, 1, 0));
        *held.entry(job.team.clone()).or_default() += free.len() as i64;
        placed.push(RunningJob {
            ends_at: job.remaining.map(|r| t0() + r),
            since: t0() - Span::minutes(ran_min),
            checkpoint_time: None,
            stopping: None,
            gpus: free,
            job,
        });
    }
    Snapshot {
        now: t0(),
        fleet,
        waiting: queue.into_iter().map(waiting).collect(),
        running: placed,
        shares: Shares::default(),
        held,
        claims: HashMap::new(),
    }
}

fn placed(d: &Decisions) -> Vec<&str> {
    d.placements.iter().map(|p| p.id.as_str()).collect()
}

/// Each notice of a pass: (victim, for whom, kind), in the pass's order.
fn notices(d: &Decisions) -> Vec<(&str, &str, NoticeKind)> {
    d.preemptions
        .iter()
        .map(|p| (p.victim.as_str(), p.by.as_str(), p.kind))
        .collect()
}

fn victims(d: &Decisions) -> Vec<&str> {
    let mut v: Vec<&str> = d.preemptions.iter().map(|p| p.victim.as_str()).collect();
    v.sort_unstable();
    v
}

#[test]
fn what_fits_is_placed_in_order_and_smaller_ones_backfill() {
    let mut s = world(
        1,
        4,
        vec![(job("old", "a", 2, 0, false), 30)],
        vec![job("big", "a", 4, 5, false), job("small", "a", 2, 0, false)],
    );
    let d = pass(&mut s, &Policy::default());
    assert_eq!(placed(&d), ["small"]);
    assert!(
        d.preemptions.is_empty(),
        "nobody preempts without a preempting class"
    );
    let why = &d.reasons.iter().find(|(id, _)| id == "big").unwrap().1;
    assert!(why.starts_with("INSUFFICIENT_GPUS"), "{why}");
    assert!(d.full);
}

#[test]
fn an_urgent_training_preempts_a_lower_one_and_reserves_what_it_frees() {
    let mut s = world(
        1,
        4,
        vec![(job("low", "a", 4, -100, false), 60)],
        vec![
            job("urgent", "b", 4, 1000, true),
            job("filler", "c", 1, 0, false),
        ],
    );
    let d = pass(&mut s, &Policy::default());
    assert_eq!(victims(&d), ["low"]);
    assert_eq!(d.preemptions[0].by, "urgent");
    assert_eq!(d.preemptions[0].kind, NoticeKind::Preempt);
    assert!(placed(&d).is_empty(), "{:?}", d.placements);
    let why = &d.reasons.iter().find(|(id, _)| id == "urgent").unwrap().1;
    assert!(why.starts_with("PREEMPTING: waiting for low"), "{why}");

    // The next pass: the victim stops; nothing more is preempted, and the
    // GPUs it frees go to the urgent one, not to the filler behind it.
    s.apply(&d);
    let d = pass(&mut s, &Policy::default());
    assert!(d.preemptions.is_empty());
    s.end("low");
    let d = pass(&mut s, &Policy::default());
    assert_eq!(placed(&d), ["urgent"]);
}

#[test]
fn never_a_younger_equal_or_higher_or_useless_victim() {
    let policy = Policy::default();
    // Inside its protection window (5 of 10 minutes).
    let mut s = world(
        1,
        4,
        vec![(job("young", "a", 4, 0, false), 5)],
        vec![job("urgent", "a", 4, 1000, true)],
    );
    assert!(pass(&mut s, &policy).preemptions.is_empty());
    // Not strictly lower.
    let mut s = world(
        1,
        4,
        vec![(job("peer", "a", 4, 1000, false), 60)],
        vec![job("urgent", "a", 4, 1000, true)],
    );
    assert!(pass(&mut s, &policy).preemptions.is_empty());
    // It would not fit even with every victim gone.
    let mut s = world(
        1,
        4,
        vec![(job("low", "a", 4, 0, false), 60)],
        vec![job("huge", "a", 8, 1000, true)],
    );
    assert!(pass(&mut s, &policy).preemptions.is_empty());
    // Preemption off.
    let mut s = world(
        1,
        4,
        vec![(job("low", "a", 4, 0, false), 60)],
        vec![job("urgent", "a", 4, 1000, true)],
    );
    assert!(pass(&mut s, &Policy::fifo_backfill())
        .preemptions
        .is_empty());
}

#[test]
fn the_victims_lose_the_least_work_and_are_as_few_as_needed() {
    // Two 2-GPU candidates: one saves on its notice, one loses an hour.
    let mut careless = job("careless", "a", 2, 0, false);
    careless.saves_on_notice = false;
    let mut s = world(
        1,
        4,
        vec![(careless, 60), (job("saver", "a", 2, 0, false), 60)],
        vec![job("urgent", "a", 2, 1000, true)],
    );
    let d = pass(&mut s, &Policy::default());
    assert_eq!(victims(&d), ["saver"]);
    assert_eq!(d.preemptions[0].lost_gpu_seconds, 0.0);
    // One small victim rather than a big one when one suffices.
    let mut s = world(
        1,
        6,
        vec![
            (job("big", "a", 4, 0, false), 60),
            (job("small", "a", 2, 0, false), 60),
        ],
        vec![job("urgent", "a", 2, 1000, true)],
    );
    assert_eq!(victims(&pass(&mut s, &Policy::default())), ["small"]);
}

fn shares(teams: &[(&str, Option<u32>, Option<u32>, f64)], usage: &[(&str, f64)]) -> Shares {
    Shares::new(
        teams
            .iter()
            .map(|(t, g, b, w)| {
                (
                    t.to_string(),
                    TeamShare {
                        guarantee: *g,
                        borrow_limit: *b,
                        weight: *w,
                    },
                )
            })
            .collect(),
        None,
        usage.iter().map(|(t, u)| (t.to_string(), *u)).collect(),
    )
}

#[test]
fn a_team_reclaims_its_guarantee_from_a_borrower_whatever_its_priority() {
    // Team b borrows all 4 GPUs (urgent, young); team a wants its 2.
    let mut s = world(
        1,
        4,
        vec![(job("borrower", "b", 4, 1000, true), 1)],
        vec![job("mine", "a", 2, 0, false)],
    );
    s.shares = shares(
        &[("a", Some(2), None, 1.0), ("b", Some(2), Some(2), 1.0)],
        &[],
    );
    let d = pass(&mut s, &Policy::default());
    assert!(d.borrowing.contains("borrower"));
    assert_eq!(victims(&d), ["borrower"]);
    assert_eq!(d.preemptions[0].kind, NoticeKind::Reclaim);
    // Lending off: a hard cap, nothing to reclaim (b could not borrow).
    let mut s = world(
        1,
        4,
        vec![(job("borrower", "b", 4, 0, false), 60)],
        vec![job("mine", "a", 2, 0, false)],
    );
    s.shares = shares(
        &[("a", Some(2), None, 1.0), ("b", Some(2), Some(2), 1.0)],
        &[],
    );
    assert!(pass(&mut s, &Policy::fifo_backfill())
        .preemptions
        .is_empty());
}

#[test]
fn borrowers_come_after_guarantees_and_by_fair_share() {
    let mut s = world(
        1,
        4,
        vec![],
        vec![
            job("b-job", "b", 2, 0, false),
            job("c-job", "c", 2, 0, false),
            job("within", "a", 2, -100, false),
        ],
    );
    s.shares = shares(
        &[
            ("a", Some(2), None, 1.0),
            ("b", Some(0), Some(4), 1.0),
            ("c", Some(0), Some(4), 2.0),
        ],
        &[("b", 100.0), ("c", 300.0)],
    );
    let d = pass(&mut s, &Policy::default());
    // a within its guarantee first, whatever its priority; then the
    // borrower with the least usage per weight: b (100 / 1) before c
    // (300 / 2 = 150), and the fleet is full.
    assert_eq!(placed(&d), ["within", "b-job"]);
    let borrowing: Vec<bool> = d.placements.iter().map(|p| p.borrowing).collect();
    assert_eq!(borrowing, [false, true]);
    // A training that does not borrow waits within its guarantee.
    let mut no = job("no-borrow", "b", 2, 0, false);
    no.borrow = false;
    let mut s = world(1, 4, vec![], vec![no]);
    s.shares = shares(&[("b", Some(0), Some(4), 1.0)], &[]);
    let d = pass(&mut s, &Policy::default());
    assert!(d.placements.is_empty());
    assert!(
        d.reasons[0].1.starts_with("QUOTA_EXCEEDED"),
        "{:?}",
        d.reasons
    );
}

#[test]
fn the_oldest_waiting_training_reserves_the_gpus_it_gets_first() {
    // 8 GPUs on two hosts; "ends-soon" holds 2 of host-0 and ends in 10
    // minutes, "ends-late" the other 2 of host-0 and all of host-1 save 2.
    let mut soon = job("ends-soon", "a", 2, 0, false);
    soon.remaining = Some(Duration::from_secs(600));
    let mut late = job("ends-late", "a", 4, 0, false);
    late.remaining = Some(Duration::from_secs(36_000));
    let mut old = job("old-big", "a", 4, 0, false);
    old.create_time = t0() - Span::hours(3);
    let mut s = world(
        2,
        4,
        vec![(soon, 60), (late, 60)],
        vec![
            old,
            job("small", "a", 2, 0, false),
            job("tiny", "a", 1, 0, false),
        ],
    );
    // Free: host-1/gpu-2, host-1/gpu-3. The old one gets those two first
    // when "ends-soon" ends: they are reserved, nothing backfills them.
    let d = pass(&mut s, &Policy::default());
    assert!(placed(&d).is_empty(), "{:?}", d.placements);
    let why = &d.reasons.iter().find(|(id, _)| id == "tiny").unwrap().1;
    assert!(why.starts_with("WAITING_FOR_RESERVATION"), "{why}");
    // Without the reservation rule (young queue) they would backfill.
    let mut s2 = s.clone();
    for w in &mut s2.waiting {
        w.job.create_time = t0();
    }
    assert_eq!(placed(&pass(&mut s2, &Policy::default())), ["small"]);
}

#[test]
fn the_forecast_runs_the_pass_forward() {
    let mut a = job("a", "t", 4, 0, false);
    a.remaining = Some(Duration::from_secs(3600));
    let mut next = job("next", "t", 4, 0, false);
    next.remaining = Some(Duration::from_secs(1800));
    next.create_time = t0() - Span::minutes(10);
    let after = job("after", "t", 4, 0, false);
    let s = world(1, 4, vec![(a, 10)], vec![next, after]);
    let f = forecast(
        s,
        &Policy::default(),
        Duration::from_secs(86_400),
        Horizon::default(),
    );
    assert_eq!(f.ends["a"], Estimate::At(t0() + Span::hours(1)));
    assert_eq!(f.starts["next"], Estimate::At(t0() + Span::hours(1)));
    assert_eq!(f.starts["after"], Estimate::At(t0() + Span::minutes(90)));
    // "after" never ends: nobody said how long it runs.
    assert!(matches!(
        &f.ends.get("after"),
        None | Some(Estimate::Unknown(_))
    ));

    // Behind a training of unknown length: no number, the reason.
    let s = world(
        1,
        4,
        vec![(job("forever", "t", 4, 0, false), 10)],
        vec![job("stuck", "t", 4, 0, false)],
    );
    let f = forecast(
        s,
        &Policy::default(),
        Duration::from_secs(86_400),
        Horizon::default(),
    );
    match &f.starts["stuck"] {
        Estimate::Unknown(why) => assert!(
            why.contains("NO_DURATION") && why.contains("forever"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(&f.ends["forever"], Estimate::Unknown(why) if why.starts_with("NO_DURATION")));
}

#[test]
fn the_forecast_sees_an_urgent_training_preempt_and_its_victim_come_back() {
    let mut low = job("low", "t", 4, -100, false);
    low.remaining = Some(Duration::from_secs(7200));
    let mut urgent = job("urgent", "t", 4, 1000, true);
    urgent.remaining = Some(Duration::from_secs(600));
    let s = world(1, 4, vec![(low, 60)], vec![urgent]);
    let f = forecast(
        s,
        &Policy::default(),
        Duration::from_secs(86_400),
        Horizon::default(),
    );
    // The victim stops within its 30 s; the urgent one runs 10 minutes;
    // the victim then finishes its remaining 2 h (it saved on notice).
    assert_eq!(f.starts["urgent"], Estimate::At(t0() + Span::seconds(30)));
    let end = f.ends["low"].at().unwrap();
    assert_eq!(end, t0() + Span::seconds(30 + 600 + 7200));
}

#[test]
fn a_preempted_training_keeps_saying_so_while_it_waits() {
    let mut w = job("back", "a", 4, 0, false);
    w.create_time = t0();
    let mut s = world(1, 4, vec![(job("other", "a", 4, 0, false), 1)], vec![w]);
    s.waiting[0].state_reason = "PREEMPTED: by urgent-1 (class urgent)".into();
    let d = pass(&mut s, &Policy::default());
    let why = &d.reasons[0].1;
    assert!(
        why.starts_with("PREEMPTED: by urgent-1 (class urgent); waits: INSUFFICIENT_GPUS"),
        "{why}"
    );
    // The next pass finds it said already.
    s.waiting[0].state_reason = why.clone();
    assert!(pass(&mut s, &Policy::default()).reasons.is_empty());
}

#[test]
fn a_training_that_ends_before_the_oldest_can_start_backfills_its_gpus() {
    // The oldest needs all 8; 6 are held by one ending in an hour. The two
    // free ones are its; a 2-GPU training of 30 minutes may use them, one
    // of 2 hours may not.
    let mut holder = job("holder", "a", 6, 0, false);
    holder.remaining = Some(Duration::from_secs(3600));
    let mut old = job("old-big", "a", 8, 0, false);
    old.create_time = t0() - Span::hours(3);
    let mut short = job("short", "a", 2, 0, false);
    short.remaining = Some(Duration::from_secs(1800));
    let mut long = job("long", "a", 2, 0, false);
    long.remaining = Some(Duration::from_secs(7200));
    let mut s = world(1, 8, vec![(holder, 60)], vec![old.clone(), long.clone()]);
    assert!(placed(&pass(&mut s, &Policy::default())).is_empty());
    let mut s = world(
        1,
        8,
        vec![(job("holder", "a", 6, 0, false), 60)],
        vec![old, short],
    );
    s.running[0].ends_at = Some(t0() + Span::hours(1));
    assert_eq!(placed(&pass(&mut s, &Policy::default())), ["short"]);
}

fn elastic(id: &str, team: &str, sizes: &[u32]) -> Job {
    let mut j = job(id, team, sizes[0], 0, false);
    j.request.selection = GpuSelection::Range {
        min: sizes[0],
        max: *sizes.last().expect("sizes"),
        sizes: sizes.to_vec(),
    };
    j
}

#[test]
fn an_elastic_training_starts_at_the_largest_size_its_team_may_run() {
    // 8 free GPUs; sizes 2, 4, 8: all of them.
    let mut s = world(2, 4, vec![], vec![elastic("e", "a", &[2, 4, 8])]);
    let d = pass(&mut s, &Policy::default());
    assert_eq!(d.placements[0].slots.len(), 8);
    // 3 free: its largest size within them, 2.
    let mut s = world(
        1,
        4,
        vec![(job("one", "b", 1, 0, false), 5)],
        vec![elastic("e", "a", &[2, 4, 8])],
    );
    let d = pass(&mut s, &Policy::default());
    assert_eq!(d.placements[0].slots.len(), 2);
    // Team a may use 4 (guarantee 4, borrowing nothing): 4 of the 8 free.
    let mut s = world(2, 4, vec![], vec![elastic("e", "a", &[2, 4, 8])]);
    s.shares = shares(&[("a", Some(4), Some(0), 1.0)], &[]);
    let d = pass(&mut s, &Policy::default());
    assert_eq!(d.placements[0].slots.len(), 4, "{:?}", d.reasons);
    // Fewer free than its smallest size: it waits, and says why.
    let mut s = world(
        1,
        2,
        vec![(job("one", "b", 1, 0, false), 5)],
        vec![elastic("e", "a", &[2, 4])],
    );
    let d = pass(&mut s, &Policy::default());
    assert!(d.placements.is_empty());
    assert!(
        d.reasons[0].1.starts_with("INSUFFICIENT_GPUS"),
        "{:?}",
        d.reasons
    );
}

#[test]
fn an_elastic_training_grows_onto_gpus_no_waiting_training_can_use() {
    let mut grower = elastic("e", "a", &[2, 4]);
    grower.resizable = true;
    // 4 GPUs, e on 2 of them for 10 minutes: it grows to 4.
    let mut s = world(1, 4, vec![(grower.clone(), 10)], vec![]);
    let d = pass(&mut s, &Policy::default());
    assert_eq!(
        d.resizes,
        [Resize {
            id: "e".into(),
            from: 2,
            to: 4
        }]
    );
    // Within its cooldown (5 minutes from its placement): not yet.
    let mut s = world(1, 4, vec![(grower.clone(), 1)], vec![]);
    assert!(pass(&mut s, &Policy::default()).resizes.is_empty());
    // A waiting training that fits comes first: nothing is left to grow on.
    let mut s = world(
        1,
        4,
        vec![(grower.clone(), 10)],
        vec![job("w", "b", 2, -100, false)],
    );
    let d = pass(&mut s, &Policy::default());
    assert_eq!(placed(&d), ["w"]);
    assert!(d.resizes.is_empty());
    // 1 free: no size of 2..4 between 2 and 3 (3 does not split).
    let mut s = world(
        1,
        4,
        vec![(grower.clone(), 10), (job("one", "b", 1, 0, false), 10)],
        vec![],
    );
    assert!(pass(&mut s, &Policy::default()).resizes.is_empty());
    // Stopping, or not resizable (a program that did not opt in): never.
    let mut s = world(1, 4, vec![(grower.clone(), 10)], vec![]);
    s.running[0].stopping = Some(Stopping {
        by: "x".into(),
        until: t0(),
    });
    assert!(pass(&mut s, &Policy::default()).resizes.is_empty());
    let mut fixed = grower.clone();
    fixed.resizable = false;
    let mut s = world(1, 4, vec![(fixed, 10)], vec![]);
    assert!(pass(&mut s, &Policy::default()).resizes.is_empty());
    // Into borrowed quota as any placement may (a reclaim shrinks it
    // back), but not beyond what its team may borrow.
    let mut s = world(1, 4, vec![(grower.clone(), 10)], vec![]);
    s.shares = shares(&[("a", Some(2), Some(4), 1.0)], &[]);
    assert_eq!(pass(&mut s, &Policy::default()).resizes.len(), 1);
    let mut s = world(1, 4, vec![(grower, 10)], vec![]);
    s.shares = shares(&[("a", Some(2), None, 1.0)], &[]);
    assert!(pass(&mut s, &Policy::default()).resizes.is_empty());
}

#[test]
fn what_an_elastic_training_grew_onto_goes_back_to_a_waiting_training() {
    // e holds all 4 GPUs (sizes 2 and 4); w, of no higher class, waits
    // for 2. After e's protection window at this size it shrinks for w.
    let grown = |minutes: i64, w: Job| {
        let mut e = job("e", "a", 4, 0, false);
        e.resizable = true;
        let mut s = world(1, 4, vec![(e, minutes)], vec![w]);
        s.running[0].job.request.selection = elastic("e", "a", &[2, 4]).request.selection;
        s
    };
    let mut s = grown(20, job("w", "b", 2, 0, false));
    let d = pass(&mut s, &Policy::default());
    assert_eq!(notices(&d), [("e", "w", NoticeKind::Resize)]);
    // Within its protection window, or for a lower priority: no.
    let mut s = grown(5, job("w", "b", 2, 0, false));
    assert!(pass(&mut s, &Policy::default()).preemptions.is_empty());
    let mut s = grown(20, job("w", "b", 2, -100, false));
    assert!(pass(&mut s, &Policy::default()).preemptions.is_empty());
    // Within its team's guarantee, for another team: no.
    let mut s = grown(20, job("w", "b", 2, 0, false));
    s.shares = shares(
        &[("a", Some(4), None, 1.0), ("b", Some(0), Some(4), 1.0)],
        &[],
    );
    assert!(pass(&mut s, &Policy::default()).preemptions.is_empty());
}

#[test]
fn an_elastic_training_shrinks_to_make_room_before_anyone_is_stopped_whole() {
    // e holds all 4 GPUs (sizes 2 and 4), low priority, for 20 minutes.
    let running = |sizes: &[u32]| {
        let mut e = job("e", "a", 4, -100, false);
        e.resizable = true;
        let mut s = world(1, 4, vec![(e, 20)], vec![job("u", "a", 2, 1000, true)]);
        s.running[0].job.request.selection = GpuSelection::Range {
            min: sizes[0],
            max: 4,
            sizes: sizes.to_vec(),
        };
        s
    };
    let mut s = running(&[2, 4]);
    let d = pass(&mut s, &Policy::default());
    let kinds: Vec<(&str, NoticeKind)> = d
        .preemptions
        .iter()
        .map(|p| (p.victim.as_str(), p.kind))
        .collect();
    assert_eq!(kinds, [("e", NoticeKind::Resize)], "shrunk, not stopped");
    assert_eq!(d.preemptions[0].by, "u");
    // Its smallest size is 4: shrinking frees nothing, it is stopped whole.
    let mut s = running(&[4]);
    let d = pass(&mut s, &Policy::default());
    assert_eq!(d.preemptions[0].kind, NoticeKind::Preempt);
    // u needs 3: e at 2 would not fit beside it, so e is stopped whole.
    let mut s = running(&[2, 4]);
    s.waiting[0].job.request.selection = GpuSelection::Count { count: 3 };
    let d = pass(&mut s, &Policy::default());
    assert_eq!(d.preemptions[0].kind, NoticeKind::Preempt);
}

#[test]
fn a_reclaim_shrinks_an_elastic_borrower_before_stopping_it() {
    // Team b's elastic training (sizes 2 and 4, young, urgent) borrows 2 of
    // its 4 GPUs; team a wants its guaranteed 2 back.
    let borrower = |sizes: &[u32]| {
        let mut e = job("borrower", "b", 4, 1000, true);
        e.resizable = true;
        let mut s = world(1, 4, vec![(e, 1)], vec![job("mine", "a", 2, 0, false)]);
        s.running[0].job.request.selection = elastic("borrower", "b", sizes).request.selection;
        s.shares = shares(
            &[("a", Some(2), None, 1.0), ("b", Some(2), Some(2), 1.0)],
            &[],
        );
        s
    };
    let mut s = borrower(&[2, 4]);
    let d = pass(&mut s, &Policy::default());
    assert_eq!(
        notices(&d),
        [("borrower", "mine", NoticeKind::Resize)],
        "shrunk to its guarantee, not stopped"
    );
    // Its smallest size is 4: shrinking frees nothing, it is reclaimed whole.
    let mut s = borrower(&[4]);
    let d = pass(&mut s, &Policy::default());
    assert_eq!(victims(&d), ["borrower"]);
    assert_eq!(d.preemptions[0].kind, NoticeKind::Reclaim);
}

#[test]
fn an_elastic_training_never_grows_onto_gpus_held_for_the_oldest_waiting() {
    // 8 GPUs on two hosts: "ends-soon" holds 2 of host-0 for 10 more
    // minutes, e (sizes 2 and 4) the other 2 of host-0, "late" 2 of host-1;
    // host-1/gpu-2 and gpu-3 are free.
    let mut soon = job("ends-soon", "a", 2, 0, false);
    soon.remaining = Some(Duration::from_secs(600));
    let mut grower = elastic("e", "a", &[2, 4]);
    grower.resizable = true;
    let mut late = job("late", "a", 2, 0, false);
    late.remaining = Some(Duration::from_secs(36_000));
    let mut old = job("old-big", "b", 4, -100, false);
    old.create_time = t0() - Span::hours(3);
    let mut s = world(2, 4, vec![(soon, 60), (grower, 60), (late, 60)], vec![old]);
    // The two free GPUs are what the oldest waiting training gets first:
    // held for it, they are not free when e could grow.
    let d = pass(&mut s, &Policy::default());
    assert!(placed(&d).is_empty(), "{:?}", d.placements);
    assert!(d.resizes.is_empty(), "{:?}", d.resizes);
    // A young one holds nothing back: e grows onto them.
    let mut s2 = s.clone();
    s2.waiting[0].job.create_time = t0();
    let d = pass(&mut s2, &Policy::default());
    assert_eq!(
        d.resizes,
        [Resize {
            id: "e".into(),
            from: 2,
            to: 4
        }]
    );
}
