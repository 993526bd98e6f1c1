//! The `cohort.v1` messages as JSON, for `-o json`, generated from the
//! messages' descriptors (so a new field shows up without an edit here).
//!
//! The mapping is proto3 JSON with the .proto field names kept (snake_case,
//! as `grpcurl --format-json`-style tools offer with "preserve field names"):
//! enums as their value names (a number this CLI does not know stays a
//! number), timestamps as RFC 3339 strings, 64-bit integers as JSON numbers,
//! a oneof as the key of its set member. Every field is present: unset
//! messages and optionals as `null`. A training config is written with the
//! keys of the TOML/JSON config file (defaults filled in), so it can be fed
//! back to `cohort train submit --config`.

use cohort_proto::v1;
use prost_reflect::{DescriptorPool, DynamicMessage, ReflectMessage, SerializeOptions};
use serde_json::Value;
use std::sync::OnceLock;

/// The full name of the message written with the config file's keys.
const CONFIG: &str = "cohort.v1.TrainingConfig";

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(cohort_proto::FILE_DESCRIPTOR_SET)
            .expect("the descriptors compiled into cohort-proto")
    })
}

/// Any `cohort.v1` message as JSON.
pub fn message<M: prost::Message + prost::Name>(message: &M) -> Value {
    let descriptor = pool()
        .get_message_by_name(&M::full_name())
        .expect("every cohort.v1 message is in the descriptor set");
    let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .expect("a message decodes with its own descriptor");
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false);
    let mut value = dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("serialising into a JSON value cannot fail");
    complete(&dynamic, &mut value);
    value
}

/// Writes unset messages and optionals as `null` (proto3 JSON leaves them
/// out), and configs with the config file's keys, all the way down.
fn complete(message: &DynamicMessage, value: &mut Value) {
    let Value::Object(map) = value else {
        return; // a well-known type written as a string (timestamps, durations)
    };
    for field in message.descriptor().fields() {
        let name = field.name();
        let real_oneof = field.containing_oneof().is_some_and(|o| !o.is_synthetic());
        let Some(slot) = map.get_mut(name) else {
            if field.supports_presence() && !real_oneof {
                map.insert(name.to_string(), Value::Null);
            }
            continue;
        };
        let field_value = message.get_field(&field);
        match field_value.as_ref() {
            prost_reflect::Value::Message(m) if m.descriptor().full_name() == CONFIG => {
                *slot = m
                    .transcode_to::<v1::TrainingConfig>()
                    .map_or(Value::Null, |c| config(&c));
            }
            prost_reflect::Value::Message(m) => complete(m, slot),
            prost_reflect::Value::List(items) => {
                if let Value::Array(values) = slot {
                    for (item, value) in items.iter().zip(values.iter_mut()) {
                        if let prost_reflect::Value::Message(m) = item {
                            complete(m, value);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// A config with the keys of the config file; `null` if the server sent
/// one this CLI cannot read (it would have been rejected on creation).
pub fn config(c: &v1::TrainingConfig) -> Value {
    cohort_spec::Workload::try_from(c.clone())
        .ok()
        .and_then(|c| serde_json::to_value(&c).ok())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_as_json() {
        let t = v1::Training {
            id: "t-1".into(),
            state: v1::training::State::Running as i32,
            world_size: 2,
            ranks: vec![v1::RankAssignment {
                rank: 1,
                gpu_uuid: "SIM-b".into(),
                state: v1::RankState::Running as i32,
                exit_code: None,
                ..Default::default()
            }],
            create_time: Some(prost_types::Timestamp {
                seconds: 1_795_000_000,
                nanos: 0,
            }),
            gpu_request: Some(v1::GpuRequest {
                selection: Some(v1::gpu_request::Selection::Count(2)),
                queue: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = message(&t);
        assert_eq!(v["id"], "t-1");
        assert_eq!(v["state"], "RUNNING");
        assert_eq!(v["ranks"][0]["state"], "RANK_STATE_RUNNING");
        assert_eq!(v["ranks"][0]["exit_code"], Value::Null);
        assert_eq!(v["gpu_request"]["count"], 2);
        assert_eq!(v["gpu_request"]["queue"], false);
        assert_eq!(v["create_time"], "2026-11-18T11:06:40Z");
        assert_eq!(v["config"], Value::Null);
        assert_eq!(v["end_time"], Value::Null);
    }

    #[test]
    fn unknown_enum_values_stay_numbers() {
        let g = v1::Gpu {
            availability: 99,
            ..Default::default()
        };
        assert_eq!(message(&g)["availability"], 99);
    }

    #[test]
    fn events_name_their_kind() {
        let e = v1::TrainingEvent {
            sequence: 7,
            event: Some(v1::training_event::Event::Progress(v1::ProgressEvent {
                step: 10,
                total_steps: 100,
                loss: 0.5,
                ..Default::default()
            })),
            ..Default::default()
        };
        let v = message(&e);
        assert_eq!(v["sequence"], 7);
        assert_eq!(v["progress"]["step"], 10);
        assert_eq!(v["progress"]["loss"], 0.5);
    }

    #[test]
    fn config_uses_file_keys() {
        let spec = cohort_spec::TrainingConfig::from_toml(
            "[model]\nd_in = 8\nd_sae = 16\n[optim]\nbatch_size = 4\nsteps = 10\n\
             [data.synthetic]\nnum_samples = 64\n",
        )
        .unwrap();
        let v = config(&v1::TrainingConfig::from(&spec));
        assert_eq!(v["optim"]["batch_size"], 4);
        assert_eq!(v["model"]["d_in"], 8);
    }

    /// Fields the hand-written JSON never had, and every field of a nested
    /// message, are there without an edit to this file.
    #[test]
    fn every_field_of_the_message_is_written() {
        let t = v1::Training {
            queue_position: 2,
            global_batch_size: 512,
            straggler_ranks: vec![3],
            latest_progress: Some(v1::ProgressEvent::default()),
            ..Default::default()
        };
        let v = message(&t);
        assert_eq!(v["queue_position"], 2);
        assert_eq!(v["global_batch_size"], 512);
        assert_eq!(v["straggler_ranks"], serde_json::json!([3]));
        let progress = pool()
            .get_message_by_name("cohort.v1.ProgressEvent")
            .unwrap();
        for field in progress.fields() {
            assert!(
                v["latest_progress"].get(field.name()).is_some(),
                "latest_progress.{} is missing",
                field.name()
            );
        }
        let training = pool().get_message_by_name("cohort.v1.Training").unwrap();
        for field in training.fields() {
            assert!(v.get(field.name()).is_some(), "{} is missing", field.name());
        }
    }
}
