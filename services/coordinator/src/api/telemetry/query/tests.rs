//! The downsampling maths, the paging and the argument checks (no database).

use super::*;
use cohort_proto::error::{bad_fields, reason_of};
use tonic::Code;

fn ts(ms: i64) -> Option<prost_types::Timestamp> {
    proto_time(ms)
}

fn secs(s: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration {
        seconds: s,
        nanos: 0,
    })
}

fn request(start_ms: i64, end_ms: Option<i64>, step_s: Option<i64>) -> v1::QueryGpuMetricsRequest {
    v1::QueryGpuMetricsRequest {
        start_time: ts(start_ms),
        end_time: end_ms.and_then(ts),
        step: step_s.and_then(secs),
        ..Default::default()
    }
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(10_000_000).unwrap()
}

fn part(
    uuid: &str,
    bucket: i64,
    samples: i64,
    util: (f64, i64),
    mem: f64,
    temp: f64,
    power: (f64, i64),
) -> GpuBucket {
    GpuBucket {
        gpu_uuid: uuid.into(),
        bucket,
        gpu_index: 0,
        agent_id: "agt".into(),
        agent_name: "host".into(),
        training_id: None,
        rank: None,
        samples,
        util_sum: Some(util.0),
        util_n: util.1,
        util_mem_sum: None,
        util_mem_n: 0,
        mem_used_sum: mem,
        mem_total_max: 1000,
        temp_max: Some(temp),
        power_sum: Some(power.0),
        power_n: power.1,
        ecc_corrected_max: None,
        ecc_uncorrected_max: None,
        simulated: 0,
    }
}

fn assert_invalid(result: Result<Plan, Status>, field: &str, needle: &str) {
    let err = result.expect_err("must be rejected");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(bad_fields(&err), vec![field.to_string()], "{err:?}");
    assert!(
        err.message().contains(needle),
        "{:?} lacks {needle:?}",
        err.message()
    );
}

#[test]
fn bad_arguments_are_precise() {
    let ok = request(0, Some(60_000), Some(1));
    assert!(Plan::from_request(&ok, now()).is_ok());

    let mut no_start = ok.clone();
    no_start.start_time = None;
    assert_invalid(
        Plan::from_request(&no_start, now()),
        "start_time",
        "required",
    );

    assert_invalid(
        Plan::from_request(&request(60_000, Some(60_000), None), now()),
        "end_time",
        "must be after start",
    );
    assert_invalid(
        Plan::from_request(&request(60_000, Some(1_000), None), now()),
        "end_time",
        "must be after start",
    );
    // No end: "now" is before the start.
    assert_invalid(
        Plan::from_request(&request(20_000_000, None, None), now()),
        "start_time",
        "must be after start",
    );

    let mut sub_second = ok.clone();
    sub_second.step = Some(prost_types::Duration {
        seconds: 0,
        nanos: 500_000_000,
    });
    assert_invalid(
        Plan::from_request(&sub_second, now()),
        "step",
        "at least 1s",
    );
    let mut negative = ok.clone();
    negative.step = secs(-5);
    assert_invalid(Plan::from_request(&negative, now()), "step", "negative");
    let mut micro = ok.clone();
    micro.step = Some(prost_types::Duration {
        seconds: 2,
        nanos: 1_000,
    });
    assert_invalid(Plan::from_request(&micro, now()), "step", "milliseconds");

    // 30 days at 1 s: 2.6 M buckets.
    assert_invalid(
        Plan::from_request(&request(0, Some(30 * 86_400_000), Some(1)), now()),
        "step",
        "at most 1000000",
    );

    for size in [-1, 10_001] {
        let mut r = ok.clone();
        r.page_size = size;
        assert_invalid(Plan::from_request(&r, now()), "page_size", "0..=10000");
    }
    let mut view = ok.clone();
    view.view = 42;
    assert_invalid(
        Plan::from_request(&view, now()),
        "view",
        "not a metrics view",
    );
    let mut bad_time = ok.clone();
    bad_time.start_time = Some(prost_types::Timestamp {
        seconds: 0,
        nanos: -1,
    });
    assert_invalid(Plan::from_request(&bad_time, now()), "start_time", "nanos");
}

#[test]
fn default_step_is_a_hundredth_of_the_range_in_whole_seconds() {
    let plan = Plan::from_request(&request(0, Some(3_600_000), None), now()).unwrap();
    assert_eq!((plan.step_ms, plan.total), (36_000, 100));
    let plan = Plan::from_request(&request(0, Some(10_000), None), now()).unwrap();
    assert_eq!((plan.step_ms, plan.total), (1_000, 10));
    let plan = Plan::from_request(&request(0, Some(150_500), None), now()).unwrap();
    assert_eq!(plan.step_ms, 2_000);
    // Unset end: now.
    let plan = Plan::from_request(&request(9_000_000, None, Some(10)), now()).unwrap();
    assert_eq!((plan.until_ms, plan.total), (10_000_000, 100));
}

#[test]
fn pages_cover_the_range_and_tokens_are_bound_to_their_query() {
    let mut req = request(0, Some(25_000), Some(1));
    req.page_size = 10;
    let plan = Plan::from_request(&req, now()).unwrap();
    assert_eq!((plan.window().first, plan.window().end), (0, 10));
    let (_, next) = assemble(&plan, vec![]);
    assert_eq!(next, Some(10));

    req.page_token = encode_token(&plan, 10);
    let second = Plan::from_request(&req, now()).unwrap();
    assert_eq!((second.window().first, second.window().end), (10, 20));
    req.page_token = encode_token(&plan, 20);
    let last = Plan::from_request(&req, now()).unwrap();
    assert_eq!((last.window().first, last.window().end), (20, 25));
    assert_eq!(assemble(&last, vec![]).1, None);

    // The resolved "now" travels in the token.
    let mut open = request(9_000_000, None, Some(1));
    open.page_size = 5;
    let first = Plan::from_request(&open, now()).unwrap();
    open.page_token = encode_token(&first, 5);
    let later = DateTime::from_timestamp_millis(99_000_000).unwrap();
    assert_eq!(
        Plan::from_request(&open, later).unwrap().until_ms,
        10_000_000
    );

    // Same token, different step: refused.
    let mut other = req.clone();
    other.step = secs(2);
    let err = Plan::from_request(&other, now()).unwrap_err();
    assert_eq!(reason_of(&err), Some(Reason::InvalidPageToken));
    assert!(err.message().contains("different"));
    for garbage in ["zz", "abc", &hex(b"m1:0:1:2"), &hex(b"x")] {
        let mut r = req.clone();
        r.page_token = garbage.to_string();
        let err = Plan::from_request(&r, now()).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{garbage}");
        assert_eq!(reason_of(&err), Some(Reason::InvalidPageToken));
    }
    let mut outside = req.clone();
    outside.page_token = encode_token(&plan, 25);
    assert!(Plan::from_request(&outside, now()).is_err());
}

#[test]
fn raw_and_rollup_parts_merge_into_exact_weighted_means() {
    let plan = Plan::from_request(&request(0, Some(600_000), Some(300)), now()).unwrap();
    // Bucket 0 of GPU-a: 60 rollup samples at mean util 50 (sum 3000) and
    // 30 raw samples at mean util 80 (sum 2400): mean 5400 / 90 = 60.
    let rollup = part(
        "GPU-a",
        0,
        60,
        (3000.0, 60),
        60.0 * 100.0,
        70.0,
        (60.0 * 200.0, 60),
    );
    let raw = part(
        "GPU-a",
        0,
        30,
        (2400.0, 30),
        30.0 * 400.0,
        75.0,
        (30.0 * 100.0, 30),
    );
    let other = part("GPU-b", 1, 2, (20.0, 2), 2.0 * 10.0, 40.0, (0.0, 0));
    let (updates, next) = assemble(&plan, vec![rollup, other, raw]);
    assert_eq!(next, None);
    assert_eq!(updates.len(), 2);
    assert_eq!(updates[0].time, ts(0));
    assert_eq!(updates[1].time, ts(300_000));
    let a = updates[0].gpus[0].sample.as_ref().unwrap();
    assert_eq!(a.gpu_uuid, "GPU-a");
    assert_eq!(a.utilization_gpu_percent, Some(60.0));
    assert_eq!(a.memory_used_bytes, 200); // (6000 + 12000) / 90
    assert_eq!(a.temperature_celsius, Some(75.0)); // the maximum
    assert_eq!(a.power_draw_watts, Some((12000.0 + 3000.0) / 90.0));
    let b = updates[1].gpus[0].sample.as_ref().unwrap();
    assert_eq!(
        (b.utilization_gpu_percent, b.power_draw_watts),
        (Some(10.0), None)
    );
}

#[test]
fn the_aggregated_view_sums_memory_and_power_and_averages_utilization() {
    let mut req = request(0, Some(60_000), Some(60));
    req.view = v1::MetricsView::Aggregated as i32;
    let plan = Plan::from_request(&req, now()).unwrap();
    let mut busy = part("GPU-a", 0, 2, (100.0, 2), 2.0 * 300.0, 80.0, (400.0, 2));
    busy.training_id = Some("trn-1".into());
    busy.simulated = 1;
    let idle = part("GPU-b", 0, 4, (400.0, 4), 4.0 * 100.0, 60.0, (200.0, 4));
    let (updates, _) = assemble(&plan, vec![busy, idle]);
    assert_eq!(updates.len(), 1);
    assert!(updates[0].gpus.is_empty());
    let agg = updates[0].aggregate.as_ref().unwrap();
    assert_eq!(
        (agg.gpu_count, agg.busy_count, agg.simulated_count),
        (2, 1, 1)
    );
    assert_eq!(agg.mean_utilization_gpu_percent, 75.0); // (50 + 100) / 2
    assert_eq!(agg.memory_used_bytes, 400); // 300 + 100
    assert_eq!(agg.memory_total_bytes, 2000);
    assert_eq!(agg.max_temperature_celsius, 80.0);
    assert_eq!(agg.power_draw_watts, 250.0); // 200 + 50
}

#[test]
fn a_page_stops_at_a_bucket_boundary_when_it_holds_too_many_entries() {
    let plan = Plan::from_request(&request(0, Some(10_000), Some(1)), now()).unwrap();
    let per_bucket = MAX_ENTRIES_PER_PAGE / 2 + 1;
    let mut parts = Vec::new();
    for bucket in 0..3 {
        for g in 0..per_bucket {
            parts.push(part(
                &format!("GPU-{g}"),
                bucket,
                1,
                (1.0, 1),
                1.0,
                1.0,
                (1.0, 1),
            ));
        }
    }
    let (updates, next) = assemble(&plan, parts);
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].gpus.len(), per_bucket);
    assert_eq!(next, Some(1));
}
