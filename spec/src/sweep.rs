//! A sweep's search space (docs/sweeps.md): config paths, each with the
//! distribution its values come from; a trial's params applied to the base
//! config; the grid, and the seeded random draws. The CLI reads a space
//! file with it, the coordinator checks a sweep and draws its trials with it.
//!
//! A space file is TOML, one key per config path:
//!
//! ```toml
//! "model.l1_coefficient" = { log_uniform = [1e-4, 1e-2] }
//! "model.d_sae" = { choice = [64, 128] }
//! "optim.lr" = { uniform = [1e-4, 1e-3] }
//! "model.k" = { int_uniform = [8, 32] }
//! ```

use crate::rng::Rng;
use crate::{ConfigError, Workload};
use serde_json::Value;
use std::collections::BTreeMap;

/// The most parameters one space holds.
pub const MAX_PARAMETERS: usize = 16;
/// The most values of one `choice`, and the most trials of one grid.
pub const MAX_GRID: usize = 256;

/// Where one parameter's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// Uniform in `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Its logarithm uniform: `low > 0`.
    LogUniform { low: f64, high: f64 },
    /// An integer in `[low, high]`, each as likely.
    IntUniform { low: i64, high: i64 },
    /// One of these (numbers, strings or booleans), each as likely.
    Choice(Vec<Value>),
}

impl Distribution {
    /// Its name in a space file and in the API.
    pub fn kind(&self) -> &'static str {
        match self {
            Distribution::Uniform { .. } => "uniform",
            Distribution::LogUniform { .. } => "log_uniform",
            Distribution::IntUniform { .. } => "int_uniform",
            Distribution::Choice(_) => "choice",
        }
    }

    fn check(&self) -> Result<(), String> {
        match self {
            Distribution::Uniform { low, high } | Distribution::LogUniform { low, high } => {
                if !low.is_finite() || !high.is_finite() {
                    return Err(format!("{}: low and high must be finite", self.kind()));
                }
                if low >= high {
                    return Err(format!(
                        "{}: low ({low}) must be below high ({high})",
                        self.kind()
                    ));
                }
                if matches!(self, Distribution::LogUniform { .. }) && *low <= 0.0 {
                    return Err(format!("log_uniform: low ({low}) must be above 0"));
                }
            }
            Distribution::IntUniform { low, high } => {
                if low >= high {
                    return Err(format!(
                        "int_uniform: low ({low}) must be below high ({high})"
                    ));
                }
            }
            Distribution::Choice(values) => {
                if values.is_empty() || values.len() > MAX_GRID {
                    return Err(format!("choice: 1 to {MAX_GRID} values"));
                }
                if let Some(bad) = values
                    .iter()
                    .find(|v| !(v.is_number() || v.is_string() || v.is_boolean()))
                {
                    return Err(format!(
                        "choice: {bad} is not a number, a string or a boolean"
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if values[..i].contains(v) {
                        return Err(format!("choice: {v} is given twice"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every value, for a grid: a choice's, or an int_uniform's range.
    fn values(&self) -> Option<Vec<Value>> {
        match self {
            Distribution::Choice(values) => Some(values.clone()),
            Distribution::IntUniform { low, high } => {
                let n = high.checked_sub(*low)?;
                (n < MAX_GRID as i64).then(|| (*low..=*high).map(Value::from).collect())
            }
            _ => None,
        }
    }

    fn draw(&self, rng: &mut Rng) -> Value {
        match self {
            Distribution::Uniform { low, high } => number(rng.uniform(*low, *high)),
            Distribution::LogUniform { low, high } => {
                number(rng.uniform(low.ln(), high.ln()).exp().clamp(*low, *high))
            }
            Distribution::IntUniform { low, high } => {
                let span = high.abs_diff(*low) + 1;
                Value::from(low.wrapping_add((rng.next_u64() % span) as i64))
            }
            Distribution::Choice(values) => {
                values[(rng.next_u64() % values.len() as u64) as usize].clone()
            }
        }
    }
}

fn number(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// What is wrong with a space: the field (`space[model.k]`) and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct SpaceError {
    pub field: String,
    pub reason: String,
}

fn error(field: impl Into<String>, reason: impl Into<String>) -> SpaceError {
    SpaceError {
        field: field.into(),
        reason: reason.into(),
    }
}

/// One trial's values, by config path.
pub type Params = BTreeMap<String, Value>;

/// A checked search space: 1 to [`MAX_PARAMETERS`] config paths, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    params: BTreeMap<String, Distribution>,
}

fn path_ok(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 63
        && key.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
}

impl Space {
    /// Checks every parameter; the first bad one is the error.
    pub fn new(
        params: impl IntoIterator<Item = (String, Distribution)>,
    ) -> Result<Self, SpaceError> {
        let mut checked = BTreeMap::new();
        for (key, distribution) in params {
            let field = format!("space[{key}]");
            if !path_ok(&key) {
                return Err(error(
                    field,
                    "a config path such as model.k: parts of a-z, 0-9 and '_', joined by '.'",
                ));
            }
            distribution.check().map_err(|why| error(&field, why))?;
            if checked.insert(key, distribution).is_some() {
                return Err(error(field, "given twice"));
            }
        }
        if checked.is_empty() {
            return Err(error("space", "at least one parameter"));
        }
        if checked.len() > MAX_PARAMETERS {
            return Err(error(
                "space",
                format!("at most {MAX_PARAMETERS} parameters"),
            ));
        }
        Ok(Self { params: checked })
    }

    /// A space file's text (the module's header shows one).
    pub fn from_toml(text: &str) -> Result<Self, SpaceError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            error("space", format!("not valid TOML: {}", e.message()))
        })?;
        let value =
            serde_json::to_value(table).map_err(|e| error("space", format!("not a space: {e}")))?;
        Self::from_json(&value)
    }

    /// The same shape as JSON: `{"model.k": {"int_uniform": [8, 32]}}`.
    pub fn from_json(value: &Value) -> Result<Self, SpaceError> {
        let table = value
            .as_object()
            .ok_or_else(|| error("space", "a table of config paths"))?;
        let mut params = Vec::with_capacity(table.len());
        for (key, spec) in table {
            let distribution =
                from_json_value(spec).map_err(|why| error(format!("space[{key}]"), why))?;
            params.push((key.clone(), distribution));
        }
        Self::new(params)
    }

    /// What [`Space::from_json`] reads.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.params
                .iter()
                .map(|(k, d)| (k.clone(), to_json_value(d)))
                .collect(),
        )
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Distribution)> {
        self.params.iter()
    }

    pub fn len(&self) -> usize {
        self.params.len()
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Every combination, first path slowest; refused when a parameter has
    /// no list of values or the grid is over [`MAX_GRID`].
    pub fn grid(&self) -> Result<Vec<Params>, SpaceError> {
        let mut out: Vec<Params> = vec![Params::new()];
        for (key, distribution) in &self.params {
            let values = distribution.values().ok_or_else(|| {
                error(
                    format!("space[{key}]"),
                    format!(
                        "the grid searcher needs choice or an int_uniform of at most {MAX_GRID} values, not {}",
                        distribution.kind()
                    ),
                )
            })?;
            if out.len().saturating_mul(values.len()) > MAX_GRID {
                return Err(error(
                    "space",
                    format!("the grid has more than {MAX_GRID} trials"),
                ));
            }
            out = out
                .into_iter()
                .flat_map(|prefix| {
                    values.iter().map(move |v| {
                        let mut p = prefix.clone();
                        p.insert(key.clone(), v.clone());
                        p
                    })
                })
                .collect();
        }
        Ok(out)
    }

    /// Trial `index`'s params for `seed`, as the random searchers draw
    /// them. A space whose grid has at most [`MAX_GRID`] combinations is
    /// drawn without replacement, as a seeded shuffle of its grid (`None`
    /// once every combination was drawn): no trial repeats another. Any
    /// other is drawn independently ([`Self::sample`]).
    pub fn draw(&self, seed: u64, index: u64) -> Option<Params> {
        let Ok(mut grid) = self.grid() else {
            return Some(self.sample(seed, index));
        };
        // Fisher-Yates, from the seed alone.
        let mut rng = Rng::new(seed ^ 0x5851_F42D_4C95_7F2D);
        for i in (1..grid.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            grid.swap(i, j);
        }
        usize::try_from(index)
            .ok()
            .and_then(|i| grid.into_iter().nth(i))
    }

    /// How many draws the space has: its grid's size when it has one of at
    /// most [`MAX_GRID`], else unbounded.
    pub fn draws(&self) -> Option<usize> {
        self.grid().ok().map(|g| g.len())
    }

    /// Trial `index`'s independent draw for `seed`: the same on every
    /// machine, and without the draws before it (a new leader continues a
    /// sweep from its trial count alone).
    pub fn sample(&self, seed: u64, index: u64) -> Params {
        let mut rng = Rng::new(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        // Mix once, so neighbouring indices start far apart.
        rng.next_u64();
        self.params
            .iter()
            .map(|(key, d)| (key.clone(), d.draw(&mut rng)))
            .collect()
    }
}

fn from_json_value(spec: &Value) -> Result<Distribution, String> {
    let table = spec
        .as_object()
        .filter(|t| t.len() == 1)
        .ok_or("one of { uniform = [low, high] }, { log_uniform = [low, high] }, { int_uniform = [low, high] }, { choice = [...] }")?;
    let (kind, args) = table.iter().next().expect("one entry");
    let list = args.as_array().ok_or_else(|| format!("{kind}: a list"))?;
    let pair = |what: &str| -> Result<(&Value, &Value), String> {
        match list.as_slice() {
            [low, high] => Ok((low, high)),
            _ => Err(format!("{kind}: [low, high], two {what}")),
        }
    };
    let float = |v: &Value| -> Result<f64, String> {
        v.as_f64()
            .ok_or_else(|| format!("{kind}: {v} is not a number"))
    };
    Ok(match kind.as_str() {
        "uniform" | "log_uniform" => {
            let (low, high) = pair("numbers")?;
            let (low, high) = (float(low)?, float(high)?);
            if kind == "uniform" {
                Distribution::Uniform { low, high }
            } else {
                Distribution::LogUniform { low, high }
            }
        }
        "int_uniform" => {
            let (low, high) = pair("integers")?;
            let int = |v: &Value| {
                v.as_i64()
                    .ok_or_else(|| format!("int_uniform: {v} is not an integer"))
            };
            Distribution::IntUniform {
                low: int(low)?,
                high: int(high)?,
            }
        }
        "choice" => Distribution::Choice(list.clone()),
        other => {
            return Err(format!(
                "{other:?} is not a distribution: uniform, log_uniform, int_uniform or choice"
            ))
        }
    })
}

fn to_json_value(d: &Distribution) -> Value {
    let args = match d {
        Distribution::Uniform { low, high } | Distribution::LogUniform { low, high } => {
            Value::Array(vec![number(*low), number(*high)])
        }
        Distribution::IntUniform { low, high } => Value::Array(vec![(*low).into(), (*high).into()]),
        Distribution::Choice(values) => Value::Array(values.clone()),
    };
    Value::Object([(d.kind().to_string(), args)].into_iter().collect())
}

/// A value as TOML would read it: an integer, a float, a boolean, else a
/// string (what `cohort train sweep --set KEY=V1,V2` gives).
pub fn scalar(text: &str) -> Value {
    if let Ok(n) = text.parse::<i64>() {
        return n.into();
    }
    if let Ok(x) = text.parse::<f64>() {
        return number(x);
    }
    match text {
        "true" => true.into(),
        "false" => false.into(),
        _ => text.into(),
    }
}

/// `base` with `params` set (each a dotted path), checked as a new config is.
pub fn apply(base: &Workload, params: &Params) -> Result<Workload, ConfigError> {
    let mut value = serde_json::to_value(base).map_err(|e| ConfigError::Invalid {
        field: "config".into(),
        reason: e.to_string(),
    })?;
    for (key, v) in params {
        let parts: Vec<&str> = key.split('.').collect();
        let (last, parents) = parts.split_last().expect("a path has a part");
        let mut at = &mut value;
        for part in parents {
            if !at[*part].is_object() {
                at[*part] = Value::Object(Default::default());
            }
            at = &mut at[*part];
        }
        at[*last] = v.clone();
    }
    Workload::from_value(value)
}

/// A value as a label or a table shows it: a string without its quotes.
pub fn display(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(text: &str) -> Result<Space, SpaceError> {
        Space::from_toml(text)
    }

    #[test]
    fn a_space_file_reads_as_documented() {
        let s = space(
            "\"model.l1_coefficient\" = { log_uniform = [1e-4, 1e-2] }\n\"model.d_sae\" = { choice = [64, 128] }\n\"optim.lr\" = { uniform = [1e-4, 1e-3] }\n\"model.k\" = { int_uniform = [8, 32] }\n",
        )
        .unwrap();
        assert_eq!(s.len(), 4);
        let kinds: Vec<&str> = s.iter().map(|(_, d)| d.kind()).collect();
        assert_eq!(kinds, ["choice", "int_uniform", "log_uniform", "uniform"]);
        assert_eq!(Space::from_json(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn bad_spaces_name_the_field() {
        let e = space("").unwrap_err();
        assert_eq!(e.field, "space");
        let e = space("\"optim.lr\" = { uniform = [1e-3, 1e-4] }").unwrap_err();
        assert_eq!(e.field, "space[optim.lr]");
        assert!(e.reason.contains("must be below high"), "{e}");
        let e = space("\"optim.lr\" = { log_uniform = [0, 1] }").unwrap_err();
        assert!(e.reason.contains("above 0"), "{e}");
        let e = space("\"model.k\" = { int_uniform = [4, 4] }").unwrap_err();
        assert_eq!(e.field, "space[model.k]");
        let e = space("\"model.k\" = { normal = [4, 8] }").unwrap_err();
        assert!(e.reason.contains("not a distribution"), "{e}");
        let e = space("\"Model\" = { choice = [1] }").unwrap_err();
        assert_eq!(e.field, "space[Model]");
        let e = space("\"model.k\" = { choice = [1, 1] }").unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");
        let e = space("\"model.k\" = 4").unwrap_err();
        assert!(e.reason.contains("one of"), "{e}");
    }

    #[test]
    fn a_finite_space_is_drawn_without_replacement() {
        let s = space("\"a.c\" = { choice = [1, 2, 3] }\n\"a.i\" = { int_uniform = [0, 3] }\n")
            .unwrap();
        assert_eq!(s.draws(), Some(12));
        let drawn: Vec<Params> = (0..12).map(|i| s.draw(5, i).unwrap()).collect();
        let mut sorted = drawn.clone();
        sorted.sort_by_key(|p| p.values().map(|v| v.to_string()).collect::<Vec<_>>());
        sorted.dedup();
        assert_eq!(sorted.len(), 12, "every combination once: {drawn:?}");
        assert_eq!(s.draw(5, 12), None);
        assert_eq!(s.draw(5, 3), drawn.get(3).cloned(), "seeded");
        let other: Vec<Params> = (0..12).map(|i| s.draw(6, i).unwrap()).collect();
        assert_ne!(drawn, other, "another seed, another order");
        // A continuous parameter: independent draws.
        let u = space("\"a.u\" = { uniform = [0.0, 1.0] }\n").unwrap();
        assert_eq!(u.draws(), None);
        assert_eq!(u.draw(5, 1_000_000), Some(u.sample(5, 1_000_000)));
    }

    #[test]
    fn draws_are_seeded_in_range_and_independent_of_the_ones_before() {
        let s = space(
            "\"a.u\" = { uniform = [2.0, 3.0] }\n\"a.l\" = { log_uniform = [1e-4, 1e-2] }\n\"a.i\" = { int_uniform = [-2, 2] }\n\"a.c\" = { choice = [\"x\", true, 7] }\n",
        )
        .unwrap();
        assert_eq!(s.sample(7, 41), s.sample(7, 41));
        assert_ne!(s.sample(7, 41), s.sample(8, 41));
        let mut ints = std::collections::BTreeSet::new();
        let mut logs_below_1e3 = 0;
        for i in 0..2000 {
            let p = s.sample(1, i);
            let u = p["a.u"].as_f64().unwrap();
            assert!((2.0..3.0).contains(&u));
            let l = p["a.l"].as_f64().unwrap();
            assert!((1e-4..=1e-2).contains(&l));
            logs_below_1e3 += usize::from(l < 1e-3);
            ints.insert(p["a.i"].as_i64().unwrap());
        }
        assert_eq!(ints.into_iter().collect::<Vec<_>>(), [-2, -1, 0, 1, 2]);
        // Half the draws below the geometric middle.
        assert!((900..1100).contains(&logs_below_1e3), "{logs_below_1e3}");
    }

    #[test]
    fn the_grid_is_every_combination_and_only_of_lists() {
        let s = space(
            "\"model.k\" = { int_uniform = [1, 3] }\n\"optim.lr\" = { choice = [0.1, 0.2] }\n",
        )
        .unwrap();
        let g = s.grid().unwrap();
        assert_eq!(g.len(), 6);
        assert_eq!(g[0]["model.k"], Value::from(1));
        assert_eq!(g[1]["optim.lr"], serde_json::json!(0.2));
        let e = space("\"optim.lr\" = { uniform = [0.1, 0.2] }")
            .unwrap()
            .grid()
            .unwrap_err();
        assert_eq!(e.field, "space[optim.lr]");
        let big =
            space("\"a.x\" = { int_uniform = [0, 99] }\n\"a.y\" = { int_uniform = [0, 9] }\n")
                .unwrap()
                .grid()
                .unwrap_err();
        assert_eq!(big.field, "space");
    }

    #[test]
    fn params_apply_to_a_base_config_and_are_checked() {
        let base = Workload::from_toml(
            "[model]\nd_in = 8\nd_sae = 16\n[optim]\nbatch_size = 4\nsteps = 5\n[data.synthetic]\nnum_samples = 64\n",
        )
        .unwrap();
        let p = Params::from([("model.d_sae".to_string(), Value::from(32))]);
        let w = apply(&base, &p).unwrap();
        assert_eq!(w.sae().unwrap().model.d_sae, Some(32));
        let bad = Params::from([("model.d_sae".to_string(), Value::from(-1))]);
        assert!(apply(&base, &bad).is_err());
        assert_eq!(scalar("3"), Value::from(3));
        assert_eq!(scalar("0.5"), serde_json::json!(0.5));
        assert_eq!(scalar("relu"), Value::from("relu"));
        assert_eq!(display(&Value::from("relu")), "relu");
    }
}
