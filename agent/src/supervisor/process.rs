//! One rank process: spawn it in its own group, read its output, reap it and
//! report how it ended.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cohort_spec::exit::classify;
use cohort_spec::progress::ProgressLine;
use cohort_spec::ExitClass;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch, Mutex};
use tokio::task::JoinHandle;

use super::log::RankLog;
use super::signal::kill_group;
use super::{
    RankEvent, RankEventKind, RankExit, RankKey, RankSpec, SupervisorError, STDERR_TAIL_LINES,
};
use crate::program::checkpoints::Watcher;
use crate::program::sandbox::Confinement;

/// How often a program's checkpoint directory is looked at.
const CHECKPOINT_POLL: Duration = Duration::from_secs(1);

/// How long to wait for the output readers after the process is gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The supervisor's view of a running (or finished) rank process.
#[derive(Debug, Clone)]
pub(crate) struct RankHandle {
    pid: u32,
    stop_requested: Arc<AtomicBool>,
    /// Set once a preemption notice was given.
    noticed: Arc<AtomicBool>,
    /// How a notice reaches the rank.
    notice: Option<Arc<super::NoticeSpec>>,
    exited: watch::Receiver<bool>,
}

impl RankHandle {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// True once the process is reaped and its group was killed.
    pub(crate) fn has_exited(&self) -> bool {
        *self.exited.borrow()
    }

    pub(crate) fn mark_stop_requested(&self) {
        self.stop_requested.store(true, Ordering::SeqCst);
    }

    /// Marks the rank noticed; false when it had been already.
    pub(crate) fn mark_noticed(&self) -> bool {
        !self.noticed.swap(true, Ordering::SeqCst)
    }

    pub(crate) fn notice_spec(&self) -> Option<&super::NoticeSpec> {
        self.notice.as_deref()
    }

    /// Waits up to `timeout` for the process to be reaped.
    pub(crate) async fn wait_exited(&self, timeout: Duration) -> bool {
        let mut rx = self.exited.clone();
        matches!(
            tokio::time::timeout(timeout, rx.wait_for(|exited| *exited)).await,
            Ok(Ok(_))
        ) || self.has_exited()
    }
}

/// Starts the process (forked on the [`spawner`](super::spawner) thread,
/// so it dies with the agent) and its monitor task.
pub(crate) async fn spawn(
    spec: RankSpec,
    events: mpsc::Sender<RankEvent>,
) -> Result<RankHandle, SupervisorError> {
    if !spec.program.is_file() {
        return Err(SupervisorError::ProgramNotFound(spec.program.clone()));
    }
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .env_clear()
        .envs(spec.base_env.iter().cloned())
        .envs(spec.env())
        .current_dir(&spec.working_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let cgroup = match spec.memory_limit {
        Some(limit) => {
            let name = format!("{}.{}.{}", spec.key.job_id, spec.key.attempt, spec.key.rank);
            match super::cgroup::memory().rank(&name, limit).await {
                Ok(cgroup) => cgroup,
                Err(e) => {
                    tracing::warn!(rank = %spec.key, error = %e, "cannot set up the rank's memory cgroup: it runs unbounded");
                    None
                }
            }
        }
        None => None,
    };
    if let Some(cgroup) = &cgroup {
        cgroup
            .join_on_spawn(&mut command)
            .map_err(|e| SupervisorError::Sandbox(e.to_string()))?;
    }
    if spec
        .notice
        .as_ref()
        .is_some_and(|n| n.signal == nix::sys::signal::Signal::SIGUSR1)
    {
        ignore_notice_until_heard(&mut command);
    }
    if let Some(rules) = spec.sandbox.clone() {
        let built = tokio::task::spawn_blocking(move || Confinement::build(&rules))
            .await
            .map_err(|e| SupervisorError::Sandbox(e.to_string()))?;
        built.map_err(SupervisorError::Sandbox)?.apply(&mut command);
    }
    let mut child =
        super::spawner::spawn(command)
            .await
            .map_err(|source| SupervisorError::Spawn {
                program: spec.program.clone(),
                source,
            })?;
    let pid = child
        .id()
        .expect("a just-spawned child that was not waited for has a pid");
    tracing::info!(
        rank = %spec.key,
        pid,
        gpu = spec.gpu_index,
        program = %spec.program.display(),
        "rank started"
    );

    let stop_requested = Arc::new(AtomicBool::new(false));
    let noticed = Arc::new(AtomicBool::new(false));
    let (exited_tx, exited_rx) = watch::channel(false);
    let monitor = Monitor {
        checkpoints: spec
            .checkpoints
            .map(|w| Arc::new(std::sync::Mutex::new(Watcher::new(w)))),
        log: Arc::new(Mutex::new(RankLog::open(spec.log_path.clone()).await)),
        key: spec.key,
        gpu_index: spec.gpu_index,
        cgroup,
        pid,
        events,
        stop_requested: stop_requested.clone(),
        noticed: noticed.clone(),
        exited: exited_tx,
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    tokio::spawn(monitor.run(child, stdout, stderr));
    Ok(RankHandle {
        pid,
        stop_requested,
        noticed,
        notice: spec.notice.map(Arc::new),
        exited: exited_rx,
    })
}

/// A rank's log, shared by its stdout and stderr readers.
type SharedLog = Arc<Mutex<RankLog>>;

struct Monitor {
    key: RankKey,
    /// A program's rank 0: its checkpoint directory, watched.
    checkpoints: Option<Arc<std::sync::Mutex<Watcher>>>,
    /// The rank's log, written by both readers.
    log: SharedLog,
    gpu_index: u32,
    /// The rank's memory cgroup, removed once it is gone.
    cgroup: Option<super::cgroup::RankCgroup>,
    pid: u32,
    events: mpsc::Sender<RankEvent>,
    stop_requested: Arc<AtomicBool>,
    noticed: Arc<AtomicBool>,
    exited: watch::Sender<bool>,
}

impl Monitor {
    async fn run(
        mut self,
        mut child: Child,
        stdout: Option<impl AsyncRead + Unpin + Send + 'static>,
        stderr: Option<impl AsyncRead + Unpin + Send + 'static>,
    ) {
        self.emit(RankEventKind::Started { pid: self.pid }).await;
        let stdout_task = stdout.map(|out| tokio::spawn(read_stdout(out, self.reader_context())));
        let stderr_task =
            stderr.map(|err| tokio::spawn(read_stderr(err, self.key.clone(), self.log.clone())));

        let status = match self.checkpoints.take() {
            None => child.wait().await,
            Some(watcher) => {
                let mut tick = tokio::time::interval(CHECKPOINT_POLL);
                let status = loop {
                    tokio::select! {
                        status = child.wait() => break status,
                        _ = tick.tick() => self.report_checkpoints(&watcher).await,
                    }
                };
                // A checkpoint published just before the end is reported
                // before the exit, so the next attempt can resume from it.
                self.report_checkpoints(&watcher).await;
                status
            }
        };
        // Whatever the rank forked dies with it: a rank's group never outlives it.
        kill_group(self.pid, Signal::SIGKILL);
        let _ = self.exited.send(true);

        if let Some(task) = stdout_task {
            drain(task).await;
        }
        let stderr_tail = match stderr_task {
            Some(task) => drain(task).await.map(Vec::from).unwrap_or_default(),
            None => Vec::new(),
        };
        self.log.lock().await.flush().await;
        let mut exit = self.exit_report(status, stderr_tail);
        if let Some(cgroup) = self.cgroup.take() {
            if exit.signal == Some(libc::SIGKILL)
                && !exit.stop_requested
                && cgroup.oom_killed().await
            {
                exit.code = Some(cohort_spec::ExitCode::OutOfMemory.code());
                exit.signal = None;
                exit.class = ExitClass::OutOfMemory;
                exit.stderr_tail.push(format!(
                    "cohort-agent: out of memory: the rank reached its host memory limit of {:.2} GiB (its cgroup) and the kernel killed it",
                    cgroup.limit_bytes as f64 / f64::from(1u32 << 30)
                ));
            }
            cgroup.remove().await;
        }
        tracing::info!(
            rank = %self.key,
            pid = self.pid,
            code = ?exit.code,
            signal = ?exit.signal,
            class = ?exit.class,
            "rank exited"
        );
        self.emit(RankEventKind::Exited(exit)).await;
    }

    /// Reports the checkpoints that appeared (and prunes), off the runtime.
    async fn report_checkpoints(&self, watcher: &Arc<std::sync::Mutex<Watcher>>) {
        let watcher = watcher.clone();
        let polled = tokio::task::spawn_blocking(move || {
            watcher
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .poll()
        })
        .await;
        let lines = match polled {
            Ok(lines) => lines,
            Err(e) => {
                tracing::warn!(rank = %self.key, error = %e, "a checkpoint look failed; the next one tries again");
                return;
            }
        };
        for line in lines {
            tracing::info!(rank = %self.key, line = %line.to_line(), "program checkpoint");
            self.emit(RankEventKind::Progress(line)).await;
        }
    }

    fn exit_report(
        &self,
        status: std::io::Result<ExitStatus>,
        stderr_tail: Vec<String>,
    ) -> RankExit {
        let stop_requested = self.stop_requested.load(Ordering::SeqCst);
        let noticed = self.noticed.load(Ordering::SeqCst);
        let (code, signal) = match status {
            Ok(s) => (s.code(), s.signal()),
            Err(e) => {
                tracing::error!(rank = %self.key, error = %e, "could not wait for rank");
                (None, None)
            }
        };
        let class = if noticed && code != Some(0) {
            ExitClass::Preempted
        } else if stop_requested && code != Some(0) {
            ExitClass::Stopped
        } else {
            classify(code)
        };
        RankExit {
            code,
            signal,
            class,
            stderr_tail,
            stop_requested,
            noticed,
        }
    }

    fn reader_context(&self) -> ReaderContext {
        ReaderContext {
            log: self.log.clone(),
            key: self.key.clone(),
            gpu_index: self.gpu_index,
            events: self.events.clone(),
        }
    }

    async fn emit(&self, kind: RankEventKind) {
        let event = RankEvent {
            key: self.key.clone(),
            gpu_index: self.gpu_index,
            kind,
        };
        if self.events.send(event).await.is_err() {
            tracing::debug!(rank = %self.key, "rank event dropped: nobody listens");
        }
    }
}

struct ReaderContext {
    log: SharedLog,
    key: RankKey,
    gpu_index: u32,
    events: mpsc::Sender<RankEvent>,
}

/// Waits for a reader; one that is still blocked (a pipe held open by a
/// process outside the group) is abandoned.
async fn drain<T>(task: JoinHandle<T>) -> Option<T> {
    let abort = task.abort_handle();
    match tokio::time::timeout(DRAIN_TIMEOUT, task).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(_)) => None,
        Err(_) => {
            abort.abort();
            None
        }
    }
}

/// Progress lines become events; everything else is logged.
async fn read_stdout(out: impl AsyncRead + Unpin, ctx: ReaderContext) {
    let mut lines = LineReader::new(out);
    while let Some(line) = lines.next().await {
        match ProgressLine::parse(&line) {
            Some(progress) => {
                let event = RankEvent {
                    key: ctx.key.clone(),
                    gpu_index: ctx.gpu_index,
                    kind: RankEventKind::Progress(progress),
                };
                if ctx.events.send(event).await.is_err() {
                    tracing::debug!(rank = %ctx.key, "progress dropped: nobody listens");
                }
            }
            None => {
                tracing::info!(rank = %ctx.key, stream = "stdout", "{line}");
                ctx.log.lock().await.line(&line).await;
            }
        }
    }
}

/// Logs stderr and returns its last lines.
async fn read_stderr(
    err: impl AsyncRead + Unpin,
    key: RankKey,
    log: SharedLog,
) -> VecDeque<String> {
    let mut tail = VecDeque::with_capacity(STDERR_TAIL_LINES);
    let mut lines = LineReader::new(err);
    while let Some(line) = lines.next().await {
        tracing::info!(rank = %key, stream = "stderr", "{line}");
        log.lock().await.line(&line).await;
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    tail
}

/// Lines of possibly non-UTF-8 output, without their line ending.
struct LineReader<R> {
    inner: BufReader<R>,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner: BufReader::new(inner),
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<String> {
        self.buf.clear();
        match self.inner.read_until(b'\n', &mut self.buf).await {
            Ok(0) => None,
            Ok(_) => {
                let text = String::from_utf8_lossy(&self.buf);
                Some(text.trim_end_matches(['\n', '\r']).to_string())
            }
            Err(e) => {
                tracing::debug!(error = %e, "rank output read failed");
                None
            }
        }
    }
}

/// Starts the rank with SIGUSR1 ignored (an ignored signal stays ignored
/// across exec) so a notice that comes while it is still loading libtorch,
/// before its handler is installed, does not end it: the rank reads its
/// notice file once its handler is in place, and the agent writes that
/// file before it signals, so no notice is lost either way.
fn ignore_notice_until_heard(command: &mut Command) {
    // SAFETY: signal() with SIG_IGN is async-signal-safe; nothing is
    // allocated or locked in the child.
    unsafe {
        command.pre_exec(|| {
            if libc::signal(libc::SIGUSR1, libc::SIG_IGN) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
