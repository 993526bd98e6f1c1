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

fn minimal_proto() -> v1::TrainingConfig {
    v1::TrainingConfig {
        model: Some(v1::ModelConfig {
            d_in: 64,
            ..Default::default()
        }),
        optim: Some(v1::OptimConfig {
            batch_size: 32,
            steps: Some(10),
            ..Default::default()
        }),
        data: Some(v1::DataConfig {
            source: Some(v1::data_config::Source::Synthetic(v1::SyntheticData {
                num_samples: 1000,
                ..Default::default()
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn field_of(p: v1::TrainingConfig) -> String {
    let err = TrainingConfig::try_from(p).unwrap_err();
    err.field()
        .unwrap_or_else(|| panic!("no field in {err}"))
        .to_string()
}

#[test]
fn unset_fields_take_the_spec_defaults() {
    let from_proto = TrainingConfig::try_from(minimal_proto()).unwrap();
    assert_eq!(from_proto, TrainingConfig::from_toml(MINIMAL).unwrap());
}

#[test]
fn domain_proto_domain_is_lossless() {
    let text = r#"
[model]
d_in = 32
expansion_factor = 4
l1_coefficient = 0.005
dtype = "bf16"
[optim]
learning_rate = 0.01
batch_size = 8
epochs = 3
seed = 42
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
[checkpoint]
every_steps = 0
keep = 1
[data.files]
paths = ["a.npy", "b.safetensors"]
tensor = "acts"
[runtime]
device = "cpu"
log_every_steps = 5
rendezvous_timeout_s = 12.5
collective_timeout_s = 7.0
allreduce = "per_param"
"#;
    let sae = r#"
[model]
d_in = 32
d_sae = 64
dtype = "f16"
architecture = "topk"
k = 4
aux_k = 16
aux_coefficient = 0.03125
decoder_norm = "none"
b_dec_init = "mean"
apply_b_dec_to_input = true
dead_window_samples = 5000
[optim]
batch_size = 8
steps = 100
lr_schedule = "cosine"
lr_warmup_steps = 10
lr_min_ratio = 0.1
l1_warmup_steps = 20
max_grad_norm = 1.0
accumulation_steps = 2
max_nonfinite_steps = 3
[data.synthetic]
num_samples = 100
[validation]
paths = ["s3://b/val/"]
column = "acts"
every_steps = 25
"#;
    for config in [
        TrainingConfig::from_toml(text).unwrap(),
        TrainingConfig::from_toml(MINIMAL).unwrap(),
        TrainingConfig::from_toml(sae).unwrap(),
    ] {
        let proto = v1::TrainingConfig::from(&config);
        assert_eq!(TrainingConfig::try_from(proto).unwrap(), config);
    }
}

#[test]
fn missing_messages_are_named() {
    let mut p = minimal_proto();
    p.model = None;
    assert_eq!(field_of(p), "model");
    let mut p = minimal_proto();
    p.optim = None;
    assert_eq!(field_of(p), "optim");
    let mut p = minimal_proto();
    p.data = None;
    assert_eq!(field_of(p), "data");
}

#[test]
fn bad_values_are_refused_with_their_field() {
    let mut p = minimal_proto();
    p.optim.as_mut().unwrap().batch_size = -4;
    assert_eq!(field_of(p), "optim.batch_size");

    let mut p = minimal_proto();
    p.optim.as_mut().unwrap().learning_rate = Some(f64::NAN);
    assert_eq!(field_of(p), "optim.learning_rate");

    let mut p = minimal_proto();
    p.model.as_mut().unwrap().dtype = 9;
    assert_eq!(field_of(p), "model.dtype");

    let mut p = minimal_proto();
    p.runtime = Some(v1::RuntimeConfig {
        allreduce: 7,
        ..Default::default()
    });
    assert_eq!(field_of(p), "runtime.allreduce");

    let mut p = minimal_proto();
    p.optim.as_mut().unwrap().epochs = Some(2);
    assert_eq!(field_of(p), "optim.steps");

    let mut p = minimal_proto();
    p.model.as_mut().unwrap().architecture = v1::Architecture::Topk as i32;
    assert_eq!(field_of(p), "model.k");

    let mut p = minimal_proto();
    p.optim.as_mut().unwrap().lr_schedule = 11;
    assert_eq!(field_of(p), "optim.lr_schedule");

    let mut p = minimal_proto();
    p.validation = Some(v1::ValidationConfig::default());
    assert_eq!(field_of(p), "validation.paths");
}
