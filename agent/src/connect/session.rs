//! One session on the `AgentService.Connect` stream: Register, wait for
//! Registered, then heartbeats, telemetry and rank events out, commands in.

use std::time::{Duration, SystemTime};

use cohort_proto::v1;
use cohort_proto::v1::agent_message::Message as Out;
use cohort_proto::v1::agent_service_client::AgentServiceClient;
use cohort_proto::v1::coordinator_message::Message as In;
use thiserror::Error;
use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::Streaming;

use super::{commands, convert, doctor, files, stopped, Agent};
use crate::telemetry;

/// Messages queued for the stream before the sender waits.
const OUTBOUND_CAPACITY: usize = 256;
/// How long dialling the coordinator may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 pings on the session's connection, and how long one may go unanswered.
/// Short, so a frozen leader (its host hung, its process stopped) is left
/// within about 4 s — before its 5 s lease runs out — for the coordinator
/// that takes the lease (docs/benchmarks.md, failover).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a coordinator has to answer the Connect call once dialled. A
/// frozen coordinator (SIGSTOP, a hung host) accepts TCP connections in its
/// kernel but never answers: without this bound each dial to it would cost
/// the keep-alive timeout, and standbys still name it as leader until its
/// lease runs out.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the coordinator has to answer Register.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// A status in words: its message and code, then what caused it (a TLS
/// alert, a refused connection), which tonic keeps as the error's sources.
fn describe(status: &tonic::Status) -> String {
    let mut text = format!("{} ({:?})", status.message(), status.code());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Why a session ended (other than a requested shutdown).
#[derive(Debug, Error)]
pub enum SessionError {
    #[error("cannot reach the coordinator: {0}")]
    Connect(String),
    #[error("the coordinator refused the session: {}", describe(.0))]
    Refused(tonic::Status),
    #[error("the stream broke: {}", describe(.0))]
    Stream(tonic::Status),
    #[error("the coordinator closed the stream")]
    Closed,
    #[error("no Registered answer within {0:?}")]
    RegisterTimeout(Duration),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("reconnecting to pick up reloaded TLS files (SIGHUP)")]
    Reload,
    #[error("the coordinator leads at epoch {epoch}, but a newer leader (epoch {seen}) was seen: it was deposed")]
    StaleLeader { epoch: u64, seen: u64 },
}

impl SessionError {
    /// A coordinator answered, but cannot take the session now (a standby,
    /// an election, or its database is away): ask again soon rather than
    /// backing off as from a coordinator that is gone.
    pub fn coordinator_busy(&self) -> bool {
        matches!(self, SessionError::Refused(status) if status.code() == tonic::Code::Unavailable)
    }
}

/// A session end: whether Register was answered, and why it ended.
pub(super) type Broken = (bool, SessionError);

/// Runs one session; `Ok` when shutdown was requested.
pub(super) async fn run(
    agent: &mut Agent,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), Broken> {
    let url = agent.targets.pick();
    let channel = tokio::select! {
        channel = dial(&url, &agent.config.tls) => match channel {
            Ok(channel) => channel,
            Err(e) => {
                agent.targets.failed(&url);
                return Err((false, SessionError::Connect(e)));
            }
        },
        _ = stopped(shutdown) => return Ok(()),
    };
    let mut client = AgentServiceClient::new(channel.clone());
    let (tx, rx) = mpsc::channel(OUTBOUND_CAPACITY);
    tx.send(message(Out::Register(register(agent))))
        .await
        .map_err(|_| (false, SessionError::Closed))?;
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, client.connect(ReceiverStream::new(rx)));
    let response = tokio::select! {
        response = answer => match response {
            Err(_) => {
                agent.targets.failed(&url);
                return Err((false, SessionError::Connect(format!("{url} did not answer within {ANSWER_TIMEOUT:?}"))));
            }
            Ok(Ok(response)) => response,
            Ok(Err(status)) => {
                // A standby: dial the leader it names next.
                if let Some(leader) = cohort_proto::error::leader_of(&status) {
                    tracing::info!(standby = %url, leader = %leader, "following the coordinator to its leader");
                    agent.targets.follow(leader);
                }
                return Err((false, SessionError::Refused(status)));
            }
        },
        _ = stopped(shutdown) => return Ok(()),
    };
    let mut inbound = response.into_inner();
    let registered = tokio::select! {
        first = tokio::time::timeout(REGISTER_TIMEOUT, inbound.message()) => registered(first).map_err(|e| (false, e))?,
        _ = stopped(shutdown) => return Ok(()),
    };
    if let Err(seen) = agent.targets.accept_epoch(registered.leader_epoch) {
        return Err((
            false,
            SessionError::StaleLeader {
                epoch: registered.leader_epoch,
                seen,
            },
        ));
    }
    if let Some(members) = &registered.members {
        agent.learn_members(&members.coordinators).await;
    }
    let heartbeat_every = convert::positive_duration(registered.heartbeat_interval.as_ref())
        .unwrap_or(agent.config.interval);
    let telemetry_every = convert::positive_duration(registered.telemetry_interval.as_ref())
        .unwrap_or(agent.config.interval);
    tracing::info!(
        agent_id = %registered.agent_id,
        coordinator = %url,
        leader_epoch = registered.leader_epoch,
        heartbeat_ms = heartbeat_every.as_millis() as u64,
        telemetry_ms = telemetry_every.as_millis() as u64,
        pending_events = agent.outbox.len(),
        "registered with the coordinator"
    );
    agent.peer = Some(crate::program::peer::PeerLink {
        channel,
        agent_id: registered.agent_id.clone(),
    });
    let cadence = Cadence {
        heartbeat: heartbeat_every,
        telemetry: telemetry_every,
        epoch: registered.leader_epoch,
    };
    let served = serve(agent, &tx, &mut inbound, shutdown, cadence).await;
    if let Err(SessionError::Stream(_)) = &served {
        // The connection broke (a dead or frozen coordinator): dial the
        // others first.
        agent.targets.failed(&url);
    }
    served.map_err(|e| (true, e))
}

/// Opens the channel (TLS for `https://`, with the files read now).
/// HTTP/2 keep-alives notice a coordinator that vanished without closing
/// the connection (a dead host, a partition).
async fn dial(
    url: &str,
    tls: &crate::config::ClientTls,
) -> Result<tonic::transport::Channel, String> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| chain(&e))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(tls_config(tls).await?)
            .map_err(|e| chain(&e))?;
    }
    endpoint.connect().await.map_err(|e| chain(&e))
}

/// The client TLS config from the agent's files, read afresh.
async fn tls_config(
    tls: &crate::config::ClientTls,
) -> Result<tonic::transport::ClientTlsConfig, String> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let read = |path: std::path::PathBuf| async move {
        tokio::fs::read(&path)
            .await
            .map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new();
    match &tls.ca {
        Some(ca) => config = config.ca_certificate(Certificate::from_pem(read(ca.clone()).await?)),
        None => {
            return Err("an https:// coordinator needs --tls-ca (the CA of its certificate)".into())
        }
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        let identity = Identity::from_pem(read(cert.clone()).await?, read(key.clone()).await?);
        config = config.identity(identity);
    }
    Ok(config)
}

/// What a registered session keeps to: its intervals and its leader's epoch.
struct Cadence {
    heartbeat: Duration,
    telemetry: Duration,
    epoch: u64,
}

/// The registered session's loop.
async fn serve(
    agent: &mut Agent,
    tx: &mpsc::Sender<v1::AgentMessage>,
    inbound: &mut Streaming<v1::CoordinatorMessage>,
    shutdown: &mut watch::Receiver<bool>,
    cadence: Cadence,
) -> Result<(), SessionError> {
    let (heartbeat_every, telemetry_every) = (cadence.heartbeat, cadence.telemetry);
    flush_outbox(agent, tx).await?;
    let mut heartbeat = tokio::time::interval(heartbeat_every);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut telemetry_tick = tokio::time::interval(telemetry_every);
    telemetry_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopped(shutdown) => return Ok(()),
            _ = agent.reload.notified() => return Err(SessionError::Reload),
            _ = heartbeat.tick() => {
                let beat = v1::Heartbeat { time: Some(convert::timestamp(SystemTime::now())) };
                send(tx, Out::Heartbeat(beat)).await?;
            }
            _ = telemetry_tick.tick() => send_telemetry(agent, tx).await?,
            Some(event) = agent.events.recv() => {
                let event = agent.observe(event);
                if tx.send(message(Out::RankEvent(event.clone()))).await.is_err() {
                    agent.outbox.push(event);
                    return Err(SessionError::Closed);
                }
                agent.outbox.sent(event);
            }
            received = inbound.message() => match received {
                // A message of an older leader than this session's: refused,
                // and the session with it ends. (0: a coordinator that leads
                // alone, or one from before messages carried the epoch.)
                Ok(Some(m)) if m.leader_epoch != 0 && m.leader_epoch < cadence.epoch => {
                    return Err(SessionError::StaleLeader { epoch: m.leader_epoch, seen: cadence.epoch });
                }
                Ok(Some(v1::CoordinatorMessage { message: Some(In::ReadFile(req)), .. })) => {
                    // File I/O off the loop; the answer goes out when ready.
                    let (tx, work_dir) = (tx.clone(), agent.config.work_dir.clone());
                    tokio::spawn(async move {
                        if let Ok(chunk) =
                            tokio::task::spawn_blocking(move || files::read(&work_dir, &req)).await
                        {
                            let _ = tx.send(message(Out::FileChunk(chunk))).await;
                        }
                    });
                }
                Ok(Some(v1::CoordinatorMessage { message: Some(In::RunDoctor(req)), .. })) => {
                    let setup = agent.config.doctor.clone();
                    doctor::answer(req.request_id, setup, agent.busy_gpus(), agent.doctor_running.clone(), tx.clone());
                }
                Ok(Some(v1::CoordinatorMessage { message: Some(In::Ack(ack)), .. })) => {
                    agent.outbox.ack(ack.through);
                }
                Ok(Some(v1::CoordinatorMessage { message: Some(In::Members(members)), .. })) => {
                    agent.learn_members(&members.coordinators).await;
                }
                Ok(Some(command)) => {
                    for event in commands::handle(agent, command).await {
                        let event = agent.outbox.number(event);
                        if tx.send(message(Out::RankEvent(event.clone()))).await.is_err() {
                            agent.outbox.push(event);
                            return Err(SessionError::Closed);
                        }
                        agent.outbox.sent(event);
                    }
                }
                Ok(None) => return Err(SessionError::Closed),
                Err(status) => return Err(SessionError::Stream(status)),
            },
        }
    }
}

/// Telemetry is best effort: a sample that does not fit the queue is dropped,
/// never waited for.
async fn send_telemetry(
    agent: &Agent,
    tx: &mpsc::Sender<v1::AgentMessage>,
) -> Result<(), SessionError> {
    let samples = match telemetry::sample(&agent.probe).await {
        Ok(samples) => samples,
        Err(e) => {
            tracing::warn!(error = %e, "gpu sample failed");
            return Ok(());
        }
    };
    // Converting names each GPU process from /proc: off the session's loop.
    let Ok(samples) =
        tokio::task::spawn_blocking(move || samples.iter().map(convert::gpu_sample).collect())
            .await
    else {
        return Ok(());
    };
    let batch = v1::TelemetrySamples { samples };
    match tx.try_send(message(Out::Telemetry(batch))) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::debug!("telemetry sample dropped: stream backed up");
            Ok(())
        }
        Err(mpsc::error::TrySendError::Closed(_)) => Err(SessionError::Closed),
    }
}

async fn flush_outbox(
    agent: &mut Agent,
    tx: &mpsc::Sender<v1::AgentMessage>,
) -> Result<(), SessionError> {
    let pending = agent.outbox.take();
    let mut pending = pending.into_iter();
    while let Some(event) = pending.next() {
        if tx
            .send(message(Out::RankEvent(event.clone())))
            .await
            .is_err()
        {
            let mut rest = vec![event];
            rest.extend(pending);
            agent.outbox.restore(rest);
            return Err(SessionError::Closed);
        }
        agent.outbox.sent(event);
    }
    Ok(())
}

fn registered(
    first: Result<
        Result<Option<v1::CoordinatorMessage>, tonic::Status>,
        tokio::time::error::Elapsed,
    >,
) -> Result<v1::Registered, SessionError> {
    match first {
        Err(_) => Err(SessionError::RegisterTimeout(REGISTER_TIMEOUT)),
        Ok(Err(status)) => Err(SessionError::Refused(status)),
        Ok(Ok(None)) => Err(SessionError::Closed),
        Ok(Ok(Some(v1::CoordinatorMessage {
            message: Some(In::Registered(registered)),
            ..
        }))) => Ok(registered),
        Ok(Ok(Some(other))) => Err(SessionError::Protocol(format!(
            "expected Registered first, got {:?}",
            other.message
        ))),
    }
}

fn register(agent: &Agent) -> v1::Register {
    v1::Register {
        host_name: agent.config.host_name.clone(),
        agent_name: agent.config.agent_name.clone(),
        gpus: agent.gpus.iter().map(convert::gpu_info).collect(),
        address: agent.config.address.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        program_roots: agent.config.program_roots.to_strings(),
        team_program_roots: agent
            .config
            .program_roots
            .team_strings()
            .into_iter()
            .map(|(team, root)| v1::TeamProgramRoot { team, root })
            .collect(),
        running_ranks: agent
            .supervisor
            .running_pids()
            .into_iter()
            .map(|(key, pid)| v1::RunningRank {
                training_id: key.job_id,
                attempt: key.attempt as i32,
                rank: key.rank as i32,
                pid,
            })
            .collect(),
    }
}

async fn send(tx: &mpsc::Sender<v1::AgentMessage>, out: Out) -> Result<(), SessionError> {
    tx.send(message(out))
        .await
        .map_err(|_| SessionError::Closed)
}

fn message(out: Out) -> v1::AgentMessage {
    v1::AgentMessage { message: Some(out) }
}

/// An error with its sources, `a: b: c` (tonic's transport error alone says little).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        // Some errors repeat their source in their own message.
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}
