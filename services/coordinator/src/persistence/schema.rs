//! The one diesel schema of both backends; keep it in step with
//! `migrations/sqlite/` and `migrations/postgres/`.

diesel::table! {
    agents (id) {
        id -> Text,
        name -> Text,
        host_name -> Text,
        address -> Text,
        version -> Text,
        connected -> Bool,
        connect_time -> Timestamp,
        last_seen_time -> Timestamp,
        doctor_json -> Nullable<Text>,
        cordon_reason -> Nullable<Text>,
        drain_deadline -> Nullable<Timestamp>,
    }
}

diesel::table! {
    gpus (uuid) {
        uuid -> Text,
        agent_id -> Text,
        gpu_index -> Integer,
        name -> Text,
        memory_total_bytes -> BigInt,
        compute_capability -> Text,
        simulated -> Bool,
        last_seen_time -> Timestamp,
        quarantine_reason -> Nullable<Text>,
    }
}

diesel::table! {
    trainings (id) {
        id -> Text,
        request_id -> Nullable<Text>,
        display_name -> Text,
        config_json -> Text,
        gpu_request_json -> Text,
        state -> Text,
        state_reason -> Text,
        world_size -> Integer,
        distributed -> Bool,
        priority -> Integer,
        attempt -> Integer,
        restart_count -> Integer,
        max_restarts -> Integer,
        master_addr -> Nullable<Text>,
        master_port -> Nullable<Integer>,
        last_event_seq -> BigInt,
        create_time -> Timestamp,
        update_time -> Timestamp,
        start_time -> Nullable<Timestamp>,
        end_time -> Nullable<Timestamp>,
        trace_context -> Nullable<Text>,
        team -> Text,
        creator -> Text,
        labels_json -> Text,
        priority_class -> Text,
        borrow -> Bool,
        borrowing -> Bool,
        preemption_count -> Integer,
        attempt_time -> Nullable<Timestamp>,
        notice_saves -> Bool,
        held_by -> Text,
        resize_count -> Integer,
    }
}

diesel::table! {
    training_notices (training_id) {
        training_id -> Text,
        attempt -> Integer,
        kind -> Text,
        noticed_by -> Text,
        reason -> Text,
        notice_time -> Timestamp,
        deadline -> Timestamp,
    }
}

diesel::table! {
    training_estimates (training_id) {
        training_id -> Text,
        start_time -> Nullable<Timestamp>,
        end_time -> Nullable<Timestamp>,
        reason -> Text,
        update_time -> Timestamp,
    }
}

diesel::table! {
    team_usage (team) {
        team -> Text,
        gpu_seconds -> Double,
        update_time -> Timestamp,
    }
}

diesel::table! {
    training_labels (training_id, key) {
        training_id -> Text,
        key -> Text,
        value -> Text,
    }
}

diesel::table! {
    tokens (id) {
        id -> Text,
        team -> Text,
        name -> Text,
        role -> Text,
        secret_sha256 -> Text,
        creator -> Text,
        create_time -> Timestamp,
        expire_time -> Nullable<Timestamp>,
        revoke_time -> Nullable<Timestamp>,
    }
}

diesel::table! {
    team_quotas (team) {
        team -> Text,
        gpus -> Nullable<Integer>,
        max_queued -> Nullable<Integer>,
        update_time -> Timestamp,
        borrow_limit -> Nullable<Integer>,
        weight -> Nullable<Double>,
        max_priority_class -> Nullable<Text>,
    }
}

diesel::table! {
    audit_events (id) {
        id -> BigInt,
        time -> Timestamp,
        actor_kind -> Text,
        actor -> Text,
        actor_team -> Text,
        method -> Text,
        target -> Text,
        target_team -> Text,
        code -> Text,
        detail -> Text,
    }
}

diesel::table! {
    ranks (id) {
        id -> BigInt,
        training_id -> Text,
        attempt -> Integer,
        rank -> Integer,
        agent_id -> Text,
        gpu_uuid -> Text,
        gpu_index -> Integer,
        local_rank -> Integer,
        local_world_size -> Integer,
        pid -> Nullable<BigInt>,
        state -> Text,
        exit_code -> Nullable<Integer>,
        signal -> Nullable<Integer>,
        update_time -> Timestamp,
        log_tail -> Nullable<Text>,
    }
}

diesel::table! {
    training_events (training_id, seq) {
        training_id -> Text,
        seq -> BigInt,
        attempt -> Integer,
        kind -> Text,
        payload_json -> Text,
        event_time -> Timestamp,
    }
}

diesel::table! {
    state_transitions (id) {
        id -> BigInt,
        training_id -> Text,
        attempt -> Integer,
        from_state -> Nullable<Text>,
        to_state -> Text,
        reason -> Text,
        at -> Timestamp,
    }
}

diesel::table! {
    best_checkpoints (training_id) {
        training_id -> Text,
        attempt -> Integer,
        step -> BigInt,
        path -> Text,
        agent_id -> Text,
        create_time -> Timestamp,
    }
}

diesel::table! {
    checkpoints (id) {
        id -> BigInt,
        training_id -> Text,
        attempt -> Integer,
        step -> BigInt,
        path -> Text,
        agent_id -> Text,
        create_time -> Timestamp,
    }
}

diesel::table! {
    gpu_metrics (id) {
        id -> BigInt,
        gpu_uuid -> Text,
        agent_id -> Text,
        training_id -> Nullable<Text>,
        sample_time -> Timestamp,
        utilization_gpu_percent -> Nullable<Double>,
        utilization_memory_percent -> Nullable<Double>,
        memory_used_bytes -> BigInt,
        memory_total_bytes -> BigInt,
        temperature_celsius -> Nullable<Double>,
        power_draw_watts -> Nullable<Double>,
        power_limit_watts -> Nullable<Double>,
        sm_clock_mhz -> Nullable<Integer>,
        memory_clock_mhz -> Nullable<Integer>,
        ecc_errors_corrected -> Nullable<BigInt>,
        ecc_errors_uncorrected -> Nullable<BigInt>,
        throttle_reasons -> Text,
        simulated -> Bool,
        gpu_index -> Integer,
        agent_name -> Text,
        rank -> Nullable<Integer>,
        sample_ms -> BigInt,
    }
}

diesel::table! {
    gpu_metrics_rollup (gpu_uuid, bucket_ms, training_id) {
        gpu_uuid -> Text,
        bucket_ms -> BigInt,
        training_id -> Text,
        gpu_index -> Integer,
        agent_id -> Text,
        agent_name -> Text,
        rank -> Nullable<Integer>,
        sample_count -> BigInt,
        utilization_gpu_min -> Nullable<Double>,
        utilization_gpu_mean -> Nullable<Double>,
        utilization_gpu_max -> Nullable<Double>,
        utilization_gpu_count -> BigInt,
        memory_used_min -> BigInt,
        memory_used_mean -> Double,
        memory_used_max -> BigInt,
        memory_total_bytes -> BigInt,
        temperature_min -> Nullable<Double>,
        temperature_mean -> Nullable<Double>,
        temperature_max -> Nullable<Double>,
        temperature_count -> BigInt,
        power_min -> Nullable<Double>,
        power_mean -> Nullable<Double>,
        power_max -> Nullable<Double>,
        power_count -> BigInt,
    }
}

diesel::table! {
    alerts (id) {
        id -> Text,
        severity -> Text,
        kind -> Text,
        message -> Text,
        agent_id -> Nullable<Text>,
        gpu_uuid -> Nullable<Text>,
        training_id -> Nullable<Text>,
        value -> Nullable<Double>,
        threshold -> Nullable<Double>,
        raise_time -> Timestamp,
        resolve_time -> Nullable<Timestamp>,
    }
}

diesel::table! {
    webhooks (id) {
        id -> Text,
        team -> Text,
        url -> Text,
        events -> Text,
        format -> Text,
        secret -> Text,
        creator -> Text,
        create_time -> Timestamp,
    }
}

diesel::table! {
    sweeps (id) {
        id -> Text,
        request_key -> Nullable<Text>,
        team -> Text,
        creator -> Text,
        display_name -> Text,
        config_json -> Text,
        space_json -> Text,
        searcher -> Text,
        eta -> Double,
        seed -> BigInt,
        metric -> Text,
        direction -> Text,
        max_trials -> Integer,
        max_concurrent -> Integer,
        max_gpu_hours -> Double,
        gpu_request_json -> Text,
        priority -> Integer,
        priority_class -> Text,
        max_restarts -> Integer,
        state -> Text,
        state_reason -> Text,
        create_time -> Timestamp,
        end_time -> Nullable<Timestamp>,
    }
}

diesel::table! {
    sweep_trials (sweep_id, trial_index) {
        sweep_id -> Text,
        trial_index -> Integer,
        draw -> Integer,
        training_id -> Text,
        params_json -> Text,
    }
}

diesel::table! {
    sweep_rungs (sweep_id, trial_index, rung) {
        sweep_id -> Text,
        trial_index -> Integer,
        rung -> Integer,
        step -> BigInt,
        value -> Double,
        l0 -> Nullable<Double>,
    }
}

diesel::joinable!(gpus -> agents (agent_id));
diesel::joinable!(sweep_rungs -> sweeps (sweep_id));
diesel::joinable!(sweep_trials -> sweeps (sweep_id));
diesel::joinable!(sweep_trials -> trainings (training_id));
diesel::joinable!(ranks -> trainings (training_id));
diesel::joinable!(training_labels -> trainings (training_id));
diesel::joinable!(training_events -> trainings (training_id));
diesel::joinable!(state_transitions -> trainings (training_id));
diesel::joinable!(checkpoints -> trainings (training_id));
diesel::joinable!(best_checkpoints -> trainings (training_id));
diesel::joinable!(training_notices -> trainings (training_id));
diesel::joinable!(training_estimates -> trainings (training_id));

diesel::allow_tables_to_appear_in_same_query!(
    agents,
    gpus,
    trainings,
    training_notices,
    training_estimates,
    team_usage,
    training_labels,
    ranks,
    training_events,
    state_transitions,
    checkpoints,
    best_checkpoints,
    tokens,
    team_quotas,
    audit_events,
    gpu_metrics,
    gpu_metrics_rollup,
    alerts,
    webhooks,
    sweeps,
    sweep_trials,
    sweep_rungs,
);
