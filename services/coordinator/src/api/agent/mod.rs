//! AgentService: the agents' Connect stream and ListAgents (every agent ever
//! registered, connected or not).
//!
//! A Connect stream is [`register`]ed, then served by its [`session`], which
//! hands each message to a handler: [`samples`] (telemetry) and
//! [`rank_events`]. An agent may speak only of the GPUs it registered and
//! the ranks placed on it; anything else is refused and counted
//! ([`Refusals`](crate::fleet::Refusals), exported as metrics).

mod convert;
mod doctor;
mod fetch;
#[cfg(test)]
mod fuzz;
mod maintenance;
mod rank_events;
mod register;
mod samples;
mod session;
mod state;

pub use register::{HEARTBEAT_INTERVAL, REGISTER_TIMEOUT, TELEMETRY_INTERVAL};

use super::error::ApiError;
use crate::context::Context;
use crate::fleet::AgentCommand;
use cohort_proto::v1;
use cohort_proto::v1::agent_service_server::AgentService;
use tokio_stream::wrappers::{ReceiverStream, WatchStream};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::api::StatusStream as BoxStream;

#[derive(Debug, Clone)]
pub struct AgentApi {
    ctx: Context,
}

impl AgentApi {
    pub fn new(ctx: Context) -> Self {
        Self { ctx }
    }
}

#[tonic::async_trait]
impl AgentService for AgentApi {
    type ConnectStream = BoxStream<v1::CoordinatorMessage>;

    async fn connect(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let ctx = self.ctx.clone();
        // A session begins once the leader's work runs (at start-up and
        // after a takeover): samples sent earlier would reach no history
        // writer, and the start-up reset would mark the agent disconnected.
        if !ctx.leadership.wait_working(REGISTER_TIMEOUT).await {
            let leader = ctx.leadership.role().leader_hint().map(str::to_string);
            return Err(crate::leader::gate::not_leader(
                "/cohort.v1.AgentService/Connect",
                leader.as_deref(),
            ));
        }
        // An agent with a client certificate speaks only as that identity.
        let identity = match super::caller::caller(&ctx, &request)? {
            crate::model::Principal::Agent { name } => Some(name),
            _ => None,
        };
        // Its certificate as presented, checked again at every --agent-ca reload.
        let chain = request
            .extensions()
            .get::<crate::tls::PeerInfo>()
            .map(|p| p.chain.clone())
            .unwrap_or_default();
        let issuer = chain.first().and_then(crate::tls::issuer_of);
        let mut accepted =
            register::accept(ctx.clone(), identity, issuer, request.into_inner()).await?;
        // The member set goes with Registered, then again at every change.
        if let Some(v1::coordinator_message::Message::Registered(r)) =
            accepted.registered.message.as_mut()
        {
            r.members = Some(v1::Members {
                coordinators: ctx.leadership.members(),
            });
        }
        let changes = WatchStream::from_changes(ctx.leadership.subscribe_members())
            .map(|members| Some(AgentCommand::Members(members)));
        // A reloaded --agent-ca that refuses this agent's certificate ends
        // the session (the `None`).
        let agent_ca = ctx.agent_ca.clone();
        let untrusted = tokio_stream::once(())
            .then(move |()| {
                let (agent_ca, chain) = (agent_ca.clone(), chain.clone());
                async move { agent_ca.refused(&chain).await }
            })
            .map(|()| None);
        // The session ends with its command channel (the `None` after it),
        // whatever the member set does.
        let commands = ReceiverStream::new(accepted.commands)
            .map(Some)
            .chain(tokio_stream::once(None))
            .merge(changes)
            .merge(untrusted)
            .map_while(|command| command);
        // Every command carries the epoch it is sent under; none goes out
        // once this coordinator no longer leads (the session ends instead).
        let leadership = ctx.leadership.clone();
        let commands = commands.map_while(move |command| {
            let crate::leader::Role::Leader { epoch } = leadership.role() else {
                tracing::warn!(
                    "no longer leading: ending an agent session instead of sending it a command"
                );
                return None;
            };
            let mut message = v1::CoordinatorMessage::from(command);
            message.leader_epoch = u64::try_from(epoch).unwrap_or(0);
            Some(message)
        });
        let stream = tokio_stream::once(accepted.registered).chain(commands);
        Ok(Response::new(ctx.until_stopping(stream.map(Ok))))
    }

    type FetchCheckpointStream = BoxStream<v1::CheckpointChunk>;

    async fn fetch_checkpoint(
        &self,
        request: Request<v1::FetchCheckpointRequest>,
    ) -> Result<Response<Self::FetchCheckpointStream>, Status> {
        let who = super::caller::caller(&self.ctx, &request)?;
        fetch::fetch(&self.ctx, who, request.into_inner())
            .await
            .map(Response::new)
    }

    type FetchCodeStream = BoxStream<v1::CodeChunk>;

    async fn fetch_code(
        &self,
        request: Request<v1::FetchCodeRequest>,
    ) -> Result<Response<Self::FetchCodeStream>, Status> {
        let who = super::caller::caller(&self.ctx, &request)?;
        let req = request.into_inner();
        let agent = fetch::fetching_agent(&self.ctx, &who, &req.agent_id)?;
        tracing::info!(agent = %agent.name, sha256 = %req.sha256, "an agent fetches a code snapshot");
        let (fleet, id) = (self.ctx.fleet.clone(), agent.id);
        crate::api::code::fetch(&self.ctx.code, req.sha256, move || fleet.touch(&id))
            .await
            .map(Response::new)
    }

    async fn list_agents(
        &self,
        _request: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        let agents = self.ctx.db.list_agents().await.map_err(ApiError::from)?;
        let agents = agents
            .into_iter()
            .map(|a| maintenance::agent_message(&self.ctx, a))
            .collect();
        Ok(Response::new(v1::ListAgentsResponse {
            agents,
            next_page_token: String::new(),
        }))
    }

    async fn run_doctor(
        &self,
        request: Request<v1::RunDoctorRequest>,
    ) -> Result<Response<v1::DoctorReport>, Status> {
        let who = super::caller::caller(&self.ctx, &request)?;
        let report = doctor::run(&self.ctx, &who, request.into_inner()).await?;
        Ok(Response::new(report))
    }

    async fn cordon_agent(
        &self,
        request: Request<v1::CordonAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let who = super::caller::caller(&self.ctx, &request)?;
        let r = request.into_inner();
        let change = maintenance::Change::Cordon { reason: r.reason };
        Ok(Response::new(
            maintenance::apply(&self.ctx, &who, &r.agent, change).await?,
        ))
    }

    async fn uncordon_agent(
        &self,
        request: Request<v1::UncordonAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let who = super::caller::caller(&self.ctx, &request)?;
        let r = request.into_inner();
        let change = maintenance::Change::Uncordon;
        Ok(Response::new(
            maintenance::apply(&self.ctx, &who, &r.agent, change).await?,
        ))
    }

    async fn drain_agent(
        &self,
        request: Request<v1::DrainAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let who = super::caller::caller(&self.ctx, &request)?;
        let r = request.into_inner();
        let change = maintenance::Change::Drain {
            reason: r.reason,
            deadline: r.deadline,
        };
        Ok(Response::new(
            maintenance::apply(&self.ctx, &who, &r.agent, change).await?,
        ))
    }
}
