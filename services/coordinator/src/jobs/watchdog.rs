//! The watchdog, run with every scheduling pass: agents that stopped
//! heartbeating are dropped, agents missing longer than the agent timeout are
//! lost (their trainings restart elsewhere), and running attempts silent past
//! their hang deadline are restarted with cause HANG.

use super::Jobs;
use crate::model::{JobState, RankState};
use crate::persistence::DatabaseError;
use tokio::time::Instant;

impl Jobs {
    pub(super) async fn watchdog_pass(&self) -> Result<(), DatabaseError> {
        let timeout = self.settings.agent_timeout;
        // A connected agent that stopped talking is as good as gone.
        for agent in self.fleet.agents() {
            if agent.last_seen.elapsed() > timeout {
                tracing::warn!(agent_id = %agent.id, name = %agent.name, silent_s = agent.last_seen.elapsed().as_secs(), "agent stopped heartbeating: dropping it");
                if self.fleet.disconnect(&agent.id, agent.session) {
                    self.db.agent_disconnected(&agent.id).await?;
                }
            }
        }
        let noticed: std::collections::HashSet<(String, i32)> = self
            .db
            .notices()
            .await?
            .into_iter()
            .map(|n| (n.training_id, n.attempt))
            .collect();
        for (training, ranks) in self.db.active_placements().await? {
            // A noticed gang stops anyway: its lost agents and silence
            // are the notice pass's (no restart is spent on them).
            let noticed = noticed.contains(&(training.id.clone(), training.attempt));
            // Lost agents holding live ranks of this attempt.
            let mut lost = Vec::new();
            for r in ranks
                .iter()
                .filter(|r| matches!(r.state, RankState::Pending | RankState::Running))
            {
                let agent = &r.slot.agent_id;
                if self.fleet.is_connected(agent) {
                    self.rt().missing_since.remove(agent);
                    continue;
                }
                let since = *self
                    .rt()
                    .missing_since
                    .entry(agent.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() > timeout && !lost.contains(agent) {
                    lost.push(agent.clone());
                }
            }
            if noticed {
                continue;
            }
            if !lost.is_empty() {
                let names: Vec<String> = self
                    .db
                    .list_agents()
                    .await?
                    .into_iter()
                    .filter(|a| lost.contains(&a.id))
                    .map(|a| a.name)
                    .collect();
                for agent in &lost {
                    let ranks = self
                        .db
                        .ranks_lost_on_agent(&training.id, training.attempt, agent)
                        .await?;
                    for r in ranks.iter().filter(|r| &r.slot.agent_id == agent) {
                        self.avoid_gpu(&training.id, &r.slot.gpu_uuid);
                    }
                }
                let cause = format!(
                    "agent {} lost: no heartbeat for {} s",
                    names.join(", "),
                    timeout.as_secs()
                );
                tracing::warn!(training_id = %training.id, cause = %cause, "agent lost");
                self.restart_or_fail(&training.id, training.attempt, &cause, None)
                    .await?;
                continue;
            }
            // Hangs: the attempt's reports stopped.
            if training.state != JobState::Running {
                continue;
            }
            let verdict = {
                let rt = self.rt();
                rt.get(&training.id)
                    .and_then(|t| t.progress.as_ref())
                    .filter(|p| p.attempt == training.attempt)
                    .and_then(|p| {
                        let deadline =
                            p.hang_deadline(self.settings.hang_factor, self.settings.hang_floor);
                        let silent = p.last_report.elapsed();
                        (silent > deadline).then_some((silent, deadline))
                    })
            };
            if let Some((silent, deadline)) = verdict {
                let cause = format!(
                    "HANG: no progress from any rank for {} s (deadline {} s)",
                    silent.as_secs(),
                    deadline.as_secs()
                );
                self.restart_or_fail(&training.id, training.attempt, &cause, None)
                    .await?;
            }
        }
        Ok(())
    }
}
