//! Isolate workers in child processes, supervised by the daemon.
//!
//! QuickJS polls its interrupt handler in the bytecode loop, not inside every native loop: a
//! builtin walking an array-like of length 2^53 never comes back, and a thread cannot be
//! stopped safely from outside. So each worker runs in a child process (`mcpbootd
//! isolate-worker`, this same program) with one isolate worker thread (`pool.rs`); the
//! daemon keeps admission (`admission.rs`), places each admitted call on the process with
//! the fewest calls, and runs the call's fetches itself: the child has no network access of
//! its own, no credentials and a clean environment.
//!
//! Inside the child, the pool's watchdog notices a call still in a turn past its wall deadline
//! plus `OVERRUN_GRACE` (1 s), reports it ([`ToDaemon::Overran`]) and exits. The daemon answers
//! that call as a timeout, the other calls on that process with an error saying why, counts
//! the restart and starts a new process at once. A child that stops sending heartbeats (or
//! sends garbage, or exits) is killed and replaced the same way, so no JavaScript input holds
//! a worker longer than its wall limit plus the grace and a restart (tens of milliseconds).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::admission::{Admission, AdmissionLimits, Refused};
use super::ipc::{Reader, ToDaemon, ToWorker, WireLimits, Writer};
use super::pool::{PoolError, PoolStats};
use super::{Completion, FetchHost, Invocation, IsolateMemory, Outcome, Program};

/// A child that sends nothing (not even a heartbeat) for this long is wedged and is killed.
const SILENCE_LIMIT: Duration = Duration::from_secs(5);
/// How long a call waits for a worker process while all of them are restarting.
const PLACEMENT_WAIT: Duration = Duration::from_secs(5);
/// A child that exits this soon after starting, for no overrun, is failing to start: the next
/// attempt waits, doubling up to [`MAX_BACKOFF`].
const HEALTHY_AFTER: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How the process pool is sized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSettings {
    /// The program run as `<executable> isolate-worker` (normally this one).
    pub executable: PathBuf,
    /// Worker processes, each with one isolate worker thread.
    pub processes: usize,
    pub admission: AdmissionLimits,
    /// Daemon-wide isolate memory, which admission holds calls to (as the processes report it).
    pub memory_budget_bytes: usize,
    /// What each process's allocators may take.
    pub process_budget_bytes: usize,
}

/// Runs invocations in supervised worker processes; see the module doc.
pub struct ProcessPool {
    admission: Arc<Admission>,
    memory: Arc<IsolateMemory>,
    shared: Arc<Shared>,
    supervisors: Vec<tokio::task::JoinHandle<()>>,
}

/// What the supervisors share with the pool.
struct Shared {
    slots: Vec<Slot>,
    /// Signalled whenever a process becomes ready.
    ready: Notify,
    closed: AtomicBool,
    next_call: AtomicU64,
    overruns: AtomicU64,
    restarts: AtomicU64,
    memory: Arc<IsolateMemory>,
}

#[derive(Default)]
struct Slot {
    live: Mutex<Option<Arc<Process>>>,
}

impl Slot {
    fn get(&self) -> Option<Arc<Process>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set(&self, process: Option<Arc<Process>>) {
        *self.live.lock().unwrap_or_else(PoisonError::into_inner) = process;
    }
}

/// One running worker process, as the daemon sees it.
struct Process {
    pid: u32,
    outbox: mpsc::UnboundedSender<ToWorker>,
    calls: Mutex<HashMap<u64, PendingCall>>,
    memory_used: AtomicU64,
    busy: AtomicBool,
}

struct PendingCall {
    reply: oneshot::Sender<Completion>,
    fetch: Arc<dyn FetchHost>,
    /// The tasks running the call's fetches here (finished ones are pruned as new ones start).
    fetches: Vec<JoinHandle<()>>,
}

impl PendingCall {
    /// Stops the call's fetches and answers it once they have stopped, as a call in a thread
    /// does (`quickjs/call.rs`): when the answer is out, nothing the call started still runs.
    fn finish(self, completion: Completion) {
        let PendingCall { reply, fetches: mut running, .. } = self;
        running.retain(|task| !task.is_finished());
        if running.is_empty() {
            let _ = reply.send(completion);
            return;
        }
        for task in &running {
            task.abort();
        }
        tokio::spawn(async move {
            for task in running {
                let _ = task.await;
            }
            let _ = reply.send(completion);
        });
    }
}

impl Process {
    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<u64, PendingCall>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ProcessPool {
    /// Starts the worker processes (in the background: calls wait for the first to be ready).
    pub fn new(settings: ProcessSettings, runtime: &tokio::runtime::Handle) -> Self {
        let processes = settings.processes.max(1);
        let memory = IsolateMemory::new(settings.memory_budget_bytes);
        let shared = Arc::new(Shared {
            slots: (0..processes).map(|_| Slot::default()).collect(),
            ready: Notify::new(),
            closed: AtomicBool::new(false),
            next_call: AtomicU64::new(1),
            overruns: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            memory: Arc::clone(&memory),
        });
        let supervisors = (0..processes)
            .map(|index| {
                let launch = Launch {
                    executable: settings.executable.clone(),
                    memory_budget_bytes: settings.process_budget_bytes,
                };
                runtime.spawn(supervise(Arc::clone(&shared), index, launch))
            })
            .collect();
        ProcessPool { admission: Admission::new(settings.admission, Arc::clone(&memory)), memory, shared, supervisors }
    }

    /// Like [`super::IsolatePool::run`]: waits in the fair queue, fails with
    /// [`PoolError::Busy`] past it; dropping the future cancels the call in its process.
    pub async fn run(&self, tenant: &str, invocation: Invocation) -> Result<Completion, PoolError> {
        let permit = self.admission.acquire(tenant).await.map_err(|refused| match refused {
            Refused::Busy(busy) => PoolError::Busy(busy),
            Refused::Closed => PoolError::Closed,
        })?;
        let Some(process) = self.place().await else {
            return Ok(Completion::failed(
                Outcome::Error,
                "no isolate worker process is running (they are restarting); retry shortly",
            ));
        };
        let call = self.shared.next_call.fetch_add(1, Ordering::Relaxed);
        let (reply, completion) = oneshot::channel();
        process.calls().insert(call, PendingCall { reply, fetch: Arc::clone(&invocation.fetch), fetches: Vec::new() });
        let run = ToWorker::Run {
            call,
            tenant: tenant.to_string(),
            handler: invocation.handler.to_string(),
            arguments: invocation.arguments.to_string(),
            limits: WireLimits::from(&invocation.limits),
            script_tools: match &invocation.program {
                Program::Handler => None,
                Program::Script { tools } => Some(tools.to_string()),
            },
        };
        let cancel = CancelOnDrop { process: &process, call };
        if process.outbox.send(run).is_err() {
            // The process ended between placement and now; its supervisor fails its calls.
            process.calls().remove(&call);
        }
        let completion = completion.await.unwrap_or_else(|_| {
            Completion::failed(Outcome::Error, "the isolate worker process ended before the call finished; retry it")
        });
        // Answered: the call is no longer pending, so this cancels nothing.
        drop(cancel);
        drop(permit);
        Ok(completion)
    }

    /// The ready process with the fewest calls, waiting a little while all are restarting.
    async fn place(&self) -> Option<Arc<Process>> {
        let deadline = Instant::now() + PLACEMENT_WAIT;
        loop {
            let ready = self.shared.ready.notified();
            let least = self.shared.slots.iter().filter_map(Slot::get).min_by_key(|process| process.calls().len());
            if least.is_some() || self.shared.closed.load(Ordering::Relaxed) {
                return least;
            }
            if tokio::time::timeout_at(deadline.into(), ready).await.is_err() {
                return None;
            }
        }
    }

    pub fn stats(&self) -> PoolStats {
        let (in_flight, queued) = self.admission.counts();
        let live: Vec<_> = self.shared.slots.iter().filter_map(Slot::get).collect();
        PoolStats {
            workers: self.shared.slots.len(),
            // The flag comes with the last heartbeat; a process with no calls is idle now.
            busy: live.iter().filter(|p| p.busy.load(Ordering::Relaxed) && !p.calls().is_empty()).count(),
            in_flight,
            queued,
            memory_bytes: self.memory.used(),
            memory_budget_bytes: self.memory.limit(),
            overruns: self.shared.overruns.load(Ordering::Relaxed),
            restarts: self.shared.restarts.load(Ordering::Relaxed),
        }
    }

    pub fn admission_limits(&self) -> &AdmissionLimits {
        self.admission.limits()
    }

    /// Pids of the running worker processes (for tests and diagnostics).
    pub fn pids(&self) -> Vec<u32> {
        self.shared.slots.iter().filter_map(Slot::get).map(|process| process.pid).collect()
    }

    /// Stops accepting invocations and fails queued ones; running calls finish, then the
    /// processes exit (their input closes when the last call's process handle goes).
    pub fn close(&self) {
        self.admission.close();
        self.shared.closed.store(true, Ordering::Relaxed);
        self.shared.ready.notify_waiters();
    }
}

impl Drop for ProcessPool {
    fn drop(&mut self) {
        self.close();
        for supervisor in &self.supervisors {
            supervisor.abort();
        }
    }
}

/// Cancels a call in its process when the caller's future is dropped before the answer.
struct CancelOnDrop<'a> {
    process: &'a Process,
    call: u64,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let pending = self.process.calls().remove(&self.call);
        if let Some(pending) = pending {
            for fetch in &pending.fetches {
                fetch.abort();
            }
            let _ = self.process.outbox.send(ToWorker::Cancel { call: self.call });
        }
    }
}

struct Launch {
    executable: PathBuf,
    memory_budget_bytes: usize,
}

impl Launch {
    fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        tokio::process::Command::new(&self.executable)
            .arg("isolate-worker")
            .arg("--memory-budget-bytes")
            .arg(self.memory_budget_bytes.to_string())
            // Handlers cannot read the environment, and the process needs none of it: keep
            // the daemon's secrets (admin token, LLM keys) out of it all the same.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
    }
}

/// Keeps slot `index` filled with a running worker process until the pool closes.
async fn supervise(shared: Arc<Shared>, index: usize, launch: Launch) {
    let mut backoff = Duration::from_millis(100);
    while !shared.closed.load(Ordering::Relaxed) {
        let started = Instant::now();
        let ended = match launch.spawn() {
            Ok(child) => run_process(&shared, index, child).await,
            Err(error) => {
                tracing::error!(%error, executable = %launch.executable.display(), "cannot start an isolate worker process");
                Ended::Failed
            }
        };
        shared.slots[index].set(None);
        if shared.closed.load(Ordering::Relaxed) {
            return;
        }
        shared.restarts.fetch_add(1, Ordering::Relaxed);
        if matches!(ended, Ended::Overran) || started.elapsed() >= HEALTHY_AFTER {
            backoff = Duration::from_millis(100);
        } else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

enum Ended {
    Overran,
    Failed,
}

/// Serves one child until it ends; then fails the calls it still had.
async fn run_process(shared: &Arc<Shared>, index: usize, mut child: tokio::process::Child) -> Ended {
    let pid = child.id().unwrap_or_default();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Ended::Failed;
    };
    let (outbox, mut outgoing) = mpsc::unbounded_channel::<ToWorker>();
    let process = Arc::new(Process {
        pid,
        outbox,
        calls: Mutex::new(HashMap::new()),
        memory_used: AtomicU64::new(0),
        busy: AtomicBool::new(false),
    });
    let writer = tokio::spawn(async move {
        let mut writer = Writer::new(stdin);
        while let Some(message) = outgoing.recv().await {
            if writer.send(&message).await.is_err() {
                return;
            }
        }
    });
    shared.slots[index].set(Some(Arc::clone(&process)));
    shared.ready.notify_waiters();

    let mut reader = Reader::<_, ToDaemon>::new(stdout);
    let mut overran = None;
    let why = loop {
        let message = match tokio::time::timeout(SILENCE_LIMIT, reader.next()).await {
            Err(_) => break format!("sent nothing for {} s", SILENCE_LIMIT.as_secs()),
            Ok(None) => break "exited".to_string(),
            Ok(Some(Err(error))) => break format!("sent an unreadable message ({error})"),
            Ok(Some(Ok(message))) => message,
        };
        match message {
            ToDaemon::Heartbeat { memory_used, busy } => {
                process.memory_used.store(memory_used, Ordering::Relaxed);
                process.busy.store(busy, Ordering::Relaxed);
                let used = shared.slots.iter().filter_map(Slot::get).map(|p| p.memory_used.load(Ordering::Relaxed));
                shared.memory.record_used(usize::try_from(used.sum::<u64>()).unwrap_or(usize::MAX));
            }
            ToDaemon::Done { call, completion } => {
                let pending = process.calls().remove(&call);
                if let Some(pending) = pending {
                    pending.finish(completion.into());
                }
            }
            ToDaemon::Fetch { call, fetch, request, remaining } => {
                start_fetch(&process, call, fetch, request, remaining)
            }
            ToDaemon::Overran { call } => {
                // No new call may land here; the process exits by itself right after this.
                shared.slots[index].set(None);
                overran = Some(call);
            }
        }
    };
    shared.slots[index].set(None);
    let _ = child.start_kill();
    let status = child.wait().await.ok();
    writer.abort();

    let orphans: Vec<_> = process.calls().drain().collect();
    let collateral = orphans.len() - usize::from(overran.is_some_and(|call| orphans.iter().any(|(id, _)| *id == call)));
    for (call, pending) in orphans {
        let completion = if Some(call) == overran {
            Completion::failed(
                Outcome::Timeout,
                "the handler kept running past its wall limit (timeout_ms) inside a built-in operation that \
                 cannot be interrupted (e.g. an array method on an object with a huge length); its isolate \
                 was stopped",
            )
        } else {
            Completion::failed(
                Outcome::Error,
                "the isolate worker process running this call was restarted because another call on it \
                 overran its limits; the call did not finish (requests it made may have been sent): retry it",
            )
        };
        pending.finish(completion);
    }
    if let Some(call) = overran {
        shared.overruns.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            worker_pid = pid,
            call,
            collateral_calls = collateral,
            "a call overran its wall limit inside an uninterruptible operation: its worker process was \
             stopped and is being replaced"
        );
        Ended::Overran
    } else {
        if !shared.closed.load(Ordering::Relaxed) {
            tracing::error!(
                worker_pid = pid,
                status = ?status,
                failed_calls = collateral,
                "an isolate worker process {why}; it was stopped and is being replaced"
            );
        }
        Ended::Failed
    }
}

/// Runs a fetch the child asked for, with the call's own egress host, and answers it.
fn start_fetch(process: &Arc<Process>, call: u64, fetch: u64, request: super::ipc::WireRequest, remaining: Duration) {
    let mut calls = process.calls();
    let Some(pending) = calls.get_mut(&call) else { return };
    let host = Arc::clone(&pending.fetch);
    let outbox = process.outbox.clone();
    let task = tokio::spawn(async move {
        let result = host.fetch(request.into(), Instant::now() + remaining).await;
        let result = result.map(Into::into).map_err(Into::into);
        let _ = outbox.send(ToWorker::Fetched { call, fetch, result });
    });
    pending.fetches.retain(|handle| !handle.is_finished());
    pending.fetches.push(task);
}
