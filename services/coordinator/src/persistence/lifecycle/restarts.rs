//! A gang restart's write: the training to RESTARTING, one restart of its
//! budget spent, and the next attempt's config, in one transaction.

use crate::model::{JobState, Training};
use crate::persistence::schema::trainings;
use crate::persistence::trainings::transition_in;
use crate::persistence::{DatabaseError, Persistence};
use diesel::prelude::*;

impl Persistence {
    /// Moves a SCHEDULED or RUNNING training to RESTARTING and spends one
    /// restart of its budget, atomically; with `next_config`, the next
    /// attempt's config (a smaller batch, a lower learning rate) too.
    pub async fn begin_restart(
        &self,
        training_id: &str,
        cause: &str,
        next_config: Option<&cohort_spec::Workload>,
    ) -> Result<Training, DatabaseError> {
        let (id, cause) = (training_id.to_string(), cause.to_string());
        let next = next_config.cloned();
        self.transaction_noting("begin_restart", move |c, out| {
            let t = transition_in(c, out, &id, JobState::Restarting, &cause)?;
            diesel::update(trainings::table.find(&id))
                .set(trainings::restart_count.eq(trainings::restart_count + 1))
                .execute(c)?;
            if let Some(config) = &next {
                diesel::update(trainings::table.find(&id))
                    .set(trainings::config_json.eq(config.to_json()))
                    .execute(c)?;
            }
            Ok(Training {
                restart_count: t.restart_count + 1,
                config: next.clone().unwrap_or_else(|| t.config.clone()),
                ..t
            })
        })
        .await
    }
}
