//! The isolate worker process (`mcpbootd isolate-worker`): one isolate worker thread
//! (`pool.rs`) driving the calls the daemon sends on stdin, answering on stdout. Fetches go
//! back to the daemon, which applies the egress policy; this process makes no connections.
//!
//! It ends when its input closes (the daemon closed the pool, or is gone), and by itself, with
//! [`EXIT_OVERRUN`], right after reporting a call that overran its wall limit inside an
//! operation that cannot be interrupted: its worker thread cannot be freed any other way.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use super::admission::AdmissionLimits;
use super::ipc::{Reader, ToDaemon, ToWorker, WireFetchError, WireResponse, Writer};
use super::pool::{IsolatePool, PoolSettings};
use super::{Completion, FetchError, FetchHost, FetchRequest, FetchResponse, Invocation, Outcome, Program};

/// The exit status after an overrun, so the daemon's log tells it from a crash.
pub const EXIT_OVERRUN: u8 = 70;
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(250);

/// Runs the worker process until its input closes.
pub fn main(memory_budget_bytes: usize) -> ExitCode {
    harden();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcpbootd isolate-worker: cannot start its runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(memory_budget_bytes));
    ExitCode::SUCCESS
}

/// Limits that cost nothing here: no core dumps (they would hold handlers' data), and no way
/// to gain privileges through an exec.
fn harden() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on values we own.
    unsafe {
        let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
}

type Outbox = mpsc::UnboundedSender<ToDaemon>;
type PendingFetches = Arc<Mutex<HashMap<(u64, u64), oneshot::Sender<Result<FetchResponse, FetchError>>>>>;

async fn serve(memory_budget_bytes: usize) {
    let settings = PoolSettings {
        workers: 1,
        // The daemon admits calls; everything it sends runs.
        admission: AdmissionLimits::unlimited(),
        memory_budget_bytes,
    };
    let pool = Arc::new(IsolatePool::new(settings, tokio::runtime::Handle::current()));
    let (outbox, mut outgoing) = mpsc::unbounded_channel::<ToDaemon>();

    // The writer also ends the process after an overrun report is out.
    tokio::spawn(async move {
        let mut writer = Writer::new(tokio::io::stdout());
        while let Some(message) = outgoing.recv().await {
            let overran = matches!(message, ToDaemon::Overran { .. });
            if writer.send(&message).await.is_err() {
                // The daemon is gone.
                std::process::exit(0);
            }
            if overran {
                std::process::exit(i32::from(EXIT_OVERRUN));
            }
        }
    });
    pool.on_overrun({
        let outbox = outbox.clone();
        move |overrun| {
            let _ = outbox.send(ToDaemon::Overran { call: overrun.tag });
            // Should the writer not get to it, the daemon still sees this process end.
            std::thread::sleep(Duration::from_secs(1));
            std::process::exit(i32::from(EXIT_OVERRUN));
        }
    });
    tokio::spawn({
        let (pool, outbox) = (Arc::clone(&pool), outbox.clone());
        async move {
            let mut interval = tokio::time::interval(HEARTBEAT_INTERVAL);
            loop {
                interval.tick().await;
                let stats = pool.stats();
                let beat = ToDaemon::Heartbeat { memory_used: stats.memory_bytes as u64, busy: stats.busy > 0 };
                if outbox.send(beat).is_err() {
                    return;
                }
            }
        }
    });

    let fetches: PendingFetches = Arc::default();
    let calls: Arc<Mutex<HashMap<u64, AbortHandle>>> = Arc::default();
    let mut reader = Reader::<_, ToWorker>::new(tokio::io::stdin());
    while let Some(Ok(message)) = reader.next().await {
        match message {
            ToWorker::Run { call, tenant, handler, arguments, limits, script_tools } => {
                let invocation = Invocation {
                    handler: handler.into(),
                    arguments: serde_json::from_str(&arguments).unwrap_or(serde_json::Value::Null),
                    limits: limits.into(),
                    fetch: Arc::new(ProxyFetch {
                        call,
                        next: AtomicU64::new(0),
                        outbox: outbox.clone(),
                        pending: Arc::clone(&fetches),
                    }),
                    program: match script_tools {
                        None => Program::Handler,
                        Some(tools) => Program::Script { tools: tools.into() },
                    },
                };
                let (pool, outbox, running) = (Arc::clone(&pool), outbox.clone(), Arc::clone(&calls));
                let mut registry = calls.lock().unwrap_or_else(PoisonError::into_inner);
                let task = tokio::spawn(async move {
                    let completion = pool
                        .run_tagged(&tenant, call, invocation)
                        .await
                        .unwrap_or_else(|error| Completion::failed(Outcome::Error, error.to_string()));
                    running.lock().unwrap_or_else(PoisonError::into_inner).remove(&call);
                    let _ = outbox.send(ToDaemon::Done { call, completion: (&completion).into() });
                });
                if !task.is_finished() {
                    registry.insert(call, task.abort_handle());
                }
            }
            ToWorker::Cancel { call } => {
                if let Some(task) = calls.lock().unwrap_or_else(PoisonError::into_inner).remove(&call) {
                    task.abort();
                }
            }
            ToWorker::Fetched { call, fetch, result } => {
                let waiting = fetches.lock().unwrap_or_else(PoisonError::into_inner).remove(&(call, fetch));
                if let Some(waiting) = waiting {
                    let _ = waiting.send(result.map(WireResponse::into).map_err(WireFetchError::into));
                }
            }
        }
    }
    // The daemon closed our input: nothing more will be asked or read.
    std::process::exit(0);
}

/// A call's `fetch`, run by the daemon.
struct ProxyFetch {
    call: u64,
    next: AtomicU64,
    outbox: Outbox,
    pending: PendingFetches,
}

impl FetchHost for ProxyFetch {
    fn fetch(&self, request: FetchRequest, deadline: Instant) -> BoxFuture<'static, Result<FetchResponse, FetchError>> {
        let (call, fetch) = (self.call, self.next.fetch_add(1, Ordering::Relaxed));
        let (answer, answered) = oneshot::channel();
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).insert((call, fetch), answer);
        let remaining = deadline.saturating_duration_since(Instant::now());
        let sent = self.outbox.send(ToDaemon::Fetch { call, fetch, request: request.into(), remaining });
        let forget = Forget { pending: Arc::clone(&self.pending), key: (call, fetch) };
        Box::pin(async move {
            let _forget = forget;
            if sent.is_err() {
                return Err(FetchError::Network("the daemon is gone".into()));
            }
            answered.await.unwrap_or_else(|_| Err(FetchError::Network("the daemon dropped the request".into())))
        })
    }
}

/// Drops a fetch's pending entry when the isolate stops waiting for it.
struct Forget {
    pending: PendingFetches,
    key: (u64, u64),
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.key);
    }
}
