//! Agents and their GPUs: written when an agent registers (one transaction:
//! the agent row and exactly the GPUs it reported) and when it goes away.
//! A GPU is bound to the first agent that registered it: another agent
//! reporting its UUID is refused ([`LogicalError::GpuClaimed`]) and nothing
//! is written, until a cluster-admin forgets the first agent.

use super::rows::{now, to_db_time};
use super::schema::{agents, gpus};
use super::{DatabaseError, DbConnection, LogicalError, Persistence};
use crate::model::{AgentRecord, DoctorReport, GpuRecord};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use std::collections::HashMap;

/// What an agent says about itself when it registers.
#[derive(Debug, Clone)]
pub struct AgentRegistration {
    pub name: String,
    pub host_name: String,
    pub address: String,
    pub version: String,
    pub gpus: Vec<GpuRecord>,
}

#[derive(Queryable)]
struct AgentRow {
    id: String,
    name: String,
    host_name: String,
    address: String,
    version: String,
    connected: bool,
    connect_time: NaiveDateTime,
    last_seen_time: NaiveDateTime,
    doctor_json: Option<String>,
    cordon_reason: Option<String>,
    drain_deadline: Option<NaiveDateTime>,
}

#[derive(Queryable)]
struct GpuRow {
    uuid: String,
    agent_id: String,
    gpu_index: i32,
    name: String,
    memory_total_bytes: i64,
    compute_capability: String,
    simulated: bool,
    #[allow(dead_code)]
    last_seen_time: NaiveDateTime,
    quarantine_reason: Option<String>,
}

fn register_in(conn: &mut DbConnection, reg: &AgentRegistration) -> Result<String, DatabaseError> {
    let at = to_db_time(now());
    let existing: Option<String> = agents::table
        .filter(agents::name.eq(&reg.name))
        .select(agents::id)
        .first(conn)
        .optional()?;
    let id = match existing {
        Some(id) => {
            diesel::update(agents::table.find(&id))
                .set((
                    agents::host_name.eq(&reg.host_name),
                    agents::address.eq(&reg.address),
                    agents::version.eq(&reg.version),
                    agents::connected.eq(true),
                    agents::connect_time.eq(at),
                    agents::last_seen_time.eq(at),
                ))
                .execute(conn)?;
            id
        }
        None => {
            let id = format!("agt-{}", uuid::Uuid::new_v4().simple());
            diesel::insert_into(agents::table)
                .values((
                    agents::id.eq(&id),
                    agents::name.eq(&reg.name),
                    agents::host_name.eq(&reg.host_name),
                    agents::address.eq(&reg.address),
                    agents::version.eq(&reg.version),
                    agents::connected.eq(true),
                    agents::connect_time.eq(at),
                    agents::last_seen_time.eq(at),
                ))
                .execute(conn)?;
            id
        }
    };
    // Exactly the GPUs reported now: drop the agent's others, upsert these.
    let uuids: Vec<&str> = reg.gpus.iter().map(|g| g.uuid.as_str()).collect();
    // None of them may be another agent's.
    let claimed: Option<(String, String)> = gpus::table
        .inner_join(agents::table)
        .filter(gpus::uuid.eq_any(&uuids))
        .filter(gpus::agent_id.ne(&id))
        .select((gpus::uuid, agents::name))
        .first(conn)
        .optional()?;
    if let Some((uuid, owner)) = claimed {
        return Err(DatabaseError::Logical(LogicalError::GpuClaimed {
            uuid,
            owner,
        }));
    }
    diesel::delete(
        gpus::table
            .filter(gpus::agent_id.eq(&id))
            .filter(gpus::uuid.ne_all(&uuids)),
    )
    .execute(conn)?;
    // A quarantine outlives the row's rewrite (until an admin releases it).
    let quarantined: HashMap<String, String> = gpus::table
        .filter(gpus::uuid.eq_any(&uuids))
        .filter(gpus::quarantine_reason.is_not_null())
        .select((gpus::uuid, gpus::quarantine_reason.assume_not_null()))
        .load::<(String, String)>(conn)?
        .into_iter()
        .collect();
    for g in &reg.gpus {
        diesel::delete(gpus::table.find(&g.uuid)).execute(conn)?;
        // an index freed by a GPU swap may still be held by another uuid
        diesel::delete(
            gpus::table
                .filter(gpus::agent_id.eq(&id))
                .filter(gpus::gpu_index.eq(g.index)),
        )
        .execute(conn)?;
        diesel::insert_into(gpus::table)
            .values((
                gpus::uuid.eq(&g.uuid),
                gpus::agent_id.eq(&id),
                gpus::gpu_index.eq(g.index),
                gpus::name.eq(&g.name),
                gpus::memory_total_bytes
                    .eq(i64::try_from(g.memory_total_bytes).unwrap_or(i64::MAX)),
                gpus::compute_capability.eq(&g.compute_capability),
                gpus::simulated.eq(g.simulated),
                gpus::last_seen_time.eq(at),
                gpus::quarantine_reason.eq(quarantined.get(&g.uuid)),
            ))
            .execute(conn)?;
    }
    Ok(id)
}

/// Every agent with its GPUs, by name; only the one named `only` when given.
fn list_in(conn: &mut DbConnection, only: Option<&str>) -> Result<Vec<AgentRecord>, DatabaseError> {
    let mut agents_query = agents::table.order(agents::name.asc()).into_boxed();
    if let Some(name) = only {
        agents_query = agents_query.filter(agents::name.eq(name));
    }
    let rows: Vec<AgentRow> = agents_query.load(conn)?;
    let mut gpus_query = gpus::table
        .order((gpus::agent_id.asc(), gpus::gpu_index.asc()))
        .into_boxed();
    if only.is_some() {
        gpus_query = gpus_query.filter(gpus::agent_id.eq_any(rows.iter().map(|a| a.id.clone())));
    }
    let gpu_rows: Vec<GpuRow> = gpus_query.load(conn)?;
    // Grouped once (in index order): 1,000 agents x 8,000 GPUs matched by
    // scanning would be 8 million comparisons.
    let mut by_agent: HashMap<String, Vec<GpuRecord>> = HashMap::new();
    for g in gpu_rows {
        by_agent.entry(g.agent_id).or_default().push(GpuRecord {
            uuid: g.uuid,
            index: g.gpu_index,
            name: g.name,
            memory_total_bytes: u64::try_from(g.memory_total_bytes).unwrap_or(0),
            compute_capability: g.compute_capability,
            simulated: g.simulated,
            quarantine: g.quarantine_reason,
        });
    }
    Ok(rows
        .into_iter()
        .map(|a| AgentRecord {
            gpus: by_agent.remove(&a.id).unwrap_or_default(),
            id: a.id,
            name: a.name,
            host_name: a.host_name,
            address: a.address,
            version: a.version,
            connected: a.connected,
            connect_time: a.connect_time.and_utc(),
            last_seen_time: a.last_seen_time.and_utc(),
            // A row written by a later version that this one cannot read
            // shows no report rather than failing the list.
            last_doctor: a
                .doctor_json
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok()),
            cordon_reason: a.cordon_reason,
            drain_deadline: a.drain_deadline.map(|t| t.and_utc()),
        })
        .collect())
}

impl Persistence {
    /// Records an agent's (re)registration and its GPUs; returns its stable id
    /// (the same agent name keeps its id across reconnects).
    pub async fn register_agent(&self, reg: AgentRegistration) -> Result<String, DatabaseError> {
        self.transaction("register_agent", move |c| register_in(c, &reg))
            .await
    }

    /// Forgets a disconnected agent that holds no ranks of a placed
    /// training: its row and its GPUs' bindings go (the ranks of finished
    /// trainings keep its id), so another agent may register those GPUs.
    /// Its audit row is written in the same transaction.
    pub async fn forget_agent(
        &self,
        name: &str,
        audit: crate::model::AuditEntry,
    ) -> Result<String, DatabaseError> {
        let name = name.to_string();
        self.transaction("forget_agent", move |c| {
            let found: Option<(String, bool)> = agents::table
                .filter(agents::name.eq(&name))
                .select((agents::id, agents::connected))
                .first(c)
                .optional()?;
            let Some((id, connected)) = found else {
                return Err(DatabaseError::Logical(LogicalError::AgentNotFound(
                    name.clone(),
                )));
            };
            if connected {
                return Err(DatabaseError::Logical(LogicalError::AgentBusy {
                    name: name.clone(),
                    why: "is connected".into(),
                }));
            }
            let busy = super::maintenance::placed_ranks_in(c, &id)?;
            if busy > 0 {
                return Err(DatabaseError::Logical(LogicalError::AgentBusy {
                    name: name.clone(),
                    why: format!("holds {busy} rank(s) of placed trainings"),
                }));
            }
            diesel::delete(gpus::table.filter(gpus::agent_id.eq(&id))).execute(c)?;
            diesel::delete(agents::table.find(&id)).execute(c)?;
            super::audit::insert_in(c, &audit, now())?;
            Ok(id)
        })
        .await
    }

    /// Marks an agent disconnected (its rows stay for history).
    pub async fn agent_disconnected(&self, agent_id: &str) -> Result<(), DatabaseError> {
        let id = agent_id.to_string();
        self.transaction("agent_disconnected", move |c| {
            diesel::update(agents::table.find(&id))
                .set((
                    agents::connected.eq(false),
                    agents::last_seen_time.eq(to_db_time(now())),
                ))
                .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Marks every agent disconnected: at start-up no session is open yet.
    pub async fn disconnect_all_agents(&self) -> Result<(), DatabaseError> {
        self.transaction("disconnect_all_agents", |c| {
            diesel::update(agents::table)
                .set(agents::connected.eq(false))
                .execute(c)?;
            Ok(())
        })
        .await
    }

    /// Every known agent with its GPUs, by name.
    pub async fn list_agents(&self) -> Result<Vec<AgentRecord>, DatabaseError> {
        self.read("list_agents", |c| list_in(c, None)).await
    }

    /// The agent named `name`, with its GPUs, if it ever registered.
    pub async fn agent_named(&self, name: &str) -> Result<Option<AgentRecord>, DatabaseError> {
        let name = name.to_string();
        self.read("agent_named", move |c| Ok(list_in(c, Some(&name))?.pop()))
            .await
    }

    /// Keeps `report` as agent `agent_id`'s latest doctor report, with the
    /// audit row of the RunDoctor that made it, in one transaction.
    pub async fn save_doctor(
        &self,
        agent_id: &str,
        report: &DoctorReport,
        audit: crate::model::AuditEntry,
    ) -> Result<(), DatabaseError> {
        let id = agent_id.to_string();
        let json = serde_json::to_string(report)
            .map_err(|e| DatabaseError::Corrupt(format!("doctor report: {e}")))?;
        self.transaction("save_doctor", move |c| {
            diesel::update(agents::table.find(&id))
                .set(agents::doctor_json.eq(Some(&json)))
                .execute(c)?;
            super::audit::insert_in(c, &audit, now())?;
            Ok(())
        })
        .await
    }

    /// The name agent `id` registered under, if it is known.
    pub async fn agent_name(&self, id: &str) -> Result<Option<String>, DatabaseError> {
        let id = id.to_string();
        self.read("agent_name", move |c| {
            Ok(agents::table
                .find(&id)
                .select(agents::name)
                .first::<String>(c)
                .optional()?)
        })
        .await
    }

    /// The model name of a GPU, if it was ever registered.
    pub async fn gpu_name(&self, uuid: &str) -> Result<Option<String>, DatabaseError> {
        let uuid = uuid.to_string();
        self.read("gpu_name", move |c| {
            Ok(gpus::table
                .find(&uuid)
                .select(gpus::name)
                .first::<String>(c)
                .optional()?)
        })
        .await
    }
}

/// The host names of the agents `ids` (those known): what a rank map shows
/// beside each rank, without reading every agent and GPU.
pub(crate) fn agent_hosts_in(
    c: &mut DbConnection,
    ids: &[&str],
) -> Result<HashMap<String, String>, DatabaseError> {
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(1000) {
        out.extend(
            agents::table
                .filter(agents::id.eq_any(chunk))
                .select((agents::id, agents::host_name))
                .load::<(String, String)>(c)?,
        );
    }
    Ok(out)
}
