//! The simulated probe: plausible values, load response, overrides, stable uuids.

// Tests may block: they are not the async runtime's production paths.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use cohort_agent::probe::{self, GpuProbe, SimField, SimSpec, SimulatedProbe};

fn spec(s: &str) -> SimSpec {
    s.parse().unwrap()
}

#[test]
fn inventory_is_flagged_and_uuids_are_stable() {
    let a = SimulatedProbe::new("host-a", &spec("2:24GiB"));
    let inv = a.inventory().unwrap();
    assert_eq!(inv.len(), 2);
    assert_eq!(inv[0].uuid, "GPU-SIM-host-a-0");
    assert_eq!(inv[1].uuid, "GPU-SIM-host-a-1");
    assert!(inv.iter().all(|g| g.simulated));
    assert!(inv.iter().all(|g| g.memory_total_bytes == 24 << 30));
    assert!(inv[0].compute_capability.is_some());

    let again = SimulatedProbe::new("host-a", &spec("2:24GiB"));
    assert_eq!(again.inventory().unwrap(), inv);
    let other = SimulatedProbe::new("host-b", &spec("2:24GiB"));
    assert_ne!(other.inventory().unwrap()[0].uuid, inv[0].uuid);
    assert!(a.is_simulated());
}

#[test]
fn samples_are_in_range_idle_and_loaded() {
    let mut p = SimulatedProbe::new("h", &spec("2:16GiB"));
    p.assign(1, &[4242]);
    for _ in 0..50 {
        p.advance(Duration::from_secs(2));
        for s in p.sample().unwrap() {
            assert!(s.simulated);
            assert!(s.utilization_gpu_pct.unwrap() <= 100);
            assert!(s.utilization_memory_pct.unwrap() <= 100);
            let t = s.temperature_c.unwrap();
            assert!((20..=95).contains(&t), "temperature {t}");
            let power = s.power_draw_w.unwrap();
            assert!(
                power > 0.0 && power <= s.power_limit_w.unwrap() * 1.05,
                "power {power}"
            );
            assert!(s.memory_used_bytes <= s.memory_total_bytes);
            assert!(s.sm_clock_mhz.unwrap() > 0);
        }
    }
    let samples = p.sample().unwrap();
    let (idle, busy) = (&samples[0], &samples[1]);
    assert!(idle.utilization_gpu_pct.unwrap() < 5, "{idle:?}");
    assert!(busy.utilization_gpu_pct.unwrap() > 85, "{busy:?}");
    assert!(busy.temperature_c > idle.temperature_c);
    assert!(busy.power_draw_w > idle.power_draw_w);
    assert!(busy.memory_used_bytes > idle.memory_used_bytes + (4 << 30));
    assert_eq!(busy.processes.len(), 1);
    assert_eq!(busy.processes[0].pid, 4242);
    assert!(idle.processes.is_empty());
    assert_eq!(p.processes(1).unwrap()[0].pid, 4242);
    assert!(p.processes(7).is_err());
}

#[test]
fn values_change_smoothly() {
    let mut p = SimulatedProbe::new("h", &spec("1"));
    p.assign(0, &[1]);
    let mut last = p.sample().unwrap()[0].temperature_c.unwrap();
    for _ in 0..30 {
        p.advance(Duration::from_secs(1));
        let t = p.sample().unwrap()[0].temperature_c.unwrap();
        assert!(t.abs_diff(last) <= 3, "temperature jumped {last} -> {t}");
        last = t;
    }
    // Load removed: utilization falls back.
    p.assign(0, &[]);
    p.advance(Duration::from_secs(30));
    assert!(p.sample().unwrap()[0].utilization_gpu_pct.unwrap() < 5);
}

#[test]
fn overrides_pin_values_until_cleared() {
    let mut p = SimulatedProbe::new("h", &spec("2:16GiB"));
    let controls = p.controls();
    controls.set_override(0, SimField::TemperatureC, 91.0);
    controls.set_override(0, SimField::MemoryUsedBytes, (15u64 << 30) as f64);
    p.set_override(1, SimField::EccUncorrected, 3.0);
    p.set_override(1, SimField::XidErrors, 2.0);
    p.set_override(1, SimField::LastXid, 79.0);
    let s = p.sample().unwrap();
    assert_eq!((s[1].xid_errors, s[1].last_xid), (Some(2), Some(79)));
    assert_eq!((s[0].xid_errors, s[0].last_xid), (Some(0), None));
    assert_eq!(s[0].temperature_c, Some(91));
    assert_eq!(s[0].memory_used_bytes, 15 << 30);
    assert_eq!(s[1].ecc_uncorrected, Some(3));
    assert_ne!(s[1].temperature_c, Some(91));

    controls.clear_override(0, SimField::TemperatureC);
    assert!(p.sample().unwrap()[0].temperature_c.unwrap() < 60);
    controls.clear_all();
    assert_eq!(p.sample().unwrap()[1].ecc_uncorrected, Some(0));
}

#[test]
fn open_without_simulation_reports_missing_nvml_clearly() {
    match probe::open(None, "h", None) {
        // A machine with a driver: the real probe answers.
        Ok(p) => assert!(!p.is_simulated()),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                matches!(e, probe::ProbeError::NvmlUnavailable { .. }),
                "{msg}"
            );
            assert!(msg.contains("--simulate-gpus"), "{msg}");
        }
    }
    let p = probe::open(Some(&spec("3")), "h", None).unwrap();
    assert_eq!(p.inventory().unwrap().len(), 3);
}

#[test]
fn override_file_is_reread_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.txt");
    let mut p = probe::open(Some(&spec("2:16GiB")), "h", Some(&path)).unwrap();
    // No file yet: the simulation runs free.
    assert!(p.sample().unwrap()[0].temperature_c.unwrap() < 60);

    std::fs::write(
        &path,
        "0 temperature_c 93\n1 memory_used_bytes 18000000000\n",
    )
    .unwrap();
    let s = p.sample().unwrap();
    assert_eq!(s[0].temperature_c, Some(93));
    assert_eq!(s[1].memory_used_bytes, 16 << 30, "clamped to the total");

    // A malformed file keeps the previous overrides.
    std::fs::write(&path, "0 temperature_c\n").unwrap();
    assert_eq!(p.sample().unwrap()[0].temperature_c, Some(93));

    // A line removed releases its field (the length differs, so the change is seen
    // even within the file system's timestamp granularity).
    std::fs::write(&path, "# cooled down\n1 ecc_uncorrected 2\n").unwrap();
    let s = p.sample().unwrap();
    assert!(s[0].temperature_c.unwrap() < 60);
    assert_eq!(s[1].ecc_uncorrected, Some(2));
    assert!(s[1].memory_used_bytes < 16 << 30);
}

#[test]
fn ranks_and_a_scripted_foreign_process_are_told_apart() {
    let mut p = SimulatedProbe::new("host", &spec("2:16GiB"));
    p.assign(0, &[4242]);
    p.controls().set_override(0, SimField::ForeignPid, 777.0);
    p.controls().set_override(1, SimField::ForeignPid, 778.0);
    let samples = p.sample().unwrap();
    let of = |i: usize| {
        samples[i]
            .processes
            .iter()
            .map(|q| (q.pid, q.cohort_rank))
            .collect::<Vec<_>>()
    };
    assert_eq!(of(0), vec![(4242, true), (777, false)]);
    assert_eq!(of(1), vec![(778, false)]);
    assert_eq!(p.processes(1).unwrap()[0].pid, 778);
    assert!(!p.processes(1).unwrap()[0].cohort_rank);
    p.controls().clear_override(1, SimField::ForeignPid);
    assert!(p.sample().unwrap()[1].processes.is_empty());
    // Not a pid: ignored.
    p.controls().set_override(1, SimField::ForeignPid, 0.0);
    assert!(p.sample().unwrap()[1].processes.is_empty());
}
