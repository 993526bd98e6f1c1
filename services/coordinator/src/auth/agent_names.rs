//! `--agent-names ISSUER=PATTERN[,PATTERN...]`: which agent names each agent
//! CA may certify.
//!
//! `--agent-ca` may hold several CAs (one per rack, site or team), and a CA
//! that signs agents may sign other things too. With an allowlist, an agent
//! registers only under a name its certificate's issuer (the issuing CA's
//! common name) is allowed to give: `rack-a CA=gpu-a-*` lets rack A's CA
//! certify `gpu-a-01` but not `gpu-b-01`. Once any allowlist is given, a CA
//! without one certifies no agent. Patterns match the whole name; `*`
//! matches any run of characters.

use std::str::FromStr;

/// The allowlists, by issuer; empty: every name of every CA is allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentNames {
    lists: Vec<(String, Vec<String>)>,
}

/// One `--agent-names` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentNamesFlag {
    issuer: String,
    patterns: Vec<String>,
}

impl FromStr for AgentNamesFlag {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (issuer, patterns) = s.rsplit_once('=').ok_or_else(|| {
            format!("{s:?}: expected ISSUER=PATTERN[,PATTERN...] (the issuing CA's common name)")
        })?;
        let issuer = issuer.trim();
        let patterns: Vec<String> = patterns
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if issuer.is_empty() || patterns.is_empty() {
            return Err(format!(
                "{s:?}: an issuer and at least one pattern are needed"
            ));
        }
        Ok(Self {
            issuer: issuer.to_string(),
            patterns,
        })
    }
}

impl AgentNames {
    pub fn new(flags: &[AgentNamesFlag]) -> Self {
        let mut lists: Vec<(String, Vec<String>)> = Vec::new();
        for flag in flags {
            match lists.iter_mut().find(|(issuer, _)| *issuer == flag.issuer) {
                Some((_, patterns)) => patterns.extend(flag.patterns.iter().cloned()),
                None => lists.push((flag.issuer.clone(), flag.patterns.clone())),
            }
        }
        Self { lists }
    }

    /// Whether an agent whose certificate `issuer` issued may register as
    /// `name`.
    pub fn allows(&self, issuer: Option<&str>, name: &str) -> bool {
        if self.lists.is_empty() {
            return true;
        }
        let Some(issuer) = issuer else {
            return false;
        };
        self.lists
            .iter()
            .filter(|(i, _)| i == issuer)
            .flat_map(|(_, patterns)| patterns)
            .any(|p| glob(p, name))
    }

    /// The patterns `issuer` may certify (for a refusal's message).
    pub fn patterns_of(&self, issuer: Option<&str>) -> Vec<String> {
        self.lists
            .iter()
            .filter(|(i, _)| Some(i.as_str()) == issuer)
            .flat_map(|(_, p)| p.iter().cloned())
            .collect()
    }
}

/// Whether `name` matches `pattern` whole; `*` matches any run.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    if !name.ends_with(last) {
        return false;
    }
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(flags: &[&str]) -> AgentNames {
        AgentNames::new(&flags.iter().map(|f| f.parse().unwrap()).collect::<Vec<_>>())
    }

    #[test]
    fn each_ca_certifies_only_its_own_names() {
        let n = names(&[
            "rack-a CA=gpu-a-*",
            "rack-b CA=gpu-b-*,spare",
            "rack-a CA=login",
        ]);
        assert!(n.allows(Some("rack-a CA"), "gpu-a-01"));
        assert!(n.allows(Some("rack-a CA"), "login"));
        assert!(!n.allows(Some("rack-a CA"), "gpu-b-01"));
        assert!(n.allows(Some("rack-b CA"), "spare"));
        assert!(
            !n.allows(Some("rack-b CA"), "spare-2"),
            "patterns match whole names"
        );
        assert!(
            !n.allows(Some("other CA"), "gpu-a-01"),
            "a CA without a list certifies none"
        );
        assert!(!n.allows(None, "gpu-a-01"));
        assert!(AgentNames::default().allows(None, "anything"));
        assert_eq!(n.patterns_of(Some("rack-b CA")), vec!["gpu-b-*", "spare"]);
    }

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("*", ""));
        assert!(glob("gpu-*-x", "gpu-1-x"));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b*c", "aXcYb"));
        assert!(!glob("ab*ba", "aba"), "the ends may not overlap");
        assert!(glob("node", "node") && !glob("node", "node2"));
    }

    #[test]
    fn bad_flags_say_what_is_expected() {
        for bad in ["no-equals", "=gpu-*", "CA=", "CA= , "] {
            let e = bad.parse::<AgentNamesFlag>().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}
