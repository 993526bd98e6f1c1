//! Training labels: one `training_labels` row per label, written with the
//! training, for ListTrainings' label filter (the row's `labels_json` is
//! what describing a training reads).

use super::connection::on_backend;
use super::rows::TrainingRow;
use super::schema::training_labels;
use super::{DatabaseError, DbConnection};
use diesel::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Insertable)]
#[diesel(table_name = training_labels)]
struct LabelRow<'a> {
    training_id: &'a str,
    key: &'a str,
    value: &'a str,
}

/// The label rows of new trainings, inside the caller's transaction.
pub(super) fn insert_in(
    conn: &mut DbConnection,
    rows: &[TrainingRow],
) -> Result<(), DatabaseError> {
    let parsed: Vec<(&str, BTreeMap<String, String>)> = rows
        .iter()
        .filter(|r| r.labels_json != "{}")
        .map(|r| {
            serde_json::from_str(&r.labels_json)
                .map(|labels| (r.id.as_str(), labels))
                .map_err(|e| DatabaseError::Corrupt(format!("training {} labels: {e}", r.id)))
        })
        .collect::<Result<_, _>>()?;
    let labels: Vec<LabelRow> = parsed
        .iter()
        .flat_map(|(id, labels)| {
            labels.iter().map(|(key, value)| LabelRow {
                training_id: id,
                key,
                value,
            })
        })
        .collect();
    if labels.is_empty() {
        return Ok(());
    }
    on_backend!(conn, |c| diesel::insert_into(training_labels::table)
        .values(&labels)
        .execute(c))?;
    Ok(())
}
