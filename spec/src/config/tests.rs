use super::*;

const MINIMAL: &str = r#"
[model]
d_in = 64
[optim]
batch_size = 32
steps = 10
[data.synthetic]
num_samples = 1000
"#;

#[test]
fn minimal_config_gets_defaults() {
    let c = TrainingConfig::from_toml(MINIMAL).unwrap();
    assert_eq!(c.d_sae(), 512);
    assert_eq!(c.checkpoint.every_steps, 100);
    assert_eq!(c.runtime.allreduce, AllreduceMode::Flat);
    assert_eq!(c.parameter_count(), 64 * 512 * 2 + 512 + 64);
}

#[test]
fn unknown_keys_are_errors() {
    let err = TrainingConfig::from_toml(&format!("{MINIMAL}\n[extra]\nx = 1\n")).unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = TrainingConfig::from_toml(&MINIMAL.replace("d_in = 64", "d_in = 64\nd_inn = 3"))
        .unwrap_err();
    assert!(err.to_string().contains("d_inn"), "{err}");
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        ("batch_size = 32", "batch_size = -4", "optim.batch_size"),
        ("steps = 10", "steps = 10\nepochs = 2", "optim.steps"),
        (
            "num_samples = 1000",
            "num_samples = 0",
            "data.synthetic.num_samples",
        ),
        (
            "d_in = 64",
            "d_in = 64\nd_sae = 8\nexpansion_factor = 2",
            "model.d_sae",
        ),
    ];
    for (from, to, field) in cases {
        let err = TrainingConfig::from_toml(&MINIMAL.replace(from, to)).unwrap_err();
        assert_eq!(err.field(), Some(field), "{to}: {err}");
    }
}

#[test]
fn json_round_trip() {
    let c = TrainingConfig::from_toml(MINIMAL).unwrap();
    assert_eq!(TrainingConfig::from_json(&c.to_json()).unwrap(), c);
}

#[test]
fn numerics_and_sae_keys_have_defaults() {
    let c = TrainingConfig::from_toml(MINIMAL).unwrap();
    assert_eq!(c.model.architecture, Architecture::Relu);
    assert_eq!(c.model.decoder_norm, DecoderNorm::Unit);
    assert_eq!(c.model.b_dec_init, BDecInit::Zeros);
    assert_eq!(c.model.dead_window_samples, 1_000_000);
    assert_eq!(c.optim.lr_schedule, LrSchedule::Constant);
    assert_eq!(c.optim.accumulation_steps, 1);
    assert_eq!(c.optim.max_nonfinite_steps, 10);
    assert_eq!(c.optim.max_grad_norm, 0.0);
    assert_eq!(c.topk(), None);
    assert!(c.validation.is_none());
    assert!(!c.validates_at(10, 10));
}

#[test]
fn topk_needs_k_and_relu_refuses_it() {
    let topk = MINIMAL.replace("d_in = 64", "d_in = 64\narchitecture = \"topk\"\nk = 8");
    let c = TrainingConfig::from_toml(&topk).unwrap();
    assert_eq!(c.topk(), Some(8));
    assert_eq!(c.aux_k(), 32, "default d_in / 2");
    let cases = [
        ("architecture = \"topk\"", "model.k"),
        ("architecture = \"topk\"\nk = 513", "model.k"),
        ("architecture = \"topk\"\nk = 4\naux_k = 0", "model.aux_k"),
        ("k = 4", "model.k"),
        ("aux_coefficient = 0.1", "model.aux_coefficient"),
        ("dtype = \"f8\"", "config"),
    ];
    for (extra, field) in cases {
        let text = MINIMAL.replace("d_in = 64", &format!("d_in = 64\n{extra}"));
        match TrainingConfig::from_toml(&text) {
            Err(e) if field == "config" => assert!(e.field().is_none(), "{extra}: {e}"),
            Err(e) => assert_eq!(e.field(), Some(field), "{extra}: {e}"),
            Ok(_) => panic!("{extra} was accepted"),
        }
    }
}

#[test]
fn schedule_and_numerics_values_are_checked() {
    let cases = [
        ("lr_min_ratio = 1.5", "optim.lr_min_ratio"),
        ("lr_warmup_steps = -1", "optim.lr_warmup_steps"),
        ("accumulation_steps = 0", "optim.accumulation_steps"),
        ("max_grad_norm = -1.0", "optim.max_grad_norm"),
        ("max_nonfinite_steps = -2", "optim.max_nonfinite_steps"),
    ];
    for (extra, field) in cases {
        let text = MINIMAL.replace("steps = 10", &format!("steps = 10\n{extra}"));
        let err = TrainingConfig::from_toml(&text).unwrap_err();
        assert_eq!(err.field(), Some(field), "{extra}: {err}");
    }
    let ok = MINIMAL.replace(
        "steps = 10",
        "steps = 10\nlr_schedule = \"cosine\"\nlr_warmup_steps = 2\nlr_min_ratio = 0.1\nmax_grad_norm = 1.0\naccumulation_steps = 4",
    );
    let c = TrainingConfig::from_toml(&ok).unwrap();
    assert_eq!(c.optim.lr_schedule, LrSchedule::Cosine);
    assert_eq!(c.optim.accumulation_steps, 4);
}

#[test]
fn validation_table_and_when_it_runs() {
    let with = format!(
        "{MINIMAL}\n[validation]\npaths = [\"/data/val/\"]\n[checkpoint]\nevery_steps = 4\n"
    );
    let c = TrainingConfig::from_toml(&with).unwrap();
    let at: Vec<i64> = (1..=10).filter(|s| c.validates_at(*s, 10)).collect();
    assert_eq!(at, vec![4, 8, 10], "at every checkpoint and the final step");
    let every = with.replace(
        "paths = [\"/data/val/\"]",
        "paths = [\"/data/val/\"]\nevery_steps = 3",
    );
    let c = TrainingConfig::from_toml(&every).unwrap();
    let at: Vec<i64> = (1..=10).filter(|s| c.validates_at(*s, 10)).collect();
    assert_eq!(at, vec![3, 6, 9, 10]);
    for (from, to, field) in [
        ("paths = [\"/data/val/\"]", "paths = []", "validation.paths"),
        (
            "paths = [\"/data/val/\"]",
            "paths = [\"ftp://x\"]",
            "validation.paths",
        ),
        (
            "paths = [\"/data/val/\"]",
            "paths = [\"/v\"]\nevery_steps = 0",
            "validation.every_steps",
        ),
    ] {
        let err = TrainingConfig::from_toml(&with.replace(from, to)).unwrap_err();
        assert_eq!(err.field(), Some(field), "{to}: {err}");
    }
}
