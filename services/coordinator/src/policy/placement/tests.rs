use super::*;

fn gpus(spec: &[(&str, i32)]) -> Vec<FreeGpu> {
    spec.iter()
        .map(|(agent, index)| FreeGpu {
            agent_id: agent.to_string(),
            uuid: format!("{agent}-{index}"),
            index: *index,
            memory_total_bytes: 1 << 34,
        })
        .collect()
}

#[test]
fn count_packs_onto_the_fewest_agents() {
    let free = gpus(&[("a", 0), ("b", 0), ("b", 1), ("c", 0), ("c", 1), ("c", 2)]);
    let s = by_count(&free, 2, true, None).unwrap();
    assert!(s.iter().all(|r| r.agent_id == "b"), "{s:?}");
    let s = by_count(&free, 4, true, None).unwrap();
    let agents: std::collections::BTreeSet<_> = s.iter().map(|r| r.agent_id.clone()).collect();
    assert_eq!(agents.len(), 2, "{s:?}");
    assert_eq!(s.iter().filter(|r| r.agent_id == "c").count(), 3);
    assert_eq!(
        s.iter().map(|r| r.rank).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    let c: Vec<_> = s
        .iter()
        .filter(|r| r.agent_id == "c")
        .map(|r| (r.local_rank, r.local_world_size))
        .collect();
    assert_eq!(c, vec![(0, 3), (1, 3), (2, 3)]);
}

#[test]
fn the_leader_agent_gets_rank_0() {
    let free = gpus(&[
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
        ("c", 0),
        ("c", 1),
        ("c", 2),
    ]);
    let s = by_count(&free, 2, true, Some("b")).unwrap();
    assert!(s.iter().all(|r| r.agent_id == "b"), "{s:?}");
    let s = by_count(&free, 4, true, Some("a")).unwrap();
    assert_eq!(s[0].agent_id, "a", "{s:?}");
    assert_eq!(s.iter().filter(|r| r.agent_id == "a").count(), 2);
}

#[test]
fn count_beyond_free_is_insufficient() {
    let free = gpus(&[("a", 0)]);
    assert_eq!(
        by_count(&free, 2, true, None),
        Err(Unplaceable::InsufficientGpus { wanted: 2, free: 1 })
    );
    assert_eq!(by_count(&[], 1, false, None), Err(Unplaceable::NoAgents));
}

#[test]
fn ids_must_be_known_and_free() {
    let free = gpus(&[("a", 0), ("b", 0)]);
    let known = |id: &str| ["a-0", "a-1", "b-0"].contains(&id);
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        by_ids(&free, known, &ids(&["zz"])),
        Err(Unplaceable::Unknown(ids(&["zz"])))
    );
    assert_eq!(
        by_ids(&free, known, &ids(&["a-1"])),
        Err(Unplaceable::Busy(ids(&["a-1"])))
    );
    let s = by_ids(&free, known, &ids(&["b-0", "a-0"])).unwrap();
    assert_eq!(
        (s[0].gpu_uuid.as_str(), s[1].gpu_uuid.as_str()),
        ("b-0", "a-0")
    );
}

fn candidate(agent: &str, index: i32, faults: &[&str]) -> Candidate {
    Candidate {
        uuid: format!("{agent}-{index}"),
        index,
        agent_id: agent.into(),
        agent_name: agent.into(),
        host_name: agent.into(),
        memory_total_bytes: 1 << 34,
        memory_free_bytes: 1 << 34,
        online: true,
        hold: None,
        foreign: Vec::new(),
        faults: faults.iter().map(|f| f.to_string()).collect(),
        cordoned: None,
    }
}

fn count(n: u32) -> GpuRequest {
    GpuRequest {
        selection: GpuSelection::Count { count: n },
        queue: true,
    }
}

#[test]
fn a_view_follows_the_placements_of_its_pass() {
    let mut view = FleetView::new(
        2,
        vec![
            candidate("a", 0, &[]),
            candidate("a", 1, &[]),
            candidate("b", 0, &[]),
        ],
    );
    let need = 1 << 30;
    let first = plan_first(&view, &count(2), need).unwrap();
    assert!(first.iter().all(|s| s.agent_id == "a"), "{first:?}");
    view.take(&first, |s| Hold {
        training_id: "t1".into(),
        attempt: 1,
        rank: s.rank,
        team: String::new(),
    });
    // The next plan of the same pass sees a's GPUs held.
    let second = plan_first(&view, &count(1), need).unwrap();
    assert_eq!(second[0].gpu_uuid, "b-0");
    let why = plan_first(&view, &count(2), need).unwrap_err();
    assert!(matches!(why, Unplaceable::NotSuitable(_)), "{why}");
    assert_eq!(view.free().len(), 1);
}

#[test]
fn planning_decides_from_a_view_of_the_fleet() {
    let view = FleetView::new(
        1,
        vec![
            candidate("a", 0, &[]),
            candidate("a", 1, &["ecc_uncorrected"]),
        ],
    );
    let need = 1 << 30;
    // Two GPUs exist, one is unhealthy: wait for it, with that reason.
    let why = plan_first(&view, &count(2), need).unwrap_err();
    assert!(matches!(why, Unplaceable::WaitingForHealthy(_)), "{why}");
    // One healthy GPU is enough for one rank.
    let slots = plan_first(&view, &count(1), need).unwrap();
    assert_eq!(slots[0].gpu_uuid, "a-0");
    // Three can never fit on two.
    let why = plan_first(&view, &count(3), need).unwrap_err();
    assert!(matches!(why, Unplaceable::NotSuitable(_)), "{why}");
    let none = FleetView::default();
    assert_eq!(
        plan_first(&none, &count(1), need),
        Err(Unplaceable::NoAgents)
    );
    // A restart never goes to an unhealthy (or quarantined) GPU: with a-0
    // to avoid, it still takes a-0 rather than the faulty a-1, and two
    // ranks cannot be placed.
    let avoid: HashSet<String> = ["a-0".to_string()].into();
    let slots = plan_restart(&view, &count(1), &avoid, None).unwrap();
    assert_eq!(slots[0].gpu_uuid, "a-0");
    assert!(plan_restart(&view, &count(2), &avoid, None).is_err());
    // Among healthy GPUs it avoids the one that failed when another is
    // free, and falls back to it when none is.
    let healthy = FleetView::new(1, vec![candidate("a", 0, &[]), candidate("a", 1, &[])]);
    let slots = plan_restart(&healthy, &count(1), &avoid, None).unwrap();
    assert_eq!(slots[0].gpu_uuid, "a-1");
    let slots = plan_restart(&healthy, &count(2), &avoid, None).unwrap();
    assert_eq!(slots.len(), 2);
    // A cordoned agent's GPUs take no rank, first placement or restart.
    let mut cordoned = candidate("a", 1, &[]);
    cordoned.cordoned = Some("bios update".into());
    let view = FleetView::new(1, vec![candidate("a", 0, &[]), cordoned]);
    let why = plan_first(&view, &count(2), need).unwrap_err();
    assert!(
        matches!(why, Unplaceable::WaitingForHealthy(ref w) if w.contains("cordoned")),
        "{why}"
    );
    assert!(plan_restart(&view, &count(2), &HashSet::new(), None).is_err());
    assert_eq!(view.free().len(), 1);
}

#[test]
fn a_program_goes_only_where_a_root_open_to_its_team_holds_it() {
    let mut view = FleetView::new(
        2,
        vec![
            candidate("a", 0, &[]),
            candidate("b", 0, &[]),
            candidate("b", 1, &[]),
        ],
    );
    view.program_roots.insert(
        "a".into(),
        AgentProgramRoots {
            shared: vec!["/opt/shared".into()],
            teams: Vec::new(),
        },
    );
    view.program_roots.insert(
        "b".into(),
        AgentProgramRoots {
            shared: Vec::new(),
            teams: vec![("vision".into(), "/opt/vision".into())],
        },
    );
    let shared = view.for_program("nlp", "/opt/shared/src").unwrap();
    assert_eq!(shared.agents, 1);
    assert!(shared.candidates.iter().all(|c| c.agent_id == "a"));
    let vision = view.for_program("vision", "/opt/vision/src").unwrap();
    assert_eq!(vision.candidates.len(), 2);
    assert!(vision.candidates.iter().all(|c| c.agent_id == "b"));
    // Another team's root, a sibling whose name merely starts the same, nowhere.
    for (team, dir) in [
        ("nlp", "/opt/vision/src"),
        ("vision", "/opt/visionary"),
        ("x", "/srv"),
    ] {
        assert_eq!(
            view.for_program(team, dir).map(|v| v.agents),
            Err(Unplaceable::OutsideProgramRoots(dir.to_string())),
            "{team} {dir}"
        );
    }
}

fn range(sizes: &[u32]) -> GpuRequest {
    GpuRequest {
        selection: GpuSelection::Range {
            min: sizes[0],
            max: *sizes.last().expect("sizes"),
            sizes: sizes.to_vec(),
        },
        queue: true,
    }
}

#[test]
fn a_range_takes_its_largest_size_that_fits_now() {
    let fleet = |free: usize| {
        let mut view = FleetView::uniform(2, 2, 1 << 34);
        let held: Vec<String> = view.candidates[free..]
            .iter()
            .map(|c| c.uuid.clone())
            .collect();
        let hold = Hold {
            training_id: "other".into(),
            attempt: 1,
            rank: 0,
            team: String::new(),
        };
        view.hold(&held, &hold);
        view
    };
    let need = 1 << 30;
    // Sizes 1, 2 and 4 (3 does not split its global batch).
    let sizes = range(&[1, 2, 4]);
    for (free, size) in [(4, 4), (3, 2), (2, 2), (1, 1)] {
        let first = plan_first(&fleet(free), &sizes, need).unwrap();
        assert_eq!(first.len(), size, "{free} free: first placement");
        let restart = plan_restart(&fleet(free), &sizes, &HashSet::new(), None).unwrap();
        assert_eq!(restart.len(), size, "{free} free: a restart");
    }
    // Below its smallest size it waits, as a count does.
    let why = plan_first(&fleet(1), &range(&[2, 4]), need).unwrap_err();
    assert!(matches!(why, Unplaceable::NotSuitable(_)), "{why}");
    assert!(plan_restart(&fleet(1), &range(&[2, 4]), &HashSet::new(), None).is_err());
}
