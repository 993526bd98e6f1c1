//! Training labels: one `training_labels` row per label, written with the
//! training, for ListTrainings' label filter (the row's `labels_json` is
//! what describing a training reads).

use super::rows::TrainingRow;
use super::schema::training_labels;
use super::DatabaseError;
use diesel::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Insertable)]
#[diesel(table_name = training_labels)]
pub(super) struct LabelRow<'a> {
    pub training_id: &'a str,
    pub key: &'a str,
    pub value: &'a str,
}

/// A training's id and its labels.
pub(super) type Labelled<'a> = (&'a str, BTreeMap<String, String>);

/// The labels of new trainings, by training id (those without labels left out).
pub(super) fn parse(rows: &[TrainingRow]) -> Result<Vec<Labelled<'_>>, DatabaseError> {
    rows.iter()
        .filter(|r| r.labels_json != "{}")
        .map(|r| {
            serde_json::from_str(&r.labels_json)
                .map(|labels| (r.id.as_str(), labels))
                .map_err(|e| DatabaseError::Corrupt(format!("training {} labels: {e}", r.id)))
        })
        .collect()
}

/// One `training_labels` row per label of [`parse`]'s trainings.
pub(super) fn rows_of<'a>(parsed: &'a [Labelled<'a>]) -> Vec<LabelRow<'a>> {
    parsed
        .iter()
        .flat_map(|(id, labels)| {
            labels.iter().map(|(key, value)| LabelRow {
                training_id: id,
                key,
                value,
            })
        })
        .collect()
}
