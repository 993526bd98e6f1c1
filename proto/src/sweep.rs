//! A sweep's search space and params between `cohort_spec::sweep` and the
//! API: `SweepParameter`s (checked into a [`Space`]), params as a
//! `google.protobuf.Struct`, JSON values as protobuf values.

use crate::v1::{sweep_parameter, SweepParameter};
use cohort_spec::sweep::{Distribution, Params, Space, SpaceError};
use prost_types::value::Kind;
use serde_json::Value;

/// A JSON value as a protobuf one (numbers as doubles, as protobuf has them).
pub fn to_proto_value(v: &Value) -> prost_types::Value {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(to_proto_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(prost_types::Struct {
            fields: map
                .iter()
                .map(|(k, v)| (k.clone(), to_proto_value(v)))
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// A protobuf value as JSON: a whole number as an integer (a config's
/// `d_sae = 64` stays an integer), other numbers as floats.
pub fn from_proto_value(v: &prost_types::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(x)) => whole(*x).map_or_else(
            || serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
            Value::from,
        ),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(from_proto_value).collect()),
        Some(Kind::StructValue(s)) => Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), from_proto_value(v)))
                .collect(),
        ),
    }
}

fn whole(x: f64) -> Option<i64> {
    (x.fract() == 0.0 && x.abs() < 9.0e15).then_some(x as i64)
}

/// Params as a Struct.
pub fn params_to_struct(params: &Params) -> prost_types::Struct {
    prost_types::Struct {
        fields: params
            .iter()
            .map(|(k, v)| (k.clone(), to_proto_value(v)))
            .collect(),
    }
}

/// The API's parameters, checked.
pub fn space_from_proto(params: Vec<SweepParameter>) -> Result<Space, SpaceError> {
    let mut out = Vec::with_capacity(params.len());
    for p in params {
        let field = format!("space[{}]", p.key);
        let bad = |reason: &str| SpaceError {
            field: field.clone(),
            reason: reason.to_string(),
        };
        use sweep_parameter::Distribution as D;
        let distribution = match p.distribution {
            None => {
                return Err(bad(
                    "a distribution: uniform, log_uniform, int_uniform or choice",
                ))
            }
            Some(D::Uniform(r)) => Distribution::Uniform {
                low: r.low,
                high: r.high,
            },
            Some(D::LogUniform(r)) => Distribution::LogUniform {
                low: r.low,
                high: r.high,
            },
            Some(D::IntUniform(r)) => match (whole(r.low), whole(r.high)) {
                (Some(low), Some(high)) => Distribution::IntUniform { low, high },
                _ => return Err(bad("int_uniform: low and high are whole numbers")),
            },
            Some(D::Choice(list)) => {
                Distribution::Choice(list.values.iter().map(from_proto_value).collect())
            }
        };
        out.push((p.key, distribution));
    }
    Space::new(out)
}

/// A space as the API's parameters, in the space's order.
pub fn space_to_proto(space: &Space) -> Vec<SweepParameter> {
    use sweep_parameter::{Distribution as D, Range};
    space
        .iter()
        .map(|(key, d)| SweepParameter {
            key: key.clone(),
            distribution: Some(match d {
                Distribution::Uniform { low, high } => D::Uniform(Range {
                    low: *low,
                    high: *high,
                }),
                Distribution::LogUniform { low, high } => D::LogUniform(Range {
                    low: *low,
                    high: *high,
                }),
                Distribution::IntUniform { low, high } => D::IntUniform(Range {
                    low: *low as f64,
                    high: *high as f64,
                }),
                Distribution::Choice(values) => D::Choice(prost_types::ListValue {
                    values: values.iter().map(to_proto_value).collect(),
                }),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_space_goes_through_the_api_unchanged() {
        let space = Space::from_toml(
            "\"model.l1_coefficient\" = { log_uniform = [1e-4, 1e-2] }\n\"model.d_sae\" = { choice = [64, 128] }\n\"model.k\" = { int_uniform = [8, 32] }\n\"model.activation\" = { choice = [\"relu\", \"topk\"] }\n",
        )
        .unwrap();
        let back = space_from_proto(space_to_proto(&space)).unwrap();
        assert_eq!(back, space);
        let p = space.sample(3, 0);
        let s = params_to_struct(&p);
        let again: Params = s
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), from_proto_value(v)))
            .collect();
        assert_eq!(again["model.d_sae"], p["model.d_sae"]);
        assert_eq!(again["model.k"], p["model.k"]);
    }

    #[test]
    fn a_fractional_int_bound_names_the_field() {
        let e = space_from_proto(vec![SweepParameter {
            key: "model.k".into(),
            distribution: Some(sweep_parameter::Distribution::IntUniform(
                sweep_parameter::Range {
                    low: 1.5,
                    high: 4.0,
                },
            )),
        }])
        .unwrap_err();
        assert_eq!(e.field, "space[model.k]");
        let e = space_from_proto(vec![SweepParameter {
            key: "model.k".into(),
            distribution: None,
        }])
        .unwrap_err();
        assert!(e.reason.contains("a distribution"));
    }
}
