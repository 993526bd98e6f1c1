//! Bad input, tried (issue 20, section 5): every parser of text that comes
//! from outside — the training config (TOML and JSON, from any API client),
//! a rank's progress lines (from any program's stdout), environment files,
//! the published-checkpoint and S3-prefix lists, durations — takes arbitrary
//! and mutated input and answers with an error, never a panic. proptest runs
//! each property `PROPTEST_CASES` times (scripts/test.sh sets a bounded
//! count; docs/benchmarks.md gives a longer run's figures).

use cohort_spec::progress::ProgressLine;
use cohort_spec::TrainingConfig;
use proptest::prelude::*;

const VALID_TOML: &str = r#"
[model]
d_in = 64
d_sae = 256
architecture = "topk"
k = 16
[optim]
learning_rate = 0.001
batch_size = 32
steps = 100
[data.synthetic]
num_samples = 1024
[checkpoint]
every_steps = 10
keep = 2
storage = "s3://bucket/runs"
[runtime]
log_every_steps = 10
"#;

/// A value that may sit after `key = ` in TOML: numbers of any size and
/// sign, floats that are not finite, strings, arrays, tables.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        "[ -~]{0,12}".prop_map(|s| format!("{s:?}")),
        Just("[]".to_string()),
        Just("{}".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
    ]
}

/// The valid config with one line's value replaced.
fn mutated_toml() -> impl Strategy<Value = String> {
    (any::<usize>(), toml_value()).prop_map(|(line, value)| {
        let lines: Vec<&str> = VALID_TOML.lines().collect();
        let with_values: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains(" = "))
            .collect();
        let target = with_values[line % with_values.len()];
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if i == target {
                    format!("{} = {value}", l.split(" = ").next().unwrap_or_default())
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// A JSON value of any shape, a few levels deep.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "[ -~]{0,10}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..5)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A progress line: a known event with fields of any type and value.
fn progress_line() -> impl Strategy<Value = String> {
    let event = prop_oneof![
        Just("started"),
        Just("progress"),
        Just("rank_stats"),
        Just("rank_finished"),
        Just("checkpoint"),
        Just("finished"),
        Just("validation"),
        Just("validating"),
        Just("checkpoint_rejected"),
        Just("diverged"),
        Just("collective_error"),
    ];
    let fields = prop::collection::btree_map(
        prop_oneof![
            Just("step".to_string()),
            Just("total_steps".to_string()),
            Just("loss".to_string()),
            Just("path".to_string()),
            Just("rank".to_string()),
            Just("best".to_string()),
            "[a-z_]{1,10}",
        ],
        json_value(),
        0..8,
    );
    (event, fields).prop_map(|(event, fields)| {
        let mut object: serde_json::Map<String, serde_json::Value> = fields.into_iter().collect();
        object.insert("event".into(), event.into());
        serde_json::Value::Object(object).to_string()
    })
}

proptest! {
    #[test]
    fn config_toml_arbitrary_text(text in "[ -~\n]{0,300}") {
        let _ = TrainingConfig::from_toml(&text);
    }

    #[test]
    fn config_toml_one_value_changed(text in mutated_toml()) {
        if let Ok(config) = TrainingConfig::from_toml(&text) {
            // What parses also round-trips through JSON, as the API carries it.
            let again = TrainingConfig::from_json(&config.to_json());
            prop_assert!(again.is_ok(), "{text}: {again:?}");
        }
    }

    #[test]
    fn config_json_any_shape(value in json_value()) {
        let _ = TrainingConfig::from_json(&value.to_string());
    }

    #[test]
    fn progress_lines(line in progress_line()) {
        let _ = ProgressLine::parse(&line);
    }

    #[test]
    fn progress_arbitrary_text(line in "[ -~]{0,200}") {
        let _ = ProgressLine::parse(&line);
    }

    #[test]
    fn env_files(text in "[ -~\n]{0,300}") {
        let _ = cohort_spec::envfile::parse(&text);
    }

    #[test]
    fn published_checkpoints(text in "[0-9:,a-z -]{0,80}") {
        if let Ok(p) = cohort_spec::resume::Published::parse(&text) {
            prop_assert_eq!(cohort_spec::resume::Published::parse(&p.to_env()).unwrap(), p);
        }
    }

    #[test]
    fn s3_prefixes(uris in prop::collection::vec("(s3://)?[ -~]{0,20}", 0..4), bucket in "[a-z]{0,4}", key in "[ -~]{0,20}") {
        if let Ok(p) = cohort_spec::prefixes::S3Prefixes::only(&uris) {
            let _ = p.check(&bucket, &key);
        }
    }

    #[test]
    fn durations(text in "[0-9a-z. ]{0,12}") {
        let _ = cohort_spec::duration::parse_duration(&text);
    }
}
