//! Faults a test injects into a running cluster: a rank SIGKILLed or frozen
//! with SIGSTOP, an agent SIGKILLed alone (its ranks must die with it) or
//! together with its ranks (the whole host going away).

use crate::procs::{marked_processes, rank_processes};
use crate::Cluster;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::HashMap;

/// A process's environment (empty when unreadable).
pub fn environ(pid: i32) -> HashMap<String, String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter_map(|var| {
            let var = String::from_utf8_lossy(var);
            let (k, v) = var.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The pid of rank `rank` of `attempt` of `training_id` in this cluster.
pub fn rank_pid(cluster: &Cluster, training_id: &str, attempt: i32, rank: i32) -> Option<i32> {
    rank_processes(&cluster.mark).into_iter().find(|&pid| {
        let env = environ(pid);
        env.get("COHORT_JOB_ID").map(String::as_str) == Some(training_id)
            && env.get("COHORT_ATTEMPT") == Some(&attempt.to_string())
            && env.get("RANK") == Some(&rank.to_string())
    })
}

/// The pid of the agent named `name` in this cluster.
pub fn agent_pid(cluster: &Cluster, name: &str) -> Option<i32> {
    marked_processes(&cluster.mark, "cohort-agent")
        .into_iter()
        .find(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            args.windows(2).any(|w| w[0] == "--name" && w[1] == name)
        })
}

/// Send `signal` to one process.
pub fn signal(pid: i32, signal: Signal) {
    kill(Pid::from_raw(pid), signal).unwrap_or_else(|e| panic!("kill -{signal} {pid}: {e}"));
}

/// The ranks agent `agent` started (its children among the cluster's ranks).
fn ranks_of_agent(cluster: &Cluster, agent: i32) -> Vec<i32> {
    rank_processes(&cluster.mark)
        .into_iter()
        .filter(|&pid| parent_of(pid) == Some(agent))
        .collect()
}

/// A process's parent pid, from /proc.
fn parent_of(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(str::to_string))
        .and_then(|rest| {
            rest.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<i32>().ok())
        })
}

/// Whether `pid` is gone (or a zombie waiting for its new parent to reap it).
pub fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// SIGKILLs the agent named `name` alone, as a crash or the OOM killer
/// would; returns the pids of the ranks it had started. Those must die on
/// their own (the agent's parent-death signal).
pub fn kill_agent(cluster: &Cluster, name: &str) -> Vec<i32> {
    let agent = agent_pid(cluster, name).unwrap_or_else(|| panic!("no agent {name} runs"));
    let ranks = ranks_of_agent(cluster, agent);
    signal(agent, Signal::SIGKILL);
    ranks
}

/// SIGKILL an agent and every rank it started (the whole host going away).
pub fn kill_agent_and_ranks(cluster: &Cluster, name: &str) {
    let agent = agent_pid(cluster, name).unwrap_or_else(|| panic!("no agent {name} runs"));
    let ranks = ranks_of_agent(cluster, agent);
    signal(agent, Signal::SIGKILL);
    for pid in ranks {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}
