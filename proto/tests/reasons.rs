//! The stable ErrorInfo reasons are defined once (`cohort_proto::error::Reason`);
//! the two places users read them — docs/api.md's error table and the error
//! model in common.proto — must list exactly those.

use cohort_proto::error::Reason;
use std::collections::BTreeSet;

fn read(relative: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn defined() -> BTreeSet<String> {
    Reason::ALL.iter().map(|r| r.as_str().to_string()).collect()
}

#[test]
fn docs_api_error_table_lists_every_reason_and_no_other() {
    let doc = read("../docs/api.md");
    let table: BTreeSet<String> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| code | reason | when |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.split('|')
                .nth(2)
                .expect("a reason column")
                .trim()
                .to_string()
        })
        .collect();
    assert_eq!(table, defined(), "docs/api.md's error table vs Reason::ALL");
}

#[test]
fn common_proto_error_model_lists_every_reason_and_no_other() {
    let proto = read("cohort/v1/common.proto");
    let listed: BTreeSet<String> = proto
        .lines()
        .filter_map(|l| l.strip_prefix("//   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(str::to_string)
        .collect();
    assert_eq!(
        listed,
        defined(),
        "common.proto's error model vs Reason::ALL"
    );
}
