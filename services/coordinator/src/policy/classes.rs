//! Priority classes: named priorities (`--priority-class NAME=VALUE[:preempting]`),
//! as Kubernetes' PriorityClass and Slurm's QOS name them. A class sets a
//! training's numeric priority; a preempting class may make room by
//! preempting trainings of strictly lower priority. A team's quota may cap
//! the highest class its members use.

use std::fmt;

/// The class a training gets when it names none.
pub const DEFAULT_CLASS: &str = "normal";
/// The longest class name.
const MAX_NAME: usize = 32;

/// One named priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClass {
    pub name: String,
    pub value: i32,
    /// May preempt trainings of strictly lower priority.
    pub preempting: bool,
}

impl fmt::Display for PriorityClass {
    /// As the flag writes it: `high=100:preempting`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.value)?;
        if self.preempting {
            write!(f, ":preempting")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for PriorityClass {
    type Err = String;

    /// `NAME=VALUE[:preempting]`, NAME of `[a-z0-9_-]`, VALUE an i32.
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: write NAME=VALUE[:preempting]"))?;
        let name = name.trim();
        if name.is_empty()
            || name.len() > MAX_NAME
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        {
            return Err(format!(
                "{name:?}: a class name is 1 to {MAX_NAME} of a-z, 0-9, - and _"
            ));
        }
        let (value, preempting) = match rest.split_once(':') {
            Some((value, "preempting")) => (value, true),
            Some((_, other)) => {
                return Err(format!(
                    "{text:?}: {other:?} is not a class option (only \"preempting\")"
                ))
            }
            None => (rest, false),
        };
        let value = value
            .trim()
            .parse::<i32>()
            .map_err(|_| format!("{text:?}: the value must be a whole number"))?;
        Ok(PriorityClass {
            name: name.to_string(),
            value,
            preempting,
        })
    }
}

/// The coordinator's classes, highest value first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClasses {
    classes: Vec<PriorityClass>,
}

impl Default for PriorityClasses {
    /// `low=-100`, `normal=0` (the default class), `high=100:preempting`,
    /// `urgent=1000:preempting`.
    fn default() -> Self {
        let class = |name: &str, value, preempting| PriorityClass {
            name: name.into(),
            value,
            preempting,
        };
        Self::sorted(vec![
            class("low", -100, false),
            class(DEFAULT_CLASS, 0, false),
            class("high", 100, true),
            class("urgent", 1000, true),
        ])
    }
}

impl PriorityClasses {
    fn sorted(mut classes: Vec<PriorityClass>) -> Self {
        classes.sort_by(|a, b| b.value.cmp(&a.value).then(a.name.cmp(&b.name)));
        Self { classes }
    }

    /// The defaults with `given` added, a given class replacing the default
    /// of the same name.
    pub fn with(given: Vec<PriorityClass>) -> Self {
        let mut classes = Self::default().classes;
        for class in given {
            classes.retain(|c| c.name != class.name);
            classes.push(class);
        }
        Self::sorted(classes)
    }

    pub fn get(&self, name: &str) -> Option<&PriorityClass> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// The class of a training that names none.
    pub fn default_class(&self) -> &PriorityClass {
        self.get(DEFAULT_CLASS)
            .expect("the default class is always defined")
    }

    /// Every class, highest value first.
    pub fn all(&self) -> &[PriorityClass] {
        &self.classes
    }

    /// Whether a training of class `name` may preempt (an unknown or empty
    /// name: no).
    pub fn preempting(&self, name: &str) -> bool {
        self.get(name).is_some_and(|c| c.preempting)
    }

    /// The names, for an error that lists them: `low, normal, high, urgent`.
    pub fn names(&self) -> String {
        let mut names: Vec<&PriorityClass> = self.classes.iter().collect();
        names.sort_by_key(|c| c.value);
        names
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_override() {
        let classes = PriorityClasses::default();
        assert_eq!(classes.default_class().value, 0);
        assert!(classes.preempting("urgent") && classes.preempting("high"));
        assert!(!classes.preempting("low") && !classes.preempting("nope"));
        assert_eq!(classes.names(), "low, normal, high, urgent");
        let mine: PriorityClass = "batch=-50".parse().unwrap();
        let high: PriorityClass = "high=200:preempting".parse().unwrap();
        assert_eq!(high.to_string(), "high=200:preempting");
        let classes = PriorityClasses::with(vec![mine, high]);
        assert_eq!(classes.get("high").unwrap().value, 200);
        assert_eq!(classes.get("batch").unwrap().value, -50);
        assert_eq!(classes.all()[0].name, "urgent");
        for bad in ["x", "=1", "Big=1", "a=b", "a=1:later", "a=99999999999"] {
            assert!(bad.parse::<PriorityClass>().is_err(), "{bad}");
        }
    }
}
