//! Environment files: the variables an agent gives ranks
//! (`--rank-env-file`, `--team-env-file TEAM=FILE`) and a coordinator uses
//! for a team's storage (`--team-env-file`). Ranks get a clean environment;
//! these files are how credentials reach them, per team.
//!
//! One `NAME=VALUE` per line; blank lines and lines starting with `#` are
//! skipped; an `export ` prefix is allowed; a value may be wrapped in single
//! or double quotes (taken literally, no escapes or expansion). Names are
//! `[A-Za-z_][A-Za-z0-9_]*`. A name given twice is an error.

/// The most variables one file may set.
pub const MAX_VARS: usize = 1024;
/// The longest line accepted.
pub const MAX_LINE: usize = 64 * 1024;

/// Parses an environment file's text; errors name the line.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        if raw.len() > MAX_LINE {
            return Err(format!("line {line_no}: longer than {MAX_LINE} bytes"));
        }
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| format!("line {line_no}: expected NAME=VALUE"))?;
        let name = name.trim();
        if !is_name(name) {
            return Err(format!("line {line_no}: {name:?} is not a variable name"));
        }
        if vars.iter().any(|(k, _)| k == name) {
            return Err(format!("line {line_no}: {name} is set twice"));
        }
        if vars.len() == MAX_VARS {
            return Err(format!("more than {MAX_VARS} variables"));
        }
        vars.push((name.to_string(), unquote(value.trim(), line_no)?));
    }
    Ok(vars)
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn unquote(value: &str, line_no: usize) -> Result<String, String> {
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote) {
            return rest
                .strip_suffix(quote)
                .map(str::to_string)
                .ok_or_else(|| format!("line {line_no}: unterminated {quote} quote"));
        }
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let vars = parse(
            "# credentials of team vision\n\nAWS_ACCESS_KEY_ID=AKIA1\nexport AWS_REGION = eu-west-1\nTOKEN=\"a b=c\"\nEMPTY=\nSINGLE='x#y'\n",
        )
        .unwrap();
        assert_eq!(
            vars,
            vec![
                ("AWS_ACCESS_KEY_ID".into(), "AKIA1".into()),
                ("AWS_REGION".into(), "eu-west-1".into()),
                ("TOKEN".into(), "a b=c".into()),
                ("EMPTY".into(), String::new()),
                ("SINGLE".into(), "x#y".into()),
            ]
        );
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, want) in [
            ("JUST_A_NAME\n", "line 1: expected NAME=VALUE"),
            ("A=1\n1A=2\n", "line 2"),
            ("A=1\nA=2\n", "A is set twice"),
            ("A=\"open\n", "unterminated"),
            ("A-B=1\n", "not a variable name"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
